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
  study_plots  the plots of a comparison of arms: curves, health, final errors.
  runs      one run: its config and flags, its set-up, its command line, its record, its lock.
  trained   a trained run and its model: the folder it keeps, evaluated again, the ``.keras``
            file, how near the identity each block is.
  studies   many runs: studies (the paper's claims among them), Table 2's plan and report, the
            loop that trains them, the thinned record, the 2016 evaluation.

``launch/`` (the entry points), ``bench/`` (the benchmarks) and ``ops/`` (what runs the
project rather than the paper: the GPU lease, the CI harnesses) stand above them all, and so does
this package's own face, :func:`load`. Every entry point calls ``host.cpu.default_onednn()``
first, before anything loads TensorFlow.

Importing the package loads no Keras (a launcher answers a bad flag before any backend loads),
but the layers a model file of ``launch/export.py`` is made of (:data:`SAVED_LAYERS`) are
registered with Keras as Keras is imported (or at once, where it already is:
``host.after_import``), so that
``keras.saving.load_model(FILE)`` opens one after ``import resnet_noBN`` on every backend.
"""

import importlib

from resnet_noBN.host.after_import import after_import

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
    "study_plots",
    "runs",
    "trained",
    "studies",
)

# the modules whose registered layers (``keras.saving.register_keras_serializable``) an exported
# model holds: the network's own, and the input normalisation that takes raw pixels
SAVED_LAYERS = ("resnet_noBN.models.layers", "resnet_noBN.datasets.normalization")


def load(path: str):
    """The Keras model in ``path``: a ``.keras`` file ``launch/export.py`` wrote, or a run folder
    of ``launch/cifar.py`` (its latest checkpoint, on the backend it trained on), on the Keras
    backend in use: raw pixels (uint8, or float in 0-255; [N, 32, 32, 3] for the CIFAR networks)
    to logits. ``configs.errors.InputError`` (one line) for anything else
    (``trained.model_file.load``)."""
    from resnet_noBN.trained import model_file

    return model_file.load(path)


def _register_saved_layers() -> None:
    for name in SAVED_LAYERS:
        importlib.import_module(name)


after_import("keras", _register_saved_layers)
