"""Named architectures: the paper's CIFAR network (arXiv:1611.04231, Table 1) and the reduced
ones this project runs on CPUs, as keyword arguments of ``network_config.ModelConfig`` (whose
defaults are Table 1's), each declared here once.

Plain values, no Keras: the benchmark and its PyTorch twin (``bench/``) read them before any
backend loads. ``ModelConfig.preset(name)`` builds one; ``launch/cifar.py --model=NAME`` starts
from one (a model flag given on the command line still overrides it).
"""

from __future__ import annotations

MODELS = {
    # Table 1: 9 blocks per stage (55 convolutions), stages of 64/128/256 channels
    "paper": {},
    # the full depth at a quarter of the width: the CPU long runs and the claims study
    "quarter": {"stage_widths": (16, 32, 64)},
    # one block per stage at a quarter of the width: the tests, the benchmark's quick model and
    # the small Table 2 study
    "small": {"num_residual_units": 1, "stage_widths": (16, 32, 64)},
}
