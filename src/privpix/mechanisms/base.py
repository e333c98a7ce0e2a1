"""The mechanism protocol: every privatization method plugs in here, and nothing downstream special-cases one."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple, Self, get_args

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.imageset import blocks as imageset_blocks
from privpix.errors import ParameterError, check_delta, check_positive
from privpix.mechanisms.params import Param, declared_params
from privpix.privacy.composition import NoiseEvent, Relation, approx
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import Neighbours, OneImage
from privpix.privacy.noise import RNG, make_rng

if TYPE_CHECKING:  # pandas (0.4 s to import) only where records are handled
    import pandas as pd


@dataclass
class Release:
    """What a mechanism publishes from images. (A mechanism whose :class:`Capabilities` ``output`` is ``"model"``
    publishes a model file, not a Release: its :meth:`Mechanism.release` refuses.)

    Attributes:
        images: the released images (float32 in [0, 1], same metadata as the input); ``None`` for a mechanism
            whose :class:`Capabilities` ``output`` is ``"features"``.
        guarantee: the privacy statement that holds for this release.
        mechanism: registered name.
        parameters: every parameter in force, defaults included (with ``epsilon`` and ``delta``).
        seconds: wall time of the release.
        source: the input images (labels, subjects, attributes ride along) when ``images`` is ``None`` or holds
            synthetic images (``output == "synthetic-images"``: as many new images as inputs, with their own
            labels, none of them a transform of an input).
    """

    images: ImageSet | None
    guarantee: Guarantee
    mechanism: str
    parameters: dict[str, Any]
    seconds: float = 0.0
    source: ImageSet | None = None

    def image_set(self) -> ImageSet:
        """The released images, for code that handles releases of images (transformed or synthetic); a feature
        release holds none."""
        if self.images is None:
            raise ParameterError(f"{self.mechanism}: released features, not images")
        return self.images

    def values(self) -> np.ndarray:
        """What was released, one flat row per image: (n, k) float32 (pixels or report values). The view
        generic code (audit, attacks) compares releases through."""
        return self.image_set().flat().astype(np.float32)


@dataclass(kw_only=True)
class FeatureRelease(Release):
    """What a mechanism whose :class:`Capabilities` ``output`` is ``"features"`` publishes
    (:meth:`FeatureMechanism.release <privpix.mechanisms.kinds.FeatureMechanism.release>`): a :class:`Release`
    of no images (``source`` holds the inputs) whose ``features`` are the reports, and what a reader of them needs
    to know.

    Attributes:
        features: the released per-image reports, shape (n, k), one row per input image in input order (e.g.
            randomized-response reports of encoded features).
        domain_size: d, when every report value is an integer in ``[0, d)`` (randomized response over an encoded
            domain); ``None``: real-valued reports.
        n_features: m, the number of report values per image, when the mechanism states it.
        encoder: the published encoder's description (its format, name and parameters), which a data user applies
            to their own images at prediction time; ``None`` when there is none.
    """

    features: np.ndarray
    domain_size: int | None = None
    n_features: int | None = None
    encoder: dict[str, Any] | None = None

    def values(self) -> np.ndarray:
        return np.asarray(self.features, dtype=np.float32).reshape(len(self.features), -1)


@dataclass
class RecordRelease:
    """What a mechanism publishes from tabular records: ``frame`` holds the released feature columns (and the
    utility label column when the mechanism keeps it); the rest as :class:`Release`."""

    frame: pd.DataFrame
    guarantee: Guarantee
    mechanism: str
    parameters: dict[str, Any]
    seconds: float = 0.0


MIN_EPSILON = 1e-12
FitsOn = Literal["nothing", "private", "public", "model-file"]
Output = Literal["images", "records", "features", "synthetic-images", "model"]
FITS_ON: tuple[FitsOn, ...] = get_args(FitsOn)
OUTPUTS: tuple[Output, ...] = get_args(Output)


@dataclass(frozen=True)
class Capabilities:
    """What a mechanism can do and needs, declared by the mechanism so that generic code (CLI, evaluation,
    bench, audit, report) asks instead of guessing from names or parameter names.

    Attributes:
        fits_on: what :meth:`Mechanism.fit` learns from: ``"nothing"``, ``"private"`` (the images it releases),
            ``"public"`` (a public data set, named by ``public_data`` or given to ``fit``) or ``"model-file"``
            (a trained model file named by a parameter).
        public_data: ``NAME[:SPLIT]`` of the public images to fit on, when ``fits_on == "public"`` and known.
        batch_size: how many images are privatized together (the output for one image depends on the others
            of its batch); ``None`` when each image is released on its own.
        fixed_shape: the only (h, w, c) the mechanism accepts (a public basis, a trained network), once known.
        needs_labels: whether releases need the images' labels (class-conditional generators).
        output: what a release holds: ``"images"``, ``"records"``, ``"features"``, ``"synthetic-images"`` or
            ``"model"``: a trained model and no images at all (the alternative to publishing, e.g. a DP-SGD
            classifier); it is published as the model file :meth:`ModelFile.save_model` writes (``privpix fit``),
            applied with ``predict``, and :meth:`Mechanism.release` refuses it. The mechanism is an instance of
            the kind class of its output (:data:`privpix.mechanisms.kinds.KINDS`), which holds that kind's hooks.
        randomized: whether a release draws randomness (another seed, another output); a plain filter does not.
        dp_fit: whether :meth:`Mechanism.fit` on the private set is itself a DP release (a noisy statistic of it,
            or training with noisy gradients) of which the model file is post-processing: ``privpix fit --ledger``
            charges that fit, and releases from the model file charge nothing more
            (:meth:`ModelFile.dp_fit_record`).
        seconds_per_value: rough CPU seconds on one core to release one output value (pixel × channel), for a
            release much costlier than a noise draw (a generator, a network); ``None`` for cheap ones. A
            planning hint only: a costly release is cut into more shards, so that every worker is busy
            (:func:`privpix.publishing.shards.shard_size`). No output depends on it.
        secure: what ``--secure`` (noise from the OS CSPRNG) needs for every noise draw behind a DP claim to be
            exact: ``{}`` when a :class:`~privpix.privacy.noise.SecureRandom` alone does it (the samplers of
            :mod:`privpix.privacy.noise` are exact with it), parameters to set when the exact path is a parameter
            (a synthesizer's ``secure=true``), or ``None`` when it has no exact sampler (``--secure`` is then
            refused, saying :attr:`not_secure`). Always ``None`` for a mechanism that is not randomized.
        not_secure: why ``--secure`` is refused, when ``secure`` is ``None`` (a default reason when not given).
        public_digests: the SHA-256 of the images of the public set it was fitted on (``fits_on == "public"``,
            once fitted), so that a release refuses private images that are also in it
            (:func:`privpix.data.overlap.check_distinct`); ``None``: no public set to compare with.
    """

    fits_on: FitsOn = "nothing"
    public_data: str | None = None
    batch_size: int | None = None
    fixed_shape: tuple[int, int, int] | None = None
    needs_labels: bool = False
    output: Output = "images"
    randomized: bool = True
    dp_fit: bool = False
    seconds_per_value: float | None = None
    secure: dict[str, Any] | None = field(default_factory=dict)
    not_secure: str = ""
    public_digests: frozenset[bytes] | None = None

    def __post_init__(self) -> None:
        # A filter draws nothing, so there is no noise to make exact, whatever the mechanism says.
        if not self.randomized:
            object.__setattr__(self, "secure", None)
        if self.secure is None and not self.not_secure:
            why = (
                "its noise is drawn in floating point, with no exact sampler"
                if self.randomized
                else "it draws no randomness, so there is no noise to make exact"
            )
            object.__setattr__(self, "not_secure", why)
        if self.fits_on not in FITS_ON:
            raise ValueError(f"fits_on must be one of {FITS_ON}, got {self.fits_on!r}")
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
        if self.seconds_per_value is not None and not self.seconds_per_value > 0:
            raise ValueError(f"seconds_per_value must be > 0, got {self.seconds_per_value!r}")


@dataclass(frozen=True)
class About:
    """What a mechanism class is, declared once as its ``about`` (read before any instance exists: by listings,
    the grid, validation).

    Attributes:
        paper: where the method comes from, for listings (``privpix mechanisms``): "Author Year (method)", or
            "privpix: ..." for a method of privpix's own. docs/references.md holds the full references.
        guarantee_model: the model of the guarantees its releases carry (``"central-dp"``, ``"local-dp"``,
            ``"empirical"``, ``"none"``).
        soundness: one line for listings: what holds, and how to get a proof.
        uses_epsilon: whether it takes ``epsilon`` (required then, refused otherwise).
        uses_delta: whether it takes ``delta`` (refused otherwise).
        delta_only_if: ``(parameter, value)`` when only that setting spends the δ it takes (a grid-wide δ is given
            to the others as nothing, :func:`takes_delta`); ``None``: every setting does, when ``uses_delta``.
        accepts_infinite_epsilon: whether ε = ∞ is a defined setting: the output without noise, released with no
            guarantee (the ε = ∞ column of Wang & Chang 2020: LDP reports without randomized response). Other
            mechanisms refuse it.
        use: what the mechanism is for, one of :data:`USES` (listings group by it).
        recommended_for: the data and need it is the recommended method for, in a few words (``privpix
            mechanisms`` lists it first, with this); empty: not a recommendation.
        recommended_on: the shipped data sets (names of :data:`privpix.data.DATASETS`) of the kind
            ``recommended_for`` describes. A recommended method that publishes images is held to a floor on each
            (``tests/test_recommended_floor.py``): fitted at its defaults with ``recommended_params`` on a small
            part of the training split, its images train a small CNN that beats the majority class on the test
            split.
        recommended_params: the parameters the recommendation sets beside the defaults, as (name, value) pairs
            (e.g. the public set a method needs: ``(("public", "lfw-gender"),)``).
    """

    paper: str = ""
    guarantee_model: str = "none"
    soundness: str = "no privacy claim"
    uses_epsilon: bool = True
    uses_delta: bool = False
    delta_only_if: tuple[str, Any] | None = None
    accepts_infinite_epsilon: bool = False
    use: str = "other"
    recommended_for: str = ""
    recommended_on: tuple[str, ...] = ()
    recommended_params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.use not in USES:
            raise ValueError(f"use must be one of {', '.join(USES)}, got {self.use!r}")
        if (self.recommended_on or self.recommended_params) and not self.recommended_for:
            raise ValueError("recommended_on and recommended_params belong to a recommendation: give recommended_for")


# What a mechanism is for (``About.use``), in the order listings show them, each with its heading.
USES = {
    "synthesize": "synthetic images, differentially private",
    "model": "a trained model instead of data, differentially private",
    "local": "local differential privacy: owners perturb their own images",
    "pixels": "noise on each image's pixels",
    "paper": "the papers' methods, to reproduce and compare (not DP as implemented; sound variants one parameter away)",
    "baseline": "conventional filters, without a privacy claim",
    "other": "other mechanisms",
}


def takes_delta(cls: type[Mechanism], params: dict[str, Any]) -> bool:
    """Whether an instance of ``cls`` built with ``params`` spends a δ, so that a grid-wide δ is given to it (and
    refused nowhere), asked before construction."""
    about = cls.about
    if not about.uses_delta or about.delta_only_if is None:
        return about.uses_delta
    name, value = about.delta_only_if
    declared = next(p for p in cls.params if p.name == name)
    return bool(declared.validate(params.get(name, declared.default)) == value)


@dataclass(frozen=True)
class Claim:
    """A mechanism's privacy statement (:meth:`Mechanism.privacy`): the guarantee, and the noise that earns it, for
    every reader: the manifest and the report state ``guarantee``, the ledger charges ``events``, the audit tests
    ``epsilon``/``delta`` and reads its trade-off curve from ``unit_events``.

    Attributes:
        guarantee: what a release states.
        events: the noise one release (or one DP fit) adds for one person's whole image, as the ledger composes it
            (:mod:`privpix.privacy.composition`); ``None`` when the guarantee is not sound DP (nothing can be
            charged).
        unit_events: the noise that earns the guarantee for one unit of :meth:`Mechanism.neighbours` (a pixel, a
            feature, an image): what an audit of that relation tests, and the curve it reads its bound through
            follows from their types (all Laplace, all Gaussian, all bare ε/(ε, δ), or a composition). Empty:
            no curve, the audit's assumption-free bound alone.
        unit_claim: the (ε, δ) an audit of :meth:`Mechanism.neighbours` tests, when it is not the guarantee's
            ``epsilon``/``delta`` (a paper's ε per attribute, read as the most it could promise per image).
    """

    guarantee: Guarantee
    events: tuple[NoiseEvent, ...] | None = None
    unit_events: tuple[NoiseEvent, ...] = ()
    unit_claim: tuple[float | None, float] | None = None

    @classmethod
    def of(cls, guarantee: Guarantee, relation: Neighbours, unit_events: tuple[NoiseEvent, ...] = ()) -> Claim:
        """The claim of a mechanism that charges no noise finer than its guarantee: one image's (ε, δ) as one bare
        event under ``relation``, and ``unit_events`` for the audit; no noise at all when the guarantee is not
        sound DP (nothing can be charged, and no curve's assumption holds)."""
        if not guarantee.is_dp or guarantee.per_image_epsilon is None:
            return cls(guarantee)
        rel: Relation = "add-remove" if relation.removes else "replace-one"
        return cls(guarantee, (approx(guarantee.per_image_epsilon, guarantee.delta, rel),), unit_events)

    @property
    def epsilon(self) -> float | None:
        """ε claimed for one unit of the mechanism's neighbours (``None``: nothing claimed)."""
        return self.guarantee.epsilon if self.unit_claim is None else self.unit_claim[0]

    @property
    def delta(self) -> float:
        """δ claimed for one unit of the mechanism's neighbours."""
        return self.guarantee.delta if self.unit_claim is None else self.unit_claim[1]


class UnstatedNoise(ParameterError):
    """:meth:`Mechanism.privacy` cannot state the noise for the count given (a DP fit planned on no ``n``, or on
    fewer images than one batch), though the guarantee does not depend on it: ``guarantee`` holds it, for a reader
    that needs the claim alone (what an audit tests). The ledger, which needs the noise, refuses with the message."""

    def __init__(self, message: str, guarantee: Guarantee) -> None:
        super().__init__(message)
        self.guarantee = guarantee


class WhiteBoxTrials(NamedTuple):
    """A mechanism's own white-box distinguishing experiment (:meth:`Auditable.white_box_trials`): one scalar
    score per trial without the differing record (``s0``) and with it (``s1``), as many of each, independent;
    ``pair`` and ``statistic`` say what was compared, for the audit's record."""

    s0: np.ndarray
    s1: np.ndarray
    pair: str
    statistic: str


@dataclass
class ConformanceCase:
    """One setting of the conformance suite: parameters (``epsilon``/``delta`` included when wanted) and the
    images to fit and release on (``None``: 24 built-in MNIST digits, 28x28 grey, labelled), or the records, for a
    mechanism that releases records."""

    params: dict[str, Any] = field(default_factory=dict)
    images: ImageSet | RecordSet | None = None


class Mechanism:
    """What every mechanism shares: parameters and their validation, the guarantee and its neighbours, fitting,
    capabilities, and one privacy statement (:meth:`privacy`) that the ledger, the audit and the report read. The
    audit's optional experiments are a mixin, :class:`Auditable`. A mechanism subclasses the base class of
    the kind it releases (:mod:`privpix.mechanisms.kinds`: :class:`~privpix.mechanisms.kinds.ImageMechanism`,
    ``SyntheticImageMechanism``, ``FeatureMechanism``, ``ModelMechanism``, ``RecordMechanism``), which declares
    its :attr:`output`, implements :meth:`release` and holds that kind's hooks; it declares :attr:`about` and
    implements :meth:`privacy` and its kind's hook (e.g. ``_privatize``).

    Parameters are declared once, as typed fields of the class (``d: int = param(20, "...", minimum=1)``, see
    :func:`~privpix.mechanisms.params.param`), and are real attributes, scikit-learn style:
    ``get_mechanism("pca-inverse", epsilon=1).d`` is 20,
    ``m.d = 5`` (or ``m.set_params(d=5)``) changes what the next release uses *and* what its manifest records,
    and :meth:`get_params` returns exactly what is in force. They are validated at construction and again before
    every fit and release. State learned by :meth:`fit` ends with ``_`` (``basis_``). ``epsilon`` is required
    when ``about.uses_epsilon`` and refused otherwise.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    # What a release holds (Capabilities.output): set by the kind class a mechanism subclasses.
    output: ClassVar[Output]
    # Set by fit() when the mechanism learned from a public image set: the SHA-256 of its images, so that release()
    # refuses private images that are also in it (privpix.data.overlap.check_distinct); generic code reads it as
    # Capabilities.public_digests. An experiment on the overlap itself (a membership attack on the "public" set)
    # clears it, in the open.
    _public_digests: frozenset[bytes] | None = None
    # What the class is, declared once (see About); a subclass that changes part of it writes
    # ``about = replace(Base.about, paper=...)``.
    about: ClassVar[About] = About()
    # Derived, never written by hand: the parameters the class declares as typed fields with
    # :func:`~privpix.mechanisms.params.param` (``d: int = param(20, "...", minimum=1)``), after its bases' ones
    # (see :meth:`__init_subclass__`). Validation, get_params, the CLI's --param help and the docs read it.
    params: ClassVar[tuple[Param, ...]] = ()

    def __init_subclass__(
        cls, *, params_before: str | None = None, drop_params: tuple[str, ...] = (), **kw: Any
    ) -> None:
        """Collect the parameters the class body declares with :func:`~privpix.mechanisms.params.param` into
        :attr:`params`: the bases' first, then the class's own in declaration order (a declaration of an inherited
        name overrides it in its place). Class keywords place them otherwise: ``params_before="n_classes"`` puts
        the body's declarations just before that inherited parameter; ``drop_params=(...)`` removes inherited
        ones (:func:`~privpix.mechanisms.params.declared_params`)."""
        super().__init_subclass__(**kw)
        cls.params = declared_params(cls, params_before=params_before, drop_params=drop_params)

    def __init__(self, epsilon: float | None = None, delta: float | None = None, **params: Any) -> None:
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ParameterError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}"
            )
        self.epsilon: float | None = epsilon
        self.delta: float = 0.0 if delta is None else delta
        for p in self.params:
            setattr(self, p.name, params.get(p.name, p.default))
        self._validate()

    def _validate(self) -> None:
        """Check and normalise every parameter as it is now (``"4"`` → 4): run at construction and before each
        fit and release, so a parameter set after construction is checked before it is used."""
        if self.about.uses_epsilon:
            if self.epsilon is None:
                raise ParameterError(f"{self.name}: epsilon is required")
            if self.about.accepts_infinite_epsilon and _is_inf(self.epsilon):
                self.epsilon = math.inf
            else:
                self.epsilon = check_positive("epsilon", self.epsilon)
            if self.epsilon < MIN_EPSILON:
                # Below this the noise scale Δ/ε overflows: no release is possible, and none is useful.
                raise ParameterError(f"epsilon must be >= {MIN_EPSILON:g}, got {self.epsilon!r}")
        elif self.epsilon is not None:
            raise ParameterError(
                f"{self.name}: takes no epsilon (guarantee '{self.about.guarantee_model}'); set its strength with "
                "--param"
            )
        if not self.about.uses_delta and self.delta is not None and float(self.delta) != 0.0:
            raise ParameterError(f"{self.name}: takes no delta")
        self.delta = check_delta(self.delta if self.delta is not None else 0.0)
        for p in self.params:
            setattr(self, p.name, p.validate(getattr(self, p.name)))
        self._check()

    def _check(self) -> None:
        """Cross-parameter validation; override when parameters constrain each other (validation only: it runs
        before every fit and release, so it must not reset fitted state)."""

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Every parameter in force, defaults included (``epsilon``/``delta`` when the mechanism takes them).

        ``deep`` is scikit-learn's signature (``sklearn.base.clone`` passes ``deep=False``); a mechanism holds no
        nested estimators, so both give the same dict."""
        out: dict[str, Any] = {}
        if self.about.uses_epsilon:
            out["epsilon"] = self.epsilon
        if self.about.uses_delta:
            out["delta"] = self.delta
        for p in self.params:
            out[p.name] = getattr(self, p.name)
        return out

    def set_params(self, **params: Any) -> Self:
        """Change parameters (validated, all or none); returns self."""
        allowed = {p.name for p in self.params} | {"epsilon", "delta"}
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ParameterError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}")
        before = self.get_params()
        for k, v in params.items():
            setattr(self, k, v)
        try:
            self._validate()
        except ParameterError:
            for k, v in before.items():
                setattr(self, k, v)
            raise
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def capabilities(self) -> Capabilities:
        """What this mechanism (with its current parameters) can do and needs; see :class:`Capabilities`. The
        default: its kind's :attr:`output`, fitted on nothing, image by image, randomized."""
        return Capabilities(output=self.output)

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` has learned what a release needs (always true when it fits on nothing)."""
        return True

    def fit(self, data: ImageSet | RecordSet | None = None, *, seed: int | None = None) -> Self:
        """Learn what the mechanism needs (see :meth:`capabilities`); per-image mechanisms need nothing.
        ``seed`` seeds a fit that draws randomness (training a network); a deterministic fit ignores it."""
        self._validate()
        return self

    def neighbours(self) -> Neighbours:
        """How two neighbouring inputs differ for the claim :meth:`privacy` makes (a relation object of
        :mod:`privpix.privacy.neighbours`: :class:`OneImage`, :class:`PixelColumn`, :class:`Pixels`,
        :class:`OneOfBatch`, or one of a plugin's); the audit builds its pairs from it."""
        return OneImage()

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """The privacy statement of one release of images of shape ``data`` = (h, w, c), or of these very images
        ``data`` (an :class:`ImageSet`: its shape, ``n`` its size unless given, and a mechanism that learned from
        data that may hold them, an LDP encoder fitted on them, says so in the guarantee); with
        :attr:`Capabilities.dp_fit`, of one fit on ``n`` private images. ``secure``: drawn by the exact samplers
        (``--secure``), whose lattice noise is declared by what it guarantees exactly (e.g. pure ε for lattice
        Laplace). See :class:`Claim`: the guarantee, the noise events the ledger charges, and what the audit tests.

        The one method a mechanism writes about its privacy: every reader (a release's manifest, the report, the
        ledger, the audit) takes what it needs from the claim. ``Claim.of(guarantee, self.neighbours())`` declares
        nothing finer than the guarantee's per-image (ε, δ), under the relation of :meth:`neighbours`, and no curve
        for the audit (``Claim.of(Guarantee.none("..."), self.neighbours())`` for a mechanism with no claim); a
        mechanism that knows its noise (Laplace per value, a Gaussian's multiplier, DP-SGD's sampled steps)
        declares it, and its charges then compose tightly and its audits read the noise's curve."""
        raise NotImplementedError(f"{self.name}: state its privacy (privacy() -> Claim)")

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> Release:
        """Release ``images``; ``rng`` is a Generator, SecureRandom, or an integer seed. Each output kind
        (:mod:`privpix.mechanisms.kinds`) implements it: images transformed, synthetic images drawn, reports, or a
        refusal (a model is published by ``save_model``)."""
        raise NotImplementedError(f"{self.name}: subclass one output kind of privpix.mechanisms.kinds")

    def _released(self, shape: tuple[int, int, int], t0: float, kind: type[Release] = Release, **output: Any) -> Any:
        """A ``kind`` (:class:`Release`, :class:`FeatureRelease`) of ``output`` (``images=``, ``features=``,
        ``source=``) made since ``t0`` (``time.perf_counter()``), stating what every release states: the guarantee
        for ``shape``, the name and the parameters in force, the seconds it took."""
        return kind(guarantee=self.privacy(shape).guarantee, mechanism=self.name, parameters=self.get_params(),
                       seconds=time.perf_counter() - t0, **output)  # fmt: skip

    def _check_release_input(self, images: ImageSet) -> None:
        """What every release checks first, whatever its kind: an ImageSet of values in [0, 1], parameters valid,
        the mechanism fitted, and none of the images among the public ones it was fitted on."""
        if not isinstance(images, ImageSet):
            raise ParameterError(f"{self.name}: release expects an ImageSet, got {type(images).__name__}")
        self._validate()
        check_value_range(images)
        self._check_fitted()
        caps = self.capabilities()
        if caps.public_digests:
            from privpix.data.overlap import check_distinct

            check_distinct(caps.public_digests, images, caps.public_data or "set given to fit()")

    def _check_fitted(self) -> None:
        """Refuse to release unfitted; a mechanism that fits on a named model file loads it on first use
        (reading a file the user named learns nothing from data, so it needs no explicit fit)."""
        if self.is_fitted:
            return
        if self.capabilities().fits_on == "model-file":
            self.fit(None)
            if self.is_fitted:
                return
        raise ParameterError(f"{self.name}: not fitted; {self._fit_hint()}")

    def _fit_hint(self) -> str:
        """How to fit this mechanism, for the 'not fitted' error."""
        caps = self.capabilities()
        return {
            "private": "call fit() with the images to release",
            "public": "call fit() with public images, or name them with the mechanism's public-data parameter",
            "model-file": "give it a trained model file (`privpix fit`, or the model parameter)",
        }.get(caps.fits_on, "call fit()")


class ModelFile:
    """What a mechanism adds when :meth:`Mechanism.fit` learns something worth keeping: a model file that a later
    ``model`` parameter reads back (``privpix fit`` writes it). Mix it in beside the kind class; generic code (the
    fit command, the ledger, the conformance suite) asks ``isinstance(mech, ModelFile)``."""

    def save_model(self, path: str | os.PathLike) -> Path:
        """Write what :meth:`Mechanism.fit` learned to ``path`` (a model file the mechanism's own module reads
        back)."""
        raise NotImplementedError

    def dp_fit_record(self) -> dict[str, Any] | None:
        """For a mechanism fitted from a model file written after a DP fit (:attr:`Capabilities.dp_fit` of the
        mechanism that wrote it): what the file records of that fit, checked against the noise it records —
        ``sha256`` (of the file), ``guarantee``, ``events`` (dicts) and ``ledger`` (``{"path", "entry"}`` of the
        ledger that charged the fit, or ``None``). ``None`` for anything else."""
        return None


class Auditable:
    """The audit's optional hooks, for a mechanism whose release or fit an audit cannot simply rerun and compare
    (mix it in beside the kind class; the audit asks ``isinstance(mech, Auditable)``): a DP fit that makes one
    noisy release and post-processes it (:meth:`released_statistic`), or a trained network whose privacy argument
    has its own white-box experiment (:attr:`white_box`, :meth:`white_box_trials`)."""

    # Whether the audit runs white_box_trials instead of refitting or releasing thousands of times: a mechanism that
    # trains a network on the private set (DP-SGD's model, a synthesizer with a DP-SGD part).
    white_box: ClassVar[bool] = False

    def released_statistic(self, data: ImageSet, rng: RNG | None, *, seed: int) -> np.ndarray | None:
        """For a mechanism whose :meth:`Mechanism.fit` on the private set makes one DP release and post-processes
        it (a DP synthesizer's noisy embedding): that release of ``data`` alone, a flat float array, without the
        post-processing. ``rng=None`` returns it without noise: audits use that to choose their test, it is never
        published. ``seed`` fixes the data-independent randomness (e.g. random features), so two calls differ
        only in the data and the noise. ``None`` when the mechanism has no such release; an audit then refits
        the whole mechanism and compares its outputs."""
        return None

    def white_box_trials(self, images: ImageSet, trials: int, seed: int) -> WhiteBoxTrials | None:
        """For a mechanism whose release or fit cannot be rerun thousands of times (a trained model, a fit that
        trains a network with DP-SGD; it sets :attr:`white_box`): ``trials`` independent runs per side of its own
        white-box experiment, under the threat model its guarantee covers, calibrated as for the private set
        ``images``; the audit bounds ε from them. ``None``: none."""
        return None


def shape_of(data: tuple[int, int, int] | ImageSet) -> tuple[int, int, int]:
    """The (h, w, c) of :meth:`Mechanism.privacy`'s ``data``: a shape, or the images' shape."""
    return data.shape if isinstance(data, ImageSet) else data


def count_of(data: tuple[int, int, int] | ImageSet, n: int | None) -> int | None:
    """The ``n`` of :meth:`Mechanism.privacy`: as given, else the size of the images given."""
    return n if n is not None or not isinstance(data, ImageSet) else len(data)


def check_value_range(images: ImageSet) -> None:
    """Refuse float images outside [0, 1], the value range every mechanism's sensitivity is declared for (uint8
    images are 0–255 by type): a release of values outside it would carry a guarantee that does not hold."""
    x = images.images
    if x.dtype == np.uint8 or x.size == 0:
        return
    lo, hi = math.inf, -math.inf
    for b in imageset_blocks(x.shape):
        block = x[b]
        lo, hi = min(lo, float(block.min())), max(hi, float(block.max()))
    if lo < 0.0 or hi > 1.0:
        raise ParameterError(
            f"images: float pixel values must lie in [0, 1] (the range every sensitivity is declared for; uint8 "
            f"images are 0-255), got values in [{lo:.4g}, {hi:.4g}]; scale them first (e.g. x / 255)"
        )


def _is_inf(value: Any) -> bool:
    try:
        return float(value) == math.inf
    except (TypeError, ValueError):
        return False


def as_rng(rng: RNG | int | None) -> RNG:
    """A Generator or SecureRandom passes through; an integer seeds a Generator; ``None`` takes OS entropy."""
    if rng is None or isinstance(rng, int | np.integer):
        return make_rng(None if rng is None else int(rng))
    return rng
