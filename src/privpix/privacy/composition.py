"""What a DP release spends, declared as noise events, and the tight composition of many of them.

A sound mechanism declares the noise its release (or its fit) adds for one person's image
(:meth:`privpix.mechanisms.Mechanism.privacy_events`), as :class:`NoiseEvent` s:

* ``laplace``: ``count`` Laplace releases, each ε-DP for an L1 sensitivity (the noise scale is Δ₁/ε), composed as
  continuous Laplace (dominated by the one-dimensional pair); the secure mode's exact lattice Laplace is declared
  ``pure`` instead, since its privacy profile is not exactly the continuous one's;
* ``gaussian``: ``count`` continuous Gaussian releases with noise multiplier z = σ/Δ₂ (sensitivity-normalised);
  an exact discrete Gaussian is declared by its RDP-derived (ε, δ) (``approx``), the bound that covers it;
* ``sampled-gaussian``: ``steps`` Gaussian releases on a Poisson sample of rate q (DP-SGD's steps);
* ``pure`` ε / ``approx`` (ε, δ): a mechanism that declares nothing finer, composed as the worst ε- or
  (ε, δ)-DP mechanism (dp-accounting's pessimistic PLD of its privacy parameters).

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
must not (the adaptive composition theorem for fixed privacy parameters). Compositions of continuous Gaussians
only are exempt: their admission rule, Σ 1/z_i² ≤ 1/z², is a Gaussian-DP filter, valid for fully adaptive noise
(Smith & Thakurta 2022). For other mixes with ε chosen from earlier outputs, only the basic sum is proven.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from privpix.errors import DataError
from privpix.privacy.gaussian_pld import gaussian_pld

KINDS = ("laplace", "gaussian", "sampled-gaussian", "pure", "approx")
RELATIONS = ("replace-one", "add-remove")
LEDGER_RELATION = "replace-one"
ACCOUNTANT = "dp-accounting PLD, pessimistic"
BASIC = "basic composition (ε and δ summed)"
# dp-accounting's default grid of the privacy loss (nats). A composition whose loss spans more than MAX_POINTS
# grid points is put on a coarser grid, which stays pessimistic (an upper bound), only less tight.
INTERVAL = 1e-4
MAX_POINTS = 1 << 21


@dataclass(frozen=True)
class NoiseEvent:
    """One kind of noisy release, ``count`` times (``steps`` times for a sampled Gaussian), for one person's image
    under ``relation``. Build with the class methods; :meth:`to_dict` / :meth:`from_dict` are the ledger's and the
    model file's JSON form."""

    kind: str
    epsilon: float | None = None
    delta: float = 0.0
    noise_multiplier: float | None = None
    sample_rate: float | None = None
    count: int = 1
    relation: str = LEDGER_RELATION

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"count must be an integer >= 1, got {self.count!r}")
        need = {
            "laplace": ("epsilon",),
            "pure": ("epsilon",),
            "approx": ("epsilon", "delta"),
            "gaussian": ("noise_multiplier",),
            "sampled-gaussian": ("noise_multiplier", "sample_rate"),
        }[self.kind]
        for name in ("epsilon", "noise_multiplier", "sample_rate"):
            value = getattr(self, name)
            if (name in need) != (value is not None):
                raise ValueError(f"a {self.kind} event {'needs' if name in need else 'takes no'} {name}")
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
        if not 0 <= self.delta < 1 or (self.delta and self.kind != "approx"):
            raise ValueError(f"delta must be in [0, 1) and only for approx events, got {self.delta!r}")
        if self.kind in ("gaussian", "sampled-gaussian") and not self.z() > 0:
            raise ValueError("a Gaussian event needs a noise multiplier > 0")
        if self.kind == "sampled-gaussian":
            if not 0 < self.q() <= 1:
                raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate!r}")
            if self.relation != "add-remove":
                raise ValueError("a sampled-gaussian event is stated for add-remove neighbours (Poisson sampling)")

    # ------------------------------------------------------------------------------------------ the kind's fields

    # Each kind has its own fields (None for the others; __post_init__ refuses a kind without its own): these read
    # one where the kind was checked, and fail loudly if it was not.

    def eps(self) -> float:
        """ε of a laplace, pure or approx event."""
        if self.epsilon is None:
            raise ValueError(f"a {self.kind} event has no epsilon")
        return self.epsilon

    def z(self) -> float:
        """The noise multiplier of a gaussian or sampled-gaussian event."""
        if self.noise_multiplier is None:
            raise ValueError(f"a {self.kind} event has no noise multiplier")
        return self.noise_multiplier

    def q(self) -> float:
        """The sampling rate of a sampled-gaussian event."""
        if self.sample_rate is None:
            raise ValueError(f"a {self.kind} event has no sample rate")
        return self.sample_rate

    # ------------------------------------------------------------------------------------------ constructors

    @classmethod
    def laplace(cls, epsilon: float, count: int = 1, relation: str = LEDGER_RELATION) -> NoiseEvent:
        return cls("laplace", epsilon=float(epsilon), count=int(count), relation=relation)

    @classmethod
    def gaussian(cls, noise_multiplier: float, count: int = 1, relation: str = LEDGER_RELATION) -> NoiseEvent:
        return cls("gaussian", noise_multiplier=float(noise_multiplier), count=int(count), relation=relation)

    @classmethod
    def sampled_gaussian(cls, noise_multiplier: float, sample_rate: float, steps: int) -> NoiseEvent:
        return cls("sampled-gaussian", noise_multiplier=float(noise_multiplier), sample_rate=float(sample_rate),
                   count=int(steps), relation="add-remove")  # fmt: skip

    @classmethod
    def pure(cls, epsilon: float, relation: str = LEDGER_RELATION, count: int = 1) -> NoiseEvent:
        return cls("pure", epsilon=float(epsilon), count=int(count), relation=relation)

    @classmethod
    def approx(cls, epsilon: float, delta: float, relation: str = LEDGER_RELATION) -> NoiseEvent:
        if not delta:
            return cls.pure(epsilon, relation)
        return cls("approx", epsilon=float(epsilon), delta=float(delta), relation=relation)

    # ------------------------------------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        """Only the fields this kind uses (``count`` is written as ``steps`` for a sampled Gaussian)."""
        d = {k: v for k, v in asdict(self).items() if v is not None and not (k == "delta" and self.kind != "approx")}
        if self.kind == "sampled-gaussian":
            d["steps"] = d.pop("count")
        elif self.count == 1:
            del d["count"]
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str) -> NoiseEvent:
        """Validate an event read from a file: a one-line :class:`DataError` naming ``where`` when anything is off."""
        if not isinstance(d, dict):
            raise DataError(f"{where}: a noise event must be an object, got {d!r}")
        allowed = {"kind", "epsilon", "delta", "noise_multiplier", "sample_rate", "count", "steps", "relation"}
        unknown = set(d) - allowed
        if unknown:
            raise DataError(f"{where}: unknown field(s) {sorted(unknown)} in a noise event")
        args = dict(d)
        if "steps" in args:
            args["count"] = args.pop("steps")
        for key, value in args.items():
            if key in ("kind", "relation"):
                if not isinstance(value, str):
                    raise DataError(f"{where}: {key} must be a string, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int | float):
                raise DataError(f"{where}: {key} must be a number, got {value!r}")
        if isinstance(args.get("count"), float):
            if not args["count"].is_integer():
                raise DataError(f"{where}: count must be an integer, got {args['count']!r}")
            args["count"] = int(args["count"])
        try:
            return cls(**args)
        except (TypeError, ValueError) as exc:
            raise DataError(f"{where}: {exc}") from None

    def describe(self) -> str:
        """A few words: ``"Gaussian z=3.731"``, ``"4680 × sampled Gaussian z=1.26, q=0.0043 (add/remove)"``."""
        times = f"{self.count} × " if self.count > 1 else ""
        rel = " (add/remove)" if self.relation == "add-remove" else ""
        if self.kind == "laplace":
            return f"{times}Laplace ε={self.epsilon:.4g}{rel}"
        if self.kind == "gaussian":
            return f"{times}Gaussian z={self.noise_multiplier:.4g}{rel}"
        if self.kind == "sampled-gaussian":
            return f"{times}sampled Gaussian z={self.noise_multiplier:.4g}, q={self.sample_rate:.4g}{rel}"
        if self.kind == "pure":
            return f"pure ε={self.epsilon:.4g}{rel}"
        return f"(ε={self.epsilon:.4g}, δ={self.delta:g}){rel}"


def events_from_dicts(items: object, where: str) -> list[NoiseEvent]:
    """Events read from JSON (a ledger entry, a model file's fit record), validated, naming ``where``."""
    if not isinstance(items, list) or not items:
        raise DataError(f"{where}: its noise events must be a non-empty list")
    return [NoiseEvent.from_dict(e, f"{where}, event {i + 1}") for i, e in enumerate(items)]


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
    if event.kind in ("pure", "approx"):
        return 2.0 * event.eps() * k
    if event.kind == "sampled-gaussian":
        return 0.0  # each step's loss is small: dp-accounting composes thousands of steps on its default grid
    # A loss of mean m and spread s per release: k releases keep about k·m ± 12·√k·s (bounded by k times the range).
    mu = sens * event.eps() if event.kind == "laplace" else sens / event.z()
    width = k * mu * mu / 2 + 24.0 * math.sqrt(k) * mu
    return min(width, 2.0 * k * mu) if event.kind == "laplace" else width


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
    if event.kind == "laplace":
        return pld.from_laplace_mechanism(1.0 / event.eps(), sensitivity=sens,
                                          value_discretization_interval=interval).self_compose(times)  # fmt: skip
    if event.kind == "gaussian":
        # k Gaussians of one z compose exactly to one Gaussian of z/√k: no discretisation error builds up.
        return gaussian_pld(event.z() / math.sqrt(times), sensitivity=sens, value_discretization_interval=interval)
    if event.kind == "sampled-gaussian":
        one = gaussian_pld(event.z(), sampling_prob=event.q(), neighboring_relation=NeighboringRelation.REPLACE_ONE,
                           value_discretization_interval=interval)  # fmt: skip
        return one.self_compose(times)
    eps, delta = replace_one(event.eps(), event.delta, event.relation)
    params = common.DifferentialPrivacyParameters(eps, min(delta, 1.0 - 1e-15))
    return pld.from_privacy_parameters(params, value_discretization_interval=interval).self_compose(times)


def compose(events: list[NoiseEvent], delta: float) -> tuple[float, float]:
    """(ε, grid): the smallest ε at which the composition of ``events`` is (ε, ``delta``)-DP under replace-one, by
    dp-accounting's pessimistic PLDs on the grid returned (never below the true ε; ``inf`` when no finite ε holds
    at this δ, e.g. a Gaussian at δ = 0). No events: (0, grid)."""
    live = [e for e in events if not (e.kind in ("laplace", "pure", "approx") and e.epsilon == 0 and e.delta == 0)]
    # Order does not change a composition: one cache entry per multiset (a ledger asks again at every check).
    return _compose_cached(tuple(sorted(live, key=repr)), float(delta))


# Beyond this ε (nats) for one event a PLD's probabilities underflow (e^-ε), and no budget is that large: the
# composition is then left to the basic sum.
MAX_EVENT_EPSILON = 300.0


@functools.lru_cache(maxsize=64)
def _compose_cached(live: tuple[NoiseEvent, ...], delta: float) -> tuple[float, float]:
    interval = interval_for(list(live))
    if any(e.epsilon is not None and 2 * e.epsilon > MAX_EVENT_EPSILON for e in live):
        return math.inf, interval
    if not live:
        return 0.0, interval
    # Every Gaussian under one relation is one Gaussian: 1/z² adds up.
    merged: list[NoiseEvent] = []
    for rel in RELATIONS:
        inv = sum(e.count / e.z() ** 2 for e in live if e.kind == "gaussian" and e.relation == rel)
        if inv:
            merged.append(NoiseEvent.gaussian(1.0 / math.sqrt(inv), relation=rel))
    counts = Counter(e for e in live if e.kind != "gaussian")
    out = None
    for event in merged:
        out = _compose(out, _pld(event, 1, interval))
    for event, k in sorted(counts.items(), key=lambda item: repr(item[0])):
        out = _compose(out, _pld(event, k, interval))
    assert out is not None
    eps = float(out.get_epsilon_for_delta(delta))
    return (max(0.0, eps) if math.isfinite(eps) else math.inf), interval


def _compose(a, b):
    return b if a is None else a.compose(b)


def accountant_text(interval: float) -> str:
    """How a ledger figure was computed, for every place one appears."""
    return f"{ACCOUNTANT}, replace-one, grid {interval:.3g}"
