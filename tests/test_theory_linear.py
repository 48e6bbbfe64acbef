"""Section 2 (linear residual networks): Claim 2.3, Lemma 2.4, Theorems 2.1 and 2.2, and the
gradient-descent experiment, checked on numbers; the checks of launch/linear.py from their
settings (theory.linear_checks), and the launcher end to end."""

import json
import math

import launchers
import numpy as np
import pytest
from launchers import REPO

from resnet_noBN.theory import linear, linear_checks
from resnet_noBN.theory.linear import LinearTheoryError
from resnet_noBN.theory.settings import LinearSettings


def _instance(d, depth, seed, scale=0.3):
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((d, d))
    Sigma = linear.random_covariance(d, 10.0, rng)
    A = scale * rng.standard_normal((depth, d, d)) / math.sqrt(d)
    return A, R, Sigma, rng


# --- Claim 2.3 -----------------------------------------------------------------------------


def test_risk_closed_form_matches_monte_carlo():
    A, R, Sigma, rng = _instance(4, 3, seed=1)
    closed = linear.population_risk(A, R, Sigma)
    mc, stderr = linear.monte_carlo_risk(A, R, Sigma, 200_000, rng, batch_size=50_000)
    assert abs(mc - closed) <= 5 * stderr
    assert stderr < 0.01 * closed


def test_risk_is_frobenius_norm_of_E_sigma_half_plus_d():
    A, R, Sigma, _ = _instance(5, 4, seed=2)
    w, Q = np.linalg.eigh(Sigma)
    E = linear.residual_product(A) - R
    expected = np.linalg.norm(E @ (Q * np.sqrt(w)) @ Q.T, "fro") ** 2 + 5
    assert linear.population_risk(A, R, Sigma) == pytest.approx(expected, rel=1e-12)


def test_risk_at_an_exact_fit_is_C_equals_d():
    R = np.diag([2.0, 0.5, 1.5])
    A = linear.spd_factorization(R, 4)
    assert linear.population_risk(A, R, np.eye(3)) == pytest.approx(3.0, abs=1e-12)


# --- Lemma 2.4 -----------------------------------------------------------------------------


@pytest.mark.parametrize("d,depth", [(1, 1), (3, 1), (2, 4), (6, 7)])
def test_gradient_matches_tensorflow_autodiff(d, depth):
    A, R, Sigma, _ = _instance(d, depth, seed=d * 10 + depth)
    closed = linear.risk_gradient(A, R, Sigma)
    auto = linear.autodiff_risk_gradient(A, R, Sigma)
    assert closed.shape == (depth, d, d)
    assert np.linalg.norm(closed - auto) <= 1e-5 * np.linalg.norm(auto)


def test_gradient_is_zero_at_an_exact_fit():
    R = linear.random_target(4, 1.0, 0.5, np.random.default_rng(3))
    A = linear.residual_factorization(R, 6).A
    assert np.abs(linear.risk_gradient(A, R, np.eye(4))).max() < 1e-12


# --- Theorem 2.1 ---------------------------------------------------------------------------


def _random_matrix(d, condition, rng):
    U, V = linear.random_orthonormal(d, rng), linear.random_orthonormal(d, rng)
    return (U * np.geomspace(condition**-0.5, condition**0.5, d)) @ V.T


def _assert_theorem_2_1(R, depth):
    check = linear.check_factorization(R, depth)
    assert check["relative_error"] < 1e-12, check
    assert check["max_norm"] <= check["bound"], check


@pytest.mark.parametrize("d", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("condition", [1.0, 10.0, 1e3])
def test_factorization_of_random_matrices(d, condition):
    rng = np.random.default_rng(int(d * condition))
    for _ in range(3):  # a mix of det R > 0 and det R < 0
        R = _random_matrix(d, condition, rng)
        least = max(1, math.ceil(3 * linear.gamma(R)))
        for depth in sorted({least, 2 * least, 40}):
            _assert_theorem_2_1(R, depth)


@pytest.mark.parametrize(
    "angles",
    [
        [math.pi - 1e-9],
        [math.pi - 1e-6, -(math.pi - 1e-12), 1.0],
        [math.pi, math.pi, math.pi],  # repeated -1 eigenvalues
        [math.pi, -math.pi + 1e-15, 1e-13, 2.0, 2.0 + 1e-9],
    ],
)
@pytest.mark.parametrize("fixed", [0, 1])
def test_rotation_form_near_pi(angles, fixed):
    d = 2 * len(angles) + fixed
    O = linear.random_rotation(d, angles, np.random.default_rng(len(angles) + fixed))
    form = linear.rotation_form(O)
    S = form.basis
    assert np.allclose(S.T @ S, np.eye(d), atol=1e-13)
    assert np.linalg.norm(S @ form.blocks() @ S.T - O, 2) < 1e-12
    assert np.sort(np.abs(form.angles)) == pytest.approx(
        np.sort(np.abs(np.asarray(angles, float)[np.abs(angles) > 1e-12])), abs=1e-9
    )
    for q in (1, 2, 5, 30):
        root = form.root(q)
        assert np.linalg.norm(np.linalg.matrix_power(root, q) - O, 2) < 1e-12
        assert np.linalg.norm(root - np.eye(d), 2) <= math.pi / q + 1e-12
    _assert_theorem_2_1(O @ linear.random_covariance(d, 50.0, np.random.default_rng(0)), 12)


@pytest.mark.parametrize("d", [2, 4, 6])
def test_minus_identity(d):
    for depth in (1, 2, 7):
        _assert_theorem_2_1(-np.eye(d), depth)
    assert linear.residual_factorization(-np.eye(d), 4).rotation_layers == 4


def test_negative_determinant_appends_a_dimension():
    rng = np.random.default_rng(5)
    R = _random_matrix(3, 20.0, rng)
    R[:, 0] *= np.sign(np.linalg.det(R)) * -1
    assert np.linalg.det(R) < 0
    f = linear.residual_factorization(R, 10)
    assert f.extra_dimension and f.A.shape == (10, 4, 4)
    product = linear.residual_product(f.A)
    assert np.allclose(product[:3, :3], R, atol=1e-12)
    assert product[3, 3] == pytest.approx(-1.0, abs=1e-12)
    assert np.abs(product[:3, 3]).max() < 1e-12 and np.abs(product[3, :3]).max() < 1e-12
    assert f.max_norm <= linear.norm_bound(R, 10)


def test_symmetric_positive_definite_case():
    R = linear.random_covariance(6, math.exp(4.0), np.random.default_rng(6))
    g = linear.gamma(R)
    assert g == pytest.approx(2.0)
    for depth in (6, 13, 100):
        A = linear.spd_factorization(R, depth)
        assert np.allclose(A, A[0]) and np.allclose(A[0], A[0].T)
        assert np.linalg.norm(linear.residual_product(A) - R, 2) < 1e-12 * np.linalg.norm(R, 2)
        assert linear.spectral_norms(A).max() <= 3 * g / depth


def test_depth_one_is_R_minus_identity():
    R = linear.random_rotation(2, [2.0], np.random.default_rng(7)) * 1.1
    f = linear.residual_factorization(R, 1)
    assert np.allclose(f.A[0], R - np.eye(2))


def test_too_shallow_names_the_depth_needed():
    R = np.diag([math.exp(2.5), 1.0])  # gamma = 2.5, 3 gamma = 7.5
    with pytest.raises(LinearTheoryError, match=r"use depth >= 8"):
        linear.residual_factorization(R, 7)
    with pytest.raises(LinearTheoryError, match=r"use depth >= 8"):
        linear.spd_factorization(R, 3)
    _assert_theorem_2_1(R, 8)


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(LinearTheoryError, match="singular"):
        linear.residual_factorization(np.array([[1.0, 2.0], [2.0, 4.0]]), 5)
    with pytest.raises(LinearTheoryError, match="square"):
        linear.residual_factorization(np.ones((2, 3)), 5)
    with pytest.raises(LinearTheoryError, match="positive integer"):
        linear.residual_factorization(np.eye(2), 0)
    with pytest.raises(LinearTheoryError, match="not symmetric"):
        linear.spd_factorization(np.array([[1.0, 0.5], [0.0, 1.0]]), 3)
    with pytest.raises(LinearTheoryError, match="not positive definite"):
        linear.spd_factorization(np.diag([1.0, -1.0]), 3)
    with pytest.raises(LinearTheoryError, match="det -1"):
        linear.rotation_form(np.diag([1.0, -1.0]))


@pytest.mark.parametrize("d", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("condition", [1.0, 10.0, 1e3])
def test_paper_construction_of_random_matrices(d, condition):
    rng = np.random.default_rng(int(d * condition) + 1)
    for _ in range(3):  # a mix of det R > 0 and det R < 0
        R = _random_matrix(d, condition, rng)
        least = max(3, math.ceil(3 * linear.gamma(R)))
        for depth in sorted({least, least + 1, least + 2, 2 * least, 40} - {5}):
            check = linear.check_factorization(R, depth, linear.paper_factorization)
            assert check["relative_error"] < 1e-12, check
            assert check["max_norm"] <= check["bound"], check
            q, p, _ = linear.paper_split(depth)
            assert (check["rotation_layers"], check["scaling_layers"]) == (2 * q, p)


def test_paper_split_is_a_quarter_for_each_rotation_and_the_rest_for_K():
    assert [linear.paper_split(depth) for depth in (3, 4, 5, 8, 9, 100)] == [
        (1, 1, 1),
        (1, 2, 1),
        (2, 1, 2),
        (2, 4, 2),
        (3, 3, 3),
        (25, 50, 25),
    ]
    with pytest.raises(LinearTheoryError, match="depth >= 3"):
        linear.paper_factorization(np.eye(2), 2)


def test_paper_construction_layers_are_roots_of_V_K_U():
    rng = np.random.default_rng(11)
    R = linear.random_rotation(4, [math.pi, 1.0], rng) @ np.diag([3.0, 0.5, 1.0, 2.0])
    f = linear.paper_factorization(R, 12)  # q = 3, p = 6
    layers = linear.residual_layers(f.A)
    V_t, K, U = (
        linear.chain_product(layers[:3]),
        linear.chain_product(layers[3:9]),
        linear.chain_product(layers[9:]),
    )
    for W in (V_t, U):
        assert np.allclose(W.T @ W, np.eye(4), atol=1e-12) and np.linalg.det(W) > 0
    assert np.allclose(K, np.diag(np.diag(K)), atol=1e-12) and np.all(np.diag(K) > 0)
    assert np.allclose(U @ K @ V_t, R, atol=1e-12)


def test_paper_split_exceeds_the_bound_only_in_the_depth_5_corner():
    # ℓ = 5 gives K a single layer (p = 1): ‖K − I‖ = e^γ − 1 > (4π + 3γ)/5 once γ > 1.482.
    R = np.diag(np.exp([1.6, -1.6, 0.0]))
    paper = linear.check_factorization(R, 5, linear.paper_factorization)
    assert paper["max_norm"] == pytest.approx(math.exp(1.6) - 1)
    assert paper["max_norm"] > paper["bound"]
    assert linear.check_factorization(R, 5)["max_norm"] <= paper["bound"]  # polar form holds
    R = np.diag(np.exp([1.45, -1.45, 0.0]))
    paper = linear.check_factorization(R, 5, linear.paper_factorization)
    assert paper["max_norm"] <= paper["bound"]


# --- Theorem 2.2 ---------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [0.05, 0.5, 0.9])
@pytest.mark.parametrize("depth,d", [(1, 3), (3, 2), (8, 5)])
def test_gradient_lower_bound_in_the_tau_ball(tau, depth, d):
    ratios = linear.tau_ball_ratios(tau, depth, d, 10, np.random.default_rng(int(tau * 100)))
    assert ratios.min() >= 1.0


def test_gradient_lower_bound_is_tight_at_minus_tau_identity():
    tau, depth, d = 0.4, 5, 3
    A = np.repeat(-tau * np.eye(d)[None], depth, axis=0)
    R = np.random.default_rng(8).standard_normal((d, d))
    bound = linear.gradient_norm_lower_bound(A, R, np.eye(d), tau)
    grad_sq = np.sum(linear.risk_gradient(A, R, np.eye(d)) ** 2)
    assert grad_sq == pytest.approx(bound, rel=1e-12)


def test_worst_target_minimises_the_ratio_over_R():
    rng = np.random.default_rng(12)
    tau, Sigma = 0.5, linear.random_covariance(3, 10.0, rng)
    A = linear.random_tau_ball_point(4, 3, tau, rng)
    R = linear.worst_target(A, Sigma)
    assert np.linalg.norm(linear.residual_product(A) - R) == pytest.approx(1.0)
    worst = linear.eq23_ratio(A, R, Sigma, tau)
    assert worst >= 1.0
    for _ in range(50):
        other = R + 0.3 * rng.standard_normal((3, 3))
        assert linear.eq23_ratio(A, other, Sigma, tau) >= worst * (1 - 1e-12)


def test_projection_to_the_tau_ball():
    A = np.random.default_rng(13).standard_normal((3, 4, 4))
    P = linear.project_to_tau_ball(A, 0.5)
    assert linear.spectral_norms(P).max() == pytest.approx(0.5)
    small = 0.1 * A / linear.spectral_norms(A).max()
    assert np.allclose(linear.project_to_tau_ball(small, 0.5), small, atol=1e-15)


@pytest.mark.parametrize("d,depth,tau", [(2, 3, 0.5), (3, 5, 0.1), (4, 2, 0.9)])
def test_adversarial_search_reaches_the_bound_and_never_crosses_it(d, depth, tau):
    rng = np.random.default_rng(d * depth)
    Sigma = linear.random_covariance(d, 10.0, rng)
    found = linear.adversarial_eq23_search(depth, d, tau, Sigma, rng, starts=2, steps=150)
    assert 1 - 1e-9 <= found["min_ratio"] <= 1.001  # tight, and Theorem 2.2 holds
    assert linear.spectral_norms(found["A"]).max() <= tau * (1 + 1e-12)
    assert found["min_ratio"] == pytest.approx(
        linear.eq23_ratio(found["A"], found["R"], Sigma, tau), rel=1e-12
    )
    random_points = linear.tau_ball_ratios(tau, depth, d, 20, rng)
    assert random_points.min() > 1.2  # sampling alone stays far from the bound


def test_adversarial_search_violates_the_bound_with_8l_instead_of_4l():
    rng = np.random.default_rng(14)
    Sigma = linear.random_covariance(3, 10.0, rng)
    found = linear.adversarial_eq23_search(3, 3, 0.5, Sigma, rng, starts=2, steps=150, constant=8.0)
    assert found["min_ratio"] < 0.51  # the wrong bound fails (its infimum is 1/2)


def test_tau_one_admits_a_spurious_critical_point():
    rng = np.random.default_rng(15)
    R, Sigma = rng.standard_normal((3, 3)), linear.random_covariance(3, 10.0, rng)
    for depth in (2, 5):
        point = linear.tau_one_critical_point(R, Sigma, depth)
        assert point["max_layer_norm"] == 1.0
        assert point["gradient_norm"] == 0.0
        assert point["excess_risk"] == pytest.approx(np.trace(R @ Sigma @ R.T))
        assert point["excess_risk"] > 0.1
    with pytest.raises(LinearTheoryError, match="depth >= 2"):
        linear.tau_one_critical_point(R, Sigma, 1)


def test_lower_bound_rejects_points_outside_the_ball():
    A = np.repeat(0.6 * np.eye(2)[None], 3, axis=0)
    with pytest.raises(LinearTheoryError, match="exceeds tau"):
        linear.gradient_norm_lower_bound(A, np.eye(2), np.eye(2), 0.5)
    with pytest.raises(LinearTheoryError, match=r"\[0, 1\)"):
        linear.gradient_norm_lower_bound(A, np.eye(2), np.eye(2), 1.0)


# --- The gradient-descent experiment -------------------------------------------------------


def test_residual_descent_reaches_the_optimum_and_standard_does_not():
    rng = np.random.default_rng(9)
    R = linear.random_target(4, math.pi / 2, 0.5, rng)
    Sigma = linear.random_covariance(4, 4.0, rng)
    curves = linear.compare_parameterisations(R, Sigma, (2, 4, 8), 300, 0.1, rng)
    for depth, c in curves.items():
        start = c["residual"][0]
        assert start == pytest.approx(linear.excess_risk(np.eye(4)[None], R, Sigma))
        assert c["residual"][-1] < 1e-12 * start, depth
        assert np.all(c["standard_zero"] == c["standard_zero"][0]), depth  # B = 0 never moves
        assert c["standard_random"][50] > 10 * c["residual"][50], depth
    assert curves[8]["standard_random"][-1] > 0.5 * curves[8]["standard_random"][0]  # stalls


# --- The launcher's checks, from their settings --------------------------------------------


def _settings(**changes):
    """The launcher's defaults, made small."""
    small = dict(
        output_dir="unused",
        mc_samples=1000,
        tau_samples=1,
        dim=3,
        depths=(2, 4),
        steps=60,
        adversarial_starts=1,
        adversarial_steps=20,
    )
    return LinearSettings(**{**small, **changes})


def test_claim_2_3_check_uses_the_samples_it_is_given():
    few = linear_checks.claim_2_3(np.random.default_rng(0), 10_000)
    many = linear_checks.claim_2_3(np.random.default_rng(0), 160_000)
    assert few["closed_form"] == many["closed_form"]  # the same point A, R, Σ
    assert many["standard_error"] == pytest.approx(few["standard_error"] / 4, rel=0.1)
    assert abs(many["z"]) < 5 and abs(many["relative_difference"]) < 0.01


def test_adversarial_check_searches_every_setting_with_its_starts_and_steps():
    found = linear_checks.adversarial_eq23(np.random.default_rng(1), starts=1, steps=20)
    assert (found["starts"], found["steps"]) == (1, 20)
    settings = len(linear_checks.ADVERSARIAL_DIMS) * len(linear_checks.ADVERSARIAL_DEPTHS)
    assert len(found["min_ratio_by_setting"]) == settings * len(linear_checks.TAUS)
    assert found["min_ratio"] == min(found["min_ratio_by_setting"].values()) >= 1 - 1e-9
    assert found["min_ratio_by_setting"][found["where"]] == found["min_ratio"]
    assert len(found["wrong_constant_by_setting"]) == len(linear_checks.WRONG_CONSTANT_SETTINGS)


def test_theorem_2_2_check_takes_its_samples_and_search_from_the_settings():
    settings = _settings(tau_samples=2, adversarial_starts=1, adversarial_steps=10)
    t22 = linear_checks.theorem_2_2(np.random.default_rng(3), settings)
    cells = len(linear_checks.TAUS) * len(linear_checks.TAU_DEPTHS) * len(linear_checks.TAU_DIMS)
    assert len(t22["min_ratio_by_setting"]) == cells and t22["samples"] == 2 * cells
    assert t22["min_ratio"] >= 1 and t22["min_ratio_wrong_constant"] == t22["min_ratio"] / 2
    assert t22["tight_case_ratio"] == pytest.approx(1.0, abs=1e-9)
    assert (t22["adversarial"]["starts"], t22["adversarial"]["steps"]) == (1, 10)
    assert t22["tau1_counterexample"]["gradient_norm"] == 0


def test_gradient_descent_check_follows_its_settings():
    settings = _settings(dim=4, depths=(2, 3), steps=40, init_scale=0.05)
    rng = np.random.default_rng(2)
    R = linear_checks.GD_TARGETS["benign"](settings.dim, rng)
    result, curves = linear_checks.gradient_descent(R, rng, settings)
    assert (result["dim"], result["steps"], result["init_scale"]) == (4, 40, 0.05)
    assert result["gamma"] == pytest.approx(linear.gamma(R))
    assert list(curves) == [2, 3] and list(result["curves"]) == ["2", "3"]
    for depth, by_start in curves.items():
        assert all(len(c) == 41 for c in by_start.values())
        final = result["final_excess"]
        assert final["residual"][str(depth)] < 1e-3 * result["initial_excess"]
        assert final["standard_zero"][str(depth)] == by_start["standard_zero"][0]  # never moves
    assert result["initial_excess"] == curves[2]["residual"][0]


# --- The launcher --------------------------------------------------------------------------


def _run(script, *args, env=None):
    return launchers.run(f"launch/{script}", *args, cwd=REPO, env=env)


def test_launcher_writes_plots_json_and_a_json_line(tmp_path):
    out = tmp_path / "linear"
    proc = _run(
        "linear.py",
        f"--output_dir={out}",
        "--mc_samples=20000",
        "--tau_samples=2",
        "--dim=3",
        "--depths=2,5",
        "--steps=200",
        "--adversarial_starts=2",
        "--adversarial_steps=100",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["lemma_2_4_max_rel_err"] <= 1e-5
    assert summary["thm_2_1_max_rel_err"] < 1e-12
    assert summary["thm_2_1_max_norm_over_bound"] <= 1
    assert summary["thm_2_1_spd_max_norm_over_bound"] <= 1
    assert summary["thm_2_1_paper_over_bound"] == [["pi rotations x scales e^(+-1.6)", 5]]
    assert summary["thm_2_2_min_ratio"] >= 1
    assert summary["thm_2_2_tight_ratio"] == pytest.approx(1.0, abs=1e-9)
    assert 1 - 1e-9 <= summary["eq23_adversarial_min_ratio"] < 1.001
    assert summary["eq23_adversarial_min_ratio_wrong_constant"] < 0.51
    assert summary["eq23_random_min_ratio_wrong_constant"] > 1  # sampling misses the error
    assert summary["tau1_counterexample"]["gradient_norm"] == 0
    assert summary["tau1_counterexample"]["excess_risk"] > 0
    assert set(summary["gd_final_excess"]) == {"benign", "near_pi", "large_scale"}
    assert max(summary["gd_final_excess"]["benign"]["residual"].values()) < 1e-10
    for name in (
        "linear.json",
        "factorization.png",
        "gradient_descent.png",
        "gradient_descent_near_pi.png",
        "gradient_descent_large_scale.png",
    ):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "linear.json").read_text())["theorem_2_1"]["error_when_too_shallow"]


def test_launcher_bad_flag_is_one_error_line_and_status_2(tmp_path):
    """Answered before TensorFlow loads: no backend module imported."""
    proc = _run(
        "linear.py", f"--output_dir={tmp_path}", "--depths=2,zero", env=launchers.IMPORT_TIMES
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --depths")
    assert "resnet_noBN.theory.settings" in launchers.imported(proc)
    assert not launchers.imported(proc) & launchers.BACKEND_MODULES
