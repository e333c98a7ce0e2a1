"""The mechanism protocol: every privatization method plugs in here, and nothing downstream special-cases one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError, check_delta, check_positive
from privpix.guarantees import Guarantee
from privpix.noise import RNG, make_rng


@dataclass(frozen=True)
class Param:
    """A mechanism parameter: name, type, default, what it means, and its allowed values."""

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None  # inclusive lower bound for numbers

    def validate(self, value: Any) -> Any:
        if isinstance(value, str) and self.kind is not str:
            value = self.parse(value)
        if self.kind is bool:
            if not isinstance(value, bool | np.bool_):
                raise ParameterError(f"{self.name} must be true or false, got {value!r}")
            value = bool(value)
        elif self.kind in (int, float):
            try:
                num = self.kind(value)
            except (TypeError, ValueError):
                raise ParameterError(f"{self.name} must be {self.kind.__name__}, got {value!r}") from None
            if self.kind is int and num != value:
                raise ParameterError(f"{self.name} must be an integer, got {value!r}")
            if not np.isfinite(num):
                raise ParameterError(f"{self.name} must be finite, got {value!r}")
            if self.minimum is not None and num < self.minimum:
                raise ParameterError(f"{self.name} must be >= {self.minimum:g}, got {value!r}")
            value = num
        if self.choices is not None and value not in self.choices:
            raise ParameterError(f"{self.name} must be one of {', '.join(map(str, self.choices))}; got {value!r}")
        return value

    def parse(self, text: str) -> Any:
        t = text.strip()
        if self.kind is bool:
            low = t.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ParameterError(f"{self.name} must be true or false, got {text!r}")
        if self.kind is int:
            try:
                return int(t)
            except ValueError:
                raise ParameterError(f"{self.name} must be an integer, got {text!r}") from None
        if self.kind is float:
            try:
                return float(t)
            except ValueError:
                raise ParameterError(f"{self.name} must be a number, got {text!r}") from None
        return t


@dataclass
class Release:
    """What a mechanism publishes.

    Attributes:
        images: the released images (float32 in [0, 1], same metadata as the input).
        guarantee: the privacy statement that holds for this release.
        mechanism: registered name.
        parameters: every parameter in force, defaults included (with ``epsilon`` and ``delta``).
        seconds: wall time of the release.
    """

    images: ImageSet
    guarantee: Guarantee
    mechanism: str
    parameters: dict[str, Any]
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RecordRelease:
    """What a mechanism publishes from tabular records: ``frame`` holds the released feature columns (and the
    utility label column when the mechanism keeps it); the rest as :class:`Release`."""

    frame: pd.DataFrame
    guarantee: Guarantee
    mechanism: str
    parameters: dict[str, Any]
    seconds: float = 0.0


class Mechanism:
    """Base class. Subclasses set the class attributes and implement :meth:`guarantee` and :meth:`_privatize`.

    Parameters are keyword arguments validated against ``params`` at construction (sklearn style: stored as
    given, all checks in one place). ``epsilon`` is required when ``uses_epsilon`` and refused otherwise.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str] = ""
    model: ClassVar[str] = "none"
    soundness: ClassVar[str] = "no privacy claim"  # one line for listings: what holds, and how to get a proof
    uses_epsilon: ClassVar[bool] = True
    uses_delta: ClassVar[bool] = False
    params: ClassVar[tuple[Param, ...]] = ()

    def __init__(self, epsilon: float | None = None, delta: float | None = None, **params: Any) -> None:
        if self.uses_epsilon:
            if epsilon is None:
                raise ParameterError(f"{self.name}: epsilon is required")
            self.epsilon: float | None = check_positive("epsilon", epsilon)
        else:
            if epsilon is not None:
                raise ParameterError(
                    f"{self.name}: takes no epsilon (guarantee '{self.model}'); set its strength with --param"
                )
            self.epsilon = None
        if delta is not None and not self.uses_delta and float(delta) != 0.0:
            raise ParameterError(f"{self.name}: takes no delta")
        self.delta = check_delta(delta if delta is not None else 0.0)
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ParameterError(
                f"{self.name}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(known) or 'none'}"
            )
        self.values: dict[str, Any] = {}
        for p in self.params:
            self.values[p.name] = p.validate(params[p.name]) if p.name in params else p.default
        self._check()

    def _check(self) -> None:
        """Cross-parameter validation; override when parameters constrain each other."""

    def __getattr__(self, item: str) -> Any:
        values = self.__dict__.get("values")
        if values is not None and item in values:
            return values[item]
        raise AttributeError(item)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.parameters().items())
        return f"{type(self).__name__}({args})"

    def parameters(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.uses_epsilon:
            out["epsilon"] = self.epsilon
        if self.uses_delta:
            out["delta"] = self.delta
        out.update(self.values)
        return out

    def fit(self, data: ImageSet | None = None) -> Mechanism:
        """Learn what the mechanism needs. Per-image mechanisms need nothing; returns self."""
        return self

    def guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        """The guarantee a release of images of ``shape`` = (h, w, c) carries."""
        raise NotImplementedError

    def audit_unit(self) -> tuple[str, int]:
        """How two neighbouring inputs differ for the claim :meth:`guarantee` makes, for the empirical audit:
        ``("image", 1)`` (one image replaced by any other), ``("column", 1)`` (one pixel column of one image),
        ``("pixels", m)`` (up to m pixels of one image) or ``("dataset", 1)`` (two datasets that differ in one
        image, for mechanisms whose output for one image depends on the others)."""
        return ("image", 1)

    def audit_claim(self, shape: tuple[int, int, int]) -> tuple[float | None, float]:
        """(ε, δ) claimed for the :meth:`audit_unit` neighbours; ``(None, 0)`` when nothing is claimed."""
        g = self.guarantee(shape)
        return g.epsilon, g.delta

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        """(n, h, w, c) float in [0, 1] → released array of the same shape (float)."""
        raise NotImplementedError

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        """Hook for mechanisms that need more than the pixels (labels, attributes); default: ``_privatize``."""
        return self._privatize(images.as_float().astype(np.float64), rng)

    def release(self, images: ImageSet, rng: RNG | int | None = None) -> Release:
        """Privatize ``images``; ``rng`` is a Generator, SecureRandom, or an integer seed."""
        if not isinstance(images, ImageSet):
            raise ParameterError(f"{self.name}: release expects an ImageSet, got {type(images).__name__}")
        rng = _as_rng(rng)
        t0 = time.perf_counter()
        out = np.asarray(self._privatize_set(images, rng), dtype=np.float32)
        released = images.with_images(out)
        return Release(
            images=released,
            guarantee=self.guarantee(images.shape),
            mechanism=self.name,
            parameters=self.parameters(),
            seconds=time.perf_counter() - t0,
        )

    @property
    def supports_records(self) -> bool:
        """Whether the mechanism releases tabular records (it implements :meth:`_privatize_records`)."""
        return type(self)._privatize_records is not Mechanism._privatize_records

    def _privatize_records(self, records: RecordSet, rng: RNG) -> pd.DataFrame:
        """Hook for mechanisms that release tabular records: the released columns as a DataFrame."""
        raise ParameterError(f"{self.name}: releases images, not tabular records")

    def release_records(self, records: RecordSet, rng: RNG | int | None = None) -> RecordRelease:
        """Privatize tabular records; ``rng`` as in :meth:`release`."""
        if not isinstance(records, RecordSet):
            raise ParameterError(f"{self.name}: release_records expects a RecordSet, got {type(records).__name__}")
        rng = _as_rng(rng)
        t0 = time.perf_counter()
        frame = self._privatize_records(records, rng)
        return RecordRelease(frame, self.guarantee((0, 0, 0)), self.name, self.parameters(), time.perf_counter() - t0)


def _as_rng(rng: RNG | int | None) -> RNG:
    """A Generator or SecureRandom passes through; an integer seeds a Generator; ``None`` takes OS entropy."""
    if rng is None or isinstance(rng, int | np.integer):
        return make_rng(None if rng is None else int(rng))
    return rng


MECHANISMS: dict[str, type[Mechanism]] = {}


def register(cls: type[Mechanism]) -> type[Mechanism]:
    if cls.name in MECHANISMS:
        raise ValueError(f"mechanism {cls.name!r} registered twice")
    MECHANISMS[cls.name] = cls
    return cls


def parse_method_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"pixel-laplace[sensitivity=bound,unit=pixel]"`` → ``("pixel-laplace", {...})``: a method label that
    carries its own parameters, so one run can compare variants of a mechanism."""
    text = spec.strip()
    if "[" not in text:
        return text.lower(), {}
    if not text.endswith("]"):
        raise ParameterError(f"method: {spec!r} must look like name[key=value,...]")
    name, _, inner = text[:-1].partition("[")
    params: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in inner.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ParameterError(f"method: parameter {item!r} in {spec!r} must be key=value")
        # Keeping the last of two different values would silently drop the other.
        if key in params and params[key] != value:
            raise ParameterError(f"method: parameter {key} given twice in {spec!r} ({params[key]} and {value})")
        params[key] = value
    return name.strip().lower(), params


def mechanism_class(spec: str) -> type[Mechanism]:
    """The registered class a method name or ``name[key=value,...]`` label refers to."""
    key, _ = parse_method_spec(spec)
    if key not in MECHANISMS:
        raise ParameterError(f"method: unknown mechanism {spec!r}; known: {', '.join(sorted(MECHANISMS))}")
    return MECHANISMS[key]


def method_params(spec: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parameters pinned in ``spec``'s brackets merged with ``params`` (``--param``), refusing a ``params``
    value that contradicts a pinned one: the label names the variant that is published, so overriding it
    would publish another one (e.g. the unsound ``sensitivity=data`` under ``[sensitivity=bound]``)."""
    _, inline = parse_method_spec(spec)
    known = {p.name: p for p in mechanism_class(spec).params}
    for key, value in (params or {}).items():
        if key not in inline or key not in known:
            continue  # nothing to contradict; an unknown key is refused by the constructor, naming it
        # Compare as the mechanism reads them, so [b=4] and b=4.0 agree.
        if known[key].validate(inline[key]) != known[key].validate(value):
            raise ParameterError(
                f"method {spec.strip()!r} pins {key}={inline[key]}, and --param {key}={value} contradicts it; "
                "give the parameter in one place"
            )
    return {**inline, **(params or {})}


def get_mechanism(name: str, epsilon: float | None = None, delta: float | None = None, **params) -> Mechanism:
    """Instantiate a registered mechanism by name (inline ``[key=value]`` parameters are merged in; a ``params``
    value that contradicts one of them is an error, see :func:`method_params`)."""
    cls = mechanism_class(name)
    return cls(epsilon=epsilon, delta=delta, **method_params(name, params))
