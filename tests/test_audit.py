"""Empirical ε audit: the bounds are valid, have power, and pin the verdicts of sound and unsound mechanisms."""

import json
import math

import numpy as np
import pytest

from privpix.data import ImageSet, load_dataset
from privpix.errors import ParameterError
from privpix.evaluation.audit import (
    audit,
    clopper_pearson_upper,
    epsilon_lower_bound,
    max_auditable_epsilon,
    neighbour_pairs,
)
from privpix.mechanisms import get_mechanism


@pytest.fixture(scope="module")
def small():
    """32 MNIST digits at 12×12: small enough that thousands of releases take well under a second."""
    return load_dataset("builtin-mnist:test").subset(np.arange(32)).resized(12, 12)


def test_clopper_pearson_matches_closed_forms():
    # k = 0: the upper bound solves (1 - p)^n = alpha.
    assert clopper_pearson_upper(0, 100, 0.025) == pytest.approx(1 - 0.025 ** (1 / 100))
    # k = n - 1: Beta(n, 1) quantile, (1 - alpha)^(1/n); k = n: 1.
    assert clopper_pearson_upper(99, 100, 0.025) == pytest.approx(0.975 ** (1 / 100))
    assert clopper_pearson_upper(100, 100, 0.025) == 1.0
    # Coverage: for p = 0.3, n = 50, the bound is below p in at most ~2.5 % of samples.
    rng = np.random.default_rng(0)
    ks = rng.binomial(50, 0.3, size=4000)
    miss = np.mean([clopper_pearson_upper(int(k), 50, 0.025) < 0.3 for k in ks])
    assert miss <= 0.025


def test_epsilon_bound_edge_cases():
    assert epsilon_lower_bound(0, 0, 500, 500) == pytest.approx(max_auditable_epsilon(500))
    a = 1 - 0.025 ** (1 / 500)  # the upper bounds on both error rates of a perfect test
    assert max_auditable_epsilon(500) == pytest.approx(math.log((1 - a) / a))
    assert epsilon_lower_bound(250, 250, 500, 500) == 0.0  # a coin flip shows nothing
    # δ lowers the bound.
    assert epsilon_lower_bound(10, 100, 500, 500, delta=0.1) < epsilon_lower_bound(10, 100, 500, 500)


def test_audit_has_power_on_plain_laplace():
    """One pixel, Laplace(1/ε) noise: the optimal test reaches ε, and the audit gets close from below."""
    img = ImageSet(images=np.zeros((2, 1, 1, 1), np.float32))
    mech = get_mechanism("pixel-laplace[sensitivity=bound,unit=pixel,clip=false]", epsilon=1.0)
    res = audit(mech, img, trials=20000, seed=1)
    assert res.verdict == "consistent"
    assert 0.6 < res.audited_epsilon_lower <= 1.0


@pytest.mark.parametrize(
    "spec, eps",
    [
        ("pixel-laplace[sensitivity=bound]", 1.0),
        ("pixel-laplace[sensitivity=bound,unit=pixel]", 1.0),
        ("dp-pix[b=2]", 1.0),
        ("ldp-pixel[levels=4]", 1.0),
    ],
)
def test_sound_mechanisms_are_consistent(small, spec, eps):
    res = audit(get_mechanism(spec, epsilon=eps), small, trials=4000, seed=0)
    assert res.sound
    assert res.verdict == "consistent"
    assert res.audited_epsilon_lower <= res.claimed_epsilon


def test_public_pca_is_consistent(small):
    # The basis is public: fitted on other digits than the ones the audit releases (a public set that holds the
    # private images is refused).
    public = load_dataset("builtin-mnist:test").subset(np.arange(100, 300)).resized(12, 12)
    mech = get_mechanism("pca-inverse[basis=public,d=5]", epsilon=1.0).fit(public)
    res = audit(mech, small, trials=2000, seed=0)
    assert res.unit == "one image (replaced by any other)"
    assert res.verdict == "consistent"


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec, eps",
    [("pixel-laplace", 1.0), ("sra", 1.0), ("esra", 1.0), ("lra[iterations=1]", 1.0), ("pca-inverse[batch=16]", 0.05)],
)
def test_paper_faithful_mechanisms_are_violated(small, spec, eps):
    res = audit(get_mechanism(spec, epsilon=eps), small, trials=1000, seed=0)
    assert not res.sound
    assert res.verdict == "violated"
    assert res.audited_epsilon_lower > res.claimed_epsilon


def test_pca_private_is_audited_at_d_times_epsilon(small):
    mech = get_mechanism("pca-inverse[batch=16,d=20]", epsilon=0.05)
    res = audit(mech, small, trials=200, seed=0)
    assert res.claimed_epsilon == pytest.approx(1.0)
    assert res.unit == "one image of the dataset replaced"


def test_no_claim_and_reproducibility(small):
    a = audit(get_mechanism("gaussian-blur"), small, trials=200, seed=3)
    assert a.verdict == "no-claim" and a.claimed_epsilon is None
    m = get_mechanism("dp-pix", epsilon=2.0)
    assert audit(m, small, trials=400, seed=5).to_dict() | {"seconds": 0} == audit(
        m, small, trials=400, seed=5
    ).to_dict() | {"seconds": 0}


def test_neighbour_pairs_follow_the_unit(small):
    x = small.as_float()
    col = neighbour_pairs(get_mechanism("sra", epsilon=1.0), small)
    for p in col:
        diff = np.abs(p.a.as_float()[0] - p.b.as_float()[0]).sum(axis=(0, 2))
        assert np.count_nonzero(diff) == 1  # exactly one column differs
    px = neighbour_pairs(get_mechanism("dp-pix[m=3,b=2]", epsilon=1.0), small)
    for p in px:
        assert np.count_nonzero(np.abs(p.a.as_float() - p.b.as_float()) > 0) <= 3
    ds = neighbour_pairs(get_mechanism("pca-inverse[batch=8]", epsilon=1.0), small)
    for p in ds:
        changed = np.any(p.a.as_float() != p.b.as_float(), axis=(1, 2, 3))
        assert len(p.a) == 8 and changed.sum() == 1 and changed[p.index]
    assert x.shape[1:3] == (12, 12)


def test_audit_errors(small):
    with pytest.raises(ParameterError, match="trials"):
        audit(get_mechanism("dp-pix", epsilon=1.0), small, trials=5)
    with pytest.raises(ParameterError, match="at least 2 images"):
        audit(get_mechanism("dp-pix", epsilon=1.0), small.subset([0]), trials=100)


@pytest.mark.slow
def test_cli_audit_json(run, tmp_path):
    path = tmp_path / "audit.json"
    res = run("audit", "--method", "pixel-laplace", "--epsilon", 1, "--trials", 400, "--size", "12x12",
              "--json", path)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "violated" in res.output
    out = json.loads(path.read_text())
    for key in ("method", "claimed_epsilon", "audited_epsilon_lower", "trials", "verdict"):
        assert key in out
    assert out["verdict"] == "violated" and out["trials"] == 400
    res = run("audit", "--method", "pixel-laplace[sensitivity=bound]", "--epsilon", 1, "--trials", 400, "-q",
              "--size", "12x12", "--json", path)  # fmt: skip
    assert res.exit_code == 0 and json.loads(path.read_text())["verdict"] == "consistent"


def test_cli_audit_bad_input(run):
    res = run("audit", "--method", "nope", "--epsilon", 1)
    assert res.exit_code == 2


def test_pairs_carry_labels_for_class_conditional_mechanisms(small):
    for spec in ("sra", "dp-pix", "gaussian-blur", "pca-inverse[batch=8]"):
        for p in neighbour_pairs(get_mechanism(spec, epsilon=None if spec == "gaussian-blur" else 1.0), small):
            assert p.a.labels is not None and p.b.labels is not None
            assert len(p.a.labels) == len(p.a) and len(p.b.labels) == len(p.b)
