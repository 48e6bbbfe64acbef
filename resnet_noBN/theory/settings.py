"""The settings of the theory launchers, checked before anything heavy loads: Section 2's
checks (`launch/linear.py`) and Section 3's (`launch/expressivity.py`) of Hardt & Ma,
"Identity Matters in Deep Learning" (arXiv:1611.04231). Each field is a flag
(``resnet_noBN.configs.flag_config``), its ``help`` the flag's; ``validate`` names the flag of a
setting out of range. No TensorFlow or Keras here: a bad flag is answered in a second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from resnet_noBN.configs.flag_config import check_at_least


@dataclass(frozen=True)
class LinearSettings:
    """The settings of the Section 2 checks; each field is a flag of ``launch/linear.py``
    (``resnet_noBN.configs.flag_config``), its ``help`` the flag's."""

    output_dir: str = field(
        default="runs/linear", metadata={"help": "Where the plots and linear.json go."}
    )
    seed: int = field(default=0, metadata={"help": "Seed of every random matrix."})
    mc_samples: int = field(
        default=1_000_000, metadata={"help": "Monte-Carlo samples for Claim 2.3."}
    )
    tau_samples: int = field(
        default=20, metadata={"help": "Random A per (tau, depth, d) for eq. (2.3)."}
    )
    dim: int = field(default=8, metadata={"help": "d of the gradient-descent experiment."})
    depths: tuple[int, ...] = field(
        default=(2, 4, 8, 16), metadata={"help": "Depths of the gradient-descent experiment."}
    )
    steps: int = field(default=500, metadata={"help": "Gradient-descent steps."})
    init_scale: float = field(
        default=0.1,
        metadata={
            "help": "Standard parameterisation's small random init: entries N(0, scale^2/d)."
        },
    )
    adversarial_starts: int = field(
        default=3,
        metadata={"help": "Starts of the adversarial search for eq. (2.3), per (tau, depth, d)."},
    )
    adversarial_steps: int = field(
        default=200, metadata={"help": "Projected-gradient steps per start."}
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for a setting out of range."""
        counts = (
            "mc_samples",
            "tau_samples",
            "dim",
            "steps",
            "adversarial_starts",
            "adversarial_steps",
        )
        check_at_least(self, counts, 1, ">= 1")
        if self.init_scale < 0:
            raise ValueError(f"--init_scale must be >= 0, got {self.init_scale}")
        if not self.depths or min(self.depths) < 1:
            raise ValueError(
                f"--depths must be positive integers, got '{','.join(map(str, self.depths))}'"
            )


@dataclass(frozen=True)
class ExpressivitySettings:
    """The settings of the Section 3 checks; each field is a flag of ``launch/expressivity.py``
    (``resnet_noBN.configs.flag_config``), its ``help`` the flag's, which the errors name."""

    output_dir: str = field(
        default="runs/expressivity",
        metadata={"help": "Where expressivity.json and margins.png go."},
    )
    seed: int = field(
        default=0, metadata={"help": "Seed of the data, labels, projection and surrogate labels."}
    )
    num_classes: int = field(default=10, metadata={"help": "r, the number of (random) classes."})
    num_points: int = field(
        default=5000, metadata={"help": "n random points on the sphere (0: skip)."}
    )
    dim: int = field(default=128, metadata={"help": "d of the sphere points."})
    sphere_width: int = field(
        default=96, metadata={"help": "k, the width of the network for the sphere points."}
    )
    num_images: int = field(
        default=5170, metadata={"help": "n images (0: skip); at most the number in --cifar_dir."}
    )
    image_width: int = field(
        default=512, metadata={"help": "k, the width of the network for the images."}
    )
    cifar_dir: str | None = field(
        default=None,
        metadata={
            "help": "Folder of the official CIFAR-10 binary files (data_batch_*.bin); "
            "generated images are used when it is not given."
        },
    )
    sweep: bool = field(
        default=False,
        metadata={
            "help": "Also sweep n: Lemma B.1's smallest width and the parameter "
            "count against n (minutes; see --sweep_sizes)."
        },
    )
    sweep_sizes: tuple[int, ...] = field(
        default=(250, 500, 1000, 2000, 5000, 10000, 20000),
        metadata={"help": "n of the sphere points of --sweep."},
    )
    sweep_images: int = field(
        default=5170, metadata={"help": "n of the CIFAR slice in --sweep (with --cifar_dir)."}
    )

    def validate(self) -> None:
        """Raise ValueError (one line, naming the flag) for a setting out of range."""
        counts = ("num_classes", "dim", "sphere_width", "image_width", "sweep_images")
        check_at_least(self, counts, 1, ">= 1")
        check_at_least(self, ("num_points", "num_images"), 0, ">= 0")
        if self.cifar_dir is not None and not os.path.isdir(self.cifar_dir):
            raise ValueError(
                f"--cifar_dir {self.cifar_dir} is no folder; point it at "
                "cifar-10-batches-bin or leave it out (generated images)"
            )
        if not self.sweep_sizes or min(self.sweep_sizes) < 2:
            raise ValueError(
                f"--sweep_sizes must be integers >= 2, got '{','.join(map(str, self.sweep_sizes))}'"
            )
