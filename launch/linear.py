"""Section 2 of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231), linear
residual networks: every result checked on numbers.

    python launch/linear.py                         # about 40 s on 2 CPU cores
    python launch/linear.py --dim=4 --depths=2,3,6 --steps=300 --output_dir=/tmp/linear
    python launch/linear.py --adversarial_starts=10 --adversarial_steps=1000   # harder search

1. Claim 2.3: the closed-form population risk against a Monte-Carlo estimate.
2. Lemma 2.4: the closed-form gradient against TensorFlow autodiff (float64).
3. Theorem 2.1: (I + A_ℓ)⋯(I + A_1) = R with |||A||| ≤ (4π + 3γ)/ℓ, built two ways (the
   polar form R = O P, and the proof's own U, K, Vᵀ split over ⌈ℓ/4⌉ + (ℓ − 2⌈ℓ/4⌉) + ⌈ℓ/4⌉
   layers) for random R of several sizes, conditionings and depths, rotations by angles
   near π, repeated −1 eigenvalues, det R < 0 (extra dimension), the positive definite case
   (3γ/ℓ), and the error when ℓ < 3γ.                  Plot: factorization.png
4. Theorem 2.2, eq. (2.3): ‖∇f‖² / bound on random A in the τ-ball, and minimised by an
   adversarial search (projected gradient over A, exact worst R); the same search against
   the bound with 8ℓ in place of 4ℓ (must be violated); at τ = 1 the spurious critical point
   A_1 = A_2 = −I (gradient 0, risk above the optimum).
5. Gradient descent: residual parameterisation from A = 0 against the standard one from 0
   and from a small random init, for a benign target, rotations near π and large scales.
   Plots: gradient_descent.png, gradient_descent_near_pi.png, gradient_descent_large_scale.png

Writes linear.json and the plots to --output_dir; ends with one line of JSON (the figures).
"""

from __future__ import annotations

from resnet_noBN import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (resnet_noBN.cpu)

import json
import math
import os

import numpy as np
from absl import flags

from resnet_noBN import cli, plotting
from resnet_noBN.errors import InputError
from resnet_noBN.flag_config import int_list
from resnet_noBN.theory import linear
from resnet_noBN.theory.linear import LinearTheoryError

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/linear", "Where the plots and linear.json go.")
flags.DEFINE_integer("seed", 0, "Seed of every random matrix.")
flags.DEFINE_integer("mc_samples", 1_000_000, "Monte-Carlo samples for Claim 2.3.")
flags.DEFINE_integer("tau_samples", 20, "Random A per (tau, depth, d) for eq. (2.3).")
flags.DEFINE_integer("dim", 8, "d of the gradient-descent experiment.")
flags.DEFINE_string("depths", "2,4,8,16", "Depths of the gradient-descent experiment.")
flags.DEFINE_integer("steps", 500, "Gradient-descent steps.")
flags.DEFINE_float(
    "init_scale", 0.1, "Standard parameterisation's small random init: entries N(0, scale^2/d)."
)
flags.DEFINE_integer(
    "adversarial_starts", 3, "Starts of the adversarial search for eq. (2.3), per (tau, depth, d)."
)
flags.DEFINE_integer("adversarial_steps", 200, "Projected-gradient steps per start.")

TAUS = (0.1, 0.5, 0.9)
TAU_DEPTHS = (2, 5, 10)
TAU_DIMS = (2, 5, 10)
ADVERSARIAL_DEPTHS = (1, 3, 8)
ADVERSARIAL_DIMS = (2, 4)
# (d, depth, tau) where the search is rerun against the wrong constant 8ℓ.
WRONG_CONSTANT_SETTINGS = ((2, 3, 0.5), (4, 8, 0.1), (4, 1, 0.9))
# Targets of the gradient-descent experiment: name -> R(d, rng).
GD_TARGETS = {
    "benign": lambda d, rng: linear.random_target(d, math.pi / 2, 0.5, rng),
    "near_pi": lambda d, rng: linear.random_rotation(d, [math.pi - 0.05] * (d // 2), rng),
    "large_scale": lambda d, rng: linear.random_target(d, math.pi / 2, 2.0, rng),
}


def check_flags() -> list[int]:
    """The validated depths; InputError naming the flag otherwise."""
    for name in (
        "mc_samples",
        "tau_samples",
        "dim",
        "steps",
        "adversarial_starts",
        "adversarial_steps",
    ):
        if getattr(FLAGS, name) < 1:
            raise InputError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    if FLAGS.init_scale < 0:
        raise InputError(f"--init_scale must be >= 0, got {FLAGS.init_scale}")
    depths = list(int_list("depths", FLAGS.depths))
    if not depths or min(depths) < 1:
        raise InputError(f"--depths must be positive integers, got '{FLAGS.depths}'")
    return depths


def claim_2_3(rng: np.random.Generator) -> dict:
    """Closed-form risk against a Monte-Carlo estimate, at a random point A."""
    d, depth = 5, 3
    R = rng.standard_normal((d, d))
    Sigma = linear.random_covariance(d, 10.0, rng)
    A = linear.random_tau_ball_point(depth, d, 0.3, rng)
    closed = linear.population_risk(A, R, Sigma)
    mc, stderr = linear.monte_carlo_risk(A, R, Sigma, FLAGS.mc_samples, rng)
    return {
        "d": d,
        "depth": depth,
        "closed_form": closed,
        "monte_carlo": mc,
        "standard_error": stderr,
        "z": (mc - closed) / stderr,
        "relative_difference": (mc - closed) / closed,
    }


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
            s = np.geomspace(condition**-0.5, condition**0.5, d)
            yield f"random d={d} cond={condition:g}", (U * s) @ V.T
    yield "rotation by pi - 1e-9", linear.random_rotation(4, [math.pi - 1e-9, 0.5], rng)
    yield "rotation by pi, pi, pi", linear.random_rotation(7, [math.pi] * 3, rng)
    yield "-I (d=6)", -np.eye(6)
    yield "-I (d=5, det < 0)", -np.eye(5)
    near_pi = linear.random_rotation(6, [math.pi, -math.pi + 1e-12, 3.0], rng)
    yield "near-pi rotations x SPD", near_pi @ linear.random_covariance(6, 100.0, rng)
    # gamma = 1.6 (depth 5 allowed): the paper's split gives K one layer of norm e^1.6 - 1.
    yield (
        "pi rotations x scales e^(+-1.6)",
        linear.random_rotation(4, [math.pi, math.pi], rng) @ np.diag(np.exp([1.6, -1.6, 0.5, 0.0])),
    )


def theorem_2_1(rng: np.random.Generator) -> dict:
    """Every case at depths ⌈3γ⌉, 2⌈3γ⌉, 5 (where allowed) and 64, by both constructions
    (the paper's needs ℓ ≥ 3); the SPD case; the ℓ < 3γ error."""
    checks, paper_checks = [], []
    for name, R in factorization_cases(rng):
        least = max(1, math.ceil(3 * linear.gamma(R)))
        for depth in sorted({least, 2 * least, max(least, 5), 64}):
            checks.append({"case": name, **linear.check_factorization(R, depth)})
            if depth >= 3:
                paper_checks.append(
                    {
                        "case": name,
                        **linear.check_factorization(R, depth, linear.paper_factorization),
                    }
                )
    spd = linear.random_covariance(5, 1000.0, rng)
    g = linear.gamma(spd)
    spd_ratios, spd_errors = [], []
    for depth in (math.ceil(3 * g), 20, 100):
        A = linear.spd_factorization(spd, depth)
        spd_errors.append(
            np.linalg.norm(linear.residual_product(A) - spd, 2) / np.linalg.norm(spd, 2)
        )
        spd_ratios.append(linear.spectral_norms(A).max() / (3 * g / depth))
    try:
        linear.residual_factorization(np.diag([50.0, 1.0]), 3)
        depth_error = None
    except LinearTheoryError as e:
        depth_error = str(e)
    return {
        "cases": checks,
        "paper_cases": paper_checks,
        "max_relative_error": max(c["relative_error"] for c in checks + paper_checks),
        "max_norm_over_bound": max(c["max_norm"] / c["bound"] for c in checks),
        "paper_max_norm_over_bound": max(c["max_norm"] / c["bound"] for c in paper_checks),
        "paper_over_bound": [c for c in paper_checks if c["max_norm"] > c["bound"]],
        "spd_max_norm_over_bound": float(max(spd_ratios)),
        "spd_max_relative_error": float(max(spd_errors)),
        "error_when_too_shallow": depth_error,
    }


def adversarial_eq23(rng: np.random.Generator) -> dict:
    """Smallest eq. (2.3) ratio found by the adversarial search, per (d, depth, τ), with the
    right constant 4ℓ and, on WRONG_CONSTANT_SETTINGS, the wrong 8ℓ."""

    def search(d, depth, tau, constant):
        Sigma = linear.random_covariance(d, 10.0, rng)
        found = linear.adversarial_eq23_search(
            depth, d, tau, Sigma, rng, FLAGS.adversarial_starts, FLAGS.adversarial_steps, constant
        )
        return float(found["min_ratio"])

    right = {
        f"d={d},depth={depth},tau={tau}": search(d, depth, tau, 4.0)
        for d in ADVERSARIAL_DIMS
        for depth in ADVERSARIAL_DEPTHS
        for tau in TAUS
    }
    wrong = {
        f"d={d},depth={depth},tau={tau}": search(d, depth, tau, 8.0)
        for d, depth, tau in WRONG_CONSTANT_SETTINGS
    }
    where = min(right, key=right.get)
    return {
        "min_ratio": right[where],
        "where": where,
        "min_ratio_by_setting": right,
        "wrong_constant_min_ratio": min(wrong.values()),
        "wrong_constant_by_setting": wrong,
        "starts": FLAGS.adversarial_starts,
        "steps": FLAGS.adversarial_steps,
    }


def theorem_2_2(rng: np.random.Generator) -> dict:
    """eq. (2.3): random points of the τ-ball (right and wrong constant), the tight case
    A_i = −τI, the adversarial search, and the τ = 1 counterexample."""
    smallest = {}
    for tau in TAUS:
        for depth in TAU_DEPTHS:
            for d in TAU_DIMS:
                ratios = linear.tau_ball_ratios(tau, depth, d, FLAGS.tau_samples, rng)
                smallest[f"tau={tau},depth={depth},d={d}"] = float(ratios.min())
    tau, depth, d = 0.5, 6, 3
    A = np.repeat(-tau * np.eye(d)[None], depth, axis=0)
    R = rng.standard_normal((d, d))
    tight = linear.eq23_ratio(A, R, np.eye(d), tau)
    counterexample = linear.tau_one_critical_point(
        rng.standard_normal((4, 4)), linear.random_covariance(4, 10.0, rng)
    )
    return {
        "min_ratio": min(smallest.values()),
        "samples": len(smallest) * FLAGS.tau_samples,
        "min_ratio_wrong_constant": min(smallest.values()) / 2,  # the ratio scales as 1/c
        "min_ratio_by_setting": smallest,
        "tight_case_ratio": float(tight),
        "adversarial": adversarial_eq23(rng),
        "tau1_counterexample": counterexample,
    }


def plot_factorization(rng: np.random.Generator, path: str) -> str:
    """|||A||| of both constructions against ℓ, with the bounds (4π + 3γ)/ℓ and 3γ/ℓ."""
    R = linear.random_rotation(6, [math.pi, math.pi - 1e-9, 2.0], rng) @ np.diag(
        np.exp(np.linspace(-1.5, 1.5, 6))
    )
    spd = linear.random_covariance(6, math.exp(3.0), rng)
    fig, (ax,) = plotting.figure(width=6.5)
    for label, M, factorize, bound in (
        (
            "general R, polar form",
            R,
            lambda d: linear.residual_factorization(R, d).max_norm,
            lambda d: linear.norm_bound(R, d),
        ),
        (
            "general R, paper's U·K·Vᵀ split",
            R,
            lambda d: linear.paper_factorization(R, d).max_norm,
            None,
        ),
        (
            "positive definite R",
            spd,
            lambda d: linear.spectral_norms(linear.spd_factorization(spd, d)).max(),
            lambda d: 3 * linear.gamma(spd) / d,
        ),
    ):
        start = max(3, math.ceil(3 * linear.gamma(M)))
        depths = np.unique(np.geomspace(start, 300, 25).astype(int))
        (line,) = ax.loglog(
            depths, [factorize(int(d)) for d in depths], "o-", ms=3, label=f"{label}: |||A||| built"
        )
        if bound:
            ax.loglog(
                depths,
                [bound(int(d)) for d in depths],
                "--",
                color=line.get_color(),
                label="bound (4π+3γ)/ℓ" if M is R else "bound 3γ/ℓ",
            )
    ax.set_xlabel("depth ℓ")
    ax.set_ylabel("max_i ‖A_i‖")
    ax.set_title(f"Theorem 2.1 (γ = {linear.gamma(R):.2f} and {linear.gamma(spd):.2f})")
    ax.legend(fontsize=8)
    return plotting.save(fig, path)


def plot_gradient_descent(curves: dict, path: str, title: str) -> str:
    """f − C against steps: residual from A = 0 (left), standard from 0 and small random (right)."""
    fig, (left, right) = plotting.figure(ncols=2)
    for depth, by_start in curves.items():
        (line,) = left.semilogy(np.maximum(by_start["residual"], 1e-32), label=f"ℓ={depth}")
        right.semilogy(
            by_start["standard_random"],
            "--",
            color=line.get_color(),
            label=f"ℓ={depth}, small random",
        )
        right.semilogy(
            by_start["standard_zero"], ":", color=line.get_color(), label=f"ℓ={depth}, B = 0"
        )
    left.set_title(f"residual (I + A_ℓ)⋯(I + A_1), from A = 0\n{title}")
    right.set_title(f"standard B_ℓ⋯B_1\n{title}")
    right.set_ylim(left.get_ylim())
    for ax in (left, right):
        ax.set_xlabel("gradient-descent step")
        ax.set_ylabel("risk − optimum  (f − C)")
        ax.legend(fontsize=7)
    return plotting.save(fig, path)


def run_claim_2_3(rng) -> dict:
    print("Claim 2.3: closed-form risk vs Monte Carlo ...", flush=True)
    c23 = claim_2_3(rng)
    print(
        f"  closed form {c23['closed_form']:.5f}, Monte Carlo {c23['monte_carlo']:.5f} "
        f"± {c23['standard_error']:.5f}"
    )
    return c23


def run_lemma_2_4(rng) -> dict:
    print("Lemma 2.4: closed-form gradient vs TensorFlow autodiff ...", flush=True)
    result = lemma_2_4(rng)
    print(f"  largest relative error {result['max_relative_error']:.2e}")
    return result


def run_theorem_2_1(rng) -> tuple[dict, str]:
    """Theorem 2.1's cases, printed; (the results, the factorization plot's path)."""
    print("Theorem 2.1: building small-norm global optima ...", flush=True)
    t21 = theorem_2_1(rng)
    print(
        f"  {len(t21['cases'])} factorizations: product error <= {t21['max_relative_error']:.1e}"
        f", |||A||| / bound <= {t21['max_norm_over_bound']:.3f}; SPD |||A||| / (3γ/ℓ) <= "
        f"{t21['spd_max_norm_over_bound']:.3f}"
    )
    print(
        f"  paper's U K V^T split, {len(t21['paper_cases'])} factorizations: |||A||| / bound "
        f"<= {t21['paper_max_norm_over_bound']:.3f}; above the bound: "
        + (
            ", ".join(f"{c['case']} at depth {c['depth']}" for c in t21["paper_over_bound"])
            or "none"
        )
    )
    print(f"  too shallow: {t21['error_when_too_shallow']}")
    return t21, plot_factorization(rng, os.path.join(FLAGS.output_dir, "factorization.png"))


def run_theorem_2_2(rng) -> dict:
    print("Theorem 2.2: gradient lower bound (2.3) in the tau-ball ...", flush=True)
    t22 = theorem_2_2(rng)
    adversarial, tau1 = t22["adversarial"], t22["tau1_counterexample"]
    print(
        f"  random points: smallest ||grad f||^2 / bound over {t22['samples']}: "
        f"{t22['min_ratio']:.4f} (with 8l instead of 4l: {t22['min_ratio_wrong_constant']:.4f})"
        f"; tight case A_i = -tau I: {t22['tight_case_ratio']:.12f}"
    )
    print(
        f"  adversarial search: smallest ratio {adversarial['min_ratio']:.6f} at "
        f"{adversarial['where']}; with 8l instead of 4l: "
        f"{adversarial['wrong_constant_min_ratio']:.6f} (< 1: the wrong bound is violated)"
    )
    print(
        f"  tau = 1: A_1 = A_2 = -I has |||A||| = {tau1['max_layer_norm']:g}, ||grad f|| = "
        f"{tau1['gradient_norm']:g}, f - C_opt = {tau1['excess_risk']:.4g}"
    )
    return t22


def run_gradient_descent(rng, depths) -> tuple[dict, list[str]]:
    """Gradient descent in the residual against the standard parameterisation, per target:
    (the results, the plots' paths)."""
    gd, gd_pngs = {}, []
    for target, make_R in GD_TARGETS.items():
        R = make_R(FLAGS.dim, rng)
        print(
            f"Gradient descent, {target} target (gamma {linear.gamma(R):.2f}), d={FLAGS.dim}, "
            f"depths {depths}, {FLAGS.steps} steps ...",
            flush=True,
        )
        Sigma = linear.random_covariance(FLAGS.dim, 4.0, rng)
        curves = linear.compare_parameterisations(
            R, Sigma, depths, FLAGS.steps, FLAGS.init_scale, rng
        )
        final = {
            name: {str(k): float(v[name][-1]) for k, v in curves.items()}
            for name in ("residual", "standard_zero", "standard_random")
        }
        for name, by_depth in final.items():
            print(
                f"  final f - C, {name}: "
                + ", ".join(f"ℓ={k}: {v:.2e}" for k, v in by_depth.items())
            )
        gd[target] = {
            "dim": FLAGS.dim,
            "steps": FLAGS.steps,
            "init_scale": FLAGS.init_scale,
            "gamma": linear.gamma(R),
            "initial_excess": float(curves[depths[0]]["residual"][0]),
            "final_excess": final,
            "curves": {str(k): {n: c.tolist() for n, c in v.items()} for k, v in curves.items()},
        }
        name = "gradient_descent.png" if target == "benign" else f"gradient_descent_{target}.png"
        gd_pngs.append(
            plot_gradient_descent(
                curves,
                os.path.join(FLAGS.output_dir, name),
                f"{target} target, γ = {linear.gamma(R):.2f}",
            )
        )
    return gd, gd_pngs


def summary_of(results: dict, files: list[str]) -> dict:
    """The last line's figures, from ``results``."""
    c23, t21, t22 = results["claim_2_3"], results["theorem_2_1"], results["theorem_2_2"]
    adversarial, tau1 = t22["adversarial"], t22["tau1_counterexample"]
    return {
        "claim_2_3_rel_diff": round(c23["relative_difference"], 5),
        "claim_2_3_z": round(c23["z"], 3),
        "lemma_2_4_max_rel_err": results["lemma_2_4"]["max_relative_error"],
        "thm_2_1_cases": len(t21["cases"]),
        "thm_2_1_max_rel_err": t21["max_relative_error"],
        "thm_2_1_max_norm_over_bound": round(t21["max_norm_over_bound"], 4),
        "thm_2_1_spd_max_norm_over_bound": round(t21["spd_max_norm_over_bound"], 4),
        "thm_2_1_paper_max_norm_over_bound": round(t21["paper_max_norm_over_bound"], 4),
        "thm_2_1_paper_over_bound": [(c["case"], c["depth"]) for c in t21["paper_over_bound"]],
        "thm_2_2_min_ratio": round(t22["min_ratio"], 4),
        "thm_2_2_tight_ratio": t22["tight_case_ratio"],
        "eq23_adversarial_min_ratio": adversarial["min_ratio"],
        "eq23_adversarial_where": adversarial["where"],
        "eq23_adversarial_min_ratio_wrong_constant": adversarial["wrong_constant_min_ratio"],
        "eq23_random_min_ratio_wrong_constant": round(t22["min_ratio_wrong_constant"], 4),
        "tau1_counterexample": {
            k: tau1[k] for k in ("max_layer_norm", "gradient_norm", "excess_risk")
        },
        "gd_final_excess": {t: v["final_excess"] for t, v in results["gradient_descent"].items()},
        "files": files,
    }


@cli.exit_codes
def main(argv):
    del argv
    depths = check_flags()
    rng = np.random.default_rng(FLAGS.seed)
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    results = {"claim_2_3": run_claim_2_3(rng), "lemma_2_4": run_lemma_2_4(rng)}
    results["theorem_2_1"], factorization_png = run_theorem_2_1(rng)
    results["theorem_2_2"] = run_theorem_2_2(rng)
    results["gradient_descent"], gd_pngs = run_gradient_descent(rng, depths)
    json_path = os.path.join(FLAGS.output_dir, "linear.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(summary_of(results, [json_path, factorization_png, *gd_pngs])), flush=True)


if __name__ == "__main__":
    cli.run(main)
