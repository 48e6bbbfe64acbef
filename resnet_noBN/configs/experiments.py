"""Every experiment this project runs or reports, declared once, by name (big_vision's way: an
experiment is a config, not a flag list): ``launch/cifar.py --experiment=NAME`` runs one, any of
its fields still overridable by its flag; ``launch/study.py`` and the GPU lease plan name them
instead of keeping flag lists of their own.

An :class:`Experiment` is a set of changes to the defaults, section by section: the network
(``network_config.ModelConfig``'s fields, from a ``presets.MODELS`` architecture), the data
(``configs.data_config.DataConfig``), the recipe (``recipe_config.TrainConfig``) and the
runtime (``configs.runtime_config.RuntimeConfig``). The defaults are the paper's (arXiv:1611.04231,
Section 4): Table 1's network, momentum SGD 0.9 (in the form of the 2016 code the paper ran,
``momentum_2016``), batch 128, learning rate 0.05 divided by 10 at
1/2 and 5/6 of the run (its 30,000 and 50,000 of 60,000 steps), weight decay 1e-4. ``runs.
run_config.build`` makes a whole run (``configs.run_config.RunConfig``) of one.

Plain values, no Keras: the lease plan reads these names on a machine without the project's
dependencies.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

# what launch/<launcher>.py runs without --experiment
DEFAULTS = {"cifar": "cifar10_paper", "imagenet": "imagenet_paper"}


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A named run: ``about`` (one line, citing the paper where it reproduces it), the network
    preset ``model`` (``presets.MODELS``; a --model flag replaces it, keeping ``network``) and
    the changes of each section of the run's config, by field name. ``launcher``: the entry
    point that runs it (``launch/<launcher>.py``)."""

    name: str
    about: str
    model: str = "paper"
    network: MappingProxyType = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    data: MappingProxyType = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    recipe: MappingProxyType = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    runtime: MappingProxyType = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    launcher: str = "cifar"


def experiment(name: str, about: str, model: str = "paper", launcher: str = "cifar", **sections):
    """An :class:`Experiment` from plain dicts (``network=``, ``data=``, ``recipe=``,
    ``runtime=``), frozen."""
    frozen = {key: MappingProxyType(dict(value)) for key, value in sections.items()}
    return Experiment(name, about, model, launcher=launcher, **frozen)


def derived(base: Experiment, name: str, about: str, model: str | None = None, **sections):
    """``base`` with more changes (each section's merged over the base's) under a new name."""
    merged = {
        key: {**getattr(base, key), **sections.get(key, {})}
        for key in ("network", "data", "recipe", "runtime")
    }
    return experiment(name, about, model or base.model, base.launcher, **merged)


# --- The changes the experiments combine ------------------------------------------------------
# The original 2016 tensorflow/models resnet/ code the paper forked, with batch norm removed as
# the paper says (models/blocks.py): leaky ReLU 0.1, pre-activation units, its trained head
ORIGINAL_2016_NETWORK = {"relu_leakiness": 0.1, "block": "preactivation", "head": "original_2016"}
# its weight decay: 0.0002 * tf.nn.l2_loss(w) = 0.0002 * sum(w^2) / 2, 2e-4 * w on the gradient
ORIGINAL_2016_DECAY = {"weight_decay": 2e-4}
# the "13.59 million" parameters of the paper's text: conv biases and 1x1 projection shortcuts
TEXT_13_59M = {"conv_bias": True, "shortcut": "projection"}
# the quarter-width CPU runs' budget: 8,000 steps, a whole-test evaluation every 500
CPU_BUDGET = {"train_steps": 8000, "eval_every": 500, "checkpoint_every": 500}

# CIFAR-100 at the paper's rate diverged on Table 1's network (results/gpu_h100) and at a quarter
# of its width (results/cifar100_held, NaN at step 6,799, the gradient norm first, ~40 steps
# ahead): where one diverges, replay its last 300 steps one at a time (--replay_divergence)
DIVERGENCE_REPLAY = {"replay_divergence": 300}

# Table 2 of arXiv:1611.04231: the test error (%) the paper reports, by the experiment that
# reproduces it (launch/table2.py writes its seeds' beside them)
TABLE2_ERRORS = {DEFAULTS["cifar"]: 6.38, "cifar100_paper": 24.64}

# --- Identity at initialisation, four ways (the studies "identity" and "identity_cifar100_held"):
# the paper's small init (Section 4) beside Fixup (arXiv:1901.09321), SkipInit (arXiv:2002.10444)
# and a zero-initialised branch, each its block (models/blocks.py) and its papers' init
IDENTITY_INITS = {
    "fixup": {"block": "fixup", "init": "he"},
    "skipinit": {"block": "skipinit", "init": "he"},
    "zero_last": {"block": "zero_last"},
}
IDENTITY_ABOUT = {
    "fixup": "Fixup's init (Zhang et al. 2019): C2 at zero, C1 He-drawn and scaled by L^-1/2, "
    "a multiplier and four scalar biases per branch at a tenth of the rate",
    "skipinit": "SkipInit (De & Smith 2020): each branch times a learnable scalar from 0, "
    "He-drawn convolutions",
    "zero_last": "the paper's init with each branch's second convolution at zero (Fixup's first "
    "rule alone; zero-gamma without normalisation)",
}

CIFAR10 = experiment(
    DEFAULTS["cifar"],
    "the paper's CIFAR-10 run (Section 4, Table 1's network; Table 2: "
    f"{TABLE2_ERRORS[DEFAULTS['cifar']]}% error)",
)
CIFAR100 = experiment(
    "cifar100_paper",
    f"the paper's CIFAR-100 run (Section 4; Table 2: {TABLE2_ERRORS['cifar100_paper']}% error)",
    data={"dataset": "cifar100"},
    recipe=DIVERGENCE_REPLAY,
)
ORIGINAL_2016 = derived(
    CIFAR10,
    "cifar10_original_2016",
    "CIFAR-10 on the 2016 code's network (leaky ReLU 0.1, pre-activation units, its trained "
    "head), batch norm removed, the paper's recipe",
    network=ORIGINAL_2016_NETWORK,
)
CIFAR100_HELD = derived(
    CIFAR100,
    "cifar100_held_lr",
    "CIFAR-100 at the paper's lr 0.05 held constant (no drop): the loss and health the "
    "full-width runs diverged from (Section 4's rate)",
    recipe={"lr_boundaries": ()},
)

_ALL = (
    CIFAR10,
    CIFAR100,
    experiment(
        "imagenet_paper",
        "the paper's ImageNet run (Section 4: the ResNet-34 without batch norm, momentum 0.9, "
        "lr 0.1 x 0.94 every 2 epochs, batch 256, ~700,000 steps; Table 2: 35.29%)",
        launcher="imagenet",
        recipe={
            "train_steps": 700_000,
            "batch_size": 256,
            "learning_rate": 0.1,
            "lr_decay": 0.94,
            "eval_every": 10_000,
            "checkpoint_every": 5_000,
            "eval_batch_size": 256,
        },
    ),
    experiment(
        "demo",
        "the method in minutes: the small network (1 block per stage, a quarter of the widths), "
        "8,000 steps",
        model="small",
        recipe={"train_steps": 8000, "eval_every": 2000},
    ),
    # --- Table 2, explained: one change each from cifar10_paper (launch/study.py, "table2")
    derived(
        CIFAR10,
        "cifar10_jpeg_q75",
        "CIFAR-10 read as a JPEG q75 4:2:0 copy (train and test), the data of the earlier figures",
        data={"jpeg_quality": 75},
    ),
    derived(
        CIFAR10,
        "cifar10_leaky",
        "CIFAR-10 with the 2016 code's leaky ReLU 0.1",
        network={"relu_leakiness": 0.1},
    ),
    derived(
        CIFAR10,
        "cifar10_wd_2016",
        "CIFAR-10 with the 2016 code's weight decay: 2e-4 * w on the gradient",
        recipe=ORIGINAL_2016_DECAY,
    ),
    derived(
        CIFAR10,
        "cifar10_momentum_keras",
        "CIFAR-10 with Keras' form of momentum (v = 0.9 v - lr g: the velocity in the old "
        "rate's units after a drop), which every figure before 2026-11-28 used",
        recipe={"optimizer": "momentum"},
    ),
    derived(
        CIFAR10,
        "cifar10_preactivation",
        "CIFAR-10 with the 2016 code's activations alone (pre-activation units, ReLU)",
        network={"block": "preactivation"},
    ),
    derived(
        CIFAR10,
        "cifar10_trained_head_2016",
        "CIFAR-10 with the 2016 code's last layer alone (trained, a bias, decayed)",
        network={"head": "original_2016"},
    ),
    derived(
        CIFAR10,
        "cifar10_preactivation_trained_head",
        "CIFAR-10 with the 2016 code's activations and last layer together (pre-activation "
        "units, its trained head, ReLU): its network without the leaky slope",
        network={"block": "preactivation", "head": "original_2016"},
    ),
    ORIGINAL_2016,
    derived(
        ORIGINAL_2016,
        "cifar10_original_2016_wd",
        "CIFAR-10 on the 2016 code's network and weight decay (2e-4 * w)",
        recipe=ORIGINAL_2016_DECAY,
    ),
    derived(
        CIFAR10,
        "cifar10_13_59m",
        "CIFAR-10 with the paper's text's 13.59M parameters: conv biases, 1x1 projection shortcuts",
        network=TEXT_13_59M,
    ),
    # --- CIFAR-100 on a lent GPU (results/gpu_h100): the paper's lr diverges there
    derived(
        CIFAR100,
        "cifar100_true_float32",
        "CIFAR-100 at the paper's lr 0.05 in true float32 (TF32 off): does the divergence survive?",
        runtime={"precision": "true_float32"},
    ),
    derived(
        CIFAR100,
        "cifar100_lr0.02",
        "CIFAR-100 at lr 0.02, 48,000 steps (the paper's lr diverges on our runs)",
        recipe={"learning_rate": 0.02, "train_steps": 48000},
    ),
    derived(
        CIFAR100,
        "cifar100_leaky_lr0.02",
        "CIFAR-100 at lr 0.02, 48,000 steps, the 2016 code's leaky ReLU 0.1",
        network={"relu_leakiness": 0.1},
        recipe={"learning_rate": 0.02, "train_steps": 48000},
    ),
    derived(
        CIFAR100,
        "cifar100_2016_reader_lr0.02",
        "CIFAR-100 at lr 0.02, 48,000 steps, read as the 2016 reader did (the label leak)",
        data={"cifar100_layout": "original_2016"},
        recipe={"learning_rate": 0.02, "train_steps": 48000},
    ),
    derived(
        CIFAR100,
        "cifar100_original_2016",
        "CIFAR-100 on the 2016 code's network, batch norm removed, the paper's recipe",
        network=ORIGINAL_2016_NETWORK,
    ),
    # --- CIFAR-100 at the paper's lr 0.05 held (launch/study.py, "cifar100_held"): where the
    # full-width runs diverged before their first drop (results/gpu_h100), does a CPU's run
    # bottom out and climb, and which health figure moves first?
    CIFAR100_HELD,
    derived(
        CIFAR100_HELD,
        "cifar100_held_lr_wd_2016",
        "CIFAR-100 at lr 0.05 held, with the 2016 code's weight decay (2e-4 * w)",
        recipe=ORIGINAL_2016_DECAY,
    ),
    derived(
        CIFAR100_HELD,
        "cifar100_held_lr_original_2016",
        "CIFAR-100 at lr 0.05 held, on the 2016 code's network (leaky ReLU 0.1, pre-activation "
        "units, its trained head), batch norm removed",
        network=ORIGINAL_2016_NETWORK,
    ),
    # --- the quarter-width CPU runs (results/cifar10_jpeg_cpu, results/cifar100_cpu); their
    # boundaries as those runs had them
    derived(
        CIFAR10,
        "cifar10_quarter",
        "CIFAR-10, the paper's depth at a quarter of the widths, 8,000 steps (a CPU's run)",
        model="quarter",
        recipe={**CPU_BUDGET, "lr_boundaries": ("4000", "6667")},
    ),
    derived(
        CIFAR100,
        "cifar100_quarter",
        "CIFAR-100, the paper's depth at a quarter of the widths, 8,000 steps (a CPU's run)",
        model="quarter",
        recipe={**CPU_BUDGET, "lr_boundaries": ("4000", "6667")},
    ),
    derived(
        CIFAR100,
        "cifar100_quarter_2016_reader",
        "CIFAR-100 at a quarter of the widths, read as the 2016 reader did (the label leak)",
        model="quarter",
        data={"cifar100_layout": "original_2016"},
        recipe={**CPU_BUDGET, "lr_boundaries": ("4000", "6667")},
    ),
)

_IDENTITY = tuple(
    derived(base, f"{prefix}_{arm}", f"{what}, {IDENTITY_ABOUT[arm]}", network=changes)
    for base, prefix, what in (
        (CIFAR10, "cifar10", "CIFAR-10"),
        (CIFAR100_HELD, "cifar100_held_lr", "CIFAR-100 at lr 0.05 held"),
    )
    for arm, changes in IDENTITY_INITS.items()
)

# --- Near the identity as the network deepens (the study "near_identity",
# launch/near_identity.py): Section 2's O(1/l) per block (Theorem 2.1) asked of trained networks.
# The small network's widths at 1, 2, 4 and 8 blocks a stage (8, 14, 26 and 50 layers), the
# paper's init and Fixup's, the paper's recipe shortened to the study's 4,000 steps
NEAR_IDENTITY_UNITS = (1, 2, 4, 8)
NEAR_IDENTITY_INITS = {"paper": {}, "fixup": IDENTITY_INITS["fixup"]}
_NEAR_IDENTITY = tuple(
    derived(
        CIFAR10,
        f"near_identity_{init}_u{units}",
        f"CIFAR-10, the small network's widths at {units} block(s) a stage "
        f"({6 * units + 2} layers), "
        + ("the paper's init" if init == "paper" else IDENTITY_ABOUT[init]),
        model="small",
        network={"num_residual_units": units, **changes},
    )
    for init, changes in NEAR_IDENTITY_INITS.items()
    for units in NEAR_IDENTITY_UNITS
)

# --- The claims' arms (the study "claims", studies/claims.py): the paper's network and one change
# each, at the study's budget (the paper's depth, a quarter of the widths, 300 steps)
CLAIMS_BUDGET = {
    "train_steps": 300,
    "eval_every": 75,
    "checkpoint_every": 75,
    "log_every": 10,
    "max_checkpoints": 1,
}
CLAIM_CHANGES = {
    "hardt_ma": {},
    "standard": {"init": "standard"},
    "he": {"init": "he"},
    "trainable_head": {"head": "trainable"},
    "no_identity": {"identity": False},
    "leaky_relu": {"relu_leakiness": 0.1},
    "conv_bias": {"conv_bias": True},
    "batch_norm": {"block": "preactivation", "norm": "batch", "init": "he"},
}
_CLAIMS = tuple(
    derived(
        CIFAR10,
        f"claims_{arm}",
        f"the claims study's arm {arm}: {changes or 'the paper network'}",
        model="quarter",
        network=changes,
        recipe=CLAIMS_BUDGET,
    )
    for arm, changes in CLAIM_CHANGES.items()
)

EXPERIMENTS = {e.name: e for e in _ALL + _IDENTITY + _NEAR_IDENTITY + _CLAIMS}


def named(name: str, launcher: str = "cifar") -> Experiment:
    """The experiment ``name`` that ``launch/<launcher>.py`` runs; ValueError (one line, naming
    the choices) otherwise."""
    ours = [n for n, e in EXPERIMENTS.items() if e.launcher == launcher]
    if name not in ours:
        raise ValueError(
            f"--experiment={name} is not an experiment of launch/{launcher}.py; choose one of "
            f"{', '.join(ours)}"
        )
    return EXPERIMENTS[name]


# Studies: a baseline and arms that each change one thing from it (launch/study.py runs one at
# a budget: a network preset, steps, seeds). "table2": the gap between our CIFAR-10 figure and
# the paper's 6.38% (Table 2), factor by factor: the data, the 2016 code's activations, head and
# weight decay apart, the activations and the head together, and whole; Keras' form of momentum
# for the 2016 code's (the default since 2026-11-28); the text's 13.59M network.
STUDIES = {
    "table2": (
        "cifar10_paper",
        "cifar10_jpeg_q75",
        "cifar10_leaky",
        "cifar10_wd_2016",
        "cifar10_momentum_keras",
        "cifar10_original_2016",
        "cifar10_original_2016_wd",
        "cifar10_preactivation",
        "cifar10_trained_head_2016",
        "cifar10_preactivation_trained_head",
        "cifar10_13_59m",
    ),
    "cifar100_held": (
        "cifar100_held_lr",
        "cifar100_held_lr_wd_2016",
        "cifar100_held_lr_original_2016",
    ),
    # identity at initialisation: the paper's init beside Fixup, SkipInit and a zero last
    # convolution, on CIFAR-10 and on CIFAR-100 at the rate held that diverged (1 of 2 seeds)
    "identity": ("cifar10_paper", *(f"cifar10_{arm}" for arm in IDENTITY_INITS)),
    "identity_cifar100_held": (
        "cifar100_held_lr",
        *(f"cifar100_held_lr_{arm}" for arm in IDENTITY_INITS),
    ),
    # the distance of each trained block from the identity by depth (launch/near_identity.py)
    "near_identity": tuple(e.name for e in _NEAR_IDENTITY),
    # the paper's claims (Section 4): its network and one change each (studies/claims.py)
    "claims": tuple(f"claims_{arm}" for arm in CLAIM_CHANGES),
}

# Arms a study no longer runs, by the name their committed runs' config.json records, with what
# they changed: ``launch/study.py --report_only`` still writes those folders' reports whole.
RETIRED = {
    "table2": {
        "cifar10_momentum_2016": "CIFAR-10 with the 2016 code's momentum update "
        "(tf.train.MomentumOptimizer: the accumulator in gradient units, so a rate drop shrinks "
        "the step at once), an arm while Keras' form was the default (until 2026-11-28); "
        "today's cifar10_paper",
    },
}


def about(name: str) -> str:
    """What the experiment or retired arm ``name`` changes (its one line)."""
    if name in EXPERIMENTS:
        return EXPERIMENTS[name].about
    return next(arms[name] for arms in RETIRED.values() if name in arms)
