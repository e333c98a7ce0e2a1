"""``dp-teacher``: synthetic labelled images whose pictures come from DP-MERF and whose labels come from a DP-SGD
classifier, two DP releases of the same private set composed under one (ε, δ) claim.

Why: DP-MERF's generator learns what digits look like from a noisy mean embedding, but about a quarter of the
images it draws for class k look like another class (its MNIST images train a CNN to 0.87, whatever ε). A
ScatterNet + linear classifier trained with DP-SGD (Tramèr & Boneh 2021) reaches 0.98 at ε = 1 but publishes no
images. Labelling the generator's images with that classifier moves the synthetic set's decision boundary to the
classifier's: on MNIST at ε = 1 a CNN trained on the images alone scores 0.927 against dp-merf's 0.864 (3 seeds,
epoch chosen on synthetic images; ``benchmarks/results/dp_synthesis_protocol.md``).
This is knowledge transfer from a DP teacher to unlabelled synthetic inputs, as in PATE's student (Papernot et al.
2017), with DP-MERF's images in place of public ones.

The mechanism:

1. The embedding release of :mod:`~privpix.mechanisms.synthesis.dp_merf` (one Gaussian release of the labelled
   random-feature mean embedding, sensitivity 2/n under replace-one), with noise multiplier z_g calibrated by the
   analytic Gaussian mechanism to (1 − ``teacher_share``)·ε at δ; the generator trained on it as dp-merf's.
2. The teacher: :mod:`~privpix.mechanisms.neural.dp_sgd`'s ScatterNet + linear, trained with DP-SGD (Opacus; Poisson
   sampling at q = ``teacher_batch_size`` / n, T = ``teacher_epochs`` · round(1/q) steps, per-example clipping to
   ``teacher_max_grad_norm``, Gaussian noise of multiplier z_t).
3. z_t is the smallest (to 0.1 % in ε, by bisection) for which the composition of the two releases is (ε, δ)-DP
   under **replace-one**: dp-accounting's pessimistic privacy-loss distributions
   (:func:`privpix.privacy.composition.compose`; the teacher's steps as REPLACE_ONE Poisson-sampled Gaussians), the same
   accountant the ledger composes with, so a fit charges exactly its claim.
4. Post-processing only: a release draws labels k from the DP class proportions and images G(z, k) from the
   generator, then publishes the teacher's label for each image (its argmax), not k.

Public (assumed known, not protected): n, the image shape, the K classes, the random features' seed and every
training parameter. The guarantee: central (ε, δ)-DP per (image, label) of the private set, replace-one. Not
available with exact noise (``secure``): the teacher's noise is Opacus's floating-point Gaussian.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.data.overlap import CHECK_CAVEAT
from privpix.errors import ParameterError
from privpix.mechanisms.base import ConformanceCase, WhiteBoxTrials
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.mechanisms.synthesis import embedding
from privpix.mechanisms.synthesis.dp_merf import DPMERF
from privpix.mechanisms.trained import sampling
from privpix.privacy.composition import GaussianNoise, NoiseEvent, SampledGaussianNoise, compose
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import RNG, make_rng, torch_seed

FORMAT = "privpix-dp-teacher-1"
ACCOUNTANT = "dp-accounting PLD, pessimistic (the embedding's Gaussian and the teacher's Poisson-sampled steps)"
TOLERANCE = 1e-3  # the composed ε of the calibrated noise lies in [(1 − TOLERANCE)·ε, ε]
# The largest teacher noise multiplier tried is 2^MAX_DOUBLINGS (65,536); none larger is ever needed.
MAX_DOUBLINGS = 16

# The teacher's parameters, all training ones (after DP-MERF's).
TEACHER_TRAINING = ("teacher_share", "teacher_epochs", "teacher_batch_size", "teacher_lr", "teacher_momentum",
                    "teacher_max_grad_norm")  # fmt: skip


def teacher_sampling(n: int, batch_size: int, epochs: int) -> tuple[float, int]:
    """(q, T) of the teacher's DP-SGD on n images: q = batch / n, T = epochs · round(n / batch)."""
    if batch_size > n:
        raise ParameterError(
            f"dp-teacher: teacher_batch_size={batch_size} exceeds the {n} private images; give teacher_batch_size "
            f"<= {n} (e.g. teacher_batch_size={max(1, n // 4)})"
        )
    q, per_epoch = sampling(n, batch_size)
    return q, epochs * per_epoch


def events(z_embedding: float, z_teacher: float, q: float, steps: int) -> tuple[NoiseEvent, ...]:
    """The fit's two releases: one Gaussian (replace-one, sensitivity-normalised) and T sampled Gaussian steps."""
    return (GaussianNoise(z_embedding), SampledGaussianNoise(z_teacher, q, steps))


def composed_epsilon(z_embedding: float, z_teacher: float, q: float, steps: int, delta: float) -> float:
    return compose(list(events(z_embedding, z_teacher, q, steps)), delta)[0]


@functools.lru_cache(maxsize=32)
def teacher_noise(epsilon: float, delta: float, z_embedding: float, q: float, steps: int) -> float:
    """The smallest teacher noise multiplier (to ``TOLERANCE`` in ε) for which the embedding release at
    ``z_embedding`` and ``steps`` teacher steps at rate ``q`` compose to (ε, δ)-DP under replace-one."""
    if composed_epsilon(z_embedding, 1e6, q, steps, delta) >= epsilon:
        raise ParameterError(
            f"dp-teacher: the embedding alone spends ε = {epsilon:g} or more; lower teacher_share or raise ε"
        )
    # hi: the smallest power of two 2^k, k in [0, MAX_DOUBLINGS], that keeps the claim. Found by bisection on k
    # (ε(z) decreases in z), not by doubling from 1: the PLD of a small z is the costly one (1-2 s at z = 1, tens
    # of milliseconds at z = 64), and only 2^k and 2^(k-1) near the answer need be built.
    # A guard: with the embedding alone below ε, a large z always reaches it.
    if composed_epsilon(z_embedding, 2.0**MAX_DOUBLINGS, q, steps, delta) > epsilon:  # pragma: no cover
        raise ParameterError(f"dp-teacher: no teacher noise reaches ε={epsilon:g}, δ={delta:g}")
    failing, keeping = -1, MAX_DOUBLINGS  # exponents: 2^keeping keeps the claim; 2^failing breaks it (-1: untried)
    while keeping - failing > 1:
        k = (failing + keeping) // 2
        if composed_epsilon(z_embedding, 2.0**k, q, steps, delta) > epsilon:
            failing = k
        else:
            keeping = k
    hi = 2.0**keeping
    lo = hi / 2
    while composed_epsilon(z_embedding, lo, q, steps, delta) <= epsilon:
        lo /= 2
        if lo < 1e-3:
            raise ParameterError(
                f"dp-teacher: ε={epsilon:g} is reached with almost no teacher noise (z < 0.001); lower ε or "
                "teacher_share"
            )
    # Bisection in log z: ε(z) decreases in z; `hi` always keeps the claim, `lo` always breaks it.
    for _ in range(60):
        if composed_epsilon(z_embedding, hi, q, steps, delta) >= epsilon * (1 - TOLERANCE):
            return hi
        mid = math.sqrt(lo * hi)
        if composed_epsilon(z_embedding, mid, q, steps, delta) > epsilon:
            lo = mid
        else:
            hi = mid
    # The PLD's grid makes ε(z) a step function at tiny ε: a claim it cannot meet to 0.1 % is refused, not written.
    raise ParameterError(
        f"dp-teacher: cannot calibrate the teacher's noise to within {TOLERANCE:.1%} of ε={epsilon:g}; raise ε"
    )


@register
class DPTeacher(DPMERF):
    """DP-MERF's synthetic images labelled by a DP-SGD ScatterNet classifier (the teacher); both fitted on the
    private set under one composed (ε, δ) (see the module docstring). ``model=FILE`` loads a fitted model: the
    generator, the noisy embedding, the teacher's weights and the (ε, δ, n) they were calibrated for."""

    name = "dp-teacher"
    summary = ("DP-MERF images labelled by a DP-SGD ScatterNet teacher (two releases, PLD-composed); (ε, δ)-DP per "
               "image")  # fmt: skip
    about = replace(
        DPMERF.about,
        paper="Harder et al. 2021 (DP-MERF); Tramèr & Boneh 2021 (ScatterNet DP-SGD); Papernot et al. 2017 (teacher)",
        soundness="sound (ε, δ)-DP per image (replace-one, n public); the two releases composed by dp-accounting's PLD",
        recommended_for="a labelled set of tens of thousands of images (alias dp-synth)",
        recommended_on=("mnist",),
    )
    teacher_share: float = param(
        0.75,
        "share of ε the teacher is given: the embedding is calibrated alone to "
        "(1 − share)·ε, then the teacher's noise so that both together are (ε, δ)-DP",
        minimum=1e-3,
    )
    teacher_epochs: int = param(15, "teacher: epochs of round(n / teacher_batch_size) DP-SGD steps", minimum=1)
    teacher_batch_size: int = param(
        4096, "teacher: expected batch (Poisson sampling, q = batch / n); at most n", minimum=1
    )
    teacher_lr: float = param(4.0, "teacher: SGD learning rate", minimum=1e-12)
    teacher_momentum: float = param(0.9, "teacher: SGD momentum in [0, 1)", minimum=0.0)
    teacher_max_grad_norm: float = param(
        0.1, "teacher: C, the L2 norm each example's gradient is clipped to", minimum=1e-12
    )
    training: ClassVar[dict[str, str]] = {**DPMERF.training, **{k: k for k in TEACHER_TRAINING}}
    FORMAT = FORMAT
    calibration_tolerance = TOLERANCE
    conformance_tiny: ClassVar[dict] = {**DPMERF.conformance_tiny, "teacher_epochs": 1, "teacher_batch_size": 10}
    teacher_: Any = None  # the fitted (or loaded) teacher network
    history_: dict | None = None  # the last fit's teacher loss and seconds (kept out of the model file)
    accountant_name: ClassVar[str] = ACCOUNTANT
    # About 0.9 ms per 28×28 digit on one core, three quarters of it the teacher's scattering transform.
    _seconds_per_value: ClassVar[float] = 1.1e-6

    def _check_features(self) -> None:
        super()._check_features()
        if not self.teacher_share < 1:
            raise ParameterError(f"{self.name}: teacher_share must be in (0, 1), got {self.teacher_share}")
        if not self.teacher_momentum < 1:
            raise ParameterError(f"{self.name}: teacher_momentum must be in [0, 1), got {self.teacher_momentum}")
        if self.secure:
            raise ParameterError(f"{self.name}: secure=true is not available: {self._secure()['not_secure']}")

    def _check_shape(self, shape: tuple[int, int, int]) -> None:
        super()._check_shape(shape)
        h, w, _ = shape
        if h % 4 or w % 4:
            raise ParameterError(
                f"{self.name}: the teacher's ScatterNet needs h and w divisible by 4, got {h}x{w}; resize (e.g. "
                "--size 28x28)"
            )

    def _secure(self) -> dict[str, Any]:
        return {
            "secure": None,
            "not_secure": "the teacher's DP-SGD noise is Opacus's floating-point Gaussian (no exact sampler)",
        }

    # ------------------------------------------------------------------------------------------- calibration

    def _embedding_noise_multiplier(self) -> float:
        return embedding.noise_multiplier((1 - self.teacher_share) * self.epsilon, self.delta)

    def _calibration(self, n: int) -> tuple[float, int, float, float]:
        """(q, T, z_embedding, z_teacher) of a fit on ``n`` images."""
        q, steps = teacher_sampling(n, self.teacher_batch_size, self.teacher_epochs)
        z_g = self._embedding_noise_multiplier()
        return q, steps, z_g, teacher_noise(self.epsilon, self.delta, z_g, q, steps)

    def _planned_events(self, shape: tuple[int, int, int], n: int | None) -> tuple[NoiseEvent, ...]:
        self._check_delta()
        if n is None:
            raise ParameterError(
                f"{self.name}: its noise depends on the number of private images n; give it (privpix ledger check "
                "--n N, or --dataset)"
            )
        q, steps, z_g, z_t = self._calibration(n)
        return events(z_g, z_t, q, steps)

    def _recompute(self, meta: dict) -> tuple[float, tuple[NoiseEvent, ...]]:
        """The embedding's σ = z_g·2/n (checked as dp-merf's), the teacher's q and T from n and its recorded
        parameters, and ε of both composed by dp-accounting's PLD at the recorded δ."""
        super()._recompute(meta)  # checks the embedding's recorded noise
        share_z = embedding.noise_multiplier((1 - float(meta["teacher_share"])) * float(meta["epsilon"]),
                                             float(meta["delta"]))  # fmt: skip
        if not math.isclose(float(meta["noise_multiplier"]), share_z, rel_tol=1e-9):
            raise ValueError(
                f"noise_multiplier={meta['noise_multiplier']!r} is not the embedding's share of ε "
                f"(teacher_share={meta['teacher_share']!r}: {share_z:.6g})"
            )
        if meta.get("teacher_accountant") != ACCOUNTANT:
            raise ValueError(f"teacher_accountant {meta.get('teacher_accountant')!r} is not {ACCOUNTANT!r}")
        n, delta = int(meta["n"]), float(meta["delta"])
        z_g, z_t = float(meta["noise_multiplier"]), float(meta["teacher_noise_multiplier"])
        if not (z_t > 0 and math.isfinite(z_t)):
            raise ValueError(f"teacher_noise_multiplier={z_t!r} out of range")
        q, steps = teacher_sampling(n, int(meta["teacher_batch_size"]), int(meta["teacher_epochs"]))
        recorded_q, recorded_steps = float(meta["teacher_sample_rate"]), int(meta["teacher_steps"])
        if not math.isclose(recorded_q, q, rel_tol=1e-12) or recorded_steps != steps:
            raise ValueError(
                f"teacher_sample_rate={meta['teacher_sample_rate']!r}, teacher_steps={meta['teacher_steps']!r} are "
                f"not those of n={n} and the teacher's batch and epochs (q={q:.6g}, {steps} steps)"
            )
        return composed_epsilon(z_g, z_t, q, steps, delta), events(z_g, z_t, q, steps)

    def released_statistic(self, data: ImageSet, rng: RNG | None, *, seed: int) -> None:
        """None: the fit makes two DP releases (the embedding and the teacher's DP-SGD), and testing the embedding
        alone against the composed claim would call a test that cannot see the teacher's noise an audit. The
        audit runs :meth:`white_box_trials`, which sees both."""
        return None

    # ------------------------------------------------------------------------------------------- audit

    white_box: ClassVar[bool] = True

    def _audited_run(self, images: ImageSet) -> tuple[float, int, float, float]:
        """(q, T, z_embedding, z_teacher) the audit tests: the fitted model's (a named model file is read first),
        else those of a fit on ``images``."""
        if self.model and not self.is_fitted:
            self.fit(None)
        meta = self._fitted_meta()
        if meta is not None:
            return (float(meta["teacher_sample_rate"]), int(meta["teacher_steps"]),
                    self._embedding_noise_multiplier(), float(meta["teacher_noise_multiplier"]))  # fmt: skip
        return self._calibration(len(images))

    def white_box_trials(self, images: ImageSet, trials: int, seed: int) -> WhiteBoxTrials:
        """Both releases of a fit, each through its real code, under one replaced record; the score of a trial is
        the sum of the two log-likelihood ratios, the most powerful test of the composed pair.

        - The embedding: dp-merf's release (:meth:`released_statistic` of the embedding base, the real noise at
          this mechanism's z_g) of the two private sets of the :meth:`neighbours` pair built from ``images`` whose
          noise-free embeddings lie furthest apart; its statistic is the noisy embedding's projection on that
          difference, N(0, 1) against N(μ, 1) in units of σ, μ = ‖difference‖ / σ ≤ 1/z_g.
        - The teacher: a Dirac gradient canary replaced by its opposite, through the real DP-SGD loop at the
          teacher's (q, T, z_t, C) (:func:`dp_sgd_training.dirac_canary_scores`, ``relation="replace-one"``): the
          adversary crafts the gradients and sees every step, the strongest threat model the accounting covers.

        The record is one whose embedding features are those of the pair's replaced image and whose clipped
        gradient is the canary's: a record the guarantee covers, since it holds for any images and any loss."""
        from privpix.mechanisms import dp_sgd_training

        q, steps, z_g, z_t = self._audited_run(images)
        rng = make_rng(seed)
        fixed = int(rng.integers(0, 2**31))
        release = self._embedding_release  # the embedding's real release (this class's released_statistic says None)
        sides = []
        for pair in self.neighbours().pairs(images):
            c0 = np.asarray(release(pair.a, None, seed=fixed), dtype=np.float64)
            c1 = np.asarray(release(pair.b, None, seed=fixed), dtype=np.float64)
            sides.append((float(np.linalg.norm(c1 - c0)), pair, c0, c1))
        gap, pair, c0, c1 = max(sides, key=lambda s: s[0])
        sigma = z_g * embedding.sensitivity(len(pair.a))
        mu = gap / sigma
        u = (c1 - c0) / gap if gap > 0 else np.zeros_like(c0)

        def projections(side: ImageSet) -> np.ndarray:
            return np.array([float((release(side, rng, seed=fixed) - c0) @ u) / sigma for _ in range(trials)])

        e0, e1 = projections(pair.a), projections(pair.b)
        canary = dp_sgd_training.dirac_canary_scores(
            trials, noise_multiplier=z_t, max_grad_norm=self.teacher_max_grad_norm, sample_rate=q,
            steps_per_epoch=steps, epochs=1, sample_seed=torch_seed(rng), noise_seed=torch_seed(rng),
            relation="replace-one",
        )  # fmt: skip
        return WhiteBoxTrials(
            mu * e0 - mu**2 / 2 + canary.s0,
            mu * e1 - mu**2 / 2 + canary.s1,
            f"white-box, one record replaced: the embedding on '{pair.name}' (μ = {mu:.4g} of at most "
            f"{1 / z_g:.4g}) and a Dirac gradient canary replaced by its opposite in the teacher's DP-SGD (q = "
            f"{q:.4g}, {steps} steps, z = {z_t:.4g})",
            "sum of the two log-likelihood ratios: the noisy embedding projected on its noise-free difference, and "
            "the canary coordinate's noisy gradients over all steps",
        )

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """dp-merf's tiny fit and its model file; no secure case (refused)."""
        return super().conformance_cases(workdir)[:2]

    # ------------------------------------------------------------------------------------------- fitting

    def _train(self, data, seed: int | None):
        labels = self._labels(data, "the teacher is a classifier; use dp-merf for one class or unlabelled images")
        if self.n_classes < 2:
            raise ParameterError(
                f"{self.name}: the teacher is a classifier and the data set declares {self.n_classes} class; use "
                "dp-merf for one class or unlabelled images"
            )
        n = len(data)
        q, steps, _, z_t = self._calibration(n)  # refused (batch > n, budget) before the private images are read
        gen, meta = super()._train(data, seed)
        from privpix.mechanisms import dp_sgd_training

        # Its own stream: the generator's draws stay those of a dp-merf fit with the same seed.
        rng = np.random.default_rng([int(seed), 29]) if seed is not None else None
        t0 = time.perf_counter()
        # Its accountant only counts the steps the optimizer takes (its ε is not the claim's: the PLD composition is).
        self.teacher_, history, accountant = dp_sgd_training.fit_classifier(
            data.as_float(), labels, self.n_classes, "scatternet", steps=steps, epochs=self.teacher_epochs,
            seeds=(torch_seed(rng), torch_seed(rng), torch_seed(rng)), noise_multiplier=z_t,
            max_grad_norm=self.teacher_max_grad_norm, batch_size=float(self.teacher_batch_size), lr=self.teacher_lr,
            lr_decay=1.0, momentum=self.teacher_momentum,
        )  # fmt: skip
        # The guarantee is computed from (z_t, q, T): refuse a teacher whose optimizer took other noise or sampling.
        used = sorted({(float(z), float(r)) for z, r, _ in accountant.history})
        if len(used) != 1 or not (math.isclose(used[0][0], z_t, rel_tol=1e-9)
                                  and math.isclose(used[0][1], q, rel_tol=1e-9)):  # fmt: skip
            raise AssertionError(f"dp-teacher: the teacher trained with (noise, sample rate) {used}, not the "
                                 f"calibrated ({z_t:.6g}, {q:.6g})")  # fmt: skip
        meta.update(
            teacher_sample_rate=q,
            teacher_steps=steps,
            teacher_noise_multiplier=z_t,
            teacher_accountant=ACCOUNTANT,
        )
        # The loss is a noise-free statistic of the private batches: in memory only, never in the file (as dp-sgd).
        self.history_ = {**history, "teacher_seconds": round(time.perf_counter() - t0, 3)}
        return gen, meta

    def _read_extra(self, path: str, state: dict, meta: dict) -> None:
        from privpix.mechanisms.modelfile import build_from_file

        def build():
            from privpix.mechanisms import dp_sgd_training

            net = dp_sgd_training.build_network(tuple(meta["shape"]), int(meta["n_classes"]), 0, "scatternet")
            net.load_state_dict({k.removeprefix("teacher."): v for k, v in state.items() if k.startswith("teacher.")})
            return net

        self.teacher_ = build_from_file(path, self.name, build)
        self.teacher_.eval()

    def _extra_state(self) -> dict:
        """The teacher's weights beside dp-merf's generator and embedding."""
        return {f"teacher.{k}": v for k, v in self.teacher_.state_dict().items()}

    # ------------------------------------------------------------------------------------------- releasing

    def predict(self, images: ImageSet) -> np.ndarray:
        """(n,) int64 labels the released teacher gives ``images`` (of the fitted shape): post-processing."""
        from privpix.mechanisms import dp_sgd_training

        _, meta = self._load()
        if tuple(images.shape) != tuple(meta["shape"]):
            raise ParameterError(f"{self.name}: the teacher takes images of shape {tuple(meta['shape'])}, got "
                                 f"{images.shape}")  # fmt: skip
        return dp_sgd_training.predict(self.teacher_, images.as_float())

    def _synthesize(self, n: int, shape: tuple[int, int, int], rng: RNG) -> tuple[np.ndarray, np.ndarray | None]:
        """dp-merf's images, drawn class by class from the DP class proportions, published with the teacher's
        labels (post-processing of the two releases; the input images are not read)."""
        from privpix.mechanisms import dp_sgd_training

        images, _ = super()._synthesize(n, shape, rng)
        return images, dp_sgd_training.predict(self.teacher_, images)  # in chunks, as the teacher's own predict

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """(ε, δ)-DP for one image and its label of the private set replaced: the embedding release and the
        teacher's DP-SGD composed (central DP, per image ε = ε)."""
        self._check_delta()
        z_g = self._embedding_noise_multiplier()
        caveats = [
            "replace-one neighbours: private sets of the same size n that differ in one (image, label) pair; n, "
            "the image shape, the K classes, the kernel and the training parameters are public",
            f"two releases of the private set: one Gaussian release of the mean random-feature embedding "
            f"(sensitivity 2/n, noise multiplier {z_g:.6g}, calibrated alone to ε = "
            f"{(1 - self.teacher_share) * self.epsilon:.4g}) and the teacher's DP-SGD (ScatterNet + linear, Opacus, "
            "Poisson sampling, per-example clipping); composed by dp-accounting's pessimistic PLD under "
            "replace-one, the teacher's noise multiplier the smallest that keeps the composition within (ε, δ)",
            "the synthetic images and the teacher's labels are post-processing of those releases: generating more "
            "costs no ε",
            "floating-point Gaussian noise (NumPy for the embedding, torch through Opacus for the teacher), not an "
            "exact discrete Gaussian",
        ]
        if self.public:
            caveats.append(
                f"the generator was pretrained on the public set {self.public!r}, which is not protected: it is "
                "assumed public and distinct from the private set"
            )
            caveats.append(CHECK_CAVEAT)
        meta = self._fitted_meta()
        if meta is not None:
            caveats.append(
                f"fitted on {meta['fitted_on']}: n = {meta['n']}, σ = {meta['sigma']:.4g} per embedding value; "
                f"teacher: {meta['teacher_steps']} steps at q = {meta['teacher_sample_rate']:.4g}, noise multiplier "
                f"{meta['teacher_noise_multiplier']:.4g}"
            )
        return self._central_guarantee(caveats, embedding.UNIT)
