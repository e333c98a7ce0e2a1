"""One base class per output kind (:attr:`Capabilities.output`): a mechanism subclasses the kind it releases and
sees only that kind's hooks.

- :class:`ImageMechanism` (``"images"``): each input image transformed (``_privatize`` / ``_privatize_set``).
- :class:`SyntheticImageMechanism` (``"synthetic-images"``): new labelled images drawn from what ``fit`` learned
  (``_synthesize``, ``synthesize``, ``synthetic_count``, ``label_names``).
- :class:`FeatureMechanism` (``"features"``): one row of reports per image (``_privatize_features``, ``encode``,
  ``utility_learner``, ``feature_files``).
- :class:`ModelMechanism` (``"model"``): a trained model and no images (``predict``, ``membership_score``);
  ``release`` refuses.
- :class:`RecordMechanism` (``"records"``): tabular records (``_privatize_records``, ``release_records``).

A mechanism subclasses exactly one of them (:func:`~privpix.mechanisms.registry.register` refuses two), and what it
releases follows from that class alone: its :attr:`Capabilities.output` is its class's ``output``, whatever its
parameters or model file. A method that has an image and a record form (the autoencoder obfuscator) is two
mechanisms sharing a base.

Generic code asks what a mechanism releases with ``isinstance`` (:func:`require_kind` gives the one-line refusal
for a mechanism of another kind); :data:`KINDS` maps each declared output to its class.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import FeatureRelease, Mechanism, Output, RecordRelease, Release, as_rng
from privpix.privacy.noise import RNG

if TYPE_CHECKING:  # pandas (0.4 s to import) only where records are handled
    import pandas as pd


class ImageMechanism(Mechanism):
    """Releases each input image transformed (``output == "images"``): implement :meth:`_privatize` on the pixels,
    or :meth:`_privatize_set` when the labels or attributes matter too."""

    output: ClassVar[Output] = "images"
    noun: ClassVar[str] = "images"

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        """(n, h, w, c) float in [0, 1] → released array of the same shape (float)."""
        raise NotImplementedError

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        """Hook for mechanisms that need more than the pixels (labels, attributes); default: ``_privatize``."""
        return self._privatize(images.as_float().astype(np.float64), rng)

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> Release:
        """Privatize ``images``: one released image per input, same metadata; ``rng`` as in
        :meth:`Mechanism.release`."""
        self._check_release_input(images)
        rng = as_rng(rng)
        t0 = time.perf_counter()
        out = np.asarray(self._privatize_set(images, rng), dtype=np.float32)
        return self._released(images.shape, t0, images=images.with_images(out))


class SyntheticImageMechanism(Mechanism):
    """Draws new labelled images from what :meth:`fit` learned (``output == "synthetic-images"``), none of them a
    transform of an input: implement :meth:`_synthesize`."""

    output: ClassVar[Output] = "synthetic-images"
    noun: ClassVar[str] = "synthetic images"

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> Release:
        """Reads none of ``images``: draws ``synthetic_count(len(images))`` new images (its ``n`` when it has one
        set, else as many as given); the release's ``source`` holds ``images``."""
        self._check_release_input(images)
        count = self.synthetic_count(len(images))
        if not count:
            raise ParameterError(f"{self.name}: say how many synthetic images to draw (n)")
        rel = self._synthesized(int(count), images.shape, as_rng(rng))
        rel.source = images
        return rel

    def synthesize(self, n: int, rng: RNG | int | None = None, shape: tuple[int, int, int] | None = None) -> Release:
        """``n`` new labelled images drawn from what :meth:`fit` learned (no input image is read). ``shape``
        defaults to the fitted ``Capabilities.fixed_shape``."""
        self._validate()
        self._check_fitted()
        shape = shape or self.capabilities().fixed_shape
        if shape is None:
            raise ParameterError(f"{self.name}: give the image shape to synthesize")
        if not (isinstance(n, int | np.integer) and n >= 1):
            raise ParameterError(f"{self.name}: the number of synthetic images must be >= 1, got {n!r}")
        return self._synthesized(int(n), shape, as_rng(rng))

    def _synthesized(self, n: int, shape: tuple[int, int, int], rng: RNG) -> Release:
        t0 = time.perf_counter()
        synth, labels = self._synthesize(n, shape, rng)
        synth = np.asarray(synth, dtype=np.float32)
        if synth.shape != (n, *shape) or (labels is not None and np.shape(labels) != (n,)):
            raise AssertionError(f"{self.name}: _synthesize must return (n, h, w, c) images and (n,) labels or None")
        made = ImageSet(
            synth,
            labels=None if labels is None else np.asarray(labels),
            class_names=self.label_names(),
            source=f"{self.name} synthetic images",
        )
        return self._released(shape, t0, images=made)

    def synthetic_count(self, n_inputs: int | None) -> int | None:
        """How many images a published release writes, given the number of input (private) images, or ``None``
        when there is no input. The default: as many as the inputs. A synthesizer with a size parameter overrides
        this; ``None`` means the user must say how many."""
        return n_inputs

    def _synthesize(self, n: int, shape: tuple[int, int, int], rng: RNG) -> tuple[np.ndarray, np.ndarray | None]:
        """``n`` new images of ``shape`` (float in [0, 1], (n, h, w, c)) and their labels (n,), drawn from what
        :meth:`fit` learned; no input image is used."""
        raise NotImplementedError

    def label_names(self) -> tuple[str, ...] | None:
        """The names of the labels its images carry (the class names of the data it was fitted on, kept in its
        model file), or ``None`` when it has none to give."""
        return None


@dataclass(frozen=True)
class LearnerSpec:
    """A learner named, not built: the learners that read reports are analysis (:mod:`privpix.evaluation`), which
    a mechanism may not import, so it says which one its data user trains and with what.

    ``name``: a learner of :data:`privpix.evaluation.ldp_learners.CLASSIFIERS` (``nb``, ``ncc``, ``knn``);
    ``params``: its keyword arguments, the reports' domain ``d`` and per-feature ``epsilon`` among them."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)


class FeatureMechanism(Mechanism):
    """Releases one row of reports per image (``output == "features"``; e.g. randomized-response reports of
    encoded features): implement :meth:`_privatize_features`, :meth:`encode`, :meth:`utility_learner` and
    :meth:`feature_files`."""

    output: ClassVar[Output] = "features"
    noun: ClassVar[str] = "features"

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> FeatureRelease:
        """The reports of ``images`` (``FeatureRelease.features``, (n, k), input order; ``images`` is ``None`` and
        ``source`` holds the inputs)."""
        self._check_release_input(images)
        rng = as_rng(rng)
        t0 = time.perf_counter()
        feats = np.asarray(self._privatize_features(images, rng))
        if feats.ndim != 2 or len(feats) != len(images):
            raise AssertionError(f"{self.name}: _privatize_features must return (n, k), got {feats.shape}")
        return self._released(images.shape, t0, FeatureRelease, images=None, features=feats, source=images)

    def _privatize_features(self, images: ImageSet, rng: RNG) -> np.ndarray:
        """(n, k) released reports, one row per image."""
        raise NotImplementedError

    def feature_files(self, release: Release, labels: np.ndarray | None) -> tuple[dict[str, bytes], dict[str, Any]]:
        """How a :meth:`release` of reports is published: its files (name → bytes) and the fields of the manifest
        its readers check (its format, the files' digests, the guarantee); ``labels`` are published beside the
        reports, in the clear, when given. The sharded writer (:mod:`privpix.publishing.shards`) stages, commits
        and verifies them like any release."""
        raise NotImplementedError

    def encode(self, images: ImageSet) -> np.ndarray:
        """The clean (unperturbed) encodings (n, k) of ``images``, as a data user computes them for their own
        images at prediction time."""
        raise NotImplementedError

    def utility_learner(self) -> LearnerSpec:
        """The classifier a data user of these reports trains (``fit(reports, y)``, ``predict(encodings)``), by name:
        the grid builds it (:func:`privpix.evaluation.ldp_learners.learner_for`) and scores feature releases with
        it."""
        raise NotImplementedError


class ModelMechanism(Mechanism):
    """Publishes a trained model and no images (``output == "model"``; e.g. a DP-SGD classifier): it is published
    as the model file :meth:`save_model` writes (``privpix fit``) and applied with :meth:`predict`;
    :meth:`release` refuses."""

    output: ClassVar[Output] = "model"
    noun: ClassVar[str] = "a model"

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> Release:
        """Refuses, after the checks every release makes: its one output is the model, whatever images are
        given."""
        self._check_release_input(images)
        # Its predictions on the given images (the private training images, say) would be a new computation on them
        # that the guarantee does not cover.
        raise ParameterError(
            f"{self.name}: publishes a trained model, not images; write it with `privpix fit --method "
            f"{self.name} ... --output model.pt` (save_model) and apply it with predict()"
        )

    def predict(self, images: ImageSet) -> np.ndarray:
        """The (n,) integer labels the released model predicts for ``images`` (post-processing of the model; the
        images are the caller's, and the guarantee says nothing about them)."""
        raise NotImplementedError

    def membership_score(self, images: ImageSet) -> np.ndarray | None:
        """(n,) float scores of labelled ``images``, higher when an (image, label) looks like it was in the
        training set, computed from the released model alone (post-processing; e.g. minus the model's loss). The
        one-run audit guesses canaries from it. ``None`` (the default) when the mechanism has none."""
        return None


class RecordMechanism(Mechanism):
    """Releases tabular records (``output == "records"``): implement :meth:`_privatize_records`."""

    output: ClassVar[Output] = "records"
    noun: ClassVar[str] = "tabular records"

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> Release:
        """Refuses: it releases records (:meth:`release_records`), not images."""
        self._check_release_input(images)
        raise ParameterError(f"{self.name}: releases tabular records, not images; give it records")

    def _privatize_records(self, records: RecordSet, rng: RNG) -> pd.DataFrame:
        """The released columns as a DataFrame."""
        raise NotImplementedError

    def release_records(self, records: RecordSet, rng: RNG | int | None = None) -> RecordRelease:
        """Privatize tabular records; ``rng`` as in :meth:`release`."""
        if not isinstance(records, RecordSet):
            raise ParameterError(f"{self.name}: release_records expects a RecordSet, got {type(records).__name__}")
        self._validate()
        self._check_fitted()
        rng = as_rng(rng)
        t0 = time.perf_counter()
        frame = self._privatize_records(records, rng)
        return RecordRelease(
            frame, self.privacy((0, 0, 0)).guarantee, self.name, self.get_params(), time.perf_counter() - t0
        )


# What each declared output is released by: the class a mechanism declaring it is an instance of.
KINDS: dict[Output, type[Mechanism]] = {
    "images": ImageMechanism,
    "synthetic-images": SyntheticImageMechanism,
    "features": FeatureMechanism,
    "model": ModelMechanism,
    "records": RecordMechanism,
}

_K = TypeVar("_K", ImageMechanism, SyntheticImageMechanism, FeatureMechanism, ModelMechanism, RecordMechanism)


def require_kind(mech: Mechanism, kind: type[_K]) -> _K:
    """``mech`` as a mechanism of ``kind``, for generic code about to call that kind's hooks; a mechanism of
    another kind is refused in one line that says what it releases."""
    if not isinstance(mech, kind):
        raise ParameterError(f"{mech.name}: releases {mech.capabilities().output}, not {kind.noun}")
    return mech
