"""PCA-inverse privatization of an image database (Zhang et al. 2022), and sound variants one parameter away.

Each image is flattened to s = h·w·c values in [0, 1], mean-centred, projected on d principal components
(eqs. 1–7), Laplace noise is added to each of the d coefficients (eqs. 9–11), and the regularised PCA inverse
(eqs. 13–14) maps it back to pixels. For orthonormal components E (s×d), E Eᵀ is the projector P onto their
span and (P + λI)⁻¹ = P/(1 + λ) + (I − P)/λ; a row vector in the span of E meets only the first term, so
eq. 13 is exactly ``coefficients · Eᵀ / (1 + λ)`` — computed in that closed form.

``basis`` chooses where the mean and components come from:

* ``private`` (the paper): from the images being released, one PCA per ``batch`` images, with the noise
  scale of coefficient l the observed range max − min of that coefficient in the batch (eq. 10). Not DP:
  the basis and the ranges are functions of the private images and are published implicitly, and the d
  coefficients of one image each spend ε (d·ε in all, even if the rest held).
* ``public``: mean and components fitted on public images (``fit(public)`` or ``--param public=NAME:SPLIT``);
  each image's coefficient vector is clipped to L2 norm ``coef_bound`` (default: the 99th percentile of the
  public images' norms) and every coefficient gets Laplace(2·√d·coef_bound/ε), the L1 sensitivity of the
  clipped vector. Each output depends on one image only: ε-DP per image (even ε-LDP).
* ``dp``: components from the Gaussian mechanism on the second-moment matrix of the batch around the fixed
  centre 0.5 (Dwork et al. 2014, "Analyze Gauss"; every image has ‖x − 0.5‖₂ ≤ √s/2, so no clipping is
  needed), with ``basis_epsilon`` and ``delta``; then as ``public``, with the centre 0.5 and ``coef_bound``
  (default √s/2, the largest possible norm). Per image: (ε + basis_epsilon, δ)-DP, each image being in one
  batch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Self

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.overlap import image_digests
from privpix.errors import ParameterError
from privpix.mechanisms.base import About, Capabilities, Claim, ConformanceCase, shape_of
from privpix.mechanisms.kinds import ImageMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.privacy.composition import GaussianNoise, LaplaceNoise, NoiseEvent, PureDP
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import Neighbours, OneImage, OneOfBatch
from privpix.privacy.noise import RNG, add_laplace, gaussian, is_secure, laplace


def pca_components(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean (s,) and the top-d principal axes (s, d) of rows ``x`` (n, s) (see :func:`batch_pca`)."""
    mean, e = batch_pca(x[None], d)
    return mean[0], e[0]


def batch_pca(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Means (B, s) and top-d principal axes (B, s, d) of B stacked batches ``x`` (B, n, s), never forming an
    s×s covariance: the eigenvectors u of the n×n Gram matrix of the centred rows give the axes Xᵀu/σ.
    When d exceeds the n − 1 axes a batch spans, the extra axes would carry zero coefficients for its images
    (the paper's zero-eigenvalue eigenvectors), so they are zero columns here."""
    mean = x.mean(axis=1, keepdims=True)
    xc = x - mean
    if x.shape[1] > x.shape[2]:  # more images than pixels: the s×s scatter is the smaller problem
        vals, vecs = np.linalg.eigh(xc.transpose(0, 2, 1) @ xc)
        k = min(d, x.shape[2])
        e = np.zeros((x.shape[0], x.shape[2], d))
        e[:, :, :k] = vecs[:, :, ::-1][:, :, :k]
        return mean[:, 0], e
    vals, vecs = np.linalg.eigh(xc @ xc.transpose(0, 2, 1))  # ascending
    k = min(d, x.shape[1])
    vals, vecs = vals[:, ::-1][:, :k], vecs[:, :, ::-1][:, :, :k]
    sigma = np.sqrt(np.clip(vals, 0, None))
    tol = sigma[:, :1] * 1e-9 + 1e-300
    keep = sigma > tol  # axes with (numerically) zero variance are left as zero columns
    axes = xc.transpose(0, 2, 1) @ vecs / np.where(keep, sigma, 1.0)[:, None, :]
    axes *= keep[:, None, :]
    e = np.zeros((x.shape[0], x.shape[2], d))
    e[:, :, :k] = axes
    return mean[:, 0], e


# The secure mode's lattice for the noisy coefficients (--secure): fine next to any noise scale used.
SECURE_GRID = 2.0**-16


@register
class PCAInverse(ImageMechanism):
    """Zhang et al. 2022: PCA, Laplace per reduced attribute, regularised PCA inverse; see the module docstring."""

    name = "pca-inverse"
    summary = "PCA → Laplace per coefficient → regularised PCA inverse (Zhang et al. 2022); basis=public|dp is DP"
    about = About(
        paper="Zhang et al. 2022",
        guarantee_model="central-dp",
        soundness="basis=private (paper): NOT DP; basis=public: ε-DP per image; basis=dp: (ε+ε_b, δ)-DP per image",
        uses_delta=True,
        # Only the DP basis is a Gaussian mechanism; the others refuse a δ they would leave unused.
        delta_only_if=("basis", "dp"),
        use="paper",
    )
    d: int = param(20, "number of principal components kept", minimum=1)
    batch: int = param(100, "images per PCA for basis=private|dp (paper: 100 MNIST, 300 faces)", minimum=2)
    basis: str = param("private", "private (paper) | public | dp", choices=("private", "public", "dp"))
    public: str = param("", "NAME[:SPLIT] of public images for basis=public (or call fit())")
    coef_bound: float = param(0.0, "L2 clip of the coefficient vector (0: automatic, see docs)", minimum=0.0)
    basis_epsilon: float = param(0.5, "ε of the DP basis (basis=dp, classic Gaussian: ≤ 1)", minimum=1e-9)
    lambda_inv: float = param(1e-6, "regulariser λ of the PCA inverse (eq. 13)", minimum=0.0)
    clip: bool = param(True, "clip the release to [0, 1]")
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def _check(self) -> None:
        if self.basis == "dp":
            if not 0 < self.delta < 1:
                raise ParameterError("pca-inverse: basis=dp needs a delta in (0, 1) for the Gaussian mechanism")
            if self.basis_epsilon > 1:
                raise ParameterError("pca-inverse: basis_epsilon must be <= 1 (classic Gaussian mechanism)")
        elif self.delta:
            raise ParameterError(f"pca-inverse: delta is only used by basis=dp, not basis={self.basis}")

    # Learned by fit() for basis=public: (mean, components, coefficient bound), the shape it was fitted at, and
    # the (d, coef_bound) it was fitted with (a changed parameter needs a new fit).
    public_fit_: tuple[np.ndarray, np.ndarray, float] | None = None
    public_shape_: tuple[int, int, int] | None = None
    fitted_with_: tuple[int, float] | None = None

    def capabilities(self) -> Capabilities:
        if self.basis == "public":
            return Capabilities(
                fits_on="public",
                public_data=self.public or None,
                fixed_shape=self.public_shape_ if self.is_fitted else None,
                public_digests=self._public_digests,
                **self._secure(),
            )
        # basis=private|dp learn their basis per batch inside the release: nothing to fit beforehand.
        return Capabilities(batch_size=self.batch, **self._secure())

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """The paper's batches, the public basis (fitted on the built-in digits' train half, released on test
        digits: a public set must not hold the private images) and the DP basis."""
        from privpix.data import load_dataset

        private = load_dataset("builtin-mnist:test").subset(np.arange(24))
        assert isinstance(private, ImageSet)  # the built-in digits are images
        return [
            ConformanceCase({"batch": 8, "d": 4}),
            ConformanceCase({"basis": "public", "public": "builtin-mnist:train", "d": 4}, private),
            ConformanceCase({"basis": "dp", "batch": 8, "d": 4, "delta": 1e-5}),
        ]

    @property
    def is_fitted(self) -> bool:
        return self.basis != "public" or (
            self.public_fit_ is not None and self.fitted_with_ == (self.d, self.coef_bound)
        )

    # ---------------------------------------------------------------------------------------- fitting

    def fit(self, data: ImageSet | RecordSet | None = None, *, seed: int | None = None) -> Self:
        """For ``basis=public``: learn the mean, the components and the coefficient bound from public images
        (``data``, or the ``public`` dataset parameter). Other bases learn nothing here."""
        self._validate()
        if self.basis != "public":
            return self
        if data is None:
            if not self.public:
                raise ParameterError(
                    "pca-inverse: basis=public needs public images: pass --param public=NAME:SPLIT or call fit()"
                )
            from privpix.data import load_dataset

            data = load_dataset(self.public)
            if not isinstance(data, ImageSet):
                raise ParameterError(f"public={self.public}: holds records, not images")
        elif not isinstance(data, ImageSet):
            raise ParameterError(f"pca-inverse: basis=public fits on public images, not {type(data).__name__}")
        x = data.flat().astype(np.float64)
        if x.max() > 1.0:
            x = x / 255.0
        mean, e = pca_components(x, self.d)
        norms = np.linalg.norm((x - mean) @ e, axis=1)
        bound = self.coef_bound or float(np.quantile(norms, 0.99))
        self.public_fit_ = (mean, e, max(bound, 1e-12))
        self.public_shape_ = data.shape
        self._public_digests = image_digests(data)
        self.fitted_with_ = (self.d, self.coef_bound)
        return self

    # -------------------------------------------------------------------------------------- guarantee

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        if self.basis == "private":
            return Guarantee(
                model="central-dp",
                epsilon=self.epsilon,
                unit="one reduced attribute of one image",
                per_image_epsilon=None,
                sound=False,
                caveats=(
                    "the PCA mean and components are computed on the private images and published implicitly",
                    "each attribute's noise scale is its observed range (max - min) in the batch: data-derived",
                    f"noise is added per attribute with ε each: one image's d = {self.d} attributes spend d·ε = "
                    f"{self.d * self.epsilon:g} even if the rest held",
                    "not ε-DP as Zhang et al. 2022 claim; ε is a noise knob. basis=public or basis=dp is the sound "
                    "variant",
                ),
            )
        caveat = "each image's coefficient vector is clipped to L2 norm coef_bound before noise, so outliers are shrunk"
        if self.basis == "public":
            return Guarantee(
                model="central-dp",
                epsilon=self.epsilon,
                unit=self.neighbours().wording(),
                per_image_epsilon=self.epsilon,
                sound=True,
                caveats=(
                    caveat,
                    f"mean and components come from public data ({self.public or 'given to fit()'}), which is "
                    "not protected",
                ),
            )
        total = self.epsilon + self.basis_epsilon
        return Guarantee(
            model="central-dp",
            epsilon=total,
            delta=self.delta,
            unit=self.neighbours().wording(),
            per_image_epsilon=total,
            sound=True,
            caveats=(
                caveat,
                f"ε = {self.epsilon:g} for the image's coefficients + {self.basis_epsilon:g} for the DP basis of its "
                f"batch of {self.batch} (Gaussian mechanism, δ = {self.delta:g})",
            ),
        )

    def neighbours(self) -> Neighbours:
        # A private or DP basis makes every released image depend on the whole batch.
        return OneImage() if self.basis == "public" else OneOfBatch(self.batch)

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """basis=public: one Laplace release of the clipped coefficients (ε: L1 sensitivity over the scale,
        dominated by the one-dimensional Laplace pair; pure ε for the secure mode's lattice Laplace). basis=dp:
        that, and the Gaussian basis of the image's batch (noise multiplier √(2 ln(1.25/δ)) / basis_epsilon: the
        Frobenius sensitivity 2r² over σ; the symmetric noise draws each entry once). One image is the unit, so
        the audit tests the same noise. basis=private: nothing can be charged; the paper's ε is per reduced
        attribute, and the most its reading could promise for one image, d·ε, is what an audit tests."""
        guarantee = self._guarantee(shape_of(data))
        if self.basis == "private":
            return Claim(guarantee, unit_claim=(self.d * self.epsilon, 0.0))
        noise: list[NoiseEvent] = [LaplaceNoise(self.epsilon)]
        if self.basis == "dp":
            noise.append(GaussianNoise(math.sqrt(2 * math.log(1.25 / self.delta)) / self.basis_epsilon))
        events = [PureDP(self.epsilon), *noise[1:]] if secure else noise
        return Claim(guarantee, tuple(events), tuple(noise))

    def _secure(self) -> dict[str, Any]:
        """Capabilities.secure: the DP basis's Gaussian is drawn in floating point; the Laplace coefficients are
        exact with --secure."""
        if self.basis != "dp":
            return {}
        why = "basis=dp draws its Gaussian basis noise in floating point (no exact sampler); basis=public is exact"
        return {"secure": None, "not_secure": why}

    # ------------------------------------------------------------------------------------- privatize

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        n = len(x)
        flat = x.reshape(n, -1)
        out = np.empty_like(flat)
        if self.basis == "public":
            assert self.public_fit_ is not None  # release() refuses an unfitted public basis
            mean, e, bound = self.public_fit_
            if e.shape[0] != flat.shape[1]:
                raise ParameterError(
                    f"pca-inverse: images have {flat.shape[1]} values but the public basis was fitted on "
                    f"{e.shape[0]} ({self.public_shape_}); resize them to match"
                )
            out[:] = self._noisy_inverse(flat, mean, e, bound, rng)
        elif self.basis == "private":
            full = (n // self.batch) * self.batch  # equal batches in one stacked call, then the remainder
            if full:
                out[:full] = self._paper_batches(flat[:full].reshape(-1, self.batch, flat.shape[1]), rng).reshape(
                    full, -1
                )
            if full < n:
                out[full:] = self._paper_batches(flat[None, full:], rng)[0]
        else:
            for s in range(0, n, self.batch):
                chunk = flat[s : s + self.batch]
                mean, e = self._dp_basis(chunk, rng)
                bound = self.coef_bound or math.sqrt(chunk.shape[1]) / 2
                out[s : s + len(chunk)] = self._noisy_inverse(chunk, mean, e, bound, rng)
        out = out.reshape(x.shape)
        return np.clip(out, 0.0, 1.0) if self.clip else out

    def _inverse(self, coef: np.ndarray, mean: np.ndarray, e: np.ndarray) -> np.ndarray:
        return coef @ e.T / (1.0 + self.lambda_inv) + mean  # eqs. 13–14 in closed form

    def _paper_batches(self, chunks: np.ndarray, rng: RNG) -> np.ndarray:
        """(B, n, s) batches → released (B, n, s): eqs. 1–14 with one PCA per batch."""
        mean, e = batch_pca(chunks, self.d)
        coef = (chunks - mean[:, None, :]) @ e  # (B, n, d)
        sens = coef.max(axis=1, keepdims=True) - coef.min(axis=1, keepdims=True)  # eq. 10, observed range
        noisy = coef + laplace(rng, 1.0, coef.shape) * (sens / self.epsilon)
        return noisy @ e.transpose(0, 2, 1) / (1.0 + self.lambda_inv) + mean[:, None, :]

    def _noisy_inverse(self, chunk, mean, e, bound, rng) -> np.ndarray:
        coef = (chunk - mean) @ e
        norm = np.linalg.norm(coef, axis=1, keepdims=True)
        coef = coef * np.minimum(1.0, bound / np.maximum(norm, 1e-300))
        if is_secure(rng):
            # The exact lattice sampler is private only for values on its lattice: snap them, and count the snapping
            # (at most half a step per coefficient) in the L1 sensitivity.
            scale = (2.0 * math.sqrt(self.d) * bound + self.d * SECURE_GRID) / self.epsilon
            return self._inverse(add_laplace(coef, scale, rng, grid=SECURE_GRID), mean, e)
        scale = 2.0 * math.sqrt(self.d) * bound / self.epsilon  # L1 diameter of the clipped ball / ε
        return self._inverse(coef + laplace(rng, scale, coef.shape), mean, e)

    def _dp_basis(self, chunk: np.ndarray, rng: RNG) -> tuple[np.ndarray, np.ndarray]:
        s = chunk.shape[1]
        centre = np.full(s, 0.5)
        y = chunk - centre
        radius2 = s / 4.0  # ‖x − 0.5‖² ≤ s/4 for x in [0, 1]^s
        # Replacing one image changes Σ y yᵀ by at most 2·radius² in Frobenius norm.
        sigma = 2.0 * radius2 * math.sqrt(2.0 * math.log(1.25 / self.delta)) / self.basis_epsilon
        noise = gaussian(rng, sigma, (s, s))
        sym = np.triu(noise) + np.triu(noise, 1).T
        vals, vecs = np.linalg.eigh(y.T @ y + sym)
        e = vecs[:, np.argsort(vals)[::-1][: self.d]]
        return centre, e
