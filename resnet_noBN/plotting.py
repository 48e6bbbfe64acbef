"""The matplotlib set-up of every plot of the project (run curves, the studies, the theory
launchers): headless (Agg) figures saved as PNG."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def figure(ncols: int = 1, width: float = 5.5, height: float = 4.0):
    """A new figure with ``ncols`` side-by-side axes: (fig, [ax, ...])."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def colour(i: int):
    """The i-th colour of the categorical palette (tab10) every plot uses for its series."""
    return plt.get_cmap("tab10")(i % 10)


def save(fig, path: str) -> str:
    """Write ``fig`` to ``path`` (PNG), close it, and return the path."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
