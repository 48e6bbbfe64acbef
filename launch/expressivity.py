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

from resnet_noBN.host import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # else TF logs a line per float64 op

import json
from pathlib import Path

from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.runs import cli
from resnet_noBN.theory.settings import ExpressivitySettings

define_flags(ExpressivitySettings)


def write(output_dir: str, name: str, text: str) -> str:
    """``text`` written to ``output_dir``/``name``; its path."""
    path = os.path.join(output_dir, name)
    Path(path).write_text(text, encoding="utf-8")
    return path


@cli.exit_codes
def main(argv):
    del argv
    settings = config_from_flags(ExpressivitySettings)
    from resnet_noBN.theory import expressivity_report  # Keras: after the flags are checked

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
