"""Section 3 / Appendix B of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231):
finite-sample expressivity.

Theorem 3.2, constructively: n unit vectors x_i ∈ ℝ^d with labels in r classes are mapped
exactly to their one-hot labels e_{label(i)} by the residual ReLU network

    h_0 = A_0 x                                   (A_0 ∈ ℝ^{k×d}, Gaussian: a JL projection)
    h_j = h_{j−1} + V_j ReLU(U_j h_{j−1} + b_j)    j = 1..ℓ, ℓ = ⌈n/k⌉         (Lemma B.2)
    ŷ   = V_{ℓ+1} ReLU(U_{ℓ+1} h_ℓ + b_{ℓ+1})       (no residual; q_c ↦ e_c)

with kd + ℓ(2k² + k) + (rk + r² + r) parameters. Block j moves the k points of its batch
from α(i) = A_0 x_i to the surrogate label q_{label(i)} (a random unit vector of ℝ^k) and
leaves every other point where it is (Lemma B.1): the row of U_j for point i is α(i)ᵀ, its
bias −t_i with a threshold t_i strictly between max_{m≠i} ⟨α(i), h(m)⟩ (over all points m,
moved or not, in their current place h(m)) and ‖α(i)‖², and the column of V_j for i is
(q_{label(i)} − α(i)) / (‖α(i)‖² − t_i). Such a t_i exists exactly when the margin
‖α(i)‖² − max_{m≠i} ⟨α(i), h(m)⟩ is positive: :func:`build_network` checks it for every point
and says which pair or block breaks it (duplicate or too-close points, k too small).

Two variants. The *practical* one (default) chooses each row's threshold t_i from the data as
above. The *lemma's own* one (``single_bias=True``) uses Lemma B.1's single bias
s = −(1 − 2ρ)·1 for every row, ρ measured after the projection (:func:`lemma_b1_conditions`
states and checks the hypotheses it needs); :func:`smallest_lemma_width` finds the width k at
which those hypotheses start to hold, the k = O(log n / ρ²) of Theorem 3.2.

numpy float64 throughout; :func:`keras_model` loads the weights into a float64 Keras model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from resnet_noBN.configs.errors import DataError
from resnet_noBN.datasets import cifar_data

# A margin below this fraction of ‖α(i)‖² counts as no margin: the column of V_j scales as
# 1/margin, so smaller margins would amplify round-off into the output.
MIN_RELATIVE_MARGIN = 1e-8


class ExpressivityError(ValueError):
    """The data or width break the construction; the message names the culprit and the fix."""


@dataclass(frozen=True)
class ResidualBlock:
    """h ↦ h + V ReLU(U h + b) on ℝ^k (the last block of a network omits the "h +")."""

    U: np.ndarray  # (out, k)
    b: np.ndarray  # (out,)
    V: np.ndarray  # (out', out)

    def transform(self, H: np.ndarray) -> np.ndarray:
        """T_{U,V,b} applied to the rows of H: ReLU(H Uᵀ + b) Vᵀ."""
        return np.maximum(H @ self.U.T + self.b, 0.0) @ self.V.T


@dataclass
class ExpressivityNetwork:
    """The network of Theorem 3.2, as built by :func:`build_network`."""

    A0: np.ndarray  # (k, d)
    blocks: list[ResidualBlock]  # the ℓ residual blocks
    output: ResidualBlock  # q_c ↦ e_c, no residual
    surrogates: np.ndarray  # (r, k): q_1..q_r
    margins: list[float] = field(default_factory=list)  # smallest relative margin per block
    threshold: float | None = None  # Lemma B.1's single t = 1 − 2ρ, or None (per-row t_i)

    @property
    def num_classes(self) -> int:
        return self.surrogates.shape[0]

    def parameter_formula(self) -> int:
        """kd + ℓ(2k² + k) + (rk + r² + r), the count of Theorem 3.2's network."""
        (k, d), r, ell = self.A0.shape, self.num_classes, len(self.blocks)
        return k * d + ell * (2 * k * k + k) + r * k + r * r + r

    def forward(self, X: np.ndarray) -> np.ndarray:
        """ŷ for the rows of X (numpy; :func:`keras_model` computes the same)."""
        H = X @ self.A0.T
        for block in self.blocks:
            H = H + block.transform(H)
        return self.output.transform(H)


def _check_inputs(X, labels, num_classes: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float64)
    labels = np.asarray(labels)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ExpressivityError(f"points must be a non-empty (n, d) array, got shape {X.shape}")
    if labels.shape != (X.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ExpressivityError(f"labels must be {X.shape[0]} integers, one per point")
    if num_classes < 1 or labels.min() < 0 or labels.max() >= num_classes:
        raise ExpressivityError(
            f"labels must lie in [0, {num_classes}), got "
            f"[{labels.min()}, {labels.max()}]; raise num_classes"
        )
    if width < 1:
        raise ExpressivityError(f"width k must be >= 1, got {width}")
    norms = np.linalg.norm(X, axis=1)
    worst = int(np.argmax(np.abs(norms - 1)))
    if not np.isfinite(norms).all() or abs(norms[worst] - 1) > 1e-6:
        raise ExpressivityError(
            f"points must have unit norm (point {worst} has norm "
            f"{norms[worst]:.6g}): divide each x_i by ||x_i||"
        )
    return X, labels


def _no_threshold_error(
    block: int,
    i: int,
    m: int,
    moved: np.ndarray,
    X: np.ndarray,
    labels: np.ndarray,
    inner: float,
    norm2: float,
    width: int,
) -> ExpressivityError:
    """The error for a point i of block ``block`` with no threshold t_i, m its worst partner."""
    where = (
        f"block {block}: no threshold t exists for point {i} "
        f"(<alpha_i, h_m> = {inner:.6g} >= ||alpha_i||^2 = {norm2:.6g})"
    )
    if moved[m]:
        return ExpressivityError(
            f"{where}, h_m being surrogate label q_{labels[m]}, where point {m} now "
            f"sits: the projection is too narrow; increase the width k (now {width})"
        )
    distance = float(np.linalg.norm(X[i] - X[m]))
    if distance <= 1e-12:
        same = "the same label" if labels[i] == labels[m] else "different labels"
        return ExpressivityError(
            f"{where}: points {i} and {m} are duplicates "
            f"(||x_i - x_m|| = 0, {same}); remove duplicate points"
        )
    return ExpressivityError(
        f"{where}: points {i} and {m} (||x_i - x_m|| = {distance:.3g}) are too close for "
        f"the random projection A_0 of width k = {width}; increase the width k or remove "
        "one of them"
    )


def _block_for(
    batch: np.ndarray,
    H: np.ndarray,
    targets: np.ndarray,
    moved: np.ndarray,
    X: np.ndarray,
    labels: np.ndarray,
    block: int,
    threshold: float | None = None,
) -> tuple[ResidualBlock, float]:
    """Lemma B.1: the block moving the points ``batch`` from H[batch] to targets[batch].

    ``threshold``: None gives each row its own t_i midway between max_{m≠i} ⟨α(i), h(m)⟩ and
    ‖α(i)‖²; a number t is the lemma's single bias −t·1. Returns the block and its smallest
    relative margin 2·min(‖α(i)‖² − t_i, t_i − max_{m≠i} ⟨α(i), h(m)⟩)/‖α(i)‖² (the gap
    itself for the midway t_i); ExpressivityError if some point of the batch has none.
    """
    k = H.shape[1]
    alpha = H[batch]  # (s, k), s ≤ k: these points have not moved yet, so h = α
    inner = alpha @ H.T  # (s, n)
    inner[np.arange(len(batch)), batch] = -np.inf  # m ≠ i
    partner = np.argmax(inner, axis=1)
    norm2 = np.sum(alpha**2, axis=1)
    # A point alone (n = 1) has no m: the floor −‖α(i)‖² keeps its threshold finite.
    largest = np.maximum(inner[np.arange(len(batch)), partner], -norm2)
    t = (norm2 + largest) / 2 if threshold is None else np.full(len(batch), threshold)
    relative = 2 * np.minimum(norm2 - t, t - largest) / norm2
    worst = int(np.argmin(relative))
    if relative[worst] <= MIN_RELATIVE_MARGIN:
        if threshold is not None:
            raise ExpressivityError(
                f"block {block}: the single threshold t = {threshold:.6g} of Lemma B.1 does not "
                f"separate point {int(batch[worst])} (||alpha_i||^2 = {norm2[worst]:.6g}, "
                f"max_m <alpha_i, h_m> = {largest[worst]:.6g}, m = {int(partner[worst])}); "
                "increase the width k or use the per-row thresholds"
            )
        raise _no_threshold_error(
            block,
            int(batch[worst]),
            int(partner[worst]),
            moved,
            X,
            labels,
            float(largest[worst]),
            float(norm2[worst]),
            k,
        )
    U = np.zeros((k, k))
    b = -np.ones(k)  # rows of an incomplete last batch stay at ReLU(−1) = 0
    V = np.zeros((k, k))
    s = len(batch)
    U[:s] = alpha
    b[:s] = -t
    V[:, :s] = ((targets[batch] - alpha) / (norm2 - t)[:, None]).T
    return ResidualBlock(U=U, b=b, V=V), float(relative[worst])


def projection(
    d: int, width: int, num_classes: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(A_0, Q): the Gaussian projection A_0 ∈ ℝ^{k×d} with N(0, 1/k) entries (so E‖A_0 x‖² =
    ‖x‖²) and r random unit surrogate labels q_c ∈ ℝ^k as rows of Q."""
    A0 = rng.standard_normal((width, d)) / math.sqrt(width)
    Q = rng.standard_normal((num_classes, width))
    return A0, Q / np.linalg.norm(Q, axis=1, keepdims=True)


def build_network(
    X,
    labels,
    num_classes: int,
    width: int,
    rng: np.random.Generator,
    progress: Callable[[str], None] | None = None,
    single_bias: bool = False,
) -> ExpressivityNetwork:
    """Theorem 3.2 via Lemmas B.1 and B.2: the network mapping every X[i] to e_{labels[i]}.

    X: (n, d) unit rows; labels: n integers in [0, num_classes); width: k. Blocks take the
    points in index order, k at a time. Every block is applied to all n points as it is built,
    so the margins checked are those of the points' actual positions. ``single_bias``: every
    row gets Lemma B.1's bias −(1 − 2ρ), ρ = max_i |‖A_0 x_i‖ − 1| (else per-row thresholds).
    ``progress`` receives a line about every tenth of the blocks.
    """
    X, labels = _check_inputs(X, labels, num_classes, width)
    n, d = X.shape
    k, r = width, num_classes
    A0, Q = projection(d, k, r, rng)
    H = X @ A0.T
    threshold = 1 - 2 * norm_distortion(H) if single_bias else None
    targets = Q[labels]
    moved = np.zeros(n, dtype=bool)
    num_blocks = math.ceil(n / k)
    blocks, margins = [], []
    for j in range(num_blocks):
        batch = np.arange(j * k, min((j + 1) * k, n))
        block, margin = _block_for(batch, H, targets, moved, X, labels, j + 1, threshold)
        H = H + block.transform(H)
        moved[batch] = True
        blocks.append(block)
        margins.append(margin)
        if progress and (j + 1) % max(1, num_blocks // 10) == 0:
            progress(f"  block {j + 1}/{num_blocks}: smallest relative margin {margin:.3g}")
    return ExpressivityNetwork(
        A0=A0,
        blocks=blocks,
        output=_output_block(Q),
        surrogates=Q,
        margins=margins,
        threshold=threshold,
    )


# --- Lemma B.1's hypotheses, literally -------------------------------------------------------


def norm_distortion(H: np.ndarray) -> float:
    """ρ = max_i |‖α(i)‖ − 1|: every projected point's norm lies in [1 − ρ, 1 + ρ]."""
    return float(np.max(np.abs(np.linalg.norm(H, axis=1) - 1)))


@dataclass(frozen=True)
class LemmaB1Conditions:
    """Lemma B.1's hypotheses measured on the projected points α(i) = A_0 x_i.

    With ρ = max_i |‖α(i)‖ − 1| and t = 1 − 2ρ (the single bias s = −t·1), the lemma needs,
    for all i ≠ j and every surrogate label q_c (where moved points sit, Lemma B.2):
        ⟨α(i), α(j)⟩ < t,   ⟨α(i), q_c⟩ < t,   t < ‖α(i)‖²  (and t > 0).
    The last follows from the norms when ρ < 1 ((1 − ρ)² > 1 − 2ρ) and is checked anyway.
    ``max_inner_points`` is a lower bound when ``early_exit`` stopped at a violation.
    """

    rho: float
    threshold: float
    min_norm2: float
    max_inner_points: float
    max_inner_surrogates: float

    @property
    def holds(self) -> bool:
        t = self.threshold
        return (
            t > 0
            and self.max_inner_points < t
            and self.max_inner_surrogates < t
            and t < self.min_norm2
        )

    def failure(self) -> str | None:
        """Which inequality fails, or None."""
        t = self.threshold
        if t <= 0:
            return f"t = 1 - 2 rho = {t:.4g} <= 0 (rho = {self.rho:.4g})"
        if self.max_inner_points >= t:
            return f"max <alpha_i, alpha_j> = {self.max_inner_points:.4g} >= t = {t:.4g}"
        if self.max_inner_surrogates >= t:
            return f"max <alpha_i, q_c> = {self.max_inner_surrogates:.4g} >= t = {t:.4g}"
        if self.min_norm2 <= t:
            return f"min ||alpha_i||^2 = {self.min_norm2:.4g} <= t = {t:.4g}"
        return None


def max_off_diagonal_inner(H: np.ndarray, stop_at: float = math.inf, chunk: int = 1024) -> float:
    """max_{i≠j} ⟨h_i, h_j⟩ over the rows of H, in blocks of ``chunk`` rows (memory n·chunk);
    returns early, with a value ≥ ``stop_at``, once one is found."""
    best = -math.inf
    for start in range(0, len(H), chunk):
        inner = H[start : start + chunk] @ H.T
        rows = np.arange(inner.shape[0])
        inner[rows, start + rows] = -np.inf
        best = max(best, float(inner.max(initial=-np.inf)))
        if best >= stop_at:
            break
    return best


def lemma_b1_conditions(
    H: np.ndarray, Q: np.ndarray, early_exit: bool = False
) -> LemmaB1Conditions:
    """Measure :class:`LemmaB1Conditions` for the projected points H (n, k) and surrogates Q."""
    rho = norm_distortion(H)
    t = 1 - 2 * rho
    return LemmaB1Conditions(
        rho=rho,
        threshold=t,
        min_norm2=float(np.min(np.sum(H**2, axis=1))),
        max_inner_surrogates=float(np.max(H @ Q.T)),
        max_inner_points=max_off_diagonal_inner(H, t if early_exit else math.inf),
    )


def smallest_lemma_width(
    X: np.ndarray, num_classes: int, widths, seed: int
) -> tuple[int | None, LemmaB1Conditions]:
    """The first k in ``widths`` (increasing) whose random projection satisfies
    :class:`LemmaB1Conditions`; (None, the last conditions) if none does.

    Width k draws its projection from ``numpy.random.default_rng([seed, k])``, so
    ``build_network(..., k, default_rng([seed, k]), single_bias=True)`` uses the same A_0, Q.
    """
    for k in widths:
        A0, Q = projection(X.shape[1], int(k), num_classes, np.random.default_rng([seed, k]))
        conditions = lemma_b1_conditions(X @ A0.T, Q, early_exit=True)
        if conditions.holds:
            return int(k), conditions
    return None, conditions


def min_pairwise_distance(X: np.ndarray) -> float:
    """ρ of Theorem 3.2's data: min_{i≠j} ‖x_i − x_j‖ for unit rows (= √(2 − 2 max ⟨x_i, x_j⟩))."""
    return math.sqrt(max(0.0, 2 - 2 * max_off_diagonal_inner(X)))


def _output_block(Q: np.ndarray) -> ResidualBlock:
    """The last block, q_c ↦ e_c (Lemma B.1 without the residual): U = Q, V diagonal."""
    r = Q.shape[0]
    inner = Q @ Q.T
    np.fill_diagonal(inner, -np.inf)
    largest = inner.max(axis=1) if r > 1 else np.zeros(1)
    c = int(np.argmax(largest))
    if largest[c] >= 1 - MIN_RELATIVE_MARGIN:
        raise ExpressivityError(
            f"surrogate labels q_{c} and q_{int(np.argmax(inner[c]))} "
            f"coincide (<q, q'> = {largest[c]:.6g}); increase the width k"
        )
    threshold = (1 + largest) / 2
    return ResidualBlock(U=Q.copy(), b=-threshold, V=np.diag(1 / (1 - threshold)))


def keras_model(net: ExpressivityNetwork) -> keras.Model:
    """The network as a float64 Keras model with the constructed weights loaded.

    Input → Dense A_0 (no bias) → ℓ × [Dense U_j (bias b_j, ReLU) → Dense V_j (no bias) →
    Add with the block's input] → Dense U_{ℓ+1} (bias, ReLU) → Dense V_{ℓ+1} (no bias).
    Keras Dense kernels are (inputs, outputs): the transposes of U, V, A_0.
    """
    k, d = net.A0.shape
    r = net.num_classes
    dense = keras.layers.Dense
    inputs = keras.Input(shape=(d,), dtype="float64", name="x")
    projection = dense(k, use_bias=False, dtype="float64", name="A0")
    h = projection(inputs)
    weights = [(projection, [net.A0.T])]
    for j, block in enumerate(net.blocks, start=1):
        U = dense(k, activation="relu", dtype="float64", name=f"block{j}_U")
        V = dense(k, use_bias=False, dtype="float64", name=f"block{j}_V")
        h = keras.layers.Add(dtype="float64", name=f"block{j}_add")([h, V(U(h))])
        weights += [(U, [block.U.T, block.b]), (V, [block.V.T])]
    U = dense(r, activation="relu", dtype="float64", name="out_U")
    V = dense(r, use_bias=False, dtype="float64", name="out_V")
    model = keras.Model(inputs, V(U(h)), name="hardt_ma_expressivity")
    weights += [(U, [net.output.U.T, net.output.b]), (V, [net.output.V.T])]
    for layer, values in weights:
        layer.set_weights(values)
    return model


def predict(model: keras.Model, X: np.ndarray, batch_size: int = 1024) -> np.ndarray:
    """``model.predict`` in float64: numpy inputs would be cast to keras' floatx (float32)
    by predict's array adapter, so they are fed as a float64 tf.data pipeline."""
    dataset = tf.data.Dataset.from_tensor_slices(np.asarray(X, np.float64)).batch(batch_size)
    return model.predict(dataset, verbose=0)


def fit_report(outputs: np.ndarray, labels: np.ndarray) -> dict:
    """How well ``outputs`` (n, r) fit the one-hot labels: argmax accuracy, largest deviation."""
    one_hot = np.eye(outputs.shape[1])[labels]
    return {
        "accuracy": float(np.mean(np.argmax(outputs, axis=1) == labels)),
        "max_deviation": float(np.max(np.abs(outputs - one_hot))),
    }


# --- Data ------------------------------------------------------------------------------------


def sphere_points(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """n points uniform on the unit sphere of ℝ^d."""
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def random_labels(n: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random labels: Theorem 3.2 fits any labelling, these have no structure."""
    return rng.integers(0, num_classes, n)


def load_cifar10_pixels(cifar_dir: str, limit: int | None = None) -> np.ndarray:
    """The training images of CIFAR-10, (N, 3072) uint8 in the binary files' order (1024 R,
    1024 G, 1024 B bytes per image), read by ``cifar_data.load_split`` from ``cifar_dir``: the
    official binary files or an image folder. The labels are not returned (the experiment draws
    random ones); ExpressivityError (one line) for what the reader refuses."""
    try:
        images, _ = cifar_data.load_split("cifar10", "train", cifar_dir)
    except DataError as e:
        raise ExpressivityError(str(e).replace("--data_path", "--cifar_dir")) from None
    pixels = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    return pixels if limit is None else pixels[:limit]


def synthetic_images(n: int, rng: np.random.Generator) -> np.ndarray:
    """n generated 32×32×3 images, (n, 3072) uint8 in the CIFAR layout, for use without data.

    Each is a random 4×4×3 pattern upsampled to 32×32 plus pixel noise, so that, like real
    images, neighbouring pixels are strongly correlated.
    """
    coarse = rng.uniform(0, 255, (n, 3, 4, 4))
    images = np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3)
    images = images + rng.normal(0, 16, images.shape)
    return np.clip(images, 0, 255).astype(np.uint8).reshape(n, 3072)


def normalise_images(pixels: np.ndarray) -> np.ndarray:
    """Flattened images → unit vectors: subtract the mean image of the set, divide by the norm.

    Centring spreads the images over the sphere (raw pixel vectors all lie in one orthant).
    """
    X = pixels.astype(np.float64) / 255.0
    X -= X.mean(axis=0)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ExpressivityError(
            f"image {int(np.argmin(norms))} equals the mean image and has no direction; remove it"
        )
    return X / norms
