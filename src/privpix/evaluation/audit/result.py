"""What an audit returns (:class:`AuditResult`) and the audit's fixed settings: confidence, trial caps, targets,
verdicts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from privpix.data.imageset import ImageSet, RecordSet

CONFIDENCE = 0.95
# Share of the trials that choose each test: half for the raw test; a fifth for the curve test, whose bound lives
# on the held-out count of errors (measured in benchmarks/audit_power.py).
SELECT_SHARE, CURVE_SELECT_SHARE = 0.5, 0.2
# ... and at most this many: beyond it a test is chosen no better, while every held-out trial raises the bound's
# ceiling (a raw bound of 10 needs about 81,000 held-out trials per side).
SELECT_CAP = 8000
# Adaptive audits double the trials per round up to this many per side (memory: the outputs of one side).
MAX_ADAPTIVE_TRIALS = 128_000
# Per-image releases are drawn this many at a time (an audit of fewer trials is one call, as before).
RELEASE_CHUNK = 16_384
TARGETS = ("auto", "statistic", "output")
# Synthetic images drawn per trial when a refitted synthesizer's output is audited.
SYNTHETIC_PER_TRIAL = 16
VERDICTS = ("consistent", "violated", "no-claim", "not-audited")
# Why a mechanism whose Capabilities.output is "model" gets no bound: its release is a model fitted once on the
# training set, and this audit compares releases of neighbouring images (no retraining per trial).
NOT_AUDITED_MODEL = (
    "not audited here: model output with no white-box experiment (this audit compares released images or reports, "
    "not models); use the one-run audit (`privpix audit --one-run N`, privpix.evaluation.audit.one_run)"
)


@dataclass
class AuditResult:
    """Outcome of :func:`audit`; ``to_dict`` is the JSON of ``privpix audit --json``.

    ``audited_epsilon_lower`` is the larger of ``raw_epsilon_lower`` (Clopper–Pearson on one test's two error
    rates, no assumption) and ``curve_epsilon_lower`` (the balanced error of a second test read through
    ``curve``, valid under ``curve_assumption``; NaN when its claim declares no noise a curve follows). ``refuted_by``
    names the bound(s) above the claim. ``refutable`` is false when the claimed ε is at or above
    ``max_auditable_epsilon`` (the larger of the two bounds' ceilings): then "consistent" carries no
    information. ``kind``: ``"trials"`` (releases per side of neighbour pairs) or ``"one-run"``
    (:func:`privpix.evaluation.audit.one_run.audit_one_run`). ``rounds`` > 1: an adaptive audit (``budget_seconds``),
    the record of its last round.
    ``perfect_distinguisher`` is true when the held-out test made no error at all:
    on that pair the outputs do not overlap, so no finite ε holds (the bound is capped only by the trials).
    """

    method: str
    parameters: dict[str, Any]
    claimed_epsilon: float | None
    claimed_delta: float
    sound: bool
    unit: str
    audited_epsilon_lower: float
    max_auditable_epsilon: float
    trials: int
    verdict: str
    pair: str
    statistic: str
    false_positive_rate: float
    false_negative_rate: float
    refutable: bool = True
    perfect_distinguisher: bool = False
    confidence: float = CONFIDENCE
    seconds: float = 0.0
    pairs_tried: list[str] = field(default_factory=list)
    raw_epsilon_lower: float = float("nan")
    curve: str = ""
    curve_assumption: str = ""
    curve_epsilon_lower: float = float("nan")
    curve_statistic: str = ""
    curve_error_rate: float = float("nan")
    refuted_by: str = ""
    rounds: int = 1
    kind: str = "trials"
    overall_confidence: float = CONFIDENCE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """The result in a few plain lines, worded as ``privpix audit`` and the report word it: the claim, the
        audited lower bound (and the bounds it is the larger of), the largest bound this audit could show, and a
        verdict that never reads as evidence where the audit could not have refuted the claim."""
        from privpix.report.summaries import bound_parts, eps_text, verdict_text

        if self.claimed_epsilon is None:
            claim = "no ε claimed"
        else:
            claim = f"ε = {self.claimed_epsilon:g}" + (f", δ = {self.claimed_delta:g}" if self.claimed_delta else "")
        if not self.sound:
            claim += " (not sound: a noise knob, not a DP guarantee)"
        bound, parts = bound_parts(self.to_dict())
        lines = [
            f"{self.method}: {claim}, for {self.unit}",
            f"audited ε ≥ {bound} ({100 * self.confidence:g} % lower bound{f'; {parts}' if parts else ''}; "
            f"{self.trials} trials per side, pair {self.pair})",
            f"largest bound this audit can show: {eps_text(self.max_auditable_epsilon)}",
            f"verdict: {verdict_text(self.to_dict())}",
        ]
        return "\n".join(lines)


def split_trials(trials: int, share: float) -> int:
    """How many of ``trials`` choose the test: ``share`` of them, at least 10 and at most ``SELECT_CAP``, leaving
    at least 10 for the held-out test."""
    return min(trials - 10, max(10, min(SELECT_CAP, int(trials * share))))


# Records have no image shape: a mechanism's guarantee for records is the one at this shape (as release_records).
RECORD_SHAPE = (0, 0, 0)
RECORD_UNIT = "one record (replaced by any other)"


def data_shape(data: ImageSet | RecordSet) -> tuple[int, int, int]:
    """The shape a guarantee is asked at for ``data``: its images' shape, or :data:`RECORD_SHAPE` for records."""
    return RECORD_SHAPE if isinstance(data, RecordSet) else data.shape
