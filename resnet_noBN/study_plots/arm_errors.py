"""The final errors of a study's arms as a picture of its table: a row per arm, each seed's
whole-test final error a dot, their mean a tick, the original 2016 code's figure (the best
drifting 5,000-image window, arXiv:1611.04231's Table 2 as its code printed it) a cross, and the
baseline's seeds' range shaded across every row, so that a reader sees which change moves the
error past the seed-to-seed spread. Reads nothing but the study's summary and its rows' names
(``studies.study``)."""

from __future__ import annotations


def plot(summary: dict, arms: tuple[str, ...], labels: list[str], path: str, title: str) -> None:
    """Draw the arms of ``summary`` (``studies.study.summarize``) in the order of ``arms`` (the
    baseline first, its colour and every arm's the same as in the study's curves) to ``path``,
    each row named by ``labels`` (``studies.study.row_labels``: the table's gap and spread
    words)."""
    from matplotlib.transforms import ScaledTranslation  # matplotlib only where it is drawn

    from resnet_noBN import plotting

    shown = [arm for arm in arms if arm in summary]
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
        bbox_to_anchor=(0.5, 0.0),  # 0.45 inch under the axes, below the x label, at any height
        bbox_transform=ax.transAxes + ScaledTranslation(0.0, -0.45, fig.dpi_scale_trans),
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    ax.set_title(title, fontsize=10)
    plotting.save(fig, path)
