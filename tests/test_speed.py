"""Speed never changes the mathematics: XLA and bfloat16 against the plain float32 step."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from resnet_noBN.backends import speed
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.models.networks import build_cifar_model
from resnet_noBN.trainers.tensorflow_training import Trainer

SMALL = ModelConfig.preset("small", num_residual_units=2)
STEPS = 4


def batches():
    rng = np.random.default_rng(0)
    images = tf.image.per_image_standardization(
        rng.normal(size=(STEPS * 16, 32, 32, 3)).astype(np.float32)
    ).numpy()
    labels = rng.integers(0, 10, STEPS * 16).astype(np.int32)
    return lambda ctx: tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)


def train(tmp_path, precision="float32", jit_compile=False):
    """Per-step losses, final weights and the head before/after, from the same initial weights."""
    keras.utils.set_random_seed(0)
    trainer = Trainer(
        tf.distribute.get_strategy(),
        lambda: build_cifar_model(SMALL, precision),
        TrainConfig(batch_size=16),
        str(tmp_path),
        jit_compile=jit_compile,
    )
    head = trainer.model.get_layer("projection").kernel
    before = head.numpy().copy()
    iterator = trainer.distribute(batches())
    losses = [trainer.run_steps(iterator, 1)["loss"] for _ in range(STEPS)]
    weights = [w.numpy() for w in trainer.model.trainable_weights]
    assert trainer.model.get_layer("init_conv").compute_dtype == (
        "bfloat16" if precision == "mixed_bfloat16" else "float32"
    )
    return losses, weights, before, head


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train(tmp_path_factory.mktemp("f32"))


def test_xla_step_matches_the_plain_step(tmp_path, reference):
    losses, weights, _, _ = train(tmp_path, jit_compile=True)
    np.testing.assert_allclose(losses, reference[0], rtol=1e-5)
    for a, b in zip(weights, reference[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_bfloat16_step_matches_within_bfloat16_precision(tmp_path, reference):
    """bfloat16 keeps 8 bits of mantissa: the losses agree to ~1%, the head stays fixed."""
    losses, weights, head_before, head = train(tmp_path, precision="mixed_bfloat16")
    np.testing.assert_allclose(losses, reference[0], rtol=2e-2)
    assert losses != reference[0]  # computed in bfloat16 indeed
    assert head.dtype == "float32" and all(w.dtype == np.float32 for w in weights)
    np.testing.assert_array_equal(head.numpy(), head_before)
    np.testing.assert_array_equal(head_before, reference[2])  # the same projection as float32


def test_default_threads_on_a_cpu_host():
    assert speed.default_threads() == (len(__import__("os").sched_getaffinity(0)), 1)


def test_unknown_precision():
    with pytest.raises(ValueError, match="--precision=fp8 is unknown"):
        build_cifar_model(SMALL, "fp8")
