"""Hardt & Ma, "Identity Matters in Deep Learning" (ICLR 2017, arXiv:1611.04231), in
TensorFlow 2 / Keras 3.

Subpackages, lowest first (:data:`LAYERS`): a module imports from its own layer or the ones
before it, never from a later one (tests/test_layers.py walks every import to check it):

  configs   plain declarations: the flags' choices, the named architectures, the named
            experiments, the one-line errors and exit codes, the runtime's config dataclass, and
            the flags made from them. No Keras, TensorFlow or JAX.
  host      the facts of the machine a run computes on: its CPU, its cluster, the signals that
            stop it, its peers, its storage.
  plotting  the matplotlib set-up of every plot (a module).
  progress  a long job's recent rate, time left and finish on the local clock (a module).
  models    the CIFAR network (Table 1) and the ImageNet ResNet-34, their block variants.
  datasets  CIFAR and ImageNet read from files, the training stream, the tf.data pipelines.
  theory    Sections 2 and 3 of the paper, computed and checked.
  trainers  the training loop (``TrainLoop``), the recipe, the TensorFlow, JAX and PyTorch
            trainers, the run's health, its answers, the run log.
  backends  one object per Keras backend (``backends.registry.current()``): the runtime
            started, the trainer and the data sources built, the flags it cannot take refused.
  runs      whole runs and the command-line surface: the run config and its flags, one run
            setup, exit codes, one run per folder, studies (the paper's claims among them), a
            finished run evaluated again and its figures.

``launch/`` (the entry points), ``bench/`` (the benchmarks) and ``ops/`` (what runs the
project rather than the paper: the GPU lease, the CI harnesses) stand above them all. Every entry
point calls ``host.cpu.default_onednn()`` first, before anything loads TensorFlow.
"""

LAYERS = (
    "configs",
    "host",
    "plotting",
    "progress",
    "models",
    "datasets",
    "theory",
    "trainers",
    "backends",
    "runs",
)
