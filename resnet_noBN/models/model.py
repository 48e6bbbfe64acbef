"""The paper's all-convolutional residual network (arXiv:1611.04231, Section 4, Table 1).

Side by side with the original ``resnet/resnet_model.py`` of tensorflow/models:

* ``_conv`` there is :func:`conv` here: a ``k x k`` convolution, padding SAME, NO bias (the
  original relied on batch norm's shift), its kernel drawn from N(0, sigma^2) with
  sigma = sqrt(2 / (k^2 c)) (c = output channels) in the original code, and sigma = 1 / (k^2 c)
  for every residual convolution in the paper, "rather than 1/(k sqrt(c)) used for standard
  convolutional layers" ("This substantially smaller weight initialization helped training").
  ``init`` picks one of the three (:data:`INIT_STDDEVS`).
* ``_residual`` there is :func:`residual_block` here, with batch norm and the pre-activation
  ReLU removed: ``x + C2(ReLU(C1(x)))`` (Section 4). ``preactivation`` keeps the original's
  activations where batch norm stood (:func:`preactivation_body`): ``x + C2(σ(C1(σ(x))))``, the
  stem's σ shared with the first shortcut, σ before the global pool: the 2016 code with batch
  norm removed, as the paper says, and nothing else. The shortcut of a block that changes the
  shape is average pooling (kernel = stride) and zero-padding the channels, half on each side,
  exactly as the original; ``shortcut="projection"`` uses a 1x1 convolution instead
  (:data:`SHORTCUTS`).
* As the original picks ``res_func`` (and Keras applications take a ``block_fn``), a block
  variant is a function chosen by name from :data:`BLOCKS` (``norm``): ``"none"``, the paper's
  :func:`hardt_ma_body`; ``"batch"``, the original unit (BN, ReLU, conv, BN, ReLU, conv,
  :func:`preactivation_body`), the baseline the paper departs from; ``preactivation`` picks
  the original unit whatever the norm, with nothing where ``norm="none"`` (the 2016 code with
  batch norm removed). ``identity=False`` joins
  the same branch without its shortcut (:func:`plain_chain`, a plain chain of the same convs);
  ``relu_leakiness`` is the original's leaky ReLU (0.1 in ``resnet_main.py``; the paper: ReLU).
  These switches are a :class:`BlockConfig`, all that the block functions read, declared once
  and shared with the ImageNet network (:mod:`models.imagenet_model`), whose config derives
  from it as :class:`ModelConfig` does.
* ``_fully_connected`` there becomes a **fixed random projection** (:func:`projection_head`):
  the paper's last layer is "a fixed random projection", never trained. ``head="original_2016"``
  is the original's instead: trained, a zero-initialised bias, its kernel uniform of variance
  1/fan_in (``uniform_unit_scaling_initializer(1.0)``), weight-decayed unless ``head_decay`` is
  False (the original decays every variable named ``DW``, its kernel among them).

Precision is an argument, not a process-global policy (keras-hub's way): the builders take the
run's ``--precision`` and build every layer in its Keras dtype policy (``choices.dtype_policy``:
"float32", or "mixed_bfloat16": bfloat16 compute, float32 weights), through
:class:`Block`, except those of the residual stream. Only the convolutions and the activation
between them compute in bfloat16. The residual stream (the adds, the pool/pad shortcuts, the
global pool, the head) stays float32: at sigma = 1/(k^2 c) a branch adds ~1e-3 of the stream,
below bfloat16's relative step 2^-8, so a bfloat16 add would round most of each branch away.

Counts (tested): 55 convolutions; 13,538,736 trainable parameters, all of them kernel weights
(Table 1's "13.5M", the default); 13,546,816 with ``conv_bias``; 13,588,800 with conv biases and
1x1 projection shortcuts (58 convolutions), the "13.59 million" of the paper's text; the 2016
code's network (pre-activation, its head: 13,538,736 + 2,570 on CIFAR-10) has as many
convolutions as Table 1's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import keras
from keras import ops

from resnet_noBN.configs import presets
from resnet_noBN.configs.choices import PRECISIONS, dtype_policy
from resnet_noBN.configs.flag_config import check_choices

# the last layer: the paper's fixed random projection, the same trained, or the original code's
# trained fully connected layer with a bias (:func:`projection_head`)
HEADS = ("random", "trainable", "original_2016")
STREAM = "float32"  # the dtype of the residual stream under every precision policy


def he_stddev(kernel_size: int, filters: int) -> float:
    """sigma = sqrt(2 / (k^2 c)): the original code's init, kept for the first conv."""
    return math.sqrt(2.0 / (kernel_size * kernel_size * filters))


def hardt_ma_stddev(kernel_size: int, filters: int) -> float:
    """sigma = 1 / (k^2 c): the paper's init of every residual conv (Section 4)."""
    return 1.0 / (kernel_size * kernel_size * filters)


def standard_stddev(kernel_size: int, filters: int) -> float:
    """sigma = 1 / (k sqrt(c)): "used for standard convolutional layers", the paper's
    comparison point (Section 4)."""
    return 1.0 / (kernel_size * math.sqrt(filters))


INIT_STDDEVS = {"hardt_ma": hardt_ma_stddev, "standard": standard_stddev, "he": he_stddev}
INITS = tuple(INIT_STDDEVS)
LAYOUTS = ("channels_last", "channels_first")


def conv(
    x,
    filters: int,
    kernel_size: int,
    strides: int,
    stddev: float,
    block: Block,
    name: str,
    use_bias: bool | None = None,
):
    """A SAME-padded convolution with a N(0, stddev^2) kernel (the original ``_conv``).

    ``use_bias`` defaults to ``block.conv_bias``.
    """
    return keras.layers.Conv2D(
        filters,
        kernel_size,
        strides=strides,
        padding="same",
        use_bias=block.conv_bias if use_bias is None else use_bias,
        kernel_initializer=keras.initializers.RandomNormal(stddev=stddev),
        bias_initializer="zeros",
        data_format=block.data_format,
        name=name,
        dtype=block.dtype,
    )(x)


@keras.saving.register_keras_serializable(package="resnet_noBN")
class ZeroPadChannels(keras.layers.Layer):
    """Zero-pads the channel axis, ``before`` channels in front and ``after`` behind."""

    def __init__(self, before: int, after: int, data_format: str = "channels_last", **kwargs):
        super().__init__(**kwargs)
        self.before, self.after, self.data_format = before, after, data_format

    def call(self, x):
        axis = 3 if self.data_format == "channels_last" else 1
        paddings = [[0, 0]] * 4
        paddings[axis] = [self.before, self.after]
        return keras.ops.pad(x, paddings)

    def compute_output_shape(self, input_shape):
        axis = 3 if self.data_format == "channels_last" else 1
        shape = list(input_shape)
        shape[axis] += self.before + self.after
        return tuple(shape)

    def get_config(self):
        return {
            **super().get_config(),
            "before": self.before,
            "after": self.after,
            "data_format": self.data_format,
        }


def pool_pad_shortcut(x, in_filters: int, out_filters: int, strides: int, block: Block, name: str):
    """The original code's shortcut (and the paper's prose): average pooling with kernel = stride,
    then zero channels, half on each side."""
    if strides > 1:
        x = keras.layers.AveragePooling2D(
            strides,
            strides,
            padding="valid",
            data_format=block.data_format,
            name=f"{name}_pool",
            dtype=STREAM,
        )(x)
    if out_filters > in_filters:
        pad = (out_filters - in_filters) // 2
        x = ZeroPadChannels(
            pad, out_filters - in_filters - pad, block.data_format, name=f"{name}_pad", dtype=STREAM
        )(x)
    return x


def projection_shortcut(
    x, in_filters: int, out_filters: int, strides: int, block: Block, name: str
):
    """A linear 1x1 convolution with stride and no bias, He init (it carries the signal, like the
    first conv); with conv biases elsewhere this gives exactly the paper's 13.59M count
    (13,588,800)."""
    return conv(
        x,
        out_filters,
        1,
        strides,
        he_stddev(1, out_filters),
        block,
        name=f"{name}_projection",
        use_bias=False,
    )


# The shape-changing shortcuts, by their --shortcut name (the flag's choices):
# fn(x, in_filters, out_filters, strides, block, name) -> x in the block's output shape.
SHORTCUTS = {"pool_pad": pool_pad_shortcut, "projection": projection_shortcut}


def shortcut(x, in_filters: int, out_filters: int, strides: int, block: Block, name: str):
    """The identity, or, where the block changes the shape, its adjustment
    (``SHORTCUTS[block.shortcut]``)."""
    if in_filters == out_filters and strides == 1:
        return x
    return SHORTCUTS[block.shortcut](x, in_filters, out_filters, strides, block, name)


def activation(x, block: Block, name: str):
    """ReLU (the paper), or the original code's leaky ReLU with slope ``block.relu_leakiness``."""
    return keras.layers.ReLU(negative_slope=block.relu_leakiness, name=name, dtype=block.dtype)(x)


def batch_norm(x, block: Block, name: str):
    """The original ``_batch_norm``: decay 0.9 of the moving statistics, epsilon 0.001."""
    axis = -1 if block.data_format == "channels_last" else 1
    return keras.layers.BatchNormalization(
        axis=axis, momentum=0.9, epsilon=0.001, name=name, dtype=block.dtype
    )(x)


# --- Block variants --------------------------------------------------------------------------
# A variant's body builds one block's branch F:
#     body(x, out_filters, strides, block, name, first) -> (source, F(x))
# ``source`` is the tensor the shortcut starts from (x itself, for most); ``first`` is True for
# the network's first block; ``block`` is the Block (read your switches from it, and build
# layers with ``dtype=block.dtype``); layer names start with ``name`` (``stageS_unitU``), which
# checkpoints and tests depend on.
# :func:`residual_block` then joins them: x + F(x), or F(x) alone with --noidentity.


def hardt_ma_body(x, out_filters: int, strides: int, block: Block, name: str, first: bool = False):
    """C2(ReLU(C1(x))), the paper's block (arXiv:1611.04231, Section 4): no batch norm, one
    ReLU; C1 may have stride 2, C2 has stride 1; the shortcut starts from x."""
    stddev = INIT_STDDEVS[block.init](3, out_filters)
    y = conv(x, out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(y, block, f"{name}_relu")
    return x, conv(y, out_filters, 3, 1, stddev, block, name=f"{name}_conv2")


def no_norm(x, block: Block, name: str):
    """Nothing: where the original code had batch norm, the paper has none (Section 4)."""
    return x


# What stands where the original code's pre-activation unit normalises, by --norm: nothing (the
# 2016 code with batch norm removed, --preactivation), or the original's batch norm
NORMALIZERS = {"none": no_norm, "batch": batch_norm}


def preactivation_body(
    x, out_filters: int, strides: int, block: Block, name: str, first: bool = False
):
    """The original code's pre-activation ``_residual``: C2(σ(N(C1(σ(N(x)))))), N its batch norm
    (``--norm=batch``, the baseline the paper departs from) or nothing (``--preactivation``: the
    2016 code with batch norm removed, two activations per block where Table 1's text has one).
    The shortcut starts from x, before the first N and σ, except in the network's first block,
    from σ(N(x)) (the original's first unit, ``activate_before_residual``: the stem's σ shared by
    the shortcut and the branch)."""
    normalize = NORMALIZERS[block.norm]
    stddev = INIT_STDDEVS[block.init](3, out_filters)
    activated = activation(normalize(x, block, f"{name}_bn1"), block, f"{name}_relu0")
    y = conv(activated, out_filters, 3, strides, stddev, block, name=f"{name}_conv1")
    y = activation(normalize(y, block, f"{name}_bn2"), block, f"{name}_relu")
    y = conv(y, out_filters, 3, 1, stddev, block, name=f"{name}_conv2")
    return (activated if first else x), y


def preactivation_end(x, block: Block):
    """The original's ``unit_last``: N and σ after the last pre-activation block, before the
    global pool."""
    return activation(NORMALIZERS[block.norm](x, block, "final_bn"), block, "final_relu")


@dataclasses.dataclass(frozen=True)
class BlockVariant:
    """A registered block: its ``body`` (above), and ``end``, what the network applies to the
    last block's output before the global pool (``end(x, block) -> x``; None: nothing)."""

    body: Callable
    end: Callable | None = None


# The block variants, by their --norm name (the flag's choices, on both networks). Adding one:
# a body function above and an entry here (README: "How to add an ablation").
BLOCKS = {
    "none": BlockVariant(hardt_ma_body),
    "batch": BlockVariant(preactivation_body, end=preactivation_end),
}


def block_variant(block: BlockConfig) -> BlockVariant:
    """The variant a network's switches pick: ``BLOCKS[block.norm]``, or under
    ``--preactivation`` the original's pre-activation unit (without batch norm where
    ``--norm=none``)."""
    return BLOCKS["batch" if block.preactivation else block.norm]


def add_shortcut(
    source, branch, in_filters: int, out_filters: int, strides: int, block: Block, name: str
):
    """x + F(x): the branch added to the shortcut (shape-adjusted where the block changes it),
    in float32 (the residual stream)."""
    return keras.layers.Add(name=f"{name}_add", dtype=STREAM)(
        [shortcut(source, in_filters, out_filters, strides, block, name), branch]
    )


def plain_chain(
    source, branch, in_filters: int, out_filters: int, strides: int, block: Block, name: str
):
    """F(x) alone: the same convolutions as a plain chain, no shortcut (``--noidentity``; the
    paper's title claim, Sections 1-2)."""
    return branch


def residual_block(
    x,
    in_filters: int,
    out_filters: int,
    strides: int,
    block: Block,
    name: str,
    activate_before_residual: bool = False,
):
    """One block: the variant :func:`block_variant` picks builds the branch F, then
    :func:`add_shortcut` gives x + F(x), or (``block.identity`` False) :func:`plain_chain`
    F(x). ``activate_before_residual``: the network's first block (the body's ``first``)."""
    source, branch = block_variant(block).body(
        x, out_filters, strides, block, name, activate_before_residual
    )
    join = add_shortcut if block.identity else plain_chain
    return join(source, branch, in_filters, out_filters, strides, block, name)


# --- Configs ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BlockConfig:
    """What a residual block reads: the switches both networks (CIFAR, ImageNet) share, each
    declared once, here: its default, its flag's help, and for a string its choices.

    The defaults are the paper's block, x + C2(ReLU(C1(x))) (arXiv:1611.04231, Section 4); the
    alternatives are the original code's (module docstring). Both networks' configs derive from
    this class (:class:`NetworkConfig`), so a field added here is a flag of both launchers,
    checked by :meth:`validate`, recorded in their config.json, and read by the block functions
    through :attr:`block`.
    """

    init: str = dataclasses.field(
        default="hardt_ma",
        metadata={
            "choices": INIT_STDDEVS,
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
    norm: str = dataclasses.field(
        default="none",
        metadata={
            "choices": BLOCKS,
            "help": "The block variant (models/model.py BLOCKS): none is the paper's; batch: "
            "the original code's pre-activation unit with batch norm restored (BN, ReLU, conv, "
            "BN, ReLU, conv), the baseline the paper departs from; use with --init=he.",
        },
    )
    preactivation: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "The original 2016 code's activations, its batch norm removed: "
            "x + C2(σ(C1(σ(x)))) (two per block where Table 1's text has one), the stem's σ "
            "shared with the first shortcut, σ before the global pool. --norm=batch always has "
            "them (the original unit)."
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
    def block(self) -> BlockConfig:
        """The block switches alone: all that the block functions get."""
        return BlockConfig.of(self)

    def validate(self) -> None:
        """Raise ValueError (one line, naming the fix) for an unknown switch (of this class or a
        subclass: every field with ``choices``)."""
        if not 0 <= self.relu_leakiness < 1:
            raise ValueError(f"--relu_leakiness must be in [0, 1), got {self.relu_leakiness}")
        check_choices(self)
        if self.preactivation and self.norm not in NORMALIZERS:
            raise ValueError(
                f"--preactivation is the original code's unit: use it with --norm="
                f"{' or '.join(NORMALIZERS)}, not --norm={self.norm}"
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
class Block(BlockConfig):
    """What the block functions get: a network's switches (:class:`BlockConfig`) and ``dtype``,
    the Keras dtype policy their layers are built with (the runtime's ``--precision``, given to
    the builder; not a switch of the network: checkpoints carry over between precisions)."""

    dtype: str = "float32"

    @classmethod
    def of(cls, config, precision: str = "float32") -> Block:
        """The block switches of a network's config, built in the dtype policy of ``precision``
        (``choices.dtype_policy``; ValueError naming --precision for an unknown one)."""
        if precision not in PRECISIONS:
            raise ValueError(
                f"--precision={precision} is unknown; choose one of {', '.join(PRECISIONS)}"
            )
        return cls(**dataclasses.asdict(BlockConfig.of(config)), dtype=dtype_policy(precision))


@dataclasses.dataclass(frozen=True)
class NetworkConfig(BlockConfig):
    """What both networks' configs share: the block's switches (:class:`BlockConfig`), the
    classes and the head. :class:`ModelConfig` (CIFAR) and
    :class:`resnet_noBN.models.imagenet_model.ImageNetConfig` derive from it."""

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
    :attr:`block` is all that the block functions get. conv_bias defaults to False: Table 1's
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


# --- The network -----------------------------------------------------------------------------


def projection_head(x, num_classes: int, head: str = "random", decay: bool = True):
    """The last layer (``head``, :data:`HEADS`).

    ``random`` (the paper's): a projection W x, W ~ N(0, 1/fan_in), no bias, never trained. The
    paper fixes it ("a fixed random projection"; it "slightly improved test error"), but gives no
    distribution: we take a Gaussian scaled by 1/sqrt(fan_in), which keeps the logits' scale that
    of the pooled features. Its kernel is a non-trainable weight: no optimizer sees it, so
    training leaves it bit-for-bit unchanged, and it is saved in every checkpoint, so a resumed
    run keeps the same projection. ``trainable``: the same layer, trained. ``original_2016``: the
    original ``_fully_connected``, trained, W uniform in ±sqrt(3/fan_in) (its
    ``uniform_unit_scaling_initializer(factor=1.0)``: the same variance 1/fan_in) and a bias
    initialised to zero. ``decay``: whether a trained kernel is weight-decayed
    (:func:`decayed_weights` reads it from the layer).
    """
    fan_in = x.shape[-1]
    original = head == "original_2016"
    layer = keras.layers.Dense(
        num_classes,
        use_bias=original,
        trainable=head != "random",
        name="projection",
        dtype=STREAM,
        kernel_initializer=(
            keras.initializers.VarianceScaling(1.0, "fan_in", "uniform")
            if original
            else keras.initializers.RandomNormal(stddev=1.0 / math.sqrt(fan_in))
        ),
        bias_initializer="zeros",
    )
    layer.weight_decay = decay and head != "random"
    return layer(x)


def residual_stages(
    x,
    in_filters: int,
    stage_units: tuple[int, ...],
    stage_widths: tuple[int, ...],
    stage_strides: tuple[int, ...],
    block: Block,
):
    """The residual stages: stage s has ``stage_units[s]`` blocks of ``stage_widths[s]``
    channels, its first block with stride ``stage_strides[s]`` (Table 1: 9, 9, 9 blocks of
    64, 128, 256 channels, strides 1, 2, 2)."""
    for stage, (units, width, strides) in enumerate(
        zip(stage_units, stage_widths, stage_strides), start=1
    ):
        for unit in range(units):
            x = residual_block(
                x,
                in_filters,
                width,
                strides if unit == 0 else 1,
                block,
                name=f"stage{stage}_unit{unit}",
                activate_before_residual=stage == 1 and unit == 0,
            )
            in_filters = width
    return x


def pool_and_project(x, block: Block, num_classes: int, head: str, head_decay: bool = True):
    """Global average pooling, then the fixed (or, as an ablation, trained) projection.

    First the block variant's ``end``, if it has one (the pre-activation units: the original's
    last normalisation and activation, its ``unit_last``)."""
    end = block_variant(block).end
    if end is not None:
        x = end(x, block)
    x = keras.layers.GlobalAveragePooling2D(
        data_format=block.data_format, name="global_pool", dtype=STREAM
    )(x)
    return projection_head(x, num_classes, head, head_decay)


def image_input(size: int, block: Block):
    """(the Keras input of NHWC images, the tensor in the model's layout)."""
    inputs = keras.Input((size, size, 3), name="images")
    if block.data_format == "channels_first":
        permute = keras.layers.Permute((3, 1, 2), name="to_channels_first", dtype=block.dtype)
        return inputs, permute(inputs)
    return inputs, inputs


def build_cifar_model(cfg: ModelConfig = ModelConfig(), precision: str = "float32") -> keras.Model:
    """The CIFAR network of Table 1: logits for 32x32x3 per-image standardised images, its
    layers built in the dtype policy of ``precision`` (the residual stream's in float32).

    Weights are drawn from Keras' global generator: call ``keras.utils.set_random_seed`` first
    for a repeatable model.
    """
    cfg.validate()
    block = Block.of(cfg, precision)
    inputs, x = image_input(32, block)
    x = conv(x, cfg.init_filters, 3, 1, he_stddev(3, cfg.init_filters), block, name="init_conv")
    x = residual_stages(
        x,
        cfg.init_filters,
        (cfg.num_residual_units,) * len(cfg.stage_widths),
        cfg.stage_widths,
        cfg.stage_strides,
        block,
    )
    logits = pool_and_project(x, block, cfg.num_classes, cfg.head, cfg.head_decay)
    return keras.Model(inputs, logits, name="resnet_noBN_cifar")


def decayed_weights(model: keras.Model) -> list:
    """The weights under weight decay: every conv kernel, and the head's kernel if trained and
    decayed (``head_decay``, :func:`projection_head`).

    As the original code's ``_decay``, which decays the variables named ``DW`` (kernels, not
    biases); a fixed head is not a parameter, so it is not decayed.
    """
    return [
        layer.kernel
        for layer in model.layers
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense))
        and layer.trainable
        and getattr(layer, "weight_decay", True)
    ]


def weight_decay_loss(weights: list, rate: float):
    """rate * sum ||W||^2 / 2 over ``weights`` (:func:`decayed_weights`, or their values in a
    stateless step): the original ``tf.nn.l2_loss`` form, in float32.

    (Keras' ``regularizers.l2(rate)`` would be rate * sum ||W||^2, twice this.)
    """
    return rate * sum(ops.sum(ops.square(ops.cast(w, "float32"))) for w in weights) / 2


def param_counts(model: keras.Model) -> dict[str, int]:
    """Trainable / non-trainable parameter counts, and convolutions and their kernel weights."""
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    return {
        "trainable_params": sum(int(math.prod(w.shape)) for w in model.trainable_weights),
        "non_trainable_params": sum(int(math.prod(w.shape)) for w in model.non_trainable_weights),
        "convolutions": len(convs),
        "conv_kernel_weights": sum(int(math.prod(c.kernel.shape)) for c in convs),
    }
