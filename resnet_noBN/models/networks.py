"""The paper's CIFAR network (arXiv:1611.04231, Section 4, Table 1) and the parts the ImageNet
network shares with it (:mod:`models.imagenet_model`): the stages of residual blocks
(:mod:`models.blocks`), the global pool and the last layer, which the paper makes a **fixed
random projection** (:func:`projection_head`); the weights weight decay reads, and the counts.

Side by side with the original ``resnet/resnet_model.py``: ``_fully_connected`` there becomes
:func:`projection_head`: the paper's last layer is "a fixed random projection", never trained.
``head="original_2016"`` is the original's instead: trained, a zero-initialised bias, its kernel
uniform of variance 1/fan_in (``uniform_unit_scaling_initializer(1.0)``), weight-decayed unless
``head_decay`` is False (the original decays every variable named ``DW``, its kernel among them).

Counts (tested): 55 convolutions; 13,538,736 trainable parameters, all of them kernel weights
(Table 1's "13.5M", the default); 13,546,816 with ``conv_bias``; 13,588,800 with conv biases and
1x1 projection shortcuts (58 convolutions), the "13.59 million" of the paper's text; the 2016
code's network (pre-activation, its head: 13,538,736 + 2,570 on CIFAR-10) has as many
convolutions as Table 1's.
"""

from __future__ import annotations

import math

import keras
from keras import ops

from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.models.blocks import block_variant, residual_block
from resnet_noBN.models.layers import STREAM, Block, conv, he_stddev


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


def image_input(size: int, block: Block, preprocess=None):
    """(the Keras input of NHWC images, the tensor in the model's layout), the layer
    ``preprocess`` applied first where one is given (an exported model's normalisation of raw
    pixels, ``datasets.normalization``)."""
    inputs = keras.Input((size, size, 3), name="images")
    x = inputs if preprocess is None else preprocess(inputs)
    if block.data_format == "channels_first":
        permute = keras.layers.Permute((3, 1, 2), name="to_channels_first", dtype=block.dtype)
        return inputs, permute(x)
    return inputs, x


def build_cifar_model(
    cfg: ModelConfig = ModelConfig(), precision: str = "float32", preprocess=None
) -> keras.Model:
    """The CIFAR network of Table 1: logits for 32x32x3 per-image standardised images (or for
    raw ones, given the layer that standardises them as ``preprocess``), its layers built in the
    dtype policy of ``precision`` (the residual stream's in float32).

    Weights are drawn from Keras' global generator: call ``keras.utils.set_random_seed`` first
    for a repeatable model.
    """
    cfg.validate()
    block = Block.of(cfg, precision)
    inputs, x = image_input(32, block, preprocess)
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
