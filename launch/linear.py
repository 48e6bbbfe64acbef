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

import dataclasses
import json
import os
from pathlib import Path

from absl import flags

from resnet_noBN import cli
from resnet_noBN.errors import InputError
from resnet_noBN.flag_config import int_list
from resnet_noBN.theory import linear_report
from resnet_noBN.theory.linear_checks import LinearSettings

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


def settings_from_flags() -> LinearSettings:
    """The checks' settings the flags give; InputError naming the flag when one is bad."""
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
    depths = int_list("depths", FLAGS.depths)
    if not depths or min(depths) < 1:
        raise InputError(f"--depths must be positive integers, got '{FLAGS.depths}'")
    fields = [f.name for f in dataclasses.fields(LinearSettings) if f.name != "depths"]
    return LinearSettings(**{name: FLAGS[name].value for name in fields}, depths=depths)


@cli.exit_codes
def main(argv):
    del argv
    settings = settings_from_flags()
    os.makedirs(settings.output_dir, exist_ok=True)
    results, plots = linear_report.run(settings, say=lambda line: print(line, flush=True))
    json_path = os.path.join(settings.output_dir, "linear.json")
    Path(json_path).write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(json.dumps(linear_report.summary_of(results, [json_path, *plots])), flush=True)


if __name__ == "__main__":
    cli.run(main)
