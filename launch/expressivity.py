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

import dataclasses
import json
from pathlib import Path

from absl import flags

from resnet_noBN import cli
from resnet_noBN.errors import InputError
from resnet_noBN.flag_config import int_list
from resnet_noBN.theory import expressivity_report
from resnet_noBN.theory.expressivity_checks import ExpressivitySettings

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


def settings_from_flags() -> ExpressivitySettings:
    """The checks' settings the flags give; InputError naming the flag when one is out of range."""
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
    sizes = int_list("sweep_sizes", FLAGS.sweep_sizes)
    if not sizes or min(sizes) < 2:
        raise InputError(f"--sweep_sizes must be integers >= 2, got '{FLAGS.sweep_sizes}'")
    fields = [f.name for f in dataclasses.fields(ExpressivitySettings) if f.name != "sweep_sizes"]
    return ExpressivitySettings(**{name: FLAGS[name].value for name in fields}, sweep_sizes=sizes)


def write(output_dir: str, name: str, text: str) -> str:
    """``text`` written to ``output_dir``/``name``; its path."""
    path = os.path.join(output_dir, name)
    Path(path).write_text(text, encoding="utf-8")
    return path


@cli.exit_codes
def main(argv):
    del argv
    settings = settings_from_flags()
    record, files = expressivity_report.run(settings, say=lambda line: print(line, flush=True))
    if settings.sweep:
        files.append(
            write(settings.output_dir, "sweep.json", json.dumps(record["sweep"], indent=1))
        )
        files.append(
            write(settings.output_dir, "sweep.md", expressivity_report.sweep_table(record["sweep"]))
        )
    json_path = write(settings.output_dir, "expressivity.json", json.dumps(record, indent=1))
    print(json.dumps(expressivity_report.summary_of(record, [json_path, *files])), flush=True)


if __name__ == "__main__":
    cli.run(main)
