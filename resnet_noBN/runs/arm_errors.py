"""The final errors of a study's arms as a picture of its table: a row per arm, each seed's
whole-test final error a dot, their mean a tick, the original 2016 code's figure (the best
drifting 5,000-image window, arXiv:1611.04231's Table 2 as its code printed it) a cross, and the
baseline's seeds' range shaded across every row, so that a reader sees which change moves the
error past the seed-to-seed spread. Reads nothing but the study's summary (``runs.study``)."""

from __future__ import annotations


def label(arm: str, entry: dict, baseline: bool) -> str:
    """The row's name: the arm, and its final error's gap to the baseline with whether it
    exceeds the spread (the two sd's summed); its diverged seeds, if any."""
    final = entry.get("final_error")
    if baseline:
        text = f"{arm} (baseline)"
    elif final is None or "gap" not in final:
        text = arm
    else:
        spread = {True: ", > spread", False: ", within spread", None: ""}[final["exceeds_spread"]]
        text = f"{arm} ({final['gap']:+.2f}{spread})".replace("-", "−")
    if entry["diverged"]:
        text += f", {len(entry['diverged'])} of {entry['seeds']} diverged"
    return text


def plot(summary: dict, arms: tuple[str, ...], path: str, title: str) -> list[str]:
    """Draw the arms of ``summary`` (``runs.study.summarize``) in the order of ``arms`` (the
    baseline first, its colour and every arm's the same as in the study's curves) to ``path``;
    returns the rows' labels, top to bottom."""
    from resnet_noBN import plotting  # matplotlib only where the picture is drawn

    shown = [arm for arm in arms if arm in summary]
    labels = [label(arm, summary[arm], arm == arms[0]) for arm in shown]
    fig, (ax,) = plotting.figure(width=9.0, height=1.6 + 0.4 * len(shown))
    base = summary.get(arms[0], {}).get("final_error")
    if base:
        ax.axvspan(min(base["values"]), max(base["values"]), color="0.88", zorder=0)
    for row, arm in enumerate(shown):
        colour = plotting.colour(arms.index(arm))
        final = summary[arm].get("final_error")
        if final:
            ax.plot(final["values"], [-row] * len(final["values"]), "o", color=colour, alpha=0.8)
            ax.plot([final["mean"]], [-row], "|", color=colour, markersize=18, markeredgewidth=2)
        original = summary[arm].get("original_2016_error")
        if original:
            ax.plot([original["mean"]], [-row], "x", color=colour, markersize=7)
    ax.set_yticks([-row for row in range(len(shown))], labels, fontsize=8)
    ax.set_ylim(-len(shown) + 0.5, 0.5)
    ax.set_xlabel("test error (%), whole test split, at the last step")
    ax.grid(axis="x", alpha=0.3)
    grey = "0.35"
    ax.legend(
        handles=[
            ax.plot([], [], "o", color=grey, label="a seed's final error")[0],
            ax.plot([], [], "|", color=grey, markersize=12, markeredgewidth=2, label="their mean")[
                0
            ],
            ax.plot([], [], "x", color=grey, label="2016 figure (mean)")[0],
            ax.fill_between([], [], color="0.88", label="baseline's seeds' range"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.5 / (1 + 0.25 * len(shown))),
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    ax.set_title(title, fontsize=10)
    plotting.save(fig, path)
    return labels
