"""Matrix-decomposition face release (paper 001): SRA and ESRA on the singular values of each image.

Both treat every image channel as an m×n matrix A in the paper's 0–255 units, take its SVD A = Q D Pᵀ
(batched with NumPy's stacked SVD), perturb the top singular values with Laplace noise, and rebuild. Neither
is differentially private as implemented, whatever ε is: the singular vectors Q, P of the private image are
published without noise (they alone reveal the face), and the noise scale Δ₁D = λ₁ is the image's own
largest singular value. Their guarantees say so (``sound: false``). The paper's LAP is ``pixel-laplace``.
"""

from __future__ import annotations

import numpy as np
from sklearn.isotonic import IsotonicRegression

from privpix.errors import ParameterError
from privpix.guarantees import Guarantee
from privpix.mechanisms.base import Mechanism, Param, register
from privpix.noise import RNG, exponential_mechanism, laplace

VALUE_SCALE = 255.0  # the paper's pixel units; ESRA's score mixes unit-free and pixel-valued terms

_SVD_CAVEATS = (
    "singular vectors of the private image are published without noise: the release reveals the face whatever ε is",
    "noise scale Δ₁D = λ₁ is the image's own largest singular value (computed from the data)",
    "not ε-DP as paper 001 claims; ε is a noise knob. No sound variant of this method exists here",
)


def monotone_singular_values(values: np.ndarray) -> np.ndarray:
    """Paper 001 §3.2.3 (Hay et al.'s post-processing): the closest non-increasing, non-negative sequence in
    least squares, per row of ``values`` (n, r), by scikit-learn's PAVA isotonic regression."""
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    iso = IsotonicRegression(increasing=False, y_min=0.0)
    idx = np.arange(v.shape[1])
    return np.stack([iso.fit_transform(idx, row) for row in v])


def _svd(x: np.ndarray, full: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-matrix SVD of (n, h, w, c) images as (n·c, h, w) matrices in 0–255 units: (Q, singular values, Pᵀ)."""
    n, h, w, c = x.shape
    mats = np.moveaxis(x, 3, 1).reshape(n * c, h, w) * VALUE_SCALE
    return np.linalg.svd(mats, full_matrices=full)


def _rank(s: np.ndarray) -> np.ndarray:
    """Numerical rank per row of singular values (at least 1, so an all-black image keeps one value)."""
    return np.maximum((s > s[:, :1] * 1e-10).sum(axis=1), 1)


def _rebuild(q: np.ndarray, s: np.ndarray, pt: np.ndarray, r: np.ndarray, shape) -> np.ndarray:
    """Σ_{i<r} s_i q_i p_iᵀ per matrix (r may differ per matrix), back to (n, h, w, c) in [0, 1] units."""
    n, h, w, c = shape
    k = s.shape[1]
    mask = np.arange(k)[None, :] < np.asarray(r)[:, None]
    mats = np.einsum("bik,bk,bkj->bij", q[:, :, :k], s * mask, pt[:, :k, :])
    return np.moveaxis(mats.reshape(n, c, h, w), 1, 3) / VALUE_SCALE


class _SingularValueMechanism(Mechanism):
    model = "central-dp"
    paper = "001"
    soundness = "NOT DP: singular vectors published untouched; data-derived Δ"

    def guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        return Guarantee(
            model="central-dp",
            epsilon=self.epsilon,
            unit="one pixel column of one image",
            per_image_epsilon=None,
            sound=False,
            caveats=_SVD_CAVEATS,
        )

    def _perturb(self, s: np.ndarray, r: np.ndarray, eps: float, rng: RNG) -> np.ndarray:
        """Laplace(λ₁/eps) on each of the first r singular values (Δ₁ of D^{r×r} = its largest column L1 norm
        = λ₁), then the optional monotone post-processing of those r values."""
        k = s.shape[1]
        mask = np.arange(k)[None, :] < r[:, None]
        noise = laplace(rng, 1.0, s.shape) * (s[:, :1] / eps)
        noisy = np.where(mask, s + noise, 0.0)
        if self.postprocess:
            for i in range(len(noisy)):
                noisy[i, : r[i]] = monotone_singular_values(noisy[i : i + 1, : r[i]])[0]
        return noisy


@register
class SRA(_SingularValueMechanism):
    """SRA (paper 001, §3.2.2): keep the top r singular values, add Laplace(Δ₁D^{r×r}/ε) to each, rebuild."""

    name = "sra"
    summary = "SVD, Laplace on the top-r singular values, rebuild (paper 001's SRA); not DP"
    params = (
        Param("r", int, 100, "singular values kept (capped at the image's rank)", minimum=1),
        Param("postprocess", bool, True, "isotonic (non-increasing, non-negative) refinement, §3.2.3"),
        Param("clip", bool, True, "clip the release to [0, 1]"),
    )

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        q, s, pt = _svd(x)
        r = np.minimum(self.r, _rank(s))
        out = _rebuild(q, self._perturb(s, r, self.epsilon, rng), pt, r, x.shape)
        return np.clip(out, 0.0, 1.0) if self.clip else out


@register
class ESRA(_SingularValueMechanism):
    """ESRA (paper 001, §3.2.2): choose r by the exponential mechanism with budget ε₁ = split·ε on the score
    U(A, r) of eq. 11 (lower is better, Pr ∝ exp(−ε₁U/(2Δ₁U))), with Δ₁U = Δ₁Q + 2Δ₁D + Δ₁Pᵀ (theorem 5, the
    largest column L1 norms of the full factors, computed from the image), then SRA's Laplace step with
    ε₂ = ε − ε₁. The Laplace term of U uses ε₂, the budget whose noise it predicts."""

    name = "esra"
    summary = "exponential-mechanism choice of r, then Laplace on singular values (paper 001's ESRA); not DP"
    params = (
        Param("split", float, 0.5, "fraction ε₁/ε spent choosing r", minimum=1e-6),
        Param("postprocess", bool, True, "isotonic (non-increasing, non-negative) refinement, §3.2.3"),
        Param("clip", bool, True, "clip the release to [0, 1]"),
    )

    def _check(self) -> None:
        if not 0.0 < self.split < 1.0:
            raise ParameterError(f"split must be in (0, 1), got {self.split}")

    @staticmethod
    def scores(s: np.ndarray, m: int, n: int, eps2: float) -> np.ndarray:
        """U(A, r) for r = 1..k per matrix (rows of ``s``, singular values in 0–255 units): eq. 11.

        The discarded columns of the orthonormal Q (m×m) and P (n×n) contribute √(m−r) and √(n−r)."""
        k = s.shape[1]
        r = np.arange(1, k + 1)
        sq = s**2
        tail = np.sqrt(np.clip(sq.sum(axis=1, keepdims=True) - np.cumsum(sq, axis=1), 0, None))
        head = np.sqrt(np.cumsum(sq, axis=1))
        return np.sqrt(m - r)[None, :] + tail + np.sqrt(n - r)[None, :] + np.sqrt(2.0) * head / eps2

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        q, s, pt = _svd(x, full=True)
        h, w = x.shape[1:3]
        eps1 = self.split * self.epsilon
        eps2 = self.epsilon - eps1
        u = self.scores(s, h, w, eps2)
        delta_u = np.abs(q).sum(axis=1).max(axis=1) + 2 * s[:, 0] + np.abs(pt).sum(axis=1).max(axis=1)
        rank = _rank(s)
        r = np.empty(len(s), dtype=np.int64)
        for i in range(len(s)):
            k = int(rank[i])
            sens = float(delta_u[i]) if delta_u[i] > 0 else 1.0
            r[i] = 1 + exponential_mechanism(rng, -u[i, :k], eps1, sens)
        self.last_r_ = r
        out = _rebuild(q, self._perturb(s, r, eps2, rng), pt, r, x.shape)
        return np.clip(out, 0.0, 1.0) if self.clip else out
