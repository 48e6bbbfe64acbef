"""The analytic FLOP count of the paper's CIFAR network (arXiv:1611.04231, Section 4, Table 1):
per image, from the layer shapes, a multiply-add counting 2 FLOPs; and the same count read off a
built Keras model, which checks it (``keras_model_flops``).

Plain Python: the PyTorch twin (``torch_twin.py``) counts with it before any backend loads;
Keras is imported only inside ``keras_model_flops``.
"""

from __future__ import annotations

import math


def conv_flops(kernel: int, c_in: int, c_out: int, h_out: int, w_out: int) -> int:
    """FLOPs of one k x k convolution on one image: 2 k^2 c_in c_out H_out W_out (a multiply-add
    is 2 FLOPs; bias, padding and the stride's skipped positions are not counted)."""
    return 2 * kernel * kernel * c_in * c_out * h_out * w_out


def model_flops(
    num_classes: int = 10,
    num_residual_units: int = 9,
    init_filters: int = 16,
    stage_widths=(64, 128, 256),
    stage_strides=(1, 2, 2),
    shortcut: str = "pool_pad",
    image_size: int = 32,
    **_ignored,
) -> dict:
    """Analytic FLOPs per image of the CIFAR network (arXiv:1611.04231 Table 1 by default).

    Forward: every conv (first conv, C1 and C2 of each block, and 1x1 projection shortcuts if
    ``shortcut="projection"``) plus the head's matmul; element-wise ops (bias, ReLU, add, pools)
    are left out (< 0.1%). A training step costs ~3x the forward pass (the backward pass computes
    the input and the weight gradient, each as costly as the forward conv); the first conv's
    input gradient is not needed, which this rounds over (< 0.03%).
    """
    size = image_size
    convs = conv_flops(3, 3, init_filters, size, size)
    c_in = init_filters
    for width, stride in zip(stage_widths, stage_strides, strict=True):
        for unit in range(num_residual_units):
            s = stride if unit == 0 else 1
            size = -(-size // s)  # SAME padding
            convs += conv_flops(3, c_in, width, size, size) + conv_flops(
                3, width, width, size, size
            )
            if shortcut == "projection" and (c_in != width or s != 1):
                convs += conv_flops(1, c_in, width, size, size)
            c_in = width
    head = 2 * c_in * num_classes
    forward = convs + head
    return {
        "forward_flops_per_image": forward,
        "conv_flops_per_image": convs,
        "head_flops_per_image": head,
        "train_flops_per_image": 3 * forward,
    }


def keras_model_flops(model) -> int:
    """Forward FLOPs per image read off a built Keras model's layers (Conv2D and Dense): the
    same count as :func:`model_flops`, from the kernels' and outputs' shapes."""
    import keras

    total = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.Conv2D):
            kh, kw, c_in, c_out = layer.kernel.shape
            shape = layer.output.shape
            h, w = (
                (shape[1], shape[2])
                if layer.data_format == "channels_last"
                else (shape[2], shape[3])
            )
            total += 2 * kh * kw * c_in * c_out * h * w
        elif isinstance(layer, keras.layers.Dense):
            total += 2 * math.prod(layer.kernel.shape)
    return int(total)
