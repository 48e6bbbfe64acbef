"""resnet_noBN/plotting.py: every plot is saved as a 48-colour palette PNG, the same picture as
matplotlib's full-colour one but for antialiased edges and a white one level darker, in a fifth
of the bytes
(committed results travel with every call to a lent GPU machine)."""

import io

import numpy as np
from PIL import Image

from resnet_noBN import plotting


def draw():
    fig, (ax,) = plotting.figure()
    steps = np.arange(200)
    for i in range(4):  # curves, a shaded band and a legend: what the studies draw
        curve = np.exp(-steps / (50 + 20 * i)) + 0.02 * np.sin(steps / 3 + i)
        ax.plot(steps, curve, color=plotting.colour(i), label=f"arm {i}")
        ax.fill_between(steps, curve - 0.05, curve + 0.05, color=plotting.colour(i), alpha=0.2)
    ax.set_yscale("log")
    ax.legend()
    return fig


def test_a_plot_is_a_palette_png_of_the_same_picture_in_fewer_bytes(tmp_path):
    path = plotting.save(draw(), str(tmp_path / "sub" / "plot.png"))
    full = draw()
    full.tight_layout()
    rendered = io.BytesIO()
    full.savefig(rendered, dpi=120, format="png")
    with Image.open(path) as saved, Image.open(rendered) as reference:
        assert saved.format == "PNG" and saved.mode == "P"
        assert saved.size == reference.size == (660, 480)  # 5.5 x 4 inches at 120 dpi
        # drawn from the canvas: savefig's picture, quantized, pixel for pixel
        quantized = reference.convert("RGB").quantize(
            plotting.PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE
        )
        assert np.array_equal(
            np.asarray(saved.convert("RGB")), np.asarray(quantized.convert("RGB"))
        )
        pixels = (np.asarray(i.convert("RGB"), np.int16) for i in (saved, reference))
        difference = np.abs(next(pixels) - next(pixels)).max(axis=2)  # per pixel, 0..255
    # antialiased edges move to the nearest palette colour and white to 254: 99% of pixels within
    # 28 levels, under 0.5% more than 32, none more than 64 (measured: 1.72 levels on average,
    # 99% within 25, 0.27% over 32, 57 at most; median cut at 64 colours moved an edge 79)
    assert difference.mean() < 2.0 and np.percentile(difference, 99) <= 28
    assert (difference > 32).mean() < 0.005 and difference.max() <= 64
    # 0.196 of the bytes (measured; median cut at 64 colours: 0.226, at 256: 0.33)
    assert (tmp_path / "sub" / "plot.png").stat().st_size < 0.21 * rendered.getbuffer().nbytes
