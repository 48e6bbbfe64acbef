"""The health of a comparison of arms (a study), each arm trained from several seeds: what a
diverging run shows before its loss turns NaN (arXiv:1611.04231's CIFAR-100 recipe, lr 0.05,
diverged on Table 1's network), one panel per figure each run logs in ``train.jsonl``
(``trainers.health``): the cross-entropy, the weight-decay term, the gradient norm, the weight
norm and the largest |logit|, against step; the mean over the seeds drawn, their range shaded,
a colour per arm (``arm_curves.band``). Reads nothing but the runs' ``train.jsonl``."""

from __future__ import annotations

import os

from resnet_noBN.runs.arm_curves import band
from resnet_noBN.trainers import run_log

# train.jsonl's field -> the panel's label
PANELS = {
    "cross_entropy": "cross-entropy (recent batches)",
    "weight_decay": "weight-decay term r·Σ‖W‖²/2",
    "grad_norm": "gradient norm",
    "weight_norm": "weight norm",
    "max_abs_logit": "largest |logit|",
}


def plot(arms: dict[str, list[str]], path: str, title: str, batch_size: int) -> None:
    """One panel per :data:`PANELS` field against step, one colour per arm (``arms``: name ->
    its seeds' run folders; runs still going are drawn as far as they got), the seeds' range
    shaded; the norms and the logit on a log scale, where growth shows first."""
    from resnet_noBN import plotting  # matplotlib only where the curves are drawn

    fig, axes = plotting.figure(ncols=len(PANELS), width=3.6, height=3.6)
    for i, (name, dirs) in enumerate(arms.items()):
        records = [run_log.read_metrics(d, run_log.TRAIN_FILE) for d in dirs if os.path.isdir(d)]
        for ax, key in zip(axes, PANELS):
            steps, mean, low, high = band(records, key, 1.0)
            if steps:
                ax.plot(steps, mean, "-", color=plotting.colour(i), label=name, linewidth=1.2)
                ax.fill_between(steps, low, high, color=plotting.colour(i), alpha=0.2, linewidth=0)
    for ax, (key, label) in zip(axes, PANELS.items()):
        ax.set_title(label, fontsize=9)
        ax.set_xlabel(f"step (batch {batch_size})", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if key in ("grad_norm", "weight_norm", "max_abs_logit", "weight_decay"):
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    plotting.save(fig, path)
