"""One residual block of each identity variant (resnet_noBN/models/blocks.py) with its weights set
away from their inits, and what its paper writes it computes, in float64 numpy (no Keras
backend): shared by tests/test_identity_init.py (TensorFlow, in its process) and
tests/block_probe.py (JAX and PyTorch, each in a process of its own).

The formulas, on x of c_in channels, out = s(x) + h(x), s the shortcut (x, or x average-pooled
2x2 and zero-padded to c_out channels, half on each side, where the block halves the size):

* hardt_ma, zero_last: h = C2(ReLU(C1 x)) (arXiv:1611.04231, Section 4);
* fixup: h = s·C2(ReLU(C1(x + b1) + b2) + b3) + b4 (arXiv:1901.09321, Section 3), its scalars'
  gradients at a tenth of their true value (``blocks.FIXUP_SCALAR_RATE``);
* skipinit: h = α·C2(ReLU(C1 x)) (arXiv:2002.10444, Section 4);
* preactivation: the 2016 code's unit with batch norm removed, h = C2(σ(C1(σ(x)))), σ its leaky
  ReLU (slope 0.1 below 0); ``preactivation_first``, the network's first block, takes its
  shortcut from σ(x), not x (the 2016 code's ``activate_before_residual``).

The loss is Σ out·probe; the expected gradients are its central differences in float64.
"""

from __future__ import annotations

import numpy as np

from resnet_noBN.theory.near_identity import convolve

VARIANTS = ("hardt_ma", "zero_last", "fixup", "skipinit", "preactivation", "preactivation_first")
SHAPES = {1: (4, 4), 2: (4, 8)}  # stride -> (c_in, c_out)
IMAGE = (2, 8, 8)  # batch, height, width
FIXUP_SCALARS = {"bias1": 0.5, "bias2": -0.25, "bias3": 0.75, "scale": 2.0, "bias4": 0.1}
SKIPINIT_ALPHA = 1.5
LEAK = 0.1  # the 2016 code's leaky ReLU (configs.experiments' cifar100_original_2016)
FIXUP_RATE = 0.1  # blocks.FIXUP_SCALAR_RATE: asserted equal by tests/test_identity_init.py


def block_config(variant: str) -> dict:
    """The network's switches of ``variant`` (``configs.experiments.IDENTITY_INITS``; the 2016
    code's unit as ``cifar100_original_2016`` builds it)."""
    if variant.startswith("preactivation"):
        return {"block": "preactivation", "relu_leakiness": LEAK}
    return {"block": variant, **({"init": "he"} if variant in ("fixup", "skipinit") else {})}


def build(variant: str, stride: int, channels: int | None = None, precision: str = "float32"):
    """A Keras model of one block ``b`` of ``variant`` in ``precision``, halving the size and
    doubling the channels at stride 2; ``channels``: that many in and out (stride 1) in place of
    :data:`SHAPES`'."""
    import keras

    from resnet_noBN.configs.network_config import ModelConfig
    from resnet_noBN.models.blocks import residual_block
    from resnet_noBN.models.layers import Block

    c_in, c_out = (channels, channels) if channels else SHAPES[stride]
    x = keras.Input((*IMAGE[1:], c_in))
    block = Block.of(ModelConfig(**block_config(variant)), precision)
    first = variant == "preactivation_first"
    out = residual_block(x, c_in, c_out, stride, block, "b", activate_before_residual=first)
    return keras.Model(x, out)


def params(variant: str, stride: int) -> dict[str, np.ndarray]:
    """The block's weights, by its layers' names, away from their inits: kernels drawn
    N(0, 0.3²) (C2 non-zero in every variant), Fixup's scalars and SkipInit's α as above."""
    c_in, c_out = SHAPES[stride]
    rng = np.random.default_rng(stride)
    found = {
        "b_conv1": rng.normal(0, 0.3, (3, 3, c_in, c_out)),
        "b_conv2": rng.normal(0, 0.3, (3, 3, c_out, c_out)),
    }
    if variant == "fixup":
        found.update({f"b_{name}": np.float64(v) for name, v in FIXUP_SCALARS.items()})
    if variant == "skipinit":
        found["b_alpha"] = np.float64(SKIPINIT_ALPHA)
    return found


def inputs(stride: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, probe): the block's input and the loss's weights on its output."""
    c_in, c_out = SHAPES[stride]
    rng = np.random.default_rng(10 + stride)
    out = (IMAGE[0], IMAGE[1] // stride, IMAGE[2] // stride, c_out)
    return rng.normal(size=(*IMAGE, c_in)), rng.normal(size=out)


def set_weights(model, values: dict) -> None:
    """``values`` (``params``) into ``model``'s layers of the same names."""
    for name, value in values.items():
        layer = model.get_layer(name)
        layer.set_weights([np.asarray(value, np.float32).reshape(layer.weights[0].shape)])


def layer_of(path: str) -> str:
    """The layer a variable's path names (``b_conv1/kernel`` -> ``b_conv1``)."""
    return path.split("/")[0]


def shortcut(x: np.ndarray, stride: int) -> np.ndarray:
    """x, or x average-pooled 2x2 and zero-padded to c_out channels, half on each side."""
    c_in, c_out = SHAPES[stride]
    if stride == 1:
        return x
    n, h, w, c = x.shape
    pooled = x.reshape(n, h // 2, 2, w // 2, 2, c).mean(axis=(2, 4))
    before = (c_out - c_in) // 2
    return np.pad(pooled, [(0, 0)] * 3 + [(before, c_out - c_in - before)])


def leaky(y: np.ndarray) -> np.ndarray:
    """The 2016 code's leaky ReLU: slope :data:`LEAK` below 0."""
    return np.where(y > 0, y, LEAK * y)


def formula(variant: str, values: dict, x: np.ndarray, stride: int) -> np.ndarray:
    """The block's output as its paper writes it, image by image, in float64."""

    def conv(images, kernel, s):
        return np.stack([convolve(image, kernel, s) for image in images])

    v = values
    if variant.startswith("preactivation"):
        branch = conv(leaky(conv(leaky(x), v["b_conv1"], stride)), v["b_conv2"], 1)
        return shortcut(leaky(x) if variant == "preactivation_first" else x, stride) + branch
    if variant == "fixup":
        y = conv(x + v["b_bias1"], v["b_conv1"], stride) + v["b_bias2"]
        y = conv(np.maximum(y, 0) + v["b_bias3"], v["b_conv2"], 1)
        branch = v["b_scale"] * y + v["b_bias4"]
    else:
        branch = conv(np.maximum(conv(x, v["b_conv1"], stride), 0), v["b_conv2"], 1)
        if variant == "skipinit":
            branch = v["b_alpha"] * branch
    return shortcut(x, stride) + branch


def expected(variant: str, stride: int, h: float = 1e-6) -> dict:
    """The formula's output and the loss's gradient for each weight (central differences, the
    rate's tenth applied to Fixup's scalars), from ``params`` and ``inputs``."""
    values, (x, probe) = params(variant, stride), inputs(stride)

    def loss(vals):
        return float(np.sum(formula(variant, vals, x, stride) * probe))

    grads = {}
    for name, value in values.items():
        flat = np.array(value, np.float64).reshape(-1)
        grad = np.empty_like(flat)
        for i in range(flat.size):
            up, down = flat.copy(), flat.copy()
            up[i] += h
            down[i] -= h
            shape = np.shape(value)
            grad[i] = (
                loss({**values, name: up.reshape(shape)})
                - loss({**values, name: down.reshape(shape)})
            ) / (2 * h)
        rate = FIXUP_RATE if variant == "fixup" and "conv" not in name else 1.0
        grads[name] = rate * grad.reshape(np.shape(value))
    return {"output": formula(variant, values, x, stride), "grads": grads}
