"""The paper's recipe, for every Keras backend (arXiv:1611.04231, Section 4; the original
``resnet_main.py``): momentum SGD, a step-keyed learning rate, and the objective

    cost = softmax cross-entropy averaged over the GLOBAL batch + r · Σ‖W‖²/2 over conv kernels.

Both training loops (``training`` on TensorFlow, ``jax_training`` on JAX) take these, so the
recipe is written once. No TensorFlow here: only Keras and ``keras.ops``.
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The recipe of arXiv:1611.04231 Section 4 (the original ``resnet_main.py``); each field is
    a flag of the launchers, its ``help`` the flag's."""

    train_steps: int = dataclasses.field(
        default=60_000, metadata={"help": "Number of updates to train for."}
    )
    batch_size: int = dataclasses.field(
        default=128,
        metadata={"help": "GLOBAL batch size, split evenly over all replicas of all workers."},
    )
    learning_rate: float = dataclasses.field(
        default=0.05, metadata={"help": "Initial learning rate."}
    )
    lr_boundaries: tuple[int, ...] = dataclasses.field(
        default=(30_000, 50_000),
        metadata={"help": "Steps at which the learning rate is multiplied by --lr_decay."},
    )
    lr_decay: float = dataclasses.field(
        default=0.1, metadata={"help": "Learning-rate factor at each boundary."}
    )
    momentum: float = dataclasses.field(default=0.9, metadata={"help": "Momentum of SGD."})
    weight_decay: float = dataclasses.field(
        default=1e-4,
        metadata={"help": "Decay rate r of the loss term r * sum ||W||^2 / 2 over conv kernels."},
    )
    eval_every: int = dataclasses.field(
        default=2_000,
        metadata={
            "help": "Evaluate on the whole test split every this many steps (and at the end)."
        },
    )
    checkpoint_every: int = dataclasses.field(
        default=1_000,
        metadata={"help": "Write a checkpoint every this many steps (and at the end)."},
    )
    log_every: int = dataclasses.field(
        default=100, metadata={"help": "Print progress every this many steps."}
    )
    max_checkpoints: int = dataclasses.field(default=5, metadata={"help": "Checkpoints kept."})
    eval_batch_size: int = dataclasses.field(
        default=500, metadata={"help": "GLOBAL batch size of the evaluation."}
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for an impossible recipe."""
        for name in (
            "train_steps",
            "batch_size",
            "eval_every",
            "checkpoint_every",
            "log_every",
            "max_checkpoints",
            "eval_batch_size",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be positive, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ValueError(f"--weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 < self.lr_decay <= 1:
            raise ValueError(f"--lr_decay must be in (0, 1], got {self.lr_decay}")
        bounds = self.lr_boundaries
        if any(b <= 0 for b in bounds) or any(b >= a for b, a in zip(bounds, bounds[1:])):
            raise ValueError(
                f"--lr_boundaries must be positive and strictly increasing, got "
                f"{','.join(map(str, bounds))}"
            )


def learning_rate_schedule(cfg: TrainConfig) -> keras.optimizers.schedules.LearningRateSchedule:
    """lr(step) = learning_rate * lr_decay^(number of boundaries <= step).

    As the original ``_LearningRateSetterHook`` (``if train_step < 40000: 0.1 ...``): the update
    made at step 30,000 already uses the decayed rate. Keras' ``PiecewiseConstantDecay`` switches
    after ``step > boundary``, hence the boundaries minus one. The optimizer evaluates it at its
    ``iterations`` counter, which the checkpoint saves, so a resumed run continues the schedule.
    """
    values = [cfg.learning_rate * cfg.lr_decay**i for i in range(len(cfg.lr_boundaries) + 1)]
    return keras.optimizers.schedules.PiecewiseConstantDecay(
        [b - 1 for b in cfg.lr_boundaries], values
    )


def exponential_learning_rate_schedule(
    batch_size: int,
    train_examples: int,
    learning_rate: float = 0.1,
    decay: float = 0.94,
    epochs_per_decay: float = 2.0,
) -> keras.optimizers.schedules.ExponentialDecay:
    """lr(step) = learning_rate * decay^floor(step / decay_steps): 0.1 x 0.94 every 2 epochs,
    the ImageNet recipe (arXiv:1611.04231, Section 4).

    An epoch is ``train_examples / batch_size`` steps (ImageNet: 1,281,167 / 256 = 5,004.6);
    decay_steps = int(epochs_per_decay * that) as TF-slim's ``train_image_classifier.py``
    (10,009 at 256).
    """
    decay_steps = max(1, int(epochs_per_decay * train_examples / batch_size))
    return keras.optimizers.schedules.ExponentialDecay(
        learning_rate, decay_steps, decay, staircase=True
    )


def make_optimizer(cfg: TrainConfig, schedule=None) -> keras.optimizers.SGD:
    """SGD with ``cfg.momentum`` on ``schedule`` (default: :func:`learning_rate_schedule`)."""
    return keras.optimizers.SGD(
        learning_rate=schedule or learning_rate_schedule(cfg), momentum=cfg.momentum
    )


def objective(logits, labels, decay, global_batch: int, replicas: int = 1):
    """(loss, correct) of one replica's share of a batch.

    loss = Σ per-example cross-entropy / ``global_batch`` + ``decay`` / ``replicas``: summed over
    the replicas (the all-reduce of the gradients), that is the mean cross-entropy over the
    global batch plus the decay once, whatever the number of replicas (what TF's
    ``compute_average_loss`` and ``scale_regularization_loss`` do). ``logits`` are cast to
    float32; ``correct`` counts arg max hits (float32).
    """
    logits = ops.cast(logits, "float32")
    per_example = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    loss = ops.sum(per_example) / global_batch + decay / replicas
    hits = ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(labels, "int32"))
    return loss, ops.sum(ops.cast(hits, "float32"))


def eval_counts(logits, labels, top5: bool = False):
    """[top-1 correct, (top-5 correct,) examples] (int32) of a batch.

    A prediction is the arg max of the logits, ties going to the lower class index (as the
    original's ``tf.argmax``; ``top_k`` puts equal values' lower index first on TensorFlow and
    JAX alike). ``in_top_k`` would count every tied class as predicted, so a network whose logits
    are all equal (a plain chain whose signal vanished) would score 100%.
    """
    ks = (1, 5) if top5 else (1,)
    _, top = ops.top_k(ops.cast(logits, "float32"), k=ks[-1])
    labels = ops.cast(labels, "int32")[:, None]
    hits = [ops.sum(ops.cast(ops.any(ops.equal(top[:, :k], labels), axis=1), "int32")) for k in ks]
    return ops.stack(hits + [ops.cast(ops.shape(labels)[0], "int32")])
