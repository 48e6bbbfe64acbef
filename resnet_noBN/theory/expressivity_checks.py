"""Section 3 / Appendix B of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231),
checked on numbers: Theorem 3.2's network fitted to random labels and run in Keras, the errors
of broken preconditions, Lemma B.1 as stated, and the sweep of its smallest width and of the
parameter count against n.

The construction is :mod:`resnet_noBN.theory.expressivity`;
:mod:`resnet_noBN.theory.expressivity_report` runs these checks in order and reports them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from resnet_noBN.configs.errors import InputError
from resnet_noBN.theory import expressivity as ex
from resnet_noBN.theory.expressivity import ExpressivityError
from resnet_noBN.theory.settings import ExpressivitySettings

# Widths tried for Lemma B.1's hypotheses: 16 · 1.25^j, up to 8192.
LEMMA_WIDTHS = np.unique(np.round(16 * 1.25 ** np.arange(29)).astype(int))


def cifar_images(cifar_dir: str, n: int) -> np.ndarray:
    """The first n CIFAR-10 train images of ``cifar_dir`` as unit-norm vectors; InputError
    when the folder holds no CIFAR-10 binary files."""
    try:
        return ex.normalise_images(ex.load_cifar10_pixels(cifar_dir, n))
    except ExpressivityError as e:
        raise InputError(str(e)) from None


def images(
    settings: ExpressivitySettings, rng: np.random.Generator, say: Callable[[str], None]
) -> tuple[np.ndarray, str]:
    """(``settings.num_images`` unit-norm image vectors, where they came from): CIFAR-10 from
    ``settings.cifar_dir``, else generated 32x32x3 images."""
    if settings.cifar_dir is not None:
        return (
            cifar_images(settings.cifar_dir, settings.num_images),
            f"CIFAR-10 train images from {settings.cifar_dir}",
        )
    say(
        f"note: no --cifar_dir, so {settings.num_images} generated 32x32x3 images stand in "
        "for CIFAR-10"
    )
    pixels = ex.synthetic_images(settings.num_images, rng)
    return ex.normalise_images(pixels), "generated images (no --cifar_dir given)"


def fit(
    name: str,
    X: np.ndarray,
    width_flag: str,
    settings: ExpressivitySettings,
    rng: np.random.Generator,
    say: Callable[[str], None],
) -> dict:
    """Theorem 3.2: the network for X with random labels, at the width ``settings`` names
    ``width_flag``, run in Keras; its accuracy, deviation, parameter counts and margins.
    InputError naming ``width_flag`` when the data break Lemma B.1's preconditions."""
    n, d = X.shape
    r = settings.num_classes
    width = getattr(settings, width_flag)
    labels = ex.random_labels(n, r, rng)
    say(f"{name}: n={n}, d={d}, k={width}, r={r}, {math.ceil(n / width)} residual blocks")
    start = time.perf_counter()
    try:
        net = ex.build_network(X, labels, r, width, rng, progress=say)
    except ExpressivityError as e:
        raise InputError(f"{name}: {e} (the width is --{width_flag})") from None
    built = time.perf_counter()
    model = ex.keras_model(net)
    outputs = ex.predict(model, X)
    done = time.perf_counter()
    report = ex.fit_report(outputs, labels)
    numpy_report = ex.fit_report(net.forward(X), labels)
    result = {
        "n": n,
        "d": d,
        "width": width,
        "num_classes": r,
        "residual_blocks": len(net.blocks),
        "keras_accuracy": report["accuracy"],
        "keras_max_deviation": report["max_deviation"],
        "numpy_max_deviation": numpy_report["max_deviation"],
        "keras_count_params": int(model.count_params()),
        "formula_params": net.parameter_formula(),
        "n_log_n_plus_r2": n * math.log(n) + r * r,
        "smallest_relative_margin": min(net.margins),
        "margins": net.margins,
        "build_seconds": built - start,
        "keras_seconds": done - built,
    }
    result["params_over_n_log_n"] = result["keras_count_params"] / result["n_log_n_plus_r2"]
    say(
        f"  Keras: {report['accuracy']:.2%} argmax correct, largest deviation from one-hot "
        f"{report['max_deviation']:.2e}; {result['keras_count_params']:,} parameters "
        f"(formula {result['formula_params']:,}; n log n + r^2 = "
        f"{result['n_log_n_plus_r2']:,.0f}); {done - start:.1f} s"
    )
    return result


def precondition_errors(rng: np.random.Generator) -> dict:
    """The errors for data that break Lemma B.1: a duplicate point, a width too small."""
    X = ex.sphere_points(200, 32, rng)
    labels = ex.random_labels(201, 10, rng)
    messages = {}
    for case, points, width in (
        ("duplicate_point", np.vstack([X, X[7]]), 64),
        ("width_too_small", X, 2),
    ):
        try:
            ex.build_network(points, labels[: len(points)], 10, width, rng)
            messages[case] = None
        except ExpressivityError as e:
            messages[case] = str(e)
    return messages


def lemma_b1(
    name: str, X: np.ndarray, width: int, num_classes: int, seed: int, say: Callable[[str], None]
) -> dict:
    """Lemma B.1 as stated on X with ``num_classes`` classes: its hypotheses at ``width``, the
    smallest width where they hold (:func:`ex.smallest_lemma_width`), and the single-bias
    network's fit there."""
    n = len(X)
    r = num_classes
    A0, Q = ex.projection(X.shape[1], width, r, np.random.default_rng([seed, width]))
    at_width = ex.lemma_b1_conditions(X @ A0.T, Q)
    k, conditions = ex.smallest_lemma_width(X, r, LEMMA_WIDTHS, seed)
    result = {
        "n": n,
        "d": X.shape[1],
        "width": width,
        "rho": at_width.rho,
        "threshold": at_width.threshold,
        "hypotheses_hold": at_width.holds,
        "failure": at_width.failure(),
        "smallest_width": k,
        "rho_at_smallest_width": conditions.rho,
        "threshold_at_smallest_width": conditions.threshold,
    }
    say(
        f"Lemma B.1 as stated, {name} (n={n}): at k={width}, rho = {at_width.rho:.4f}, "
        f"hypotheses {'hold' if at_width.holds else 'fail: ' + at_width.failure()}; smallest "
        f"k where they hold: {k}"
    )
    if k is not None:
        labels = ex.random_labels(n, r, np.random.default_rng(seed))
        net = ex.build_network(X, labels, r, k, np.random.default_rng([seed, k]), single_bias=True)
        report = ex.fit_report(net.forward(X), labels)
        result.update(
            single_bias_accuracy=report["accuracy"],
            single_bias_max_deviation=report["max_deviation"],
            params=net.parameter_formula(),
        )
        say(
            f"  single bias -(1 - 2 rho) = {-net.threshold:.4f} at k={k}: "
            f"{report['accuracy']:.2%} argmax correct, largest deviation "
            f"{report['max_deviation']:.2e}"
        )
    return result


def sweep(
    settings: ExpressivitySettings, rng: np.random.Generator, say: Callable[[str], None]
) -> dict:
    """Lemma B.1's smallest width and Theorem 3.2's parameter count against n: sphere points
    (the first n of one draw, n in ``settings.sweep_sizes``) and, with ``settings.cifar_dir``,
    the CIFAR slice; log-log fits."""
    points = ex.sphere_points(max(settings.sweep_sizes), settings.dim, rng)
    data = [(f"sphere d={settings.dim}", points[:n]) for n in settings.sweep_sizes]
    if settings.cifar_dir is not None:
        data.append(("CIFAR-10 slice", cifar_images(settings.cifar_dir, settings.sweep_images)))
    rows = []
    for name, X in data:
        start = time.perf_counter()
        n, r = len(X), settings.num_classes
        rho_data = ex.min_pairwise_distance(X)
        k, conditions = ex.smallest_lemma_width(X, r, LEMMA_WIDTHS, settings.seed + n)
        row = {
            "data": name,
            "n": n,
            "d": X.shape[1],
            "rho_data": rho_data,
            "width": k,
            "rho_projected": conditions.rho,
            "log_n_over_rho2": math.log(n) / rho_data**2,
            "n_log_n_plus_r2": n * math.log(n) + r * r,
        }
        if k is not None:
            ell = math.ceil(n / k)
            row["params"] = k * X.shape[1] + ell * (2 * k * k + k) + r * k + r * r + r
        rows.append(row)
        say(
            f"  {name}, n={n}: data rho {rho_data:.3f}, smallest lemma width {k}, "
            f"params {row.get('params')}; {time.perf_counter() - start:.1f} s"
        )
    return {
        "rows": rows,
        **sweep_fits(
            [r for r in rows if r["data"].startswith("sphere") and r["width"] is not None]
        ),
    }


def sweep_fits(rows: list[dict]) -> dict:
    """c in k ≈ c·log n/ρ² (least squares through 0), and the log-log slopes of k against
    log n/ρ² and of the parameter count against n log n + r² (Theorem 3.2)."""
    x = np.array([r["log_n_over_rho2"] for r in rows])
    k = np.array([r["width"] for r in rows], float)
    params = np.array([r["params"] for r in rows], float)
    nlogn = np.array([r["n_log_n_plus_r2"] for r in rows])
    return {
        "c_fit": float(x @ k / (x @ x)),
        "width_loglog_slope": float(np.polyfit(np.log(x), np.log(k), 1)[0]),
        "params_loglog_slope": float(np.polyfit(np.log(nlogn), np.log(params), 1)[0]),
    }
