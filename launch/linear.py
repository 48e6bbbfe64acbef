"""Section 2 of Hardt & Ma (2016), linear residual networks: every result checked on numbers.

    python launch/linear.py                         # about 5 s on 2 CPU cores
    python launch/linear.py --dim=4 --depths=2,3,6 --steps=300 --output_dir=/tmp/linear

1. Claim 2.3: the closed-form population risk against a Monte-Carlo estimate.
2. Lemma 2.4: the closed-form gradient against TensorFlow autodiff (float64).
3. Theorem 2.1: (I + A_ℓ)⋯(I + A_1) = R with |||A||| ≤ (4π + 3γ)/ℓ, built for random R of
   several sizes, conditionings and depths, rotations by angles near π, repeated −1
   eigenvalues, det R < 0 (extra dimension), the positive definite case (3γ/ℓ), and the
   error when ℓ < 3γ.                                  Plot: factorization.png
4. Theorem 2.2, eq. (2.3): ‖∇f‖² / bound ≥ 1 on random A in the τ-ball.
5. Gradient descent: residual parameterisation from A = 0 against the standard one from 0
   and from a small random init.                      Plot: gradient_descent.png

Writes linear.json and the plots to --output_dir; ends with one line of JSON (the figures).
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
from absl import app, flags

from resnet_noBN.theory import linear
from resnet_noBN.theory import plotting
from resnet_noBN.theory.linear import LinearTheoryError

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/linear", "Where the plots and linear.json go.")
flags.DEFINE_integer("seed", 0, "Seed of every random matrix.")
flags.DEFINE_integer("mc_samples", 1_000_000, "Monte-Carlo samples for Claim 2.3.")
flags.DEFINE_integer("tau_samples", 20, "Random A per (tau, depth, d) for eq. (2.3).")
flags.DEFINE_integer("dim", 8, "d of the gradient-descent experiment.")
flags.DEFINE_string("depths", "2,4,8,16", "Depths of the gradient-descent experiment.")
flags.DEFINE_integer("steps", 500, "Gradient-descent steps.")
flags.DEFINE_float("init_scale", 0.1,
                   "Standard parameterisation's small random init: entries N(0, scale^2/d).")

TAUS = (0.1, 0.5, 0.9)
TAU_DEPTHS = (2, 5, 10)
TAU_DIMS = (2, 5, 10)


def parse_depths(text: str) -> list[int]:
    try:
        depths = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise LinearTheoryError(
            f"--depths must be comma-separated integers, got '{text}'") from None
    if not depths or min(depths) < 1:
        raise LinearTheoryError(f"--depths must be positive integers, got '{text}'")
    return depths


def check_flags() -> list[int]:
    """The validated depths; LinearTheoryError naming the flag otherwise."""
    for name in ("mc_samples", "tau_samples", "dim", "steps"):
        if getattr(FLAGS, name) < 1:
            raise LinearTheoryError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if FLAGS.init_scale < 0:
        raise LinearTheoryError(f"--init_scale must be >= 0, got {FLAGS.init_scale}")
    return parse_depths(FLAGS.depths)


def claim_2_3(rng: np.random.Generator) -> dict:
    """Closed-form risk against a Monte-Carlo estimate, at a random point A."""
    d, depth = 5, 3
    R = rng.standard_normal((d, d))
    Sigma = linear.random_covariance(d, 10.0, rng)
    A = linear.random_tau_ball_point(depth, d, 0.3, rng)
    closed = linear.population_risk(A, R, Sigma)
    mc, stderr = linear.monte_carlo_risk(A, R, Sigma, FLAGS.mc_samples, rng)
    return {"d": d, "depth": depth, "closed_form": closed, "monte_carlo": mc,
            "standard_error": stderr, "z": (mc - closed) / stderr,
            "relative_difference": (mc - closed) / closed}


def lemma_2_4(rng: np.random.Generator) -> dict:
    """Closed-form gradient against TensorFlow autodiff, largest relative error."""
    errors = []
    for d, depth in ((1, 1), (2, 3), (5, 4), (8, 10)):
        R = rng.standard_normal((d, d))
        Sigma = linear.random_covariance(d, 10.0, rng)
        A = 0.3 * rng.standard_normal((depth, d, d))
        closed = linear.risk_gradient(A, R, Sigma)
        auto = linear.autodiff_risk_gradient(A, R, Sigma)
        errors.append(float(np.linalg.norm(closed - auto) / np.linalg.norm(auto)))
    return {"max_relative_error": max(errors), "cases": len(errors)}


def factorization_cases(rng: np.random.Generator):
    """(name, R) for Theorem 2.1: random sizes and conditionings, and the hard rotations."""
    for d in (2, 3, 5, 10):
        for condition in (1.0, 10.0, 1000.0):
            U, V = linear.random_orthonormal(d, rng), linear.random_orthonormal(d, rng)
            s = np.geomspace(condition ** -0.5, condition ** 0.5, d)
            yield f"random d={d} cond={condition:g}", (U * s) @ V.T
    yield "rotation by pi - 1e-9", linear.random_rotation(4, [math.pi - 1e-9, 0.5], rng)
    yield "rotation by pi, pi, pi", linear.random_rotation(7, [math.pi] * 3, rng)
    yield "-I (d=6)", -np.eye(6)
    yield "-I (d=5, det < 0)", -np.eye(5)
    near_pi = linear.random_rotation(6, [math.pi, -math.pi + 1e-12, 3.0], rng)
    yield "near-pi rotations x SPD", near_pi @ linear.random_covariance(6, 100.0, rng)


def theorem_2_1(rng: np.random.Generator) -> dict:
    """Every case at depths ⌈3γ⌉, 2⌈3γ⌉ and 64; the SPD case; the ℓ < 3γ error."""
    checks = []
    for name, R in factorization_cases(rng):
        least = max(1, math.ceil(3 * linear.gamma(R)))
        for depth in sorted({least, 2 * least, 64}):
            checks.append({"case": name, **linear.check_factorization(R, depth)})
    spd = linear.random_covariance(5, 1000.0, rng)
    g = linear.gamma(spd)
    spd_ratios, spd_errors = [], []
    for depth in (math.ceil(3 * g), 20, 100):
        A = linear.spd_factorization(spd, depth)
        spd_errors.append(np.linalg.norm(linear.residual_product(A) - spd, 2)
                          / np.linalg.norm(spd, 2))
        spd_ratios.append(linear.spectral_norms(A).max() / (3 * g / depth))
    try:
        linear.residual_factorization(np.diag([50.0, 1.0]), 3)
        depth_error = None
    except LinearTheoryError as e:
        depth_error = str(e)
    return {"cases": checks,
            "max_relative_error": max(c["relative_error"] for c in checks),
            "max_norm_over_bound": max(c["max_norm"] / c["bound"] for c in checks),
            "spd_max_norm_over_bound": float(max(spd_ratios)),
            "spd_max_relative_error": float(max(spd_errors)),
            "error_when_too_shallow": depth_error}


def theorem_2_2(rng: np.random.Generator) -> dict:
    """Smallest ‖∇f‖² / bound over random A in the τ-ball, and the tight case A_i = −τI."""
    smallest = {}
    for tau in TAUS:
        for depth in TAU_DEPTHS:
            for d in TAU_DIMS:
                ratios = linear.tau_ball_ratios(tau, depth, d, FLAGS.tau_samples, rng)
                smallest[f"tau={tau},depth={depth},d={d}"] = float(ratios.min())
    tau, depth, d = 0.5, 6, 3
    A = np.repeat(-tau * np.eye(d)[None], depth, axis=0)
    R = rng.standard_normal((d, d))
    tight = (np.sum(linear.risk_gradient(A, R, np.eye(d)) ** 2)
             / linear.gradient_norm_lower_bound(A, R, np.eye(d), tau))
    return {"min_ratio": min(smallest.values()), "samples": len(smallest) * FLAGS.tau_samples,
            "min_ratio_by_setting": smallest, "tight_case_ratio": float(tight)}


def plot_factorization(rng: np.random.Generator, path: str) -> str:
    """|||A||| of the construction against ℓ, with the bounds (4π + 3γ)/ℓ and 3γ/ℓ."""
    R = linear.random_rotation(6, [math.pi, math.pi - 1e-9, 2.0], rng) @ np.diag(
        np.exp(np.linspace(-1.5, 1.5, 6)))
    spd = linear.random_covariance(6, math.exp(3.0), rng)
    fig, (ax,) = plotting.figure()
    for label, M, factorize, bound in (
            ("general R", R, lambda d: linear.residual_factorization(R, d).max_norm,
             lambda d: linear.norm_bound(R, d)),
            ("positive definite R", spd,
             lambda d: linear.spectral_norms(linear.spd_factorization(spd, d)).max(),
             lambda d: 3 * linear.gamma(spd) / d)):
        depths = np.unique(np.geomspace(math.ceil(3 * linear.gamma(M)), 300, 25).astype(int))
        line, = ax.loglog(depths, [factorize(int(d)) for d in depths], "o-", ms=3,
                          label=f"{label}: |||A||| built")
        ax.loglog(depths, [bound(int(d)) for d in depths], "--", color=line.get_color(),
                  label="bound (4π+3γ)/ℓ" if label == "general R" else "bound 3γ/ℓ")
    ax.set_xlabel("depth ℓ")
    ax.set_ylabel("max_i ‖A_i‖")
    ax.set_title(f"Theorem 2.1 (γ = {linear.gamma(R):.2f} and {linear.gamma(spd):.2f})")
    ax.legend(fontsize=8)
    return plotting.save(fig, path)


def plot_gradient_descent(curves: dict, path: str) -> str:
    """f − C against steps: residual from A = 0 (left), standard from 0 and small random (right)."""
    fig, (left, right) = plotting.figure(ncols=2)
    for depth, by_start in curves.items():
        line, = left.semilogy(np.maximum(by_start["residual"], 1e-32), label=f"ℓ={depth}")
        right.semilogy(by_start["standard_random"], "--", color=line.get_color(),
                       label=f"ℓ={depth}, small random")
        right.semilogy(by_start["standard_zero"], ":", color=line.get_color(),
                       label=f"ℓ={depth}, B = 0")
    left.set_title("residual (I + A_ℓ)⋯(I + A_1), from A = 0")
    right.set_title("standard B_ℓ⋯B_1")
    right.set_ylim(left.get_ylim())
    for ax in (left, right):
        ax.set_xlabel("gradient-descent step")
        ax.set_ylabel("risk − optimum  (f − C)")
        ax.legend(fontsize=7)
    return plotting.save(fig, path)


def main(argv):
    del argv
    try:
        depths = check_flags()
    except LinearTheoryError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    rng = np.random.default_rng(FLAGS.seed)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    results = {}

    print("Claim 2.3: closed-form risk vs Monte Carlo ...", flush=True)
    results["claim_2_3"] = c23 = claim_2_3(rng)
    print(f"  closed form {c23['closed_form']:.5f}, Monte Carlo {c23['monte_carlo']:.5f} "
          f"± {c23['standard_error']:.5f}")

    print("Lemma 2.4: closed-form gradient vs TensorFlow autodiff ...", flush=True)
    results["lemma_2_4"] = lemma_2_4(rng)
    print(f"  largest relative error {results['lemma_2_4']['max_relative_error']:.2e}")

    print("Theorem 2.1: building small-norm global optima ...", flush=True)
    results["theorem_2_1"] = t21 = theorem_2_1(rng)
    print(f"  {len(t21['cases'])} factorizations: product error <= {t21['max_relative_error']:.1e}"
          f", |||A||| / bound <= {t21['max_norm_over_bound']:.3f}; SPD |||A||| / (3γ/ℓ) <= "
          f"{t21['spd_max_norm_over_bound']:.3f}")
    print(f"  too shallow: {t21['error_when_too_shallow']}")
    factorization_png = plot_factorization(rng, os.path.join(FLAGS.output_dir, "factorization.png"))

    print("Theorem 2.2: gradient lower bound (2.3) in the tau-ball ...", flush=True)
    results["theorem_2_2"] = t22 = theorem_2_2(rng)
    print(f"  smallest ||grad f||^2 / bound over {t22['samples']} points: {t22['min_ratio']:.4f}"
          f" (tight case A_i = -tau I: {t22['tight_case_ratio']:.12f})")

    print(f"Gradient descent, d={FLAGS.dim}, depths {depths}, {FLAGS.steps} steps ...", flush=True)
    R = linear.random_target(FLAGS.dim, math.pi / 2, 0.5, rng)
    Sigma = linear.random_covariance(FLAGS.dim, 4.0, rng)
    curves = linear.compare_parameterisations(R, Sigma, depths, FLAGS.steps,
                                              FLAGS.init_scale, rng)
    final = {name: {str(depth): float(by_start[name][-1]) for depth, by_start in curves.items()}
             for name in ("residual", "standard_zero", "standard_random")}
    for name, by_depth in final.items():
        print(f"  final f - C, {name}: "
              + ", ".join(f"ℓ={k}: {v:.2e}" for k, v in by_depth.items()))
    results["gradient_descent"] = {
        "dim": FLAGS.dim, "steps": FLAGS.steps, "init_scale": FLAGS.init_scale,
        "gamma": linear.gamma(R), "initial_excess": float(curves[depths[0]]["residual"][0]),
        "final_excess": final,
        "curves": {str(k): {n: c.tolist() for n, c in v.items()} for k, v in curves.items()}}
    gd_png = plot_gradient_descent(curves, os.path.join(FLAGS.output_dir, "gradient_descent.png"))

    json_path = os.path.join(FLAGS.output_dir, "linear.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    summary = {
        "claim_2_3_rel_diff": round(c23["relative_difference"], 5),
        "claim_2_3_z": round(c23["z"], 3),
        "lemma_2_4_max_rel_err": results["lemma_2_4"]["max_relative_error"],
        "thm_2_1_cases": len(t21["cases"]),
        "thm_2_1_max_rel_err": t21["max_relative_error"],
        "thm_2_1_max_norm_over_bound": round(t21["max_norm_over_bound"], 4),
        "thm_2_1_spd_max_norm_over_bound": round(t21["spd_max_norm_over_bound"], 4),
        "thm_2_2_min_ratio": round(t22["min_ratio"], 4),
        "thm_2_2_tight_ratio": t22["tight_case_ratio"],
        "gd_final_excess": final,
        "files": [json_path, factorization_png, gd_png],
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    app.run(main)
