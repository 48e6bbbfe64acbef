"""The networks' configs (arXiv:1611.04231, Section 4, Table 1; the ImageNet network of its
Section 4), each field declared once: its default (the paper's), its flag's help and, for a
string, its choices. Plain dataclasses and names, no Keras: a launcher builds and checks a run
config, and answers a bad flag, before any backend loads.

The builders read them: ``models.layers``, ``models.blocks`` and ``models.networks`` (their
:data:`~resnet_noBN.models.layers.INIT_STDDEVS`, ``SHORTCUTS``, ``BLOCKS`` and ``NORMALIZERS``
hold one function for each name here, tested) and ``models.imagenet_model``.

* :class:`BlockConfig`: the switches of a residual block, shared by both networks;
* :class:`NetworkConfig`: those, the classes and the head;
* :class:`ModelConfig`: the CIFAR network, Table 1 by default (``presets.MODELS`` names others);
* :class:`ImageNetConfig`: the ImageNet network, ResNet-34's layout without max-pool.
"""

from __future__ import annotations

import dataclasses

from resnet_noBN.configs import presets
from resnet_noBN.configs.flag_config import check_choices

# --init: the residual convolutions' init (models.layers.INIT_STDDEVS)
INITS = ("hardt_ma", "standard", "he")
# --shortcut: the shape-changing shortcut (models.layers.SHORTCUTS)
SHORTCUTS = ("pool_pad", "projection")
# --block: the residual block (models.blocks.BLOCKS)
BLOCKS = ("hardt_ma", "preactivation", "fixup", "skipinit", "zero_last")
# --norm: what stands where the original code's unit normalises (models.blocks.NORMALIZERS)
NORMS = ("none", "batch")
# the blocks that normalise (read --norm): the original code's pre-activation unit
NORMALIZED = ("preactivation",)
# --head: the last layer: the paper's fixed random projection, the same trained, or the original
# code's trained fully connected layer with a bias (models.networks.projection_head)
HEADS = ("random", "trainable", "original_2016")
LAYOUTS = ("channels_last", "channels_first")
# --downsample: what replaces ResNet-34's max-pool in the ImageNet network
DOWNSAMPLES = ("block", "conv")


def upgraded(network: dict) -> dict:
    """A network recorded by an older version (a config.json's network section) in today's
    fields: before ``--block``, the original code's unit was ``--preactivation`` (recorded as
    ``preactivation``), or ``--norm=batch``, which always built it. A record with neither knew
    only the paper's block, today's default."""
    if "block" in network or not {"preactivation", "norm"} & network.keys():
        return network
    original = network.get("preactivation") or network.get("norm", "none") != "none"
    rest = {k: v for k, v in network.items() if k != "preactivation"}
    return {**rest, "block": "preactivation" if original else "hardt_ma"}


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """What a residual block reads: the switches both networks (CIFAR, ImageNet) share, each
    declared once, here: its default, its flag's help, and for a string its choices.

    The defaults are the paper's block, x + C2(ReLU(C1(x))) (arXiv:1611.04231, Section 4); the
    alternatives are the original code's (module docstring). Both networks' configs derive from
    this class (:class:`NetworkConfig`), so a field added here is a flag of both launchers,
    checked by :meth:`validate`, recorded in their config.json, and read by the block functions
    through :attr:`switches`.
    """

    init: str = dataclasses.field(
        default="hardt_ma",
        metadata={
            "choices": INITS,
            "help": "Residual conv init: hardt_ma sigma=1/(k^2 c) (the paper), standard "
            "1/(k sqrt(c)) (the paper's comparison point), he sqrt(2/(k^2 c)) (the "
            "original code's).",
        },
    )
    shortcut: str = dataclasses.field(
        default="pool_pad",
        metadata={
            "choices": SHORTCUTS,
            "help": "Shape-changing shortcuts: avg-pool + zero channels, or 1x1 projection.",
        },
    )
    conv_bias: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "A bias on every convolution (Table 1 has none; with projection shortcuts it "
            "gives the 13.59M of the paper's text)."
        },
    )
    relu_leakiness: float = dataclasses.field(
        default=0.0,
        metadata={
            "help": "Slope of the activation below 0: 0 is the paper's ReLU, 0.1 the original "
            "resnet_main.py's leaky ReLU."
        },
    )
    identity: bool = dataclasses.field(
        default=True,
        metadata={
            "help": "The identity shortcuts; --noidentity trains the same convolutions as a plain "
            "chain (the paper's title claim)."
        },
    )
    block: str = dataclasses.field(
        default="hardt_ma",
        metadata={
            "choices": BLOCKS,
            "help": "The residual block (models/blocks.py BLOCKS): hardt_ma, the paper's "
            "x + C2(ReLU(C1(x))); preactivation, the original 2016 code's unit "
            "x + C2(σ(N(C1(σ(N(x)))))) (two activations per block where Table 1's text has "
            "one), the stem's σ shared with the first shortcut, σ before the global pool; N is "
            "--norm. The paper's block started at the identity in other ways: fixup (Zhang et "
            "al. 2019: C2 at zero, C1 scaled by L^-1/2, a multiplier and four scalar biases per "
            "branch at a tenth of the rate; with --init=he), skipinit (De & Smith 2020: the "
            "branch times a learnable scalar starting at 0; with --init=he), zero_last (C2 at "
            "zero, C1 as --init).",
        },
    )
    norm: str = dataclasses.field(
        default="none",
        metadata={
            "choices": NORMS,
            "help": "What stands where the original code's unit normalises (--block="
            "preactivation): none (the 2016 code with batch norm removed, as the paper has it), "
            "or batch (its batch norm restored: BN, ReLU, conv, BN, ReLU, conv, the baseline the "
            "paper departs from; use with --init=he).",
        },
    )
    data_format: str = dataclasses.field(
        default="channels_last",
        metadata={
            "may_change": True,  # a layout: the same weights, checkpoints carry over
            "choices": LAYOUTS,
            "help": "Layout of the convolutions (channels_first can be faster on GPUs; the CPU "
            "kernels need channels_last). The input pipeline always yields NHWC.",
        },
    )

    @classmethod
    def of(cls, config) -> BlockConfig:
        """The block switches of a network's config; TypeError naming those it lacks (a config
        without a switch would otherwise build the default block, silently)."""
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [name for name in names if not hasattr(config, name)]
        if missing:
            raise TypeError(
                f"{type(config).__name__} lacks the block switch(es) {', '.join(missing)}; "
                "derive its class from BlockConfig"
            )
        return cls(**{name: getattr(config, name) for name in names})

    @property
    def switches(self) -> BlockConfig:
        """The block switches alone: all that the block functions get."""
        return BlockConfig.of(self)

    def validate(self) -> None:
        """Raise ValueError (one line, naming the fix) for an unknown switch (of this class or a
        subclass: every field with ``choices``)."""
        if not 0 <= self.relu_leakiness < 1:
            raise ValueError(f"--relu_leakiness must be in [0, 1), got {self.relu_leakiness}")
        check_choices(self)
        if self.norm != "none" and self.block not in NORMALIZED:
            raise ValueError(
                f"--norm={self.norm} stands where the original code's unit normalises: use it "
                f"with --block={' or '.join(NORMALIZED)}, not --block={self.block}"
            )

    def check_widths(self, first_width: int, stage_widths: tuple[int, ...]) -> None:
        """Raise ValueError for stage widths (after a first conv of ``first_width`` channels)
        that are not positive or that the shortcut cannot join."""
        widths = (first_width,) + tuple(stage_widths)
        for previous, width in zip(widths, widths[1:]):
            if width <= 0:
                raise ValueError(f"--stage_widths must be positive, got {stage_widths}")
            if self.shortcut == "pool_pad" and (width < previous or (width - previous) % 2):
                raise ValueError(
                    f"a pool_pad shortcut cannot go from {previous} to {width} channels (it pads "
                    "half on each side, so widths must not shrink and must grow by an even "
                    "number); change --stage_widths or use --shortcut=projection"
                )


@dataclasses.dataclass(frozen=True)
class NetworkConfig(BlockConfig):
    """What both networks' configs share: the block's switches (:class:`BlockConfig`), the
    classes and the head. :class:`ModelConfig` (CIFAR) and
    :class:`ImageNetConfig` derive from it."""

    num_classes: int = 10
    head: str = dataclasses.field(
        default="random",
        metadata={
            "choices": HEADS,
            "help": "Last layer: random, the paper's fixed random projection; trainable, the same "
            "trained; original_2016, the original code's trained layer with a zero-initialised "
            "bias and a uniform kernel of variance 1/fan_in.",
        },
    )
    head_decay: bool = dataclasses.field(
        default=True,
        metadata={
            "help": "Weight decay on a trained head's kernel, as the original code (its variable "
            "is named DW, like the kernels'); --nohead_decay leaves it undecayed. A fixed head "
            "is never decayed."
        },
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the fix) for an unknown switch or fewer than two
        classes."""
        super().validate()
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2, got {self.num_classes}")


@dataclasses.dataclass(frozen=True)
class ModelConfig(NetworkConfig):
    """The architecture, Table 1 by default; the fields with a ``help`` are flags of
    ``launch/cifar.py`` (it derives ``num_classes`` from the data set).

    The block's switches (``init`` .. ``data_format``, from :class:`BlockConfig`, at the paper's
    values), ``num_classes`` and ``head`` (:class:`NetworkConfig`), then the stages.
    :attr:`switches` is all that the block functions get. conv_bias defaults to False: Table 1's
    "55 convolutions, 13.5M parameters" are the kernels alone, the original ``_conv`` has no
    bias, and "the only trainable weights in our model are those of the convolutions"
    (Section 4).
    """

    num_residual_units: int = dataclasses.field(
        default=9, metadata={"help": "Residual blocks per stage."}
    )
    init_filters: int = dataclasses.field(
        default=16, metadata={"help": "Channels of the first, standard convolution."}
    )
    stage_widths: tuple[int, ...] = dataclasses.field(
        default=(64, 128, 256), metadata={"help": "Channels of each stage."}
    )
    # () derives them from the widths: the first stage keeps the resolution, each later one
    # halves it (Table 1: 1, 2, 2)
    stage_strides: tuple[int, ...] = ()

    def __post_init__(self):
        if not self.stage_strides:
            strides = (1,) + (2,) * (len(self.stage_widths) - 1)
            object.__setattr__(self, "stage_strides", strides)

    @property
    def residual_blocks(self) -> int:
        """The residual blocks of the network (Table 1: 27; Fixup's L)."""
        return self.num_residual_units * len(self.stage_widths)

    @classmethod
    def preset(cls, name: str, **changes) -> ModelConfig:
        """The named architecture of ``presets.MODELS`` (paper, quarter, small) with
        ``changes``."""
        return cls(**{**presets.MODELS[name], **changes})

    def validate(self) -> None:
        """Raise ValueError (one line, naming the fix) for an impossible architecture."""
        super().validate()
        if self.num_residual_units < 1:
            raise ValueError(f"--num_residual_units must be >= 1, got {self.num_residual_units}")
        if len(self.stage_widths) != len(self.stage_strides):
            raise ValueError(
                f"--stage_widths has {len(self.stage_widths)} stages but there are "
                f"{len(self.stage_strides)} stage strides; give one width per stage"
            )
        self.check_widths(self.init_filters, self.stage_widths)


@dataclasses.dataclass(frozen=True)
class ImageNetConfig(NetworkConfig):
    """The ImageNet architecture, ResNet-34's layout by default; the fields with a ``help`` are
    flags of ``launch/imagenet.py`` (not ``num_classes``, ``stem_kernel``, ``data_format``).

    The block's switches (``init`` .. ``data_format``), ``num_classes`` and ``head`` are
    :class:`NetworkConfig`'s, declared there once for both networks, at the
    paper's values (the block reads them through :attr:`switches`). ``stage_units`` /
    ``stage_widths`` / ``stem_filters`` / ``image_size`` shrink it for tests and smoke runs.
    """

    num_classes: int = 1000
    image_size: int = dataclasses.field(
        default=224,
        metadata={
            "help": "Side of the square training/evaluation crops (evaluation resizes the shorter "
            "side to image_size * 256 / 224 first)."
        },
    )
    stem_filters: int = dataclasses.field(
        default=64, metadata={"help": "Channels of the 7x7 stride-2 stem convolution."}
    )
    stem_kernel: int = 7
    stage_units: tuple[int, ...] = dataclasses.field(
        default=(3, 4, 6, 3), metadata={"help": "Residual blocks per stage."}
    )
    stage_widths: tuple[int, ...] = dataclasses.field(
        default=(64, 128, 256, 512), metadata={"help": "Channels of each stage."}
    )
    downsample: str = dataclasses.field(
        default="block",
        metadata={
            "choices": DOWNSAMPLES,
            "help": "What replaces ResNet-34's max-pool: block = stride 2 in stage 1's first "
            "block; conv = ReLU + 3x3 stride-2 conv after the stem (All-CNN).",
        },
    )

    @property
    def residual_blocks(self) -> int:
        """The residual blocks of the network (ResNet-34: 16; Fixup's L)."""
        return sum(self.stage_units)

    @property
    def stage_strides(self) -> tuple[int, ...]:
        """Stride of each stage's first block: 2 everywhere, the first stage's only if it
        replaces the max-pool (``downsample="block"``)."""
        first = 2 if self.downsample == "block" else 1
        return ((first,) + (2,) * (len(self.stage_widths) - 1))[: len(self.stage_widths)]

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for an impossible architecture."""
        super().validate()  # the block's switches, the head, --downsample's choices
        if len(self.stage_units) != len(self.stage_widths):
            raise ValueError(
                f"--stage_units has {len(self.stage_units)} stages but --stage_widths has "
                f"{len(self.stage_widths)}; give one width per stage"
            )
        if not self.stage_units or any(u < 1 for u in self.stage_units):
            raise ValueError(f"--stage_units must be >= 1 each, got {self.stage_units}")
        if self.stem_filters < 1 or self.stem_kernel < 1:
            raise ValueError(
                f"--stem_filters and the stem kernel must be >= 1, got "
                f"{self.stem_filters} and {self.stem_kernel}"
            )
        if self.image_size < 8:
            raise ValueError(f"--image_size must be >= 8, got {self.image_size}")
        self.check_widths(self.stem_filters, self.stage_widths)
