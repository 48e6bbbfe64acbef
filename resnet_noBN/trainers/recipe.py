"""The paper's recipe, for every Keras backend (arXiv:1611.04231, Section 4; the original
``resnet_main.py``): momentum SGD, a step-keyed learning rate, and the objective

    cost = softmax cross-entropy averaged over the GLOBAL batch + r · Σ‖W‖²/2 over conv kernels.

Every training loop (``training`` on TensorFlow, ``jax_training`` on JAX, ``torch_training``
on PyTorch) takes these, so the recipe is written once. No TensorFlow here: only Keras and
``keras.ops``.

The loss and the optimizer are chosen by name (``--loss``, ``--optimizer``), defaulting to the
paper's; another one is a function and an entry in ``LOSSES`` or ``OPTIMIZERS``, nothing else:
the flag's choices, its check and every loop follow.
"""

from __future__ import annotations

import dataclasses
import fractions
import math

import keras
from keras import ops

from resnet_noBN.configs.flag_config import check_at_least, check_choices


def softmax_cross_entropy(logits, labels, cfg: TrainConfig):
    """Per-example softmax cross-entropy (the paper's), against labels smoothed by
    ``cfg.label_smoothing`` (0: none; s: 1 - s on the label, s spread over all classes)."""
    if not cfg.label_smoothing:
        return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    targets = ops.one_hot(ops.cast(labels, "int32"), ops.shape(logits)[-1])
    return keras.losses.categorical_crossentropy(
        targets, logits, from_logits=True, label_smoothing=cfg.label_smoothing
    )


def sigmoid_cross_entropy(logits, labels, cfg: TrainConfig):
    """Per-example sum over the classes of the binary cross-entropy of each logit against the
    (smoothed) one-hot label: every class its own yes/no (big_vision's ``sigmoid_xent``)."""
    targets = ops.one_hot(ops.cast(labels, "int32"), ops.shape(logits)[-1])
    targets = targets * (1 - cfg.label_smoothing) + cfg.label_smoothing / 2
    return ops.sum(
        keras.losses.binary_crossentropy(targets[..., None], logits[..., None], from_logits=True),
        axis=-1,
    )


def momentum_sgd(cfg: TrainConfig, schedule) -> keras.optimizers.Optimizer:
    """SGD with momentum ``cfg.momentum`` (the paper's): v = m v - lr g, w += v."""
    return keras.optimizers.SGD(learning_rate=schedule, momentum=cfg.momentum)


def nesterov_sgd(cfg: TrainConfig, schedule) -> keras.optimizers.Optimizer:
    """SGD with Nesterov momentum ``cfg.momentum``."""
    return keras.optimizers.SGD(learning_rate=schedule, momentum=cfg.momentum, nesterov=True)


def adam(cfg: TrainConfig, schedule) -> keras.optimizers.Optimizer:
    """Adam (first-moment decay ``cfg.momentum``) on the schedule; the weight decay stays the
    objective's L2 term, as in the paper's recipe."""
    return keras.optimizers.Adam(learning_rate=schedule, beta_1=cfg.momentum)


# Where the paper's learning rate drops, as fractions of the run: its 30,000 and 50,000 of
# 60,000 steps (Section 4), the same shape at any length (TrainConfig.boundary_steps)
PAPER_SHAPE = ("1/2", "5/6")


def boundary_value(text: str) -> fractions.Fraction:
    """A --lr_boundaries entry as a number: a fraction of the run (``1/2``, ``0.5``) or a step
    (``30000``); ValueError naming the flag for anything else."""
    try:
        value = fractions.Fraction(str(text).strip())
    except (ValueError, ZeroDivisionError):
        value = None
    if value is None or value <= 0 or (value >= 1 and value.denominator != 1):
        raise ValueError(
            f"--lr_boundaries entries are fractions of --train_steps in (0, 1) (1/2, 0.5) or "
            f"steps >= 1, got '{text}'"
        )
    return value


# name -> fn(logits, labels, cfg): float32 per-example losses [B]
LOSSES = {
    "softmax_cross_entropy": softmax_cross_entropy,
    "sigmoid_cross_entropy": sigmoid_cross_entropy,
}
# name -> fn(cfg, schedule): a Keras optimizer
OPTIMIZERS = {"momentum": momentum_sgd, "nesterov": nesterov_sgd, "adam": adam}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The recipe of arXiv:1611.04231 Section 4 (the original ``resnet_main.py``); each field is
    a flag of the launchers, its ``help`` the flag's, and a key of ``config.json``'s recipe.
    ``"may_change"`` marks what a resumed run may change (it changes neither the objective nor
    the training stream); every other field must match the run's (``runs.record``)."""

    train_steps: int = dataclasses.field(
        default=60_000, metadata={"may_change": True, "help": "Number of updates to train for."}
    )
    batch_size: int = dataclasses.field(
        default=128,
        metadata={"help": "GLOBAL batch size, split evenly over all replicas of all workers."},
    )
    learning_rate: float = dataclasses.field(
        default=0.05, metadata={"help": "Initial learning rate."}
    )
    lr_boundaries: tuple[str, ...] = dataclasses.field(
        default=PAPER_SHAPE,
        metadata={
            "help": "Where the learning rate is multiplied by --lr_decay: fractions of "
            "--train_steps (1/2,5/6, the paper's 30,000 and 50,000 of 60,000, at any length; "
            "0.5 works too) or steps (30000,50000)."
        },
    )
    schedule_steps: int = dataclasses.field(
        default=0,
        metadata={
            "may_change": True,
            "help": "The run length fractional --lr_boundaries are fractions of: 0 for "
            "--train_steps. A resumed run keeps the length it started with, so a longer "
            "--train_steps extends it at its last rate.",
        },
    )
    lr_decay: float = dataclasses.field(
        default=0.1, metadata={"help": "Learning-rate factor at each boundary."}
    )
    optimizer: str = dataclasses.field(
        default="momentum",
        metadata={
            "choices": tuple(OPTIMIZERS),
            "help": "momentum: SGD with momentum (the paper's); nesterov; adam (--momentum is "
            "its beta_1). recipe.OPTIMIZERS.",
        },
    )
    momentum: float = dataclasses.field(default=0.9, metadata={"help": "Momentum of SGD."})
    loss: str = dataclasses.field(
        default="softmax_cross_entropy",
        metadata={
            "choices": tuple(LOSSES),
            "help": "softmax_cross_entropy (the paper's) or sigmoid_cross_entropy, averaged over "
            "the global batch. recipe.LOSSES.",
        },
    )
    label_smoothing: float = dataclasses.field(
        default=0.0,
        metadata={
            "help": "Label smoothing s of the loss: 1 - s on the label (0: none, the paper's)."
        },
    )
    weight_decay: float = dataclasses.field(
        default=1e-4,
        metadata={"help": "Decay rate r of the loss term r * sum ||W||^2 / 2 over conv kernels."},
    )
    eval_every: int = dataclasses.field(
        default=2_000,
        metadata={
            "may_change": True,
            "help": "Evaluate on the whole test split every this many steps (and at the end).",
        },
    )
    checkpoint_every: int = dataclasses.field(
        default=1_000,
        metadata={
            "may_change": True,
            "help": "Write a checkpoint every this many steps (and at the end).",
        },
    )
    log_every: int = dataclasses.field(
        default=100,
        metadata={
            "may_change": True,
            "help": "Print progress, and record it in train.jsonl and TensorBoard, every this "
            "many steps.",
        },
    )
    log_every_s: float = dataclasses.field(
        default=60.0,
        metadata={
            "may_change": True,
            "help": "Also print progress at least every this many seconds, so that a slow "
            "machine shows life within a minute (0: only every --log_every steps).",
        },
    )
    max_checkpoints: int = dataclasses.field(
        default=5, metadata={"may_change": True, "help": "Checkpoints kept."}
    )
    eval_batch_size: int = dataclasses.field(
        default=500,
        metadata={"may_change": True, "help": "GLOBAL batch size of the evaluation."},
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for an impossible recipe."""
        counts = (
            "train_steps",
            "batch_size",
            "eval_every",
            "checkpoint_every",
            "log_every",
            "max_checkpoints",
            "eval_batch_size",
        )
        check_at_least(self, counts, 1, "positive")
        if self.log_every_s < 0:
            raise ValueError(f"--log_every_s must be >= 0, got {self.log_every_s:g}")
        if self.schedule_steps < 0:
            raise ValueError(f"--schedule_steps must be >= 0, got {self.schedule_steps}")
        if not self.learning_rate > 0:
            raise ValueError(f"--learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise ValueError(f"--weight_decay must be >= 0, got {self.weight_decay}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"--label_smoothing must be in [0, 1), got {self.label_smoothing}")
        check_choices(self)
        if not 0 < self.lr_decay <= 1:
            raise ValueError(f"--lr_decay must be in (0, 1], got {self.lr_decay}")
        values = [boundary_value(b) for b in self.lr_boundaries]
        if len({v < 1 for v in values}) > 1 or any(b >= a for b, a in zip(values, values[1:])):
            raise ValueError(
                "--lr_boundaries must be strictly increasing, all fractions of --train_steps or "
                f"all steps, got {','.join(self.lr_boundaries)}"
            )

    def __post_init__(self):
        # entries as text: "1/2" stays exact; a step given as a number reads back as its digits
        object.__setattr__(self, "lr_boundaries", tuple(str(b) for b in self.lr_boundaries))

    def boundary_steps(self) -> tuple[int, ...]:
        """The steps at which the learning rate drops in this run: each fraction f of the run's
        length S (``schedule_steps``, or ``train_steps``) at floor(f S) (at least 1), each step
        as given; what the schedule uses and config.json records. The one place a run's
        boundaries are computed."""
        length, steps = self.schedule_steps or self.train_steps, set()
        for value in map(boundary_value, self.lr_boundaries):
            steps.add(int(value) if value >= 1 else max(1, math.floor(value * length)))
        return tuple(sorted(steps))

    def relative(self) -> bool:
        """Whether the boundaries are fractions of the run (they move with its length)."""
        return any(boundary_value(b) < 1 for b in self.lr_boundaries)


@dataclasses.dataclass(frozen=True)
class ImageNetRecipe(TrainConfig):
    """The ImageNet recipe (arXiv:1611.04231, Section 4): :class:`TrainConfig` with the learning
    rate decayed exponentially (:func:`exponential_learning_rate_schedule`) every
    ``epochs_per_decay`` epochs instead of at boundaries."""

    lr_boundaries: tuple[str, ...] = dataclasses.field(
        default=(),
        metadata={"help": "Not used by the ImageNet recipe: set --lr_decay, --epochs_per_decay."},
    )
    epochs_per_decay: float = dataclasses.field(
        default=2.0, metadata={"help": "Epochs between learning-rate decays by --lr_decay."}
    )

    def validate(self) -> None:
        super().validate()
        if self.lr_boundaries:
            raise ValueError(
                "--lr_boundaries is not used by the ImageNet recipe (exponential decay): set "
                "--lr_decay and --epochs_per_decay instead"
            )
        if not self.epochs_per_decay > 0:
            raise ValueError(f"--epochs_per_decay must be positive, got {self.epochs_per_decay}")


def learning_rate_schedule(cfg: TrainConfig) -> keras.optimizers.schedules.LearningRateSchedule:
    """lr(step) = learning_rate * lr_decay^(number of boundaries <= step).

    As the original ``_LearningRateSetterHook`` (``if train_step < 40000: 0.1 ...``): the update
    made at step 30,000 already uses the decayed rate. Keras' ``PiecewiseConstantDecay`` switches
    after ``step > boundary``, hence the boundaries minus one. The optimizer evaluates it at its
    ``iterations`` counter, which the checkpoint saves, so a resumed run continues the schedule.
    """
    boundaries = cfg.boundary_steps()
    values = [cfg.learning_rate * cfg.lr_decay**i for i in range(len(boundaries) + 1)]
    if not boundaries:  # a constant rate (PiecewiseConstantDecay needs a boundary)
        return keras.optimizers.schedules.PiecewiseConstantDecay([2**62], values * 2)
    return keras.optimizers.schedules.PiecewiseConstantDecay([b - 1 for b in boundaries], values)


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


def make_optimizer(cfg: TrainConfig, schedule=None) -> keras.optimizers.Optimizer:
    """The optimizer ``cfg.optimizer`` names (``OPTIMIZERS``) on ``schedule`` (default:
    :func:`learning_rate_schedule`)."""
    return OPTIMIZERS[cfg.optimizer](cfg, schedule or learning_rate_schedule(cfg))


def objective(logits, labels, decay, cfg: TrainConfig, replicas: int = 1):
    """(loss, parts) of one replica's share of a batch.

    loss = Σ per-example ``cfg.loss`` (``LOSSES``) / the global batch ``cfg.batch_size`` +
    ``decay`` / ``replicas``: summed over the replicas (the all-reduce of the gradients), that is
    the mean loss over the global batch plus the decay once, whatever the number of replicas
    (what TF's ``compute_average_loss`` and ``scale_regularization_loss`` do). ``parts``
    (float32, for the run's health, ``trainers.health``): [arg max hits, the cross-entropy term,
    the decay term (each this replica's share: they sum over the replicas), the largest |logit|].
    ``logits`` are cast to float32.
    """
    logits = ops.cast(logits, "float32")
    per_example = LOSSES[cfg.loss](logits, labels, cfg)
    cross_entropy = ops.sum(per_example) / cfg.batch_size
    decay_share = ops.cast(decay, "float32") / replicas
    hits = ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), ops.cast(labels, "int32"))
    parts = ops.stack(
        [
            ops.sum(ops.cast(hits, "float32")),
            cross_entropy,
            decay_share,
            ops.max(ops.abs(logits)),
        ]
    )
    return cross_entropy + decay_share, parts


def top_classes(logits, top5: bool = False):
    """The predicted class of each example, [B, 1] (int32), or its 5 highest, [B, 5].

    A prediction is the arg max of the logits, ties going to the lower class index (as the
    original's ``tf.argmax``; ``top_k`` puts equal values' lower index first on TensorFlow, JAX
    and PyTorch alike). ``in_top_k`` would count every tied class as predicted, so a network whose
    logits are all equal (a plain chain whose signal vanished) would score 100%.
    """
    _, top = ops.top_k(ops.cast(logits, "float32"), k=5 if top5 else 1)
    return ops.cast(top, "int32")
