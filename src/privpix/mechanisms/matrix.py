"""Matrix-decomposition face release (Zhang, Fu & Meng 2020): SRA and ESRA on the singular values of each image.

Both treat every image channel as an m×n matrix A in the paper's 0–255 units, take its SVD A = Q D Pᵀ
(batched with NumPy's stacked SVD), perturb the top singular values with Laplace noise, and rebuild. Neither
is differentially private as implemented, whatever ε is: the singular vectors Q, P of the private image are
published without noise (they alone reveal the face), and the noise scale Δ₁D = λ₁ is the image's own
largest singular value. Their guarantees say so (``sound: false``). The paper's LAP is ``pixel-laplace``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import About, Claim
from privpix.mechanisms.kinds import ImageMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import Neighbours, PixelColumn
from privpix.privacy.noise import RNG, exponential_mechanism_rows, laplace

VALUE_SCALE = 255.0  # the paper's pixel units; ESRA's score mixes unit-free and pixel-valued terms

_SVD_CAVEATS = (
    "singular vectors of the private image are published without noise: the release reveals the face whatever ε is",
    "noise scale Δ₁D = λ₁ is the image's own largest singular value (computed from the data)",
    "not ε-DP as Zhang, Fu & Meng 2020 claim; ε is a noise knob. No sound variant of this method exists here",
)


def knob_guarantee(epsilon: float, caveats: tuple[str, ...]) -> Guarantee:
    """Zhang, Fu & Meng 2020's claim as it holds: ε per pixel column is a noise knob, with no per-image bound."""
    return Guarantee(
        model="central-dp",
        epsilon=epsilon,
        unit=PixelColumn().wording(),
        per_image_epsilon=None,
        sound=False,
        caveats=caveats,
    )


def monotone_singular_values(values: np.ndarray) -> np.ndarray:
    """Zhang, Fu & Meng 2020 §3.2.3 (Hay et al.'s post-processing): the closest non-increasing, non-negative sequence in
    least squares, per row of ``values`` (n, r), by SciPy's PAVA isotonic regression. The bound is a clip: the
    least-squares projection onto non-increasing sequences ≥ 0 is the unbounded one clipped at 0 (scikit-learn's
    ``y_min`` is the same clip). SciPy's call costs microseconds where scikit-learn's estimator spent 1.3 ms per row
    validating its input, 95 % of an SRA audit's time."""
    # Imported here: scipy.optimize takes 0.4-0.7 s to import, which every command and every release worker would
    # pay for the sake of SRA and ESRA alone (privpix.mechanisms imports every mechanism module).
    from scipy.optimize import isotonic_regression

    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    if v.shape[1] == 0:
        return v.copy()
    return np.stack([np.maximum(isotonic_regression(row, increasing=False).x, 0.0) for row in v])


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


class _SingularValueMechanism(ImageMechanism):
    about = About(
        guarantee_model="central-dp",
        paper="Zhang, Fu & Meng 2020",
        soundness="NOT DP: singular vectors published untouched; data-derived Δ",
        use="paper",
    )
    # Both subclasses' last two parameters: each declares its own first (params_before="postprocess").
    postprocess: bool = param(True, "isotonic (non-increasing, non-negative) refinement, §3.2.3")
    clip: bool = param(True, "clip the release to [0, 1]")
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        return Claim.of(knob_guarantee(self.epsilon, _SVD_CAVEATS), self.neighbours())

    def neighbours(self) -> Neighbours:
        return PixelColumn()

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
class SRA(_SingularValueMechanism, params_before="postprocess"):
    """SRA (Zhang, Fu & Meng 2020, §3.2.2): keep the top r singular values, add Laplace(Δ₁D^{r×r}/ε) to each,
    rebuild."""

    name = "sra"
    summary = "SVD, Laplace on the top-r singular values, rebuild (Zhang, Fu & Meng 2020's SRA); not DP"
    about = replace(_SingularValueMechanism.about, paper="Zhang, Fu & Meng 2020 (SRA)")
    r: int = param(100, "singular values kept (capped at the image's rank)", minimum=1)

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        q, s, pt = _svd(x)
        r = np.minimum(self.r, _rank(s))
        out = _rebuild(q, self._perturb(s, r, self.epsilon, rng), pt, r, x.shape)
        return np.clip(out, 0.0, 1.0) if self.clip else out


@register
class ESRA(_SingularValueMechanism, params_before="postprocess"):
    """ESRA (Zhang, Fu & Meng 2020, §3.2.2): choose r by the exponential mechanism with budget ε₁ = split·ε on the
    score U(A, r) of eq. 11 (lower is better, Pr ∝ exp(−ε₁U/(2Δ₁U))), with Δ₁U = Δ₁Q + 2Δ₁D + Δ₁Pᵀ (theorem 5, the
    largest column L1 norms of the full factors, computed from the image), then SRA's Laplace step with
    ε₂ = ε − ε₁. The Laplace term of U uses ε₂, the budget whose noise it predicts."""

    name = "esra"
    summary = (
        "exponential-mechanism choice of r, then Laplace on singular values (Zhang, Fu & Meng 2020's ESRA); not DP"
    )
    about = replace(_SingularValueMechanism.about, paper="Zhang, Fu & Meng 2020 (ESRA)")
    split: float = param(0.5, "fraction ε₁/ε spent choosing r", minimum=1e-6)

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
        sens = np.where(delta_u > 0, delta_u, 1.0)
        r = 1 + exponential_mechanism_rows(rng, -u, eps1, sens, lengths=rank)
        self.last_r_ = r
        out = _rebuild(q, self._perturb(s, r, eps2, rng), pt, r, x.shape)
        return np.clip(out, 0.0, 1.0) if self.clip else out


_LRA_CAVEATS = (
    "the factor B is fitted to the private image and released inside B·L̃: only L is perturbed",
    "noise scale Δ₁L is the largest column L1 norm of the image's own factor L (computed from the data)",
    "not ε-DP as Zhang, Fu & Meng 2020 claim; ε is a noise knob. No sound variant of this method exists here",
)


def _unit_laplace32(rng: RNG, shape: tuple[int, ...]) -> np.ndarray:
    """Standard Laplace noise as float32. LRA draws k values per entry visit (billions per dataset), so seeded
    runs use the difference of two float32 exponentials (exactly Laplace-distributed, about twice as fast);
    secure mode keeps the privpix sampler."""
    if isinstance(rng, np.random.Generator):
        return rng.standard_exponential(shape, dtype=np.float32) - rng.standard_exponential(shape, dtype=np.float32)
    return laplace(rng, 1.0, shape).astype(np.float32)


def _clip_rows(step: np.ndarray, cap: np.float32) -> np.ndarray:
    """Scale each update vector (last axis) down to L2 norm ``cap`` if it is longer."""
    norm = np.sqrt((step * step).sum(axis=-1, keepdims=True))
    return step * np.minimum(np.float32(1.0), cap / np.maximum(norm, np.float32(1e-30)))


@register
class LRA(ImageMechanism):
    """LRA (Zhang, Fu & Meng 2020, §3.2.1, steps 1–8): factor A ≈ B L (rank k) by regularised stochastic gradient
    descent in which every step sees L with fresh Laplace noise, l̃_j = l_j + Lap(Δ₁L/ε)^k, and release B·L̃.

    Reading of the unstated details: A in [0, 1] units (the 0–255 units make γ = 0.01 diverge; the release
    is scale free because the noise is relative to L); the factors start from the SVD, B = Q√D and
    L = √D Pᵀ (step 1); Δ₁L is the largest column L1 norm of that L; an iteration visits every entry
    once, in an order where each vectorised step touches distinct rows and columns (the paper leaves the
    order open); the final L̃ draws one more noise vector per column (step 7).

    As printed, the SGD diverges (to inf) whenever the noise on L is large against L, which on ORL happens
    for ε below about 1: every update multiplies by the noisy l̃_j. ``max_step`` (default 0.05 in [0, 1]
    units) caps the norm of each row update, a deviation from the paper that keeps the release finite;
    ``max_step=0`` runs the algorithm exactly as printed and raises if it diverges.
    """

    name = "lra"
    summary = "SGD factorisation A ≈ B L with Laplace noise on L (Zhang, Fu & Meng 2020's LRA); not DP"
    about = About(
        guarantee_model="central-dp",
        paper="Zhang, Fu & Meng 2020 (LRA)",
        soundness="NOT DP: the factor B is fitted to the private image; data-derived Δ",
        use="paper",
    )
    k: int = param(0, "factor rank; 0 = min(height, width), the largest possible rank", minimum=0)
    iterations: int = param(5, "SGD passes over the entries (the paper's r)", minimum=1)
    gamma: float = param(0.01, "learning rate γ", minimum=0.0)
    tau: float = param(0.1, "regulariser τ", minimum=0.0)
    max_step: float = param(
        0.05,
        "cap on the L2 norm of each SGD update of a row of B or L (0 = none, as printed; diverges at small ε)",
        minimum=0.0,
    )
    clip: bool = param(True, "clip the release to [0, 1]")
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        return Claim.of(knob_guarantee(self.epsilon, _LRA_CAVEATS), self.neighbours())

    def neighbours(self) -> Neighbours:
        return PixelColumn()

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        n, h, w, c = x.shape
        mats = np.moveaxis(x, 3, 1).reshape(n * c, h, w)
        q, s, pt = np.linalg.svd(mats, full_matrices=False)
        k = min(self.k or min(h, w), min(h, w))
        root = np.sqrt(s[:, :k])
        b = (q[:, :, :k] * root[:, None, :]).astype(np.float32)  # (N, h, k)
        lt = (pt[:, :k, :].transpose(0, 2, 1) * root[:, None, :]).astype(np.float32)  # Lᵀ: (N, w, k)
        scale = (np.abs(lt).sum(axis=2).max(axis=1) / self.epsilon).astype(np.float32)  # Δ₁L/ε per matrix
        a = mats.astype(np.float32)
        g, tau = np.float32(self.gamma), np.float32(self.tau)
        cap = np.float32(self.max_step) if self.max_step > 0 else np.float32(np.inf)
        rows = np.arange(h)
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is detected and reported below
            self._sgd(a, b, lt, scale, rows, g, tau, cap, rng)
        if not (np.all(np.isfinite(b)) and np.all(np.isfinite(lt))):
            raise ParameterError(
                f"lra: SGD diverged at epsilon={self.epsilon:g} (noise Δ₁L/ε too large for γ={self.gamma:g}); "
                "set max_step > 0 to cap each update"
            )
        final = lt + laplace(rng, 1.0, lt.shape).astype(np.float32) * scale[:, None, None]
        out = np.einsum("nik,njk->nij", b, final).astype(np.float64)
        out = np.moveaxis(out.reshape(n, c, h, w), 1, 3)
        return np.clip(out, 0.0, 1.0) if self.clip else out

    def _sgd(self, a, b, lt, scale, rows, g, tau, cap, rng) -> None:
        """The entry-wise SGD of steps 2–6, in place on B (N, h, k) and Lᵀ (N, w, k).

        Rows of B are taken as slices (views, no copies): the B step is computed from the old rows before
        the L step and added last, so both steps see the same old values, as in the printed algorithm."""
        n_mat, h, k = b.shape
        w = lt.shape[1]
        for _ in range(self.iterations):
            for t in range(w):
                for start in range(0, h, w):
                    stop = min(start + w, h)
                    i = rows[start:stop]
                    j = (i + t) % w  # distinct columns within one vectorised step
                    noise = _unit_laplace32(rng, (n_mat, stop - start, k))
                    lj = lt[:, j, :]
                    noisy = lj + noise * scale[:, None, None]  # l_j + Lap(Δ₁L/ε)^k, steps 4-5
                    bi = b[:, start:stop, :]
                    e = a[:, i, j] - np.einsum("nik,nik->ni", bi, noisy)
                    step_b = _clip_rows(g * (e[..., None] * noisy - tau * bi), cap)
                    lt[:, j, :] = lj + _clip_rows(g * (e[..., None] * bi - tau * lj), cap)
                    bi += step_b
            if not np.all(np.isfinite(b)):
                return
