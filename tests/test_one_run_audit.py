"""One-run audit: the p-value and bound of Steinke, Nasr & Jagielski (2023), their calibration on a
mechanism whose ε is known (randomized response on the canary slots), the canary design, and real audits of a DP
synthesizer (consistent as built, refuted with its noise cut 100×) through the library and the CLI."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from privpix.errors import ParameterError
from privpix.evaluation.audit.one_run import audit_one_run, bound_from_scores, design, epsilon_lower, p_value
from privpix.mechanisms import get_mechanism

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_p_value_is_the_binomial_tail_without_delta_and_grows_with_it():
    q = 1 / (1 + math.exp(-1.0))
    assert p_value(100, 40, 30, 1.0, 0.0) == pytest.approx(stats.binom.sf(29, 40, q))
    assert p_value(100, 40, 30, 1.0, 1e-5) > p_value(100, 40, 30, 1.0, 0.0)
    assert p_value(100, 40, 30, 2.0, 0.0) > p_value(100, 40, 30, 1.0, 0.0)  # a larger ε explains more guesses
    assert p_value(100, 40, 0, 1.0, 1e-5) == 1.0


def test_epsilon_lower_is_where_the_p_value_meets_the_level():
    eps = epsilon_lower(1000, 200, 170, 1e-5, 0.05)
    assert eps > 0 and p_value(1000, 200, 170, eps, 1e-5) == pytest.approx(0.05, rel=1e-3)
    # All r guesses right, δ = 0: q^r = level in closed form.
    r = 50
    assert epsilon_lower(100, r, r, 0.0, 0.05) == pytest.approx(math.log(0.05 ** (1 / r) / (1 - 0.05 ** (1 / r))),
                                                                 rel=1e-4)  # fmt: skip
    assert epsilon_lower(100, 50, 25, 0.0, 0.05) == 0.0
    with pytest.raises(ParameterError, match="v <= r <= m"):
        p_value(10, 20, 5, 1.0, 0.0)


def _rr_scores(eps, m, seed):
    """Slots drawn at random; each score is the slot's bit kept with probability e^ε/(1 + e^ε) (ε-DP per slot,
    exactly), with a tiny jitter so ties do not follow the index."""
    rng = np.random.default_rng(seed)
    inside = rng.random(m) < 0.5
    keep = rng.random(m) < math.exp(eps) / (1 + math.exp(eps))
    bit = np.where(keep, inside, ~inside).astype(float)
    return bit + 1e-6 * rng.standard_normal(m), inside


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_one_run_bound_covers_the_true_epsilon(eps):
    # 100 fixed seeds; the bound is at 95 %, so at most about 5 may exceed ε (coverage ≥ 0.95 asserted).
    below = [bound_from_scores(*_rr_scores(eps, 1000, s), 0.0)["epsilon_lower"] <= eps for s in range(100)]
    assert np.mean(below) >= 0.95


def test_one_run_bound_has_power_on_randomized_response():
    b = bound_from_scores(*_rr_scores(4.0, 1000, 7), 0.0)
    assert 2.5 < b["epsilon_lower"] <= 4.0 and b["guesses"] == 2 * b["k"] and b["ceiling"] > b["epsilon_lower"]


@pytest.mark.slow
def test_canary_design_under_both_relations(digits):
    imgs = digits.subset(np.arange(50))
    base, canaries, repl, n_base = design(imgs, 20, False, 10, np.random.default_rng(0))
    assert (len(base), len(canaries), len(repl), n_base) == (30, 20, 20, 30)
    assert np.all(canaries.labels != repl.labels) and np.array_equal(canaries.images, repl.images)
    assert set(np.asarray(base.names)).isdisjoint(set(np.asarray(imgs.names)[~np.isin(imgs.names, base.names)]))
    base2, _, none, _ = design(imgs, 20, True, 10, np.random.default_rng(0))
    assert none is None and len(base2) == 30
    with pytest.raises(ParameterError, match=r"canaries must be in 2\.\.48"):
        design(imgs, 49, False, 10, np.random.default_rng(0))


@pytest.mark.slow
def test_one_run_audit_of_a_synthesizer_and_of_a_broken_one(digits, monkeypatch):
    from privpix.mechanisms.synthesis import embedding

    imgs = digits.subset(np.arange(300))
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_features=500)
    honest = audit_one_run(mech, imgs, canaries=100, seed=0)
    assert honest.kind == "one-run" and honest.verdict == "consistent" and honest.audited_epsilon_lower < 1.0
    assert "least-squares" in honest.statistic and honest.unit == "one image of the dataset replaced"
    assert "100 canary slots" in honest.pair and "300 private images" in honest.pair
    # The same code with its noise calibrated for a sensitivity 100x too small is caught in one fit.
    monkeypatch.setattr(embedding, "sensitivity", lambda n: 2 / n / 100)
    broken = audit_one_run(mech, imgs, canaries=100, seed=0)
    assert broken.verdict == "violated" and broken.refuted_by == "one-run" and broken.audited_epsilon_lower > 2


def test_one_run_is_for_dataset_level_fits_only(digits):
    with pytest.raises(ParameterError, match="per-release audit"):
        audit_one_run(get_mechanism("pixel-laplace", epsilon=1.0), digits.subset(np.arange(20)), canaries=5)


def test_one_run_audit_of_a_batch_release(digits):
    """pca-inverse with a DP basis releases a batch at once and fits nothing: the pixel design (each slot holds its
    image or the image inverted) and one release of the whole set. Honest: consistent; with the noise of ε = 1000
    while claiming 1, every guess is right and the claim is refuted."""
    imgs = digits.subset(np.arange(400)).resized(8, 8)
    honest = get_mechanism("pca-inverse", epsilon=1.0, delta=1e-5, basis="dp", batch=50, d=4)
    res = audit_one_run(honest, imgs, canaries=200, seed=0)
    assert res.kind == "one-run" and res.verdict == "consistent" and "image or its inverse" in res.pair
    assert res.audited_epsilon_lower < res.claimed_epsilon == 1.5
    leaky = get_mechanism("pca-inverse", epsilon=1000.0, delta=1e-5, basis="dp", batch=50, d=4)
    spends = leaky.privacy
    leaky.privacy = lambda *a, **k: replace(spends(*a, **k), unit_claim=(1.0, 1e-5))
    res = audit_one_run(leaky, imgs, canaries=200, seed=0)
    assert res.verdict == "violated" and res.audited_epsilon_lower > 2


@pytest.mark.slow
def test_cli_one_run(run, tmp_path):
    out = tmp_path / "a.json"
    res = run("audit", "--method", "dp-merf[n_features=300]", "--epsilon", 1, "--delta", 1e-5, "--images", 120,
              "--one-run", 40, "--json", out, "-q")  # fmt: skip
    assert res.exit_code == 0, res.output
    a = json.loads(out.read_text())
    assert a["kind"] == "one-run" and a["verdict"] == "consistent" and a["trials"] == 1


def test_records_are_refused_in_one_line_not_an_attribute_error():
    """Found by the type check: `privpix audit --canaries` on a records data set handed a RecordSet to the canary
    design, which reads image attributes; it is refused, naming the per-release audit instead."""
    import pandas as pd

    from privpix.data import RecordSet

    records = RecordSet(pd.DataFrame({"age": [30, 40], "income": ["<=50K", ">50K"]}), "income")
    with pytest.raises(ParameterError, match="audit records without --canaries"):
        audit_one_run(get_mechanism("dp-merf", epsilon=1.0, delta=1e-5), records, canaries=1)
