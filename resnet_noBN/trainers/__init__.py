"""Training: the loop every backend shares (``loop.TrainLoop``: its schedule, the restore of the
newest readable checkpoint, the evaluation totals), the paper's recipe (``recipe``: loss,
optimizers, schedules, ``TrainConfig``), the TensorFlow trainer (``training``, any
``tf.distribute`` strategy), the JAX trainer (``jax_training``) and the PyTorch trainer
(``torch_training``), what those two share (``one_process``: the model, the npz checkpoints, the
guard), the run's health (``health``), its answers (``answers``) and the run log. They may
import ``configs``, ``host``, ``plotting``, ``models`` and ``datasets``; no trainer is chosen
here (``backends`` does)."""
