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

from resnet_noBN.host import cpu

cpu.default_onednn()  # first, before anything loads TensorFlow: oneDNN on x86 (host/cpu.py)

import json
import os
from pathlib import Path

from resnet_noBN.configs.flag_config import config_from_flags, define_flags
from resnet_noBN.runs import cli
from resnet_noBN.theory.settings import LinearSettings

define_flags(LinearSettings)


@cli.exit_codes
def main(argv):
    del argv
    settings = config_from_flags(LinearSettings)
    from resnet_noBN.theory import linear_report  # TensorFlow: after the flags are checked

    os.makedirs(settings.output_dir, exist_ok=True)
    results, plots = linear_report.run(settings, say=lambda line: print(line, flush=True))
    json_path = os.path.join(settings.output_dir, "linear.json")
    Path(json_path).write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(json.dumps(linear_report.summary_of(results, [json_path, *plots])), flush=True)


if __name__ == "__main__":
    cli.run(main)
