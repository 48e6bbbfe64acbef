"""Identity at initialisation, four ways (models/blocks.py): the paper's small init
(arXiv:1611.04231, Section 4) beside Fixup (arXiv:1901.09321), SkipInit (arXiv:2002.10444) and
a zero last convolution. Each variant's parameters, its residual stages exactly their shortcuts
at step 0, the first step's gradient zero exactly where the construction puts it, and Fixup's
scalars at a tenth of the rate."""

import math
import subprocess
import sys

import block_formulas as bf
import keras
import numpy as np
import pytest
import tensorflow as tf
from launchers import REPO
from test_tensorflow_free_backends import backend_env

from resnet_noBN.configs import experiments
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.configs.recipe_config import TrainConfig
from resnet_noBN.models import blocks
from resnet_noBN.models.layers import Block, Scalar, shortcut
from resnet_noBN.models.networks import build_cifar_model, param_counts
from resnet_noBN.runs import run_config
from resnet_noBN.trainers.recipe import objective
from resnet_noBN.trainers.tensorflow_training import Trainer

VARIANTS = tuple(experiments.IDENTITY_INITS)
# two blocks a stage, so that every stage has a block that keeps its shape and (stages 2, 3) one
# that changes it
TWO_A_STAGE = {"num_residual_units": 2, "stage_widths": (16, 32, 64)}


def variant_config(variant: str, **changes) -> ModelConfig:
    return ModelConfig(**{**experiments.IDENTITY_INITS[variant], **changes})


@pytest.mark.parametrize(
    "variant, extra",
    [("fixup", 27 * 5), ("skipinit", 27), ("zero_last", 0)],
)
def test_each_variant_counts_the_papers_kernels_and_its_scalars(variant, extra):
    """Table 1's 13,538,736 kernel weights and the fixed head's 2,560, plus Fixup's multiplier
    and four biases a block, SkipInit's one scalar a block, nothing for zero_last."""
    counts = param_counts(build_cifar_model(variant_config(variant)))
    assert counts == {
        "trainable_params": 13_538_736 + extra,
        "non_trainable_params": 2_560,
        "convolutions": 55,
        "conv_kernel_weights": 13_538_736,
    }
    assert (
        sum(
            isinstance(layer, Scalar)
            for layer in build_cifar_model(variant_config(variant, **TWO_A_STAGE)).layers
        )
        == extra // 27 * 6
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_residual_stages_are_exactly_their_shortcuts_at_step_0(variant):
    """The last stage's output equals the first conv's output carried through the shortcuts
    alone (pool and pad where a stage changes the shape), bit for bit, on real-valued inputs:
    every branch adds exactly 0. The paper's own init does not (its branches are small, not
    zero)."""
    keras.utils.set_random_seed(3)
    cfg = variant_config(variant, **TWO_A_STAGE)
    model = build_cifar_model(cfg)
    last_add = [layer for layer in model.layers if layer.name.endswith("_add")][-1]
    probe = keras.Model(model.input, [model.get_layer("init_conv").output, last_add.output])
    images = np.random.default_rng(0).normal(size=(4, 32, 32, 3)).astype(np.float32)
    stem, stages = (t.numpy() for t in probe(images))
    block = Block.of(cfg)
    x, width = tf.constant(stem), cfg.init_filters
    for stage, out in enumerate(cfg.stage_widths):
        x = shortcut(x, width, out, cfg.stage_strides[stage], block, f"probe{stage}")
        width = out
    np.testing.assert_array_equal(stages, x.numpy())
    assert stages.shape == (4, 8, 8, 64) and np.abs(stages).max() > 0
    # the paper's init is near the identity, not at it
    keras.utils.set_random_seed(3)
    paper = build_cifar_model(ModelConfig(**TWO_A_STAGE))
    paper_probe = keras.Model(
        paper.input, [l for l in paper.layers if l.name.endswith("_add")][-1].output
    )
    assert not np.array_equal(paper_probe(images).numpy(), x.numpy())


def first_gradients(cfg: ModelConfig) -> dict[str, np.ndarray]:
    """The cross-entropy's gradient (the data's: the decay's r·W left out) at step 0, by
    variable path, on 8 random images."""
    keras.utils.set_random_seed(4)
    model = build_cifar_model(cfg)
    rng = np.random.default_rng(1)
    images = rng.normal(size=(8, 32, 32, 3)).astype(np.float32)
    labels = rng.integers(0, 10, size=8).astype(np.int32)
    with tf.GradientTape() as tape:
        _, parts = objective(model(images, training=True), labels, 0.0, TrainConfig(batch_size=8))
    grads = tape.gradient(parts["cross_entropy"], model.trainable_variables)
    return {v.path: g.numpy() for v, g in zip(model.trainable_variables, grads)}


# the variables of a branch whose first gradient is zero by construction (the rest: non-zero)
ZERO_AT_STEP_0 = {
    # alpha = 0 multiplies the whole branch: nothing inside it moves the output
    "skipinit": ("_conv1/", "_conv2/"),
    # C2 = 0: nothing before it moves the output, nor the multiplier after it (it scales 0)
    "fixup": ("_conv1/", "_bias1/", "_bias2/", "_bias3/", "_scale/"),
    "zero_last": ("_conv1/",),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_first_gradient_is_zero_exactly_where_the_construction_says(variant):
    grads = first_gradients(variant_config(variant, **TWO_A_STAGE))
    zero = [
        p for p in grads if p.startswith("stage") and any(k in p for k in ZERO_AT_STEP_0[variant])
    ]
    rest = [p for p in grads if p not in zero]
    assert len(zero) == 6 * len(ZERO_AT_STEP_0[variant])  # six blocks
    assert {p for p in zero if not np.any(grads[p])} == set(zero)
    assert {p for p in rest if np.any(grads[p])} == set(rest)
    assert "init_conv/kernel" in rest


def test_fixups_scalars_learn_at_a_tenth_of_the_rate(monkeypatch):
    """Fixup's scalars' gradient is a tenth of the one they would have at the network's rate
    (so SGD, in either form of momentum, moves them at a tenth of the rate), and their values
    are the same: the output is bit for bit the model's with rate 1."""
    cfg = variant_config("fixup", **TWO_A_STAGE)
    tenth = first_gradients(cfg)
    monkeypatch.setattr(blocks, "FIXUP_SCALAR_RATE", 1.0)
    whole = first_gradients(cfg)
    scalars = [p for p in tenth if "_bias" in p or "_scale" in p]
    assert len(scalars) == 6 * 5
    for path in tenth:
        if path in scalars:
            np.testing.assert_allclose(tenth[path], 0.1 * whole[path], rtol=1e-6, atol=0)
        else:
            np.testing.assert_array_equal(tenth[path], whole[path])
    assert any(np.any(tenth[p]) for p in scalars)  # the branch's last bias moves at step 0


def test_the_variants_are_experiments_and_fixup_refuses_adam():
    """Each variant an experiment on CIFAR-10 and on CIFAR-100 at the rate held, with its
    papers' init, recorded in config.json's network; Fixup with Adam (which ignores the scaled
    gradient) refused in one line naming the fix."""
    for variant, changes in experiments.IDENTITY_INITS.items():
        for name in (f"cifar10_{variant}", f"cifar100_held_lr_{variant}"):
            network = run_config.build(name).sections()["network"]
            assert {k: network[k] for k in changes} == changes
    assert run_config.build("cifar10_fixup").network.init == "he"
    assert run_config.build("cifar10_zero_last").network.init == "hardt_ma"
    with pytest.raises(Exception, match=r"^--block=fixup .* Adam's update ignores: use a momentum"):
        run_config.build("cifar10_fixup", recipe={"optimizer": "adam"})


def test_fixups_first_convolution_is_he_scaled_by_one_over_root_l():
    """Fixup's rule 2 with its papers' init: C1 ~ N(0, 2 / (k^2 c) / L), L = 27 blocks at Table
    1's depth; C2 exactly zero."""
    keras.utils.set_random_seed(0)
    model = build_cifar_model(variant_config("fixup"))
    kernel = model.get_layer("stage3_unit4_conv1").kernel.numpy()  # 3 x 3 x 256 x 256
    assert kernel.std() == pytest.approx(np.sqrt(2 / (9 * 256) / 27), rel=0.01)
    assert not np.any(model.get_layer("stage3_unit4_conv2").kernel.numpy())


def trainer(model_dir, variant: str, steps: int):
    keras.utils.set_random_seed(0)
    cfg = TrainConfig(
        batch_size=16,
        train_steps=steps,
        eval_every=3,
        checkpoint_every=3,
        log_every=3,
        eval_batch_size=16,
        learning_rate=0.05,
        lr_boundaries=(100,),  # one rate for both halves (the default drops follow train_steps)
    )
    return Trainer(
        tf.distribute.get_strategy(),
        lambda: build_cifar_model(variant_config(variant, **TWO_A_STAGE)),
        cfg,
        str(model_dir),
    )


def fns():
    rng = np.random.default_rng(5)
    train = (rng.normal(size=(64, 32, 32, 3)).astype(np.float32), rng.integers(0, 10, 64))
    test = (train[0][:16], train[1][:16].astype(np.int32))

    def train_fn(ctx, start_step=0):
        ds = tf.data.Dataset.from_tensor_slices((train[0], train[1].astype(np.int32))).repeat()
        return ds.batch(16, drop_remainder=True).skip(start_step)

    return train_fn, lambda ctx: tf.data.Dataset.from_tensor_slices(test).batch(16)


@pytest.mark.parametrize("variant", ["fixup", "skipinit"])
def test_a_variant_resumes_exactly(tmp_path, variant):
    """6 steps straight and 3 + 3 from the step-3 checkpoint: the same weights, scalars and
    optimizer state, bit for bit; the scalars moved from their start."""
    straight = trainer(tmp_path / "straight", variant, 6)
    straight.train(*fns(), print_fn=lambda _: None)
    trainer(tmp_path / "halves", variant, 3).train(*fns(), print_fn=lambda _: None)
    resumed = trainer(tmp_path / "halves", variant, 6)
    assert resumed.restore() == 3
    resumed.train(*fns(), print_fn=lambda _: None)
    for a, b in zip(
        straight.model.weights + straight.optimizer.variables,
        resumed.model.weights + resumed.optimizer.variables,
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    scalars = [w.numpy() for w in resumed.model.weights if w.path.endswith("/scalar")]
    assert len(scalars) == {"fixup": 30, "skipinit": 6}[variant]
    start = {"fixup": (0.0, 1.0), "skipinit": (0.0,)}[variant]
    assert all(float(s) not in start for s in scalars[-2:])


PAPER_SIGMA = 1 / (9 * 64)  # Section 4's 1/(k^2 c), 3x3 kernels, 64 channels out
HE_SIGMA = math.sqrt(2 / (9 * 64))  # He's sqrt(2/(k^2 c)), SkipInit's (--init=he)
CONV_SIGMAS = {  # each block's C1 and C2 at init (Fixup's: its own test)
    "hardt_ma": (PAPER_SIGMA, PAPER_SIGMA),
    "zero_last": (PAPER_SIGMA, 0.0),
    "skipinit": (HE_SIGMA, HE_SIGMA),
    # the 2016 unit as cifar100_original_2016 builds it
    "preactivation": (PAPER_SIGMA, PAPER_SIGMA),
}


@pytest.mark.parametrize("variant", sorted(CONV_SIGMAS))
def test_each_blocks_convolutions_start_at_their_papers_sigma(variant):
    """C1 and C2 of one block, 64 channels in and out (36,864 draws each: the sample std within
    3%, over 8 standard errors), drawn at the σ its paper gives; a zero C2 exactly zero."""
    keras.utils.set_random_seed(2)
    model = bf.build(variant, 1, channels=64)
    for name, sigma in zip(("b_conv1", "b_conv2"), CONV_SIGMAS[variant]):
        kernel = model.get_layer(name).kernel.numpy()
        if sigma == 0:
            assert not kernel.any(), name
        else:
            assert float(kernel.std()) == pytest.approx(sigma, rel=0.03), name


SCALARS_AT_INIT = {  # Fixup's biases at 0 and multiplier at 1; SkipInit's alpha at 0
    "fixup": {"b_bias1": 0.0, "b_bias2": 0.0, "b_bias3": 0.0, "b_scale": 1.0, "b_bias4": 0.0},
    "skipinit": {"b_alpha": 0.0},
}


@pytest.mark.parametrize("variant", sorted(SCALARS_AT_INIT))
def test_each_blocks_scalars_start_where_its_paper_starts_them(variant):
    model = bf.build(variant, 1)
    found = {
        layer.name: float(layer.weights[0].numpy())
        for layer in model.layers
        if isinstance(layer, Scalar)
    }
    assert found == SCALARS_AT_INIT[variant]


BRANCH_LAYERS = {  # each block's layers in order, the add last (checkpoints name them)
    "hardt_ma": ("b_conv1", "b_relu", "b_conv2"),
    "zero_last": ("b_conv1", "b_relu", "b_conv2"),
    "fixup": (
        "b_bias1",
        "b_conv1",
        "b_bias2",
        "b_relu",
        "b_bias3",
        "b_conv2",
        "b_scale",
        "b_bias4",
    ),
    "skipinit": ("b_conv1", "b_relu", "b_conv2", "b_alpha"),
    "preactivation": ("b_relu0", "b_conv1", "b_relu", "b_conv2"),
}


@pytest.mark.parametrize("variant", sorted(BRANCH_LAYERS))
def test_each_blocks_layers_are_named_and_compute_in_the_runs_precision(variant):
    """In mixed_bfloat16 (every GPU run's precision), each block's branch layers, its scalars
    too, compute in bfloat16 under the names the checkpoints hold; the add (the residual
    stream) in float32, whatever Keras' global policy (float32 or mixed)."""
    branch = [(name, "mixed_bfloat16") for name in BRANCH_LAYERS[variant]]
    for policy in ("float32", "mixed_bfloat16"):
        keras.config.set_dtype_policy(policy)
        try:
            model = bf.build(variant, 1, precision="mixed_bfloat16")
        finally:
            keras.config.set_dtype_policy("float32")
        layers = [(layer.name, layer.dtype_policy.name) for layer in model.layers[1:]]
        assert layers == [*branch, ("b_add", "float32")], policy


@pytest.fixture(scope="module")
def formulas():
    """Each variant's and stride's output and gradients as its paper writes them (float64)."""
    return {(v, stride): bf.expected(v, stride) for v in bf.VARIANTS for stride in bf.SHAPES}


def check_against_formula(expected: dict, out: np.ndarray, grads: dict, where: str) -> None:
    """float32 against float64: outputs within 1e-5 of their scale, each weight's gradient
    within 1e-4 of its own scale (central differences carry ~1e-8)."""
    np.testing.assert_allclose(out, expected["output"], rtol=0, atol=1e-5 * 10, err_msg=where)
    assert set(grads) == set(expected["grads"]), where
    for name, grad in expected["grads"].items():
        scale = max(np.abs(grad).max(), 1e-3)
        np.testing.assert_allclose(
            np.reshape(grads[name], np.shape(grad)), grad, rtol=0, atol=1e-4 * scale,
            err_msg=f"{where}: {name}",
        )  # fmt: skip


@pytest.mark.parametrize("variant", bf.VARIANTS)
@pytest.mark.parametrize("stride", sorted(bf.SHAPES))
def test_each_block_after_step_0_is_its_papers_formula(variant, stride, formulas):
    """With its weights away from their inits (Fixup's scale 2 and biases 0.5, -0.25, 0.75,
    0.1; SkipInit's α 1.5; C2 non-zero in every variant), each block's output and the gradient
    of every weight are its paper's formula's (tests/block_formulas.py), Fixup's scalars' at a
    tenth; at stride 2 through the pooled, padded shortcut. At step 0 several wrong orders of
    the same operations agree; here they do not."""
    assert bf.FIXUP_RATE == blocks.FIXUP_SCALAR_RATE
    model = bf.build(variant, stride)
    bf.set_weights(model, bf.params(variant, stride))
    x, probe = (tf.constant(a, tf.float32) for a in bf.inputs(stride))
    with tf.GradientTape() as tape:
        out = model(x)
        loss = tf.reduce_sum(out * probe)
    grads = tape.gradient(loss, model.trainable_variables)
    found = {bf.layer_of(v.path): g.numpy() for v, g in zip(model.trainable_variables, grads)}
    check_against_formula(formulas[variant, stride], out.numpy(), found, f"{variant}-{stride}")


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_each_block_after_step_0_is_its_papers_formula_on_jax_and_pytorch(
    backend, formulas, tmp_path
):
    """The same blocks, weights and formulas on JAX and PyTorch (tests/block_probe.py, no
    TensorFlow importable), each backend's own gradients."""
    env = backend_env(backend)
    out = tmp_path / "out.npz"
    probe = [sys.executable, str(REPO / "tests" / "block_probe.py"), str(out)]
    subprocess.run(probe, env=env, check=True, timeout=600, cwd=REPO)
    got = np.load(out)
    assert str(got["backend"]) == backend
    for (variant, stride), expected in formulas.items():
        prefix = f"{variant}-{stride}-"
        grads = {
            k.removeprefix(prefix): got[k]
            for k in got.files
            if k.startswith(prefix) and k != f"{prefix}output"
        }
        check_against_formula(expected, got[f"{prefix}output"], grads, f"{backend} {prefix}")
