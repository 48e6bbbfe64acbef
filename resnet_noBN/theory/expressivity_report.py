"""Section 3 / Appendix B of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231),
run and reported: the checks of :mod:`resnet_noBN.theory.expressivity_checks` in order, Lemma
B.1's margins per block and the sweep against n as plots, the sweep as a markdown table, and the
figures of the last line of JSON.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from resnet_noBN import plotting
from resnet_noBN.progress import Progress, step_of
from resnet_noBN.theory import expressivity as ex
from resnet_noBN.theory import expressivity_checks as checks
from resnet_noBN.theory.settings import ExpressivitySettings

# The figures of each fit in the last line.
SUMMARY_KEYS = (
    "n",
    "width",
    "keras_accuracy",
    "keras_max_deviation",
    "keras_count_params",
    "formula_params",
    "params_over_n_log_n",
    "smallest_relative_margin",
)


def plot_margins(results: dict, path: str) -> str:
    """Smallest relative margin of Lemma B.1 per block: positive means the thresholds exist."""
    fig, (ax,) = plotting.figure(width=7.0)
    for name, result in results.items():
        ax.semilogy(
            np.arange(1, result["residual_blocks"] + 1),
            result["margins"],
            ".-",
            label=f"{name} (n={result['n']}, k={result['width']})",
        )
    ax.set_xlabel("residual block j")
    ax.set_ylabel("min_i (‖α_i‖² − max_{m≠i} ⟨α_i, h_m⟩) / ‖α_i‖²")
    ax.set_title("Lemma B.1: smallest relative margin per block\n(> 0: every threshold t_i exists)")
    ax.legend(fontsize=8)
    return plotting.save(fig, path)


def plot_sweep(result: dict, output_dir: str) -> list[str]:
    """sweep_width.png (k against n with c·log n/ρ²) and sweep_params.png (log-log)."""
    rows = [r for r in result["rows"] if r["width"] is not None]
    sphere = [r for r in rows if r["data"].startswith("sphere")]
    other = [r for r in rows if not r["data"].startswith("sphere")]
    n = np.array([r["n"] for r in sphere])
    fig, (ax,) = plotting.figure(width=6.5)
    ax.semilogx(n, [r["width"] for r in sphere], "o-", label=sphere[0]["data"])
    ax.semilogx(
        n,
        [result["c_fit"] * r["log_n_over_rho2"] for r in sphere],
        "--",
        label=f"{result['c_fit']:.1f} · log n / ρ²",
    )
    for r in other:
        ax.semilogx([r["n"]], [r["width"]], "s", label=f"{r['data']} (ρ = {r['rho_data']:.3f})")
    ax.set_xlabel("n")
    ax.set_ylabel("smallest width k where Lemma B.1's hypotheses hold")
    ax.set_title("Theorem 3.2: k = O(log n / ρ²)")
    ax.legend(fontsize=8)
    paths = [plotting.save(fig, os.path.join(output_dir, "sweep_width.png"))]
    fig, (ax,) = plotting.figure(width=6.5)
    x = np.array([r["n_log_n_plus_r2"] for r in sphere])
    ax.loglog(
        x,
        [r["params"] for r in sphere],
        "o-",
        label=f"{sphere[0]['data']}: slope {result['params_loglog_slope']:.3f}",
    )
    ax.loglog(x, x * sphere[-1]["params"] / x[-1], ":", label="slope 1 (∝ n log n + r²)")
    for r in other:
        ax.loglog([r["n_log_n_plus_r2"]], [r["params"]], "s", label=r["data"])
    ax.set_xlabel("n log n + r²")
    ax.set_ylabel("parameters kd + ℓ(2k² + k) + rk + r² + r")
    ax.set_title("Theorem 3.2: O(n log n + r²) parameters (single-bias width)")
    ax.legend(fontsize=8)
    paths.append(plotting.save(fig, os.path.join(output_dir, "sweep_params.png")))
    return paths


def sweep_table(result: dict) -> str:
    """The sweep as a markdown table."""
    lines = [
        "| data | n | d | ρ (data) | smallest k | ρ after projection | log n/ρ² | "
        "params | n log n + r² |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['data']} | {r['n']} | {r['d']} | {r['rho_data']:.3f} | "
            f"{r['width']} | {r['rho_projected']:.3f} | {r['log_n_over_rho2']:.2f} | "
            f"{r.get('params', '-')} | {r['n_log_n_plus_r2']:.0f} |"
        )
    lines.append(
        f"\nFit (sphere rows): k ≈ {result['c_fit']:.2f} · log n/ρ² (log-log slope of k "
        f"against log n/ρ²: {result['width_loglog_slope']:.3f}); parameters against "
        f"n log n + r²: log-log slope {result['params_loglog_slope']:.3f}."
    )
    return "\n".join(lines) + "\n"


def run(settings: ExpressivitySettings, say: Callable[[str], None]) -> tuple[dict, list[str]]:
    """Every check of Section 3 in order, all drawing from one generator seeded
    ``settings.seed``, said as they go, each long one followed by the parts done of those
    planned and the time left; the plots go to ``settings.output_dir``, made once the
    fits have succeeded. (The record of expressivity.json, the plots' paths.)"""
    rng = np.random.default_rng(settings.seed)
    results, sphere, source = {}, None, None
    job = Progress(2 * bool(settings.num_points) + bool(settings.num_images) + bool(settings.sweep))
    if settings.num_points:
        sphere = ex.sphere_points(settings.num_points, settings.dim, rng)
        results["sphere"] = step_of(
            job,
            "the sphere fit",
            say,
            lambda: checks.fit("sphere", sphere, "sphere_width", settings, rng, say),
        )
    if settings.num_images:
        X, source = checks.images(settings, rng, say)
        results["images"] = step_of(
            job,
            "the image fit",
            say,
            lambda: checks.fit("images", X, "image_width", settings, rng, say),
        )
    lemma = None
    if sphere is not None:
        lemma = step_of(
            job,
            "Lemma B.1",
            say,
            lambda: checks.lemma_b1(
                "sphere", sphere, settings.sphere_width, settings.num_classes, settings.seed, say
            ),
        )
    errors = checks.precondition_errors(rng)
    for case, message in errors.items():
        say(f"{case}: {message}")
    os.makedirs(settings.output_dir, exist_ok=True)
    plots = []
    if results:
        plots.append(plot_margins(results, os.path.join(settings.output_dir, "margins.png")))
    sweep = None
    if settings.sweep:
        say(f"Sweep of n = {list(settings.sweep_sizes)} ...")
        sweep = step_of(job, "the sweep", say, lambda: checks.sweep(settings, rng, say))
        plots += plot_sweep(sweep, settings.output_dir)
    record = {
        "image_source": source,
        "results": results,
        "precondition_errors": errors,
        "lemma_b1": lemma,
        "sweep": sweep,
    }
    return record, plots


def summary_of(record: dict, files: list[str]) -> dict:
    """The last line's figures, from ``record`` (:func:`run`'s)."""
    summary = {name: {k: fit[k] for k in SUMMARY_KEYS} for name, fit in record["results"].items()}
    lemma, sweep = record["lemma_b1"], record["sweep"]
    summary["lemma_b1"] = lemma and {k: v for k, v in lemma.items() if k != "d"}
    if sweep:
        summary["sweep"] = {k: v for k, v in sweep.items() if k != "rows"}
    summary["image_source"] = record["image_source"]
    summary["precondition_errors_raised"] = all(
        m is not None for m in record["precondition_errors"].values()
    )
    summary["files"] = files
    return summary
