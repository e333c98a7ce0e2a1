"""The base of every mechanism that learns a model: trained by :meth:`~TrainedModel.fit` on the data it is given,
or read from the model file its ``model`` parameter names (written earlier by :meth:`~TrainedModel.save_model`,
which is all ``privpix fit`` calls)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, ClassVar, Self

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import DataError, ParameterError
from privpix.fileio import sha256_file
from privpix.mechanisms.base import (
    Capabilities,
    Claim,
    FitsOn,
    Mechanism,
    ModelFile,
    UnstatedNoise,
    count_of,
    shape_of,
)
from privpix.mechanisms.params import param
from privpix.privacy.composition import NoiseEvent
from privpix.privacy.guarantees import Guarantee


class TrainedModel(Mechanism, ModelFile):
    """A mechanism with a ``model`` parameter (declared here) and training parameters (named in
    ``training``): with ``model`` empty it fits on the private set (``fits_on="private"``: :meth:`fit` trains on
    the data it is given, with the training parameters and ``seed``); with ``model=FILE`` it fits on that file
    (``fits_on="model-file"``). A model file records the training parameters; once it is read they are the ones
    in force, so ``get_params`` and every manifest say what the model was really trained with, and a training
    parameter given that contradicts the file is an error.

    Subclasses implement :meth:`_train`, :meth:`_read_model` and :meth:`_write_model`, and use :meth:`_load`
    for the fitted ``(model, meta)``."""

    # The parameters that only shape training, and the key each is recorded under in a model file's meta.
    training: ClassVar[dict[str, str]] = {}
    # The model file (a subclass may override the parameter, to say what its file holds).
    model: str = param("", "trained model file; empty: fit() trains one on the images it is given")

    model_: Any = None
    meta_: dict | None = None
    loaded_from_: str | None = None  # the model file of the fitted state; "" when fit() trained it
    trained_with_: dict | None = None
    model_sha256_: str | None = None  # SHA-256 of the model file read (None when fit() trained it)

    def _fits_on(self) -> FitsOn:
        """For :meth:`capabilities`: what this setting of the mechanism fits on."""
        return "model-file" if self.model else "private"

    def _training(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.training}

    @property
    def is_fitted(self) -> bool:
        if self.model_ is None:
            return False
        if self.model:
            return self.loaded_from_ == self.model
        return self.loaded_from_ == "" and self.trained_with_ == self._training()

    def fit(self, data: ImageSet | RecordSet | None = None, *, seed: int | None = None) -> Self:
        """With ``model``: read the file (its training parameters become the ones in force). Without: train on
        ``data`` with the training parameters and ``seed`` (default 0)."""
        self._validate()
        if self.model:
            if self.loaded_from_ != self.model:
                digest = file_sha256(self.model)
                model, meta = self._read_model(self.model)
                if file_sha256(self.model) != digest:
                    raise DataError(f"{self.model}: the model file changed while it was read; read it again")
                self._adopt_training(meta)
                self.model_, self.meta_, self.loaded_from_ = model, meta, self.model
                self.model_sha256_ = digest
            return self
        if data is None:
            raise ParameterError(f"{self.name}: fit() trains on the data it is given; give it, or a model file")
        self.model_, self.meta_ = self._train(data, None if seed is None else int(seed))
        self.loaded_from_, self.trained_with_, self.model_sha256_ = "", self._training(), None
        return self

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """The guarantee of :meth:`_guarantee` (a trained model's, read from its file), with no noise finer than
        it."""
        return Claim.of(self._guarantee(shape_of(data)), self.neighbours())

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """The guarantee a release of images of ``shape`` carries."""
        raise NotImplementedError

    def _adopt_training(self, meta: dict) -> None:
        defaults = {p.name: p.default for p in self.params}
        for attr, key in self.training.items():
            if meta.get(key) is None:
                continue  # a file written before the parameter was recorded
            mine, theirs = getattr(self, attr), type(defaults[attr])(meta[key])
            if mine != defaults[attr] and mine != theirs:
                raise ParameterError(
                    f"{self.name}: {attr}={mine} was given, but {self.model} was trained with {attr}={theirs}; "
                    "training parameters apply only when fit() trains"
                )
            setattr(self, attr, theirs)

    def save_model(self, path: str | os.PathLike) -> Path:
        """Write the fitted model to ``path`` (what ``privpix fit --output`` does); ``model=path`` reads it."""
        self._check_fitted()
        return self._write_model(Path(path))

    def _load(self) -> tuple[Any, dict]:
        """The fitted ``(model, meta)``; a named model file is read on first use."""
        self._check_fitted()
        assert self.meta_ is not None
        return self.model_, self.meta_

    def _train(self, data: ImageSet | RecordSet, seed: int | None) -> tuple[Any, dict]:
        """Train on ``data``: the model and its description (training parameters under their ``training`` keys,
        ``fitted_on``, history). ``seed`` None: the subclass chooses (a fixed default, or OS entropy where a
        seeded fit would be weaker)."""
        raise NotImplementedError

    def _read_model(self, path: str) -> tuple[Any, dict]:
        raise NotImplementedError

    def _write_model(self, path: Path) -> Path:
        raise NotImplementedError

    def _secure(self) -> dict[str, Any]:
        """The ``secure``/``not_secure`` of :meth:`capabilities`: the networks draw their noise from torch's
        floating-point samplers."""
        return {"secure": None, "not_secure": "its noise is drawn by torch in floating point (no exact sampler)"}


def _recorded_ledger(meta: dict) -> dict | None:
    fit = meta.get("fit")
    ledger = fit.get("ledger") if isinstance(fit, dict) else None
    return ledger if isinstance(ledger, dict) else None


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a model file's bytes (:func:`privpix.fileio.sha256_file`); a model file that cannot be
    read is a one-line :class:`~privpix.errors.DataError` naming it, not a traceback."""
    try:
        return sha256_file(Path(path))
    except FileNotFoundError:
        raise DataError(f"{path}: model file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the model file ({exc.strerror or exc})") from None


class CalibratedModel(TrainedModel):
    """A :class:`TrainedModel` whose training is calibrated for its (ε, δ) claim (DP-SGD, the DP synthesizers): ε
    and δ are training parameters, and a model file serves only the claim it was fitted for. Subclasses implement
    :meth:`_check_delta`; ``calibration_verb`` words the refusal of a file fitted for another claim."""

    calibration_verb: ClassVar[str] = "trained"
    # How far below the claimed ε the accountant's ε for the recorded noise may lie (the calibration's search
    # tolerance); above the claim it may not lie at all.
    calibration_tolerance: ClassVar[float] = 1e-6
    # The accountant a fit's ε comes from, when it is not the one its meta records for its noise (a mechanism that
    # composes several releases, dp-teacher); None: ``meta["accountant"]``.
    accountant_name: ClassVar[str | None] = None
    # Capabilities.seconds_per_value: a planning hint for a release that runs a generator or a network.
    _seconds_per_value: ClassVar[float | None] = None
    # Set by `privpix fit --ledger` before save_model: the ledger entry that charged this fit ({"path", "entry"}).
    ledger_entry_: dict | None = None
    # K, resolved by :meth:`_labels` (a subclass may override the parameter, or place its own before it).
    n_classes: int = param(
        0, "K, public: 0 takes the data set's declared class names (its schema); labels lie in 0..K-1", minimum=0
    )
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def capabilities(self) -> Capabilities:
        """Fitted on the private set (a DP fit) or on a model file, in the fitted shape, with labels; the output
        its kind declares."""
        shape = tuple(self.meta_["shape"]) if self.meta_ is not None and self.is_fitted else None
        return Capabilities(
            fits_on=self._fits_on(),
            fixed_shape=shape,
            needs_labels=True,
            output=self.output,
            dp_fit=self._fits_on() == "private",
            seconds_per_value=self._seconds_per_value,
            **self._secure(),
        )

    def _check_delta(self) -> None:
        """Refuse a δ the mechanism cannot be calibrated for."""
        raise NotImplementedError

    def _recompute(self, meta: dict) -> tuple[float, tuple[NoiseEvent, ...]]:
        """(ε at the recorded δ, noise events) recomputed through the accountant from what a fit's ``meta``
        records of its noise (multiplier, sensitivity, n, steps, sampling rate); never from a stored ε. Raises
        ``ValueError`` naming a recorded field that contradicts the others."""
        raise NotImplementedError

    def _recomputed(self) -> tuple[float, tuple[NoiseEvent, ...]]:
        """:meth:`_recompute` of the fitted model's meta (cached on it: a release asks many times)."""
        meta = self.meta_
        assert meta is not None
        cached = self.__dict__.get("_recomputed_cache")
        if cached is None or cached[0] is not meta:
            cached = (meta, self._recompute(meta))
            self.__dict__["_recomputed_cache"] = cached
        return cached[1]

    def _verify_file(self) -> None:
        """Refuse a model file whose recorded claim, or recorded fit, disagrees with the noise it records."""
        meta = self.meta_
        assert meta is not None
        where = f"{self.model}: {self.name} model file"
        try:
            eps, events = self._recompute(meta)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{where} records noise that does not add up ({exc}); refit it") from None
        claim = meta.get("epsilon")
        if isinstance(claim, bool) or not isinstance(claim, int | float) or not math.isfinite(claim) or claim <= 0:
            raise DataError(f"{where} records no valid ε ({claim!r}); refit it")
        if not claim * (1 - self.calibration_tolerance) <= eps <= claim:
            accountant = self.accountant_name or meta.get("accountant")
            raise DataError(
                f"{where} claims ε={claim:.6g} at δ={meta.get('delta')!r}, but the noise it records gives "
                f"ε={eps:.6g} ({accountant}): the file was edited or damaged; refuse to release from it"
            )
        fit = meta.get("fit")
        if fit is not None:
            recorded = fit.get("events") if isinstance(fit, dict) else None
            if recorded != [e.to_dict() for e in events]:
                raise DataError(f"{where}: its recorded fit's noise events disagree with the noise it records")

    def dp_fit_record(self) -> dict[str, Any] | None:
        if not (self.model and self.is_fitted and self.model_sha256_):
            return None
        meta = self.meta_
        assert meta is not None
        eps, events = self._recomputed()
        shape = tuple(meta["shape"])
        recorded = meta.get("fit")
        fit = recorded if isinstance(recorded, dict) else {}
        ledger = fit.get("ledger")
        return {
            "sha256": self.model_sha256_,
            "guarantee": self._guarantee(shape).to_dict(),
            "epsilon": eps,
            "delta": float(meta["delta"]),
            "events": [e.to_dict() for e in events],
            "ledger": ledger if isinstance(ledger, dict) else None,
        }

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """The noise of the fit: the fitted (or loaded) model's, recomputed from its meta, else what a fit on
        ``n`` images of ``shape`` would add (:meth:`_planned_events`); the audit tests that noise, for one image
        (:meth:`_unit_events`). A named model file that nothing has read yet is read first: its noise is the
        claim's."""
        if self.model and not self.is_fitted:
            self.fit(None)
        shape = shape_of(data)
        if self._fitted_meta() is not None:
            events = self._recomputed()[1]
        else:
            try:
                events = self._planned_events(shape, count_of(data, n))
            except ParameterError as exc:
                raise UnstatedNoise(str(exc), self._guarantee(shape)) from None
        return Claim(self._guarantee(shape), events, self._unit_events(events))

    def _unit_events(self, events: tuple[NoiseEvent, ...]) -> tuple[NoiseEvent, ...]:
        """The noise an audit of one image tests: the events charged."""
        return events

    def _planned_events(self, shape: tuple[int, int, int], n: int | None) -> tuple[NoiseEvent, ...]:
        raise NotImplementedError

    def save_model(self, path: str | os.PathLike) -> Path:
        """Write the fitted model with the record of its fit: its guarantee, noise events and accountant, and the
        ledger entry that charged it (set by ``privpix fit --ledger``; ``None`` otherwise)."""
        self._check_fitted()
        meta = self.meta_
        assert meta is not None
        shape = tuple(meta["shape"])
        events = self._recomputed()[1]
        meta["fit"] = {
            "guarantee": self._guarantee(shape).to_dict(),
            "events": [e.to_dict() for e in events],
            "accountant": self.accountant_name or meta.get("accountant"),
            "ledger": self.ledger_entry_ if self.ledger_entry_ is not None else _recorded_ledger(meta),
        }
        return super().save_model(path)

    def _training(self) -> dict[str, Any]:
        # ε and δ calibrate the fit: changing either after it makes the mechanism unfitted.
        return {"epsilon": self.epsilon, "delta": self.delta, **super()._training()}

    @property
    def is_fitted(self) -> bool:
        # A model file is fitted only for the (ε, δ) it was calibrated for.
        return super().is_fitted and (not self.model or self._file_claim() == (self.epsilon, self.delta))

    def _file_claim(self) -> tuple[float, float]:
        assert self.meta_ is not None
        return self.meta_["epsilon"], self.meta_["delta"]

    def fit(self, data: ImageSet | RecordSet | None = None, *, seed: int | None = None) -> Self:
        """:meth:`TrainedModel.fit`, after checking δ; a model file must then have been fitted for this (ε, δ)."""
        self._validate()
        self._check_delta()
        fresh = bool(self.model) and self.loaded_from_ != self.model
        super().fit(data, seed=seed)
        if fresh:
            try:
                self._verify_file()
            except DataError:
                self.model_ = self.meta_ = self.loaded_from_ = self.model_sha256_ = None
                raise
        if self.model and self._file_claim() != (self.epsilon, self.delta):
            eps, delta = self._file_claim()
            raise ParameterError(
                f"{self.name}: {self.model} was {self.calibration_verb} for ε={eps:g}, δ={delta:g}; give "
                f"--epsilon {eps:g} --delta {delta:g} (a release states the file's guarantee)"
            )
        return self

    def _meta_head(self, shape: tuple[int, int, int], n: int, classes: tuple[str, ...] | None = None,
                   unconditional: bool = False) -> dict[str, Any]:  # fmt: skip
        """What every model file of a calibrated fit starts with: the kind, the image shape, the (ε, δ) and the n
        it was calibrated for, the class names (public schema; ``None`` when the data named none) and whether it
        was fitted on unlabelled images, and the training parameters under their ``training`` keys."""
        return {
            "kind": self.name,
            "shape": list(shape),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "n": n,
            "class_names": None if classes is None else [str(c) for c in classes],
            "unconditional": bool(unconditional),
            **{key: getattr(self, param) for param, key in self.training.items()},
        }

    def _fitted_meta(self) -> dict | None:
        """The fitted model's description, or ``None`` before a fit (or after a training parameter changed)."""
        return self.meta_ if self.meta_ is not None and self.is_fitted else None

    def _central_guarantee(self, caveats: list[str], unit: str) -> Guarantee:
        """Central (ε, δ)-DP per image for ``unit``, with ``caveats`` and, once fitted, the two that depend on the
        fit: a known seed, and a δ not below 1/n."""
        meta = self._fitted_meta()
        if meta is not None:
            # The claim stands only because the accountant's ε for the recorded noise is at most it (checked when a
            # file is read); say what that ε is.
            earned = self._recomputed()[0]
            caveats.append(
                f"recomputed from the recorded noise through the accountant: ε = {earned:.6g} at δ = {self.delta:g}"
            )
            if meta.get("seed") is not None:
                caveats.append(
                    f"fitted with seed {meta['seed']}, which the model file records: anyone who holds the file can "
                    "recompute and remove the noise; a research run, not for publication"
                )
            if self.delta >= 1.0 / meta["n"]:
                caveats.append(f"δ = {self.delta:g} is not below 1/n = {1.0 / meta['n']:.3g}: a weak guarantee")
        return Guarantee(
            model="central-dp",
            epsilon=self.epsilon,
            delta=self.delta,
            unit=unit,
            per_image_epsilon=self.epsilon,
            sound=True,
            caveats=tuple(caveats),
        )

    def _labels(self, data: Any, why: str, *, unlabelled: bool = False) -> Any:
        """The integer labels of ``data`` with K = ``n_classes`` resolved, or a clear refusal before any work; ``why``
        says what the labels are needed for.

        The class list is public schema: a data set that names its classes (class folders, a dataset's declared
        names) fixes K, and an ``n_classes`` that contradicts it is refused; data that names none needs
        ``n_classes``. K is never read from the private labels. With ``unlabelled`` (an unconditional synthesizer),
        images without labels are one class. ``n_classes`` is set to the K in force (recorded in the model file)."""
        import numpy as np

        if not isinstance(data, ImageSet):
            raise ParameterError(f"{self.name}: fit() needs images ({why})")
        if data.labels is None:
            if not unlabelled:
                raise ParameterError(f"{self.name}: fit() needs labelled images ({why})")
            if self.n_classes not in (0, 1):
                raise ParameterError(
                    f"{self.name}: n_classes={self.n_classes} was given, but the images are unlabelled (one class); "
                    "drop n_classes, or give the images class folders"
                )
            self.n_classes = 1
            return np.zeros(len(data), dtype=np.int64)
        names = data.class_names
        if names:
            if self.n_classes not in (0, len(names)):
                raise ParameterError(
                    f"{self.name}: n_classes={self.n_classes} contradicts the {len(names)} classes the data set "
                    f"declares ({', '.join(map(str, names[:12]))}); the class list is its public schema: drop "
                    "n_classes"
                )
            k = len(names)
        elif self.n_classes == 0:
            raise ParameterError(
                f"{self.name}: the images name no classes (no class folders, no declared class names); give "
                "n_classes, the public number of classes"
            )
        else:
            k = self.n_classes
        labels = np.asarray(data.labels)
        if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= k:
            raise ParameterError(
                f"{self.name}: labels must be integers in 0..{k - 1} (K={k} classes, public); set n_classes to "
                "the number of classes"
            )
        self.n_classes = k
        return labels


def sampling(n: int, batch_size: float) -> tuple[float, int]:
    """(q, steps per epoch) of DP-SGD's Poisson sampling for n training examples and an expected batch size:
    q = batch_size / n, and round(n / batch_size) steps, so an epoch sees each example once in expectation. Shared
    by ``dp-sgd`` and ``dp-teacher``'s teacher, whose accounting must agree."""
    if n < 1:
        raise ParameterError(f"dp-sgd: needs at least one training example, got {n}")
    if batch_size > n:
        raise ParameterError(f"batch_size must be <= the number of training examples ({n}), got {batch_size}")
    return batch_size / n, max(1, round(n / batch_size))
