"""A fit without a seed draws its noise as a release without a seed does (``exact_noise``): by exact samplers on
the OS CSPRNG where the mechanism has them, else in floating point with the caveat a release states; a seeded fit
stays a reproducible research run. Through the API (``privpix.fit``) and the command line (``privpix fit``)."""

from __future__ import annotations

import pytest

import privpix
from privpix.mechanisms import get_mechanism
from privpix.publishing.shards import FLOAT_NOISE, SEEDED_NOISE

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {"n_features": 200, "epochs": 1, "batch_size": 20, "width": 8, "channels": 4}
CLAIM = {"epsilon": 1.0, "delta": 1e-5}


def _meta(path):
    return get_mechanism("dp-merf", **CLAIM, model=str(path)).fit().meta_


def test_an_unseeded_fit_draws_exact_noise_where_the_mechanism_has_exact_samplers(tmp_path, sixty):
    mech = get_mechanism("dp-merf", **CLAIM, **TINY)  # secure=false, the parameter's default
    done = privpix.fit(mech, sixty, tmp_path / "exact.pt")
    meta = _meta(done.path)
    assert done.secure and mech.secure and meta["secure"] is True
    assert meta["noise"] == "exact discrete Gaussian on a fixed-point integer sum"
    assert meta["noise_rng"] == "OS CSPRNG (privpix SecureRandom)"
    assert FLOAT_NOISE not in done.guarantee.caveats and any("exact noise" in c for c in done.guarantee.caveats)

    seeded = privpix.fit(get_mechanism("dp-merf", **CLAIM, **TINY), sixty, tmp_path / "seeded.pt", seed=0)
    assert not seeded.secure and _meta(seeded.path)["secure"] is False
    assert SEEDED_NOISE in seeded.guarantee.caveats


def test_a_ledger_charges_an_unseeded_fit_the_exact_noise_it_drew(tmp_path, sixty):
    """The exact discrete Gaussian's event is the (ε, δ) its RDP bound gives, not the continuous Gaussian's curve:
    what was reserved is what the fit drew."""
    from privpix.privacy.accounting import PrivacyLedger
    from privpix.privacy.composition import ApproxDP

    ledger = tmp_path / "ledger.json"
    mech = get_mechanism("dp-merf", **CLAIM, **TINY)
    done = privpix.fit(mech, sixty, tmp_path / "m.pt", ledger=ledger, budget=4.0, delta_budget=1e-4)
    (entry,) = PrivacyLedger.load(ledger).entries
    assert done.secure and entry.events == list(mech.privacy(sixty, len(sixty), secure=True).events)
    assert [type(e) for e in entry.events] == [ApproxDP] and entry.events[0].epsilon <= CLAIM["epsilon"]


def test_an_unseeded_fit_without_exact_samplers_states_its_floating_point_noise(tmp_path, sixty):
    mech = get_mechanism("dp-sgd", **CLAIM, epochs=1, batch_size=10)
    assert mech.capabilities().secure is None  # DP-SGD's noise is Opacus's floating-point Gaussian
    done = privpix.fit(mech, sixty, tmp_path / "sgd.pt")
    assert not done.secure and FLOAT_NOISE in done.guarantee.caveats
    ledger = tmp_path / "ledger.json"
    charged = privpix.fit(get_mechanism("dp-sgd", **CLAIM, epochs=1, batch_size=10), sixty, tmp_path / "sgd2.pt",
                          ledger=ledger, budget=4.0, delta_budget=1e-4)  # fmt: skip
    assert FLOAT_NOISE in charged.guarantee.caveats and FLOAT_NOISE in ledger.read_text(encoding="utf-8")


def test_privpix_fit_without_seed_writes_a_model_of_exact_noise(run, tmp_path):
    params = [arg for k, v in TINY.items() for arg in ("--param", f"{k}={v}")]
    out = tmp_path / "m.pt"
    r = run("fit", "--method", "dp-merf", "--dataset", "builtin-mnist", "--limit", 60, "--epsilon", 1, "--delta",
            1e-5, *params, "--output", out)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert _meta(out)["secure"] is True and "exact noise" in r.output and FLOAT_NOISE not in r.output
