"""How far a residual block is from the identity, in numbers (arXiv:1611.04231, Section 2).

Theorem 2.1 builds, for a deep linear residual network ŷ = (I + A_ℓ)⋯(I + A_1) x, a global
optimum whose every layer is small: max_i ‖A_i‖ ≤ (4π + 3γ)/ℓ, so O(1/ℓ). Bartlett et al. (2017,
arXiv:1804.05012) spread a smooth invertible map over m layers, each within O(log m / m) of the
identity. For a trained block x ↦ s(x) + h(x) of the paper's network (s its shortcut, h its
branch C2(ReLU(C1 x))), this module gives two measures of the same distance:

* the branch's size against the stream it joins, ‖h(x)‖ / ‖s(x)‖ on real images
  (:func:`ratios`);
* an upper bound on the branch's Lipschitz constant, the product of its convolutions' spectral
  norms (ReLU is 1-Lipschitz) times its scalar multipliers (Fixup's s, SkipInit's α):
  :func:`spectral_norm` on each convolution as an operator on its real input size, with its SAME
  zero padding and stride, by power iteration on the convolution and its transpose; for stride 1
  the exact value of a circular convolution beside it (Sedghi, Gupta & Long, ICLR 2019,
  arXiv:1805.10408: :func:`circular_spectral_norm`) as a cross-check: on the grid padded by the
  kernel (n + k - 1) it is an upper bound, the zero-padded convolution being that one cropped.

The bound on a ReLU branch is not the theorem's ‖A_i‖: for a linear block (one convolution, no
ReLU) it is ‖A_i‖ exactly (tests/test_near_identity.py checks Theorem 2.1's construction).
Slopes against depth: :func:`fitted_slope`. Plain numpy, float64: no Keras.
"""

from __future__ import annotations

import math

import numpy as np
from threadpoolctl import threadpool_limits

# Power iteration: stop when the estimate changes by less than this, relatively, or after
# MAX_ITERATIONS (the last relative change is recorded either way)
TOLERANCE = 1e-7
MAX_ITERATIONS = 2000
# the two-sided 95% Student t quantiles by degrees of freedom, for a slope's interval
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    """(output size, zeros before, zeros after) of a SAME convolution along one axis, as
    TensorFlow and Keras pad it: ceil(size / stride) outputs, the odd zero after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


def _taps(kernel: np.ndarray, size: tuple[int, int], stride: int):
    """Each tap [in, out] of ``kernel`` [kh, kw, in, out] with the rows and columns of the
    zero-padded input it reads; and that input's shape and its zeros before (rows, columns)."""
    (oh, top, bottom), (ow, left, right) = (
        same_padding(size[0], kernel.shape[0], stride),
        same_padding(size[1], kernel.shape[1], stride),
    )
    padded = (size[0] + top + bottom, size[1] + left + right)
    taps = [
        (
            kernel[a, b],
            slice(a, a + (oh - 1) * stride + 1, stride),
            slice(b, b + (ow - 1) * stride + 1, stride),
        )
        for a in range(kernel.shape[0])
        for b in range(kernel.shape[1])
    ]
    return taps, padded, (top, left)


def convolve(x: np.ndarray, kernel: np.ndarray, stride: int = 1) -> np.ndarray:
    """The SAME convolution of one image ``x`` [h, w, in] by ``kernel`` [kh, kw, in, out] (Keras'
    layout), with ``stride``, no bias: [ceil(h/stride), ceil(w/stride), out]."""
    taps, padded, (top, left) = _taps(kernel, x.shape[:2], stride)
    grid = np.zeros((*padded, x.shape[2]))
    grid[top : top + x.shape[0], left : left + x.shape[1]] = x
    return sum(grid[rows, cols] @ tap for tap, rows, cols in taps)


def convolve_transpose(
    y: np.ndarray, kernel: np.ndarray, size: tuple[int, int], stride: int = 1
) -> np.ndarray:
    """The adjoint of :func:`convolve` on images of ``size`` (h, w): ⟨convolve(x), y⟩ =
    ⟨x, convolve_transpose(y)⟩ for every x."""
    taps, padded, (top, left) = _taps(kernel, size, stride)
    grid = np.zeros((*padded, kernel.shape[2]))
    for tap, rows, cols in taps:
        grid[rows, cols] += y @ tap.T
    return grid[top : top + size[0], left : left + size[1]]


def spectral_norm(
    kernel: np.ndarray,
    size: tuple[int, int],
    stride: int = 1,
    tolerance: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
    seed: int = 0,
) -> dict:
    """The largest singular value of the SAME convolution by ``kernel`` [kh, kw, in, out] with
    ``stride`` as an operator on images of ``size`` (h, w) (its zero padding included), by power
    iteration on the convolution and its transpose from a seeded random start: ``{"value",
    "iterations", "last_change"}`` (the estimate's last relative change; the estimate ‖A v‖ of a
    unit v never exceeds the true value). A zero kernel gives 0 at once."""
    kernel = np.asarray(kernel, np.float64)
    if not np.any(kernel):
        return {"value": 0.0, "iterations": 0, "last_change": 0.0}
    v = np.random.default_rng(seed).standard_normal((*size, kernel.shape[2]))
    v /= np.linalg.norm(v)
    value, change, iterations = 0.0, math.inf, 0
    with threadpool_limits(1, user_api="blas"):
        while iterations < max_iterations:
            iterations += 1
            u = convolve(v, kernel, stride)
            estimate = float(np.linalg.norm(u))
            change = abs(estimate - value) / estimate if estimate else 0.0
            value = estimate
            w = convolve_transpose(u, kernel, size, stride)
            norm = np.linalg.norm(w)
            if norm == 0 or change < tolerance:
                break
            v = w / norm
    return {"value": value, "iterations": iterations, "last_change": change}


def circular_spectral_norm(kernel: np.ndarray, size: tuple[int, int]) -> float:
    """The exact largest singular value of the stride-1 convolution by ``kernel`` [kh, kw, in,
    out] on images of ``size`` wrapped around (circular padding): the largest singular value of
    the kernel's 2-D Fourier transform over all frequencies (Sedghi, Gupta & Long 2019,
    Theorem 6)."""
    transform = np.fft.fft2(np.asarray(kernel, np.float64), s=size, axes=(0, 1))
    return float(np.linalg.svd(transform, compute_uv=False).max())


def ratios(branch: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """‖h(x)‖ / ‖s(x)‖ of each image: ``branch`` and ``stream`` [N, ...] the branch's output and
    the shortcut's (what the branch is added to), norms over each image's every value."""
    flat = lambda t: np.asarray(t, np.float64).reshape(len(t), -1)  # noqa: E731
    return np.linalg.norm(flat(branch), axis=1) / np.linalg.norm(flat(stream), axis=1)


def fitted_slope(depths, values) -> dict | None:
    """The least-squares line log(value) = a + b log(depth): ``{"slope", "low", "high",
    "points"}``, [low, high] the slope's two-sided 95% Student t interval (n - 2 degrees of
    freedom; none from 2 points); None from fewer than 2 positive values."""
    pairs = [(d, v) for d, v in zip(depths, values) if v is not None and v > 0]
    if len(pairs) < 2:
        return None
    x = np.log([d for d, _ in pairs])
    y = np.log([v for _, v in pairs])
    slope, intercept = np.polyfit(x, y, 1)
    fit = {"slope": float(slope), "intercept": float(intercept), "points": len(pairs)}
    dof = len(pairs) - 2
    if dof in _T95:
        residual = y - (intercept + slope * x)
        se = math.sqrt(float(residual @ residual) / dof / float(((x - x.mean()) ** 2).sum()))
        fit["low"], fit["high"] = slope - _T95[dof] * se, slope + _T95[dof] * se
    return fit
