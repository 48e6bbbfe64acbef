"""The curves of a comparison of arms (a study, the claims among them), each arm trained from
several seeds: its training loss and test error against step, the mean over the seeds drawn,
their range shaded, a colour per arm. Reads nothing but the runs' ``train.jsonl`` and
``metrics.jsonl``."""

from __future__ import annotations

import math
import os
import statistics

from resnet_noBN.trainers import run_log


def band(records_by_seed: list[list[dict]], key: str, scale: float):
    """Steps, and the mean / min / max over the seeds that reached each step."""
    by_step: dict[int, list[float]] = {}
    for records in records_by_seed:
        for r in records:
            if key in r and math.isfinite(r[key]):
                by_step.setdefault(r["step"], []).append(scale * r[key])
    steps = sorted(by_step)
    return (
        steps,
        [statistics.fmean(by_step[s]) for s in steps],
        [min(by_step[s]) for s in steps],
        [max(by_step[s]) for s in steps],
    )


def plot(
    arms: dict[str, list[str]],
    path: str,
    title: str,
    batch_size: int,
    diverged: dict[str, int] | None = None,
) -> None:
    """Training loss and test error against step, one colour per arm (``arms``: name -> its
    seeds' run folders), the seeds' range shaded; ``diverged``: the step by which each arm whose
    seeds all diverged did so (said in the legend, there being no finite point to draw)."""
    from resnet_noBN import plotting  # matplotlib only where the curves are drawn

    fig, (loss_ax, error_ax) = plotting.figure(ncols=2, width=6.0, height=4.5)
    for i, (name, dirs) in enumerate(arms.items()):
        dirs = [d for d in dirs if os.path.isdir(d)]
        colour, drawn = plotting.colour(i), False
        for ax, file, key, scale in (
            (loss_ax, run_log.TRAIN_FILE, "loss", 1.0),
            (error_ax, run_log.METRICS_FILE, "test_error", 100.0),
        ):
            steps, mean, low, high = band([run_log.read_metrics(d, file) for d in dirs], key, scale)
            if steps:
                ax.plot(steps, mean, "-", color=colour, label=name)
                ax.fill_between(steps, low, high, color=colour, alpha=0.2, linewidth=0)
                drawn = True
        if not drawn and (diverged or {}).get(name) is not None:
            error_ax.plot(
                [],
                [],
                ":",
                color=colour,
                label=f"{name}: diverged (loss NaN) by step {diverged[name]}",
            )
    loss_ax.set_ylabel("training loss (cross-entropy + weight decay)")
    error_ax.set_ylabel("test error (%), whole test split")
    for ax in (loss_ax, error_ax):
        ax.set_xlabel(f"step (batch {batch_size})")
        ax.grid(alpha=0.3)
    for ax in (error_ax, loss_ax):  # the error's, unless no run reached an evaluation
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
            break
    fig.suptitle(title, fontsize=10)
    plotting.save(fig, path)
