"""What a DP release spends, declared as noise events, and the tight composition of many of them.

A sound mechanism declares the noise its release (or its fit) adds for one person's image in its privacy statement
(:meth:`privpix.mechanisms.Mechanism.privacy`, :attr:`privpix.mechanisms.Claim.events`), as typed events
(:data:`NoiseEvent` is their union; ``kind`` is the tag of their JSON form):

* :class:`LaplaceNoise` (``laplace``): ``count`` Laplace releases, each ε-DP for an L1 sensitivity (the noise
  scale is Δ₁/ε), composed as continuous Laplace (dominated by the one-dimensional pair); the secure mode's exact
  lattice Laplace is declared :class:`PureDP` instead, since its privacy profile is not exactly the continuous one's;
* :class:`GaussianNoise` (``gaussian``): ``count`` continuous Gaussian releases with noise multiplier z = σ/Δ₂
  (sensitivity-normalised); an exact discrete Gaussian is declared by its RDP-derived (ε, δ) (:class:`ApproxDP`),
  the bound that covers it;
* :class:`SampledGaussianNoise` (``sampled-gaussian``): ``steps`` Gaussian releases on a Poisson sample of rate q
  (DP-SGD's steps);
* :class:`PureDP` ε (``pure``) / :class:`ApproxDP` (ε, δ) (``approx``): a mechanism that declares nothing finer,
  composed as the worst ε- or (ε, δ)-DP mechanism (dp-accounting's pessimistic PLD of its privacy parameters).

Each event states the neighbouring relation its numbers are for. The ledger's relation is **replace-one** (one
image and its label replaced by another; the number of images is public), the relation of every per-image release
and of the DP synthesizers. An event stated for **add/remove** (DP-SGD) is charged for a replacement, which is one
removal and one addition: a Gaussian or Laplace shift of twice the sensitivity, dp-accounting's ``REPLACE_ONE``
privacy-loss distribution for a Poisson-sampled Gaussian, and group privacy (2ε, (1 + e^ε)δ) for bare (ε, δ).

:func:`compose` composes the events with Google's dp-accounting privacy-loss distributions (Koskela et al. 2020;
Doroshenko et al. 2022), pessimistic estimates with connect-the-dots, so the ε it reports is never below the true ε
of the composition: the smallest ε at which the composition is (ε, δ)-DP. Gaussians are first merged exactly (the
composition of Gaussians with noise multipliers z_i is one Gaussian with 1/z² = Σ 1/z_i²).

What the composition assumes: which mechanism runs next may depend on earlier outputs, but its noise parameters
must not (the adaptive composition theorem for fixed privacy parameters). A ledger therefore admits by a rule that
holds even when they do (:mod:`privpix.privacy.filters`), and shows this composition beside it, labelled.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from privpix.errors import DataError
from privpix.privacy.gaussian_pld import gaussian_pld

Relation = Literal["replace-one", "add-remove"]
RELATIONS: tuple[Relation, ...] = ("replace-one", "add-remove")
LEDGER_RELATION: Relation = "replace-one"
ACCOUNTANT = "dp-accounting PLD, pessimistic"
BASIC = "basic composition (ε and δ summed)"
# dp-accounting's default grid of the privacy loss (nats). A composition whose loss spans more than MAX_POINTS
# grid points is put on a coarser grid, which stays pessimistic (an upper bound), only less tight.
INTERVAL = 1e-4
MAX_POINTS = 1 << 21


def _check_common(event: NoiseEvent, count: int) -> None:
    if event.relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {event.relation!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")


def _check_number(name: str, value: Any) -> None:
    # Read from hand-edited files too: anything but a finite non-negative number is refused here, once.
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")


def _plain(event: Any, *names: str) -> None:
    # A NumPy scalar would change the text a composition orders its events by (_order), and so the bits of its ε:
    # numbers are kept as Python ints and floats. An int read from a file stays an int, as it always did.
    for name in names:
        value = getattr(event, name)
        if type(value) not in (int, float) and isinstance(value, numbers.Real) and not isinstance(value, bool):
            object.__setattr__(event, name, int(value) if isinstance(value, numbers.Integral) else float(value))


def _times(count: int, relation: str) -> tuple[str, str]:
    return (f"{count} × " if count > 1 else ""), (" (add/remove)" if relation == "add-remove" else "")


@dataclass(frozen=True)
class LaplaceNoise:
    """``count`` Laplace releases, each ε-DP for an L1 sensitivity (the noise scale is Δ₁/ε), composed as continuous
    Laplace (dominated by the one-dimensional pair)."""

    epsilon: float
    count: int = 1
    relation: Relation = LEDGER_RELATION
    kind: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        _plain(self, "epsilon", "count")
        _check_common(self, self.count)
        _check_number("epsilon", self.epsilon)

    def to_dict(self) -> dict[str, Any]:
        return _json(self.kind, {"epsilon": self.epsilon}, self.count, self.relation)

    def describe(self) -> str:
        times, rel = _times(self.count, self.relation)
        return f"{times}Laplace ε={self.epsilon:.4g}{rel}"


@dataclass(frozen=True)
class GaussianNoise:
    """``count`` continuous Gaussian releases with noise multiplier z = σ/Δ₂ (sensitivity-normalised); an exact
    discrete Gaussian is declared by its RDP-derived (ε, δ) (:class:`ApproxDP`), the bound that covers it."""

    noise_multiplier: float
    count: int = 1
    relation: Relation = LEDGER_RELATION
    kind: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        _plain(self, "noise_multiplier", "count")
        _check_common(self, self.count)
        _check_number("noise_multiplier", self.noise_multiplier)
        if not self.noise_multiplier > 0:
            raise ValueError("a Gaussian event needs a noise multiplier > 0")

    def to_dict(self) -> dict[str, Any]:
        return _json(self.kind, {"noise_multiplier": self.noise_multiplier}, self.count, self.relation)

    def describe(self) -> str:
        times, rel = _times(self.count, self.relation)
        return f"{times}Gaussian z={self.noise_multiplier:.4g}{rel}"


@dataclass(frozen=True)
class SampledGaussianNoise:
    """``steps`` Gaussian releases of noise multiplier z on a Poisson sample of rate q (DP-SGD's steps), stated for
    add/remove neighbours (what Poisson sampling's analysis is for)."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    relation: Relation = "add-remove"
    kind: ClassVar[str] = "sampled-gaussian"

    def __post_init__(self) -> None:
        _plain(self, "noise_multiplier", "sample_rate", "steps")
        _check_common(self, self.steps)
        _check_number("noise_multiplier", self.noise_multiplier)
        _check_number("sample_rate", self.sample_rate)
        if not self.noise_multiplier > 0:
            raise ValueError("a Gaussian event needs a noise multiplier > 0")
        if not 0 < self.sample_rate <= 1:
            raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate!r}")
        if self.relation != "add-remove":
            raise ValueError("a sampled-gaussian event is stated for add-remove neighbours (Poisson sampling)")

    @property
    def count(self) -> int:
        return self.steps

    def to_dict(self) -> dict[str, Any]:
        # Written as the ledger always wrote it: steps last.
        d = {"kind": self.kind, "noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate,
             "relation": self.relation, "steps": self.steps}  # fmt: skip
        return d

    def describe(self) -> str:
        times, rel = _times(self.steps, self.relation)
        return f"{times}sampled Gaussian z={self.noise_multiplier:.4g}, q={self.sample_rate:.4g}{rel}"


@dataclass(frozen=True)
class PureDP:
    """``count`` mechanisms that declare nothing finer than ε-DP (or whose exact noise is not the continuous one's,
    the secure mode's lattice Laplace), composed as the worst ε-DP mechanism."""

    epsilon: float
    count: int = 1
    relation: Relation = LEDGER_RELATION
    kind: ClassVar[str] = "pure"

    def __post_init__(self) -> None:
        _plain(self, "epsilon", "count")
        _check_common(self, self.count)
        _check_number("epsilon", self.epsilon)

    @property
    def delta(self) -> float:
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        return _json(self.kind, {"epsilon": self.epsilon}, self.count, self.relation)

    def describe(self) -> str:
        _, rel = _times(1, self.relation)
        return f"pure ε={self.epsilon:.4g}{rel}"


@dataclass(frozen=True)
class ApproxDP:
    """``count`` mechanisms that declare nothing finer than (ε, δ)-DP, δ > 0, composed as the worst (ε, δ)-DP
    mechanism (dp-accounting's pessimistic PLD of its privacy parameters). :func:`approx` builds one from any
    (ε, δ), :class:`PureDP` when δ = 0."""

    epsilon: float
    delta: float
    count: int = 1
    relation: Relation = LEDGER_RELATION
    kind: ClassVar[str] = "approx"

    def __post_init__(self) -> None:
        _plain(self, "epsilon", "delta", "count")
        _check_common(self, self.count)
        _check_number("epsilon", self.epsilon)
        if isinstance(self.delta, bool) or not isinstance(self.delta, int | float) or not 0 <= self.delta < 1:
            raise ValueError(f"delta must be in [0, 1) and only for approx events, got {self.delta!r}")

    def to_dict(self) -> dict[str, Any]:
        return _json(self.kind, {"epsilon": self.epsilon, "delta": self.delta}, self.count, self.relation)

    def describe(self) -> str:
        _, rel = _times(1, self.relation)
        return f"(ε={self.epsilon:.4g}, δ={self.delta:g}){rel}"


# The noise a DP release or fit adds for one person's image: one of these, told apart by type (``kind`` is the
# tag of its JSON form).
NoiseEvent = LaplaceNoise | GaussianNoise | SampledGaussianNoise | PureDP | ApproxDP
EVENT_TYPES: dict[str, type[NoiseEvent]] = {
    t.kind: t for t in (LaplaceNoise, GaussianNoise, SampledGaussianNoise, PureDP, ApproxDP)
}
KINDS = tuple(EVENT_TYPES)


def gaussian_only(events: list[NoiseEvent] | tuple[NoiseEvent, ...]) -> bool:
    """Whether ``events`` are continuous Gaussian noise and nothing else (what a Gaussian-DP ledger admits)."""
    return bool(events) and all(isinstance(e, GaussianNoise) for e in events)


def approx(epsilon: float, delta: float, relation: Relation = LEDGER_RELATION) -> PureDP | ApproxDP:
    """A bare (ε, δ) guarantee as an event: :class:`PureDP` when δ = 0, else :class:`ApproxDP`."""
    if not delta:
        return PureDP(float(epsilon), relation=relation)
    return ApproxDP(float(epsilon), float(delta), relation=relation)


def _json(kind: str, fields: dict[str, Any], count: int, relation: str) -> dict[str, Any]:
    # The key order every ledger and model file has: kind, its numbers, count (when > 1), relation.
    d: dict[str, Any] = {"kind": kind, **fields}
    if count != 1:
        d["count"] = count
    d["relation"] = relation
    return d


def event_from_dict(d: Any, where: str) -> NoiseEvent:
    """Validate an event read from a file: a one-line :class:`DataError` naming ``where`` when anything is off."""
    if not isinstance(d, dict):
        raise DataError(f"{where}: a noise event must be an object, got {d!r}")
    allowed = {"kind", "epsilon", "delta", "noise_multiplier", "sample_rate", "count", "steps", "relation"}
    unknown = set(d) - allowed
    if unknown:
        raise DataError(f"{where}: unknown field(s) {sorted(unknown)} in a noise event")
    args = dict(d)
    for key, value in args.items():
        if key in ("kind", "relation"):
            if not isinstance(value, str):
                raise DataError(f"{where}: {key} must be a string, got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise DataError(f"{where}: {key} must be a number, got {value!r}")
    kind = args.pop("kind", None)
    if kind not in EVENT_TYPES:
        raise DataError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    # A file may write a sampled Gaussian's steps as count, and any other event's count as steps (steps first, as
    # files were always read); a relation left out is the ledger's.
    times = "steps" if kind == "sampled-gaussian" else "count"
    args.setdefault("relation", LEDGER_RELATION)
    if "steps" in args or "count" in args:
        value = args.pop("steps") if "steps" in args else args.pop("count")
        args.pop("count", None)
        if isinstance(value, float):
            if not value.is_integer():
                raise DataError(f"{where}: count must be an integer, got {value!r}")
            value = int(value)
        args[times] = value
    if kind == "approx":
        args.setdefault("delta", 0.0)
    elif kind == "sampled-gaussian":
        args.setdefault("steps", 1)
    if "delta" in args and kind != "approx":
        if args.pop("delta") != 0:
            raise DataError(f"{where}: delta must be in [0, 1) and only for approx events, got {d['delta']!r}")
    try:
        return EVENT_TYPES[kind](**args)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where}: {_field_error(exc, kind)}") from None


def _field_error(exc: Exception, kind: str) -> str:
    # A missing or extra field is a TypeError naming the dataclass's argument; say it as the file's field.
    text = str(exc)
    if isinstance(exc, TypeError):
        if "missing" in text:
            return f"a {kind} event needs {text.rsplit(' ', 1)[-1].strip(chr(39))}"
        if "unexpected keyword" in text:
            return f"a {kind} event takes no {text.rsplit(' ', 1)[-1].strip(chr(39))}"
    return text


def events_from_dicts(items: object, where: str) -> list[NoiseEvent]:
    """Events read from JSON (a ledger entry, a model file's fit record), validated, naming ``where``."""
    if not isinstance(items, list) or not items:
        raise DataError(f"{where}: its noise events must be a non-empty list")
    return [event_from_dict(e, f"{where}, event {i + 1}") for i, e in enumerate(items)]


def replace_one(epsilon: float, delta: float, relation: str) -> tuple[float, float]:
    """(ε, δ) stated for ``relation`` as an (ε, δ) for replace-one: unchanged, or by group privacy over the removal
    and the addition that make one replacement, (2ε, (1 + e^ε)·δ)."""
    if relation == LEDGER_RELATION:
        return float(epsilon), float(delta)
    return 2.0 * epsilon, min(1.0, (1.0 + math.exp(min(epsilon, 700.0))) * delta)


# ---------------------------------------------------------------------------------------------- composition


def _span(event: NoiseEvent) -> float:
    """About the width (nats) of the part of the event's privacy-loss distribution that dp-accounting keeps (it
    truncates tails of negligible mass), for choosing the grid."""
    sens = 2.0 if event.relation == "add-remove" else 1.0
    k = event.count
    if isinstance(event, PureDP | ApproxDP):
        return 2.0 * event.epsilon * k
    if isinstance(event, SampledGaussianNoise):
        return 0.0  # each step's loss is small: dp-accounting composes thousands of steps on its default grid
    # A loss of mean m and spread s per release: k releases keep about k·m ± 12·√k·s (bounded by k times the range).
    mu = sens * event.epsilon if isinstance(event, LaplaceNoise) else sens / event.noise_multiplier
    width = k * mu * mu / 2 + 24.0 * math.sqrt(k) * mu
    return min(width, 2.0 * k * mu) if isinstance(event, LaplaceNoise) else width


def interval_for(events: list[NoiseEvent]) -> float:
    """The grid the composition uses: :data:`INTERVAL`, coarsened when the losses would span too many points."""
    span = sum(_span(e) for e in events)
    return max(INTERVAL, span / MAX_POINTS)


# A calibration asks for many compositions that share a part (dp-teacher's bisection composes one fixed embedding
# release with 20-odd teacher noises: the same Gaussian PLD each time, 0.45 s to build at ε = 10). dp-accounting's
# PLDs are not changed by composing them (compose and self_compose return new ones), so one may be used again.
# Eight entries: a calibration reuses one (the fixed part); a PLD on a fine grid can hold 7-9 MB.
@functools.lru_cache(maxsize=8)
def _pld(event: NoiseEvent, count: int, interval: float):
    """dp-accounting's pessimistic PLD of ``count`` × ``event`` under replace-one (kept for reuse: never modify)."""
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    times = event.count * count
    sens = 2.0 if event.relation == "add-remove" else 1.0
    if isinstance(event, LaplaceNoise):
        return pld.from_laplace_mechanism(1.0 / event.epsilon, sensitivity=sens,
                                          value_discretization_interval=interval).self_compose(times)  # fmt: skip
    if isinstance(event, GaussianNoise):
        # k Gaussians of one z compose exactly to one Gaussian of z/√k: no discretisation error builds up.
        return gaussian_pld(event.noise_multiplier / math.sqrt(times), sensitivity=sens,
                            value_discretization_interval=interval)  # fmt: skip
    if isinstance(event, SampledGaussianNoise):
        one = gaussian_pld(event.noise_multiplier, sampling_prob=event.sample_rate,
                           neighboring_relation=NeighboringRelation.REPLACE_ONE,
                           value_discretization_interval=interval)  # fmt: skip
        return one.self_compose(times)
    eps, delta = replace_one(event.epsilon, event.delta, event.relation)
    params = common.DifferentialPrivacyParameters(eps, min(delta, 1.0 - 1e-15))
    return pld.from_privacy_parameters(params, value_discretization_interval=interval).self_compose(times)


def _order(event: NoiseEvent) -> str:
    """The key a composition orders its events by: the text the single event class of earlier versions had as its
    repr, so that every composition runs in the order it always ran and gives the same bits (PLD compositions are
    exact in theory, not in floating point)."""
    fields = {"epsilon": None, "delta": 0.0, "noise_multiplier": None, "sample_rate": None}
    fields.update({k: getattr(event, k) for k in fields if hasattr(event, k)})
    if isinstance(event, PureDP):
        fields["delta"] = 0.0
    return (f"NoiseEvent(kind={event.kind!r}, epsilon={fields['epsilon']!r}, delta={fields['delta']!r}, "
            f"noise_multiplier={fields['noise_multiplier']!r}, sample_rate={fields['sample_rate']!r}, "
            f"count={event.count!r}, relation={event.relation!r})")  # fmt: skip


def compose(events: list[NoiseEvent], delta: float) -> tuple[float, float]:
    """(ε, grid): the smallest ε at which the composition of ``events`` is (ε, ``delta``)-DP under replace-one, by
    dp-accounting's pessimistic PLDs on the grid returned (never below the true ε; ``inf`` when no finite ε holds
    at this δ, e.g. a Gaussian at δ = 0). No events: (0, grid)."""
    live = [e for e in events if not (isinstance(e, LaplaceNoise | PureDP | ApproxDP) and e.epsilon == 0
                                      and getattr(e, "delta", 0) == 0)]  # fmt: skip
    # Order does not change a composition: one cache entry per multiset (a ledger asks again at every check).
    return _compose_cached(tuple(sorted(live, key=_order)), float(delta))


# Beyond this ε (nats) for one event a PLD's probabilities underflow (e^-ε), and no budget is that large: the
# composition is then left to the basic sum.
MAX_EVENT_EPSILON = 300.0


@functools.lru_cache(maxsize=64)
def _compose_cached(live: tuple[NoiseEvent, ...], delta: float) -> tuple[float, float]:
    interval = interval_for(list(live))
    if any(isinstance(e, LaplaceNoise | PureDP | ApproxDP) and 2 * e.epsilon > MAX_EVENT_EPSILON for e in live):
        return math.inf, interval
    if not live:
        return 0.0, interval
    # Every Gaussian under one relation is one Gaussian: 1/z² adds up.
    merged: list[NoiseEvent] = []
    for rel in RELATIONS:
        inv = sum(e.count / e.noise_multiplier**2 for e in live if isinstance(e, GaussianNoise) and e.relation == rel)
        if inv:
            merged.append(GaussianNoise(1.0 / math.sqrt(inv), relation=rel))
    counts = Counter(e for e in live if not isinstance(e, GaussianNoise))
    out = None
    for event in merged:
        out = _compose(out, _pld(event, 1, interval))
    for event, k in sorted(counts.items(), key=lambda item: _order(item[0])):
        out = _compose(out, _pld(event, k, interval))
    assert out is not None
    eps = float(out.get_epsilon_for_delta(delta))
    return (max(0.0, eps) if math.isfinite(eps) else math.inf), interval


def _compose(a, b):
    return b if a is None else a.compose(b)


def accountant_text(interval: float) -> str:
    """How a ledger figure was computed, for every place one appears."""
    return f"{ACCOUNTANT}, replace-one, grid {interval:.3g}"
