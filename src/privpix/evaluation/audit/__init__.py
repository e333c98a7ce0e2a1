"""Empirical ε audit: a lower bound on the ε a mechanism really spends, measured by distinguishing neighbours.

For a pair of neighbouring inputs (x₀, x₁) (built by the relation the mechanism's
:meth:`~privpix.mechanisms.Mechanism.neighbours` declares, :mod:`privpix.privacy.neighbours`) the mechanism is run
``trials`` times on each. A test T (a statistic of the output and a threshold) that says "x₁" with
false-positive rate α on x₀'s outputs and false-negative rate β on x₁'s outputs must, for any (ε, δ)-DP
mechanism, satisfy 1 − β ≤ e^ε α + δ, so

    ε ≥ ln((1 − δ − β) / α).

The pair, the statistic, the threshold and the test's direction are chosen on the first half of the
trials; α and β are then counted on the second half, and replaced by their one-sided Clopper–Pearson upper
bounds (each at 97.5 %, so the bound holds with 95 % confidence jointly). The result is a *lower* bound:
a mechanism whose bound exceeds its claim violates the claim (with 95 % confidence); one whose bound is at
or below it is consistent, which is evidence, not proof. With ``n`` held-out trials per side no bound above
about ln(n / 3.7) can be shown (``max_auditable_epsilon``): a larger claim cannot be refuted by this audit.

Beside that assumption-free bound, a mechanism whose claim says what noise earns it (``Claim.unit_events``, from
``Mechanism.privacy``) is also read through that noise's trade-off curve (:mod:`privpix.evaluation.audit.curves`):
a second test, the one with the smallest balanced error on the selection trials, gives an upper bound on its mean
error rate, and the largest
ε whose curve allows that rate is a lower bound under the curve's stated assumption. It reaches ε near 10 with a
few thousand trials where the raw bound stops near ln(n / 4). The two share the 95 %: each is computed at 97.5 %,
so the verdict ("violated" when either bound exceeds the claim, ``refuted_by`` saying which) keeps its level.
The raw test is chosen on the first half of the trials, the curve test on the first fifth (each on at most
8,000).

Neighbour pairs are worst cases where the unit allows: an all-black image against one with a white column,
pixel block or whole image (data-derived noise scales vanish on a black image), and the dataset's most
typical image against its least typical one; for a claim per encoded feature, two images whose encodings
differ in one value. Releases are compared through ``Release.values()``: pixels, or the report values of a
mechanism that releases features. For mechanisms whose output depends on the whole batch
(``dataset`` unit) the pair is two datasets that differ in one image: ``batch`` copies of one image (a
degenerate, zero-range batch) and a real batch, each against the same with one image replaced.
"""

from privpix.evaluation.audit.bounds import (
    Bounds,
    bounds,
    bounds_from_samples,
    clopper_pearson_upper,
    epsilon_lower_bound,
    max_auditable_epsilon,
)
from privpix.evaluation.audit.records import record_pairs
from privpix.evaluation.audit.result import (
    CONFIDENCE,
    MAX_ADAPTIVE_TRIALS,
    NOT_AUDITED_MODEL,
    RECORD_SHAPE,
    RECORD_UNIT,
    RELEASE_CHUNK,
    SELECT_CAP,
    SYNTHETIC_PER_TRIAL,
    TARGETS,
    VERDICTS,
    AuditResult,
)
from privpix.evaluation.audit.strategies import audit
from privpix.evaluation.audit.trials import neighbour_pairs
from privpix.evaluation.audit.verdicts import (
    audited_claim,
    claim_fields,
    claimed,
    max_auditable,
    mechanism_curve,
    not_audited,
    trials_to_refute,
)

__all__ = [
    "CONFIDENCE",
    "MAX_ADAPTIVE_TRIALS",
    "NOT_AUDITED_MODEL",
    "RECORD_SHAPE",
    "RECORD_UNIT",
    "RELEASE_CHUNK",
    "SELECT_CAP",
    "SYNTHETIC_PER_TRIAL",
    "TARGETS",
    "VERDICTS",
    "AuditResult",
    "Bounds",
    "audit",
    "audited_claim",
    "bounds",
    "bounds_from_samples",
    "claim_fields",
    "claimed",
    "clopper_pearson_upper",
    "epsilon_lower_bound",
    "max_auditable",
    "max_auditable_epsilon",
    "mechanism_curve",
    "neighbour_pairs",
    "not_audited",
    "record_pairs",
    "trials_to_refute",
]
