"""What a release promises, stated so that a person and a program read the same thing.

A :class:`Guarantee` never carries an ε that the code does not earn. When a paper calls a knob "ε" but the
mechanism is not differentially private as implemented, ``sound`` is ``False``, ``caveats`` say why in plain
words, and the text rendering says that the ε is a noise knob only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from privpix import strict_json
from privpix.errors import ParameterError

Model = Literal["central-dp", "local-dp", "empirical", "none"]
MODELS: tuple[str, ...] = ("central-dp", "local-dp", "empirical", "none")


@dataclass(frozen=True)
class Guarantee:
    """A privacy statement.

    Attributes:
        model: ``central-dp`` (a curator adds noise), ``local-dp`` (each owner perturbs their own data),
            ``empirical`` (no proof; privacy is measured by attacks), ``none`` (no privacy claim at all).
        epsilon: ε for one neighbouring ``unit`` (``None`` for ``empirical`` / ``none``).
        delta: δ of an (ε, δ) statement; 0 for pure DP.
        unit: what two neighbouring inputs differ in, in words ("one pixel column of one image").
        per_image_epsilon: ε when the unit is a whole image of one person (group privacy / composition);
            ``None`` when no finite bound holds.
        per_feature_epsilon: for local DP, ε of each reported feature (``epsilon`` is then per report).
        sound: ``True`` only when the proof's assumptions hold as implemented.
        caveats: plain-words reasons a reader must know (why ``sound`` is false, what is published in clear).
        measured: empirical numbers (e.g. adversary accuracy) attached after an evaluation.
    """

    model: Model
    epsilon: float | None = None
    delta: float = 0.0
    unit: str = "one image"
    per_image_epsilon: float | None = None
    per_feature_epsilon: float | None = None
    sound: bool = False
    caveats: tuple[str, ...] = field(default_factory=tuple)
    measured: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ParameterError(f"guarantee model must be one of {MODELS}, got {self.model!r}")
        if self.sound and self.model in ("empirical", "none"):
            raise ParameterError(f"a guarantee of model {self.model!r} cannot be marked sound")
        if self.sound and (self.epsilon is None or not math.isfinite(self.epsilon)):
            raise ParameterError("a sound DP guarantee needs a finite epsilon")
        if self.sound and self.per_image_epsilon is None:
            raise ParameterError("a sound DP guarantee must state per_image_epsilon")

    @classmethod
    def none(cls, why: str) -> Guarantee:
        """No privacy claim: the output is a transformation with no formal or measured protection."""
        return cls(model="none", unit="n/a", caveats=(why,))

    @property
    def is_dp(self) -> bool:
        """True when the release is differentially private as implemented."""
        return self.sound and self.model in ("central-dp", "local-dp")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["caveats"] = list(self.caveats)
        return d

    def to_json(self) -> str:
        return strict_json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Guarantee:
        d = dict(d)
        d["caveats"] = tuple(d.get("caveats", ()))
        d["measured"] = dict(d.get("measured", {}))
        return cls(**d)

    def with_measured(self, **values: float) -> Guarantee:
        merged = {**self.measured, **{k: float(v) for k, v in values.items()}}
        return Guarantee(**{**self.to_dict(), "caveats": self.caveats, "measured": merged})

    def short(self) -> str:
        """One-line summary for tables."""
        if self.model == "none":
            return "none (no privacy claim)"
        if self.model == "empirical":
            return "empirical only (no formal guarantee)"
        eps = _fmt(self.epsilon)
        dl = f", δ={self.delta:g}" if self.delta else ""
        if not self.sound:
            return f"NOT DP as implemented (paper's ε={eps} is a noise knob{dl})"
        img = _fmt(self.per_image_epsilon)
        return f"{self.model} ε={eps}{dl} per {self.unit}; per image ε={img}"

    def compact(self) -> str:
        """A few words for narrow tables."""
        if self.model == "none":
            return "none"
        if self.model == "empirical":
            return "empirical"
        if not self.sound:
            return "NOT DP (ε is a knob)"
        return f"DP, ε/image={_fmt(self.per_image_epsilon)}"

    def text(self) -> str:
        """Multi-line statement for a person."""
        lines = [f"Guarantee: {self.short()}"]
        lines.append(f"  model: {self.model}; sound: {'yes' if self.sound else 'NO'}")
        if self.model in ("central-dp", "local-dp"):
            lines.append(f"  neighbouring unit: {self.unit}")
            if self.per_feature_epsilon is not None:
                lines.append(f"  ε per feature: {_fmt(self.per_feature_epsilon)}")
            lines.append(f"  ε per unit: {_fmt(self.epsilon)}; δ: {self.delta:g}")
            lines.append(f"  ε per whole image: {_fmt(self.per_image_epsilon)}")
        for c in self.caveats:
            lines.append(f"  caveat: {c}")
        for k, v in self.measured.items():
            lines.append(f"  measured {k}: {v:.4g}")
        return "\n".join(lines)


def _fmt(x: float | None) -> str:
    if x is None:
        return "unbounded"
    if math.isinf(x):
        return "∞"
    return f"{x:.4g}"
