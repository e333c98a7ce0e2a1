"""``dp-merf``: DP-MERF (Harder, Adamczewski & Park 2021, "DP-MERF: Differentially private mean embeddings with
random features for practical privacy-preserving data generation", AISTATS), synthetic labelled images with a
sound (ε, δ) guarantee per image of the private set.

The mechanism, as implemented here:

1. Random Fourier features of the Gaussian kernel k(x, x') = exp(−‖x − x'‖² / (2ℓ²)) (paper eq. 3; Rahimi &
   Recht 2007): D/2 frequencies ω_j ~ N(0, ℓ⁻² I) drawn independently of the data, and
   φ(x) = sqrt(2/D)·[cos(ω_jᵀx), sin(ω_jᵀx)]_j, so ‖φ(x)‖₂ = 1 for every image x, whatever its pixels.
2. Each private pair (x_i, y_i) contributes u_i = [sqrt(1 − a²)·φ(x_i) ⊗ onehot(y_i), a·onehot(y_i)]: the paper's
   label embedding φ(x) ⊗ f(y) (eq. 7), beside a share a² (``count_share``) of the unit norm spent on the label
   itself, so the same release gives the class proportions. ‖u_i‖₂ = 1 exactly.
3. The mean μ = (1/n)·Σ u_i is released once with Gaussian noise, μ̃ = μ + N(0, σ² I) (paper eq. 8), and kept as
   ``embedding_``. Everything after this is post-processing of μ̃ and costs no privacy: the DP label distribution
   p̂ (the count part divided by a, negatives set to 0, normalised), and a label-conditional generator G(z, y)
   trained to minimise ‖μ̃_φ − Σ_k p̂_k·e_k ⊗ E_z φ(G(z, k))‖² (paper eq. 9), whose images with labels drawn from
   p̂ are what a release publishes.

Neighbouring relation: **replace-one** (bounded DP). Two private sets are neighbours when they have the same size n
and differ in one (image, label) pair. Then ‖μ − μ'‖₂ = ‖u_i − u'_i‖₂ / n ≤ 2/n: the sensitivity follows from the
construction (every u_i has norm 1), never from the data, and holds for any pixel values. Replace-one is chosen
over add/remove because the mean needs n: under replace-one n is the same for neighbours and is public (it is
recorded in the model file and in the guarantee); add/remove would need a noisy n and a noisy sum, a second
budget share and a biased mean for little gain at n in the thousands. (An add/remove claim follows from this one
only through group privacy; it is not made.) Also public, i.e. assumed known and not protected: n, the image shape
(h, w, c), the number of classes K (labels must lie in 0..K-1; the classes present are never read from the data),
the kernel length ℓ (a fixed default or a rule of the image size only, see ``length_scale``) and the frequencies
(their seed is stored in the model file).

Calibration: one Gaussian mechanism with L2 sensitivity Δ = 2/n. The noise multiplier z = σ/Δ is the smallest
that makes it (ε, δ)-DP, the analytic Gaussian mechanism (Balle & Wang 2018) as Google's ``dp-accounting``
library computes it (``get_sigma_gaussian``), checked the other way with its ``get_epsilon_gaussian`` and rounded
up until that check holds (:func:`privpix.privacy.gaussian_release.analytic_noise_multiplier`). No hand formula. One
release of μ̃ is the only access to the private images.

What the default (float) mode is not: the noise is floating-point Gaussian (NumPy's sampler when seeded;
Box–Muller on OS CSPRNG bits when ``fit`` gets no seed), not an exact discrete Gaussian; the embedding is summed
in floating point (float32 features, float64 sums), so ‖u_i‖ = 1 holds up to rounding (~1e-7). ``secure=true``
is: rows rounded to a lattice, summed as integers, exact discrete Gaussian noise, z from the RDP accountant (see
:mod:`~privpix.mechanisms.synthesis.embedding`, the pipeline this shares with ``dp-hp``).
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
from privpix.mechanisms.synthesis.embedding import MeanEmbeddingSynthesizer
from privpix.privacy.gaussian_release import analytic_epsilon, analytic_noise_multiplier

FORMAT = "privpix-dp-merf-1"  # unchanged by the secure mode: a file without "secure" was fitted in float mode
# DP-MERF's published kernel for MNIST (its code's rff_sigma = 105: ω ~ N(0, I/105) on 784 pixels in [0, 1]);
# the default length scale keeps ℓ²/d at that ratio for other image sizes. A rule of the image size only.
MNIST_RFF_SIGMA2 = 105.0

# Parameters that only shape the fit (a model file records them, and they become the ones in force).
TRAINING = ("n_features", "length_scale", *SHARED_TRAINING)


# ------------------------------------------------------------------------------------------ calibration


def noise_multiplier(epsilon: float, delta: float) -> float:
    """z = σ/Δ of the (ε, δ)-DP Gaussian mechanism with L2 sensitivity Δ: dp-accounting's analytic Gaussian
    calibration, rounded up until dp-accounting's own ε for z is at most ``epsilon`` (the float mode's)."""
    return analytic_noise_multiplier(epsilon, delta)


def epsilon_of(z: float, delta: float) -> float:
    """ε of the Gaussian mechanism with noise multiplier ``z`` at ``delta`` (dp-accounting, analytic)."""
    return analytic_epsilon(z, delta)


# ------------------------------------------------------------------------------------------ features


def default_length_scale(dim: int) -> float:
    """ℓ = sqrt(105·dim/784): DP-MERF's MNIST kernel, scaled with the number of values per image (no data)."""
    return math.sqrt(MNIST_RFF_SIGMA2 * dim / 784.0)


def frequencies(dim: int, n_features: int, length_scale: float, seed: int) -> np.ndarray:
    """(dim, D/2) float32 frequencies ω ~ N(0, ℓ⁻² I), drawn from ``seed`` (data-independent)."""
    scale = length_scale or default_length_scale(dim)
    omega = np.random.default_rng(seed).standard_normal((dim, n_features // 2)) / scale
    return omega.astype(np.float32)


def feature_map(x: np.ndarray, omega: np.ndarray) -> np.ndarray:
    """φ(x) (m, D) float32 for rows x (m, dim) in the pixel order of ``ImageSet.flat()``; unit L2 norm per row."""
    from privpix.mechanisms.synthesis import merf_net

    t = merf_net.torch
    with t.no_grad():
        return merf_net.features(t.from_numpy(np.ascontiguousarray(x, np.float32)), t.from_numpy(omega)).numpy()


# ------------------------------------------------------------------------------------------ mechanism


@register
class DPMERF(MeanEmbeddingSynthesizer, params_before="n_classes"):
    """DP-MERF synthetic images: one Gaussian release of a random-feature mean embedding of the labelled private
    set, then a generator trained on it (see the module docstring for the construction, the replace-one relation,
    what is public and the calibration). ``fit`` reads the private images once; a release draws new images and
    their labels from the generator and the DP label distribution, never from the input images.

    ``model=FILE`` loads a fitted model (``save_model``): generator weights, the noisy embedding and the (ε, δ, n)
    it was calibrated for; ``epsilon`` and ``delta`` must then be the file's."""

    name = "dp-merf"
    summary = "DP-MERF (Harder et al. 2021): noisy random-feature mean embedding + generator; (ε, δ)-DP per image"
    about = replace(
        MeanEmbeddingSynthesizer.about,
        paper="Harder et al. 2021 (DP-MERF)",
        soundness="sound (ε, δ)-DP per image (replace-one, n public); σ from dp-accounting",
        recommended_for="a small labelled set, one class, or an unlabelled folder",
        recommended_on=("builtin-mnist",),
    )
    n_features: int = param(10000, "D: random Fourier features (even; D/2 frequencies)", minimum=2)
    length_scale: float = param(
        0.0,
        "kernel length ℓ in [0, 1] pixel units; 0: sqrt(105·d/784) for d values "
        "per image (DP-MERF's MNIST kernel), never from data",
        minimum=0.0,
    )

    training: ClassVar[dict[str, str]] = {k: k for k in TRAINING}
    FORMAT = FORMAT
    seed_key = "omega_seed"
    features_word = "random-feature"
    norm_claim = "has norm 1"
    reduce = "matmul"  # the original reduction: seeded fits reproduce those made before the shared base
    conformance_tiny: ClassVar[dict] = {"n_features": 64, "epochs": 1, "batch_size": 20, "width": 16, "channels": 4}
    omega_: np.ndarray | None = None  # the frequencies of the last fit (None after loading a file)

    def _check_features(self) -> None:
        if self.n_features % 2:
            raise ParameterError(f"dp-merf: n_features must be even (cos and sin per frequency), got {self.n_features}")

    def _featurizer(self, shape, seed):
        from privpix.mechanisms.synthesis import merf_net

        h, w, c = shape
        self.omega_ = frequencies(h * w * c, self.n_features, self.length_scale, seed)
        return merf_net.featurizer(self.omega_), self.n_features

    @classmethod
    def _feature_width(cls, meta: dict) -> int:
        return int(meta["n_features"])

    def _read_model(self, path: str):
        self.omega_ = None  # frequencies(...) with the file's omega_seed rebuilds them when needed
        return super()._read_model(path)


def load_model(path):
    """(generator, noisy embedding, meta) from a file written by :meth:`DPMERF.save_model`; weights only."""
    return DPMERF.load_model(path)
