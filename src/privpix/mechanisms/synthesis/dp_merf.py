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
up until that check holds. No hand formula. One release of μ̃ is the only access to the private images.

What it is not: the noise is floating-point Gaussian (NumPy's sampler when seeded; Box–Muller on OS CSPRNG bits
when ``fit`` gets no seed), not an exact discrete Gaussian on a fixed-point sum; the embedding is summed in
floating point (float32 features, float64 sums), so ‖u_i‖ = 1 holds up to rounding (~1e-7).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import ClassVar

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.guarantees import Guarantee
from privpix.mechanisms.base import Capabilities, ConformanceCase, Param, register
from privpix.mechanisms.trained import TrainedModel
from privpix.neighbours import Neighbours, OneOfBatch
from privpix.noise import RNG, gaussian, make_rng, torch_seed

FORMAT = "privpix-dp-merf-1"
UNIT = "one image and its label of the private set"
# DP-MERF's published kernel for MNIST (its code's rff_sigma = 105: ω ~ N(0, I/105) on 784 pixels in [0, 1]);
# the default length scale keeps ℓ²/d at that ratio for other image sizes. A rule of the image size only.
MNIST_RFF_SIGMA2 = 105.0
ACCOUNTANT = "dp-accounting analytic Gaussian mechanism (get_sigma_gaussian / get_epsilon_gaussian)"

# Parameters that only shape the fit (a model file records them, and they become the ones in force).
TRAINING = (
    "n_features",
    "length_scale",
    "n_classes",
    "count_share",
    "generator",
    "code_dim",
    "width",
    "channels",
    "epochs",
    "batch_size",
    "lr",
    "lr_decay",
)


# ------------------------------------------------------------------------------------------ calibration


def noise_multiplier(epsilon: float, delta: float) -> float:
    """z = σ/Δ of the (ε, δ)-DP Gaussian mechanism with L2 sensitivity Δ: dp-accounting's analytic Gaussian
    calibration, rounded up until dp-accounting's own ε for z is at most ``epsilon``."""
    import dp_accounting

    if not (epsilon > 0 and 0 < delta < 1):
        raise ParameterError(f"the Gaussian mechanism needs epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")
    z = float(dp_accounting.get_sigma_gaussian(epsilon, delta))
    while dp_accounting.get_epsilon_gaussian(z, delta) > epsilon:
        z *= 1 + 1e-12
    return z


def epsilon_of(z: float, delta: float) -> float:
    """ε of the Gaussian mechanism with noise multiplier ``z`` at ``delta`` (dp-accounting, analytic)."""
    import dp_accounting

    return float(dp_accounting.get_epsilon_gaussian(z, delta))


def sensitivity(n: int) -> float:
    """L2 sensitivity of the mean of n unit vectors under replace-one: 2/n."""
    return 2.0 / n


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


def split_embedding(embedding: np.ndarray, n_classes: int, count_share: float) -> tuple[np.ndarray, np.ndarray]:
    """The released vector read back (post-processing): the class-wise feature means (K, D), i.e. row k ≈
    P(y = k)·E[φ(x) | y = k], and the DP label distribution p̂ (K,) (noisy proportions, negatives set to 0,
    normalised; uniform if none is positive)."""
    k = n_classes
    emb = np.asarray(embedding, dtype=np.float64)
    means = emb[:-k].reshape(k, -1) / math.sqrt(1.0 - count_share)
    props = np.maximum(emb[-k:] / math.sqrt(count_share), 0.0)
    probs = props / props.sum() if props.sum() > 0 else np.full(k, 1.0 / k)
    return means, probs


# ------------------------------------------------------------------------------------------ mechanism


@register
class DPMERF(TrainedModel):
    """DP-MERF synthetic images: one Gaussian release of a random-feature mean embedding of the labelled private
    set, then a generator trained on it (see the module docstring for the construction, the replace-one relation,
    what is public and the calibration). ``fit`` reads the private images once; a release draws n new images and
    their labels from the generator and the DP label distribution, never from the input images.

    ``model=FILE`` loads a fitted model (``save_model``): generator weights, the noisy embedding and the (ε, δ, n)
    it was calibrated for; ``epsilon`` and ``delta`` must then be the file's."""

    name = "dp-merf"
    summary = "DP-MERF (Harder et al. 2021): noisy random-feature mean embedding + generator; (ε, δ)-DP per image"
    paper = "Harder et al. 2021 (DP-MERF)"
    guarantee_model = "central-dp"
    soundness = "sound (ε, δ)-DP per image (replace-one, n public); σ from dp-accounting"
    uses_epsilon = True
    uses_delta = True
    params = (
        Param("model", str, "", "fitted model file; empty: fit() fits on the private images it is given"),
        Param("n_features", int, 10000, "D: random Fourier features (even; D/2 frequencies)", minimum=2),
        Param("length_scale", float, 0.0, "kernel length ℓ in [0, 1] pixel units; 0: sqrt(105·d/784) for d values "
              "per image (DP-MERF's MNIST kernel), never from data", minimum=0.0),
        Param("n_classes", int, 10, "K, public: labels must lie in 0..K-1", minimum=2),
        Param("count_share", float, 0.05, "share a² of each image's unit-norm contribution spent on its label "
              "(the DP class proportions); the rest on φ ⊗ y", minimum=1e-6),
        Param("generator", str, "conv", "conv (DP-MERF's ConvCondGen; h, w divisible by 4) or mlp",
              choices=("conv", "mlp")),
        Param("code_dim", int, 5, "generator: latent code size", minimum=1),
        Param("width", int, 200, "generator: hidden width of the first layer", minimum=1),
        Param("channels", int, 16, "generator (conv): feature maps before upsampling", minimum=2),
        Param("epochs", int, 5, "training: epochs of ceil(n / batch_size) generator steps", minimum=1),
        Param("batch_size", int, 500, "training: generated images per step (balanced over the K classes)",
              minimum=1),
        Param("lr", float, 0.01, "training: Adam learning rate", minimum=1e-12),
        Param("lr_decay", float, 0.9, "training: learning-rate factor after each epoch", minimum=1e-6),
    )  # fmt: skip

    training: ClassVar[dict[str, str]] = {k: k for k in TRAINING}
    # The fitted generator is ``model_`` (TrainedModel); beside it:
    embedding_: np.ndarray | None = None  # the released noisy embedding μ̃ (K·D + K,)
    label_probs_: np.ndarray | None = None
    omega_: np.ndarray | None = None

    def _check(self) -> None:
        if self.n_features % 2:
            raise ParameterError(f"dp-merf: n_features must be even (cos and sin per frequency), got {self.n_features}")
        if not self.count_share < 1:
            raise ParameterError(f"dp-merf: count_share must be in (0, 1), got {self.count_share}")
        if self.lr_decay > 1:
            raise ParameterError(f"dp-merf: lr_decay must be <= 1, got {self.lr_decay}")

    def _check_delta(self) -> None:
        if not self.delta > 0:
            raise ParameterError("dp-merf: the Gaussian mechanism needs a delta in (0, 1), e.g. --delta 1e-5")

    def _training(self) -> dict:
        # ε and δ calibrate the fit: changing either after it makes the mechanism unfitted.
        return {"epsilon": self.epsilon, "delta": self.delta, **super()._training()}

    def capabilities(self) -> Capabilities:
        shape = tuple(self.meta_["shape"]) if self.meta_ is not None and self.is_fitted else None
        return Capabilities(
            fits_on=self._fits_on(),
            fixed_shape=shape,
            needs_labels=True,
            output="synthetic-images",
            noise_family="gaussian",
        )

    @property
    def is_fitted(self) -> bool:
        # A model file is fitted only for the (ε, δ) it was calibrated for.
        return super().is_fitted and (not self.model or self._file_claim() == (self.epsilon, self.delta))

    def _file_claim(self) -> tuple[float, float]:
        assert self.meta_ is not None
        return self.meta_["epsilon"], self.meta_["delta"]

    def neighbours(self) -> Neighbours:
        """Replace-one on the whole private set: two sets of n labelled images that differ in one."""
        return OneOfBatch(None)

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A tiny fit (D = 64, one epoch) on 60 built-in digits, and the same written to a model file and loaded."""
        from privpix.data import load_dataset

        data = load_dataset("builtin-mnist").subset(np.arange(0, 5000, 84))
        tiny = {"epsilon": 1.0, "delta": 1e-5, "n_features": 64, "epochs": 1, "batch_size": 20, "width": 16,
                "channels": 4}  # fmt: skip
        path = cls(**tiny).fit(data, seed=0).save_model(workdir / "dp-merf.pt")
        loaded = {"epsilon": 1.0, "delta": 1e-5, "model": str(path)}
        return [ConformanceCase(tiny, data), ConformanceCase(loaded, data.subset(np.arange(12)))]

    # -------------------------------------------------------------------------------------- fitting

    def fit(self, data: ImageSet | None = None, *, seed: int | None = None) -> DPMERF:
        """With ``model``: load the file. Without: release the noisy embedding of ``data`` (labelled images) once
        and train the generator on it. ``seed`` seeds the frequencies, the noise and the training (reproducible:
        whoever knows the seed can remove the noise); ``None`` draws the noise from the OS CSPRNG and the rest
        from OS entropy, as a real release should."""
        self._validate()
        self._check_delta()
        super().fit(data, seed=seed)
        if self.model and self._file_claim() != (self.epsilon, self.delta):
            eps, delta = self._file_claim()
            raise ParameterError(
                f"{self.name}: {self.model} was calibrated for ε={eps:g}, δ={delta:g}; give "
                f"--epsilon {eps:g} --delta {delta:g} (a release states the file's guarantee)"
            )
        return self

    def _train(self, data, seed: int | None):
        if not isinstance(data, ImageSet) or data.labels is None:
            raise ParameterError(f"{self.name}: fit() needs labelled images (the embedding is φ(x) ⊗ y)")
        labels = np.asarray(data.labels)
        n, (h, w, c) = len(data), data.shape
        if n < 2:
            raise ParameterError(f"{self.name}: needs at least 2 private images, got {n}")
        if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= self.n_classes:
            raise ParameterError(
                f"{self.name}: labels must be integers in 0..{self.n_classes - 1} (n_classes={self.n_classes}, "
                "public); set n_classes to the number of classes"
            )
        if self.generator == "conv" and (h % 4 or w % 4):
            raise ParameterError(
                f"{self.name}: the conv generator needs h and w divisible by 4, got {h}x{w}; use generator=mlp "
                "or resize (--size 28x28)"
            )
        from privpix.mechanisms.synthesis import merf_net

        seeded = seed is not None
        rng = make_rng(int(seed)) if seeded else None
        t0 = time.perf_counter()
        omega_seed = int(rng.integers(0, 2**62)) if seeded else int.from_bytes(os.urandom(8), "little") >> 2
        omega = frequencies(h * w * c, self.n_features, self.length_scale, omega_seed)
        clean = merf_net.mean_embedding(data.flat(), labels, omega, self.n_classes, self.count_share)
        z = noise_multiplier(self.epsilon, self.delta)
        sigma = z * sensitivity(n)
        # The one release of the private set: every later step reads only `noisy`.
        noisy = clean + gaussian(rng if seeded else make_rng(secure=True), sigma, clean.shape)
        del clean
        embed_seconds = time.perf_counter() - t0
        means, probs = split_embedding(noisy, self.n_classes, self.count_share)
        t_seed = torch_seed(rng)
        meta = {
            "kind": self.name,
            "shape": [h, w, c],
            "epsilon": self.epsilon,
            "delta": self.delta,
            "n": n,
            **{k: getattr(self, k) for k in TRAINING},
            "omega_seed": omega_seed,
            "noise_multiplier": z,
            "sigma": sigma,
            "accountant": ACCOUNTANT,
            "seed": None if not seeded else int(seed),
            "noise_rng": "seeded NumPy Generator" if seeded else "OS CSPRNG (privpix SecureRandom)",
            "fitted_on": f"{data.source or 'the given images'} ({n} images)",
        }
        gen = merf_net.build_generator(meta, t_seed)
        t1 = time.perf_counter()
        history = merf_net.train_generator(
            gen,
            omega,
            means,
            probs,
            steps_per_epoch=math.ceil(n / self.batch_size),
            epochs=self.epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            lr_decay=self.lr_decay,
            seed=t_seed + 1,
        )
        meta.update(history=history, embed_seconds=round(embed_seconds, 3),
                    train_seconds=round(time.perf_counter() - t1, 3))  # fmt: skip
        self.embedding_, self.label_probs_, self.omega_ = noisy, probs, omega
        return gen, meta

    def _read_model(self, path: str):
        gen, embedding, meta = load_model(path)
        self.embedding_ = embedding
        self.label_probs_ = split_embedding(embedding, meta["n_classes"], meta["count_share"])[1]
        self.omega_ = None  # frequencies(...) with the file's omega_seed rebuilds them when needed
        return gen, meta

    def _write_model(self, path: Path) -> Path:
        """The generator weights, the noisy embedding, the guarantee's ε, δ and n, every training parameter."""
        from privpix.mechanisms.neural.modelfile import save_model_file

        gen, meta = self._load()
        torch = _torch()
        state = {f"generator.{k}": v for k, v in gen.state_dict().items()}
        state["embedding"] = torch.from_numpy(np.asarray(self.embedding_, dtype=np.float64))
        return save_model_file(path, state, {"format": FORMAT, **meta})

    # -------------------------------------------------------------------------------------- releasing

    def guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """(ε, δ)-DP for one image and its label of the private set replaced (central DP, per image ε = ε)."""
        self._check_delta()
        z = noise_multiplier(self.epsilon, self.delta)
        caveats = [
            "replace-one neighbours: private sets of the same size n that differ in one (image, label) pair; n, "
            "the image shape, the K classes and the kernel are public. Adding or removing an image is covered "
            "only through group privacy (not claimed)",
            f"one Gaussian release of the mean random-feature embedding (each image's part has norm 1, so the "
            f"sensitivity is 2/n whatever the pixels); noise multiplier σ·n/2 = {z:.6g} from the {ACCOUNTANT}",
            "the synthetic images and labels are post-processing of that one release: generating more costs no ε",
            "floating-point Gaussian noise (NumPy, or Box–Muller on the OS CSPRNG when fitted without a seed), not "
            "an exact discrete Gaussian",
        ]
        meta = self.meta_ if self.meta_ is not None and self.is_fitted else None
        if meta is not None:
            n = meta["n"]
            caveats.append(f"fitted on {meta['fitted_on']}: n = {n}, σ = {meta['sigma']:.4g} per embedding value")
            if meta.get("seed") is not None:
                caveats.append(f"fitted with seed {meta['seed']}: whoever knows the seed can remove the noise")
            if self.delta >= 1.0 / n:
                caveats.append(f"δ = {self.delta:g} is not below 1/n = {1.0 / n:.3g}: a weak guarantee")
        return Guarantee(
            model="central-dp",
            epsilon=self.epsilon,
            delta=self.delta,
            unit=UNIT,
            per_image_epsilon=self.epsilon,
            sound=True,
            caveats=tuple(caveats),
        )

    def _synthesize(self, n: int, shape: tuple[int, int, int], rng: RNG) -> tuple[np.ndarray, np.ndarray]:
        """n new images (n, h, w, c) in [0, 1] and their labels, drawn from the DP label distribution p̂ and the
        generator: post-processing of the noisy embedding only (the input images are not read)."""
        from privpix.mechanisms.synthesis import merf_net

        gen, meta = self._load()
        h, w, c = meta["shape"]
        if tuple(shape) != (h, w, c):
            raise ParameterError(f"{self.name}: the model makes {h}x{w} images with {c} channel(s), got {shape}")
        labels = sample_labels(self.label_probs_, n, rng)
        images = merf_net.sample(gen, labels, torch_seed(rng)).reshape(n, h, w, c)
        return images, labels


def sample_labels(probs: np.ndarray, n: int, rng: RNG) -> np.ndarray:
    """n labels drawn from ``probs`` by inverse CDF on ``rng``'s uniforms (a Generator or SecureRandom)."""
    cdf = np.cumsum(np.asarray(probs, dtype=np.float64))
    u = np.asarray(rng.random(n), dtype=np.float64) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int64)


def load_model(path: str | Path):
    """(generator, noisy embedding, meta) from a file written by :meth:`DPMERF.save_model`; weights only."""
    from privpix.mechanisms.neural.modelfile import build_from_file, load_model_file

    state, meta = load_model_file(path, FORMAT, "dp-merf")

    def build():
        from privpix.mechanisms.synthesis import merf_net

        gen = merf_net.build_generator(meta, 0)  # throwaway weights, replaced by the file's
        gen.load_state_dict({k.removeprefix("generator."): v for k, v in state.items() if k.startswith("generator.")})
        embedding = state["embedding"].double().numpy()
        k, d = int(meta["n_classes"]), int(meta["n_features"])
        if embedding.shape != (k * d + k,):
            raise ValueError(f"embedding of shape {embedding.shape}, expected ({k * d + k},)")
        return gen, embedding

    gen, embedding = build_from_file(path, "dp-merf", build)
    gen.eval()
    return gen, embedding, meta


def _torch():
    from privpix.errors import require_torch

    return require_torch("dp-merf")
