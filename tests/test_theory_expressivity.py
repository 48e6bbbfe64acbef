"""Section 3 (finite-sample expressivity): Theorem 3.2 built by Lemmas B.1 and B.2, its Keras
model, the precondition errors, real and generated images; and launch/expressivity.py."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from resnet_noBN.theory import expressivity as ex
from resnet_noBN.theory.expressivity import ExpressivityError

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CIFAR10_DIR = SHARED_DATA / "cifar-10-batches-bin"


def _cifar_dir() -> Path:
    if not CIFAR10_DIR.is_dir():
        pytest.skip(f"{CIFAR10_DIR} is absent")
    return CIFAR10_DIR


def _sphere_problem(n=250, d=24, r=5, seed=0):
    rng = np.random.default_rng(seed)
    return ex.sphere_points(n, d, rng), ex.random_labels(n, r, rng), rng


# --- Theorem 3.2 / Lemmas B.1 and B.2 ------------------------------------------------------


@pytest.mark.parametrize("n,k,r", [(250, 64, 5), (64, 32, 1), (101, 40, 2), (1, 4, 3)])
def test_network_maps_every_point_to_its_one_hot_label(n, k, r):
    X, labels, rng = _sphere_problem(n=n, r=r, seed=n)
    net = ex.build_network(X, labels, r, k, rng)
    assert len(net.blocks) == math.ceil(n / k)  # ℓ = ⌈n/k⌉, the last batch may be partial
    report = ex.fit_report(net.forward(X), labels)
    assert report["accuracy"] == 1.0
    assert report["max_deviation"] < 1e-10
    assert min(net.margins) > 0


def test_each_block_moves_its_batch_to_the_surrogates_and_leaves_the_rest():
    X, labels, rng = _sphere_problem(n=120, d=30, r=4, seed=1)
    k = 40
    net = ex.build_network(X, labels, 4, k, rng)
    H = X @ net.A0.T
    alpha = H.copy()
    for j, block in enumerate(net.blocks):
        H = H + block.transform(H)
        moved = np.arange(len(X)) < (j + 1) * k
        assert np.allclose(H[moved], net.surrogates[labels[moved]], atol=1e-10)  # v(i) = q
        assert np.array_equal(H[~moved], alpha[~moved])  # untouched: exactly α(i)
    assert np.allclose(net.output.transform(net.surrogates), np.eye(4), atol=1e-12)  # q_c ↦ e_c


def test_keras_model_predicts_one_hot_labels_and_counts_parameters():
    X, labels, rng = _sphere_problem(n=250, d=24, r=5, seed=2)
    k, r, d = 64, 5, 24
    net = ex.build_network(X, labels, r, k, rng)
    model = ex.keras_model(net)
    ell = math.ceil(250 / k)
    formula = k * d + ell * (2 * k * k + k) + r * k + r * r + r
    assert model.count_params() == net.parameter_formula() == formula
    assert model.output.dtype == "float64" and model.output.shape == (None, r)
    dense = [layer for layer in model.layers if layer.__class__.__name__ == "Dense"]
    assert len(dense) == 1 + 2 * ell + 2
    report = ex.fit_report(ex.predict(model, X), labels)
    assert report["accuracy"] == 1.0
    assert report["max_deviation"] < 1e-10


# --- Preconditions of Lemma B.1 ------------------------------------------------------------


def test_duplicate_points_are_named():
    X, labels, rng = _sphere_problem(seed=3)
    X = np.vstack([X, X[17]])
    labels = np.append(labels, (labels[17] + 1) % 5)
    with pytest.raises(ExpressivityError,
                       match=r"points 17 and 250 are duplicates .*different labels.*remove"):
        ex.build_network(X, labels, 5, 32, rng)


def test_too_small_width_names_the_block_and_the_fix():
    X, labels, rng = _sphere_problem(seed=4)
    with pytest.raises(ExpressivityError, match=r"^block \d+: no threshold t exists for point "
                                                r"\d+ .*increase the width k"):
        ex.build_network(X, labels, 5, 2, rng)


def test_too_close_points_are_named():
    X, labels, rng = _sphere_problem(seed=5)
    X[3] = X[9] + 1e-4 * rng.standard_normal(X.shape[1])
    X[3] /= np.linalg.norm(X[3])
    with pytest.raises(ExpressivityError, match=r"points (3 and 9|9 and 3) \(\|\|x_i - x_m\|\| "
                                                r"= 0.000\d+\) are too close"):
        ex.build_network(X, labels, 5, 64, rng)


def test_point_dominated_by_a_surrogate_label_is_named():
    # k = 1: point 0 moves to q_0 = ±1, and the opposite point −x_0 then sees it above itself.
    X = np.array([[0.6, 0.8], [-0.6, -0.8]])
    with pytest.raises(ExpressivityError, match=r"^block 2: .* point 1 .*surrogate label q_0, "
                                                r"where point 0 now sits.*increase the width k"):
        ex.build_network(X, np.array([0, 0]), 1, 1, np.random.default_rng(0))


def test_bad_inputs_raise_one_line_errors():
    X, labels, rng = _sphere_problem(seed=6)
    with pytest.raises(ExpressivityError, match=r"unit norm \(point 0 has norm 2"):
        ex.build_network(np.vstack([2 * X[:1], X[1:]]), labels, 5, 32, rng)
    with pytest.raises(ExpressivityError, match=r"labels must lie in \[0, 3\)"):
        ex.build_network(X, labels, 3, 32, rng)
    with pytest.raises(ExpressivityError, match="one per point"):
        ex.build_network(X, labels[:-1], 5, 32, rng)
    with pytest.raises(ExpressivityError, match="width k must be >= 1"):
        ex.build_network(X, labels, 5, 0, rng)


def test_coinciding_surrogate_labels_are_reported():
    Q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ExpressivityError, match="surrogate labels q_0 and q_2 coincide"):
        ex._output_block(Q)


# --- Images with random labels -------------------------------------------------------------


def test_read_cifar10_binary_records():
    cifar = _cifar_dir()
    pixels = ex.load_cifar10_pixels(str(cifar))
    assert pixels.dtype == np.uint8 and pixels.shape[1] == 3072
    sizes = [os.path.getsize(p) for p in sorted(cifar.glob("data_batch_*.bin"))]
    assert len(pixels) == sum(sizes) // 3073
    raw = np.fromfile(cifar / "data_batch_1.bin", dtype=np.uint8, count=2 * 3073)
    assert np.array_equal(pixels[1], raw[3073 + 1:])  # skips the label byte
    assert len(ex.load_cifar10_pixels(str(cifar), limit=10)) == 10


def test_fit_random_labels_on_cifar10_images():
    X = ex.normalise_images(ex.load_cifar10_pixels(str(_cifar_dir()), limit=600))
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0)
    rng = np.random.default_rng(7)
    labels = ex.random_labels(len(X), 10, rng)
    net = ex.build_network(X, labels, 10, 256, rng)
    report = ex.fit_report(ex.predict(ex.keras_model(net), X), labels)
    assert report["accuracy"] == 1.0 and report["max_deviation"] < 1e-8


def test_fit_random_labels_on_generated_images():
    rng = np.random.default_rng(8)
    pixels = ex.synthetic_images(300, rng)
    assert pixels.shape == (300, 3072) and pixels.dtype == np.uint8
    X = ex.normalise_images(pixels)
    labels = ex.random_labels(300, 10, rng)
    net = ex.build_network(X, labels, 10, 128, rng)
    assert ex.fit_report(net.forward(X), labels)["accuracy"] == 1.0


def test_cifar_reader_errors(tmp_path):
    with pytest.raises(ExpressivityError, match="no data_batch_"):
        ex.load_cifar10_pixels(str(tmp_path))
    (tmp_path / "data_batch_1.bin").write_bytes(b"\0" * 100)
    with pytest.raises(ExpressivityError, match="not CIFAR-10 binary"):
        ex.load_cifar10_pixels(str(tmp_path))


# --- The launcher --------------------------------------------------------------------------


def _run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, str(REPO / "launch" / "expressivity.py"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_launcher_writes_plot_json_and_a_json_line(tmp_path):
    out = tmp_path / "expressivity"
    proc = _run(f"--output_dir={out}", "--num_points=300", "--dim=16", "--sphere_width=64",
                "--num_images=200", "--image_width=128", f"--cifar_dir={tmp_path / 'absent'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["image_source"].startswith("generated images")
    assert summary["precondition_errors_raised"]
    for name in ("sphere", "images"):
        assert summary[name]["keras_accuracy"] == 1.0
        assert summary[name]["keras_max_deviation"] < 1e-8
        assert summary[name]["keras_count_params"] == summary[name]["formula_params"]
    for name in ("expressivity.json", "margins.png"):
        assert (out / name).stat().st_size > 0


def test_launcher_broken_precondition_is_one_error_line_and_status_2(tmp_path):
    proc = _run(f"--output_dir={tmp_path / 'x'}", "--num_points=200", "--dim=16",
                "--sphere_width=2", "--num_images=0")
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sphere: block 1: no threshold") and "--sphere_width" in last
    assert not (tmp_path / "x").exists()
