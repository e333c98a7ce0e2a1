"""privpix.privacy.sgm_rdp computes Opacus's RDP accountant with the terms of each series at once: every RDP value,
ε and calibrated noise multiplier must be Opacus's own, bit for bit, or every DP-SGD fit's noise (and so its seeded
weights) and every stated ε would move."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from privpix.mechanisms.neural.dp_sgd import ALPHAS
from privpix.privacy import sgm_rdp


@pytest.fixture
def opacus_rdp():
    """Opacus's RDP functions, imported by the tests that compare with them, not when the suite is collected: Opacus
    imports torch.distributed and sympy (0.9 s, and in a fresh clone hundreds of modules that every test worker
    would compile at once)."""
    from opacus.accountants.analysis import rdp

    return rdp


@pytest.fixture
def opacus_utils():
    from opacus.accountants import utils

    return utils


# Sampling rates from DP-SGD's (0.0047: batch 256 of 55,000) to large ones, whose fractional-order series run to
# hundreds of terms; noise multipliers below and above 1, an integer one (Opacus's bisection starts at the integers
# 20, 40, ...: integer arithmetic in its formulas), and one whose square is not exact; one step or 155 (the curve is
# scaled by the steps after the series).
PAIRS = itertools.product([0.004654545454545455, 0.2, 1 / 3, 0.9], [0.6, 20, 1.1143867425958924])
CURVES = [(q, z, (1, 155)[k % 2]) for k, (q, z) in enumerate(PAIRS)]


@pytest.mark.parametrize(("q", "z", "steps"), CURVES)
def test_every_rdp_value_is_opacus_bit_for_bit(q, z, steps, opacus_rdp):
    ours = sgm_rdp.compute_rdp(q=q, noise_multiplier=z, steps=steps, orders=ALPHAS)
    theirs = opacus_rdp.compute_rdp(q=q, noise_multiplier=z, steps=steps, orders=ALPHAS)
    assert ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes()


def test_the_edge_cases_are_opacus_own(opacus_rdp):
    """q = 0, q = 1, z = 0 and an infinite order, each in the same array as ordinary orders; and one order given
    as a float, not a list."""
    orders = [1.5, 2, 7.25, 64, float("inf")]
    for q, z in [(0.0, 1.0), (1.0, 1.3), (0.3, 0.0), (0.3, 1.3)]:
        ours = sgm_rdp.compute_rdp(q=q, noise_multiplier=z, steps=3, orders=orders)
        theirs = opacus_rdp.compute_rdp(q=q, noise_multiplier=z, steps=3, orders=orders)
        assert ours.tobytes() == theirs.tobytes(), (q, z)
    assert sgm_rdp.compute_rdp(q=0.3, noise_multiplier=1.3, steps=3, orders=2.5) == opacus_rdp.compute_rdp(
        q=0.3, noise_multiplier=1.3, steps=3, orders=2.5
    )


def test_epsilon_is_the_accountants():
    from opacus.accountants import RDPAccountant

    for z, q, steps, delta in [(1.1, 0.0047, 4300, 1e-5), (0.8, 0.3, 9, 1e-6), (3.0, 0.02, 1, 1e-5)]:
        acc = RDPAccountant()
        acc.history = [(z, q, steps)]
        assert sgm_rdp.epsilon(z, q, steps, delta, ALPHAS) == acc.get_epsilon(delta=delta, alphas=ALPHAS)


# Settings of privpix's tests and benchmarks whose Opacus search is quick (the slow ones are compared in
# benchmarks/rdp_speed.py): a long run at a small rate, a short one at a large rate, and a loose ε.
SEARCHES = [(1.0, 1e-5, 0.004654545454545455, 4300), (10.0, 1e-5, 0.032, 155), (0.5, 1e-5, 0.05, 200)]


@pytest.mark.parametrize(("eps", "delta", "q", "steps"), SEARCHES)
def test_the_calibrated_noise_multiplier_is_opacus_bit_for_bit(eps, delta, q, steps, monkeypatch, opacus_rdp,
                                                               opacus_utils):  # fmt: skip
    kw = {"target_epsilon": eps, "target_delta": delta, "sample_rate": q, "steps": steps,
          "epsilon_tolerance": 1e-3 * eps, "alphas": ALPHAS}  # fmt: skip
    theirs = opacus_utils.get_noise_multiplier(accountant="rdp", **kw)
    # Opacus's series are not evaluated on the fast path.
    monkeypatch.setattr(opacus_rdp, "_compute_log_a", lambda *a: pytest.fail("Opacus's series ran"))
    ours = sgm_rdp.noise_multiplier(**kw)
    assert type(ours) is type(theirs) and ours == theirs


@pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")
def test_a_target_no_noise_reaches_is_opacus_error():
    with pytest.raises(ValueError, match="The privacy budget is too low"):
        sgm_rdp.noise_multiplier(target_epsilon=1e-9, target_delta=1e-12, sample_rate=1.0, steps=10**6,
                                 epsilon_tolerance=1e-12, alphas=ALPHAS)  # fmt: skip


@pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")
def test_another_opacus_release_gets_opacus_own_code(monkeypatch, opacus_rdp, opacus_utils):
    """Only the verified release takes the fast path; any other runs Opacus's functions themselves."""
    monkeypatch.setattr(sgm_rdp, "fast_path_available", lambda: False)
    calls = []
    monkeypatch.setattr(opacus_rdp, "compute_rdp", lambda **kw: calls.append("rdp") or np.zeros(len(kw["orders"])))
    monkeypatch.setattr(opacus_utils, "get_noise_multiplier", lambda **kw: calls.append("search") or 7.0)
    assert sgm_rdp.compute_rdp(q=0.1, noise_multiplier=1.0, steps=2, orders=ALPHAS).tolist() == [0.0] * len(ALPHAS)
    assert sgm_rdp.noise_multiplier(target_epsilon=1.0, target_delta=1e-5, sample_rate=0.1, steps=2,
                                    epsilon_tolerance=1e-3, alphas=ALPHAS) == 7.0  # fmt: skip
    sgm_rdp.epsilon(1.0, 0.1, 2, 1e-5, ALPHAS)
    assert calls == ["rdp", "search", "rdp"]


def test_the_verified_release_is_the_installed_one():
    """constraints.txt pins the release this module reproduces; were it to drift, the fast path would silently stop
    being taken."""
    assert sgm_rdp.fast_path_available()
