"""The layers of the paper's network (arXiv:1611.04231, Section 4, Table 1), and :class:`Block`,
what every layer function reads. Side by side with the original ``resnet/resnet_model.py`` of
tensorflow/models:

* ``_conv`` there is :func:`conv` here: a ``k x k`` convolution, padding SAME, NO bias (the
  original relied on batch norm's shift), its kernel drawn from N(0, sigma^2) with
  sigma = sqrt(2 / (k^2 c)) (c = output channels) in the original code, and sigma = 1 / (k^2 c)
  for every residual convolution in the paper, "rather than 1/(k sqrt(c)) used for standard
  convolutional layers" ("This substantially smaller weight initialization helped training").
  ``init`` picks one of the three (:data:`INIT_STDDEVS`).
* The shortcut of a block that changes the shape is average pooling (kernel = stride) and
  zero-padding the channels, half on each side, exactly as the original;
  ``shortcut="projection"`` uses a 1x1 convolution instead (:data:`SHORTCUTS`).
* ``relu_leakiness`` is the original's leaky ReLU (0.1 in ``resnet_main.py``; the paper: ReLU);
  :func:`batch_norm` the original's ``_batch_norm`` (the baseline the paper departs from).

Precision is an argument, not a process-global policy (keras-hub's way): the builders take the
run's ``--precision`` and build every layer in its Keras dtype policy (``choices.dtype_policy``:
"float32", or "mixed_bfloat16": bfloat16 compute, float32 weights), through
:class:`Block`, except those of the residual stream (:data:`STREAM`). Only the convolutions and
the activation between them compute in bfloat16. The residual stream (the adds, the pool/pad
shortcuts, the global pool, the head) stays float32: at sigma = 1/(k^2 c) a branch adds ~1e-3 of
the stream, below bfloat16's relative step 2^-8, so a bfloat16 add would round most of each
branch away.

The blocks built from these layers: :mod:`models.blocks`; the networks: :mod:`models.networks`
and :mod:`models.imagenet_model`.
"""

from __future__ import annotations

import dataclasses
import math

import keras
from keras import ops

from resnet_noBN.configs.choices import PRECISIONS, dtype_policy
from resnet_noBN.configs.network_config import BlockConfig

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
    """A SAME-padded convolution with a N(0, stddev^2) kernel (the original ``_conv``); a
    ``stddev`` of 0 is a kernel of exact zeros (a branch's last convolution in Fixup and
    ``zero_last``, :mod:`models.blocks`).

    ``use_bias`` defaults to ``block.conv_bias``.
    """
    return keras.layers.Conv2D(
        filters,
        kernel_size,
        strides=strides,
        padding="same",
        use_bias=block.conv_bias if use_bias is None else use_bias,
        kernel_initializer=(
            keras.initializers.RandomNormal(stddev=stddev) if stddev else keras.initializers.Zeros()
        ),
        bias_initializer="zeros",
        data_format=block.data_format,
        name=name,
        dtype=block.dtype,
    )(x)


@keras.saving.register_keras_serializable(package="resnet_noBN")
class Scalar(keras.layers.Layer):
    """One learnable number applied to the whole tensor: ``x * s`` (``op="multiply"``) or
    ``x + s`` (``op="add"``), ``s`` starting at ``initial``. Fixup's multipliers and biases and
    SkipInit's branch scalar (:mod:`models.blocks`).

    ``rate``: the learning rate of ``s`` relative to the network's. Its gradient is scaled by
    ``rate`` (the value computed is ``s`` exactly: ``stop_gradient(s) + rate * (s -
    stop_gradient(s))``), which under SGD, in either form of momentum, is the update of a rate
    ``rate`` times the schedule's: both are linear in the gradient. It lives in the model, so
    every backend's step and a resumed run see it. Never weight-decayed (not a convolution:
    ``networks.decayed_weights``).
    """

    OPS = ("multiply", "add")

    def __init__(self, op: str, initial: float, rate: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        if op not in self.OPS:
            raise ValueError(f"Scalar op must be one of {', '.join(self.OPS)}, got {op}")
        self.op, self.initial, self.rate = op, float(initial), float(rate)

    def build(self, input_shape):
        self.scalar = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(self.initial), name="scalar"
        )

    def call(self, x):
        s = ops.cast(self.scalar, x.dtype)
        if self.rate != 1.0:
            held = ops.stop_gradient(s)
            s = held + self.rate * (s - held)
        return x * s if self.op == "multiply" else x + s

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "op": self.op, "initial": self.initial, "rate": self.rate}


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


@dataclasses.dataclass(frozen=True)
class Block(BlockConfig):
    """What the block functions get: a network's switches (:class:`BlockConfig`), ``dtype``,
    the Keras dtype policy their layers are built with (the runtime's ``--precision``, given to
    the builder; not a switch of the network: checkpoints carry over between precisions), and
    ``residual_blocks``, the network's number of residual branches (Fixup's L)."""

    dtype: str = "float32"
    residual_blocks: int = 1

    @classmethod
    def of(cls, config, precision: str = "float32") -> Block:
        """The block switches of a network's config (and its ``residual_blocks``), built in the
        dtype policy of ``precision`` (``choices.dtype_policy``; ValueError naming --precision
        for an unknown one)."""
        if precision not in PRECISIONS:
            raise ValueError(
                f"--precision={precision} is unknown; choose one of {', '.join(PRECISIONS)}"
            )
        return cls(
            **dataclasses.asdict(BlockConfig.of(config)),
            dtype=dtype_policy(precision),
            residual_blocks=config.residual_blocks,
        )
