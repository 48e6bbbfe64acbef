"""Section 3 (finite-sample expressivity): Theorem 3.2 built by Lemmas B.1 and B.2, its Keras
model, the precondition errors, real and generated images; the checks of launch/expressivity.py
from their settings (theory.expressivity_checks, expressivity_report), and the launcher."""

import dataclasses
import json
import math
import os
from pathlib import Path

import launchers
import numpy as np
import pytest
from launchers import REPO

from resnet_noBN.configs.errors import InputError
from resnet_noBN.theory import expressivity as ex
from resnet_noBN.theory import expressivity_checks, expressivity_report
from resnet_noBN.theory.expressivity import ExpressivityError
from resnet_noBN.theory.settings import ExpressivitySettings


@pytest.fixture
def cifar10_dir(cifar_slices) -> Path:
    """cifar-10-batches-bin of --cifar_slices; the test is skipped where it is absent."""
    folder = cifar_slices / "cifar-10-batches-bin"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    return folder


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
    with pytest.raises(
        ExpressivityError, match=r"points 17 and 250 are duplicates .*different labels.*remove"
    ):
        ex.build_network(X, labels, 5, 32, rng)


def test_too_small_width_names_the_block_and_the_fix():
    X, labels, rng = _sphere_problem(seed=4)
    with pytest.raises(
        ExpressivityError,
        match=r"^block \d+: no threshold t exists for point "
        r"\d+ .*increase the width k",
    ):
        ex.build_network(X, labels, 5, 2, rng)


def test_too_close_points_are_named():
    X, labels, rng = _sphere_problem(seed=5)
    X[3] = X[9] + 1e-4 * rng.standard_normal(X.shape[1])
    X[3] /= np.linalg.norm(X[3])
    with pytest.raises(
        ExpressivityError,
        match=r"points (3 and 9|9 and 3) \(\|\|x_i - x_m\|\| "
        r"= 0.000\d+\) are too close",
    ):
        ex.build_network(X, labels, 5, 64, rng)


def test_point_dominated_by_a_surrogate_label_is_named():
    # k = 1: point 0 moves to q_0 = ±1, and the opposite point −x_0 then sees it above itself.
    X = np.array([[0.6, 0.8], [-0.6, -0.8]])
    with pytest.raises(
        ExpressivityError,
        match=r"^block 2: .* point 1 .*surrogate label q_0, "
        r"where point 0 now sits.*increase the width k",
    ):
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


# --- Lemma B.1 as stated: single bias -(1 - 2ρ), hypotheses measured after the projection ---


def test_lemma_conditions_measure_rho_and_the_inner_products():
    H = np.array([[1.1, 0.0], [0.0, 0.9], [0.5, 0.5]])
    Q = np.array([[0.6, -0.8]])
    c = ex.lemma_b1_conditions(H, Q)
    assert c.rho == pytest.approx(max(0.1, 1 - math.sqrt(0.5)))
    assert c.threshold == pytest.approx(1 - 2 * c.rho)
    assert c.max_inner_points == pytest.approx(0.55)  # <h_0, h_2>
    assert c.max_inner_surrogates == pytest.approx(0.66)  # <h_0, q_0>
    assert c.min_norm2 == pytest.approx(0.5)
    assert not c.holds and c.failure().startswith("max <alpha_i, alpha_j> = 0.55 >= t")


def test_lemma_conditions_hold_for_orthonormal_points_and_fail_on_each_inequality():
    Q = np.array([[-1.0, 0.0, 0.0]])
    H = 0.95 * np.eye(3)  # ρ = 0.05, t = 0.9 < ‖α‖² = 0.9025, inner products 0
    assert ex.lemma_b1_conditions(H, Q).holds and ex.lemma_b1_conditions(H, Q).failure() is None
    assert "<alpha_i, q_c>" in ex.lemma_b1_conditions(H, -Q).failure()  # 0.95 >= 0.9
    assert "<= 0" in ex.lemma_b1_conditions(np.diag([1.6, 1.0, 1.0]), Q).failure()
    assert (
        "max <alpha_i, alpha_j>"
        in ex.lemma_b1_conditions(np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]), Q).failure()
    )
    assert "min ||alpha_i||^2" in ex.lemma_b1_conditions(np.eye(3), Q).failure()  # t = 1


def test_single_bias_network_fits_where_the_hypotheses_hold():
    X, labels, _ = _sphere_problem(n=400, d=64, r=5, seed=9)
    widths = [16, 32, 64, 128, 256, 512]
    k, conditions = ex.smallest_lemma_width(X, 5, widths, seed=1)
    assert k is not None and conditions.holds
    smaller = widths[widths.index(k) - 1]
    A0, Q = ex.projection(64, smaller, 5, np.random.default_rng([1, smaller]))
    assert not ex.lemma_b1_conditions(X @ A0.T, Q).holds  # k is the smallest on the grid
    net = ex.build_network(X, labels, 5, k, np.random.default_rng([1, k]), single_bias=True)
    assert net.threshold == pytest.approx(conditions.threshold)
    assert all(np.all(block.b[block.U.any(axis=1)] == -net.threshold) for block in net.blocks)
    report = ex.fit_report(net.forward(X), labels)
    assert report["accuracy"] == 1.0 and report["max_deviation"] < 1e-10


def test_single_bias_network_reports_a_width_below_the_lemma():
    X, labels, rng = _sphere_problem(n=400, d=64, r=5, seed=10)
    with pytest.raises(
        ExpressivityError,
        match=r"single threshold t = .* of Lemma B.1 does not "
        r"separate point \d+.*increase the width k",
    ):
        ex.build_network(X, labels, 5, 48, np.random.default_rng(48), single_bias=True)
    net = ex.build_network(X, labels, 5, 48, rng)  # the per-row thresholds still fit at k = 48
    assert ex.fit_report(net.forward(X), labels)["accuracy"] == 1.0


def test_wrong_threshold_constant_breaks_the_single_bias_network():
    # With t = 1 − ρ instead of 1 − 2ρ (a wrong constant), t can exceed the smallest ‖α(i)‖².
    X, labels, _ = _sphere_problem(n=400, d=64, r=5, seed=9)
    k, _ = ex.smallest_lemma_width(X, 5, [16, 32, 64, 128, 256, 512], seed=1)
    A0, Q = ex.projection(64, k, 5, np.random.default_rng([1, k]))
    H = X @ A0.T
    rho = ex.norm_distortion(H)
    assert np.min(np.sum(H**2, axis=1)) < 1 - rho  # the wrong t is above some ‖α(i)‖²
    with pytest.raises(ExpressivityError, match="does not separate point"):
        batch = np.arange(len(X))[np.argsort(np.sum(H**2, axis=1))[:k]]
        ex._block_for(batch, H, Q[labels], np.zeros(len(X), bool), X, labels, 1, 1 - rho)


def test_min_pairwise_distance_and_chunked_inner_products():
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    assert ex.min_pairwise_distance(X) == pytest.approx(math.sqrt(2 - 2 * 0.8))
    H = np.random.default_rng(0).standard_normal((50, 4))
    inner = H @ H.T
    np.fill_diagonal(inner, -np.inf)
    assert ex.max_off_diagonal_inner(H, chunk=7) == pytest.approx(inner.max())
    assert ex.max_off_diagonal_inner(H, stop_at=-1e9, chunk=7) <= inner.max()


# --- Images with random labels -------------------------------------------------------------


def test_read_cifar10_binary_records(cifar10_dir):
    pixels = ex.load_cifar10_pixels(str(cifar10_dir))
    assert pixels.dtype == np.uint8 and pixels.shape[1] == 3072
    sizes = [os.path.getsize(p) for p in sorted(cifar10_dir.glob("data_batch_*.bin"))]
    assert len(pixels) == sum(sizes) // 3073
    raw = np.fromfile(cifar10_dir / "data_batch_1.bin", dtype=np.uint8, count=2 * 3073)
    assert np.array_equal(pixels[1], raw[3073 + 1 :])  # skips the label byte
    assert len(ex.load_cifar10_pixels(str(cifar10_dir), limit=10)) == 10


def test_fit_random_labels_on_cifar10_images(cifar10_dir):
    X = ex.normalise_images(ex.load_cifar10_pixels(str(cifar10_dir), limit=600))
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


def test_cifar_reader_errors(tmp_path, write_cifar):
    with pytest.raises(
        ExpressivityError,
        match="lacks data_batch_1.bin.*: --cifar_dir must be the folder holding the",
    ):
        ex.load_cifar10_pixels(str(tmp_path))
    write_cifar(tmp_path, "cifar10", 2)
    (tmp_path / "data_batch_1.bin").write_bytes(b"\0" * 100)
    with pytest.raises(ExpressivityError, match="data_batch_1.bin is 100 bytes, not a whole"):
        ex.load_cifar10_pixels(str(tmp_path))


# --- The launcher's checks, from their settings --------------------------------------------

_SETTINGS = ExpressivitySettings(  # the launcher's defaults, made small
    output_dir="unused",
    num_classes=4,
    num_points=100,
    dim=16,
    sphere_width=64,
    num_images=10,
    image_width=64,
    sweep_sizes=(100,),
    sweep_images=10,
)


def test_fit_check_builds_the_network_at_the_width_its_flag_names():
    rng = np.random.default_rng(9)
    X = ex.sphere_points(100, 16, rng)
    lines = []
    result = expressivity_checks.fit("sphere", X, "sphere_width", _SETTINGS, rng, lines.append)
    assert lines[0] == "sphere: n=100, d=16, k=64, r=4, 2 residual blocks"
    assert lines[-1].startswith("  Keras: 100.00% argmax correct")
    assert (result["width"], result["num_classes"], result["residual_blocks"]) == (64, 4, 2)
    assert result["keras_accuracy"] == 1.0 and result["keras_max_deviation"] < 1e-8
    assert (
        result["keras_count_params"]
        == result["formula_params"]
        == 16 * 64 + 2 * (2 * 64 * 64 + 64) + 4 * 64 + 4 * 4 + 4  # kd + ℓ(2k² + k) + rk + r² + r
    )
    narrow = dataclasses.replace(_SETTINGS, sphere_width=2)
    with pytest.raises(InputError, match=r"^sphere: block 1: .*\(the width is --sphere_width\)$"):
        expressivity_checks.fit("sphere", X, "sphere_width", narrow, rng, lines.append)


def test_images_check_reads_cifar_dir_or_generates_images(tmp_path, write_cifar):
    lines = []
    X, source = expressivity_checks.images(_SETTINGS, np.random.default_rng(0), lines.append)
    assert X.shape == (10, 3072) and np.allclose(np.linalg.norm(X, axis=1), 1)
    assert source == "generated images (no --cifar_dir given)"
    assert lines == ["note: no --cifar_dir, so 10 generated 32x32x3 images stand in for CIFAR-10"]
    write_cifar(tmp_path, "cifar10", 4)
    settings = dataclasses.replace(_SETTINGS, cifar_dir=str(tmp_path), num_images=7)
    X, source = expressivity_checks.images(settings, np.random.default_rng(0), lines.append)
    assert X.shape == (7, 3072) and np.allclose(np.linalg.norm(X, axis=1), 1)
    assert source == f"CIFAR-10 train images from {tmp_path}" and len(lines) == 1
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty lacks data_batch_1.bin"):
        expressivity_checks.cifar_images(str(tmp_path / "empty"), 3)


def test_lemma_b1_check_uses_the_classes_and_seed_it_is_given():
    X = ex.sphere_points(100, 16, np.random.default_rng(10))
    lines = []
    result = expressivity_checks.lemma_b1("sphere", X, 32, 3, 5, lines.append)
    A0, Q = ex.projection(16, 32, 3, np.random.default_rng([5, 32]))
    assert result["rho"] == ex.lemma_b1_conditions(X @ A0.T, Q).rho
    assert result["smallest_width"] in expressivity_checks.LEMMA_WIDTHS
    assert result["single_bias_accuracy"] == 1.0
    assert lines[0].startswith("Lemma B.1 as stated, sphere (n=100): at k=32")


def test_the_committed_sweep_table_is_made_again_from_its_record():
    """results/theory/sweep.md, every figure and the fit's line, from results/theory/sweep.json
    (what launch/expressivity.py wrote from one record): a row without a width or parameter
    count as the record has it."""
    folder = REPO / "results" / "theory"
    sweep = json.loads((folder / "sweep.json").read_text())
    assert expressivity_report.sweep_table(sweep) == (folder / "sweep.md").read_text()


def test_summary_of_a_record_keeps_the_last_lines_figures():
    fit = {k: 1 for k in expressivity_report.SUMMARY_KEYS} | {"d": 3, "margins": [0.5]}
    record = {
        "image_source": None,
        "results": {"sphere": fit},
        "precondition_errors": {"duplicate_point": "error", "width_too_small": None},
        "lemma_b1": {"n": 5, "d": 3, "width": 4},
        "sweep": None,
    }
    summary = expressivity_report.summary_of(record, ["a.json"])
    assert summary == {
        "sphere": {k: 1 for k in expressivity_report.SUMMARY_KEYS},
        "lemma_b1": {"n": 5, "width": 4},
        "image_source": None,
        "precondition_errors_raised": False,
        "files": ["a.json"],
    }
    sweep = {"rows": [], "c_fit": 2.0}
    raised = {"duplicate_point": "error", "width_too_small": "error"}
    record |= {
        "lemma_b1": None,
        "sweep": sweep,
        "image_source": "slices",
        "precondition_errors": raised,
    }
    summary = expressivity_report.summary_of(record, [])
    assert summary["lemma_b1"] is None and summary["sweep"] == {"c_fit": 2.0}
    assert summary["image_source"] == "slices" and summary["precondition_errors_raised"] is True


# --- The launcher --------------------------------------------------------------------------


def _run(*args, env=None):
    return launchers.run("launch/expressivity.py", *args, cwd=REPO, env=env)


def test_launcher_writes_plot_json_and_a_json_line(tmp_path):
    out = tmp_path / "expressivity"
    proc = _run(
        f"--output_dir={out}",
        "--num_points=300",
        "--dim=16",
        "--sphere_width=64",
        "--num_images=200",
        "--image_width=128",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["image_source"].startswith("generated images")
    assert "note: no --cifar_dir" in proc.stdout
    lemma = summary["lemma_b1"]
    assert lemma["n"] == 300 and lemma["width"] == 64 and 0 < lemma["rho"] < 0.5
    assert lemma["threshold"] == pytest.approx(1 - 2 * lemma["rho"])
    assert lemma["hypotheses_hold"] == (lemma["failure"] is None)
    assert lemma["smallest_width"] is not None and lemma["single_bias_accuracy"] == 1.0
    assert summary["precondition_errors_raised"]
    for name in ("sphere", "images"):
        assert summary[name]["keras_accuracy"] == 1.0
        assert summary[name]["keras_max_deviation"] < 1e-8
        assert summary[name]["keras_count_params"] == summary[name]["formula_params"]
    for name in ("expressivity.json", "margins.png"):
        assert (out / name).stat().st_size > 0


def test_launcher_sweep_fits_width_and_parameters(tmp_path):
    out = tmp_path / "sweep"
    proc = _run(
        f"--output_dir={out}",
        "--num_points=0",
        "--num_images=0",
        "--dim=32",
        "--sweep",
        "--sweep_sizes=100,400,1600",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    fits = summary["sweep"]
    assert fits["c_fit"] > 0 and 0.8 < fits["params_loglog_slope"] < 1.6
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["n"] for r in rows] == [100, 400, 1600]
    assert all(r["width"] is not None and r["params"] > r["n"] for r in rows)
    for name in ("sweep_width.png", "sweep_params.png", "sweep.md"):
        assert (out / name).stat().st_size > 0


def test_launcher_sweep_includes_the_cifar_slice(tmp_path, cifar10_dir):
    proc = _run(
        f"--output_dir={tmp_path}",
        "--num_points=0",
        "--num_images=0",
        "--sweep",
        "--sweep_sizes=100,200",
        "--sweep_images=300",
        f"--cifar_dir={cifar10_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    assert rows[-1]["data"] == "CIFAR-10 slice" and rows[-1]["d"] == 3072
    assert 0 < rows[-1]["rho_data"] < math.sqrt(2)


def test_launcher_bad_cifar_dir_and_sizes_are_one_error_line(tmp_path):
    """Answered before Keras loads: no backend module imported."""
    for flag, message in (
        (f"--cifar_dir={tmp_path / 'absent'}", "error: --cifar_dir"),
        ("--sweep_sizes=100,x", "error: --sweep_sizes"),
    ):
        proc = _run(
            f"--output_dir={tmp_path / 'x'}",
            "--num_points=0",
            "--num_images=0",
            flag,
            env=launchers.IMPORT_TIMES,
        )
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1].startswith(message)
        assert "resnet_noBN.theory.settings" in launchers.imported(proc)
        assert not launchers.imported(proc) & launchers.BACKEND_MODULES


def test_launcher_broken_precondition_is_one_error_line_and_status_2(tmp_path):
    proc = _run(
        f"--output_dir={tmp_path / 'x'}",
        "--num_points=200",
        "--dim=16",
        "--sphere_width=2",
        "--num_images=0",
    )
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: sphere: block 1: no threshold") and "--sphere_width" in last
    assert not (tmp_path / "x").exists()
