"""The ledger charges the DP event where the private data is touched (a fit), once; releases from a fitted
model are post-processing; a charge is admitted by a rule that holds when each ε is chosen after seeing earlier
releases (basic composition, or Gaussian DP for Gaussian noise only), with dp-accounting's PLD composition shown
beside it; model files cannot claim more than their noise earns. Every figure is checked against dp-accounting
computed independently here."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import kill_a_fit_once_reserved, noise_folder, start_all_waiting_on_the_ledger
from privpix.cli.fit import fit_to_file
from privpix.errors import BudgetExceededError, DataError, ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.synthesis import embedding
from privpix.privacy.accounting import LEDGER_FORMAT, PrivacyLedger, open_ledger, reserved_fit
from privpix.privacy.composition import (
    ApproxDP,
    GaussianNoise,
    LaplaceNoise,
    NoiseEvent,
    PureDP,
    SampledGaussianNoise,
    compose,
)
from privpix.privacy.guarantees import Guarantee
from privpix.publishing.ledger import create_ledger

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {"n_features": 200, "epochs": 1, "batch_size": 20, "width": 8, "channels": 4}
MERF = {"epsilon": 1.0, "delta": 1e-5}


def _merf_guarantee() -> Guarantee:
    return get_mechanism("dp-merf", **MERF).privacy((28, 28, 1)).guarantee


def _merf_events() -> list[NoiseEvent]:
    return list(get_mechanism("dp-merf", **MERF).privacy((28, 28, 1), 60).events)


def _independent_gaussians(z: float, k: int, delta: float) -> float:
    """ε of k Gaussian mechanisms with noise multiplier z at δ, by dp-accounting's PLDAccountant (sensitivity 1)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(dp_accounting.GaussianDpEvent(z), k)
    return float(acc.get_epsilon(delta))


# ------------------------------------------------------------------------------------------- composition


@pytest.mark.parametrize("delta", [1e-4, 1e-5])
def test_ten_gaussians_compose_as_an_independent_pld_accountant_computes(delta):
    """Ten releases calibrated to (1, 1e-5): in a Gaussian-DP ledger the admission figure is within 1 % of
    dp-accounting's PLDAccountant and never below it (issue: 3.13 at 1e-4, 3.62 at 1e-5), far below the basic sum
    of 10; a basic-composition ledger admits by that sum (its δ fits at 1e-4 only) and shows the PLD figure beside
    it."""
    z = embedding.noise_multiplier(1.0, 1e-5)
    book = PrivacyLedger(100.0, delta, composition="gaussian")
    basic = PrivacyLedger(100.0, 1e-3)
    for _ in range(10):
        book.spend(_merf_guarantee(), events=_merf_events())
        basic.spend(_merf_guarantee(), events=_merf_events())
    spent = book.spent
    want = _independent_gaussians(z, 10, delta)
    assert want * (1 - 1e-9) <= spent.epsilon <= want * 1.01  # never below it, up to float rounding
    assert spent.basic_epsilon == pytest.approx(10.0) and spent.basic_delta == pytest.approx(1e-4)
    assert spent.epsilon == pytest.approx({1e-4: 3.13, 1e-5: 3.62}[delta], abs=0.01) and spent.delta == delta
    assert spent.accountant.startswith("Gaussian DP") and "dp-accounting PLD, pessimistic" in spent.accountant
    assert spent.non_adaptive_epsilon == spent.epsilon
    assert basic.spent.epsilon == pytest.approx(10.0) and basic.spent.delta == pytest.approx(1e-4)
    assert basic.spent.non_adaptive_epsilon == pytest.approx(_independent_gaussians(z, 10, 1e-3), rel=0.01)


def test_pure_laplace_entries_compose_to_their_sum_within_the_discretisation():
    """Five Laplace releases of ε = 0.5 per image: spent is the pure sum, δ = 0, whatever the δ budget (a pure event
    spends no δ); at δ = 1e-5 the PLD figure beside it is at most the sum and within the discretisation of what
    dp-accounting's own accountant composes for Laplace events."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    g = Guarantee(model="central-dp", epsilon=0.5, per_image_epsilon=0.5, sound=True, unit="one image")
    pure = PrivacyLedger(10.0)
    tight = PrivacyLedger(10.0, 1e-5)
    for _ in range(5):
        pure.spend(g, events=[LaplaceNoise(0.5)])
        tight.spend(g, events=[LaplaceNoise(0.5)])
    assert pure.spent_epsilon == 2.5 and pure.spent.delta == 0
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_accounting.LaplaceDpEvent(1 / 0.5), 5)
    assert tight.spent_epsilon == 2.5 and tight.spent.delta == 0 and tight.spent.non_adaptive_delta == 1e-5
    assert tight.spent.non_adaptive_epsilon <= 2.5
    assert tight.spent.non_adaptive_epsilon == pytest.approx(acc.get_epsilon(1e-5), abs=5 * 1e-4)


@pytest.mark.slow
def test_add_remove_events_are_charged_for_a_replacement():
    """A DP-SGD fit (add/remove, Poisson-sampled Gaussian steps) costs what dp-accounting's REPLACE_ONE PLD says, and
    its bare (ε, δ) is converted by group privacy for the basic sum."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    mech = get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, epochs=2, batch_size=100)
    claim = mech.privacy((28, 28, 1), 1000)
    (event,) = claim.events or ()
    assert event.kind == "sampled-gaussian" and event.relation == "add-remove" and event.count == 20
    acc = pld_privacy_accountant.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    inner = dp_accounting.GaussianDpEvent(event.noise_multiplier)
    acc.compose(dp_accounting.PoissonSampledDpEvent(event.sample_rate, inner), event.count)
    eps, _ = compose([event], 1e-5)
    assert eps == pytest.approx(acc.get_epsilon(1e-5), rel=1e-3)
    book = PrivacyLedger(100.0, 1e-3)
    entry = book.spend(claim.guarantee, events=[event])
    assert entry.epsilon == pytest.approx(2.0) and entry.delta == pytest.approx((1 + np.e) * 1e-5)


def test_events_of_both_relations_are_charged_only_the_replace_one_claim_they_prove():
    """dp-teacher composes a replace-one Gaussian and add/remove DP-SGD steps into one replace-one claim: the ledger
    charges that claim (no doubling) because the events compose to it; a claim the events do not reach is refused."""
    mech = get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, teacher_batch_size=100, teacher_epochs=2)
    claim = mech.privacy((28, 28, 1), 1000)
    events = list(claim.events or ())
    assert {e.relation for e in events} == {"replace-one", "add-remove"}
    book = PrivacyLedger(100.0, 1e-3)
    entry = book.spend(claim.guarantee, events=events)
    assert entry.epsilon == 1.0 and entry.delta == 1e-5
    understated = Guarantee(model="central-dp", epsilon=0.5, delta=1e-5, unit="image", per_image_epsilon=0.5,
                            sound=True)  # fmt: skip
    with pytest.raises(BudgetExceededError, match="do not compose to the claimed replace-one"):
        book.spend(understated, events=events)


def test_typed_events_keep_the_ledgers_json_and_the_compositions_order():
    """Each event type writes the JSON ledgers and model files always held (same keys, same order), reads the
    hand-written forms they always accepted, and orders a composition by the text the single event class of
    earlier versions had as its repr, so compositions keep their bits."""
    from privpix.privacy.composition import _order, event_from_dict

    assert SampledGaussianNoise(1.2, 0.01, 30).to_dict() == {
        "kind": "sampled-gaussian", "noise_multiplier": 1.2, "sample_rate": 0.01, "relation": "add-remove", "steps": 30
    }  # fmt: skip
    assert list(LaplaceNoise(0.5, count=3).to_dict()) == ["kind", "epsilon", "count", "relation"]
    assert list(ApproxDP(1.0, 1e-6).to_dict()) == ["kind", "epsilon", "delta", "relation"]
    assert event_from_dict({"kind": "laplace", "epsilon": 1, "steps": 3}, "w") == LaplaceNoise(1, count=3)
    assert event_from_dict({"kind": "approx", "epsilon": 1.0}, "w") == ApproxDP(1.0, 0.0)
    with pytest.raises(DataError, match="add-remove"):  # a sampled Gaussian states its relation, as always
        event_from_dict({"kind": "sampled-gaussian", "noise_multiplier": 1.0, "sample_rate": 0.1}, "w")
    with pytest.raises(DataError, match="a laplace event takes no noise_multiplier"):
        event_from_dict({"kind": "laplace", "epsilon": 1.0, "noise_multiplier": 2.0}, "w")
    assert _order(PureDP(1.0)) == (
        "NoiseEvent(kind='pure', epsilon=1.0, delta=0.0, noise_multiplier=None, sample_rate=None, count=1, "
        "relation='replace-one')"
    )
    assert _order(SampledGaussianNoise(np.float64(1.5), 0.25, 4)) == (
        "NoiseEvent(kind='sampled-gaussian', epsilon=None, delta=0.0, noise_multiplier=1.5, sample_rate=0.25, "
        "count=4, relation='add-remove')"
    )
    events = [GaussianNoise(3.0), LaplaceNoise(0.2, count=4), ApproxDP(0.1, 1e-7, relation="add-remove")]
    assert compose(events, 1e-5) == compose(events[::-1], 1e-5)


def test_a_ledger_without_a_delta_budget_names_the_option():
    book = PrivacyLedger(10.0, 0.0)
    with pytest.raises(BudgetExceededError, match=r"δ budget \(delta_budget\) is 0"):
        book.spend(_merf_guarantee(), events=_merf_events())
    assert book.entries == []


def test_old_format_ledgers_still_load_and_count_as_bare_events(tmp_path):
    path = tmp_path / "old.json"
    old = {
        "format": "privpix-ledger-1",
        "epsilon_budget": 5.0,
        "delta_budget": 1e-5,
        "spent_epsilon": 1.5,
        "spent_delta": 1e-6,
        "entries": [
            {"label": "a", "epsilon": 1.0, "delta": 0.0, "guarantee": {}, "status": "charged"},
            {"label": "b", "epsilon": 0.5, "delta": 1e-6, "guarantee": {}, "status": "reserved", "run": "r1"},
        ],
    }
    path.write_text(json.dumps(old))
    book = PrivacyLedger.load(path)
    assert [e.id for e in book.entries] == [1, 2] and book.next_id == 3
    assert [e.noise() for e in book.entries] == [[PureDP(1.0)], [ApproxDP(0.5, 1e-6)]]
    assert book.spent.basic_epsilon == 1.5 and book.spent_epsilon <= 1.5
    with open_ledger(path) as session:
        session.add(Guarantee(model="central-dp", epsilon=1.0, per_image_epsilon=1.0, sound=True), "c",
                    status="charged")  # fmt: skip
    again = json.loads(path.read_text())
    assert again["format"] == LEDGER_FORMAT and [e["id"] for e in again["entries"]] == [1, 2, 3]


# ------------------------------------------------------------------------------------------- fits


def _fit(tmp_path, name, ledger, **kw):
    return fit_to_file("dp-merf", "builtin-mnist", str(tmp_path / name), {**TINY, **kw.pop("params", {})},
                       limit=60, seed=kw.pop("seed", 0), quiet=True, ledger=str(ledger), **MERF, **kw)  # fmt: skip


@pytest.mark.slow
def test_fifteen_fits_fit_a_budget_of_four_and_the_sixteenth_is_refused_before_training(tmp_path, digits,
                                                                                         monkeypatch):  # fmt: skip
    """The issue's target: a Gaussian-DP ledger of budget (4, 1e-4), dp-merf fits at (1, 1e-5): 15 admitted
    (ε = 3.13 after 10, 3.98 after 15, as dp-accounting computes independently), the 16th refused (4.13) before any
    training; basic composition would have admitted 4. A fit at ε = 4 after ten at 1 is refused too."""
    ledger = tmp_path / "ledger.json"
    create_ledger(ledger, 4.0, 1e-4, "gaussian")
    z = embedding.noise_multiplier(1.0, 1e-5)
    for k in range(1, 16):
        _fit(tmp_path, f"m{k}.pt", ledger, budget=4.0, delta_budget=1e-4)
        book = PrivacyLedger.load(ledger)
        want = _independent_gaussians(z, k, 1e-4)
        assert want * (1 - 1e-9) <= book.spent_epsilon <= want * 1.01  # the same PLD, up to float rounding
        if k == 10:
            assert book.spent_epsilon == pytest.approx(3.13, abs=0.005)
            monkeypatch.setattr(embedding.MeanEmbeddingSynthesizer, "_train", _no_training)
            with pytest.raises(BudgetExceededError, match="remains"):
                fit_to_file("dp-merf", "builtin-mnist", str(tmp_path / "big.pt"), TINY, epsilon=4.0, delta=1e-5,
                            limit=60, seed=0, quiet=True, ledger=str(ledger))  # fmt: skip
            monkeypatch.undo()
    # Basic composition (ε adds up) would have stopped at 4 fits.
    assert book.spent_epsilon == pytest.approx(3.98, abs=0.005) and book.spent.basic_epsilon == 15
    monkeypatch.setattr(embedding.MeanEmbeddingSynthesizer, "_train", _no_training)
    with pytest.raises(BudgetExceededError, match=r"ε=4\.13"):
        _fit(tmp_path, "m16.pt", ledger)
    assert len(PrivacyLedger.load(ledger).entries) == 15 and not (tmp_path / "m16.pt").exists()


def _no_training(*args, **kwargs):
    raise AssertionError("trained although the ledger should have refused the fit first")


@pytest.mark.integration
@pytest.mark.slow
def test_a_fit_is_charged_once_and_releases_from_its_model_charge_nothing(run, tmp_path):
    ledger = tmp_path / "ledger.json"
    r = run("fit", "--method", "dp-merf", "--dataset", "builtin-mnist", "--limit", 60, "--epsilon", 1, "--delta",
            1e-5, *_tiny_params(), "--seed", 0, "--workers", 1, "--output", tmp_path / "m.pt", "--ledger", ledger,
            "--budget", 4, "--delta-budget", 1e-4)  # fmt: skip
    assert r.exit_code == 0, r.output
    book = PrivacyLedger.load(ledger)
    (entry,) = book.entries
    assert entry.kind == "fit" and entry.status == "charged" and entry.events == _merf_events()
    from privpix.mechanisms.trained import file_sha256

    assert entry.model_sha256 == file_sha256(tmp_path / "m.pt")
    meta = _read_meta(tmp_path / "m.pt")
    assert meta["fit"]["ledger"] == {"path": str(ledger.resolve()), "entry": entry.id, "run": entry.run}
    assert meta["fit"]["events"] == [e.to_dict() for e in _merf_events()]
    spent = book.spent_epsilon
    for out in ("r1", "r2"):
        r = run("release", "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5, "--param",
                f"model={tmp_path / 'm.pt'}", "--param", "n=20", "--workers", 1, "--output", tmp_path / out,
                "--ledger", ledger)  # fmt: skip
        assert r.exit_code == 0, r.output
        manifest = json.loads((tmp_path / out / "manifest.json").read_text())
        assert manifest["ledger"]["charge"] == f"none: post-processing of the DP fit charged as entry {entry.id}"
        assert manifest["model_sha256"] == entry.model_sha256
        assert manifest["ledger"]["spent"]["accountant"].startswith("basic composition")
        assert manifest["ledger"]["spent"]["non_adaptive_accountant"].startswith("dp-accounting PLD, pessimistic")
    after = PrivacyLedger.load(ledger)
    assert len(after.entries) == 1 and after.spent_epsilon == spent


def _tiny_params() -> list[str]:
    return [a for k, v in TINY.items() for a in ("--param", f"{k}={v}")]


@pytest.mark.integration
@pytest.mark.slow
def test_a_model_fitted_outside_the_ledger_is_refused_then_admitted_after_ledger_charge(run, tmp_path, digits):
    fit_to_file("dp-merf", "builtin-mnist", str(tmp_path / "free.pt"), TINY, limit=60, seed=0, quiet=True, **MERF)
    ledger = tmp_path / "ledger.json"
    PrivacyLedger(4.0, 1e-4).save(ledger)
    model = f"model={tmp_path / 'free.pt'}"
    release = ["release", "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5, "--param", model, "--param", "n=10",
               "--workers", 1, "--ledger", ledger, "-q"]  # fmt: skip
    r = run(*release, "--output", tmp_path / "r1")
    assert r.exit_code == 2 and "is not charged in this ledger" in r.output
    assert "privpix ledger charge" in r.output and "--ledger" in r.output and not (tmp_path / "r1").exists()
    assert run("ledger", "check", ledger, "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5, "--param",
               f"model={tmp_path / 'free.pt'}").exit_code == 1  # fmt: skip
    r = run("ledger", "charge", ledger, "--model", tmp_path / "free.pt")
    assert r.exit_code == 0 and "charged the fit" in r.output
    (entry,) = PrivacyLedger.load(ledger).entries
    assert entry.kind == "model" and entry.events == _merf_events()
    assert "already charged" in run("ledger", "charge", ledger, "--model", tmp_path / "free.pt").output
    assert len(PrivacyLedger.load(ledger).entries) == 1
    r = run(*release, "--output", tmp_path / "r1")
    assert r.exit_code == 0, r.output
    assert len(PrivacyLedger.load(ledger).entries) == 1


@pytest.mark.integration
def test_a_model_file_changed_after_its_charged_fit_is_refused(run, tmp_path, digits):
    ledger = tmp_path / "ledger.json"
    _fit(tmp_path, "m.pt", ledger, budget=4.0, delta_budget=1e-4)
    _edit_meta(tmp_path / "m.pt", lambda meta: meta.update(fitted_on="elsewhere"))  # consistent noise, other bytes
    r = run("release", "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5, "--param", f"model={tmp_path / 'm.pt'}",
            "--param", "n=10", "--workers", 1, "--ledger", ledger, "--output", tmp_path / "r", "-q")  # fmt: skip
    assert r.exit_code == 2 and "was changed after its fit" in r.output and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_refused_or_failing_fit_leaves_no_charge(tmp_path, digits, monkeypatch):
    ledger = tmp_path / "ledger.json"

    def boom(*args, **kwargs):
        raise RuntimeError("training failed")

    monkeypatch.setattr(embedding.MeanEmbeddingSynthesizer, "_train", boom)
    with pytest.raises(RuntimeError):
        _fit(tmp_path, "m.pt", ledger, budget=4.0, delta_budget=1e-4)
    assert PrivacyLedger.load(ledger).entries == [] and not (tmp_path / "m.pt").exists()
    assert not list(tmp_path.glob(".privpix-fit-*"))


def test_fit_ledger_refuses_a_fit_that_is_not_a_dp_release(tmp_path):
    with pytest.raises(ParameterError, match="is not a DP release"):
        fit_to_file("ppsgan", "builtin-mnist", str(tmp_path / "g.pt"), {}, limit=60, quiet=True,
                    ledger=str(tmp_path / "l.json"), budget=1.0)  # fmt: skip
    assert not (tmp_path / "l.json").exists()


@pytest.mark.integration
@pytest.mark.slow
def test_a_killed_fit_keeps_its_reservation(tmp_path):
    """SIGKILL during training: the reservation stays on disk and counts as spent; no model file appears."""
    ledger, out = tmp_path / "ledger.json", tmp_path / "m.pt"
    long = [a for k, v in {**TINY, "epochs": 100_000}.items() for a in ("--param", f"{k}={v}")]
    # Seeded: floating-point Gaussian noise, whose event the ledger composes by its PLD (0.8366 at δ = 1e-4); an
    # unseeded fit would draw the exact discrete Gaussian, charged by its (ε, δ).
    cmd = ["-m", "privpix", "fit", "--method", "dp-merf", "--dataset", "builtin-mnist", "--limit", "300", "--epsilon",
           "1", "--delta", "1e-5", *long, "--seed", "0", "--workers", "1", "--output", out, "--ledger", ledger,
           "--budget", "4", "--delta-budget", "1e-4", "-q"]  # fmt: skip
    kill_a_fit_once_reserved(cmd, ledger, out)
    spent = PrivacyLedger.load(ledger).spent
    assert spent.epsilon == 1.0 and spent.non_adaptive_epsilon == pytest.approx(0.8366, abs=1e-3)


@pytest.mark.integration
@pytest.mark.slow(seconds=8)
def test_concurrent_fits_and_releases_never_overspend_the_ledger(tmp_path):
    """Two fits (ε = 1, δ = 1e-5) and two releases (ε = 1 per 8x8 image, Laplace per value), started while the test
    holds the ledger's lock, so all four wait on it at once (each says so). Budget (2.5, 1e-4), basic composition:
    any two events spend 2 and any three 3, so in any order two succeed and two are refused. The fits are
    dp-eigenfaces' on a folder of 12 public noise images: a fit that charges (ε, δ) like dp-merf's, without an
    optimizer, whose first step imports torch's compiler (a process of 3.5 CPU-s, not 5.3)."""
    from PIL import Image

    src, public = tmp_path / "in", noise_folder(tmp_path / "public", 12, (28, 28))
    src.mkdir()
    for i in range(4):
        Image.fromarray(np.full((8, 8), 40 * i, np.uint8)).save(src / f"{i}.png")
    ledger = tmp_path / "ledger.json"
    PrivacyLedger(2.5, 1e-4).save(ledger)
    fit = ["fit", "--method", "dp-eigenfaces", "--dataset", "builtin-mnist", "--limit", "60", "--epsilon", "1",
           "--delta", "1e-5", "--param", "components=6", "--param", f"public={public}", "--seed", "0", "--workers",
           "1", "--ledger", str(ledger), "-q"]  # fmt: skip
    # Seeded: the floating-point sampler, not the exact one, whose compiled kernels a race does not need (0.5 CPU-s).
    rel = ["release", "--input", str(src), "--method", "pixel-laplace", "--param", "sensitivity=bound", "--param",
           "unit=image", "--epsilon", "1", "--seed", "0", "--workers", "1", "--ledger", str(ledger), "-q"]  # fmt: skip
    cmds = [[*fit, "--output", str(tmp_path / "f0.pt")], [*fit, "--output", str(tmp_path / "f1.pt")],
            [*rel, "--output", str(tmp_path / "r0")], [*rel, "--output", str(tmp_path / "r1")]]  # fmt: skip
    procs, errs = start_all_waiting_on_the_ledger(ledger, cmds)
    codes = [p.wait(timeout=300) for p in procs]
    time.sleep(0.2)
    assert sorted(codes) == [0, 0, 2, 2], (codes, errs)
    for code, lines in zip(codes, errs, strict=True):
        if code == 2:
            assert any("remains" in ln for ln in lines), lines
    book = PrivacyLedger.load(ledger)
    assert len(book.entries) == 2 and all(e.status == "charged" for e in book.entries)
    assert book.spent_epsilon <= book.epsilon_budget


# ------------------------------------------------------------------------------------------- model files


def _read_meta(path: Path) -> dict:
    import torch

    return json.loads(torch.load(path, weights_only=True)["meta"])


def _edit_meta(path: Path, change) -> None:
    import torch

    blob = torch.load(path, weights_only=True)
    meta = json.loads(blob["meta"])
    change(meta)
    blob["meta"] = json.dumps(meta)
    buf = io.BytesIO()
    torch.save(blob, buf)
    path.write_bytes(buf.getvalue())


@pytest.fixture(scope="module")
def merf_files(tmp_path_factory, sixty):
    d = tmp_path_factory.mktemp("merf")
    plain = get_mechanism("dp-merf", **MERF, **TINY).fit(sixty, seed=0).save_model(d / "plain.pt")
    exact = get_mechanism("dp-merf", **MERF, **TINY, secure=True).fit(sixty, seed=0).save_model(d / "exact.pt")
    return {"plain": plain, "exact": exact}


@pytest.fixture(scope="module")
def sgd_file(tmp_path_factory, sixty):
    d = tmp_path_factory.mktemp("sgd")
    return get_mechanism("dp-sgd", **MERF, epochs=1, batch_size=10).fit(sixty, seed=0).save_model(d / "sgd.pt")


def _scale(key, factor):
    return lambda meta: meta.update({key: meta[key] * factor})


MERF_EDITS = {
    "n_features": _scale("n_features", 2),
    "secure": lambda meta: meta.update(secure=not meta.get("secure", False)),
    "epsilon": _scale("epsilon", 0.1),
    "delta": _scale("delta", 10.0),
    "noise_multiplier": _scale("noise_multiplier", 0.5),
    "sigma": _scale("sigma", 0.5),
    "n": _scale("n", 2),
    "accountant": lambda meta: meta.update(accountant="my own"),
}


@pytest.mark.slow
@pytest.mark.parametrize("field", sorted(MERF_EDITS))
@pytest.mark.parametrize("mode", ["plain", "exact"])
def test_a_synthesizer_file_whose_recorded_noise_was_edited_is_refused(merf_files, tmp_path, field, mode):
    """Every recorded field that enters the guarantee is checked against the others through the accountant; the
    stored ε is never trusted (edited from 1 to 0.1: refused, naming the file)."""
    path = tmp_path / "m.pt"
    path.write_bytes(merf_files[mode].read_bytes())
    _edit_meta(path, MERF_EDITS[field])
    meta = _read_meta(path)
    mech = get_mechanism("dp-merf", epsilon=meta["epsilon"], delta=meta["delta"], model=str(path))
    with pytest.raises(DataError, match=str(path)):
        mech.fit(None)
    assert not mech.is_fitted


def test_a_secure_file_whose_lattice_was_edited_is_refused(merf_files, tmp_path):
    path = tmp_path / "m.pt"
    path.write_bytes(merf_files["exact"].read_bytes())
    _edit_meta(path, lambda meta: meta.update(lattice_scale=1 << 10))
    with pytest.raises(DataError, match="lattice_scale"):
        get_mechanism("dp-merf", **MERF, model=str(path)).fit(None)


def test_an_unedited_file_states_its_recomputed_epsilon(merf_files):
    for path in merf_files.values():
        mech = get_mechanism("dp-merf", **MERF, model=str(path)).fit(None)
        g = mech.privacy(mech.capabilities().fixed_shape).guarantee
        assert g.epsilon == 1.0 and any("recomputed from the recorded noise" in c for c in g.caveats)
        record = mech.dp_fit_record()
        assert record["sha256"] and record["epsilon"] <= 1.0 and record["epsilon"] > 1.0 - 1e-6


SGD_EDITS = {
    "epsilon": _scale("epsilon", 0.5),
    "delta": _scale("delta", 10.0),
    "noise_multiplier": _scale("noise_multiplier", 0.5),
    "sample_rate": _scale("sample_rate", 0.5),
    "steps": _scale("steps", 2),
    "n": _scale("n", 2),
    "batch_size": _scale("batch_size", 2),
    "epochs": _scale("epochs", 2),
    "epsilon_spent": _scale("epsilon_spent", 0.5),
    "accountant": lambda meta: meta.update(accountant="my own"),
}


@pytest.mark.parametrize("field", sorted(SGD_EDITS))
def test_a_dp_sgd_file_whose_recorded_noise_was_edited_is_refused(sgd_file, tmp_path, field):
    path = tmp_path / "m.pt"
    path.write_bytes(sgd_file.read_bytes())
    _edit_meta(path, SGD_EDITS[field])
    meta = _read_meta(path)
    with pytest.raises(DataError, match=str(path)):
        get_mechanism("dp-sgd", epsilon=meta["epsilon"], delta=meta["delta"], model=str(path)).fit(None)


def test_ledger_charge_finishes_a_killed_fits_reservation_and_never_adopts_another_entry(run, tmp_path, sixty):
    """A fit killed after writing its (temporary) model file but before recording it: `ledger charge` records the
    file in the reservation it made, charging nothing twice. A file whose record names another entry (a release's)
    is charged as a new entry, never passed off as that one."""
    ledger = tmp_path / "ledger.json"
    mech = get_mechanism("dp-merf", **MERF, **TINY).fit(sixty, seed=0)
    with open_ledger(ledger, budget=4.0, delta_budget=1e-4) as session:
        cheap = session.add(Guarantee(model="central-dp", epsilon=0.1, per_image_epsilon=0.1, sound=True), "cheap",
                            status="charged")  # fmt: skip
        fit = session.add(
            mech.privacy((28, 28, 1)).guarantee, "killed fit", run="run-1", events=_merf_events(), kind="fit"
        )
        resolved = session.path
    mech.ledger_entry_ = {"path": str(resolved), "entry": fit.id, "run": "run-1"}
    left = mech.save_model(tmp_path / ".privpix-fit-run-1.tmp")
    r = run("ledger", "charge", ledger, "--model", left)
    assert r.exit_code == 0 and "recorded as entry 2" in r.output, r.output
    book = PrivacyLedger.load(ledger)
    assert len(book.entries) == 2 and book.entry(fit.id).status == "charged"
    from privpix.mechanisms.trained import file_sha256

    assert book.entry(fit.id).model_sha256 == file_sha256(left)
    # A forged record naming the cheap release's entry: charged as what it is, a new fit of ε = 1.
    other = get_mechanism("dp-merf", **MERF, **TINY).fit(sixty, seed=1)
    other.ledger_entry_ = {"path": str(resolved), "entry": cheap.id, "run": ""}
    forged = other.save_model(tmp_path / "forged.pt")
    assert run("ledger", "charge", ledger, "--model", forged).exit_code == 0
    book = PrivacyLedger.load(ledger)
    assert len(book.entries) == 3 and book.entry(cheap.id).model_sha256 == ""
    assert book.entries[-1].kind == "model" and book.entries[-1].events == _merf_events()


@pytest.mark.integration
def test_a_release_from_a_model_whose_fit_is_only_reserved_points_to_ledger_charge(run, tmp_path, sixty):
    ledger = tmp_path / "ledger.json"
    mech = get_mechanism("dp-merf", **MERF, **TINY).fit(sixty, seed=0)
    with open_ledger(ledger, budget=4.0, delta_budget=1e-4) as session:
        fit = session.add(
            mech.privacy((28, 28, 1)).guarantee, "killed fit", run="run-1", events=_merf_events(), kind="fit"
        )
        mech.ledger_entry_ = {"path": str(session.path), "entry": fit.id, "run": "run-1"}
    path = mech.save_model(tmp_path / "m.pt")
    r = run("release", "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5, "--param", f"model={path}", "--param",
            "n=10", "--workers", 1, "--ledger", ledger, "--output", tmp_path / "r", "-q")  # fmt: skip
    assert r.exit_code == 2 and "a reservation a killed fit left" in r.output and "ledger charge" in r.output


@pytest.mark.slow
def test_a_dp_sgd_fit_is_charged_for_a_replacement(run, tmp_path):
    ledger = tmp_path / "ledger.json"
    r = run("fit", "--method", "dp-sgd", "--dataset", "builtin-mnist", "--limit", 60, "--epsilon", 1, "--delta", 1e-5,
            "--param", "epochs=1", "--param", "batch_size=10", "--seed", 0, "--output", tmp_path / "s.pt",
            "--ledger", ledger, "--budget", 10, "--delta-budget", 1e-4)  # fmt: skip
    assert r.exit_code == 0, r.output
    (entry,) = PrivacyLedger.load(ledger).entries
    (event,) = entry.events
    assert event.kind == "sampled-gaussian" and event.relation == "add-remove" and event.count == 6
    assert entry.epsilon == pytest.approx(2.0)  # add/remove ε = 1, doubled by group privacy for a replacement
    assert _read_meta(tmp_path / "s.pt")["fit"]["ledger"]["entry"] == entry.id


def test_a_dp_sgd_file_keeps_no_noise_free_statistic_of_the_private_data(sgd_file):
    meta = _read_meta(sgd_file)
    assert "history" not in meta and "train_seconds" not in meta
    assert meta["fit"]["events"][0]["kind"] == "sampled-gaussian"


# ------------------------------------------------------------------------------------------- ledger command


def test_ledger_show_json_has_exactly_the_documented_keys(run, tmp_path):
    ledger = tmp_path / "ledger.json"
    book = PrivacyLedger(4.0, 1e-4)
    book.spend(_merf_guarantee(), "fit", events=_merf_events(), kind="fit")
    book.spend(Guarantee(model="central-dp", epsilon=0.5, per_image_epsilon=0.5, sound=True), "old style")
    book.save(ledger)
    r = run("ledger", "show", ledger, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert set(doc) == {"budget", "composition", "spent", "remaining_epsilon", "entries"}
    assert set(doc["budget"]) == {"epsilon", "delta"} and doc["composition"] == "basic"
    assert set(doc["spent"]) == {"epsilon", "delta", "basic_epsilon", "basic_delta", "accountant",
                                 "non_adaptive_epsilon", "non_adaptive_delta", "non_adaptive_accountant"}  # fmt: skip
    assert doc["spent"]["basic_epsilon"] == 1.5 and doc["spent"]["epsilon"] == 1.5
    assert doc["spent"]["delta"] == 1e-5 and doc["spent"]["non_adaptive_epsilon"] < 1.5
    assert doc["remaining_epsilon"] == pytest.approx(4.0 - doc["spent"]["epsilon"])
    assert [e["noise"][0]["kind"] for e in doc["entries"]] == ["gaussian", "pure"]
    for e in doc["entries"]:
        assert {"label", "run", "status", "noise", "time", "model_sha256"} <= set(e)
    text = " ".join(run("ledger", "show", ledger).output.split())
    assert "spent ε=1.5 at δ=1e-05 of a budget of ε=4: ε=2.5 remains (by basic composition" in text
    assert "which holds even if each ε was chosen after seeing earlier releases" in text
    assert "by dp-accounting PLD, pessimistic" in text and "which holds only if no ε was chosen" in text


def test_ledger_check_answers_without_charging(run, tmp_path):
    ledger = tmp_path / "ledger.json"
    PrivacyLedger(2.0, 1e-4).save(ledger)
    before = ledger.read_text()
    yes = run("ledger", "check", ledger, "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5, "--shape", "28x28")
    assert yes.exit_code == 0 and yes.output.startswith("yes") and "dp-accounting PLD" in yes.output
    said = " ".join(yes.output.split())
    assert "holds even if each ε was chosen" in said and "holds only if no ε was chosen" in said
    no = run("ledger", "check", ledger, "--method", "pixel-laplace", "--param", "sensitivity=bound", "--param",
             "unit=image", "--epsilon", 50, "--shape", "8x8")  # fmt: skip
    assert no.exit_code == 1 and no.output.startswith("no") and "remains" in no.output
    unsound = run("ledger", "check", ledger, "--method", "pixel-laplace", "--epsilon", 1, "--shape", "8x8")
    assert unsound.exit_code == 1 and "only sound DP" in unsound.output
    assert ledger.read_text() == before
    assert "charge" in run("ledger", "--help").output


def test_reserved_fit_rolls_back_on_an_exception_and_is_refused_over_budget(tmp_path):
    ledger = tmp_path / "ledger.json"
    with pytest.raises(RuntimeError):
        with reserved_fit(ledger, _merf_guarantee(), _merf_events(), "x", budget=1.0, delta_budget=1e-4):
            assert PrivacyLedger.load(ledger).entries[0].status == "reserved"
            raise RuntimeError
    assert PrivacyLedger.load(ledger).entries == []
    big = get_mechanism("dp-merf", epsilon=5.0, delta=1e-5)
    with pytest.raises(BudgetExceededError):
        with reserved_fit(ledger, big.privacy((28, 28, 1)).guarantee, list(big.privacy((28, 28, 1), 60).events), "x"):
            raise AssertionError("entered although over budget")


# ------------------------------------------------------------------------------------------- statements


@pytest.mark.integration
@pytest.mark.slow
def test_secure_gives_the_exact_sampler_or_is_refused(run, tmp_path, digits):
    from PIL import Image

    src = tmp_path / "in"
    src.mkdir()
    for i in range(3):
        Image.fromarray(np.full((8, 8), 50 * i, np.uint8)).save(src / f"{i}.png")
    for method, params in [("pixel-gaussian", ["--param", "sigma=0.1"]), ("gaussian-blur", []),
                           ("pca-inverse", ["--param", "basis=dp", "--param", "batch=3", "--param", "d=2",
                                            "--epsilon", 1, "--delta", 1e-5])]:  # fmt: skip
        r = run("release", "--input", src, "--method", method, *params, "--secure", "--output", tmp_path / "o")
        assert r.exit_code == 2 and "--secure" in r.output and "exact sampler" in r.output, r.output
        assert not (tmp_path / "o").exists()
    # A synthesizer fitted in the release gets its exact discrete Gaussian: the manifest says so.
    r = run("release", "--dataset", "builtin-mnist:test", "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5,
            *_tiny_params(), "--param", "n=10", "--secure", "--workers", 1, "--output", tmp_path / "s")  # fmt: skip
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["parameters"]["secure"] is True and manifest["rng"] == "secure"
    assert any("exact discrete Gaussian" in c for c in manifest["guarantee"]["caveats"])
    # From a model fitted with floating-point noise, --secure cannot make anything exact.
    fit_to_file("dp-merf", "builtin-mnist", str(tmp_path / "f.pt"), TINY, limit=60, seed=0, quiet=True, **MERF)
    r = run("release", "--method", "dp-merf", "--epsilon", 1, "--delta", 1e-5, "--param", f"model={tmp_path / 'f.pt'}",
            "--param", "n=10", "--secure", "--output", tmp_path / "m")  # fmt: skip
    assert r.exit_code == 2 and "secure=false" in r.output


@pytest.mark.integration
@pytest.mark.slow
def test_every_public_set_is_checked_against_the_private_images(run, tmp_path, digits):
    """pca-inverse basis=public, like the synthesizers, refuses private images that are in its public set."""
    from PIL import Image

    from privpix.data import load_dataset

    train = load_dataset("builtin-mnist:train")
    src = tmp_path / "in"
    src.mkdir()
    for i in range(5):
        Image.fromarray(train.images[i, :, :, 0]).save(src / f"{i}.png")
    r = run("release", "--input", src, "--method", "pca-inverse", "--param", "basis=public", "--param",
            "public=builtin-mnist:train", "--param", "d=4", "--epsilon", 10, "--workers", 1, "--output",
            tmp_path / "o")  # fmt: skip
    assert r.exit_code == 2 and "private images are identical to images of it" in r.output
    assert not (tmp_path / "o").exists()
    mech = get_mechanism("pca-inverse", epsilon=10, basis="public", public="builtin-mnist:train", d=4).fit()
    with pytest.raises(ParameterError, match="5 private images are identical to images of it"):
        mech.release(train.subset(np.arange(5)), 0)
    mech.release(load_dataset("builtin-mnist:test").subset(np.arange(5)), 0)  # distinct: fine


def test_float_images_outside_the_declared_range_are_refused():
    from privpix.data import ImageSet

    mech = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="image")
    black, bright = ImageSet(np.zeros((1, 4, 4, 1), np.float32)), ImageSet(np.full((1, 4, 4, 1), 255.0, np.float32))
    mech.release(black, 0)
    with pytest.raises(ParameterError, match=r"must lie in \[0, 1\].*255"):
        mech.release(bright, 0)
    narrow = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="image", pixel_range=0.5)
    assert any("clipped" in c for c in narrow.privacy((4, 4, 1)).guarantee.caveats)
    # Values above the declared range are clipped before the noise: an input of 1.0 releases as one of 0.5.
    white, half = ImageSet(np.ones((1, 4, 4, 1), np.float32)), ImageSet(np.full((1, 4, 4, 1), 0.5, np.float32))
    np.testing.assert_array_equal(narrow.release(white, 3).images.images, narrow.release(half, 3).images.images)


def test_the_noise_of_per_pixel_laplace_is_the_composition_of_its_values():
    mech = get_mechanism("pixel-laplace", epsilon=0.1, sensitivity="bound", unit="pixel")
    (event,) = mech.privacy((8, 8, 3)).events
    assert event.kind == "laplace" and event.count == 8 * 8 * 3
    assert event.epsilon * event.count == pytest.approx(mech.privacy((8, 8, 3)).guarantee.per_image_epsilon)
    (exact,) = mech.privacy((8, 8, 3), secure=True).events
    assert exact.kind == "pure" and exact.epsilon == event.epsilon
