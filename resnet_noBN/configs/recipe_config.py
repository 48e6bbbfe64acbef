"""The recipe's config (arXiv:1611.04231, Section 4; the original ``resnet_main.py``): each
field of :class:`TrainConfig` declared once, its default the paper's, its flag's help, its key of
``config.json``'s recipe; :class:`ImageNetRecipe` for the ImageNet network. Plain dataclasses, no
Keras: a launcher builds and checks a recipe, and answers a bad flag, before any backend loads.

``trainers.recipe`` turns it into the loss, the optimizer and the schedule every training loop
uses: its ``LOSSES`` and ``OPTIMIZERS`` hold one function for each name here (tested).
"""

from __future__ import annotations

import dataclasses
import fractions
import math

from resnet_noBN.configs.flag_config import check_at_least, check_choices

# --loss and --optimizer (trainers.recipe.LOSSES, trainers.recipe.OPTIMIZERS)
LOSSES = ("softmax_cross_entropy", "sigmoid_cross_entropy")
OPTIMIZERS = ("momentum", "momentum_2016", "nesterov", "adam")
# What a recorded recipe without --optimizer ran: Keras' form of momentum, the one optimizer
# before the flag (and the default until momentum_2016 became it, 2026-11-28)
RECORDED_BEFORE_THE_FLAG = "momentum"


def upgraded(recipe: dict) -> dict:
    """A recipe recorded by an older version (a config.json's recipe section) in today's fields:
    one without ``optimizer`` ran Keras' momentum (:data:`RECORDED_BEFORE_THE_FLAG`), not
    today's default."""
    if "optimizer" in recipe:
        return recipe
    return {**recipe, "optimizer": RECORDED_BEFORE_THE_FLAG}


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
        default="momentum_2016",
        metadata={
            "choices": OPTIMIZERS,
            "help": "momentum_2016 (the default: the code the paper ran): SGD with momentum as "
            "the 2016 resnet_main.py's tf.train.MomentumOptimizer, a = m a + g, w -= lr a (the "
            "accumulator in gradient units; a learning-rate drop shrinks the whole step at "
            "once); momentum: the same in Keras' form, v = m v - lr g, w += v (the velocity in "
            "the rate's units; after a drop it shrinks by m a step), which every run before "
            "2026-11-28 used; nesterov; adam (--momentum is its beta_1). recipe.OPTIMIZERS.",
        },
    )
    momentum: float = dataclasses.field(default=0.9, metadata={"help": "Momentum of SGD."})
    loss: str = dataclasses.field(
        default="softmax_cross_entropy",
        metadata={
            "choices": LOSSES,
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
    redraw_every_s: float = dataclasses.field(
        default=10.0,
        metadata={
            "may_change": True,
            "help": "Redraw <model_dir>/test_error.png after an evaluation at most every this "
            "many seconds (a redraw costs about 0.1 s of CPU), and always after the last one "
            "and as the run stops (0: after every evaluation).",
        },
    )
    max_checkpoints: int = dataclasses.field(
        default=5, metadata={"may_change": True, "help": "Checkpoints kept."}
    )
    replay_divergence: int = dataclasses.field(
        default=0,
        metadata={
            "may_change": True,
            "help": "Where the loss turns non-finite: replay the run from its last good "
            "checkpoint, the call that diverged and up to this many steps before it one step "
            "at a time, every step's health in <model_dir>/divergence/train.jsonl and "
            "health.png (0: no replay). trainers.loop.TrainLoop.replay.",
        },
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
        if self.replay_divergence < 0:
            raise ValueError(f"--replay_divergence must be >= 0, got {self.replay_divergence}")
        for name in ("log_every_s", "redraw_every_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name):g}")
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
    rate decayed exponentially (``trainers.recipe.exponential_learning_rate_schedule``) every
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
