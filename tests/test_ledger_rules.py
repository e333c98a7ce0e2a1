"""The rule a ledger admits by holds when each ε is chosen after seeing earlier releases: basic composition (the
default, every kind of noise; pure entries spend no δ) or Gaussian DP (Gaussian noise only), fixed when the ledger
is created; dp-accounting's PLD composition is shown beside it, labelled, and is never above it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privpix.errors import BudgetExceededError, DataError, ParameterError
from privpix.privacy.accounting import LEDGER_FORMAT, PrivacyLedger, open_ledger
from privpix.privacy.composition import ApproxDP, GaussianNoise, LaplaceNoise, PureDP
from privpix.privacy.filters import spent_by
from privpix.privacy.guarantees import Guarantee
from privpix.publishing.ledger import create_ledger

# dp-merf's noise multiplier for (1, 1e-5): one Gaussian release of that z is what a dp-merf fit charges.
Z = 3.7306


def _dp(epsilon: float, delta: float = 0.0) -> Guarantee:
    return Guarantee(model="central-dp", epsilon=epsilon, delta=delta, per_image_epsilon=epsilon, sound=True)


def _merf() -> tuple[Guarantee, list]:
    return _dp(1.0, 1e-5), [GaussianNoise(Z)]


def _gdp_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-Gaussian DP (Balle & Wang 2018; Dong et al. 2019), computed here without dp-accounting."""
    from scipy.stats import norm

    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


def _gdp_epsilon(mu: float, delta: float) -> float:
    from scipy.optimize import brentq

    return float(brentq(lambda e: _gdp_delta(mu, e) - delta, 0.0, 100.0))


def test_a_mixed_sequence_whose_basic_sum_exceeds_the_budget_is_refused_although_pld_would_admit():
    """Four dp-merf fits at (1, 1e-5), then a Laplace release of ε = 0.5, on a budget of (4, 1e-4): the PLD
    composition is 2.245, but the basic sum would be 4.5, and the ε's may have been chosen after seeing the fits.
    Refused, with both figures named."""
    g, events = _merf()
    book = PrivacyLedger(4.0, 1e-4)
    for _ in range(4):
        book.spend(g, events=events)
    with pytest.raises(BudgetExceededError) as refused:
        book.spend(_dp(0.5), events=[LaplaceNoise(0.5)])
    text = str(refused.value)
    assert "ε=4.5 at δ=4e-05, basic composition" in text and "only 0 of 4 remains" in text
    assert "the PLD composition (ε=2.245) would fit" in text and "holds only if no ε was chosen" in text
    assert len(book.entries) == 4 and book.spent.epsilon == 4.0


@pytest.mark.parametrize("seed", range(6))
def test_no_sequence_a_basic_ledger_admits_sums_past_its_budget_and_the_pld_figure_is_never_above(seed):
    """Random mixes of Laplace, Gaussian, pure and (ε, δ) charges offered to a basic ledger: whatever it admits has a
    basic sum within the budget (ε and δ), which is what it states, and the PLD figure beside it is never above
    it. With the old rule (the PLD figure) some of these sequences reached 1.5 times the budget."""
    rng = np.random.default_rng(seed)
    book = PrivacyLedger(4.0, 1e-4)
    offered = 0.0
    for _ in range(12):
        kind = rng.integers(4)
        eps = float(rng.uniform(0.1, 1.5))
        if kind == 0:
            g, events = _dp(eps), [LaplaceNoise(eps / 16, count=16)]
        elif kind == 1:
            g, events = _merf()
        elif kind == 2:
            g, events = _dp(eps), [PureDP(eps)]
        else:
            g, events = _dp(eps, 1e-5), [ApproxDP(eps, 1e-5)]
        offered += g.per_image_epsilon or 0.0
        try:
            book.spend(g, events=events)
        except BudgetExceededError:
            pass
        s = book.spent
        assert s.epsilon == pytest.approx(s.basic_epsilon) and s.epsilon <= 4.0 * (1 + 1e-9)
        assert s.delta == s.basic_delta <= 1e-4 * (1 + 1e-9)
        assert s.non_adaptive_epsilon <= s.epsilon
    assert offered > 4.0  # every run offered more than the budget holds


def test_a_gaussian_ledger_admits_exactly_what_gaussian_dp_allows():
    """Gaussians of various noise multipliers offered in turn to a Gaussian-DP ledger of (2, 1e-5): each is admitted
    exactly when the merged Gaussian, 1/z² = Σ 1/zᵢ², is (2, 1e-5)-DP by the analytic Gaussian-DP curve computed
    here (admission reads dp-accounting's pessimistic PLD of it, never below it); a Laplace release is refused
    whatever its ε, and the figure is never below the PLD figure beside it."""
    zs = [3.0, 6.0, 2.5, 9.0, 4.0, 2.0, 12.0, 5.0, 20.0, 3.5]
    book = PrivacyLedger(2.0, 1e-5, composition="gaussian")
    inv = 0.0
    admitted = 0
    for z in zs:
        g = _dp(1.0, 1e-5)  # the claim does not enter a Gaussian-DP ledger's figure: its noise does
        exact = _gdp_epsilon(math.sqrt(inv + 1 / z**2), 1e-5)
        assert abs(exact - 2.0) > 1e-3  # no offer sits on the boundary within the PLD's discretisation
        try:
            book.spend(g, events=[GaussianNoise(z)])
            assert exact < 2.0
            inv += 1 / z**2
            admitted += 1
        except BudgetExceededError as exc:
            assert exact > 2.0 and "Gaussian DP" in str(exc)
        s = book.spent
        assert s.non_adaptive_epsilon <= s.epsilon and s.delta == 1e-5
        assert _gdp_epsilon(math.sqrt(inv), 1e-5) <= s.epsilon <= _gdp_epsilon(math.sqrt(inv), 1e-5) + 1e-3
    assert 3 <= admitted < len(zs)
    with pytest.raises(BudgetExceededError, match="not continuous Gaussian noise"):
        book.spend(_dp(1e-3), events=[LaplaceNoise(1e-3)])


def test_the_better_of_two_filters_is_no_filter():
    """Why a ledger's rule is fixed when it is created (privpix.privacy.filters). Budget (1, 1e-5): after a
    Gaussian release that is (0.3, 1e-5)-DP, an analyst goes on with a second Gaussian (the two admitted by Gaussian
    DP) when the first output's privacy loss is at most 0.3, and with randomized response at ε = 0.7 (the two
    admitted by basic composition, ε 0.3 + 0.7, δ 1e-5) when it is larger. Each path fits one rule, but the
    interaction's δ at ε = 1, integrated here, is 1.6e-5: a ledger admitting by whichever rule fits would overspend."""
    from scipy import integrate, optimize
    from scipy.stats import norm

    budget, delta = 1.0, 1e-5
    mu1 = optimize.brentq(lambda m: _gdp_delta(m, 0.3) - delta, 1e-3, 10.0)
    mu_all = optimize.brentq(lambda m: _gdp_delta(m, budget) - delta, 1e-3, 10.0)
    mu2 = 0.999 * math.sqrt(mu_all**2 - mu1**2)
    first = [GaussianNoise(1 / mu1)]
    gaussian_path = spent_by([first, [GaussianNoise(1 / mu2)]], [(0.3, delta), (0.7, delta)], delta, "gaussian")
    assert gaussian_path.epsilon <= budget
    basic_path = spent_by([first, [PureDP(0.7)]], [(0.3, delta), (0.7, 0.0)], delta, "basic")
    assert basic_path.epsilon <= budget and basic_path.delta <= delta
    # The privacy loss L1 of the first release is N(μ²/2, μ²) under the first of two neighbouring datasets;
    # δ(ε) = E[(1 - e^(ε - L))₊] over the whole interaction.
    p = math.exp(0.7) / (1 + math.exp(0.7))  # randomized response: its loss is +0.7 with this probability

    def then_rr(loss: float) -> float:
        plus, minus = 1 - math.exp(budget - loss - 0.7), 1 - math.exp(budget - loss + 0.7)
        return norm.pdf(loss, mu1**2 / 2, mu1) * (p * max(0.0, plus) + (1 - p) * max(0.0, minus))

    def then_gaussian(loss: float) -> float:
        return norm.pdf(loss, mu1**2 / 2, mu1) * _gdp_delta(mu2, budget - loss)

    reached = (integrate.quad(then_rr, 0.3, 2.0, points=[0.3, 1.7], limit=200)[0]
               + integrate.quad(then_gaussian, -2.0, 0.3, limit=200)[0])  # fmt: skip
    assert reached > 1.5 * delta


def test_the_rule_is_fixed_when_the_ledger_is_created(tmp_path, run):
    """`privpix ledger create` records the rule; a later charge cannot change it; the file says it; a Gaussian-DP
    ledger needs a δ budget; an existing file is never overwritten."""
    path = tmp_path / "g.json"
    r = run("ledger", "create", path, "--budget", 4, "--delta-budget", 1e-4, "--composition", "gaussian")
    assert r.exit_code == 0 and "Gaussian DP" in r.output, r.output
    doc = json.loads(path.read_text())
    assert doc["format"] == LEDGER_FORMAT and doc["composition"] == "gaussian" and doc["entries"] == []
    with pytest.raises(ParameterError, match="differs from the rule gaussian"):
        with open_ledger(path, composition="basic"):
            pass
    again = run("ledger", "create", path, "--budget", 4)
    assert again.exit_code == 2 and "a ledger is there already" in again.output
    assert json.loads(path.read_text())["composition"] == "gaussian"
    with pytest.raises(ParameterError, match="needs a δ budget > 0"):
        create_ledger(tmp_path / "z.json", 1.0, 0.0, "gaussian")
    shown = " ".join(run("ledger", "show", path).output.split())
    assert "admitted by Gaussian DP" in shown and "ε=0 at δ=0 of a budget of ε=4: ε=4 remains" in shown


def test_ledgers_written_before_the_rule_was_recorded_get_the_rule_their_entries_allow(tmp_path):
    """A privpix-ledger-2 file of Gaussian entries only reads as a Gaussian-DP ledger (its figures are what they
    were); one with any other entry reads as basic composition, and says when its entries, admitted then by the
    PLD figure, are over the budget by that rule; the next write records the rule and the current format."""
    gauss = {"id": 1, "kind": "fit", "label": "f", "epsilon": 1.0, "delta": 1e-5, "status": "charged",
             "events": [{"kind": "gaussian", "noise_multiplier": 3.7306, "relation": "replace-one"}],
             "guarantee": {}}  # fmt: skip
    lap = {"id": 2, "kind": "release", "label": "r", "epsilon": 3.5, "delta": 0.0, "status": "charged",
           "events": [{"kind": "laplace", "epsilon": 0.05, "count": 70, "relation": "replace-one"}],
           "guarantee": {}}  # fmt: skip
    old = {"format": "privpix-ledger-2", "epsilon_budget": 4.0, "delta_budget": 1e-4, "next_id": 3}
    path = tmp_path / "old.json"
    path.write_text(json.dumps({**old, "entries": [gauss]}))
    assert PrivacyLedger.load(path).composition == "gaussian"
    path.write_text(json.dumps({**old, "entries": [gauss, lap]}))
    book = PrivacyLedger.load(path)
    assert book.composition == "basic" and book.spent.epsilon == 4.5 and book.spent.non_adaptive_epsilon < 4.0
    assert "over the budget" in book.spent.text(4.0)
    with pytest.raises(BudgetExceededError):
        book.spend(_dp(0.01), events=[PureDP(0.01)])
    book.save(path)
    assert json.loads(path.read_text())["composition"] == "basic"
    path.write_text(json.dumps({**old, "composition": "gaussian", "entries": [gauss, lap]}))
    with pytest.raises(DataError, match="entry 2 is not continuous Gaussian noise"):
        PrivacyLedger.load(path)


def test_a_new_ledger_states_a_delta_budget_and_its_pure_entries_stay_pure(tmp_path):
    """The default δ budget is 1e-5: a Gaussian release at δ = 1e-5 is admitted; a ledger of pure entries still
    spends δ = 0 and says so in every figure it prints; the refusal of a second Gaussian proposes a δ budget with
    room for as many as the ε budget holds, and the Gaussian-DP rule."""
    with open_ledger(tmp_path / "l.json", budget=4.0) as session:
        assert session.ledger.delta_budget == 1e-5 and session.ledger.composition == "basic"
        session.add(_dp(1.0), events=[LaplaceNoise(1.0)])
        session.add(_dp(0.5), events=[PureDP(0.5)])
    book = PrivacyLedger.load(tmp_path / "l.json")
    assert (book.spent.epsilon, book.spent.delta) == (1.5, 0.0)
    assert book.spent.text(4.0).startswith("ε=1.5 at δ=0 of a budget of ε=4: ε=2.5 remains (by basic composition")
    g, events = _merf()
    book.spend(g, events=events)
    assert (book.spent.epsilon, book.spent.delta) == (2.5, 1e-5)
    with pytest.raises(BudgetExceededError, match=r"PrivacyLedger\(4, 4e-05\)\.save\(path\) has room for 4 such"):
        book.spend(g, events=events)
