"""The ledger from Python: ``privpix.fit(..., ledger=)`` and ``privpix.release(..., ledger=)`` keep the promises
``privpix fit --ledger`` and ``privpix release --ledger`` keep (test_accounting.py, test_sharded_release.py):
racing fits never overspend, a fit killed mid-training keeps its reservation, a model file changed after its charge
or charged in another ledger is refused, and a release over budget writes nothing."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest

import privpix
from conftest import kill_a_fit_once_reserved, noise_folder, start_all_waiting_on_the_ledger
from privpix.data import ImageSet
from privpix.errors import BudgetExceededError, DataError, ParameterError
from privpix.mechanisms import get_mechanism
from privpix.privacy.accounting import PrivacyLedger

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {"n_features": 200, "epochs": 1, "batch_size": 20, "width": 8, "channels": 4}
MERF = {"epsilon": 1.0, "delta": 1e-5}

# A fit at (1, 1e-5) through the API in a process of its own (argv: model file, ledger, the method and its parameters
# as JSON), telling stderr what it waits for.
API_FIT = """
import json
import sys
import privpix
from privpix.mechanisms import get_mechanism

out, ledger, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
data = privpix.load_dataset("builtin-mnist").subset(slice(60))
mech = get_mechanism(params.pop("method"), epsilon=1.0, delta=1e-5, **params)
try:
    privpix.fit(mech, data, out, ledger=ledger, seed=0, note=lambda m: print(m, file=sys.stderr, flush=True))
except privpix.BudgetExceededError as e:
    print(f"refused: {e}", file=sys.stderr)
    sys.exit(2)
"""


@pytest.fixture(scope="module")
def sixty():
    return privpix.load_dataset("builtin-mnist").subset(slice(60))


def _merf(**kw):
    return get_mechanism("dp-merf", **MERF, **TINY, **kw)


def test_a_release_is_charged_and_one_over_budget_writes_nothing(tmp_path):
    images = ImageSet(np.random.default_rng(0).integers(0, 256, (6, 8, 8, 1), dtype=np.uint8))
    ledger = tmp_path / "ledger.json"
    mech = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="image")
    manifest = privpix.release(mech, images, tmp_path / "a", seed=1, ledger=ledger, budget=1.5)
    assert manifest["ledger"]["charge"] == "entry 1" and manifest["ledger"]["epsilon"] == 1.0
    (entry,) = PrivacyLedger.load(ledger).entries
    assert entry.status == "charged" and entry.kind == "release"
    # The same seed gives the same pixels with a ledger as without one: the ledger only charges.
    plain = privpix.release(mech, images, tmp_path / "plain", seed=1)
    assert manifest["guarantee"] == plain["guarantee"]
    assert sorted(f.read_bytes() for f in (tmp_path / "a").rglob("*.png")) == sorted(
        f.read_bytes() for f in (tmp_path / "plain").rglob("*.png")
    )
    with pytest.raises(BudgetExceededError, match="remains"):
        privpix.release(mech, images, tmp_path / "b", seed=2, ledger=ledger)
    assert not (tmp_path / "b").exists() and len(PrivacyLedger.load(ledger).entries) == 1
    with pytest.raises(ParameterError, match="rng or seed"):
        privpix.release(mech, images, tmp_path / "c", 3, seed=3)
    with pytest.raises(ParameterError, match="needs a ledger"):
        privpix.release(mech, images, tmp_path / "c", seed=3, budget=1.0)


@pytest.mark.slow
def test_a_fit_is_charged_once_and_releases_from_its_model_charge_nothing(tmp_path, sixty):
    ledger = tmp_path / "ledger.json"
    done = privpix.fit(_merf(), sixty, tmp_path / "m.pt", ledger=ledger, budget=4.0, delta_budget=1e-4, seed=0)
    (entry,) = PrivacyLedger.load(ledger).entries
    assert (done.entry, done.ledger) == (entry.id, ledger.resolve())
    assert entry.kind == "fit" and entry.status == "charged" and entry.model_sha256
    assert done.spent is not None and done.spent.epsilon == 1.0  # basic composition, the default rule
    assert done.spent.non_adaptive_epsilon == pytest.approx(0.8366, abs=1e-3)  # PLD at δ = 1e-4, shown beside it
    for out in ("r1", "r2"):
        manifest = privpix.release(_merf(model=str(tmp_path / "m.pt")), 20, tmp_path / out, ledger=ledger)
        assert manifest["ledger"]["charge"] == f"none: post-processing of the DP fit charged as entry {entry.id}"
        assert manifest["model_sha256"] == entry.model_sha256
    assert len(PrivacyLedger.load(ledger).entries) == 1
    with pytest.raises(ParameterError, match="exists; pass force=True"):
        privpix.fit(_merf(), sixty, tmp_path / "m.pt", ledger=ledger)


@pytest.mark.slow
def test_a_model_changed_after_its_charge_or_charged_in_another_ledger_is_refused(tmp_path, sixty):
    import torch

    ledger, other = tmp_path / "ledger.json", tmp_path / "other.json"
    privpix.fit(_merf(), sixty, tmp_path / "m.pt", ledger=ledger, budget=4.0, delta_budget=1e-4, seed=0)
    PrivacyLedger(4.0, 1e-4).save(other)
    with pytest.raises(BudgetExceededError, match="is not charged in this ledger"):
        privpix.release(_merf(model=str(tmp_path / "m.pt")), 10, tmp_path / "r0", ledger=other)
    assert not (tmp_path / "r0").exists() and PrivacyLedger.load(other).entries == []
    blob = torch.load(tmp_path / "m.pt", weights_only=True)
    meta = json.loads(blob["meta"])
    meta["fitted_on"] = "elsewhere"  # the noise it records still agrees; only the bytes changed
    blob["meta"] = json.dumps(meta)
    buf = io.BytesIO()
    torch.save(blob, buf)
    (tmp_path / "m.pt").write_bytes(buf.getvalue())
    with pytest.raises(DataError, match="was changed after its fit"):
        privpix.release(_merf(model=str(tmp_path / "m.pt")), 10, tmp_path / "r1", ledger=ledger)
    assert not (tmp_path / "r1").exists()


def test_a_fit_that_is_not_a_dp_release_is_refused_under_a_ledger_before_training(tmp_path, sixty):
    with pytest.raises(ParameterError, match=r"^ledger: the fit of ppsgan is not a DP release"):
        privpix.fit(get_mechanism("ppsgan"), sixty, tmp_path / "g.pt", ledger=tmp_path / "l.json", budget=1.0)
    assert not (tmp_path / "l.json").exists() and not (tmp_path / "g.pt").exists()


@pytest.mark.integration
@pytest.mark.slow(seconds=7)
def test_racing_api_fits_never_overspend_the_ledger(tmp_path):
    """Two API fits at (1, 1e-5), started while the test holds the ledger's lock, so both wait on it at once.
    Budget (1, 1e-4): one spends ε = 1, two 2 (basic composition): one fits, one is refused. dp-eigenfaces' fits
    on a folder of 12 public noise images: no optimizer, whose first step imports torch's compiler (a process of
    3.5 CPU-s, not dp-merf's 5.3)."""
    public = noise_folder(tmp_path / "public", 12, (28, 28))
    ledger = tmp_path / "ledger.json"
    PrivacyLedger(1.0, 1e-4).save(ledger)
    eigenfaces = json.dumps({"method": "dp-eigenfaces", "components": 6, "public": str(public)})
    cmds = [[tmp_path / f"f{i}.pt", ledger, eigenfaces] for i in range(2)]
    procs, errs = start_all_waiting_on_the_ledger(ledger, cmds, program=("-c", API_FIT))
    codes = [p.wait(timeout=300) for p in procs]
    time.sleep(0.2)
    assert sorted(codes) == [0, 2], (codes, errs)
    refused = errs[codes.index(2)]
    assert any("refused:" in ln and "remains" in ln for ln in refused), refused
    book = PrivacyLedger.load(ledger)
    assert len(book.entries) == 1 and all(e.status == "charged" and e.kind == "fit" for e in book.entries)
    assert book.spent_epsilon <= book.epsilon_budget
    assert sum((tmp_path / f"f{i}.pt").exists() for i in range(2)) == 1


@pytest.mark.integration
@pytest.mark.slow
def test_an_api_fit_killed_mid_training_keeps_its_reservation(tmp_path):
    ledger, out = tmp_path / "ledger.json", tmp_path / "m.pt"
    PrivacyLedger(4.0, 1e-4).save(ledger)
    kill_a_fit_once_reserved(["-c", API_FIT, out, ledger, json.dumps({"method": "dp-merf", **TINY, "epochs": 100000})],
                             ledger, out)  # fmt: skip
    assert PrivacyLedger.load(ledger).spent_epsilon == 1.0
