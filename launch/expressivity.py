"""Section 3 of Hardt & Ma (2016), finite-sample expressivity: fit any labelling, on numbers.

    python launch/expressivity.py                   # about 20 s on 2 CPU cores
    python launch/expressivity.py --num_points=10000 --num_images=0 --output_dir=/tmp/expr
    python launch/expressivity.py --cifar_dir=/data/cifar-10-batches-bin

Theorem 3.2, constructively (Lemmas B.1 and B.2), on two data sets with RANDOM labels:
random points on the unit sphere of R^--dim, and CIFAR-10 training images (flattened,
centred, unit norm) from --cifar_dir, or generated 32x32x3 images where that folder is
absent. For each, the network of PAPER.md section 3 is built in numpy (checking at every
block that the thresholds of Lemma B.1 exist), loaded into a float64 Keras model, and
``model.predict`` is compared with the one-hot labels: argmax accuracy and the largest
deviation. Parameter counts: Keras' count_params(), the formula kd + l(2k^2 + k) + rk + r^2 + r,
and n log n + r^2. It also shows the errors of broken preconditions (a duplicate point,
a width too small).

Writes expressivity.json and margins.png to --output_dir; ends with one line of JSON.
Bad input or data that break the lemma's preconditions: 'error: ...' on stderr, exit 2.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # else TF logs a line per float64 op

import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from resnet_noBN.theory import expressivity as ex  # noqa: E402
from resnet_noBN.theory import plotting  # noqa: E402
from resnet_noBN.theory.expressivity import ExpressivityError  # noqa: E402

DEFAULT_CIFAR_DIR = (Path(__file__).resolve().parents[1].parent / "shared" / "data"
                     / "cifar-10-batches-bin")

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/expressivity",
                    "Where expressivity.json and margins.png go.")
flags.DEFINE_integer("seed", 0, "Seed of the data, labels, projection and surrogate labels.")
flags.DEFINE_integer("num_classes", 10, "r, the number of (random) classes.")
flags.DEFINE_integer("num_points", 5000, "n random points on the sphere (0: skip).")
flags.DEFINE_integer("dim", 128, "d of the sphere points.")
flags.DEFINE_integer("sphere_width", 96, "k, the width of the network for the sphere points.")
flags.DEFINE_integer("num_images", 5170,
                     "n images (0: skip); at most the number in --cifar_dir.")
flags.DEFINE_integer("image_width", 512, "k, the width of the network for the images.")
flags.DEFINE_string("cifar_dir", str(DEFAULT_CIFAR_DIR),
                    "Folder of the official CIFAR-10 binary files (data_batch_*.bin); "
                    "generated images are used where it does not exist.")


def check_flags() -> None:
    """ExpressivityError naming the flag when one is out of range."""
    for name in ("num_classes", "dim", "sphere_width", "image_width"):
        if getattr(FLAGS, name) < 1:
            raise ExpressivityError(f"--{name} must be >= 1, got {getattr(FLAGS, name)}")
    for name in ("num_points", "num_images"):
        if getattr(FLAGS, name) < 0:
            raise ExpressivityError(f"--{name} must be >= 0, got {getattr(FLAGS, name)}")


def images(rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """(unit-norm image vectors, where they came from)."""
    if os.path.isdir(FLAGS.cifar_dir):
        pixels = ex.load_cifar10_pixels(FLAGS.cifar_dir, FLAGS.num_images)
        source = f"CIFAR-10 train images from {FLAGS.cifar_dir}"
    else:
        pixels = ex.synthetic_images(FLAGS.num_images, rng)
        source = f"generated images ({FLAGS.cifar_dir} is absent)"
    return ex.normalise_images(pixels), source


def fit(name: str, X: np.ndarray, width_flag: str, rng: np.random.Generator) -> dict:
    """Build the network for X with random labels, run it in Keras, and report."""
    n, d = X.shape
    r = FLAGS.num_classes
    width = getattr(FLAGS, width_flag)
    labels = ex.random_labels(n, r, rng)
    print(f"{name}: n={n}, d={d}, k={width}, r={r}, {math.ceil(n / width)} residual blocks",
          flush=True)
    start = time.perf_counter()
    try:
        net = ex.build_network(X, labels, r, width, rng,
                               progress=lambda line: print(line, flush=True))
    except ExpressivityError as e:
        raise ExpressivityError(f"{name}: {e} (the width is --{width_flag})") from None
    built = time.perf_counter()
    model = ex.keras_model(net)
    outputs = ex.predict(model, X)
    done = time.perf_counter()
    report = ex.fit_report(outputs, labels)
    numpy_report = ex.fit_report(net.forward(X), labels)
    result = {
        "n": n, "d": d, "width": width, "num_classes": r, "residual_blocks": len(net.blocks),
        "keras_accuracy": report["accuracy"], "keras_max_deviation": report["max_deviation"],
        "numpy_max_deviation": numpy_report["max_deviation"],
        "keras_count_params": int(model.count_params()),
        "formula_params": net.parameter_formula(),
        "n_log_n_plus_r2": n * math.log(n) + r * r,
        "smallest_relative_margin": min(net.margins),
        "margins": net.margins,
        "build_seconds": built - start, "keras_seconds": done - built,
    }
    result["params_over_n_log_n"] = result["keras_count_params"] / result["n_log_n_plus_r2"]
    print(f"  Keras: {report['accuracy']:.2%} argmax correct, largest deviation from one-hot "
          f"{report['max_deviation']:.2e}; {result['keras_count_params']:,} parameters "
          f"(formula {result['formula_params']:,}; n log n + r^2 = "
          f"{result['n_log_n_plus_r2']:,.0f}); {done - start:.1f} s", flush=True)
    return result


def precondition_errors(rng: np.random.Generator) -> dict:
    """The errors for data that break Lemma B.1: a duplicate point, a width too small."""
    X = ex.sphere_points(200, 32, rng)
    labels = ex.random_labels(201, 10, rng)
    messages = {}
    for case, points, width in (("duplicate_point", np.vstack([X, X[7]]), 64),
                                ("width_too_small", X, 2)):
        try:
            ex.build_network(points, labels[:len(points)], 10, width, rng)
            messages[case] = None
        except ExpressivityError as e:
            messages[case] = str(e)
    return messages


def plot_margins(results: dict, path: str) -> str:
    """Smallest relative margin of Lemma B.1 per block: positive means the thresholds exist."""
    fig, (ax,) = plotting.figure(width=7.0)
    for name, result in results.items():
        ax.semilogy(np.arange(1, result["residual_blocks"] + 1), result["margins"], ".-",
                    label=f"{name} (n={result['n']}, k={result['width']})")
    ax.set_xlabel("residual block j")
    ax.set_ylabel("min_i (‖α_i‖² − max_{m≠i} ⟨α_i, h_m⟩) / ‖α_i‖²")
    ax.set_title("Lemma B.1: smallest relative margin per block\n(> 0: every threshold t_i exists)")
    ax.legend(fontsize=8)
    return plotting.save(fig, path)


def main(argv):
    del argv
    try:
        check_flags()
        rng = np.random.default_rng(FLAGS.seed)
        results = {}
        if FLAGS.num_points:
            results["sphere"] = fit("sphere", ex.sphere_points(FLAGS.num_points, FLAGS.dim, rng),
                                    "sphere_width", rng)
        source = None
        if FLAGS.num_images:
            X, source = images(rng)
            results["images"] = fit("images", X, "image_width", rng)
    except ExpressivityError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    errors = precondition_errors(rng)
    for case, message in errors.items():
        print(f"{case}: {message}")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    files = []
    if results:
        files.append(plot_margins(results, os.path.join(FLAGS.output_dir, "margins.png")))
    json_path = os.path.join(FLAGS.output_dir, "expressivity.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({"image_source": source, "results": results, "precondition_errors": errors},
                  f, indent=1)
    files.insert(0, json_path)
    keys = ("n", "width", "keras_accuracy", "keras_max_deviation", "keras_count_params",
            "formula_params", "params_over_n_log_n", "smallest_relative_margin")
    summary = {name: {k: result[k] for k in keys} for name, result in results.items()}
    summary["image_source"] = source
    summary["precondition_errors_raised"] = all(m is not None for m in errors.values())
    summary["files"] = files
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    app.run(main)
