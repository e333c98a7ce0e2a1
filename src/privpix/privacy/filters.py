"""The rule a privacy ledger admits a charge by, and what its entries spend (:class:`Spend`).

A data owner usually picks each release's ε after seeing the earlier releases. dp-accounting's PLD composition is
proven only for noise parameters fixed in advance (which mechanism runs next may depend on earlier outputs, its ε
may not), so a ledger does not admit by it. It admits by a *privacy filter*, a rule under which the budget holds
even when every ε is chosen after seeing every earlier output. The rule is fixed when the ledger is created
(``composition``) and recorded in the file:

* ``basic`` (the default): basic composition, Σεᵢ ≤ ε_budget and Σδᵢ ≤ δ_budget, for noise of every kind (the
  basic-composition filter of Rogers et al. 2016). A pure ε-DP entry spends no δ: a ledger of pure entries states a
  pure ε, the exact sum, whatever its δ budget.
* ``gaussian``: continuous Gaussian noise only, as Gaussian DP. The Gaussians merge into one of noise multiplier z,
  1/z² = Σ 1/zᵢ², and a charge is admitted while that Gaussian's ε at δ_budget (dp-accounting's pessimistic PLD)
  stays within ε_budget. That is a Gaussian-DP filter, valid under fully adaptive choice (Smith & Thakurta 2022).

Why one rule, fixed in advance, and not the better of the two at each charge: after a first Gaussian release, an
analyst who may go on either with more Gaussians (admitted by Gaussian DP) or with a Laplace release (admitted by
basic composition) can route the outputs that leak most to whichever rule lets them continue. Each rule is a
filter; their union is not: at ε_budget = 1, δ_budget = 10⁻⁵ such a strategy reaches δ = 1.6·10⁻⁵
(``tests/test_accounting.py::test_the_better_of_two_filters_is_no_filter``).

The PLD figure is still computed and shown beside the admission figure, labelled: the smaller of the PLD composition
of every entry's noise at δ_budget and the basic sum (when its δ fits), never above the admission figure. It is the
ledger's cost when no ε was chosen after seeing an earlier output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from privpix.privacy.composition import BASIC, NoiseEvent, accountant_text, compose, gaussian_only

COMPOSITIONS = ("basic", "gaussian")
# The δ a new ledger's budget is stated at when none is given: the usual 10⁻⁵, below 1/n for every dataset of up to
# 100,000 images. A pure event spends none of it, so a ledger of pure releases still states a pure ε.
DEFAULT_DELTA_BUDGET = 1e-5

GAUSSIAN_RULE = "Gaussian DP (Gaussians merged, 1/z² = Σ 1/zᵢ²)"
# How each figure is labelled wherever it is printed (ledger show and check, release and fit output, the dataset
# card, the release statement).
ADAPTIVE = "holds even if each ε was chosen after seeing earlier releases"
NON_ADAPTIVE = "holds only if no ε was chosen after seeing an earlier release"


def composition_text(composition: str) -> str:
    """The rule a ledger of ``composition`` admits by, in words."""
    if composition == "gaussian":
        return f"{GAUSSIAN_RULE}: continuous Gaussian noise only"
    return f"{BASIC}: every kind of noise; pure ε-DP spends no δ"


def _json_number(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Spend:
    """What a ledger's entries spend.

    ``epsilon`` at ``delta`` is the admission figure, computed by the ledger's rule (``accountant`` names it), which
    holds even when each ε was chosen after seeing earlier releases: a basic-composition ledger states Σεᵢ at Σδᵢ
    (δ = 0 when every entry is pure), a Gaussian one its merged Gaussian's ε at δ_budget; ``inf`` when the entries
    do not fit the rule. ``non_adaptive_epsilon`` at ``non_adaptive_delta`` (δ_budget) is the smaller of the PLD
    composition and the basic sum, never above the admission figure, which holds only for ε's fixed in advance
    (``non_adaptive_accountant`` says how it was computed). ``basic_*`` are the plain sums, ``pld_epsilon`` the
    PLD composition alone."""

    epsilon: float
    delta: float
    basic_epsilon: float
    basic_delta: float
    pld_epsilon: float
    accountant: str
    non_adaptive_epsilon: float = math.inf
    non_adaptive_delta: float = 0.0
    non_adaptive_accountant: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": _json_number(self.epsilon),
            "delta": self.delta,
            "basic_epsilon": self.basic_epsilon,
            "basic_delta": self.basic_delta,
            "accountant": self.accountant,
            "non_adaptive_epsilon": _json_number(self.non_adaptive_epsilon),
            "non_adaptive_delta": self.non_adaptive_delta,
            "non_adaptive_accountant": self.non_adaptive_accountant,
        }

    def text(self, budget: float | None = None) -> str:
        """One line for the command line: the admission figure (of ``budget``), then the PLD figure, labelled."""
        return spent_text(self.to_dict(), budget)


def spent_by(events: list[list[NoiseEvent]], charges: list[tuple[float, float]], delta_budget: float,
             composition: str = "basic") -> Spend:  # fmt: skip
    """:class:`Spend` of the entries whose noise is ``events`` (one list per entry) and whose own (ε, δ) are
    ``charges``, at ``delta_budget``, by the rule ``composition`` (module docstring)."""
    basic_eps = float(math.fsum(e for e, _ in charges))
    basic_delta = float(math.fsum(d for _, d in charges))
    flat = [ev for evs in events for ev in evs]
    pld_eps, interval = compose(flat, delta_budget)
    pld_text = accountant_text(interval)
    basic_ok = basic_delta <= delta_budget * (1 + 1e-9) + 1e-300
    if composition == "gaussian":
        if not events:
            eps, delta = 0.0, 0.0
        elif all(gaussian_only(evs) for evs in events):
            eps, delta = pld_eps, delta_budget
        else:
            eps, delta = math.inf, delta_budget
        rule = f"{GAUSSIAN_RULE}: {pld_text}"
    else:
        eps, delta, rule = (basic_eps if basic_ok else math.inf), basic_delta, BASIC
    # Both the PLD composition and the basic sum (its δ within δ_budget) are valid for ε's fixed in advance, and so
    # is the admission figure: the smallest of them is too.
    na_eps, na_text = pld_eps, pld_text
    if basic_ok and basic_eps < na_eps:
        # Pure ε at δ = 0 is such a case: dp-accounting's Laplace PLDs truncate their tails, no finite ε at δ = 0.
        na_eps, na_text = basic_eps, BASIC
    if eps < na_eps:
        na_eps, na_text = eps, rule
    return Spend(eps, delta, basic_eps, basic_delta, pld_eps, rule, na_eps, delta_budget, na_text)


def _num(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isinf(x)):
        return "∞"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def spent_text(spent: dict[str, Any], budget: float | None = None, sep: str = "=") -> str:
    """What a ledger has spent, from its JSON form (:meth:`Spend.to_dict`, as a manifest records it): the
    admission figure, of ``budget`` with what remains, then the PLD figure, each labelled with what it assumes.
    ``sep`` is "=" for the command line, " = " for the card and the statement."""
    got = spent.get("epsilon")
    # None is how the JSON form writes an ε that no finite bound holds.
    eps = float(got) if isinstance(got, int | float) else math.inf
    text = f"ε{sep}{_num(eps)} at δ{sep}{_num(spent.get('delta'))}"
    if budget is not None:
        left = max(0.0, budget - eps) if math.isfinite(eps) else 0.0
        over = ", over the budget" if eps > budget * (1 + 1e-9) else ""
        text += f" of a budget of ε{sep}{_num(float(budget))}: ε{sep}{_num(left)} remains{over}"
    text += f" (by {spent.get('accountant', '')}, which {ADAPTIVE})"
    if "non_adaptive_epsilon" not in spent:  # manifests written before the figures were told apart have one
        return text
    na, na_delta = spent["non_adaptive_epsilon"], spent.get("non_adaptive_delta")
    if na == spent.get("epsilon") and na_delta == spent.get("delta"):
        text += f"; the PLD figure, which {NON_ADAPTIVE}, is the same"
    else:
        text += (
            f"; ε{sep}{_num(na)} at δ{sep}{_num(na_delta)} by "
            f"{spent.get('non_adaptive_accountant', '')}, which {NON_ADAPTIVE}"
        )
    return text
