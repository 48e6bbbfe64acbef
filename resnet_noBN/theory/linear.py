"""Section 2 of Hardt & Ma, "Identity Matters in Deep Learning" (arXiv:1611.04231): linear
residual networks, executable.

Data: y = R x + ξ with Σ = E[x xᵀ] and ξ ~ N(0, I_d). Model: ŷ = (I + A_ℓ)⋯(I + A_1) x.

A parameter point is an array ``A`` of shape (ℓ, d, d) holding A_1, …, A_ℓ (``A[0]`` is A_1,
the layer applied first). Many functions take the *layers* M_i instead: M_i = I + A_i in the
residual parameterisation, M_i = B_i in the standard one (ŷ = B_ℓ⋯B_1 x). The risk and its
gradient are the same functions of the layers in both, and ∂f/∂A_i = ∂f/∂M_i, so gradient
descent on A from A = 0 *is* gradient descent on the layers from M_i = I: the two
parameterisations differ only in where they start (:func:`gradient_descent`).

All linear algebra is numpy float64; only :func:`autodiff_risk_gradient` uses TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

# Eigenvalues of a Cayley transform below this are taken as exactly 0 by :func:`rotation_form`
# (eigen-angles within 2e-13 of 0 or π); the error this makes is of the same size.
_ANGLE_TOL = 1e-13
# A factor within this of the identity (spectral norm) may be given no layers.
_IDENTITY_TOL = 1e-12


class LinearTheoryError(ValueError):
    """Input outside a result's hypotheses; the message names the problem and the fix."""


# --- Claim 2.3 and Lemma 2.4: the risk and its gradient -------------------------------------


def chain_product(layers: np.ndarray) -> np.ndarray:
    """M_ℓ ⋯ M_1 for ``layers`` = (M_1, …, M_ℓ) of shape (ℓ, d, d)."""
    product = np.eye(layers.shape[-1])
    for layer in layers:
        product = layer @ product
    return product


def residual_layers(A: np.ndarray) -> np.ndarray:
    """The layers I + A_i of the residual parameterisation."""
    return np.eye(A.shape[-1]) + A


def residual_product(A: np.ndarray) -> np.ndarray:
    """(I + A_ℓ) ⋯ (I + A_1): the linear map the residual network computes."""
    return chain_product(residual_layers(A))


def excess_risk(layers: np.ndarray, R: np.ndarray, Sigma: np.ndarray) -> float:
    """f − C = ‖E Σ^{1/2}‖_F² = tr(E Σ Eᵀ), with E = M_ℓ⋯M_1 − R (Claim 2.3).

    Computed directly rather than as f − d, so it stays accurate down to ~1e-30.
    """
    E = chain_product(layers) - R
    return float(np.trace(E @ Sigma @ E.T))


def chain_risk(layers: np.ndarray, R: np.ndarray, Sigma: np.ndarray) -> float:
    """Population risk E‖M_ℓ⋯M_1 x − y‖² in closed form (Claim 2.3): ‖E Σ^{1/2}‖_F² + C,
    where C = E‖ξ‖² = d."""
    return excess_risk(layers, R, Sigma) + R.shape[0]


def population_risk(A: np.ndarray, R: np.ndarray, Sigma: np.ndarray) -> float:
    """f(A) of the residual network (Claim 2.3)."""
    return chain_risk(residual_layers(A), R, Sigma)


def monte_carlo_risk(
    A: np.ndarray,
    R: np.ndarray,
    Sigma: np.ndarray,
    num_samples: int,
    rng: np.random.Generator,
    batch_size: int = 100_000,
) -> tuple[float, float]:
    """Mean of ‖ŷ − y‖² over samples x ~ N(0, Σ), y = R x + ξ; returns (mean, standard error).

    The Monte-Carlo counterpart of :func:`population_risk` (Claim 2.3 holds for any x with
    covariance Σ; the Gaussian is one such distribution).
    """
    d = R.shape[0]
    chol = np.linalg.cholesky(Sigma)
    product = residual_product(A)
    total, total_sq, done = 0.0, 0.0, 0
    while done < num_samples:
        m = min(batch_size, num_samples - done)
        x = rng.standard_normal((m, d)) @ chol.T
        y = x @ R.T + rng.standard_normal((m, d))
        loss = np.sum((x @ product.T - y) ** 2, axis=1)
        total, total_sq, done = total + loss.sum(), total_sq + (loss**2).sum(), done + m
    mean = total / num_samples
    variance = max(total_sq / num_samples - mean**2, 0.0)
    return mean, math.sqrt(variance / num_samples)


def partial_products(layers: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(below, above) with below[i] = M_{i−1}⋯M_1 and above[i] = M_ℓ⋯M_{i+1} (1-based i; the
    lists are 0-based), the two factors around layer i in Lemma 2.4."""
    ell, d, _ = layers.shape
    below = [np.eye(d)]
    for layer in layers[:-1]:
        below.append(layer @ below[-1])
    above = [np.eye(d)] * ell
    for i in range(ell - 2, -1, -1):
        above[i] = above[i + 1] @ layers[i + 1]
    return below, above


def chain_gradient(layers: np.ndarray, R: np.ndarray, Sigma: np.ndarray) -> np.ndarray:
    """∂f/∂M_i = 2 (M_ℓ⋯M_{i+1})ᵀ E Σ (M_{i−1}⋯M_1)ᵀ for every i, shape (ℓ, d, d).

    With M_i = I + A_i this is Lemma 2.4, since ∂f/∂A_i = ∂f/∂M_i.
    """
    below, above = partial_products(layers)
    E_Sigma = (above[0] @ layers[0] - R) @ Sigma
    return np.stack([2.0 * a.T @ E_Sigma @ b.T for a, b in zip(above, below)])


def risk_gradient(A: np.ndarray, R: np.ndarray, Sigma: np.ndarray) -> np.ndarray:
    """∇f(A) of the residual network in closed form (Lemma 2.4)."""
    return chain_gradient(residual_layers(A), R, Sigma)


def autodiff_risk_gradient(A: np.ndarray, R: np.ndarray, Sigma: np.ndarray) -> np.ndarray:
    """∇f(A) by TensorFlow autodiff (float64) of the closed-form risk of Claim 2.3."""
    d = R.shape[0]
    A_var = tf.Variable(A, dtype=tf.float64)
    eye = tf.eye(d, dtype=tf.float64)
    with tf.GradientTape() as tape:
        product = eye
        for i in range(A.shape[0]):
            product = (eye + A_var[i]) @ product
        E = product - tf.constant(R, tf.float64)
        risk = tf.linalg.trace(E @ tf.constant(Sigma, tf.float64) @ tf.transpose(E)) + d
    return tape.gradient(risk, A_var).numpy()


# --- Theorem 2.1: small-norm global optima, constructively ----------------------------------


def gamma(R: np.ndarray) -> float:
    """γ = max(|log σ_max(R)|, |log σ_min(R)|) of Theorem 2.1."""
    s = np.linalg.svd(R, compute_uv=False)
    if s[-1] <= s[0] * 1e-14:
        raise LinearTheoryError(
            f"R is singular (sigma_min = {s[-1]:.3g}), so gamma is infinite and no product of "
            "invertible I + A_i equals it; use an R with det R != 0"
        )
    return max(abs(math.log(s[0])), abs(math.log(s[-1])))


def norm_bound(R: np.ndarray, depth: int) -> float:
    """Theorem 2.1's bound (4π + 3γ)/ℓ on |||A||| = max_i ‖A_i‖ of the optimum it builds."""
    return (4 * math.pi + 3 * gamma(R)) / depth


def _check_depth(R: np.ndarray, depth: int) -> None:
    """LinearTheoryError unless depth ℓ ≥ 3γ, the hypothesis of Theorem 2.1."""
    if not isinstance(depth, (int, np.integer)) or depth < 1:
        raise LinearTheoryError(f"depth must be a positive integer, got {depth!r}")
    g = gamma(R)
    if depth < 3 * g:
        raise LinearTheoryError(
            f"depth {depth} < 3*gamma = {3 * g:.4g} (gamma = {g:.4g}): Theorem 2.1 needs "
            f"depth >= 3*gamma; use depth >= {max(1, math.ceil(3 * g))}"
        )


def _as_square(R) -> np.ndarray:
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 2 or R.shape[0] != R.shape[1] or R.shape[0] == 0:
        raise LinearTheoryError(f"R must be a non-empty square matrix, got shape {R.shape}")
    return R


def spd_factorization(R, depth: int) -> np.ndarray:
    """Theorem 2.1 for symmetric positive definite R: A_i = R^{1/ℓ} − I for every i.

    Then (I + A_ℓ)⋯(I + A_1) = R and |||A||| = max_j |λ_j^{1/ℓ} − 1| ≤ e^{γ/ℓ} − 1 ≤ 3γ/ℓ
    (as γ/ℓ ≤ 1/3). Returns A of shape (ℓ, d, d).
    """
    R = _as_square(R)
    if not np.allclose(R, R.T, rtol=0, atol=1e-12 * np.abs(R).max()):
        raise LinearTheoryError("R is not symmetric; use residual_factorization for general R")
    eigenvalues, Q = np.linalg.eigh((R + R.T) / 2)
    if eigenvalues[0] <= 0:
        raise LinearTheoryError(
            f"R is not positive definite (smallest eigenvalue "
            f"{eigenvalues[0]:.3g}); use residual_factorization"
        )
    _check_depth(R, depth)
    root = (Q * eigenvalues ** (1.0 / depth)) @ Q.T
    return np.repeat((root - np.eye(len(R)))[None], depth, axis=0)


def rotation_matrix(theta: float) -> np.ndarray:
    """T(θ), the 2×2 rotation by θ."""
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s], [s, c]])


@dataclass(frozen=True)
class RotationForm:
    """O = S W Sᵀ with S orthonormal and W = diag(T(θ_1), …, T(θ_m), 1, …, 1), |θ_k| ≤ π.

    The 2×2 block T(θ_k) acts on columns 2k, 2k+1 of S (an invariant plane of O); the last
    d − 2m columns are fixed by O (eigenvalue 1). Pairs of eigenvalues −1 form T(π) blocks.
    """

    basis: np.ndarray  # S, (d, d)
    angles: np.ndarray  # θ_1..θ_m

    def blocks(self, fraction: float = 1.0) -> np.ndarray:
        """W with every angle multiplied by ``fraction``: diag(T(θ_1 f), …, 1, …)."""
        W = np.eye(len(self.basis))
        for k, theta in enumerate(self.angles):
            W[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = rotation_matrix(theta * fraction)
        return W

    def root(self, q: int) -> np.ndarray:
        """S W_q Sᵀ with W_q the rotations by θ/q: its q-th power is O, and
        ‖S W_q Sᵀ − I‖ = max_k 2|sin(θ_k / 2q)| ≤ π/q (proof of Theorem 2.1)."""
        return self.basis @ self.blocks(1.0 / q) @ self.basis.T


def _invariant_planes(G: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Real canonical form of an orthogonal G with every eigen-angle |θ| < 2π/3.

    Returns (S, angles, num_fixed): S orthonormal, its first 2m columns pairs spanning the
    invariant planes where G rotates by angles[k] ≠ 0, its last num_fixed columns fixed by G.
    Method: the Cayley transform K = (G − I)(G + I)⁻¹ is skew, well conditioned here
    (‖(G + I)⁻¹‖ ≤ 1), and the Hermitian matrix −iK has eigenvalues tan(θ/2), one for each
    eigenvalue e^{iθ} of G, with orthonormal eigenvectors (numpy.linalg.eigh, backward
    stable). The eigenvector x = a + ib of tan(θ/2) > 0 spans with x̄ the real plane (a, b).
    """
    n = len(G)
    eye = np.eye(n)
    K = np.linalg.solve((G + eye).T, (G - eye).T).T
    t, Y = np.linalg.eigh(-1j * (K - K.T) / 2)
    planes = Y[:, t > _ANGLE_TOL]
    fixed = Y[:, np.abs(t) <= _ANGLE_TOL]
    # The fixed space is invariant under conjugation: a real basis from its real/imag parts.
    fixed_real = np.linalg.svd(np.hstack([fixed.real, fixed.imag]))[0][:, : fixed.shape[1]]
    pairs = np.stack([planes.real, planes.imag], axis=2).reshape(n, 2 * planes.shape[1])
    S = np.linalg.qr(np.hstack([pairs, fixed_real]))[0]
    B = S.T @ G @ S
    angles = np.array(
        [
            math.atan2(
                B[2 * k + 1, 2 * k] - B[2 * k, 2 * k + 1], B[2 * k, 2 * k] + B[2 * k + 1, 2 * k + 1]
            )
            for k in range(planes.shape[1])
        ]
    )
    return S, angles, fixed.shape[1]


def rotation_form(O) -> RotationForm:
    """The block-rotation form O = S W Sᵀ of an orthogonal O with det O = 1 (Theorem 2.1).

    numpy has no real Schur decomposition, so: the symmetric part (O + Oᵀ)/2 (eigenvalues
    cos θ) splits the space at the widest gap of its spectrum in [−1/2, 1/2] into P₊ (|θ| <
    2π/3) and P₋ (|θ| > π/3). On P₊ the planes of O, and on P₋ those of −O, come from
    :func:`_invariant_planes`; on P₋ an angle ψ of −O is the angle ψ ∓ π of O, and the
    vectors −O fixes (eigenvalues −1 of O, an even number as det O = 1) pair into T(π).
    """
    O = _as_square(O)
    d = len(O)
    if not np.allclose(O.T @ O, np.eye(d), rtol=0, atol=1e-10):
        raise LinearTheoryError("O is not orthogonal (O^T O != I)")
    if np.linalg.det(O) < 0:
        raise LinearTheoryError(
            "O has det -1: it is no product of rotations; append a "
            "dimension (see residual_factorization)"
        )
    cosines, Q = np.linalg.eigh((O + O.T) / 2)
    inside = np.concatenate([[-0.5], cosines[np.abs(cosines) < 0.5], [0.5]])
    k = int(np.argmax(np.diff(inside)))
    split = (inside[k] + inside[k + 1]) / 2
    plus, minus = Q[:, cosines > split], Q[:, cosines <= split]
    S_plus, angles_plus, _ = _invariant_planes(plus.T @ O @ plus)
    S_minus, angles_minus, fixed_minus = _invariant_planes(-(minus.T @ O @ minus))
    if fixed_minus % 2:
        raise ArithmeticError(
            "odd number of eigenvalues -1 found in an orthogonal matrix with "
            "det 1: the eigen-decomposition failed"
        )
    angles_minus = np.where(angles_minus > 0, angles_minus - math.pi, angles_minus + math.pi)
    basis = np.hstack([minus @ S_minus, plus @ S_plus])  # planes of P₋, planes of P₊, fixed
    return RotationForm(
        basis=basis,
        angles=np.concatenate([angles_minus, np.full(fixed_minus // 2, math.pi), angles_plus]),
    )


@dataclass(frozen=True)
class Factorization:
    """A_1..A_ℓ with (I + A_ℓ)⋯(I + A_1) = R, built by :func:`residual_factorization`.

    ``extra_dimension``: det R < 0, so the A_i are (d+1)×(d+1) and their product is
    diag(R, −1) (input x' = [x, b]; the first d outputs are R x).
    ``rotation_layers`` / ``scaling_layers``: how the ℓ layers were split between the
    rotation O and the positive definite factor P of R = O P (0 and 0 when ℓ = 1: A_1 = R − I).
    """

    A: np.ndarray
    extra_dimension: bool
    rotation_layers: int
    scaling_layers: int

    @property
    def max_norm(self) -> float:
        """|||A||| = max_i ‖A_i‖ (spectral norm)."""
        return float(max(np.linalg.norm(a, 2) for a in self.A))


def _layer_norm(angles: np.ndarray, singular_values: np.ndarray, q: int, p: int) -> float:
    """|||A||| when q layers take the rotation (angles) and p the scaling (singular values)."""
    if q == 0:
        rotation = 0.0 if np.all(np.abs(angles) <= _IDENTITY_TOL) else math.inf
    else:
        rotation = float(np.max(2 * np.abs(np.sin(angles / (2 * q))), initial=0.0))
    if p == 0:
        scaling = 0.0 if np.all(np.abs(singular_values - 1) <= _IDENTITY_TOL) else math.inf
    else:
        scaling = float(np.max(np.abs(singular_values ** (1.0 / p) - 1)))
    return max(rotation, scaling)


def residual_factorization(R, depth: int) -> Factorization:
    """Theorem 2.1, constructively: A_1..A_ℓ with (I + A_ℓ)⋯(I + A_1) = R, |||A||| ≤ (4π+3γ)/ℓ.

    Needs ℓ ≥ 3γ (LinearTheoryError otherwise, naming the depth needed). With the SVD
    R = U K Vᵀ, R = O P with the rotation O = U Vᵀ (det O = sign det R) and P = V K Vᵀ
    positive definite: the paper's two rotations U and Vᵀ merged into one, which needs fewer
    layers. The first p layers are P^{1/p} − I (norm max_j |σ_j^{1/p} − 1| ≤ 3γ/p once p ≥ γ),
    the last q = ℓ − p are S W_q Sᵀ − I (norm ≤ π/q, :class:`RotationForm`); p is
    chosen to minimise the larger of the two norms. det R < 0 is handled by appending a
    dimension: R' = diag(R, −1) has det R' > 0 and the same γ.
    """
    R = _as_square(R)
    _check_depth(R, depth)
    R, extra_dimension = _with_positive_determinant(R)
    eye = np.eye(len(R))
    U, s, Vt = np.linalg.svd(R)
    form = rotation_form(U @ Vt)
    norms = [_layer_norm(form.angles, s, q, depth - q) for q in range(depth + 1)]
    q = int(np.argmin(norms))
    if math.isinf(norms[q]):  # ℓ = 1 with both factors non-trivial: the one layer is R − I
        return Factorization(
            A=(R - eye)[None], extra_dimension=extra_dimension, rotation_layers=0, scaling_layers=0
        )
    p = depth - q
    layers = []
    if p:
        layers += [(Vt.T * s ** (1.0 / p)) @ Vt - eye] * p
    if q:
        layers += [form.root(q) - eye] * q
    return Factorization(
        A=np.stack(layers), extra_dimension=extra_dimension, rotation_layers=q, scaling_layers=p
    )


def paper_split(depth: int) -> tuple[int, int, int]:
    """(q, p, q): layers for Vᵀ, K and U in :func:`paper_factorization` at depth ℓ ≥ 3.

    The proportions of Theorem 2.1's constants: a quarter of the layers for each rotation
    (‖W − I‖ ≤ π/q ≈ 4π/ℓ) and the remaining half for K (‖K^{1/p} − I‖ ≤ e^{γ/p} − 1 ≈ 2γ/ℓ,
    within 3γ/ℓ when ℓ ≥ 3γ): q = ⌈ℓ/4⌉, p = ℓ − 2q ≥ 1.
    """
    if not isinstance(depth, (int, np.integer)) or depth < 3:
        raise LinearTheoryError(
            f"the paper's construction needs depth >= 3 (a layer for each "
            f"of U, K, V^T), got {depth!r}; use residual_factorization"
        )
    q = math.ceil(depth / 4)
    return q, depth - 2 * q, q


def _with_positive_determinant(R: np.ndarray) -> tuple[np.ndarray, bool]:
    """(R, False) when det R > 0; (diag(R, −1), True) otherwise: the extra dimension of
    Theorem 2.1's remark on det R < 0, which keeps γ."""
    if np.linalg.det(R) > 0:
        return R, False
    d = len(R)
    return np.block([[R, np.zeros((d, 1))], [np.zeros((1, d)), -np.ones((1, 1))]]), True


def paper_factorization(R, depth: int) -> Factorization:
    """Theorem 2.1 by the proof's own construction (arXiv:1611.04231, proof of Theorem 2.1).

    SVD R = U K Vᵀ with det U = det V = 1 (negate the last column of both when both are −1;
    U K Vᵀ is unchanged). The first q layers are roots S W_q Sᵀ of Vᵀ, the next p are K^{1/p},
    the last q roots of U (:func:`paper_split`), so (I + A_ℓ)⋯(I + A_1) = U K Vᵀ = R. Unlike
    :func:`residual_factorization` (polar form, one rotation, split chosen per R) the split is
    fixed by ℓ alone. Needs ℓ ≥ 3γ and ℓ ≥ 3; det R < 0 appends a dimension.
    """
    R = _as_square(R)
    _check_depth(R, depth)
    q, p, _ = paper_split(depth)
    R, extra_dimension = _with_positive_determinant(R)
    U, s, Vt = np.linalg.svd(R)
    if np.linalg.det(U) < 0:
        U[:, -1] *= -1
        Vt[-1] *= -1
    eye = np.eye(len(R))
    layers = (
        [rotation_form(Vt).root(q) - eye] * q
        + [np.diag(s ** (1.0 / p)) - eye] * p
        + [rotation_form(U).root(q) - eye] * q
    )
    return Factorization(
        A=np.stack(layers), extra_dimension=extra_dimension, rotation_layers=2 * q, scaling_layers=p
    )


def check_factorization(R, depth: int, factorize=None) -> dict:
    """Build a Theorem 2.1 factorization and measure it against the theorem.

    ``factorize``: :func:`residual_factorization` (the default, polar form) or
    :func:`paper_factorization`. Returns the relative error ‖(I + A_ℓ)⋯(I + A_1) − R‖/‖R‖
    (top-left block when a dimension was appended), |||A|||, the bound (4π + 3γ)/ℓ, and how the
    layers were split.
    """
    R = _as_square(R)
    f = (factorize or residual_factorization)(R, depth)
    product = residual_product(f.A)[: len(R), : len(R)]
    return {
        "d": len(R),
        "depth": depth,
        "gamma": gamma(R),
        "relative_error": float(np.linalg.norm(product - R, 2) / np.linalg.norm(R, 2)),
        "max_norm": f.max_norm,
        "bound": norm_bound(R, depth),
        "extra_dimension": f.extra_dimension,
        "rotation_layers": f.rotation_layers,
        "scaling_layers": f.scaling_layers,
    }


# --- Theorem 2.2: no spurious critical points in the τ-ball ---------------------------------


def spectral_norms(A: np.ndarray) -> np.ndarray:
    """‖A_i‖ for every layer; |||A||| is their maximum."""
    return np.linalg.norm(A, 2, axis=(1, 2))


def gradient_norm_lower_bound(
    A: np.ndarray, R: np.ndarray, Sigma: np.ndarray, tau: float, constant: float = 4.0
) -> float:
    """Right side of eq. (2.3): 4ℓ(1 − τ)^{2(ℓ−1)} σ_min(Σ) (f(A) − C_opt), for |||A||| ≤ τ < 1.

    C_opt = C = d, the risk of the exact fit E = 0 (which Theorem 2.1 attains when
    det R > 0); the proof (‖∇_i f‖_F ≥ 2 σ_min(above)σ_min(below)‖EΣ‖_F, each product of
    ℓ − 1 factors with σ_min(I + A_j) ≥ 1 − τ) gives the bound with f(A) − d for any R.
    ``constant`` replaces the 4 (a deliberately wrong 8 must be violated somewhere).
    """
    if not 0 <= tau < 1:
        raise LinearTheoryError(f"tau must be in [0, 1), got {tau}")
    if spectral_norms(A).max() > tau * (1 + 1e-12):
        raise LinearTheoryError(f"|||A||| = {spectral_norms(A).max():.6g} exceeds tau = {tau}")
    return _bound_factor(A, Sigma, tau, constant) * excess_risk(residual_layers(A), R, Sigma)


def _bound_factor(A: np.ndarray, Sigma: np.ndarray, tau: float, constant: float) -> float:
    """constant · ℓ (1 − τ)^{2(ℓ−1)} σ_min(Σ): eq. (2.3)'s factor in front of f(A) − C_opt."""
    ell = A.shape[0]
    return constant * ell * (1 - tau) ** (2 * (ell - 1)) * np.linalg.eigvalsh(Sigma)[0]


def eq23_ratio(
    A: np.ndarray, R: np.ndarray, Sigma: np.ndarray, tau: float, constant: float = 4.0
) -> float:
    """‖∇f(A)‖_F² over the right side of eq. (2.3); Theorem 2.2 says ≥ 1 in the τ-ball."""
    return float(np.sum(risk_gradient(A, R, Sigma) ** 2)) / gradient_norm_lower_bound(
        A, R, Sigma, tau, constant
    )


def worst_target(A: np.ndarray, Sigma: np.ndarray) -> np.ndarray:
    """The R minimising :func:`eq23_ratio` at this A, exactly (scaled so ‖E‖_F = 1).

    With P_i = M_ℓ⋯M_{i+1}, Q_i = M_{i−1}⋯M_1 and e = vec(E) (column-major), Lemma 2.4 gives
    ‖∇f‖_F² = eᵀ N e, N = 4 Σ_i (Σ Q_iᵀ Q_i Σ) ⊗ (P_i P_iᵀ), and f − C = eᵀ (Σ ⊗ I) e; the
    ratio is a generalised Rayleigh quotient, least at the bottom eigenvector of the pencil
    (N, Σ ⊗ I). R = (I + A_ℓ)⋯(I + A_1) − E.
    """
    layers = residual_layers(A)
    d = A.shape[-1]
    below, above = partial_products(layers)
    N = 4 * sum(np.kron(Sigma @ b.T @ b @ Sigma, a @ a.T) for a, b in zip(above, below))
    L = np.linalg.cholesky(np.kron(Sigma, np.eye(d)))
    whitened = np.linalg.solve(L, np.linalg.solve(L, N).T)  # L⁻¹ N L⁻ᵀ (symmetric)
    y = np.linalg.eigh((whitened + whitened.T) / 2)[1][:, 0]
    E = np.linalg.solve(L.T, y).reshape(d, d, order="F")
    return chain_product(layers) - E / np.linalg.norm(E)


def project_to_tau_ball(A: np.ndarray, tau: float) -> np.ndarray:
    """The nearest point (Frobenius) with |||A||| ≤ τ: each A_i's singular values clipped at τ."""
    U, s, Vt = np.linalg.svd(A)
    return (U * np.minimum(s, tau)[:, None, :]) @ Vt


def _log_ratio_gradient(A: np.ndarray, R: np.ndarray, Sigma: np.ndarray) -> np.ndarray:
    """∇_A log(‖∇f‖² / (f − C)) at fixed R: (2 H∇f)/‖∇f‖² − ∇f/(f − C).

    The Hessian-vector product H∇f by a complex step, Im ∇f(A + i h ∇f)/h with h = 1e-30:
    Lemma 2.4's gradient is a polynomial in A (transposes, no conjugates), so this is exact
    to round-off, with no cancellation.
    """
    grad = risk_gradient(A, R, Sigma)
    h = 1e-30
    hessian_grad = risk_gradient(A + 1j * h * grad, R, Sigma).imag / h
    return 2 * hessian_grad / float(np.sum(grad**2)) - grad / excess_risk(
        residual_layers(A), R, Sigma
    )


def adversarial_eq23_search(
    depth: int,
    d: int,
    tau: float,
    Sigma: np.ndarray,
    rng: np.random.Generator,
    starts: int = 4,
    steps: int = 60,
    constant: float = 4.0,
) -> dict:
    """The smallest :func:`eq23_ratio` found over the τ-ball and over R, for this Σ.

    From each start (:func:`random_tau_ball_point`), alternate (a) R ← :func:`worst_target`
    (exact for the current A) and (b) a projected, normalised gradient step on log ratio in A
    (:func:`project_to_tau_ball`), halving the step until the ratio decreases; stop after
    ``steps`` steps or when the step falls below 1e-15. Theorem 2.2 says the minimum is ≥ 1
    (it is 1 at A_i = −τI with E in Σ's bottom eigenspace). Returns the smallest ratio and
    its A, R.
    """
    best = {"min_ratio": math.inf}
    for _ in range(starts):
        A = random_tau_ball_point(depth, d, tau, rng)
        R = worst_target(A, Sigma)
        ratio = eq23_ratio(A, R, Sigma, tau, constant)
        step = 0.25 * tau
        for _ in range(steps):
            direction = _log_ratio_gradient(A, R, Sigma)
            direction /= max(np.linalg.norm(direction), 1e-300)
            while step > 1e-15:
                trial = project_to_tau_ball(A - step * direction, tau)
                trial_R = worst_target(trial, Sigma)
                trial_ratio = eq23_ratio(trial, trial_R, Sigma, tau, constant)
                if trial_ratio < ratio:
                    A, R, ratio, step = trial, trial_R, trial_ratio, 2 * step
                    break
                step /= 2
            else:
                break
        if ratio < best["min_ratio"]:
            best = {"min_ratio": ratio, "A": A, "R": R}
    return best


def tau_one_critical_point(R: np.ndarray, Sigma: np.ndarray, depth: int = 2) -> dict:
    """Why Theorem 2.2 needs τ < 1: A_1 = A_2 = −I (the rest 0) has |||A||| = 1, ∇f(A) = 0
    (every term of Lemma 2.4 contains the factor I + A_1 = 0 or I + A_2 = 0) and risk
    f = tr(R Σ Rᵀ) + d above C_opt = d whenever R ≠ 0: a spurious critical point on the
    boundary of the unit ball."""
    if depth < 2:
        raise LinearTheoryError(f"the counterexample needs depth >= 2, got {depth}")
    d = R.shape[0]
    A = np.zeros((depth, d, d))
    A[:2] = -np.eye(d)
    return {
        "depth": depth,
        "d": d,
        "max_layer_norm": float(spectral_norms(A).max()),
        "gradient_norm": float(np.linalg.norm(risk_gradient(A, R, Sigma))),
        "excess_risk": excess_risk(residual_layers(A), R, Sigma),
    }


def random_tau_ball_point(depth: int, d: int, tau: float, rng: np.random.Generator) -> np.ndarray:
    """A random A with |||A||| ≤ τ: each A_i of spectral norm τ·u, u ~ U[1/2, 1].

    Half the layers (at random) are Gaussian, half negative semidefinite (−G Gᵀ): those push
    σ_min(I + A_i) towards 1 − τ, where eq. (2.3) is tightest.
    """
    A = np.empty((depth, d, d))
    for i in range(depth):
        G = rng.standard_normal((d, d))
        if rng.random() < 0.5:
            G = -G @ G.T
        A[i] = tau * rng.uniform(0.5, 1.0) * G / np.linalg.norm(G, 2)
    return A


def tau_ball_ratios(
    tau: float, depth: int, d: int, samples: int, rng: np.random.Generator, constant: float = 4.0
) -> np.ndarray:
    """:func:`eq23_ratio` at ``samples`` random A in the τ-ball (:func:`random_tau_ball_point`),
    each with its own random R and Σ (condition 10). Theorem 2.2 says every ratio is ≥ 1."""
    ratios = np.empty(samples)
    for k in range(samples):
        R = rng.standard_normal((d, d))
        Sigma = random_covariance(d, 10.0, rng)
        A = random_tau_ball_point(depth, d, tau, rng)
        ratios[k] = eq23_ratio(A, R, Sigma, tau, constant)
    return ratios


# --- The experiment Theorem 2.2 predicts ------------------------------------------------------


def gradient_descent(
    layers: np.ndarray, R: np.ndarray, Sigma: np.ndarray, learning_rate: float, steps: int
) -> np.ndarray:
    """Excess risk f − C after each of ``steps`` full-gradient steps on the layers.

    Start at M_i = I for the residual parameterisation from A = 0, at M_i = 0 or small random
    for the standard one. Returns the ``steps + 1`` values (the first at the start).
    """
    excess = [excess_risk(layers, R, Sigma)]
    for _ in range(steps):
        layers = layers - learning_rate * chain_gradient(layers, R, Sigma)
        excess.append(excess_risk(layers, R, Sigma))
    return np.array(excess)


def compare_parameterisations(
    R: np.ndarray,
    Sigma: np.ndarray,
    depths,
    steps: int,
    init_scale: float,
    rng: np.random.Generator,
) -> dict:
    """Gradient descent from the three starting points of Section 2, for each depth.

    ``{depth: {"residual": …, "standard_zero": …, "standard_random": …}}``, each the excess
    risk f − C after every step (:func:`gradient_descent`): the residual parameterisation
    from A = 0 (layers I), the standard one from B = 0 (a critical point: it never moves
    for ℓ ≥ 2) and from B_i with i.i.d. N(0, init_scale²/d) entries. The learning rate
    0.5 / (ℓ λ_max(Σ) max(1, ‖R‖²)) keeps the step below the curvature of f near the
    optimum, which grows like ℓ λ_max(Σ) ‖R‖^{2(ℓ−1)/ℓ}.
    """
    d = R.shape[0]
    curvature = np.linalg.eigvalsh(Sigma)[-1] * max(1.0, np.linalg.norm(R, 2) ** 2)
    curves = {}
    for depth in depths:
        lr = 0.5 / (depth * curvature)
        starts = {
            "residual": np.repeat(np.eye(d)[None], depth, axis=0),
            "standard_zero": np.zeros((depth, d, d)),
            "standard_random": init_scale / math.sqrt(d) * rng.standard_normal((depth, d, d)),
        }
        curves[depth] = {
            name: gradient_descent(layers, R, Sigma, lr, steps) for name, layers in starts.items()
        }
    return curves


# --- Random instances -------------------------------------------------------------------------


def random_orthonormal(d: int, rng: np.random.Generator) -> np.ndarray:
    """A random orthogonal matrix (QR of a Gaussian matrix)."""
    return np.linalg.qr(rng.standard_normal((d, d)))[0]


def random_rotation(d: int, angles, rng: np.random.Generator) -> np.ndarray:
    """Q W Qᵀ with Q random orthogonal and W = diag(T(θ_1), …, 1, …): a rotation of ℝ^d by
    the given angles in random orthogonal planes (2·len(angles) ≤ d)."""
    Q = random_orthonormal(d, rng)
    return Q @ RotationForm(basis=np.eye(d), angles=np.asarray(angles, float)).blocks() @ Q.T


def random_target(
    d: int, max_angle: float, max_log_scale: float, rng: np.random.Generator
) -> np.ndarray:
    """A random R = O P with det R > 0: O a rotation by angles ≤ ``max_angle`` in random
    planes, P positive definite with log-eigenvalues uniform in ±``max_log_scale`` (γ ≤ it).
    """
    O = random_rotation(d, rng.uniform(-max_angle, max_angle, d // 2), rng)
    V = random_orthonormal(d, rng)
    return O @ (V * np.exp(rng.uniform(-max_log_scale, max_log_scale, d))) @ V.T


def random_covariance(d: int, condition: float, rng: np.random.Generator) -> np.ndarray:
    """A random Σ with eigenvalues geometrically spaced in [1/√condition, √condition]."""
    Q = random_orthonormal(d, rng)
    return (Q * np.geomspace(condition**-0.5, condition**0.5, d)) @ Q.T
