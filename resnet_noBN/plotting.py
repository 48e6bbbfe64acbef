"""The matplotlib set-up of every plot of the project (run curves, the studies, the theory
launchers): headless (Agg) figures saved as PNG."""

from __future__ import annotations

import os

import matplotlib
from PIL import Image

from resnet_noBN.host import storage

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def figure(ncols: int = 1, width: float = 5.5, height: float = 4.0):
    """A new figure with ``ncols`` side-by-side axes: (fig, [ax, ...])."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def colour(i: int):
    """The i-th colour of the categorical palette (tab10) every plot uses for its series."""
    return plt.get_cmap("tab10")(i % 10)


# A plot's lines, bands and text fit a 48-colour palette drawn by Pillow's octree quantizer:
# antialiased edges move to the nearest of its colours and white to 254 (tests/test_plotting.py's
# drawing: 1.7 of 255 levels on average, 99% of pixels within 25, none over 57), in a fifth of
# the bytes of matplotlib's full-colour PNG. Median cut at 64 colours, the choice before, kept
# white but moved more edges far (79 levels at most) in 0.23 of the bytes; on the identity
# studies' six plots octree's 48 colours take 190,374 bytes against its 223,627. Committed results
# travel with every call to a lent GPU machine, the tracked tree within 8 MiB of it.
PALETTE_COLOURS = 48
DPI = 120  # pixels per inch of every saved plot


def palette_png(image: Image.Image, path: str) -> None:
    """Write ``image`` to ``path`` as a PNG of :data:`PALETTE_COLOURS` colours, replaced whole
    (``storage.atomic_write``: a stop as it is written leaves the old picture)."""
    quantized = image.convert("RGB").quantize(PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE)
    storage.atomic_write(path, lambda f: quantized.save(f, format="PNG", optimize=True))


def save(fig, path: str) -> str:
    """Write ``fig`` to ``path`` (a palette PNG, :func:`palette_png`), close it, and return the
    path. The figure is laid out, then drawn once at :data:`DPI` and read from the canvas: the
    pixels ``fig.savefig(dpi=DPI)`` gives, without its second layout pass and its PNG written
    and read back (a run's curve: 0.089 s of CPU against 0.120, the same bytes)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.tight_layout()
    fig.set_dpi(DPI)
    fig.canvas.draw()
    size = fig.canvas.get_width_height(physical=True)
    palette_png(Image.frombuffer("RGBA", size, fig.canvas.buffer_rgba(), "raw", "RGBA", 0, 1), path)
    plt.close(fig)
    return path
