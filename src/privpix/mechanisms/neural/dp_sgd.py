"""``dp-sgd``: the reference a data holder weighs every image release against — publish no images at all, and
instead a classifier trained on the private images with DP-SGD (Abadi et al. 2016, "Deep learning with differential
privacy", CCS), with a sound (ε, δ) guarantee per (image, label) of the training set (``output == "model"``).

The mechanism, as implemented here with Opacus (Yousefpour et al. 2021):

1. The classifier: Tramèr & Boneh's (2021) end-to-end MNIST CNN with tanh activations (Papernot et al. 2021),
   see :class:`privpix.mechanisms.dp_sgd_training.TanhCNN`; or (``features=scatternet``) their ScatterNet + linear, a
   fixed scattering transform (kymatio) whose features a dense layer is trained on
   (:class:`privpix.mechanisms.dp_sgd_training.ScatterNetLinear`); its weights drawn from the seed. The transform is
   data-independent, so DP-SGD on the features is DP-SGD on the images through a fixed first layer.
2. T = ``epochs`` x round(n / ``batch_size``) steps. Each step draws a batch by Poisson sampling: every training
   example independently with probability q = ``batch_size`` / n (Opacus's ``UniformWithReplacementSampler``),
   computes each example's gradient of its cross-entropy loss (Opacus's ``GradSampleModule``), clips it to L2 norm
   C = ``max_grad_norm``, sums, adds N(0, (z·C)² I) and divides by the expected batch size (Opacus's
   ``DPOptimizer``), then takes an SGD step with ``momentum``. Each step is one sampled Gaussian mechanism on the
   clipped sum (sensitivity C under add/remove); the momentum buffer and the weights are post-processing.
3. The noise multiplier z is the smallest (to 0.1 % in ε) that makes the T-fold composition of the sampled
   Gaussian mechanism (ε, δ)-DP by Opacus's RDP accountant (Mironov, Talwar & Zhang 2019, "Rényi differential
   privacy of the sampled Gaussian mechanism"; ``opacus.accountants.utils.get_noise_multiplier``), and that
   accountant's ε for the steps actually taken (recorded by the optimizer's step hook) is checked to be at most ε.
   No hand formula.

Neighbouring relation: **add/remove one example** (unbounded DP), the relation the RDP analysis of the sampled
Gaussian mechanism with Poisson sampling is proved for. Two training sets are neighbours when one is the other plus
one (image, label) pair. Replacing an example is two such changes, so a replace-one claim follows only by group
privacy, at (2ε, (1 + e^ε)·δ); contrast dp-merf, whose claim is replace-one with n public. Public, i.e. assumed
known and not protected: n (it fixes q and T), the image shape, the number of classes K, the architecture and every
training parameter.

What is released is the trained network (``save_model`` writes it; ``privpix fit`` is the command). Every
intermediate iterate is covered as well, so choosing a checkpoint by a statistic that reads no private data costs
nothing; choosing one on private validation data, or tuning hyperparameters on the private set, is not covered.
The model's predictions on anyone's images are post-processing of the model; predictions on the private training
images are a new computation on the private data, and no part of the guarantee.

What it is not: the noise is floating-point Gaussian (torch's normal sampler through Opacus's ``secure_mode``
construction, the mean of Gaussians against floating-point attacks) drawn from torch Mersenne-Twister generators
seeded from the fit's seed, or from OS entropy without one; not a CSPRNG (Opacus's cryptographic generator needs
torchcsprng, not available for this torch) and not an exact discrete Gaussian; clipping is done in float32.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import About, Auditable, Claim, ConformanceCase, WhiteBoxTrials
from privpix.mechanisms.kinds import ModelMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.mechanisms.trained import CalibratedModel, sampling
from privpix.privacy import sgm_rdp
from privpix.privacy.composition import NoiseEvent, SampledGaussianNoise, compose
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import NeighbourPair, Neighbours
from privpix.privacy.noise import make_rng, torch_seed

FORMAT = "privpix-dp-sgd-1"
ACCOUNTANT = "Opacus RDP accountant (sampled Gaussian mechanism, Poisson sampling; Mironov et al. 2019)"
# The accountant's ε for the calibrated noise lies in [(1 − TOLERANCE)·ε, ε].
TOLERANCE = 1e-3
# RDP orders searched for the (ε, δ) conversion: Opacus's defaults (1.1 to 63) and larger ones, which give the
# smallest ε when few steps are taken at a large ε (every order > 1 gives a valid bound; the minimum is taken).
ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + list(range(64, 257, 8)) + [320, 384, 512, 1024]

# Parameters that only shape the fit (a model file records them, and they become the ones in force).
TRAINING = ("n_classes", "features", "epochs", "batch_size", "lr", "lr_decay", "momentum", "max_grad_norm")


# ------------------------------------------------------------------------------------------ calibration


def epsilon_of(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """ε of ``steps`` sampled Gaussian mechanisms (Poisson rate ``sample_rate``, noise multiplier z) at ``delta``,
    by Opacus's RDP accountant (add/remove neighbours; :mod:`privpix.privacy.sgm_rdp`: Opacus's numbers, faster)."""
    return float(sgm_rdp.epsilon(float(noise_multiplier), float(sample_rate), int(steps), delta, ALPHAS))


@functools.lru_cache(maxsize=64)
def noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """The smallest z (to a relative ε tolerance of 0.1 %) for which ``steps`` sampled Gaussian mechanisms at
    ``sample_rate`` are (ε, δ)-DP by Opacus's RDP accountant; the accountant's ε for it is at most ``epsilon``.
    (Opacus's ``get_noise_multiplier``, reproduced bit for bit by :mod:`privpix.privacy.sgm_rdp` in a fraction of
    its time; cached, as every seed of a benchmark asks the same question.)"""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ParameterError(f"DP-SGD needs epsilon > 0 and delta in (0, 1), got {epsilon}, {delta}")
    try:
        z = float(
            sgm_rdp.noise_multiplier(
                target_epsilon=epsilon,
                target_delta=delta,
                sample_rate=sample_rate,
                steps=int(steps),
                epsilon_tolerance=TOLERANCE * epsilon,
                alphas=ALPHAS,
            )
        )
    except ValueError as exc:  # Opacus: "The privacy budget is too low."
        raise ParameterError(f"dp-sgd: no noise multiplier reaches ε={epsilon:g}, δ={delta:g} ({exc})") from None
    # The search returns the upper end of its bracket; checked again so the claim never rests on its loop.
    if epsilon_of(z, sample_rate, steps, delta) > epsilon:  # pragma: no cover - guards a change in Opacus
        raise AssertionError(f"dp-sgd: the accountant's ε for z={z} exceeds {epsilon}")
    return z


# ------------------------------------------------------------------------------------------ neighbours


class OneExampleAddedOrRemoved(Neighbours):
    """Two training sets, one of them the other plus one (image, label) pair: the add/remove relation of DP-SGD's
    accountant. The pairs are whole training sets (``dataset_level``); the differing example is the last one of
    the larger set (``index``)."""

    key = "add-remove"
    dataset_level = True
    removes = True

    def wording(self) -> str:
        return "one image and its label of the training set, added or removed"

    def pairs(self, images: ImageSet) -> list[NeighbourPair]:
        n = len(images)
        if n < 3:
            raise ParameterError("audit: an add/remove audit needs at least 3 images")
        flat = images.flat()
        far = int(np.argmax(np.linalg.norm(flat - flat.mean(axis=0), axis=1)))
        rest = np.delete(np.arange(n), far)
        return [
            NeighbourPair("training set vs its last image removed", images, images.subset(np.arange(n - 1)), n - 1),
            NeighbourPair(
                "training set without vs with its least typical image",
                images.subset(rest),
                images.subset(np.append(rest, far)),
                n - 1,
            ),
        ]


# ------------------------------------------------------------------------------------------ mechanism


@register
class DPSGD(CalibratedModel, ModelMechanism, Auditable):
    """A classifier trained on the private images with DP-SGD (Opacus): the choice of publishing no images. A
    release is the trained model (``output == "model"``): ``save_model`` writes it, :meth:`predict` applies it;
    :meth:`release` refuses, since there are no images to publish. See the module docstring for the algorithm, the
    add/remove relation, what is public and the accountant.

    ``model=FILE`` loads a fitted model (``save_model``): weights and the (ε, δ, n) it was trained for; ``epsilon``
    and ``delta`` must then be the file's."""

    name = "dp-sgd"
    summary = "DP-SGD classifier (Abadi et al. 2016, Opacus): releases a model, no images; (ε, δ)-DP per example"
    about = About(
        paper="Abadi et al. 2016 (DP-SGD); Tramèr & Boneh 2021 (CNN)",
        guarantee_model="central-dp",
        soundness="sound (ε, δ)-DP per example (add/remove, Poisson sampling); z from Opacus's RDP accountant",
        uses_epsilon=True,
        uses_delta=True,
        use="model",
        recommended_for="any private images, when a trained model is all that is needed",
    )
    model: str = param("", "fitted model file; empty: fit() trains on the private images it is given")
    features: str = param(
        "pixels",
        "pixels: Tramèr & Boneh's Tanh CNN trained end to end; scatternet: their "
        "ScatterNet + linear (fixed wavelet features, kymatio; only the dense layer trained), with e.g. "
        "batch_size=4096, lr=4, epochs=15 (ε = 1) or 30 (ε = 3)",
        choices=("pixels", "scatternet"),
    )
    epochs: int = param(15, "training: epochs of round(n / batch_size) noisy steps", minimum=1)
    batch_size: int = param(256, "training: expected batch size (Poisson sampling, q = batch_size / n)", minimum=1)
    lr: float = param(2.0, "training: SGD learning rate (on the clipped, noised mean gradient)", minimum=1e-12)
    lr_decay: float = param(1.0, "training: learning-rate factor after each epoch, in (0, 1]", minimum=1e-6)
    momentum: float = param(0.9, "training: SGD momentum in [0, 1)", minimum=0.0)
    max_grad_norm: float = param(0.1, "training: C, the L2 norm each example's gradient is clipped to", minimum=1e-12)

    training: ClassVar[dict[str, str]] = {k: k for k in TRAINING}
    calibration_tolerance: ClassVar[float] = TOLERANCE
    _on_epoch: Callable[[int, Any], None] | None = None
    # The last training's per-epoch loss and seconds, kept in memory only: the loss is a noise-free statistic of
    # the private batches (and the time grows with the sampled batch sizes), so neither goes into the model file.
    history_: dict | None = None

    def _check(self) -> None:
        if not self.momentum < 1:
            raise ParameterError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.lr_decay > 1:
            raise ParameterError(f"lr_decay must be in (0, 1], got {self.lr_decay}")

    def _check_delta(self) -> None:
        if not self.delta > 0:
            raise ParameterError("dp-sgd: the sampled Gaussian mechanism needs a delta in (0, 1), e.g. --delta 1e-5")

    def _secure(self) -> dict[str, Any]:
        return {
            "secure": None,
            "not_secure": "its noise is torch's floating-point Gaussian through Opacus (no exact sampler)",
        }

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """The claim at ε for one example added or removed with n public, and, once its noise is known (fitted, or
        planned on ``n``), a caveat with the ε for one example replaced: the relation that holds while n is known
        (the model file records it, and q and T follow from it), and the ledger's. That is dp-accounting's
        replace-one PLD of the same sampled Gaussian steps, what a ledger's PLD composition charges (1.61 for a fit
        at ε = 1, δ = 1e-5 on n = 60,000 with the defaults); basic composition charges (2ε, (1 + e^ε)δ)."""
        claim = super().privacy(data, n, secure=secure)
        if not claim.events:
            return claim
        replaced, _ = compose(list(claim.events), self.delta)
        stated = (
            f"for one (image, label) replaced by another, the relation that holds when n is known (the model file "
            f"records it): ε = {replaced:.4g} at δ = {self.delta:g} (dp-accounting's replace-one PLD of the same "
            f"noise, what a ledger's PLD figure charges; its basic sum charges 2ε = {2 * self.epsilon:g}). "
            f"ε = {self.epsilon:g} is for one example added or removed with n public (Abadi et al. 2016; Opacus)"
        )
        g = claim.guarantee
        return replace(claim, guarantee=replace(g, caveats=(*g.caveats, stated)))

    def _planned_events(self, shape: tuple[int, int, int], n: int | None) -> tuple[NoiseEvent, ...]:
        """T sampled Gaussian steps (add/remove) of a fit on ``n`` examples."""
        if n is None:
            raise ParameterError(
                f"{self.name}: its noise depends on the number of training examples n; give it (privpix ledger check "
                "--n N, or --dataset)"
            )
        q, _, steps, z = self._calibration(n)
        return (SampledGaussianNoise(z, q, steps),)

    def _recompute(self, meta: dict) -> tuple[float, tuple[NoiseEvent, ...]]:
        """q = batch_size / n and T = epochs · round(n / batch_size) from the recorded training parameters, and ε
        of T sampled Gaussian steps with the recorded z at the recorded δ by Opacus's RDP accountant."""
        n, delta, z = int(meta["n"]), float(meta["delta"]), float(meta["noise_multiplier"])
        if not (z > 0 and math.isfinite(z)) or n < 1 or not 0 < delta < 1:
            raise ValueError(f"noise_multiplier={z!r}, n={n!r}, delta={delta!r} out of range")
        if meta.get("accountant") != ACCOUNTANT:
            raise ValueError(f"accountant {meta.get('accountant')!r} is not {ACCOUNTANT!r}")
        q, per_epoch = sampling(n, float(meta["batch_size"]))
        steps = int(meta["epochs"]) * per_epoch
        if not math.isclose(float(meta["sample_rate"]), q, rel_tol=1e-12) or int(meta["steps"]) != steps:
            raise ValueError(
                f"sample_rate={meta['sample_rate']!r}, steps={meta['steps']!r} are not those of n={n}, "
                f"batch_size={meta['batch_size']}, epochs={meta['epochs']} (q={q:.6g}, {steps} steps)"
            )
        epsilon = epsilon_of(z, q, steps, delta)
        if not math.isclose(float(meta["epsilon_spent"]), epsilon, rel_tol=1e-9):
            raise ValueError(f"epsilon_spent={meta['epsilon_spent']!r} is not the accountant's {epsilon:.6g}")
        return epsilon, (SampledGaussianNoise(z, q, steps),)

    def neighbours(self) -> Neighbours:
        """Add/remove one (image, label) of the training set."""
        return OneExampleAddedOrRemoved()

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """A tiny fit (one epoch of 6 steps) on 60 built-in digits, and the same written to a model file and
        loaded."""
        from privpix.data import load_dataset

        data = load_dataset("builtin-mnist").subset(np.arange(0, 5000, 84))
        assert isinstance(data, ImageSet)  # the built-in digits are images
        tiny = {"epsilon": 1.0, "delta": 1e-5, "epochs": 1, "batch_size": 10}
        path = cls(**tiny).fit(data, seed=0).save_model(workdir / "dp-sgd.pt")
        loaded = {"epsilon": 1.0, "delta": 1e-5, "model": str(path)}
        return [ConformanceCase(tiny, data), ConformanceCase(loaded, data.subset(np.arange(12)))]

    # -------------------------------------------------------------------------------------- fitting

    def _calibration(self, n: int) -> tuple[float, int, int, float]:
        """(q, steps per epoch, steps T, noise multiplier z) of a fit on ``n`` examples."""
        q, per_epoch = sampling(n, self.batch_size)
        steps = self.epochs * per_epoch
        return q, per_epoch, steps, noise_multiplier(self.epsilon, self.delta, q, steps)

    def _audited_run(self, images: ImageSet) -> tuple[float, int, float]:
        """(q, T, z) the audit tests: the fitted model's own (a named model file is read first), else a fit's on
        ``images``."""
        if self.model and not self.is_fitted:
            self.fit(None)
        meta = self._fitted_meta()
        if meta is not None:
            return float(meta["sample_rate"]), int(meta["steps"]), float(meta["noise_multiplier"])
        q, _, steps, z = self._calibration(len(images))
        return q, steps, z

    white_box: ClassVar[bool] = True

    def white_box_trials(self, images: ImageSet, trials: int, seed: int) -> WhiteBoxTrials:
        """Dirac gradient canaries through the real training loop (:func:`dp_sgd_training.dirac_canary_scores`): the
        adversary sees every noisy gradient (the guarantee covers every iterate) and crafts the rest of the
        training set, the strongest threat model DP-SGD's accounting covers. It tests the sampler, the clipping,
        the noise, the step count and the calibration of z for the fitted model's (q, T) or, unfitted, for a fit
        on ``images``; not the CNN, whose forward pass does not touch the privacy argument."""
        from privpix.mechanisms import dp_sgd_training

        q, steps, z = self._audited_run(images)
        rng = make_rng(seed)
        scores = dp_sgd_training.dirac_canary_scores(
            trials,
            noise_multiplier=z,
            max_grad_norm=self.max_grad_norm,
            sample_rate=q,
            # One epoch of T steps: the learning rate is 0 in the audit, so only the count of steps matters.
            steps_per_epoch=steps,
            epochs=1,
            sample_seed=torch_seed(rng),
            noise_seed=torch_seed(rng),
        )
        return WhiteBoxTrials(
            scores.s0,
            scores.s1,
            f"white-box: a Dirac gradient canary added or removed ({trials} canaries in "
            f"{-(-trials // dp_sgd_training.CANARY_CHUNK)} run(s), crafted linear "
            f"model, q = {q:.4g}, {steps} steps, z = {z:.4g})",
            "log-likelihood ratio of the canary coordinate's noisy gradients over all steps",
        )

    def fit(
        self,
        data: ImageSet | RecordSet | None = None,
        *,
        seed: int | None = None,
        on_epoch: Callable[[int, Any], None] | None = None,
    ) -> DPSGD:
        """With ``model``: load the file. Without: train on ``data`` (labelled images, (n, h, w, c) in [0, 1]) with
        DP-SGD. ``seed`` seeds the weights, the Poisson sampling and the noise (reproducible: whoever knows the seed
        can remove the noise); ``None`` seeds them from OS entropy, as a real release should.

        ``on_epoch(epoch, network)`` runs after each epoch (1-based) on the network in eval mode, e.g. to keep
        checkpoints; what it reads beyond the network is its own business: a checkpoint chosen on private data is
        not covered by ε."""
        self._on_epoch = on_epoch
        try:
            super().fit(data, seed=seed)
        finally:
            self._on_epoch = None
        return self

    def _train(self, data, seed: int | None):
        labels = self._labels(data, "a classifier is trained on them")
        if self.n_classes < 2:
            raise ParameterError(f"{self.name}: a classifier needs at least 2 classes, the data set declares 1")
        n, (h, w, c) = len(data), data.shape
        from privpix.mechanisms import dp_sgd_training

        if self.features == "pixels" and min(dp_sgd_training.conv_sides(h, w)) < 1:
            raise ParameterError(f"{self.name}: images of {h}x{w} are too small for the CNN (at least 14x14)")
        q, _, steps, z = self._calibration(n)
        seeded = seed is not None
        rng = make_rng(int(seed)) if seed is not None else None
        seeds = (torch_seed(rng), torch_seed(rng), torch_seed(rng))
        t0 = time.perf_counter()
        net, history, accountant = dp_sgd_training.fit_classifier(
            data.as_float(), labels, self.n_classes, self.features, steps=steps, epochs=self.epochs, seeds=seeds,
            on_epoch=self._on_epoch, noise_multiplier=z, max_grad_norm=self.max_grad_norm,
            batch_size=float(self.batch_size), lr=self.lr, lr_decay=self.lr_decay, momentum=self.momentum,
        )  # fmt: skip
        spent = float(accountant.get_epsilon(delta=self.delta, alphas=ALPHAS))
        if spent > self.epsilon:  # pragma: no cover - guards the calibration
            raise AssertionError(f"dp-sgd: ε spent {spent} > {self.epsilon}")
        meta = {
            **self._meta_head((h, w, c), n, data.class_names),
            "sample_rate": q,
            "steps": steps,
            "noise_multiplier": z,
            "epsilon_spent": spent,
            "accountant": ACCOUNTANT,
            "seed": None if seed is None else int(seed),
            "noise_rng": f"torch generators seeded from {'the fit seed' if seeded else 'OS entropy'}",
            "fitted_on": f"{data.source or 'the given images'} ({n} images)",
        }
        self.history_ = {**history, "train_seconds": round(time.perf_counter() - t0, 3)}
        return net, meta

    def _read_model(self, path: str):
        return load_model(path)

    def _write_model(self, path: Path) -> Path:
        """The network's weights, the guarantee's ε, δ and n, the accountant's numbers, every training parameter."""
        from privpix.mechanisms.modelfile import save_model_file

        net, meta = self._load()
        state = {f"network.{k}": v for k, v in net.state_dict().items()}
        return save_model_file(path, state, {"format": FORMAT, **meta})

    # -------------------------------------------------------------------------------------- the model

    def network(self):
        """The released model: the trained ``torch.nn.Module`` (eval mode), mapping (m, c, h, w) float32 images in
        [0, 1] to (m, K) logits. Anything computed from it alone is covered by the guarantee."""
        return self._load()[0]

    def predict(self, images: ImageSet) -> np.ndarray:
        """(n,) int64 labels the released model predicts for ``images`` (of the shape it was trained on)."""
        from privpix.mechanisms import dp_sgd_training

        net, meta = self._load()
        if not isinstance(images, ImageSet):
            raise ParameterError(f"{self.name}: predict expects an ImageSet, got {type(images).__name__}")
        h, w, c = meta["shape"]
        if tuple(images.shape) != (h, w, c):
            raise ParameterError(f"{self.name}: the model takes {h}x{w} images with {c} channel(s), got {images.shape}")
        return dp_sgd_training.predict(net, images.as_float())

    def membership_score(self, images: ImageSet) -> np.ndarray:
        """(n,) minus the released model's cross-entropy on each labelled image (post-processing of the model):
        the one-run audit's score for its canaries."""
        from privpix.mechanisms import dp_sgd_training

        if not isinstance(images, ImageSet) or images.labels is None:
            raise ParameterError(f"{self.name}: membership_score needs labelled images")
        net, _ = self._load()
        z = dp_sgd_training.logits(net, images.as_float()).astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return log_p[np.arange(len(images)), np.asarray(images.labels, dtype=np.int64)]

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """(ε, δ)-DP for one (image, label) of the training set added or removed (central DP, per image ε = ε)."""
        self._check_delta()
        caveats = [
            "add/remove neighbours: training sets that differ by one (image, label) pair added or removed; replacing "
            "one is two such changes, covered only by group privacy at (2ε, (1 + e^ε)δ). n, the image shape, the K "
            "classes, the architecture and the training parameters are public",
            "Poisson sampling as implemented by Opacus (each example in each step independently with probability "
            "q = batch_size / n); per-example gradients clipped to L2 norm max_grad_norm; Gaussian noise of std "
            f"z·max_grad_norm on their sum; z from the {ACCOUNTANT}, ε checked on the steps actually taken",
            "what is released is the model (every intermediate iterate is covered too); its predictions are "
            "post-processing, except predictions on the private training images, which are a new use of them",
            "hyperparameter tuning or checkpoint selection on private data is not covered",
            "floating-point Gaussian noise (torch's sampler through Opacus's secure_mode construction) from a "
            "Mersenne-Twister generator seeded from the seed or from OS entropy: not a CSPRNG, not an exact "
            "discrete Gaussian",
        ]
        meta = self._fitted_meta()
        if meta is not None:
            n = meta["n"]
            caveats.append(
                f"fitted on {meta['fitted_on']}: n = {n}, q = {meta['sample_rate']:.4g}, {meta['steps']} steps, "
                f"noise multiplier z = {meta['noise_multiplier']:.4g}, accountant's ε = {meta['epsilon_spent']:.4g}"
            )
        return self._central_guarantee(caveats, self.neighbours().wording())


def load_model(path: str | Path):
    """(network, meta) from a file written by :meth:`DPSGD.save_model`; weights only, no code unpickled."""
    from privpix.mechanisms.modelfile import build_from_file, load_model_file

    state, meta = load_model_file(path, FORMAT, "dp-sgd")

    def build():
        from privpix.mechanisms import dp_sgd_training

        features = meta.get("features", "pixels")  # files written before ScatterNet are the CNN's
        # Seed 0: the drawn weights are replaced by the file's.
        net = dp_sgd_training.build_network(tuple(meta["shape"]), int(meta["n_classes"]), 0, features)
        net.load_state_dict({k.removeprefix("network."): v for k, v in state.items()})
        return net

    net = build_from_file(path, "dp-sgd", build)
    net.eval()
    return net, meta
