"""Section 2 of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231), run and
reported: the checks of :mod:`resnet_noBN.theory.linear_checks` in order, a progress line before
each and its figures after, the plots of Theorem 2.1 and of gradient descent, and the figures of
the last line of JSON.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from resnet_noBN import plotting
from resnet_noBN.progress import Progress, step_of
from resnet_noBN.theory import linear
from resnet_noBN.theory import linear_checks as checks
from resnet_noBN.theory.settings import LinearSettings


def plot_factorization(rng: np.random.Generator, path: str) -> str:
    """Theorem 2.1: |||A||| of both constructions against ℓ, with the bounds (4π + 3γ)/ℓ and
    3γ/ℓ."""
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


def run_claim_2_3(rng: np.random.Generator, mc_samples: int, say: Callable[[str], None]) -> dict:
    """Claim 2.3's check, said; its results."""
    say("Claim 2.3: closed-form risk vs Monte Carlo ...")
    c23 = checks.claim_2_3(rng, mc_samples)
    say(
        f"  closed form {c23['closed_form']:.5f}, Monte Carlo {c23['monte_carlo']:.5f} "
        f"± {c23['standard_error']:.5f}"
    )
    return c23


def run_lemma_2_4(rng: np.random.Generator, say: Callable[[str], None]) -> dict:
    """Lemma 2.4's check, said; its results."""
    say("Lemma 2.4: closed-form gradient vs TensorFlow autodiff ...")
    result = checks.lemma_2_4(rng)
    say(f"  largest relative error {result['max_relative_error']:.2e}")
    return result


def run_theorem_2_1(
    rng: np.random.Generator, output_dir: str, say: Callable[[str], None]
) -> tuple[dict, str]:
    """Theorem 2.1's cases, said; (the results, the factorization plot's path)."""
    say("Theorem 2.1: building small-norm global optima ...")
    t21 = checks.theorem_2_1(rng)
    say(
        f"  {len(t21['cases'])} factorizations: product error <= {t21['max_relative_error']:.1e}"
        f", |||A||| / bound <= {t21['max_norm_over_bound']:.3f}; SPD |||A||| / (3γ/ℓ) <= "
        f"{t21['spd_max_norm_over_bound']:.3f}"
    )
    say(
        f"  paper's U K V^T split, {len(t21['paper_cases'])} factorizations: |||A||| / bound "
        f"<= {t21['paper_max_norm_over_bound']:.3f}; above the bound: "
        + (
            ", ".join(f"{c['case']} at depth {c['depth']}" for c in t21["paper_over_bound"])
            or "none"
        )
    )
    say(f"  too shallow: {t21['error_when_too_shallow']}")
    return t21, plot_factorization(rng, os.path.join(output_dir, "factorization.png"))


def run_theorem_2_2(
    rng: np.random.Generator, settings: LinearSettings, say: Callable[[str], None]
) -> dict:
    """Theorem 2.2's checks of eq. (2.3), said; their results."""
    say("Theorem 2.2: gradient lower bound (2.3) in the tau-ball ...")
    t22 = checks.theorem_2_2(rng, settings)
    adversarial, tau1 = t22["adversarial"], t22["tau1_counterexample"]
    say(
        f"  random points: smallest ||grad f||^2 / bound over {t22['samples']}: "
        f"{t22['min_ratio']:.4f} (with 8l instead of 4l: {t22['min_ratio_wrong_constant']:.4f})"
        f"; tight case A_i = -tau I: {t22['tight_case_ratio']:.12f}"
    )
    say(
        f"  adversarial search: smallest ratio {adversarial['min_ratio']:.6f} at "
        f"{adversarial['where']}; with 8l instead of 4l: "
        f"{adversarial['wrong_constant_min_ratio']:.6f} (< 1: the wrong bound is violated)"
    )
    say(
        f"  tau = 1: A_1 = A_2 = -I has |||A||| = {tau1['max_layer_norm']:g}, ||grad f|| = "
        f"{tau1['gradient_norm']:g}, f - C_opt = {tau1['excess_risk']:.4g}"
    )
    return t22


def run_gradient_descent(
    rng: np.random.Generator, settings: LinearSettings, say: Callable[[str], None]
) -> tuple[dict, list[str]]:
    """Gradient descent in the residual against the standard parameterisation, per target of
    :data:`linear_checks.GD_TARGETS`: (the results, the plots' paths)."""
    gd, gd_pngs = {}, []
    for target, make_R in checks.GD_TARGETS.items():
        R = make_R(settings.dim, rng)
        say(
            f"Gradient descent, {target} target (gamma {linear.gamma(R):.2f}), d={settings.dim}, "
            f"depths {list(settings.depths)}, {settings.steps} steps ..."
        )
        gd[target], curves = checks.gradient_descent(R, rng, settings)
        for name, by_depth in gd[target]["final_excess"].items():
            say(
                f"  final f - C, {name}: "
                + ", ".join(f"ℓ={k}: {v:.2e}" for k, v in by_depth.items())
            )
        name = "gradient_descent.png" if target == "benign" else f"gradient_descent_{target}.png"
        gd_pngs.append(
            plot_gradient_descent(
                curves,
                os.path.join(settings.output_dir, name),
                f"{target} target, γ = {linear.gamma(R):.2f}",
            )
        )
    return gd, gd_pngs


def run(settings: LinearSettings, say: Callable[[str], None]) -> tuple[dict, list[str]]:
    """Every check of Section 2 in order, all drawing from one generator seeded
    ``settings.seed``, said as they go, each followed by the checks done of five and the time
    left; (the results, the plots' paths in ``output_dir``)."""
    rng = np.random.default_rng(settings.seed)
    job = Progress(5)
    results = {
        "claim_2_3": step_of(
            job, "Claim 2.3", say, lambda: run_claim_2_3(rng, settings.mc_samples, say)
        ),
        "lemma_2_4": step_of(job, "Lemma 2.4", say, lambda: run_lemma_2_4(rng, say)),
    }
    results["theorem_2_1"], factorization_png = step_of(
        job, "Theorem 2.1", say, lambda: run_theorem_2_1(rng, settings.output_dir, say)
    )
    results["theorem_2_2"] = step_of(
        job, "Theorem 2.2", say, lambda: run_theorem_2_2(rng, settings, say)
    )
    results["gradient_descent"], gd_pngs = step_of(
        job, "gradient descent", say, lambda: run_gradient_descent(rng, settings, say)
    )
    return results, [factorization_png, *gd_pngs]


def summary_of(results: dict, files: list[str]) -> dict:
    """The last line's figures, from ``results`` (:func:`run`'s)."""
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
