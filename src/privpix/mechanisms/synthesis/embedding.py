"""The embed-once pipeline shared by ``dp-merf`` and ``dp-hp``: one noisy release of a labelled mean embedding of
the private set, then a label-conditional generator trained on it. The mechanisms differ only in the feature map φ.

The pipeline (:class:`MeanEmbeddingSynthesizer`):

1. A data-independent feature map φ: images (d values) → R^D with ‖φ(x)‖₂ ≤ 1 for every image, whatever its
   pixels (the subclass proves its bound; the construction gives it, never the data).
2. Each private pair (x_i, y_i) contributes u_i = [sqrt(1 − a²)·φ(x_i) ⊗ onehot(y_i), a·onehot(y_i)], a² =
   ``count_share``: the label embedding φ ⊗ y of DP-MERF (its eq. 7) beside a share of the norm spent on the label
   itself, so the same release gives the class proportions. ‖u_i‖₂ ≤ 1.
3. The mean μ = (1/n)·Σ u_i is released **once** with Gaussian noise and kept as ``embedding_`` (K·D + K values:
   the K class-wise feature sums, then the K count values). Replace-one neighbours (same n, one (image, label)
   pair changed) move μ by ‖u_i − u'_i‖/n ≤ 2/n.

   * float mode (default): μ in float64 plus N(0, σ²) per value, σ = z·2/n, z from the analytic Gaussian
     mechanism (:func:`privpix.privacy.gaussian_release.analytic_noise_multiplier`); NumPy's sampler when seeded,
     Box–Muller on OS CSPRNG bits when not.
   * ``secure=true``: each row [sqrt(1 − a²)·φ(x_i), a] (width D + 1, norm ≤ 1) is rounded to the lattice
     Z^(D+1)/2^20 and summed exactly as integers in the group of its label
     (:class:`~privpix.privacy.gaussian_release.FixedPointSum`); exact discrete Gaussian noise is added to the integer
     sum (:func:`~privpix.privacy.gaussian_release.exact_gaussian_release`: σ_int = z·2·(2^20 + sqrt(D+1)/2), the
     rounding included in the sensitivity), z from dp-accounting's RDP accountant, which holds for the discrete Gaussian
     (Canonne, Kamath & Steinke 2020). The noisy integers are put back in the float layout and divided by n·2^20.
4. Post-processing only (no ε): the DP label distribution p̂ (the count part divided by a, negatives set to 0,
   normalised) and a generator G(z, y) trained to minimise ‖μ̃_φ − Σ_k p̂_k·e_k ⊗ E_z φ(G(z, k))‖² (DP-MERF's
   eq. 9). A release draws labels from p̂ and images from G; generating more costs nothing.

Public (assumed known, not protected): n, the image shape, the K classes (labels must lie in 0..K−1), the
kernel's parameters and the feature map's seed (stored in the model file). The guarantee: central (ε, δ)-DP for
one image and its label of the private set, replace-one, per-image ε = ε.
"""

from __future__ import annotations

import functools
import math
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.overlap import CHECK_CAVEAT
from privpix.errors import ParameterError, PrivpixWarning
from privpix.mechanisms.base import About, Auditable, ConformanceCase
from privpix.mechanisms.kinds import SyntheticImageMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.trained import CalibratedModel
from privpix.privacy import gaussian_release
from privpix.privacy.composition import ApproxDP, GaussianNoise, NoiseEvent, approx
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import Neighbours, OneOfBatch
from privpix.privacy.noise import RNG, gaussian, make_rng, torch_seed

UNIT = "one image and its label of the private set"
ANALYTIC, RDP = gaussian_release.ANALYTIC, gaussian_release.RDP
LATTICE_BITS = 20  # secure mode: rows rounded to multiples of 2^-20 (FixedPointSum's default)

# The generator's parameters (a synthesizer without one drops them, with public_epochs).
GENERATOR_PARAMS = ("generator", "code_dim", "width", "channels", "epochs", "batch_size", "lr", "lr_decay")
# Parameters that only shape the fit (a model file records them, and they become the ones in force); the feature
# map's come first, from the subclass.
TRAINING = ("n_classes", "count_share", "generator", "code_dim", "width", "channels", "epochs", "batch_size", "lr",
            "lr_decay", "secure", "public", "public_epochs")  # fmt: skip


# The generator's schedule at epochs=0 (the default): DP-MERF's 5 epochs (5 learning-rate decays), each of
# ceil(n / batch_size) steps as DP-MERF's, or longer where n is small, so that it trains for MIN_GENERATOR_STEPS steps
# whatever n is. DP-MERF's schedule gave a 3,662-face folder 40 steps (a CNN learns Male from its images to 0.658;
# 100 steps: 0.689, 200: 0.701, 400: 0.716, at 72, 131 and 261 CPU-s: benchmarks/results/generator_steps.md): 100 is
# where the gain flattens to about 0.013 per doubling, within a seed's spread. More epochs instead of longer ones
# train as well for the same steps there (8 steps an epoch), but where an epoch is one step (n <= batch_size) the
# learning rate would decay by lr_decay at every step. The steps read only the noisy embedding: no ε. An explicit
# epochs keeps DP-MERF's schedule (seeded fits reproduce), and warns below MIN_GENERATOR_STEPS.
AUTO_EPOCHS = 5
MIN_GENERATOR_STEPS = 100


class ShortTrainingWarning(PrivpixWarning):
    """The generator's training is too short for the data: its samples will be noise."""


# ------------------------------------------------------------------------------------------ calibration


@functools.lru_cache(maxsize=64)
def noise_multiplier(epsilon: float, delta: float, secure: bool = False) -> float:
    """z = σ/Δ for one Gaussian release at (ε, δ): the analytic calibration (float mode) or the RDP one (the
    exact discrete Gaussian of the secure mode); cached, since every guarantee asks for it."""
    if secure:
        return gaussian_release.rdp_noise_multiplier(epsilon, delta)
    return gaussian_release.analytic_noise_multiplier(epsilon, delta)


def sensitivity(n: int) -> float:
    """L2 sensitivity of the mean of n vectors of norm ≤ 1 under replace-one: 2/n."""
    return 2.0 / n


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


def sample_labels(probs: np.ndarray, n: int, rng: RNG) -> np.ndarray:
    """n labels drawn from ``probs`` by inverse CDF on ``rng``'s uniforms (a Generator or SecureRandom)."""
    cdf = np.cumsum(np.asarray(probs, dtype=np.float64))
    u = np.asarray(rng.random(n), dtype=np.float64) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1).astype(np.int64)


# ------------------------------------------------------------------------------------------ mechanism


class MeanEmbeddingSynthesizer(CalibratedModel, SyntheticImageMechanism, Auditable):
    """The embed-once pipeline of the module docstring; a subclass names itself, declares its feature parameters
    (placed before the shared ones declared here: ``params_before="n_classes"``) and ``training`` (its feature
    parameters, then ``TRAINING``), and implements the feature map: :meth:`_featurizer`, :meth:`_feature_width`,
    :meth:`_check_features`.

    ``model=FILE`` loads a fitted model (``save_model``): generator weights, the noisy embedding and the (ε, δ, n)
    it was calibrated for; ``epsilon`` and ``delta`` must then be the file's."""

    FORMAT: ClassVar[str]
    calibration_verb: ClassVar[str] = "calibrated"
    seed_key: ClassVar[str] = "feature_seed"  # the meta key of the feature map's seed
    features_word: ClassVar[str] = "feature"  # "the mean <features_word> embedding" in the guarantee
    norm_claim: ClassVar[str] = "has norm at most 1"
    public_parts: ClassVar[str] = "the kernel"  # what else the guarantee's first caveat names as public
    reduce: ClassVar[str] = "sum"  # embed_net.train_generator's class-mean reduction
    conformance_tiny: ClassVar[dict[str, Any]] = {}
    # Generating: about 0.17 ms per 28×28 digit on one core (the generator's forward pass), a shard-planning hint.
    _seconds_per_value: ClassVar[float] = 2.2e-7
    # The parameters every subclass has, in this order after its feature map's own, which it declares first
    # (``params_before="n_classes"``); one without a generator drops GENERATOR_PARAMS and public_epochs.
    model: str = param("", "fitted model file; empty: fit() fits on the private images it is given")
    n_classes: int = param(
        0,
        "K, public: 0 takes the data set's declared class names (its schema; unlabelled "
        "images: one class); labels lie in 0..K-1",
        minimum=0,
    )
    count_share: float = param(
        0.05,
        "share a² of each image's unit-norm contribution spent on its label (the DP "
        "class proportions); the rest on φ ⊗ y",
        minimum=1e-6,
    )
    generator: str = param("conv", "conv (DP-MERF's ConvCondGen; h, w divisible by 4) or mlp", ("conv", "mlp"))
    code_dim: int = param(5, "generator: latent code size", minimum=1)
    width: int = param(200, "generator: hidden width of the first layer", minimum=1)
    channels: int = param(16, "generator (conv): feature maps before upsampling", minimum=2)
    epochs: int = param(
        0,
        "training: epochs of ceil(n / batch_size) generator steps, the learning rate times lr_decay after each; 0: "
        f"{AUTO_EPOCHS} epochs of at least ceil(n / batch_size) and {-(-MIN_GENERATOR_STEPS // AUTO_EPOCHS)} steps, "
        f"so at least {MIN_GENERATOR_STEPS} steps whatever n (the training reads only the noisy embedding: no ε)",
        minimum=0,
    )
    batch_size: int = param(500, "training: generated images per step (balanced over the K classes)", minimum=1)
    lr: float = param(0.01, "training: Adam learning rate", minimum=1e-12)
    lr_decay: float = param(0.9, "training: learning-rate factor after each epoch", minimum=1e-6)
    secure: bool = param(
        False,
        "exact discrete Gaussian noise on a fixed-point sum of the embedding (z from the "
        "RDP accountant); false: floating-point Gaussian noise, z from the analytic Gaussian "
        "mechanism",
    )
    n: int = param(0, "synthetic images a published release writes; 0: as many as the input images", minimum=0)
    public: str = param(
        "",
        "labelled public images to pretrain the generator on before the private training: a "
        "dataset name (digits, lfw-gender:train, ...) or a folder with one subfolder per class. It "
        "must really be public and distinct from the private set: the guarantee covers the "
        "private set only, the public set is not protected. Empty: no pretraining",
    )
    public_epochs: int = param(
        5,
        "pretraining (with public): epochs, each as many steps as a private epoch, on "
        "the public set's noise-free embedding",
        minimum=1,
    )

    about = About(guarantee_model="central-dp", uses_epsilon=True, uses_delta=True, use="synthesize")

    # The fitted generator is ``model_`` (TrainedModel); beside it:
    embedding_: np.ndarray | None = None  # the released noisy embedding μ̃ (K·D + K,)
    label_probs_: np.ndarray | None = None

    # ---------------------------------------------------------------------------------- the feature map

    def _featurizer(self, shape: tuple[int, int, int], seed: int) -> tuple[Callable, int]:
        """(φ as a torch callable on rows (m, d) float32 → (m, D), D) for images of ``shape``, any randomness drawn
        from ``seed`` (never from data). May keep what it drew on ``self`` (``omega_``)."""
        raise NotImplementedError

    @classmethod
    def _feature_width(cls, meta: dict) -> int:
        """D for the training parameters and shape recorded in ``meta``."""
        raise NotImplementedError

    def _check_features(self) -> None:
        """Validation of the feature parameters (see :meth:`Mechanism._check`)."""

    def _check_shape(self, shape: tuple[int, int, int]) -> None:
        """Refuse images of ``shape`` the feature map or the generator cannot take (before the private images are
        read); a subclass that overrides it calls this one."""
        h, w, _ = shape
        if self.generator == "conv" and (h % 4 or w % 4):
            raise ParameterError(
                f"{self.name}: the conv generator needs h and w divisible by 4, got {h}x{w}; use generator=mlp "
                "or resize (--size 28x28)"
            )

    # ---------------------------------------------------------------------------------- parameters

    def _check(self) -> None:
        if not self.count_share < 1:
            raise ParameterError(f"{self.name}: count_share must be in (0, 1), got {self.count_share}")
        self._check_generator()
        self._check_features()

    def _check_generator(self) -> None:
        """Validation of the generator's parameters (``GENERATOR_PARAMS``); a subclass without them has nothing here."""
        if self.lr_decay > 1:
            raise ParameterError(f"{self.name}: lr_decay must be <= 1, got {self.lr_decay}")

    def _check_delta(self) -> None:
        if not self.delta > 0:
            raise ParameterError(f"{self.name}: the Gaussian mechanism needs a delta in (0, 1), e.g. --delta 1e-5")

    def _secure(self) -> dict[str, Any]:
        """Fitting now: ``secure=true`` (exact discrete Gaussian on the fixed-point sum). From a model file: its
        noise was drawn when it was fitted, exactly only if it was fitted with ``secure=true``, which only the file
        says (``--secure`` reads it first)."""
        if not self.model:
            return {"secure": {"secure": True}}
        if not self.is_fitted:
            return {
                "secure": None,
                "not_secure": f"{self.model} is not read yet: fit() reads whether its noise was exact",
            }
        if self.secure:
            return {"secure": {}}
        why = (
            f"{self.model} was fitted with floating-point Gaussian noise (secure=false), and a release from it adds "
            "no noise; refit with --param secure=true for exact noise"
        )
        return {"secure": None, "not_secure": why}

    def _planned_events(self, shape: tuple[int, int, int], n: int | None) -> tuple[NoiseEvent, ...]:
        """One Gaussian release of the embedding, noise multiplier z for (ε, δ) (its sensitivity 2/n normalised);
        in the secure mode, the exact discrete Gaussian's RDP-derived (ε, δ)."""
        self._check_delta()
        return (_event(self._embedding_noise_multiplier(), self.delta, self.secure),)

    def _unit_events(self, events: tuple[NoiseEvent, ...]) -> tuple[NoiseEvent, ...]:
        # The secure mode's exact discrete Gaussian is charged by its RDP-derived (ε, δ), a bound that covers it;
        # an audit reads it through the Gaussian curve of the continuous release it approximates, as the float mode.
        z = self._embedding_noise_multiplier()
        return tuple(GaussianNoise(z) if isinstance(e, ApproxDP) else e for e in events)

    def _embedding_noise_multiplier(self) -> float:
        """z of the one embedding release: calibrated to the whole (ε, δ) here; a mechanism that spends part of
        its budget elsewhere (``dp-teacher``) gives the embedding its share."""
        return noise_multiplier(self.epsilon, self.delta, self.secure)

    def _recompute(self, meta: dict) -> tuple[float, tuple[NoiseEvent, ...]]:
        """The float mode: σ = z·2/n and ε = the analytic Gaussian's for z; the secure mode: σ = z·2·(2^20 +
        √(D+1)/2)/(2^20·n) (the fixed-point sum's sensitivity) and ε = the RDP accountant's for z."""
        z, n, delta = float(meta["noise_multiplier"]), int(meta["n"]), float(meta["delta"])
        if not (z > 0 and math.isfinite(z)) or n < 2 or not 0 < delta < 1:
            raise ValueError(f"noise_multiplier={z!r}, n={n!r}, delta={delta!r} out of range")
        secure = bool(meta.get("secure", False))
        if meta.get("accountant") != (RDP if secure else ANALYTIC):
            mode = "secure" if secure else "float"
            raise ValueError(f"accountant {meta.get('accountant')!r} is not the {mode} mode's")
        if secure:
            if int(meta.get("lattice_scale", 0)) != 1 << LATTICE_BITS:
                raise ValueError(f"lattice_scale {meta.get('lattice_scale')!r}, expected {1 << LATTICE_BITS}")
            bound = (1 << LATTICE_BITS) + math.sqrt(self._feature_width(meta) + 1) / 2
            sigma = math.nextafter(z * 2 * bound, math.inf) / (1 << LATTICE_BITS) / n
            epsilon = gaussian_release.rdp_epsilon(z, delta)
        else:
            sigma = z * sensitivity(n)
            epsilon = gaussian_release.analytic_epsilon(z, delta)
        if not math.isclose(float(meta["sigma"]), sigma, rel_tol=1e-9):
            raise ValueError(f"sigma={meta['sigma']!r} is not the noise multiplier times the sensitivity ({sigma:.6g})")
        return epsilon, (_event(z, delta, secure),)

    def label_names(self) -> tuple[str, ...] | None:
        names = self.meta_.get("class_names") if self.meta_ is not None and self.is_fitted else None
        return tuple(names) if names else None

    def synthetic_count(self, n_inputs: int | None) -> int | None:
        """``n`` when set, else as many as the inputs (``None`` without inputs: the user must give ``n``)."""
        return self.n or n_inputs

    def neighbours(self) -> Neighbours:
        """Replace-one on the whole private set: two sets of n labelled images that differ in one."""
        return OneOfBatch(None)

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A tiny fit (``conformance_tiny``, one epoch) on 60 built-in digits, the same written to a model file and
        loaded, and the tiny fit in secure mode."""
        from privpix.data import load_dataset

        data = load_dataset("builtin-mnist").subset(np.arange(0, 5000, 84))
        assert isinstance(data, ImageSet)  # the built-in digits are images
        tiny = {"epsilon": 1.0, "delta": 1e-5, **cls.conformance_tiny}
        path = cls(**tiny).fit(data, seed=0).save_model(workdir / f"{cls.name}.pt")
        loaded = {"epsilon": 1.0, "delta": 1e-5, "model": str(path)}
        return [
            ConformanceCase(tiny, data),
            ConformanceCase(loaded, data.subset(np.arange(12))),
            ConformanceCase({**tiny, "secure": True}, data),
        ]

    # -------------------------------------------------------------------------------------- fitting

    def fit(self, data: ImageSet | RecordSet | None = None, *, seed: int | None = None) -> Self:
        """With ``model``: load the file. Without: release the noisy embedding of ``data`` (labelled images) once
        and train the generator on it. ``seed`` seeds the feature map, the noise and the training (reproducible:
        whoever knows the seed can remove the noise); ``None`` draws the noise from the OS CSPRNG and the rest
        from OS entropy, as a real release should."""
        return super().fit(data, seed=seed)

    def _train(self, data, seed: int | None):
        labels = self._labels(data, "the embedding is φ(x) ⊗ y", unlabelled=True)
        n, (h, w, c) = len(data), data.shape
        if n < 2:
            raise ParameterError(f"{self.name}: needs at least 2 private images, got {n}")
        self._check_shape((h, w, c))
        # Read (and refused, if bad) before the private images are touched or any noise is drawn.
        public = self._public_set(data)
        from privpix.mechanisms.synthesis import embed_net

        seeded = seed is not None
        rng = make_rng(int(seed)) if seed is not None else None
        t0 = time.perf_counter()
        feature_seed = int(rng.integers(0, 2**62)) if rng is not None else int.from_bytes(os.urandom(8), "little") >> 2
        featurize, width = self._featurizer((h, w, c), feature_seed)
        noise_rng = rng if rng is not None else make_rng(secure=True)
        k, share = self.n_classes, self.count_share
        # The one release of the private set: every later step reads only `noisy`.
        x = data.flat()
        parts = _parallel_chunk_sums(self, (h, w, c), feature_seed, x, labels, width)
        if self.secure:
            acc = embed_net.fixed_point_sum(x, labels, featurize, width, k, share, LATTICE_BITS, parts)
            rel = gaussian_release.exact_gaussian_release(acc, self.epsilon, self.delta, noise_rng)
            del acc
            noisy = embed_net.embedding_of_sum(rel.noisy_total, n, rel.scale)
            z, sigma = rel.noise_multiplier, rel.sigma / n
            noise = {"noise": "exact discrete Gaussian on a fixed-point integer sum", "accountant": RDP,
                     "lattice_scale": rel.scale}  # fmt: skip
        else:
            clean = embed_net.mean_embedding(x, labels, featurize, width, k, share, parts)
            del x, parts
            z = self._embedding_noise_multiplier()
            sigma = z * sensitivity(n)
            noisy = clean + gaussian(noise_rng, sigma, clean.shape)
            del clean
            noise = {"noise": "floating-point Gaussian", "accountant": ANALYTIC}
        embed_seconds = time.perf_counter() - t0
        means, probs = split_embedding(noisy, k, share)
        t_seed = torch_seed(rng)
        meta = {
            **self._meta_head((h, w, c), n, data.class_names, unconditional=data.labels is None),
            self.seed_key: feature_seed,
            "noise_multiplier": z,
            "sigma": sigma,
            **noise,
            "seed": None if seed is None else int(seed),
            "noise_rng": "seeded NumPy Generator" if seeded else "OS CSPRNG (privpix SecureRandom)",
            "fitted_on": f"{data.source or 'the given images'} ({n} images)",
        }
        t1 = time.perf_counter()
        gen = self._generator_from(meta, means, probs, featurize, width, n, public, t_seed)
        meta.update(embed_seconds=round(embed_seconds, 3), train_seconds=round(time.perf_counter() - t1, 3))
        self.embedding_, self.label_probs_ = noisy, probs
        return gen, meta

    def _public_set(self, data: ImageSet) -> ImageSet | None:
        """The public set named by ``public`` at the private images' shape, checked distinct from them (``None``
        without one); read before the private images are touched."""
        if not self.public:
            return None
        from privpix.mechanisms.synthesis.public import check_distinct, load_public

        public = load_public(self.public, data.shape, self.n_classes, data.class_names)
        check_distinct(public, data, repr(self.public))
        return public

    def _generator_from(self, meta: dict, means: np.ndarray, probs: np.ndarray, featurize: Callable, width: int,
                        n: int, public: ImageSet | None, seed: int):  # fmt: skip
        """Post-processing of the noisy embedding (``means``, ``probs``): the generator, pretrained on ``public``
        when given, then trained on the class-wise ``means``; records its history in ``meta``."""
        from privpix.mechanisms.synthesis import embed_net

        gen = embed_net.build_generator(meta, seed)
        if public is not None:
            meta.update(self._pretrain(gen, public, featurize, width, n, seed + 2))
        epochs, per_epoch = self._generator_schedule(n)
        if self.epochs and epochs * per_epoch < MIN_GENERATOR_STEPS:
            warnings.warn(
                f"{self.name}: the generator trains for {epochs * per_epoch} steps ({epochs} epochs of "
                f"ceil({n} / batch_size {self.batch_size}) = {per_epoch}), too few to learn images from (at least "
                f"{MIN_GENERATOR_STEPS}); leave epochs at 0 (at least {MIN_GENERATOR_STEPS} steps), raise it (e.g. "
                f"epochs={math.ceil(MIN_GENERATOR_STEPS / per_epoch)}) or lower batch_size: more steps cost no ε",
                ShortTrainingWarning,
                stacklevel=2,
            )
        meta.update(generator_epochs=epochs, generator_steps=epochs * per_epoch)
        meta["history"] = self._train_generator(gen, featurize, means, probs, epochs, per_epoch, seed + 1)
        return gen

    def _generator_schedule(self, n: int) -> tuple[int, int]:
        """(epochs, steps per epoch) of the generator's training after a fit on ``n`` private images: ``epochs`` of
        ceil(n / batch_size) steps, or with ``epochs=0`` :data:`AUTO_EPOCHS` epochs of at least that many and at
        least :data:`MIN_GENERATOR_STEPS` steps in all. Post-processing: it changes no noise."""
        per_epoch = math.ceil(n / self.batch_size)
        if self.epochs:
            return self.epochs, per_epoch
        return AUTO_EPOCHS, max(per_epoch, -(-MIN_GENERATOR_STEPS // AUTO_EPOCHS))

    def _train_generator(self, gen, featurize: Callable, means: np.ndarray, probs: np.ndarray, epochs: int,
                         per_epoch: int, seed: int) -> dict:  # fmt: skip
        """``epochs`` of ``per_epoch`` steps matching ``gen`` to the class-wise ``means`` (its history)."""
        from privpix.mechanisms.synthesis import embed_net

        return embed_net.train_generator(gen, featurize, means, probs, steps_per_epoch=per_epoch, epochs=epochs,
                                         batch_size=self.batch_size, lr=self.lr, lr_decay=self.lr_decay, seed=seed,
                                         reduce=self.reduce)  # fmt: skip

    def _public_means(self, public: ImageSet, featurize: Callable, width: int) -> tuple[np.ndarray, np.ndarray]:
        from privpix.mechanisms.synthesis import embed_net

        k, share = self.n_classes, self.count_share
        emb = embed_net.mean_embedding(public.flat(), np.asarray(public.labels), featurize, width, k, share)
        return split_embedding(emb, k, share)

    def _pretrain(self, gen, public: ImageSet, featurize: Callable, width: int, n: int, seed: int) -> dict:
        """Train ``gen`` on the public set's noise-free class-wise embedding (same φ, same loss as the private
        training, which then starts from these weights); what the model file records about it."""
        from privpix.mechanisms.synthesis.public import fingerprint

        means, probs = self._public_means(public, featurize, width)
        per_epoch = self._generator_schedule(n)[1]
        history = self._train_generator(gen, featurize, means, probs, self.public_epochs, per_epoch, seed)
        return {
            "public_source": public.source,
            "public_n": len(public),
            "public_sha256": fingerprint(public),
            "public_history": history,
        }

    def released_statistic(self, data: ImageSet, rng: RNG | None, *, seed: int) -> np.ndarray | None:
        """The one DP release a fit makes of ``data``: its noisy mean embedding (K·D + K,) float64, with the feature
        map drawn from ``seed`` and noise from ``rng`` exactly as :meth:`fit` adds it (float or, with ``secure``,
        exact discrete Gaussian on the fixed-point sum); ``rng=None`` gives it without noise (for audits choosing
        their test). The generator is not trained: everything after this release is post-processing. Works on a
        fresh copy, so a fitted model is left as it is."""
        return self._embedding_release(data, rng, seed=seed)

    def _embedding_release(self, data: ImageSet, rng: RNG | None, *, seed: int) -> np.ndarray:
        """:meth:`released_statistic` itself, for a subclass whose fit makes more releases than this one."""
        from privpix.mechanisms.synthesis import embed_net

        self._validate()
        self._check_delta()
        labels = np.asarray(self._labels(data, "the embedding is φ(x) ⊗ y", unlabelled=True)).astype(np.int64)
        n, k, share = len(data), self.n_classes, self.count_share
        # An audit asks for the same data thousands of times, with fresh noise each time: the noise-free sum is
        # computed once per (data, seed, parameters). The cache holds the data object itself, so its id is not reused.
        key = (id(data), int(seed), self.secure, tuple(sorted(self.get_params().items())))
        cache = self.__dict__.setdefault("_statistic_cache", {})
        if key not in cache:
            fresh = type(self)(**{p: v for p, v in self.get_params().items() if p != "model"})
            featurize, width = fresh._featurizer(data.shape, int(seed))
            computed: embed_net.FixedPointSum | np.ndarray  # the exact sum for secure noise, else the float mean
            if self.secure:
                computed = embed_net.fixed_point_sum(data.flat(), labels, featurize, width, k, share, LATTICE_BITS)
            else:
                computed = embed_net.mean_embedding(data.flat(), labels, featurize, width, k, share)
            if len(cache) >= 4:
                cache.pop(next(iter(cache)))
            cache[key] = (data, computed)
        clean = cache[key][1]
        if self.secure:
            if rng is None:
                return embed_net.embedding_of_sum(clean.total, n, clean.scale)
            rel = gaussian_release.exact_gaussian_release(clean, self.epsilon, self.delta, rng)
            return embed_net.embedding_of_sum(rel.noisy_total, n, rel.scale)
        if rng is None:
            return clean.copy()
        return clean + gaussian(rng, self._embedding_noise_multiplier() * sensitivity(n), clean.shape)

    def _read_model(self, path: str):
        gen, embedding, meta, state = self._load_parts(path)
        self._read_extra(path, state, meta)
        self.embedding_ = embedding
        self.label_probs_ = split_embedding(embedding, meta["n_classes"], meta["count_share"])[1]
        return gen, meta

    def _read_extra(self, path: str, state: dict, meta: dict) -> None:
        """Read what a subclass stores beside the generator and the embedding (:meth:`_extra_state`) from the
        file's ``state``, read once."""

    def _extra_state(self) -> dict:
        """Tensors a subclass stores beside the generator and the embedding (prefixed keys); none here."""
        return {}

    @classmethod
    def load_model(cls, path: str | Path):
        """(generator, noisy embedding, meta) from a file written by :meth:`save_model`; weights only."""
        gen, embedding, meta, _ = cls._load_parts(path)
        return gen, embedding, meta

    @classmethod
    def _load_parts(cls, path: str | Path):
        """:meth:`load_model`'s (generator, embedding, meta) and the file's whole state dict."""
        from privpix.mechanisms.modelfile import build_from_file, load_model_file

        state, meta = load_model_file(path, cls.FORMAT, cls.name)

        def build():
            from privpix.mechanisms.synthesis import embed_net

            gen = embed_net.build_generator(meta, 0)  # throwaway weights, replaced by the file's
            gen.load_state_dict(
                {k.removeprefix("generator."): v for k, v in state.items() if k.startswith("generator.")}
            )
            embedding = state["embedding"].double().numpy()
            k, d = int(meta["n_classes"]), cls._feature_width(meta)
            if embedding.shape != (k * d + k,):
                raise ValueError(f"embedding of shape {embedding.shape}, expected ({k * d + k},)")
            return gen, embedding

        gen, embedding = build_from_file(path, cls.name, build)
        gen.eval()
        return gen, embedding, meta, state

    def _write_model(self, path: Path) -> Path:
        """The generator weights, the noisy embedding, the guarantee's ε, δ and n, every training parameter."""
        from privpix.errors import require_torch
        from privpix.mechanisms.modelfile import save_model_file

        gen, meta = self._load()
        torch = require_torch(self.name)
        state = {f"generator.{k}": v for k, v in gen.state_dict().items()}
        state["embedding"] = torch.from_numpy(np.asarray(self.embedding_, dtype=np.float64))
        state.update(self._extra_state())
        return save_model_file(path, state, {"format": self.FORMAT, **meta})

    # -------------------------------------------------------------------------------------- releasing

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """(ε, δ)-DP for one image and its label of the private set replaced (central DP, per image ε = ε)."""
        self._check_delta()
        z = self._embedding_noise_multiplier()
        caveats = [
            "replace-one neighbours: private sets of the same size n that differ in one (image, label) pair; n, "
            f"the image shape, the K classes and {self.public_parts} are public. Adding or removing an image is "
            "covered only through group privacy (not claimed)",
        ]
        if self.secure:
            caveats += [
                f"one exact discrete Gaussian release of the sum of the {self.features_word} embedding (each "
                f"image's part {self.norm_claim}; rounded to the lattice 2^-{LATTICE_BITS} and summed as integers, "
                f"the rounding counted in the sensitivity); noise multiplier {z:.6g} from the {RDP}",
                "the synthetic images and labels are post-processing of that one release: generating more costs no ε",
                "exact noise: integer sums and exact discrete Gaussian samples (Canonne, Kamath & Steinke 2020), so "
                "the proof covers the values actually computed, rounding included; the RDP calibration costs a "
                "little more noise than the float mode's",
            ]
        else:
            caveats += [
                f"one Gaussian release of the mean {self.features_word} embedding (each image's part "
                f"{self.norm_claim}, so the sensitivity is 2/n whatever the pixels); noise multiplier σ·n/2 = "
                f"{z:.6g} from the {ANALYTIC}",
                "the synthetic images and labels are post-processing of that one release: generating more costs no ε",
                "floating-point Gaussian noise (NumPy, or Box–Muller on the OS CSPRNG when fitted without a seed), "
                "not an exact discrete Gaussian",
            ]
        meta = self._fitted_meta()
        caveats += self._public_caveats(meta)
        if meta is not None:
            caveats.append(f"fitted on {meta['fitted_on']}: n = {meta['n']}, σ = {meta['sigma']:.4g} per embedding "
                           "value")  # fmt: skip
        return self._central_guarantee(caveats, UNIT)

    def _public_caveats(self, meta: dict | None) -> list[str]:
        """What the guarantee says of the public set (none without one); ``meta``: the fitted model's, if any."""
        out = []
        if self.public:
            out.append(
                f"the generator was pretrained on the public set {self.public!r}, which is not protected: it is "
                "assumed public and distinct from the private set (an image in both is exposed without noise). "
                "It never enters the private release, so the (ε, δ) above is unchanged"
            )
            out.append(CHECK_CAVEAT)
        if meta is not None and meta.get("public_n"):
            out.append(
                f"public set: {meta['public_source']}, {meta['public_n']} images, sha256 "
                f"{meta['public_sha256'][:16]}…, the generator pretrained on it for {meta['public_epochs']} epochs"
            )
        return out

    def _synthesize(self, n: int, shape: tuple[int, int, int], rng: RNG) -> tuple[np.ndarray, np.ndarray | None]:
        """n new images (n, h, w, c) in [0, 1] and their labels (``None`` for a model fitted on unlabelled images),
        drawn from the DP label distribution p̂ and the generator: post-processing of the noisy embedding only (the
        input images are not read)."""
        from privpix.mechanisms.synthesis import embed_net

        gen, meta = self._load()
        h, w, c = meta["shape"]
        if tuple(shape) != (h, w, c):
            raise ParameterError(f"{self.name}: the model makes {h}x{w} images with {c} channel(s), got {shape}")
        assert self.label_probs_ is not None  # set with the model, by fit or by reading its file (_load)
        labels = sample_labels(self.label_probs_, n, rng)
        images = embed_net.sample(gen, labels, torch_seed(rng)).reshape(n, h, w, c)
        # Fitted on unlabelled images: one class, and no label to publish.
        return images, (None if meta.get("unconditional") else labels)


def _event(z: float, delta: float, secure: bool) -> NoiseEvent:
    """The ledger's event for one release of the embedding: a continuous Gaussian of noise multiplier z, or for the
    exact discrete Gaussian (whose (ε, δ) curve is not the continuous one's) the (ε, δ) its RDP bound gives."""
    if secure:
        return approx(gaussian_release.rdp_epsilon(z, delta), delta)
    return GaussianNoise(z)


@dataclass(frozen=True)
class _ChunkTask:
    """One worker's share of the private embedding: rows [start, stop) of the private images (a whole number of
    :func:`~privpix.mechanisms.synthesis.embed_net.chunk_rows` chunks) and what rebuilds the feature map there."""

    kind: type
    params: dict[str, Any]
    shape: tuple[int, int, int]
    feature_seed: int
    x: np.ndarray
    labels: np.ndarray
    bits: int | None


def _chunk_task(task: _ChunkTask) -> list[np.ndarray]:
    from privpix.mechanisms.synthesis import embed_net
    from privpix.threads import one_thread

    with one_thread():
        fresh = task.kind(**task.params)
        featurize, width = fresh._featurizer(task.shape, task.feature_seed)
        return embed_net.chunk_sums(task.x, task.labels, featurize, width, fresh.n_classes, fresh.count_share,
                                    task.bits)  # fmt: skip


def _parallel_chunk_sums(mech: MeanEmbeddingSynthesizer, shape: tuple[int, int, int], feature_seed: int,
                         x: np.ndarray, labels: np.ndarray, width: int) -> list[np.ndarray] | None:  # fmt: skip
    """The embedding's chunk sums computed on the active executor's workers (``privpix fit/release --workers``),
    or ``None`` (computed in this process) when there is one worker or one chunk. Each worker rebuilds the feature
    map from its seed and returns its chunks' sums; they are added in chunk order, so the embedding is the one a
    single process computes, bit for bit."""
    from privpix.executor import active
    from privpix.mechanisms.synthesis import embed_net

    ex = active()
    rows = embed_net.chunk_rows(width)
    n_chunks = -(-len(x) // rows)
    if ex.workers == 1 or n_chunks < 2:
        return None
    per = -(-n_chunks // (2 * ex.workers)) * rows
    params = {p: v for p, v in mech.get_params().items() if p != "model"}
    bits = LATTICE_BITS if mech.secure else None
    tasks = [_ChunkTask(type(mech), params, shape, feature_seed, x[a : a + per], labels[a : a + per], bits)
             for a in range(0, len(x), per)]  # fmt: skip
    done = dict(ex.map_unordered(_chunk_task, tasks))
    return [part for i in range(len(tasks)) for part in done[i]]
