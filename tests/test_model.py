"""The CIFAR model against PAPER.md section 1 / Table 1: counts, structure, init, head, decay."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet_noBN.model import (ModelConfig, build_cifar_model, decayed_weights, param_counts,
                               weight_decay_loss)

SMALL = ModelConfig(num_residual_units=1, stage_widths=(16, 32, 64))


@pytest.fixture(scope="module")
def paper_model():
    keras.utils.set_random_seed(0)
    return build_cifar_model(ModelConfig())


def test_paper_counts(paper_model):
    assert param_counts(paper_model) == {
        "trainable_params": 13_546_816, "non_trainable_params": 256 * 10,
        "convolutions": 55, "conv_kernel_weights": 13_538_736}


@pytest.mark.parametrize("cfg, trainable, non_trainable", [
    (ModelConfig(conv_bias=False), 13_538_736, 2_560),
    (ModelConfig(shortcut="projection"), 13_588_800, 2_560),  # the paper's "13.59M"
    (ModelConfig(num_classes=100), 13_546_816, 25_600),
    (ModelConfig(head="trainable"), 13_546_816 + 2_560, 0),
])
def test_ablation_counts(cfg, trainable, non_trainable):
    counts = param_counts(build_cifar_model(cfg))
    assert (counts["trainable_params"], counts["non_trainable_params"]) == (
        trainable, non_trainable)


def test_no_batch_norm_dropout_or_max_pool(paper_model):
    names = {type(layer).__name__ for layer in paper_model.layers}
    assert not {n for n in names if "Norm" in n or "Dropout" in n or "MaxPool" in n}
    assert names <= {"InputLayer", "Conv2D", "ReLU", "Add", "AveragePooling2D",
                     "ZeroPadChannels", "GlobalAveragePooling2D", "Dense"}
    # one ReLU per residual block, none elsewhere
    assert sum(isinstance(layer, keras.layers.ReLU) for layer in paper_model.layers) == 27


def test_stage_shapes_and_output(paper_model):
    for name, shape in [("stage1_unit8_add", (None, 32, 32, 64)),
                        ("stage2_unit0_add", (None, 16, 16, 128)),
                        ("stage3_unit8_add", (None, 8, 8, 256))]:
        assert tuple(paper_model.get_layer(name).output.shape) == shape
    out = paper_model(np.zeros((2, 32, 32, 3), np.float32))
    assert out.shape == (2, 10)


def _std(layer):
    return float(np.std(layer.kernel.numpy()))


def test_residual_init_is_one_over_k2c(paper_model):
    """sigma = 1/(k^2 c): ~36,864+ draws per conv, so the sample std is within 3% (>8 SE)."""
    for layer in paper_model.layers:
        if isinstance(layer, keras.layers.Conv2D) and layer.name.startswith("stage"):
            c = layer.filters
            assert _std(layer) == pytest.approx(1 / (9 * c), rel=0.03), layer.name
            assert abs(float(np.mean(layer.kernel.numpy()))) < 4 / (9 * c) / math.sqrt(
                layer.kernel.numpy().size) * 3
            np.testing.assert_array_equal(layer.bias.numpy(), 0)
    # the first, standard conv keeps the original sqrt(2/(k^2 c)) (432 draws: within 15%)
    assert _std(paper_model.get_layer("init_conv")) == pytest.approx(math.sqrt(2 / 144), rel=0.15)


def test_standard_init_ablation():
    keras.utils.set_random_seed(1)
    model = build_cifar_model(ModelConfig(init="standard", num_residual_units=1))
    conv = model.get_layer("stage2_unit0_conv2")
    assert _std(conv) == pytest.approx(math.sqrt(2 / (9 * 128)), rel=0.03)


def test_head_is_fixed_gaussian_projection(paper_model):
    head = paper_model.get_layer("projection")
    assert not head.trainable and head.bias is None
    assert all(w is not head.kernel for w in paper_model.trainable_weights)
    assert _std(head) == pytest.approx(1 / 16, rel=0.1)  # N(0, 1/fan_in), fan_in = 256


def test_same_seed_same_weights():
    keras.utils.set_random_seed(7)
    a = build_cifar_model(SMALL).get_weights()
    keras.utils.set_random_seed(7)
    b = build_cifar_model(SMALL).get_weights()
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_pool_pad_shortcut_values():
    """Average pooling (kernel = stride) and zero channels, half on each side."""
    keras.utils.set_random_seed(0)
    model = build_cifar_model(SMALL)
    x = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype(np.float32)
    inner = keras.Model(model.input, [model.get_layer("stage1_unit0_add").output,
                                      model.get_layer("stage2_unit0_pad").output])
    block_in, shortcut = (t.numpy() for t in inner(x))
    assert shortcut.shape == (2, 16, 16, 32)
    pooled = block_in.reshape(2, 16, 2, 16, 2, 16).mean(axis=(2, 4))
    np.testing.assert_allclose(shortcut[..., 8:24], pooled, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(shortcut[..., :8], 0)
    np.testing.assert_array_equal(shortcut[..., 24:], 0)


def test_projection_shortcut_shape():
    model = build_cifar_model(ModelConfig(num_residual_units=1, shortcut="projection"))
    proj = model.get_layer("stage2_unit0_projection")
    assert proj.kernel.shape == (1, 1, 64, 128) and proj.bias is None
    assert tuple(proj.output.shape) == (None, 16, 16, 128)


def test_weight_decay_is_l2_loss_over_kernels():
    """rate * sum ||W||^2 / 2 over conv kernels (tf.nn.l2_loss), biases and fixed head excluded."""
    model = build_cifar_model(SMALL)
    for w in model.weights:
        w.assign(np.full(w.shape, 0.5, np.float32))
    kernels = decayed_weights(model)
    assert len(kernels) == 7  # 1 + 3 stages x 2 convs
    n = sum(int(np.prod(k.shape)) for k in kernels)
    expected = 1e-4 * n * 0.25 / 2
    assert float(weight_decay_loss(model, 1e-4)) == pytest.approx(expected, rel=1e-6)
    trainable_head = build_cifar_model(ModelConfig(num_residual_units=1, head="trainable"))
    head_kernel = trainable_head.get_layer("projection").kernel
    assert any(w is head_kernel for w in decayed_weights(trainable_head))


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_residual_units=0), "--num_residual_units must be >= 1"),
    (dict(stage_widths=(64, 48, 256)), "cannot go from 64 to 48 channels"),
    (dict(stage_widths=(64, 129, 256)), "cannot go from 64 to 129 channels"),
    (dict(stage_widths=(64, 128)), "give one width per stage"),
    (dict(init="he"), "--init=he is unknown"),
])
def test_impossible_architectures(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kwargs).validate()


def test_channels_first_same_function():
    """The layout is a speed choice only: the same weights give the same logits."""
    keras.utils.set_random_seed(3)
    last = build_cifar_model(SMALL)
    first = build_cifar_model(ModelConfig(num_residual_units=1, stage_widths=(16, 32, 64),
                                          data_format="channels_first"))
    first.set_weights(last.get_weights())
    x = np.random.default_rng(1).normal(size=(2, 32, 32, 3)).astype(np.float32)
    if not tf.config.list_physical_devices("GPU"):  # CPU convs need NHWC: compare shapes only
        assert first.output.shape == last.output.shape
        return
    np.testing.assert_allclose(first(x), last(x), rtol=1e-4, atol=1e-5)
