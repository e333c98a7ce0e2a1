"""privpix.privacy.gaussian_pld builds dp-accounting's Gaussian PLDs with the inverse privacy loss of the whole grid
at once: the PLDs must be dp-accounting's own, bit for bit, or every ledger figure, calibration and audit would move."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from dp_accounting import NeighboringRelation as Rel
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld import privacy_loss_mechanism as plm

from privpix.privacy import gaussian_pld as module
from privpix.privacy.gaussian_pld import gaussian_pld, pld_bits

# The fast cases: no subsampling under every relation, and Poisson subsampling under replace-one, over noise levels
# from small (a wide loss range) to large, both sensitivities privpix uses (2: add/remove events charged for a
# replacement), and on the ledger's grid (1e-4) the PLD it builds most often (DP-SGD's steps at dp-teacher's rate;
# the grid sets which losses are computed, not how). benchmarks/pld_speed.py compares a wider sweep, with the times.
CASES = [
    *[{"standard_deviation": sd, "sensitivity": s, "neighboring_relation": rel, "value_discretization_interval": 1e-3}
      for sd, s, rel in itertools.product([0.5, 3.7], [1.0, 1.3], [None, Rel.REPLACE_ONE])],
    {"standard_deviation": 1.0, "neighboring_relation": Rel.REPLACE_SPECIAL, "value_discretization_interval": 1e-3},
    *[{"standard_deviation": sd, "sampling_prob": q, "neighboring_relation": Rel.REPLACE_ONE,
       "value_discretization_interval": 1e-3}
      for sd, q in itertools.product([0.6, 4.0], [0.01, 0.5])],
    {"standard_deviation": 1.1143867425958924, "sampling_prob": 0.07447272727272727,
     "neighboring_relation": Rel.REPLACE_ONE, "value_discretization_interval": 1e-4},
]  # fmt: skip


def _reference(kw: dict):
    kw = {k: v for k, v in kw.items() if not (k == "neighboring_relation" and v is None)}
    return pld.from_gaussian_mechanism(kw.pop("standard_deviation"), **kw)


def test_the_fast_pld_is_dp_accountings_bit_for_bit(monkeypatch):
    got = [pld_bits(gaussian_pld(**kw)) for kw in CASES]
    # The fast path was taken for every case: dp-accounting's own builder and its per-point inverse never ran.
    calls = []
    monkeypatch.setattr(plm.GaussianPrivacyLoss, "inverse_privacy_loss", lambda self, e: calls.append(e) or 0.0)
    monkeypatch.setattr(pld, "from_gaussian_mechanism", lambda *a, **k: calls.append(a))
    for kw in [CASES[0], CASES[1], CASES[-1]]:  # q = 1 under both relations, Poisson-sampled under replace-one
        gaussian_pld(**kw)
    assert calls == []
    monkeypatch.undo()
    for kw, bits in zip(CASES, got, strict=True):
        assert bits == pld_bits(_reference(kw)), kw


@pytest.mark.parametrize("sensitivity", [1.3, 2.0])
def test_each_inverse_is_dp_accountings_inverse_of_that_loss(sensitivity):
    """Point by point, over losses of both signs, zero, and both ends of a ledger's range; at a sensitivity that is
    not a power of two too, where dividing by it rounds, so an operation taken in another order shows."""
    eps = np.concatenate([np.linspace(-12.0, 12.0, 2401), [0.0, 1e-4, -1e-4, 40.0, -40.0]])
    cls = module._loss_class()
    for q, adjacency in [(1.0, plm.AdjacencyType.REMOVE), (1.0, plm.AdjacencyType.ADD),
                         (1.0, plm.AdjacencyType.REPLACE), (0.0745, plm.AdjacencyType.REPLACE),
                         (0.5, plm.AdjacencyType.REPLACE)]:  # fmt: skip
        loss = cls(0.8, sensitivity=sensitivity, sampling_prob=q, adjacency_type=adjacency)
        ours = loss._inverses(eps)
        theirs = np.array([loss.inverse_privacy_loss(e) for e in eps])
        assert ours.tobytes() == theirs.tobytes(), (q, adjacency)
        # δ(ε) on the whole grid, at one ε (a float, not an array) and on a 0-d array, as dp-accounting returns them.
        base = plm.GaussianPrivacyLoss.get_delta_for_epsilon
        assert loss.get_delta_for_epsilon(eps).tobytes() == base(loss, eps).tobytes()
        one = loss.get_delta_for_epsilon(0.5)
        assert isinstance(one, float) and one == base(loss, 0.5)
        assert loss.get_delta_for_epsilon(np.array(0.5)).tobytes() == base(loss, np.array(0.5)).tobytes()


def test_cases_left_to_dp_accounting_are_its_own_and_another_release_gets_its_builder(monkeypatch):
    # A Poisson-sampled Gaussian under add/remove and the privacy-buckets construction: dp-accounting's path.
    for kw in [{"standard_deviation": 1.0, "sampling_prob": 0.1, "value_discretization_interval": 1e-2},
               {"standard_deviation": 1.0, "pessimistic_estimate": False, "use_connect_dots": False,
                "value_discretization_interval": 1e-2}]:  # fmt: skip
        assert pld_bits(gaussian_pld(**kw)) == pld_bits(_reference(dict(kw)))
    # Another dp-accounting release: its public builder, whatever the case.
    calls = []
    monkeypatch.setattr(module, "_fast_path_available", lambda: False)
    monkeypatch.setattr(pld, "from_gaussian_mechanism", lambda *a, **k: calls.append((a, k)) or "theirs")
    assert gaussian_pld(0.5, value_discretization_interval=1e-3) == "theirs"
    assert calls == [((0.5,), calls[0][1])] and calls[0][1]["value_discretization_interval"] == 1e-3
    assert module.VERIFIED_DP_ACCOUNTING == __import__("importlib.metadata").metadata.version("dp-accounting")


def test_a_fast_path_is_taken_only_on_the_release_it_was_verified_against():
    """privpix.version.installed_is: exactly the installed release, and never a missing distribution."""
    from importlib import metadata

    from privpix.version import installed_is

    assert installed_is("dp-accounting", metadata.version("dp-accounting"))
    assert not installed_is("dp-accounting", metadata.version("dp-accounting") + ".post1")
    assert not installed_is("privpix-no-such-distribution", "1.0")
