"""How far each block is from the identity (resnet_noBN/theory/near_identity.py,
resnet_noBN/trained/near_identity.py, launch/near_identity.py): the
measures checked where the answer
is known (a one-tap kernel, a kernel whose transform is known in closed form, Theorem 2.1's
linear network, a zero branch), then a run measured end to end and its bad input refused."""

import json
import math
import re
import types

import keras
import numpy as np
import pytest
import tensorflow as tf
from launchers import IMPORT_TIMES, REPO, imported, run

from resnet_noBN.configs.errors import InputError
from resnet_noBN.configs.network_config import ModelConfig
from resnet_noBN.models.layers import Scalar
from resnet_noBN.models.networks import build_cifar_model
from resnet_noBN.runs import run_config
from resnet_noBN.studies import near_identity_study
from resnet_noBN.theory import linear
from resnet_noBN.theory import near_identity as theory
from resnet_noBN.trained import evaluation, model_file, model_paths, near_identity, run_folder
from resnet_noBN.trainers.loop import weights_digest

CIFAR_RECORDS = 40  # a file: 200 training images, 40 test


@pytest.mark.parametrize(
    "size, k, stride",
    [
        ((32, 32), (3, 3), 1),
        ((32, 32), (3, 3), 2),
        ((31, 31), (3, 3), 2),
        ((8, 8), (1, 1), 2),
        ((7, 12), (3, 1), 1),  # rows and columns apart: an axis taken for the other shows
        ((9, 6), (1, 3), 2),
    ],
)
def test_convolution_is_tensorflows_and_its_transpose_its_adjoint(size, k, stride):
    """convolve is tf.nn.conv2d with SAME padding (the network's, odd zero after), and
    convolve_transpose its adjoint: <A x, y> = <x, A^T y>; their default stride is 1."""
    rng = np.random.default_rng(sum(size) + sum(k) + stride)
    x, kernel = rng.standard_normal((*size, 3)), rng.standard_normal((*k, 3, 5))
    y = theory.convolve(x, kernel, stride)
    expected = tf.nn.conv2d(x[None], kernel, stride, "SAME").numpy()[0]
    assert y.shape == expected.shape == (-(-size[0] // stride), -(-size[1] // stride), 5)
    np.testing.assert_allclose(y, expected, atol=1e-12)
    probe = rng.standard_normal(y.shape)
    back = theory.convolve_transpose(probe, kernel, size, stride)
    assert back.shape == x.shape
    assert np.sum(y * probe) == pytest.approx(np.sum(x * back), rel=1e-12)
    if stride == 1:
        np.testing.assert_array_equal(theory.convolve(x, kernel), y)
        np.testing.assert_array_equal(theory.convolve_transpose(probe, kernel, size), back)


def test_the_iteration_stops_at_its_cap_or_below_its_tolerance_and_a_zero_kernel_at_once():
    """The identity (a 1x1 kernel) gives its norm, 1, at every iteration: a relative change of
    exactly 0 is not below a tolerance of 0, so it runs to its cap; a tolerance above rounding
    stops it at the second. A zero kernel gives 0 without iterating."""
    identity = np.eye(3)[None, None]
    capped = theory.spectral_norm(identity, (4, 5), tolerance=0.0, max_iterations=5)
    assert capped == {"value": pytest.approx(1.0, rel=1e-15), "iterations": 5, "last_change": 0.0}
    assert theory.spectral_norm(identity, (4, 5), tolerance=1e-12)["iterations"] == 2
    zero = theory.spectral_norm(np.zeros((3, 3, 2, 2)), (4, 4))
    assert zero == {"value": 0.0, "iterations": 0, "last_change": 0.0}


def test_a_float32_kernel_is_measured_in_float64():
    """Every measure computes in float64 whatever it is given: a float32 kernel or output gives
    the float64 value of the same numbers, to the last bits; the circular norm is the one of
    its grid, not of the kernel's 3 x 3."""
    rng = np.random.default_rng(7)
    kernel = rng.standard_normal((3, 3, 4, 4)).astype(np.float32)
    wide = kernel.astype(np.float64)
    assert theory.spectral_norm(kernel, (6, 9)) == theory.spectral_norm(wide, (6, 9))
    assert theory.circular_spectral_norm(kernel, (6, 9)) == pytest.approx(
        theory.circular_spectral_norm(wide, (6, 9)), rel=1e-13
    )
    # the circular convolution on 5 x 7 as a matrix, its largest singular value; the taps'
    # signs alternate, so the peak is near the grid's highest frequency, which the kernel's
    # own 3 x 3 grid lacks
    checker = (-1.0) ** np.add.outer(np.arange(3), np.arange(3))
    two = np.abs(wide[:, :, :2, :2]) * checker[:, :, None, None]
    matrix = np.zeros((70, 70))
    for i in range(70):
        pulse = np.zeros((5, 7, 2))
        pulse.flat[i] = 1.0
        out = sum(
            np.roll(pulse, (1 - a, 1 - b), axis=(0, 1)) @ two[a, b]
            for a in range(3)
            for b in range(3)
        )
        matrix[:, i] = out.ravel()
    assert theory.circular_spectral_norm(two, (5, 7)) == pytest.approx(
        np.linalg.norm(matrix, 2), rel=1e-12
    )
    branch, stream = rng.standard_normal((2, 3, 3, 2)), rng.standard_normal((2, 3, 3, 2))
    assert np.array_equal(
        theory.ratios(branch.astype(np.float32), stream.astype(np.float32)),
        theory.ratios(branch.astype(np.float32).astype(np.float64), stream.astype(np.float32)),
    )


@pytest.mark.parametrize("stride", [1, 2])
def test_one_tap_kernel_has_its_matrix_norm(stride):
    """A kernel with one non-zero tap (its centre) maps each pixel by one matrix M, padding or
    not, strided or not: its spectral norm is ‖M‖₂, and the circular value too."""
    rng = np.random.default_rng(stride)
    kernel = np.zeros((3, 3, 6, 4))
    kernel[1, 1] = rng.standard_normal((6, 4))
    exact = np.linalg.norm(kernel[1, 1], 2)
    norm = theory.spectral_norm(kernel, (16, 16), stride)
    assert norm["value"] == pytest.approx(exact, rel=1e-5)
    assert norm["value"] <= exact * (1 + 1e-12)  # power iteration estimates from below
    assert 0 < norm["iterations"] < theory.MAX_ITERATIONS
    assert norm["last_change"] < theory.TOLERANCE
    assert theory.circular_spectral_norm(kernel, (16, 16)) == pytest.approx(exact, rel=1e-12)


def test_power_iteration_holds_blas_to_one_thread_and_gives_the_pool_back(monkeypatch):
    """Its products are small (an image's pixels by a tap's [in, out]): a second BLAS thread
    only spins. Each iteration runs on one; the pool is as it was once it returns."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> set[int]:
        return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}

    seen, convolve = [], theory.convolve

    def watched(*args):
        seen.append(blas_threads())
        return convolve(*args)

    monkeypatch.setattr(theory, "convolve", watched)
    with threadpool_limits(2, user_api="blas"):
        assert blas_threads() == {2}
        norm = theory.spectral_norm(np.ones((3, 3, 2, 2)), (8, 8))
        assert blas_threads() == {2}
    assert len(seen) == norm["iterations"] > 1 and all(s == {1} for s in seen)


@pytest.mark.parametrize("size", [8, 32])
def test_box_kernel_has_its_closed_form_norm(size):
    """The 3x3 box (all ones, one channel): zero-padded on n x n it is T ⊗ T, T tridiagonal of
    ones, whose largest eigenvalue is 1 + 2 cos(π/(n+1)), so its norm is that squared; circular,
    its transform peaks at frequency 0, at 9."""
    kernel = np.ones((3, 3, 1, 1))
    exact = (1 + 2 * math.cos(math.pi / (size + 1))) ** 2
    norm = theory.spectral_norm(kernel, (size, size))
    assert norm["value"] == pytest.approx(exact, rel=1e-4) and norm["value"] <= exact
    # the iterations docs/theory.md gives, from the seeded start (seed 0)
    assert norm["iterations"] == {8: 35, 32: 278}[size] and norm["last_change"] < theory.TOLERANCE
    assert theory.circular_spectral_norm(kernel, (size, size)) == pytest.approx(9.0, rel=1e-12)


def _linear_residual_network(layers: np.ndarray, size: int = 2) -> keras.Model:
    """x ↦ (I + A_ℓ)⋯(I + A_1) x on each pixel of a size x size image of d channels: block i a
    1x1 convolution A_i (kernel A_iᵀ) added to its input, named as the network's blocks."""
    d = layers.shape[-1]
    x = inputs = keras.Input((size, size, d))
    for i, A in enumerate(layers):
        name = f"stage1_unit{i}"
        conv = keras.layers.Conv2D(d, 1, use_bias=False, name=f"{name}_conv1")
        branch = conv(x)
        conv.set_weights([A.T[None, None]])
        x = keras.layers.Add(name=f"{name}_add")([x, branch])
    return keras.Model(inputs, x)


def test_theorem_2_1_network_gives_back_its_layer_norms(monkeypatch):
    """Theorem 2.1's construction (theory.linear.residual_factorization) for a rotation and
    stretch R, as a network of 1x1 convolutions: the bound of each block is ‖A_i‖₂ within 1e-4,
    its largest no more than the theorem's (4π + 3γ)/ℓ; and on the images, no branch is larger
    against its input than that norm (a linear branch's ratio is at most ‖A_i‖). The first
    block's ratios are each image's ‖x A_1ᵀ‖ / ‖x‖, its 16 images in batches of 5."""
    rng = np.random.default_rng(0)
    U, _, Vt = np.linalg.svd(rng.standard_normal((4, 4)))
    U[:, 0] *= np.sign(np.linalg.det(U @ Vt))  # det R > 0: a rotation and a stretch
    R = U @ np.diag([0.5, 1.0, 1.5, 2.0]) @ Vt
    depth = 12
    factorization = linear.residual_factorization(R, depth)
    assert not factorization.extra_dimension and factorization.rotation_layers > 0
    factors = factorization.A
    model = _linear_residual_network(factors)
    images = rng.standard_normal((16, 2, 2, 4)).astype("float32")
    np.testing.assert_allclose(model(images), images @ R.T, atol=1e-4)  # R on each pixel
    monkeypatch.setattr(near_identity, "BATCH", 5)
    result = near_identity.measured(model, images, "the linear network", print_fn=lambda *a, **k: 0)
    norms = [np.linalg.norm(A, 2) for A in factors]
    first = [np.linalg.norm(x @ factors[0].T) / np.linalg.norm(x) for x in images.astype(float)]
    assert result["blocks"][0]["ratio_mean"] == pytest.approx(np.mean(first), rel=1e-5)
    assert result["blocks"][0]["ratio_max"] == pytest.approx(max(first), rel=1e-5)
    assert len(result["blocks"]) == depth
    for row, norm in zip(result["blocks"], norms):
        assert row["lipschitz"] == pytest.approx(norm, abs=1e-4)
        assert row["ratio_max"] <= norm + 1e-5
    assert result["largest_lipschitz"] == pytest.approx(max(norms), abs=1e-4)
    assert result["largest_lipschitz"] <= linear.norm_bound(R, depth)


@pytest.mark.parametrize("block", ["zero_last", "fixup"])
def test_zero_second_convolution_gives_zero_for_both(block):
    """A network whose every branch ends in a zero convolution (zero_last, Fixup at init) is its
    shortcuts: both measures 0 in every block, with C2's spectral norm 0 after no iteration."""
    config = ModelConfig.preset("small", block=block)
    model = build_cifar_model(config, "float32")
    images = np.random.default_rng(1).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    result = near_identity.measured(model, images, block, print_fn=lambda *a, **k: 0)
    assert [r["block"] for r in result["blocks"]] == [
        "stage1_unit0",
        "stage2_unit0",
        "stage3_unit0",
    ]
    for row in result["blocks"]:
        assert row["ratio_mean"] == row["ratio_max"] == row["lipschitz"] == 0.0
        assert row["convs"][-1]["spectral_norm"] == 0.0 and row["convs"][-1]["iterations"] == 0
        assert row["convs"][0]["spectral_norm"] > 0
    assert result["largest_ratio"] == result["largest_lipschitz"] == 0.0


def test_network_of_another_kind_is_refused(one_line):
    """A Keras model without this project's blocks, and images of another size, get one line."""
    other = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3)])
    with pytest.raises(InputError) as excinfo:
        near_identity.measured(other, np.zeros((2, 32, 32, 3)), "other.keras")
    assert str(excinfo.value) == (
        "other.keras holds no residual block of this project's networks (layers "
        "stageS_unitU_add); give a run of launch/cifar.py or a file of launch/export.py"
    )
    model = build_cifar_model(ModelConfig.preset("small"), "float32")
    with pytest.raises(InputError) as excinfo:
        near_identity.measured(model, np.zeros((2, 64, 64, 3)), "the run")
    one_line(excinfo, "the test images are 64x64x3", "the run takes 32x32x3", "--data_path")


def test_branch_ratio_is_each_images_own():
    """ratios: ‖h(x)‖ / ‖s(x)‖ image by image, each norm over all of an image's values."""
    stream = np.ones((3, 2, 2, 4))
    stream[1] *= 2.0
    branch = stream * np.array([0.5, 0.25, 3.0])[:, None, None, None]
    branch[2, 0, 0, 0] = 0.0  # one value of the third image: its norm over the rest
    expected = [0.5, 0.25, 3.0 * math.sqrt(15 / 16)]
    np.testing.assert_allclose(theory.ratios(branch, stream), expected, rtol=1e-12)


def test_slope_of_a_power_law_and_its_interval():
    """fitted_slope gives back an exact power law's exponent with a zero-width interval, and an
    interval that holds it on noisy points; zeros (a branch at exactly 0) are left out."""
    depths = [3, 6, 12, 24]
    exact = theory.fitted_slope(depths, [5.0 / d for d in depths])
    assert exact["slope"] == pytest.approx(-1.0, abs=1e-12) and exact["points"] == 4
    assert exact["intercept"] == pytest.approx(math.log(5.0), abs=1e-12)
    assert exact["high"] - exact["low"] == pytest.approx(0.0, abs=1e-9)
    values = [5.0 / d * f for d, f in zip(depths, (1.1, 0.9, 1.05, 1))]
    noisy = theory.fitted_slope(depths, values)
    assert noisy["low"] < -1 < noisy["high"]
    # the interval against scipy's fit: its slope's standard error times t(0.975, 2 dof)
    from scipy import stats

    fit = stats.linregress(np.log(depths), np.log(values))
    half = stats.t.ppf(0.975, 2) * fit.stderr
    assert noisy["slope"] == pytest.approx(fit.slope, rel=1e-12)
    assert noisy["high"] - noisy["slope"] == pytest.approx(half, rel=1e-4)
    assert noisy["slope"] - noisy["low"] == pytest.approx(half, rel=1e-4)
    assert theory.fitted_slope(depths, [0.0, 0.0, 0.0, 1.0]) is None
    assert "low" not in theory.fitted_slope([3, 6], [1.0, 0.5])


COMMITTED_RUN = REPO / "results" / "near_identity" / "runs" / "near_identity_paper_u1-seed0"


def _saved_arrays(model: keras.Model, path) -> None:
    """``model``'s variables as a GPU lease's weights file holds them (``model/<path>``)."""
    variables = [*model.trainable_variables, *model.non_trainable_variables]
    np.savez(path, **{f"model/{v.path}": keras.ops.convert_to_numpy(v) for v in variables})


def test_a_run_folder_and_its_file_measured_in_this_process(
    tmp_path, cifar_bin, write_cifar, monkeypatch
):
    """measure_run on a folder holding a committed run's config.json (seed 5, this data) and two
    weights files as a GPU lease brings them: weights-3.npz the network that config and seed
    draw (a stand-in for the run's trainer: the end-to-end test below checks the real one),
    weights-7.npz the same with every residual convolution doubled. At step 7 each spectral norm
    is twice the one at initialisation and each bound four times, to the last bit (doubling is
    exact in floating point); the first block's ratio four times. The record names the folder,
    the step, seed, backend, digest, network and data (the run's own; with --data_path, that
    copy's test images; a run of JAX read there); without a seed or backend recorded, 0 and
    TensorFlow. Every line is flushed.
    measure_file on the .keras file of step 7: the same trained figures, no initialisation; a
    file of 7 classes refused in one line. table: a row a block, "-" where there is no
    initialisation. write: the record whole, one space indented."""
    saved = json.loads((COMMITTED_RUN / "config.json").read_text())
    saved["data"]["data_path"], saved["seed"] = str(cifar_bin), 5
    del saved["backend"]  # a run from before backends were recorded: TensorFlow's
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(saved))
    recorded = run_config.from_record(saved)

    def reading(record, run, model_dir):  # the run's trainer (its runtime would start here)
        assert (run, model_dir) == (recorded, "run")
        keras.utils.set_random_seed(record.get("seed", 0))
        return types.SimpleNamespace(model=build_cifar_model(run.network, "float32"))

    monkeypatch.setattr(evaluation, "reading_trainer", reading)
    served = model_file.served_model(recorded)
    model_file.copy_weights(reading(saved, recorded, "run").model, served)
    _saved_arrays(served, tmp_path / "run" / "weights-3.npz")
    initial_digest = weights_digest(served.weights)
    for v in served.trainable_variables:
        if re.fullmatch(r"stage\d_unit\d_conv[12]/kernel", v.path):  # a branch's convolutions
            v.assign(v * 2.0)
    _saved_arrays(served, tmp_path / "run" / "weights-7.npz")
    monkeypatch.chdir(tmp_path)
    lines = []

    def say(line, **flushed):
        assert flushed == {"flush": True}, line
        lines.append(line)

    record = near_identity.measure_run("run", None, None, say)
    assert {k: record[k] for k in ("model_dir", "experiment", "backend", "seed", "step")} == {
        "model_dir": str(tmp_path / "run"),
        "experiment": "near_identity_paper_u1",
        "backend": "tensorflow",
        "seed": 5,
        "step": 7,
    }
    assert record["weights_sha256"] == weights_digest(served.weights) != initial_digest
    assert json.loads(json.dumps(record["network"])) == saved["network"]
    assert record["residual_blocks"] == 3
    assert record["data"] == {"dataset": "cifar10", "data_path": str(cifar_bin)}
    assert record["power_iteration"] == {
        "tolerance": theory.TOLERANCE,
        "max_iterations": theory.MAX_ITERATIONS,
        "padding": "SAME (zeros), as the network's",
    }
    trained, initial = record["trained"]["blocks"], record["initialisation"]["blocks"]
    assert [(r["block"], r["stage"], r["unit"]) for r in initial] == [
        ("stage1_unit0", 1, 0),
        ("stage2_unit0", 2, 0),
        ("stage3_unit0", 3, 0),
    ]
    for now, then in zip(trained, initial, strict=True):
        assert (now["block"], now["stage"], now["unit"]) == (
            then["block"],
            then["stage"],
            then["unit"],
        )
        assert now["lipschitz"] == 4 * then["lipschitz"] > 0
        for a, b in zip(now["convs"], then["convs"], strict=True):
            assert a["spectral_norm"] == 2 * b["spectral_norm"]
            assert (a["iterations"], a["input"], a["stride"]) == (
                b["iterations"],
                b["input"],
                b["stride"],
            )
    assert trained[0]["ratio_mean"] == pytest.approx(4 * initial[0]["ratio_mean"], rel=1e-5)
    for key, field in (("ratio", "ratio_mean"), ("lipschitz", "lipschitz")):
        values = [r[field] for r in trained]
        assert record["trained"][f"largest_{key}"] == max(values)
        assert record["trained"][f"mean_{key}"] == pytest.approx(sum(values) / 3, rel=1e-15)
    assert lines[0] == "step 7: 3 blocks, on 40 test images"
    assert lines[4] == "initialisation: 3 blocks, on 40 test images" and len(lines) == 8

    other = tmp_path / "other" / "cifar-10-batches-bin"
    written = write_cifar(other, "cifar10", 24)
    unseeded = {**{k: v for k, v in saved.items() if k != "seed"}, "backend": "jax"}
    (tmp_path / "run" / "config.json").write_text(json.dumps(unseeded))
    handed = []  # measured's images, what it names and the weights, its figures checked above

    def measured(model, images, what, print_fn):
        handed.append((images, what, weights_digest(model.weights)))

    with monkeypatch.context() as patched:
        patched.setattr(near_identity, "measured", measured)
        patched.setattr(run_folder.registry, "check_chosen", lambda: "jax")  # read where it ran
        elsewhere = near_identity.measure_run("run", 3, str(other), say)
    assert (elsewhere["step"], elsewhere["seed"], elsewhere["backend"]) == (3, 0, "jax")
    assert elsewhere["data"]["data_path"] == str(other)
    assert [what for _, what, _ in handed] == ["step 3", "initialisation"]
    trained_at_3, drawn = (digest for _, _, digest in handed)
    assert trained_at_3 == initial_digest != drawn  # weights-3 read; the init of seed 0 drawn
    assert all(np.array_equal(images, written["test"][0]) for images, _, _ in handed)

    beside = {"experiment": "e", "step": 7, "weights_sha256": "abc"}
    model_file.write(served, "run.keras", "keras", beside)
    lines.clear()
    from_file = near_identity.measure_file("run.keras", str(cifar_bin), say)
    assert {k: from_file[k] for k in ("model", "experiment", "step", "weights_sha256")} == {
        "model": str(tmp_path / "run.keras"),
        **beside,
    }
    assert from_file["initialisation"] is None
    assert from_file["data"] == record["data"]
    assert from_file["power_iteration"] == record["power_iteration"]
    for a, b in zip(from_file["trained"]["blocks"], trained, strict=True):
        assert (a["lipschitz"], a["ratio_max"]) == (b["lipschitz"], pytest.approx(b["ratio_max"]))
    assert lines[:2] == [
        "a .keras file holds no seed: its trained weights only",
        "run.keras: 3 blocks, on 40 test images",
    ]
    seven = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Dense(7)])
    seven.save("seven.keras")
    with pytest.raises(InputError) as refused:
        near_identity.measure_file("seven.keras", str(cifar_bin), say)
    assert str(refused.value) == (
        "--model seven.keras gives 7 classes: no CIFAR data set has as many; evaluate it on its "
        "own data"
    )

    table = near_identity.table(record).splitlines()
    assert table[:2] == [
        "| block | ratio mean | ratio max | Lipschitz bound | at init: ratio mean | bound |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    first, at_init = trained[0], initial[0]
    assert len(table) == 2 + 3 and table[2] == (
        f"| stage1_unit0 | {first['ratio_mean']:.4g} | {first['ratio_max']:.4g} | "
        f"{first['lipschitz']:.4g} | {at_init['ratio_mean']:.4g} | {at_init['lipschitz']:.4g} |"
    )
    assert near_identity.table(from_file).splitlines()[4].endswith(" | - | - |")
    near_identity.write(record, "record.json")
    assert (tmp_path / "record.json").read_text() == json.dumps(record, indent=1) + "\n"


def _two_blocks(data_format: str = "channels_last", norm: bool = False) -> keras.Model:
    """Two blocks of this project's names on 7 x 9 images of 2 channels: stage1_unit0, a 3 x 1
    convolution to 4 channels then a 1 x 3 back to 2, a bias and a multiplier -3 (``norm``: a
    batch norm between); stage2_unit1, a 3 x 3 convolution of stride 2 to 3 channels then a
    1 x 1, beside a projection shortcut."""
    first = data_format == "channels_first"

    def conv(name, filters, k, stride=1):
        return keras.layers.Conv2D(
            filters, k, stride, "same", data_format=data_format, use_bias=False, name=name
        )

    x = inputs = keras.Input((2, 7, 9) if first else (7, 9, 2))
    h = conv("stage1_unit0_conv1", 4, (3, 1))(x)
    if norm:
        h = keras.layers.BatchNormalization(axis=1 if first else -1, name="stage1_unit0_bn")(h)
    h = conv("stage1_unit0_conv2", 2, (1, 3))(keras.layers.ReLU(name="stage1_unit0_relu")(h))
    h = Scalar("add", 0.5, name="stage1_unit0_bias")(h)
    h = Scalar("multiply", -3.0, name="stage1_unit0_scale")(h)
    x = keras.layers.Add(name="stage1_unit0_add")([x, h])
    h = conv("stage2_unit1_conv2", 2, 1)(conv("stage2_unit1_conv1", 3, 3, 2)(x))
    shortcut = conv("stage2_unit1_projection", 2, 1, 2)(x)
    x = keras.layers.Add(name="stage2_unit1_add")([shortcut, h])
    return keras.Model(inputs, x)


def test_each_convolution_is_measured_on_its_input_with_its_stride_and_its_multipliers():
    """lipschitz: each branch convolution (not the projection shortcut) on its own input, rows,
    columns and channels apart, with its stride, against theory.spectral_norm; the circular
    norm on the grid padded by the kernel (n + k - 1 along each axis), none at stride 2; the
    bound the norms' product times |multiplier| (the bias left out); its line flushed. A
    network in channels_first gives the same. A batch norm in a branch is refused in one
    line."""
    keras.utils.set_random_seed(0)
    model = _two_blocks()
    # the first convolution's taps 1, -1, 1 down the rows: its transform peaks at the row
    # frequency π, which no odd grid holds, so each grid of rows gives its own circular norm
    conv1 = model.get_layer("stage1_unit0_conv1").kernel
    conv1.assign(np.array([1.0, -1.0, 1.0])[:, None, None, None] * conv1[1:2])
    found = near_identity.blocks(model, "two blocks")
    assert [(b.name, b.stage, b.unit, [c.name for c in b.convs]) for b in found] == [
        ("stage1_unit0", 1, 0, ["stage1_unit0_conv1", "stage1_unit0_conv2"]),
        ("stage2_unit1", 2, 1, ["stage2_unit1_conv1", "stage2_unit1_conv2"]),
    ]
    lines = []
    rows = [near_identity.lipschitz(b, lambda *a, **k: lines.append((a, k))) for b in found]
    expected = (  # each convolution: its input (rows, columns, channels), stride, padded grid;
        # then the block's multipliers
        ((((7, 9, 2), 1, (9, 9)), ((7, 9, 4), 1, (7, 11))), [-3.0]),
        ((((7, 9, 2), 2, None), ((4, 5, 3), 1, (4, 5))), []),
    )
    for block, row, (convs, multipliers) in zip(found, rows, expected, strict=True):
        bound = 1.0
        for layer, measured, (shape, stride, grid) in zip(
            block.convs, row["convs"], convs, strict=True
        ):
            kernel, size = np.asarray(layer.kernel, np.float64), shape[:2]
            norm = theory.spectral_norm(kernel, size, stride)
            assert measured == {
                "layer": layer.name,
                "input": list(shape),
                "stride": stride,
                "spectral_norm": norm["value"],
                "iterations": norm["iterations"],
                "last_change": norm["last_change"],
                "circular": grid and theory.circular_spectral_norm(kernel, grid),
            }
            bound *= norm["value"]
        assert set(row) == {"lipschitz", "multipliers", "convs"}
        assert row["multipliers"] == multipliers
        assert row["lipschitz"] == bound * math.prod(abs(m) for m in multipliers)
    assert lines == [
        ((f"  {b.name}: Lipschitz bound {r['lipschitz']:.4g}",), {"flush": True})
        for b, r in zip(found, rows)
    ]
    other = _two_blocks("channels_first")
    other.set_weights(model.get_weights())
    quiet = lambda *a, **k: None  # noqa: E731
    assert [near_identity.lipschitz(b, quiet) for b in near_identity.blocks(other, "cf")] == rows
    with pytest.raises(InputError) as excinfo:
        near_identity.blocks(_two_blocks(norm=True), "two blocks")
    assert str(excinfo.value) == (
        "two blocks: block stage1_unit0 normalises its branch (batch norm); the bound covers "
        "convolutions, ReLU and scalars only: measure a network without --norm=batch"
    )


def test_run_measured_end_to_end_then_summarised(tmp_path, cifar_bin, one_line):
    """A run of one step at learning rate 1e-30 keeps its initial weights: launch/near_identity.py
    measures it, trained and at initialisation rebuilt from config.json and the seed, and the
    two agree block by block to the last bit; near_identity.json is written, the table printed
    a row a block, one line of JSON last. --summarize writes the study's summary and plot,
    without Keras or TensorFlow."""
    run_dir = tmp_path / "runs" / "near_identity_paper_u1-seed0"
    trained = run(
        "launch/cifar.py",
        "--experiment=near_identity_paper_u1",
        f"--data_path={cifar_bin}",
        "--train_steps=1",
        "--learning_rate=1e-30",  # each weight w - 1e-30 v rounds to w
        "--batch_size=8",
        "--eval_batch_size=20",
        "--seed=3",
        f"--model_dir={run_dir}",
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    proc = run("launch/near_identity.py", f"--model_dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((run_dir / model_paths.NEAR_IDENTITY_FILE).read_text())
    assert record["step"] == 1 and record["residual_blocks"] == 3 and record["seed"] == 3
    at_init, now = record["initialisation"], record["trained"]
    assert [r["block"] for r in now["blocks"]] == ["stage1_unit0", "stage2_unit0", "stage3_unit0"]
    assert now == at_init  # the rebuilt init is the run's, bit for bit
    for row in now["blocks"]:
        assert 0 < row["ratio_mean"] <= row["ratio_max"] < 0.05  # σ = 1/(k²c): small branches
        assert [c["stride"] for c in row["convs"]] == [1 if row["stage"] == 1 else 2, 1]
        second = row["convs"][1]  # stride 1: the circular norm on the padded grid bounds it
        assert 0.9 * second["circular"] < second["spectral_norm"] <= second["circular"]
    lines = proc.stdout.strip().splitlines()
    assert sum(line.startswith("| stage") for line in lines) == 3
    assert json.loads(lines[-1])["trained"]["largest_ratio"] == now["largest_ratio"]

    proc = run("launch/near_identity.py", f"--summarize={tmp_path}", env=IMPORT_TIMES)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not imported(proc) & {"keras", "tensorflow"}  # plain files
    summary = json.loads((tmp_path / near_identity_study.SUMMARY).read_text())
    (paper,) = summary["paper"]["runs"]
    assert (paper["blocks"], paper["layers"], paper["step"]) == (3, 8, 1)
    assert paper["trained_largest_ratio"] == now["largest_ratio"]
    assert summary["paper"]["slopes"]["trained_largest_ratio"] is None  # one depth: no slope
    assert (tmp_path / near_identity_study.PLOT).stat().st_size > 0

    # bad input: one line, exit 2, before the backend loads, nothing written
    empty = tmp_path / "no_weights"
    empty.mkdir()
    (empty / "config.json").write_text((run_dir / "config.json").read_text())
    refusals = {
        "holds no checkpoint": (f"--model_dir={empty}",),
        "keeps the weights of step 1 only": (f"--model_dir={run_dir}", "--step=7"),
        "is not a Keras file": (f"--model={run_dir / 'config.json'}", f"--data_path={cifar_bin}"),
        "give --data_path": (f"--model={_saved_other(tmp_path)}",),
    }
    before = (run_dir / model_paths.NEAR_IDENTITY_FILE).read_bytes()
    for fragment, args in refusals.items():
        proc = run("launch/near_identity.py", *args, env=IMPORT_TIMES)
        assert proc.returncode == 2, (args, proc.stderr[-1500:])
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and fragment in errors[0], (fragment, errors)
        assert not imported(proc) & {"keras", "tensorflow"}, args
    assert not (empty / model_paths.NEAR_IDENTITY_FILE).exists()
    assert (run_dir / model_paths.NEAR_IDENTITY_FILE).read_bytes() == before


def _saved_other(folder) -> str:
    path = str(folder / "other.keras")
    keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3)]).save(path)
    return path
