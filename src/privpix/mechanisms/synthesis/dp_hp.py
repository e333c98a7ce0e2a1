"""``dp-hp``: DP-HP (Vinaroz, Charusaie, Harder, Bhatti & Park, ICML 2022, "Hermite polynomial features for
private data generation"), synthetic labelled images with a sound (ε, δ) guarantee per image of the private set,
on the embed-once pipeline it shares with ``dp-merf`` (:mod:`~privpix.mechanisms.synthesis.embedding`).

The feature map (the maths, and the proof of the norm bound, are in :mod:`~privpix.mechanisms.synthesis.hermite`):

* **sum kernel** (always): k_sum(x, y) = (1/d)·Σ_j k_ℓ(x_j, y_j), the average over the d pixel values of the
  Gaussian kernel k_ℓ(s, t) = exp(−(s − t)²/(2ℓ²)) on one value, expanded by Mehler's formula into Hermite
  functions and truncated at order C: φ_sum(x) = d^(−1/2)·[ψ_0(x_j), …, ψ_C(x_j)]_j, d·(C + 1) values. It compares
  the per-class distributions of every pixel value. Defaults C = 20, ℓ = 0.5 (chosen on an MNIST validation split
  carved from the training set, docs/synthesis.md; the truncation keeps > 99.8 % of k(x, x) = 1 on [0, 1]). The
  paper's MNIST kernel, ℓ ≈ 0.07 (σ² = 0.005) at C = 100, costs five times more per training step, and at C = 20
  the narrower ℓ = 0.2 measured worse.
* **product kernel** (``prod_sets`` G > 0): Π_{j∈S} k_ℓ(x_j, y_j) on G sets S of ``prod_dims`` P pixels, each the
  tensor product of P Hermite feature vectors of order ``prod_order`` C' ((C' + 1)^P values), averaged over the
  sets. The paper draws a fresh pixel pair at every epoch and releases a new noisy embedding each time; here the G
  sets are drawn once, from the seed, before any image is read, so the whole embedding is released once.
* **random Fourier features** (``rff_features`` D' > 0): DP-MERF's features of the Gaussian kernel on the whole
  image, a global comparison the per-pixel kernels lack (a privpix addition, measured in docs/synthesis.md).

The parts are concatenated with weights: φ = [sqrt(w_sum)·φ_sum, sqrt(w_prod)·φ_prod, sqrt(w_rff)·φ_rff],
w_prod = ``prod_share`` (if G > 0), w_rff = ``rff_share`` (if D' > 0), w_sum = 1 − the others: the features of the
kernel Σ_i w_i·k_i. **‖φ(x)‖₂ ≤ 1 for every image**: each part has norm ≤ 1 for any real pixel values (Hermite
parts: a truncated sum of squares of the eigen-expansion of k(x, x) = 1; Fourier part: exactly 1), and the
weights sum to 1. Each row is also divided by max(1, ‖row‖) so floating point cannot exceed the bound. So the
pipeline's u_i has norm ≤ 1 and replacing one (image, label) pair moves the mean embedding by ≤ 2/n: the
sensitivity follows from the construction, never from the data. The paper uses the same bound (its sensitivity
2/n for the mean of the sum-kernel embedding).

Neighbouring relation, calibration, what is public, the float and secure modes: as ``dp-merf`` (replace-one, n
public; one Gaussian release with z from dp-accounting, analytic in float mode, RDP with exact discrete Gaussian
noise in secure mode). Public besides: C, ℓ, the product-kernel sets and the Fourier frequencies (their seed is in
the model file). The kernel length is a fixed default or the user's, never fitted on the private images.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

import numpy as np

from privpix.errors import ParameterError
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.mechanisms.synthesis.embedding import TRAINING as SHARED_TRAINING
from privpix.mechanisms.synthesis.embedding import (
    MeanEmbeddingSynthesizer,
)

FORMAT = "privpix-dp-hp-1"
FEATURES = ("order", "length_scale", "prod_sets", "prod_dims", "prod_order", "prod_share", "rff_features",
            "rff_length_scale", "rff_share")  # fmt: skip
TRAINING = (*FEATURES, *SHARED_TRAINING)
MAX_FEATURES = 5_000_000  # D above this would not fit a training batch in memory


def feature_width(d: int, order: int, prod_sets: int, prod_dims: int, prod_order: int, rff_features: int) -> int:
    """D = d·(C + 1) + G·(C' + 1)^P + D' for images of d values."""
    return d * (order + 1) + prod_sets * (prod_order + 1) ** prod_dims + rff_features


def shares(prod_sets: int, prod_share: float, rff_features: int, rff_share: float) -> tuple[float, float, float]:
    """The norm² weights (w_sum, w_prod, w_rff) of the three parts; a part that is off gets 0."""
    w_prod = prod_share if prod_sets else 0.0
    w_rff = rff_share if rff_features else 0.0
    return 1.0 - w_prod - w_rff, w_prod, w_rff


def draw_structure(d: int, prod_sets: int, prod_dims: int, rff_features: int, rff_length_scale: float,
                   seed: int) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """The random parts of the feature map, from ``seed`` only: the G product-kernel pixel sets (G, P) (P distinct
    pixels each) and the Fourier frequencies (d, D'/2) float32, or None."""
    from privpix.mechanisms.synthesis.dp_merf import frequencies

    rng = np.random.default_rng(seed)
    sets = np.array([rng.choice(d, prod_dims, replace=False) for _ in range(prod_sets)], dtype=np.int64)
    omega = None
    if rff_features:
        omega = frequencies(d, rff_features, rff_length_scale, int(rng.integers(0, 2**62)))
    return sets.reshape(prod_sets, prod_dims), omega


def featurizer(rho: float, order: int, sets: np.ndarray, prod_order: int, omega: np.ndarray | None,
               weights: tuple[float, float, float]):  # fmt: skip
    """φ as a torch callable on rows (m, d) float32 → (m, D): the weighted parts, each row projected into the
    unit ball (a no-op up to rounding, since the parts' bound already gives ‖φ‖ ≤ 1)."""
    from privpix.mechanisms.synthesis import hermite, merf_net

    torch = merf_net.torch
    w_sum, w_prod, w_rff = (math.sqrt(w) for w in weights)
    om = None if omega is None else torch.from_numpy(np.ascontiguousarray(omega, dtype=np.float32))

    def phi(x):
        parts = [hermite.sum_features(x, rho, order) * w_sum]
        if len(sets):
            parts.append(hermite.product_features(x, sets, rho, prod_order) * w_prod)
        if om is not None:
            parts.append(merf_net.features(x, om) * w_rff)
        return hermite.project(torch.cat(parts, dim=1) if len(parts) > 1 else parts[0])

    return phi


@register
class DPHP(MeanEmbeddingSynthesizer, params_before="n_classes"):
    """DP-HP synthetic images: one Gaussian release of a Hermite-polynomial mean embedding of the labelled private
    set (sum kernel over pixels, optionally product kernels on fixed pixel sets and DP-MERF's Fourier features),
    then a generator trained on it. See the module docstring for the features and their norm bound, and
    :mod:`~privpix.mechanisms.synthesis.embedding` for the release, the relation (replace-one, n public) and the
    calibration. ``model=FILE`` loads a fitted model; ``epsilon`` and ``delta`` must then be the file's."""

    name = "dp-hp"
    summary = "DP-HP (Vinaroz et al. 2022): noisy Hermite-feature mean embedding + generator; (ε, δ)-DP per image"
    about = replace(
        MeanEmbeddingSynthesizer.about,
        paper="Vinaroz et al. 2022 (DP-HP)",
        soundness="sound (ε, δ)-DP per image (replace-one, n public); σ from dp-accounting",
    )
    order: int = param(20, "C: Hermite order of the per-pixel (sum) kernel; D = d·(C + 1) features", minimum=1)
    length_scale: float = param(
        0.5,
        "ℓ of the per-pixel Gaussian kernel exp(−(s − t)²/(2ℓ²)), pixel values "
        "in [0, 1] (the Mehler ρ solves ρ/(1 − ρ²) = 1/(2ℓ²)); public, never from data",
        minimum=1e-3,
    )
    prod_sets: int = param(0, "G: product kernels on G fixed random sets of prod_dims pixels (0: none)", minimum=0)
    prod_dims: int = param(2, "P: pixels per product-kernel set", minimum=1)
    prod_order: int = param(10, "C': Hermite order of the product kernels; (C' + 1)^P features per set", minimum=1)
    prod_share: float = param(0.2, "norm² share of the product kernels (when prod_sets > 0)", minimum=0.0)
    rff_features: int = param(
        0, "D': DP-MERF's random Fourier features of the whole image added (even; 0: none)", minimum=0
    )
    rff_length_scale: float = param(
        0.0, "ℓ of the Fourier features' Gaussian kernel; 0: dp-merf's default", minimum=0.0
    )
    rff_share: float = param(0.5, "norm² share of the Fourier features (when rff_features > 0)", minimum=0.0)

    training: ClassVar[dict[str, str]] = {k: k for k in TRAINING}
    FORMAT = FORMAT
    features_word = "Hermite-feature"
    norm_claim = "has norm at most 1"
    conformance_tiny: ClassVar[dict] = {"order": 4, "epochs": 1, "batch_size": 20, "width": 16, "channels": 4}
    sets_: np.ndarray | None = None  # the product-kernel pixel sets of the last fit
    omega_: np.ndarray | None = None  # the Fourier frequencies of the last fit (None without them)

    def _check_features(self) -> None:
        if self.rff_features % 2:
            raise ParameterError(f"dp-hp: rff_features must be even (cos and sin per frequency), got "
                                 f"{self.rff_features}")  # fmt: skip
        w_sum, _, _ = shares(self.prod_sets, self.prod_share, self.rff_features, self.rff_share)
        if not w_sum > 0:
            raise ParameterError(
                f"dp-hp: prod_share + rff_share must leave a positive share to the sum kernel, got "
                f"prod_share={self.prod_share}, rff_share={self.rff_share}"
            )

    def _check_shape(self, shape: tuple[int, int, int]) -> None:
        super()._check_shape(shape)
        d = int(np.prod(shape))
        if self.prod_sets and self.prod_dims > d:
            raise ParameterError(f"dp-hp: prod_dims={self.prod_dims} exceeds the {d} values of an image")
        width = self._feature_width({"shape": list(shape), **self.get_params()})
        if width > MAX_FEATURES:
            raise ParameterError(
                f"dp-hp: {width} features per image (order, prod_sets, prod_dims, prod_order, rff_features) is "
                f"more than {MAX_FEATURES}; lower order or prod_order"
            )

    @property
    def rho(self) -> float:
        """The Mehler parameter of ``length_scale``."""
        from privpix.mechanisms.synthesis.hermite import rho_of

        return rho_of(self.length_scale)

    def _featurizer(self, shape, seed):
        d = int(np.prod(shape))
        self.sets_, self.omega_ = draw_structure(d, self.prod_sets, self.prod_dims, self.rff_features,
                                                 self.rff_length_scale, seed)  # fmt: skip
        weights = shares(self.prod_sets, self.prod_share, self.rff_features, self.rff_share)
        phi = featurizer(self.rho, self.order, self.sets_, self.prod_order, self.omega_, weights)
        return phi, self._feature_width({"shape": list(shape), **self.get_params()})

    @classmethod
    def _feature_width(cls, meta: dict) -> int:
        d = int(np.prod(meta["shape"]))
        return feature_width(d, int(meta["order"]), int(meta["prod_sets"]), int(meta["prod_dims"]),
                             int(meta["prod_order"]), int(meta["rff_features"]))  # fmt: skip

    def _read_model(self, path: str):
        self.sets_ = self.omega_ = None  # draw_structure(...) with the file's feature_seed rebuilds them
        return super()._read_model(path)
