"""Section 3 of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231),
finite-sample expressivity: fit any labelling, on numbers.

    python launch/expressivity.py                   # about 30 s on 2 CPU cores
    python launch/expressivity.py --num_points=10000 --num_images=0 --output_dir=/tmp/expr
    python launch/expressivity.py --cifar_dir=/data/cifar-10-batches-bin
    python launch/expressivity.py --sweep --cifar_dir=/data/cifar-10-batches-bin   # minutes

Theorem 3.2, constructively (Lemmas B.1 and B.2), on two data sets with RANDOM labels:
random points on the unit sphere of R^--dim, and CIFAR-10 training images (flattened,
centred, unit norm) from --cifar_dir, or generated 32x32x3 images where it is not given. For
each, the practical network (per-row thresholds of Lemma B.1) is built in numpy (checking at
every block that the thresholds exist), loaded into a float64 Keras model, and
``model.predict`` is compared with the one-hot labels: argmax accuracy and the largest
deviation. Parameter counts: Keras' count_params(), the formula kd + l(2k^2 + k) + rk + r^2 + r,
and n log n + r^2. It also shows the errors of broken preconditions (a duplicate point,
a width too small).

Lemma B.1 as stated (JSON "lemma_b1"): on the sphere points, rho = max |‖A_0 x_i‖ − 1| is
measured after the projection and the lemma's hypotheses (<α_i, α_j> < 1 − 2ρ,
<α_i, q_c> < 1 − 2ρ < ‖α_i‖²) are checked at --sphere_width; the smallest width at which they
hold is found, and the network with the lemma's single bias −(1 − 2ρ)·1 is built there.
--sweep: that smallest width and the parameter count for n = --sweep_sizes sphere points (and
the CIFAR slice when --cifar_dir is given), against c·log n/ρ² and n log n + r² (log-log fits).

Writes expressivity.json and margins.png (and sweep.json, sweep.md, sweep_width.png,
sweep_params.png) to --output_dir; ends with one line of JSON.
Bad input or data that break the lemma's preconditions: 'error: ...' on stderr, exit 2.
"""

from __future__ import annotations

from resnet_noBN import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (resnet_noBN.cpu)

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # else TF logs a line per float64 op

import json
import math
import time

import numpy as np
from absl import flags

from resnet_noBN import cli, plotting
from resnet_noBN.errors import InputError
from resnet_noBN.flag_config import int_list
from resnet_noBN.theory import expressivity as ex
from resnet_noBN.theory.expressivity import ExpressivityError

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "output_dir", "runs/expressivity", "Where expressivity.json and margins.png go."
)
flags.DEFINE_integer("seed", 0, "Seed of the data, labels, projection and surrogate labels.")
flags.DEFINE_integer("num_classes", 10, "r, the number of (random) classes.")
flags.DEFINE_integer("num_points", 5000, "n random points on the sphere (0: skip).")
flags.DEFINE_integer("dim", 128, "d of the sphere points.")
flags.DEFINE_integer("sphere_width", 96, "k, the width of the network for the sphere points.")
flags.DEFINE_integer("num_images", 5170, "n images (0: skip); at most the number in --cifar_dir.")
flags.DEFINE_integer("image_width", 512, "k, the width of the network for the images.")
flags.DEFINE_string(
    "cifar_dir",
    None,
    "Folder of the official CIFAR-10 binary files (data_batch_*.bin); "
    "generated images are used when it is not given.",
)
flags.DEFINE_bool(
    "sweep",
    False,
    "Also sweep n: Lemma B.1's smallest width and the parameter "
    "count against n (minutes; see --sweep_sizes).",
)
flags.DEFINE_string(
    "sweep_sizes", "250,500,1000,2000,5000,10000,20000", "n of the sphere points of --sweep."
)
flags.DEFINE_integer("sweep_images", 5170, "n of the CIFAR slice in --sweep (with --cifar_dir).")

# Widths tried for Lemma B.1's hypotheses: 16 · 1.25^j, up to 8192.
LEMMA_WIDTHS = np.unique(np.round(16 * 1.25 ** np.arange(29)).astype(int))


def check_flags() -> list[int]:
    """The sweep sizes; InputError naming the flag when one is out of range."""
    for name in ("num_classes", "dim", "sphere_width", "image_width", "sweep_images"):
        if getattr(FLAGS, name) < 1:
            raise InputError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    for name in ("num_points", "num_images"):
        if getattr(FLAGS, name) < 0:
            raise InputError(f"--{name} must be >= 0, got {getattr(FLAGS, name)}")
    if FLAGS.cifar_dir is not None and not os.path.isdir(FLAGS.cifar_dir):
        raise InputError(
            f"--cifar_dir {FLAGS.cifar_dir} is no folder; point it at "
            "cifar-10-batches-bin or leave it out (generated images)"
        )
    sizes = list(int_list("sweep_sizes", FLAGS.sweep_sizes))
    if not sizes or min(sizes) < 2:
        raise InputError(f"--sweep_sizes must be integers >= 2, got '{FLAGS.sweep_sizes}'")
    return sizes


def cifar_images(n: int) -> np.ndarray:
    """The first n CIFAR-10 train images of --cifar_dir as unit-norm vectors; InputError
    when the folder holds no CIFAR-10 binary files."""
    try:
        return ex.normalise_images(ex.load_cifar10_pixels(FLAGS.cifar_dir, n))
    except ExpressivityError as e:
        raise InputError(str(e)) from None


def images(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """(unit-norm image vectors, where they came from)."""
    if FLAGS.cifar_dir is not None:
        return cifar_images(FLAGS.num_images), f"CIFAR-10 train images from {FLAGS.cifar_dir}"
    print(
        f"note: no --cifar_dir, so {FLAGS.num_images} generated 32x32x3 images stand in "
        "for CIFAR-10",
        flush=True,
    )
    pixels = ex.synthetic_images(FLAGS.num_images, rng)
    return ex.normalise_images(pixels), "generated images (no --cifar_dir given)"


def fit(name: str, X: np.ndarray, width_flag: str, rng: np.random.Generator) -> dict:
    """Build the network for X with random labels, run it in Keras, and report."""
    n, d = X.shape
    r = FLAGS.num_classes
    width = getattr(FLAGS, width_flag)
    labels = ex.random_labels(n, r, rng)
    print(
        f"{name}: n={n}, d={d}, k={width}, r={r}, {math.ceil(n / width)} residual blocks",
        flush=True,
    )
    start = time.perf_counter()
    try:
        net = ex.build_network(
            X, labels, r, width, rng, progress=lambda line: print(line, flush=True)
        )
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
    print(
        f"  Keras: {report['accuracy']:.2%} argmax correct, largest deviation from one-hot "
        f"{report['max_deviation']:.2e}; {result['keras_count_params']:,} parameters "
        f"(formula {result['formula_params']:,}; n log n + r^2 = "
        f"{result['n_log_n_plus_r2']:,.0f}); {done - start:.1f} s",
        flush=True,
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


def lemma_b1(name: str, X: np.ndarray, width: int, seed: int) -> dict:
    """Lemma B.1 as stated on X: its hypotheses at ``width``, the smallest width where they
    hold (:func:`ex.smallest_lemma_width`), and the single-bias network's fit there."""
    n = len(X)
    r = FLAGS.num_classes
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
    print(
        f"Lemma B.1 as stated, {name} (n={n}): at k={width}, rho = {at_width.rho:.4f}, "
        f"hypotheses {'hold' if at_width.holds else 'fail: ' + at_width.failure()}; smallest "
        f"k where they hold: {k}",
        flush=True,
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
        print(
            f"  single bias -(1 - 2 rho) = {-net.threshold:.4f} at k={k}: "
            f"{report['accuracy']:.2%} argmax correct, largest deviation "
            f"{report['max_deviation']:.2e}",
            flush=True,
        )
    return result


def sweep(sizes: list[int], rng: np.random.Generator) -> dict:
    """Lemma B.1's smallest width and Theorem 3.2's parameter count against n: sphere points
    (the first n of one draw) and, with --cifar_dir, the CIFAR slice; log-log fits."""
    points = ex.sphere_points(max(sizes), FLAGS.dim, rng)
    data = [(f"sphere d={FLAGS.dim}", points[:n]) for n in sizes]
    if FLAGS.cifar_dir is not None:
        data.append(("CIFAR-10 slice", cifar_images(FLAGS.sweep_images)))
    rows = []
    for name, X in data:
        start = time.perf_counter()
        n, r = len(X), FLAGS.num_classes
        rho_data = ex.min_pairwise_distance(X)
        k, conditions = ex.smallest_lemma_width(X, r, LEMMA_WIDTHS, FLAGS.seed + n)
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
        print(
            f"  {name}, n={n}: data rho {rho_data:.3f}, smallest lemma width {k}, "
            f"params {row.get('params')}; {time.perf_counter() - start:.1f} s",
            flush=True,
        )
    return {
        "rows": rows,
        **sweep_fits(
            [r for r in rows if r["data"].startswith("sphere") and r["width"] is not None]
        ),
    }


def sweep_fits(rows: list[dict]) -> dict:
    """c in k ≈ c·log n/ρ² (least squares through 0), and the log-log slopes of k against
    log n/ρ² and of the parameter count against n log n + r²."""
    x = np.array([r["log_n_over_rho2"] for r in rows])
    k = np.array([r["width"] for r in rows], float)
    params = np.array([r["params"] for r in rows], float)
    nlogn = np.array([r["n_log_n_plus_r2"] for r in rows])
    return {
        "c_fit": float(x @ k / (x @ x)),
        "width_loglog_slope": float(np.polyfit(np.log(x), np.log(k), 1)[0]),
        "params_loglog_slope": float(np.polyfit(np.log(nlogn), np.log(params), 1)[0]),
    }


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


@cli.exit_codes
def main(argv):
    del argv
    sizes = check_flags()
    rng = np.random.default_rng(FLAGS.seed)
    results = {}
    sphere = None
    if FLAGS.num_points:
        sphere = ex.sphere_points(FLAGS.num_points, FLAGS.dim, rng)
        results["sphere"] = fit("sphere", sphere, "sphere_width", rng)
    source = None
    if FLAGS.num_images:
        X, source = images(rng)
        results["images"] = fit("images", X, "image_width", rng)
    lemma = None if sphere is None else lemma_b1("sphere", sphere, FLAGS.sphere_width, FLAGS.seed)
    errors = precondition_errors(rng)
    for case, message in errors.items():
        print(f"{case}: {message}")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    files = []
    if results:
        files.append(plot_margins(results, os.path.join(FLAGS.output_dir, "margins.png")))
    sweep_result = None
    if FLAGS.sweep:
        print(f"Sweep of n = {sizes} ...", flush=True)
        sweep_result = sweep(sizes, rng)
        files += plot_sweep(sweep_result, FLAGS.output_dir)
        for name, text in (
            ("sweep.json", json.dumps(sweep_result, indent=1)),
            ("sweep.md", sweep_table(sweep_result)),
        ):
            with open(os.path.join(FLAGS.output_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
            files.append(os.path.join(FLAGS.output_dir, name))
    json_path = os.path.join(FLAGS.output_dir, "expressivity.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(
            {
                "image_source": source,
                "results": results,
                "precondition_errors": errors,
                "lemma_b1": lemma,
                "sweep": sweep_result,
            },
            f,
            indent=1,
        )
    files.insert(0, json_path)
    keys = (
        "n",
        "width",
        "keras_accuracy",
        "keras_max_deviation",
        "keras_count_params",
        "formula_params",
        "params_over_n_log_n",
        "smallest_relative_margin",
    )
    summary = {name: {k: result[k] for k in keys} for name, result in results.items()}
    summary["lemma_b1"] = lemma and {k: v for k, v in lemma.items() if k != "d"}
    if sweep_result:
        summary["sweep"] = {k: v for k, v in sweep_result.items() if k != "rows"}
    summary["image_source"] = source
    summary["precondition_errors_raised"] = all(m is not None for m in errors.values())
    summary["files"] = files
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    cli.run(main)
