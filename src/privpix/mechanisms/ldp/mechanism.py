"""Wang & Chang 2020's encoders + generalised randomized response as registered mechanisms that release features.

One owner's release is the report of Wang & Chang 2020's protocol: the image encoded into m integer features in
``[0, d)`` by a published encoder, every feature perturbed with GRR at ε (:mod:`~privpix.privacy.grr`).
:class:`LDPFeatures` is the one base class; each encoder is a subclass of a few lines naming its
``encoder_class`` (``ldp-pixel-report``, ``ldp-hog-bovw``, ``ldp-dcaconv``, ``ldp-bnn``). They are ordinary
mechanisms (``Capabilities.output == "features"``), so ``privpix bench`` and ``privpix audit`` reach them, and
they are the one registry of encoders: :data:`~privpix.mechanisms.ldp.encoder_base.ENCODERS` (and so
``make_encoder``/``load_encoder``) is derived from the mechanisms registered here.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from privpix.data.folders import INPUT_FOLDER
from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.overlap import shared_count
from privpix.errors import ParameterError
from privpix.mechanisms.base import (
    About,
    Capabilities,
    Claim,
    ConformanceCase,
    FeatureRelease,
    FitsOn,
    ModelFile,
    Release,
    shape_of,
)
from privpix.mechanisms.kinds import FeatureMechanism, LearnerSpec
from privpix.mechanisms.ldp.bnn import BNNEncoder
from privpix.mechanisms.ldp.dcaconv import DCAConvEncoder
from privpix.mechanisms.ldp.encoder_base import ENCODERS, Encoder, gray_images
from privpix.mechanisms.ldp.encoders import HogBovwEncoder, PixelEncoder, load_encoder
from privpix.mechanisms.ldp.reports import Reports, may_overlap, report_files
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import get_mechanism, register
from privpix.privacy.composition import PureDP
from privpix.privacy.grr import grr_perturb
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import Neighbours, OneFeature, OneImage
from privpix.privacy.noise import RNG

UNITS = ("feature", "image")


def register_ldp(cls: type[LDPFeatures]) -> type[LDPFeatures]:
    """:func:`~privpix.mechanisms.registry.register` for an LDP feature mechanism, refusing one whose encoder name
    is already taken by another encoder class (the mechanism name itself is checked by ``register``)."""
    enc = cls.encoder_class
    taken = ENCODERS.providers().get(enc.name)
    if taken is not None and taken[1] is not enc:
        raise ValueError(
            f"encoder {enc.name!r} is already defined by mechanism {taken[0]!r} ({taken[1].__qualname__}); "
            f"{cls.__qualname__} must name its encoder otherwise"
        )
    return register(cls)


class LDPFeatures(FeatureMechanism, ModelFile):
    """Encode each image with a published encoder into m integer features in ``[0, d)``, then perturb every
    feature with generalised randomized response at ε per feature (Wang & Chang 2020). Output: ``"features"``, a
    :class:`~privpix.mechanisms.base.FeatureRelease` whose ``features`` are the (n, m) reports (``values()``
    gives them as float32).

    Parameters (real attributes, ``get_params``/``set_params``): the encoder's own (``layers``, ``words``, …),
    and

    - ``unit``: the neighbouring unit the guarantee is stated for. ``feature`` (the paper's claim): ε per
      encoded feature value (two inputs whose encodings differ in one value; relation
      :class:`~privpix.privacy.neighbours.OneFeature`). ``image``: one owner's whole report, m·ε by sequential
      composition (any change of one image; :class:`~privpix.privacy.neighbours.OneImage`). Both state
      ``per_image_epsilon = m·ε``.
    - ``model``: an encoder file written by ``privpix ldp fit-encoder`` (or :meth:`save_model`): fits on the
      model file, and its encoder parameters become the ones in force (one given that contradicts the file is
      an error).
    - ``public``: ``NAME[:SPLIT]`` of public or consented labelled images to fit the encoder on.
    - neither: the encoder is fitted on the images given to :meth:`fit` (``fits_on="private"``), which is the
      paper's own protocol (DCAConv fitted on the training images it then perturbs).
    - ``fit_images``: fit on a seeded random subset of at most this many images (0: all).
    - ``learner``, ``n_neighbors``: the data user's classifier, named by :meth:`utility_learner`.

    The encoder is a function of the data it was fitted on, which the perturbation does not protect. A release
    whose images may be among the fitting images (same image content or name when fitted in this process; same
    dataset and split, or same folder, by the description an encoder file records) carries ``sound: false``.

    For utility (``privpix bench``):

    - :meth:`encode` ``(images) -> (n, m)``: the clean integer encodings; the data user's test vectors, as the
      paper predicts on unperturbed encodings of its own test images.
    - :meth:`utility_learner` ``()``: the scikit-learn classifier (:mod:`privpix.evaluation.ldp_learners`) for
      domain d and ε, by name, that the bench builds to ``fit(released_reports, labels)`` (integers, or the float
      view ``Release.values()``) and ``score(encode(test), test_labels)``.
    """

    about = About(
        paper="Wang & Chang 2020",
        guarantee_model="local-dp",
        soundness="sound ε-LDP per encoded feature (unit=feature) or m·ε per image (unit=image), for images the "
        "encoder was not fitted on",
        # The reports without randomized response: the paper's ε = ∞ column.
        accepts_infinite_epsilon=True,
        use="local",
    )
    encoder_class: ClassVar[type[Encoder]]
    unit: str = param("feature", "feature: ε per encoded feature value (paper); image: m·ε per report", UNITS)
    model: str = param("", "encoder file (privpix ldp fit-encoder); the encoder parameters come from it")
    public: str = param("", "NAME[:SPLIT] of public labelled images to fit the encoder on")
    fit_images: int = param(0, "fit on a seeded random subset of at most this many images; 0 = all", minimum=0)
    learner: str = param("nb", "utility classifier on the reports: nb, ncc or knn", ("nb", "ncc", "knn"))
    n_neighbors: int = param(100, "k of learner=knn", minimum=1)

    # Learned by fit(): the encoder, the file it came from ("" when fitted here), the configuration it was
    # fitted with, and fingerprints of the fitting images (content digests and names; only when fitted here).
    encoder_: Encoder | None = None
    loaded_from_: str | None = None
    fitted_with_: tuple | None = None
    fit_digests_: frozenset[bytes] = frozenset()
    fit_names_: frozenset[str] = frozenset()
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def __init_subclass__(cls, **kw: Any) -> None:
        """The parameters: the mechanism's (declared here), then its encoder's, declared once by the encoder class
        (:attr:`Encoder.params <privpix.mechanisms.ldp.encoder_base.Encoder.params>`)."""
        super().__init_subclass__(**kw)
        encoder = vars(cls).get("encoder_class")
        if encoder is None:
            return
        names = [p.name for p in cls.params] + [p.name for p in encoder.params]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise TypeError(f"{cls.__qualname__}: parameter(s) {', '.join(dup)} declared twice")
        cls.params = (*cls.params, *encoder.params)

    # ------------------------------------------------------------------------------------------ parameters

    def _encoder_params(self) -> dict[str, Any]:
        return {p.name: getattr(self, p.name) for p in self.encoder_class.params}

    def _encoder_config(self) -> dict[str, Any]:
        """The encoder configuration the parameters in force give (normalised by the encoder)."""
        return self.encoder_class(**self._encoder_params()).config

    def _check(self) -> None:
        self._encoder_config()  # the encoder validates its own parameters (e.g. dcaconv's layers)
        if self.model and self.public:
            raise ParameterError(f"{self.name}: give model=FILE or public=NAME:SPLIT, not both")
        if self.public:
            from privpix.data.loaders import parse_dataset_spec

            parse_dataset_spec(self.public)
        if self._fits_nothing() and self.public:
            raise ParameterError(f"{self.name}: scaling=fixed fits on nothing; public={self.public} would be unused")

    def _fits_nothing(self) -> bool:
        """Whether the encoder needs no data (the fixed pixel encoder, made for each image size)."""
        return False

    def capabilities(self) -> Capabilities:
        fits_on: FitsOn
        if self._fits_nothing():
            fits_on = "nothing"
        else:
            fits_on = "model-file" if self.model else "public" if self.public else "private"
        enc = self.encoder_ if self.is_fitted and not self._fits_nothing() else None
        return Capabilities(
            fits_on=fits_on,
            public_data=self.public or None,
            fixed_shape=None if enc is None else (*enc.fitted_hw(), 1),
            output="features",
        )

    def _fit_hint(self) -> str:
        return (
            "name public labelled images to fit the encoder on (--param public=NAME:SPLIT), give an encoder file "
            "written by `privpix ldp fit-encoder` (--param model=FILE), or call fit() with labelled images"
        )

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """On 24 scikit-learn 8x8 digits (they load in milliseconds): the encoder fitted on those very images
        (the paper's protocol) and on 200 public digits of the other split at the feature unit, and loaded from
        an encoder file at the image unit; ``conformance_params`` keep every fit short."""
        public, images = _conformance_data()
        tiny = dict(cls.conformance_params)
        enc = cls.encoder_class(**tiny).fit(load_public(public).subset(np.arange(0, 800, 8)), source=public)
        path = enc.save(workdir / "enc.npz")
        return [
            ConformanceCase(tiny, images),
            ConformanceCase({**tiny, "public": public, "fit_images": 200}, images),
            ConformanceCase({"model": str(path), "unit": "image"}, images),
        ]

    conformance_params: ClassVar[dict[str, Any]] = {}

    # --------------------------------------------------------------------------------------------- fitting

    def _fit_key(self) -> tuple:
        return (tuple(sorted(self._encoder_config().items())), self.fit_images)

    @property
    def is_fitted(self) -> bool:
        if self.model and not self._fits_nothing():
            return (
                self.encoder_ is not None
                and self.loaded_from_ == self.model
                and self.encoder_.config == self._encoder_config()
            )
        if self._fits_nothing():
            return True
        return self.encoder_ is not None and self.loaded_from_ == "" and self.fitted_with_ == self._fit_key()

    def fit(self, data: ImageSet | RecordSet | None = None, *, seed: int | None = None) -> Self:
        """With ``model``: load the encoder file (its encoder parameters become the ones in force). Otherwise
        fit the encoder on ``data`` (labelled images), or on the ``public`` images when ``data`` is ``None``;
        ``seed`` seeds the subset (``fit_images``) and the encoder's own randomness (K-means, BNN training)."""
        self._validate()
        if self._fits_nothing() and not self.model:
            return self
        if self.model:
            if not (self.encoder_ is not None and self.loaded_from_ == self.model):
                enc = load_encoder(self.model)
                if enc.name != self.encoder_class.name:
                    raise ParameterError(
                        f"{self.name}: {self.model} holds a {enc.name!r} encoder, not {self.encoder_class.name!r}"
                        f" (use the mechanism of that encoder)"
                    )
                self._adopt(enc.config)
                self.encoder_, self.loaded_from_, self.fitted_with_ = enc, self.model, None
                self.fit_digests_, self.fit_names_ = frozenset(), frozenset()
            elif self.encoder_.config != self._encoder_config():
                self._adopt(self.encoder_.config)
            return self
        if data is None:
            if not self.public:
                raise ParameterError(f"{self.name}: not fitted; {self._fit_hint()}")
            from privpix.data import load_dataset

            data = load_dataset(self.public)
        if not isinstance(data, ImageSet):
            raise ParameterError(f"{self.name}: fits on images, got {type(data).__name__}")
        seed = 0 if seed is None else int(seed)
        source = self._describe(data)
        if self.fit_images and len(data) > self.fit_images:
            idx = np.sort(np.random.default_rng(seed).choice(len(data), self.fit_images, replace=False))
            data, source = data.subset(idx), f"{source} (seeded subset of {self.fit_images})"
        enc = self.encoder_class(**self._encoder_params())
        enc.fit(data, source=source, seed=seed)
        self.encoder_, self.loaded_from_, self.fitted_with_ = enc, "", self._fit_key()
        self.fit_digests_ = enc.fit_digests  # hashed once, by the encoder's own fit
        self.fit_names_ = frozenset(map(str, data.names)) if data.names is not None else frozenset()
        return self

    def _describe(self, data: ImageSet) -> str:
        """The fitting data as reports name it: the ``public`` spec when ``data`` is that dataset."""
        if self.public and self.public.partition(":")[0].strip().lower() == data.source:
            return self.public.strip().lower()
        return data.source or "unnamed images"

    def _adopt(self, config: dict[str, Any]) -> None:
        """Take the encoder configuration of a loaded file; a parameter given that contradicts it is an error."""
        for p in self.encoder_class.params:
            if p.name not in config:
                continue
            mine = self.encoder_class(**{p.name: getattr(self, p.name)}).config[p.name]
            default = self.encoder_class(**{p.name: p.default}).config[p.name]
            theirs = config[p.name]
            if mine != default and mine != theirs:
                raise ParameterError(
                    f"{self.name}: {p.name}={getattr(self, p.name)} was given, but the encoder file {self.model} "
                    f"has {p.name}={theirs}; encoder parameters come from the file"
                )
            setattr(self, p.name, p.validate(theirs))

    def save_model(self, path: str | os.PathLike) -> Path:
        """Write the fitted encoder file (the format ``privpix ldp`` reads: ``load_encoder``)."""
        enc = self._encoder(None)
        return enc.save(path)

    # ------------------------------------------------------------------------------------------ the release

    def _encoder(self, shape: tuple[int, int, int] | None) -> Encoder:
        """The fitted encoder (for the fixed pixel encoder: made for images of ``shape``)."""
        self._check_fitted()
        if self.encoder_ is None:
            raise ParameterError(f"{self.name}: not fitted; {self._fit_hint()}")
        return self.encoder_

    @property
    def d(self) -> int:
        """Domain size of every feature (after fitting)."""
        return int(self._encoder(None).fitted_d())

    def encode(self, images: ImageSet) -> np.ndarray:
        """The clean encodings (n, m), integers in ``[0, d)``: the data user's test vectors (no perturbation).
        Identical images are encoded once (an audit releases one image thousands of times)."""
        if not isinstance(images, ImageSet):
            raise ParameterError(f"{self.name}: encode expects an ImageSet, got {type(images).__name__}")
        self._validate()
        enc = self._encoder(images.shape)
        if len(images) == 0:
            return np.zeros((0, int(enc.fitted_m())), np.uint8)
        flat = np.ascontiguousarray(images.images.reshape(len(images), -1))
        uniq, first, inverse = np.unique(flat, axis=0, return_index=True, return_inverse=True)
        if len(uniq) == len(images):
            return enc.encode(images)
        return enc.encode(images.subset(first))[inverse.reshape(-1)]

    def _privatize_features(self, images: ImageSet, rng: RNG) -> np.ndarray:
        enc = self._encoder(images.shape)
        return grr_perturb(self.encode(images), int(enc.fitted_d()), self.epsilon, rng)

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> FeatureRelease:
        """As :meth:`FeatureMechanism.release`; the guarantee is marked not sound when ``images`` may be among the
        encoder's fitting images, and the release states the ``domain_size``, ``n_features`` and ``encoder``."""
        rel = super().release(images, rng)
        overlap = self._overlap(images)
        if overlap:
            rel.guarantee = self._guarantee(images.shape, overlap)
        enc = self._encoder(images.shape)
        rel.domain_size, rel.n_features, rel.encoder = int(enc.fitted_d()), int(enc.fitted_m()), enc.describe()
        return rel

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """Of these very images, the guarantee is marked not sound when they may be among the encoder's fitting
        images (what a release states, and the ledger charges). Charged as the bare per-image ε; the unit (one
        feature, or a whole report of m) is m or one randomized responses of ε each, read through the curve every
        ε-DP mechanism is on (randomized response meets it exactly)."""
        shape = shape_of(data)
        g = self._guarantee(shape, self._overlap(data) if isinstance(data, ImageSet) else "")
        if not g.sound:
            return Claim(g)
        m = 1 if self.unit == "feature" else int(self._encoder(shape).fitted_m())
        return Claim.of(g, self.neighbours(), (PureDP(float(self.epsilon), count=m),))

    def feature_files(self, release: Release, labels: np.ndarray | None) -> tuple[dict[str, bytes], dict[str, Any]]:
        """A report folder's ``reports.npz`` and its manifest fields (:mod:`privpix.mechanisms.ldp.reports`), the
        format ``privpix ldp train`` reads."""
        return report_files(Reports.of_release(release, float(self.epsilon), labels))

    def _overlap(self, images: ImageSet) -> str:
        """Why ``images`` may be among the encoder's fitting images ("" when they are not)."""
        enc = self.encoder_
        if enc is None or not enc.uses_fitting_data:
            return ""
        if self.loaded_from_ == "":
            # An overlap makes the guarantee unsound rather than refusing the release: Wang & Chang 2020's protocol
            # fits the encoder on data that may hold the reported images, and stays reproducible; the guarantee says
            # why.
            if shared_count(self.fit_digests_, gray_images(images)):
                return "some released images are among the encoder's fitting images"
            if images.names is not None and self.fit_names_ & set(map(str, images.names)):
                return "some released images carry the names of the encoder's fitting images"
            return ""
        # From an encoder file: its fitting images' digests (files written since they are recorded) find the very
        # images, and the two descriptions (a data set and split, a recorded folder) what the digests cannot see
        # (the same images decoded or resized by another path). A folder described only as "the --input folder"
        # (no --record-source) says nothing of its images: where digests exist they alone decide for it.
        if enc.fit_digests:
            shared = shared_count(enc.fit_digests, gray_images(images))
            if shared:
                return f"{shared} of the reported images are among the encoder's fitting images"
        redacted = any(str(d).startswith(INPUT_FOLDER) for d in (enc.fitted_on, images.source))
        if images.source and not (enc.fit_digests and redacted) and may_overlap(enc.fitted_on, images.source):
            return f"the released images ({images.source}) may overlap the encoder's fitting data ({enc.fitted_on})"
        return ""

    # ---------------------------------------------------------------------------------------- the guarantee

    def _guarantee(self, shape: tuple[int, int, int], overlap: str) -> Guarantee:
        enc = self._encoder(shape)
        m, d, eps = int(enc.fitted_m()), int(enc.fitted_d()), float(self.epsilon)
        if math.isinf(eps):
            return Guarantee.none(f"epsilon = inf: the {m} encoded features are sent without perturbation")
        per_image = m * eps
        caveats = [
            f"ε = {eps:g} per encoded feature; a report has m = {m} features over d = {d} values, so one whole "
            f"image is protected at m·ε = {per_image:g} (sequential composition)",
            "labels, when sent with the reports (as the data user needs to learn), are not protected",
        ]
        if enc.uses_fitting_data:
            caveats.append(
                f"the encoder was fitted on {enc.fitted_on}; that data is not protected by the perturbation and "
                "must be public or consented; the guarantee holds for images that are not among it"
            )
        if overlap:
            caveats.append(
                f"{overlap}: the published encoder depends on them, so ε does not bound what is revealed about "
                "them; fit the encoder on disjoint public or consented images for the guarantee to hold"
            )
        if self.unit == "feature":
            unit = f"one encoded feature value of one image (of its m = {m} features in [0, {d}))"
            epsilon = eps
        else:
            unit = f"one image (its whole report of m = {m} features in [0, {d}))"
            epsilon = per_image
        return Guarantee(
            model="local-dp",
            epsilon=epsilon,
            unit=unit,
            per_image_epsilon=per_image,
            per_feature_epsilon=eps,
            sound=not overlap and math.isfinite(per_image),
            caveats=tuple(caveats),
        )

    def neighbours(self) -> Neighbours:
        return OneFeature(self.encode, self.d) if self.unit == "feature" else OneImage()

    # ---------------------------------------------------------------------------------------------- utility

    def utility_learner(self) -> LearnerSpec:
        """The classifier for reports of this mechanism (domain d, ε per feature): ``learner`` nb (Naive Bayes on
        estimated frequencies), ncc (estimated centroids) or knn (``n_neighbors``)."""
        kw = {"n_neighbors": self.n_neighbors} if self.learner == "knn" else {}
        return LearnerSpec(self.learner, {"d": self.d, "epsilon": self.epsilon, **kw})


def reports_mechanism(encoder_file: str | Path, epsilon: float) -> LDPFeatures:
    """The registered mechanism of the encoder in ``encoder_file`` (the file is its ``model``, read here) at
    ``epsilon`` per feature: what an owner perturbs their images with (``privpix ldp perturb``)."""
    enc = load_encoder(encoder_file)
    mech = get_mechanism(ENCODERS.providers()[enc.name][0], epsilon=epsilon, model=str(encoder_file))
    assert isinstance(mech, LDPFeatures)  # an encoder's provider is the LDP feature mechanism naming it
    return mech.fit(None)


def load_public(spec: str) -> ImageSet:
    from privpix.data import load_dataset

    data = load_dataset(spec)
    assert isinstance(data, ImageSet)
    return data


def _conformance_data() -> tuple[str, ImageSet]:
    """The public spec and 24 labelled images of the other split (scikit-learn's digits, no data folder)."""
    return "digits:train", load_public("digits:test").subset(np.arange(0, 720, 30))


# -------------------------------------------------------------------------------------------- mechanisms


@register_ldp
class LDPPixelReport(LDPFeatures):
    """Pixels quantised to ``levels`` values (m = h·w, d = levels), each through GRR, released as a report
    vector (``ldp-pixel`` releases the same as an image). ``scaling=fixed`` needs no data at all."""

    name = "ldp-pixel-report"
    summary = "pixel levels → randomized response, released as a report vector (Wang & Chang 2020's pixel baseline)"
    about = replace(LDPFeatures.about, paper="Wang & Chang 2020 (pixel baseline)")
    encoder_class = PixelEncoder
    conformance_params: ClassVar[dict[str, Any]] = {"scaling": "minmax"}

    def _fits_nothing(self) -> bool:
        # The encoder's parameters are declared by PixelEncoder, not on this class: read them as the encoder does.
        return self._encoder_params()["scaling"] == "fixed" and not self.model

    @property
    def d(self) -> int:
        return int(self._encoder_params()["levels"]) if self._fits_nothing() else super().d

    def _encoder(self, shape: tuple[int, int, int] | None) -> Encoder:
        if not self._fits_nothing():
            return super()._encoder(shape)
        if shape is None:
            if self.encoder_ is None:
                raise ParameterError(
                    f"{self.name}: scaling=fixed makes its encoder for each image size and has no file to write "
                    "(`privpix ldp fit-encoder --encoder pixel --shape HxW` writes one)"
                )
            return self.encoder_
        hw = tuple(int(v) for v in shape[:2])
        enc = self.encoder_
        if enc is None or enc.image_shape != hw or enc.config != self._encoder_config() or self.loaded_from_:
            if min(hw) < 1:
                raise ParameterError(f"{self.name}: images of shape {shape} have no pixels")
            enc = self.encoder_class(**self._encoder_params()).fit_unsupervised_shape(*hw)
            self.encoder_, self.loaded_from_, self.fitted_with_ = enc, "", None
        return enc

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        images = _conformance_data()[1]
        fixed = [ConformanceCase({}, images), ConformanceCase({"levels": 2, "unit": "image"}, images)]
        return [*fixed, *super().conformance_cases(workdir)]


@register_ldp
class LDPHogBovw(LDPFeatures):
    """HOG descriptors → K-means visual words → per-image word counts (m = words), each through GRR."""

    name = "ldp-hog-bovw"
    summary = "HOG bag-of-visual-words counts → randomized response (Wang & Chang 2020's BoVW baseline)"
    about = replace(LDPFeatures.about, paper="Wang & Chang 2020 (BoVW baseline)")
    encoder_class = HogBovwEncoder
    conformance_params: ClassVar[dict[str, Any]] = {"words": 8, "max_descriptors": 2000}

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        """As the base's, but the feature-unit cases on digits upscaled to 24x24: the 4 HOG cells of an 8x8 digit
        leave no word count that can change alone (a count changes alone only where it is clipped at d - 1)."""
        public, images = _conformance_data()
        big, tiny = images.resized(24, 24), dict(cls.conformance_params)
        fit = load_public(public).subset(np.arange(0, 800, 8)).resized(24, 24)
        path = cls.encoder_class(**tiny).fit(fit, source=f"{public} (resized to 24x24)").save(workdir / "enc.npz")
        return [
            ConformanceCase(tiny, big),
            ConformanceCase({**tiny, "public": public, "fit_images": 200, "unit": "image"}, images),
            ConformanceCase({"model": str(path)}, big),
        ]


@register_ldp
class LDPDCAConv(LDPFeatures):
    """DCAConv codes (m = L1·pooled h·pooled w, d = 2^L_R), each through GRR (Wang & Chang 2020's method)."""

    name = "ldp-dcaconv"
    summary = "DCAConv binarised convolution codes → randomized response (Wang & Chang 2020)"
    about = replace(LDPFeatures.about, paper="Wang & Chang 2020 (DCAConv)")
    encoder_class = DCAConvEncoder
    conformance_params: ClassVar[dict[str, Any]] = {"layers": "3,2", "kernel": 3}


@register_ldp
class LDPBNN(LDPFeatures):
    """Binarized-CNN activations (d = 2), each through GRR (Wang & Chang 2020's BNN baseline; needs PyTorch)."""

    name = "ldp-bnn"
    summary = "binarized CNN activations → randomized response (Wang & Chang 2020's BNN baseline; needs PyTorch)"
    about = replace(LDPFeatures.about, paper="Wang & Chang 2020 (BNN baseline)")
    encoder_class = BNNEncoder
    conformance_params: ClassVar[dict[str, Any]] = {
        "filters": 2,
        "kernel": 3,
        "hidden": 16,
        "epochs": 1,
        "batch_size": 64,
    }

    @classmethod
    def conformance_cases(cls, workdir: Path) -> list[ConformanceCase]:
        if importlib.util.find_spec("torch") is None:  # the `neural` extra is not installed
            return []
        return super().conformance_cases(workdir)
