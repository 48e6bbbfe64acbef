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
  These switches are a ``BlockConfig``, all that the block functions read, declared once
  (``configs.network_config``, with the networks' configs, ``ModelConfig`` and
  ``ImageNetConfig``: no Keras there, so a launcher answers a bad flag before any backend
  loads) and shared with the ImageNet network (:mod:`models.imagenet_model`).
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

from resnet_noBN.configs.choices import PRECISIONS, dtype_policy
from resnet_noBN.configs.network_config import BlockConfig, ModelConfig

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


# --init's choices (network_config.INITS), each its sigma(kernel_size, filters)
INIT_STDDEVS = {"hardt_ma": hardt_ma_stddev, "standard": standard_stddev, "he": he_stddev}


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


# The shape-changing shortcuts, by their --shortcut name (network_config.SHORTCUTS):
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
# (network_config.NORMALIZED)
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


# The block variants, by their --norm name (network_config.NORMS, on both networks). Adding
# one: a body function above, an entry here and its name in NORMS (docs/extending.md).
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


# --- The block the builders read ----------------------------------------------------------


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


# --- The network -----------------------------------------------------------------------------


def projection_head(x, num_classes: int, head: str = "random", decay: bool = True):
    """The last layer (``head``, ``network_config.HEADS``).

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


def print_summary(model: keras.Model) -> None:
    """The layer table, then ``name: count`` lines (:func:`param_counts`): ``--summary_only``."""
    model.summary(line_length=110)
    for name, value in param_counts(model).items():
        print(f"{name}: {value}")
