"""The base of every mechanism that learns a model: trained by :meth:`~TrainedModel.fit` on the data it is given,
or read from the model file its ``model`` parameter names (written earlier by :meth:`~TrainedModel.save_model`,
which is all ``privpix fit`` calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import Mechanism


class TrainedModel(Mechanism):
    """A mechanism with a ``model`` parameter (declare it in ``params``) and training parameters (named in
    ``training``): with ``model`` empty it fits on the private set (``fits_on="private"``: :meth:`fit` trains on
    the data it is given, with the training parameters and ``seed``); with ``model=FILE`` it fits on that file
    (``fits_on="model-file"``). A model file records the training parameters; once it is read they are the ones
    in force, so ``get_params`` and every manifest say what the model was really trained with, and a training
    parameter given that contradicts the file is an error.

    Subclasses implement :meth:`_train`, :meth:`_read_model` and :meth:`_write_model`, and use :meth:`_load`
    for the fitted ``(model, meta)``."""

    # The parameters that only shape training, and the key each is recorded under in a model file's meta.
    training: ClassVar[dict[str, str]] = {}

    model_: Any = None
    meta_: dict | None = None
    loaded_from_: str | None = None  # the model file of the fitted state; "" when fit() trained it
    trained_with_: dict | None = None

    def _fits_on(self) -> str:
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

    def fit(self, data: ImageSet | RecordSet | None = None, *, seed: int | None = None) -> TrainedModel:
        """With ``model``: read the file (its training parameters become the ones in force). Without: train on
        ``data`` with the training parameters and ``seed`` (default 0)."""
        self._validate()
        if self.model:
            if self.loaded_from_ != self.model:
                model, meta = self._read_model(self.model)
                self._adopt_training(meta)
                self.model_, self.meta_, self.loaded_from_ = model, meta, self.model
            return self
        if data is None:
            raise ParameterError(f"{self.name}: fit() trains on the data it is given; give it, or a model file")
        self.model_, self.meta_ = self._train(data, None if seed is None else int(seed))
        self.loaded_from_, self.trained_with_ = "", self._training()
        return self

    def _adopt_training(self, meta: dict) -> None:
        defaults = {p.name: p.default for p in self.params}
        for param, key in self.training.items():
            if meta.get(key) is None:
                continue  # a file written before the parameter was recorded
            mine, theirs = getattr(self, param), type(defaults[param])(meta[key])
            if mine != defaults[param] and mine != theirs:
                raise ParameterError(
                    f"{self.name}: {param}={mine} was given, but {self.model} was trained with {param}={theirs}; "
                    "training parameters apply only when fit() trains"
                )
            setattr(self, param, theirs)

    def save_model(self, path: str | Path) -> Path:
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
