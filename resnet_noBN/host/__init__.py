"""The facts of the host a run computes on, apart from the per-backend objects that act on them: its
CPU (``cpu``: vector extensions, thread pools, oneDNN, bfloat16), the cluster it belongs to
(``cluster``: TF_CONFIG and SLURM's variables, read and checked), the signals that stop it
(``preemption``: SIGTERM and SIGINT met with a checkpoint), its peers in a TensorFlow job
(``peers``: a lost one named, exit 5), its storage (``storage``: atomic writes, a full disk in
one line), its processes (``processes``: whether one still runs) and its imports
(``after_import``: a hook run once a module is imported). They import only ``configs``
(and TensorFlow where a TensorFlow job's peers are watched); this ``__init__`` imports nothing,
so ``host.cpu`` loads before TensorFlow."""
