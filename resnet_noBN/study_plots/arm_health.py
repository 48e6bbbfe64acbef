"""The health of a comparison of arms (a study), each arm trained from several seeds: what a
diverging run shows before its loss turns NaN (arXiv:1611.04231's CIFAR-100 recipe, lr 0.05,
diverged on Table 1's network), one panel per figure each run logs in ``train.jsonl``
(``trainers.health``): the cross-entropy, the weight-decay term, the gradient norm, the weight
norm and the largest |logit|, against step; the mean over the seeds drawn, their range shaded,
a colour per arm (``arm_curves.band``). Reads nothing but the runs' ``train.jsonl``."""

from __future__ import annotations

import math
import os
import statistics

from resnet_noBN.study_plots.arm_curves import band
from resnet_noBN.trainers import run_log

# train.jsonl's field -> the panel's label
PANELS = {
    "cross_entropy": "cross-entropy (recent batches)",
    "weight_decay": "weight-decay term r·Σ‖W‖²/2",
    "grad_norm": "gradient norm",
    "weight_norm": "weight norm",
    "max_abs_logit": "largest |logit|",
}


# a record's gradient norm against the median of this many records before it: its spike
SPIKE_WINDOW = 10


def figures(folder: str) -> dict | None:
    """One run's health in numbers, from its ``train.jsonl`` (None where it has no record):
    ``final_weight_norm`` (its last finite record's), and each as ``[value, step]``:
    ``largest_grad_norm``, ``largest_logit`` (the largest |logit| of a batch), and
    ``largest_spike``, the largest ratio of a record's gradient norm to the median of the
    :data:`SPIKE_WINDOW` records before it (None with fewer records). Non-finite values (a
    diverged run's last records) are left out."""
    records = run_log.read_metrics(folder, run_log.TRAIN_FILE)

    def finite(key):
        return [(r[key], r["step"]) for r in records if key in r and math.isfinite(r[key])]

    norms, logits, weights = finite("grad_norm"), finite("max_abs_logit"), finite("weight_norm")
    if not norms:
        return None
    spikes = [
        (norms[i][0] / median, norms[i][1])
        for i in range(SPIKE_WINDOW, len(norms))
        if (median := statistics.median(n for n, _ in norms[i - SPIKE_WINDOW : i])) > 0
    ]
    return {
        "final_weight_norm": weights[-1][0] if weights else None,
        "largest_grad_norm": list(max(norms)),
        "largest_logit": list(max(logits)) if logits else None,
        "largest_spike": list(max(spikes)) if spikes else None,
    }


def markdown_table(arms: dict[str, list[str]]) -> str:
    """One row per run of ``arms`` (name -> its seeds' folders) that has records: the figures of
    :func:`figures`, each with its step."""

    def at(pair, digits=2):
        return "-" if pair is None else f"{pair[0]:.{digits}f} (step {pair[1]:,})"

    lines = [
        "| experiment | seed | weight norm, last record | largest gradient norm | largest "
        f"spike (× the median of the {SPIKE_WINDOW} records before) | largest \\|logit\\| |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for arm, dirs in arms.items():
        for seed, folder in enumerate(dirs):
            health = figures(folder) if os.path.isdir(folder) else None
            if health is None:
                continue
            weight = health["final_weight_norm"]
            lines.append(
                f"| `{arm}` | {seed} | {'-' if weight is None else f'{weight:.2f}'} | "
                f"{at(health['largest_grad_norm'])} | {at(health['largest_spike'], 1)} | "
                f"{at(health['largest_logit'], 1)} |"
            )
    return "\n".join(lines) + "\n"


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
