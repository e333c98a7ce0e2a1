"""dp-teacher: the two releases composed to the claim, the images dp-merf's, the labels
the teacher's, the model file, the refusals, and the ``dp-synth`` alias."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from privpix.data import ImageSet
from privpix.errors import DataError, ParameterError
from privpix.mechanisms import ALIASES, get_mechanism, mechanism_class, parse_method_spec
from privpix.mechanisms.registry import canonical_spec
from privpix.mechanisms.synthesis import dp_teacher
from privpix.privacy.composition import SampledGaussianNoise, compose

TINY = {"n_features": 64, "epochs": 1, "batch_size": 20, "width": 16, "channels": 4, "teacher_epochs": 1,
        "teacher_batch_size": 10}  # fmt: skip
MERF = {k: v for k, v in TINY.items() if not k.startswith("teacher_")}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def fitted(sixty):
    return get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)


@pytest.mark.parametrize(
    ("epsilon", "n", "batch"),
    [(1.0, 55_000, 4096), pytest.param(10.0, 55_000, 4096, marks=pytest.mark.slow), (0.5, 60, 10)],
)
def test_the_two_releases_compose_to_the_claim_by_the_ledgers_accountant(epsilon, n, batch):
    mech = get_mechanism("dp-teacher", epsilon=epsilon, delta=1e-5, teacher_batch_size=batch)
    events = mech.privacy((28, 28, 1), n).events
    assert [e.kind for e in events] == ["gaussian", "sampled-gaussian"]
    spent = compose(list(events), 1e-5)[0]
    assert epsilon * (1 - dp_teacher.TOLERANCE) <= spent <= epsilon
    # The embedding's share is its own analytic-Gaussian calibration: alone it spends (1 - share)·ε at δ.
    alone = compose([events[0]], 1e-5)[0]
    assert alone == pytest.approx(0.25 * epsilon, rel=2e-3)
    # A larger share gives the teacher less noise, the embedding more: checked at the two cheaper settings (a
    # second calibration at ε = 10 would double this case's 8-10 s for the same logic).
    if epsilon == 10.0:
        return
    more = get_mechanism("dp-teacher", epsilon=epsilon, delta=1e-5, teacher_batch_size=batch, teacher_share=0.9)
    e2 = more.privacy((28, 28, 1), n).events
    assert e2[1].noise_multiplier < events[1].noise_multiplier and e2[0].noise_multiplier > events[0].noise_multiplier


@pytest.fixture
def model_epsilon(monkeypatch):
    """teacher_noise on a stand-in accountant, ε(z_g, z_t) = 1/z_g + 2/z_t (decreasing in z_t, as every
    accountant's): the bisection's logic in milliseconds, where dp-accounting takes seconds per call."""
    monkeypatch.setattr(dp_teacher, "composed_epsilon", lambda zg, zt, q, steps, delta: 1 / zg + 2 / zt)
    dp_teacher.teacher_noise.cache_clear()
    yield
    dp_teacher.teacher_noise.cache_clear()


@pytest.mark.parametrize("epsilon", [0.2, 1.0, 3.0, 50.0, 900.0])
def test_the_calibration_brackets_from_both_sides_to_the_smallest_noise(model_epsilon, epsilon):
    # z_t = 2 / (ε - 1/z_g) with z_g = 10: from 20 (ε = 0.2) down to 0.0022 (ε = 900), far below the first guess 1.
    z = dp_teacher.teacher_noise(epsilon, 1e-5, 10.0, 0.1, 10)
    exact = 2 / (epsilon - 0.1)
    assert exact <= z <= exact / (1 - dp_teacher.TOLERANCE) ** 2
    assert epsilon * (1 - dp_teacher.TOLERANCE) <= 1 / 10 + 2 / z <= epsilon


def test_the_calibration_refuses_what_it_cannot_reach(model_epsilon, monkeypatch):
    with pytest.raises(ParameterError, match="the embedding alone spends"):
        dp_teacher.teacher_noise(0.05, 1e-5, 10.0, 0.1, 10)  # 1/z_g = 0.1 > ε
    with pytest.raises(ParameterError, match="almost no teacher noise"):
        dp_teacher.teacher_noise(5000.0, 1e-5, 10.0, 0.1, 10)  # would need z_t = 0.0004
    # An accountant whose ε jumps in steps of 0.5 (a coarse grid) cannot be met to 0.1 %: refused, not written.
    monkeypatch.setattr(dp_teacher, "composed_epsilon", lambda zg, zt, q, steps, delta: 0.5 * -(-4 // zt))
    with pytest.raises(ParameterError, match="cannot calibrate"):
        dp_teacher.teacher_noise(1.7, 1e-5, 10.0, 0.1, 10)


def test_the_teacher_is_charged_for_a_replacement_not_an_addition():
    """Its steps are stated for add/remove (Opacus's relation) and composed by the REPLACE_ONE PLD: the same noise
    costs more under replace-one than Opacus's add/remove ε."""
    from privpix.mechanisms.neural.dp_sgd import epsilon_of

    q, steps = dp_teacher.teacher_sampling(55_000, 4096, 15)
    z = 4.0
    replace_eps = compose([SampledGaussianNoise(z, q, steps)], 1e-5)[0]
    assert replace_eps > 1.5 * epsilon_of(z, q, steps, 1e-5)


def test_the_images_are_dp_merfs_and_the_labels_the_teachers(fitted, sixty):
    rel = fitted.release(sixty, 5)
    # Same seed, ε of the embedding's share: the same embedding, generator and draws as dp-merf's.
    merf = get_mechanism("dp-merf", epsilon=0.25, delta=1e-5, **MERF).fit(sixty, seed=0)
    np.testing.assert_array_equal(fitted.embedding_, merf.embedding_)
    np.testing.assert_array_equal(rel.images.images, merf.release(sixty, 5).images.images)
    np.testing.assert_array_equal(rel.images.labels, fitted.predict(rel.images))
    assert rel.guarantee.sound and rel.guarantee.epsilon == 1.0 and rel.guarantee.model == "central-dp"
    text = " ".join(rel.guarantee.caveats)
    assert "composed by dp-accounting's pessimistic PLD under replace-one" in text and "teacher" in text


def test_same_seed_same_release_and_the_model_file_releases_it_under_its_claim(fitted, sixty, tmp_path):
    again = get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)
    a, b = fitted.release(sixty, 3), again.release(sixty, 3)
    np.testing.assert_array_equal(a.images.images, b.images.images)
    np.testing.assert_array_equal(a.images.labels, b.images.labels)
    path = fitted.save_model(tmp_path / "t.pt")
    loaded = get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, model=str(path)).fit()
    c = loaded.release(sixty, 3)
    np.testing.assert_array_equal(a.images.images, c.images.images)
    np.testing.assert_array_equal(a.images.labels, c.images.labels)
    assert loaded.teacher_epochs == 1 and loaded.teacher_batch_size == 10  # the file's parameters in force
    assert [e.to_dict() for e in loaded.privacy(sixty.shape).events] == [
        e.to_dict() for e in fitted.privacy(sixty.shape).events
    ]


def test_a_file_whose_teacher_noise_was_edited_is_refused(fitted, tmp_path):
    import torch

    path = fitted.save_model(tmp_path / "t.pt")
    blob = torch.load(path, weights_only=True)
    meta = json.loads(blob["meta"])
    meta["teacher_noise_multiplier"] *= 0.5  # half the noise, same claim
    blob["meta"] = json.dumps(meta)
    torch.save(blob, path)
    with pytest.raises(DataError, match="but the noise it records gives ε="):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, model=str(path)).fit()


@pytest.mark.parametrize(
    ("field", "value"),
    [("teacher_steps", 7), ("teacher_sample_rate", 0.2), ("teacher_accountant", "RDP"), ("teacher_share", 0.5)],
)
def test_a_file_whose_teacher_record_disagrees_is_refused(fitted, tmp_path, field, value):
    import torch

    path = fitted.save_model(tmp_path / "t.pt")
    blob = torch.load(path, weights_only=True)
    meta = json.loads(blob["meta"])
    meta[field] = value
    blob["meta"] = json.dumps(meta)
    torch.save(blob, path)
    with pytest.raises(DataError, match="records noise that does not add up"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, model=str(path)).fit()


def test_a_file_without_the_teachers_weights_is_refused(fitted, tmp_path):
    import torch

    path = fitted.save_model(tmp_path / "t.pt")
    blob = torch.load(path, weights_only=True)
    blob["state"] = {k: v for k, v in blob["state"].items() if not k.startswith("teacher.")}
    torch.save(blob, path)
    with pytest.raises(DataError):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, model=str(path)).fit()


def test_the_fit_keeps_the_teachers_loss_out_of_the_model_file(fitted, tmp_path):
    import torch

    assert fitted.history_ is not None and len(fitted.history_["loss"]) == 1
    meta = json.loads(torch.load(fitted.save_model(tmp_path / "t.pt"), weights_only=True)["meta"])
    assert not [key for key in meta if key.startswith("teacher") and ("loss" in key or "seconds" in key)]
    assert meta["fit"]["accountant"] == dp_teacher.ACCOUNTANT


def test_refuses_what_it_cannot_claim_before_reading_the_images(sixty, monkeypatch):
    from privpix.mechanisms.synthesis import embedding

    def no_read(*args, **kwargs):
        raise AssertionError("read the private images before refusing")

    monkeypatch.setattr(embedding, "_parallel_chunk_sums", no_read)
    with pytest.raises(ParameterError, match="ScatterNet needs h and w divisible by 4"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **{**TINY, "generator": "mlp"}).fit(
            sixty.resized(30, 30), seed=0
        )
    with pytest.raises(ParameterError, match=r"secure=true is not available.*floating-point"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, secure=True)
    with pytest.raises(ParameterError, match="teacher_share must be in"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, teacher_share=1.0)
    with pytest.raises(ParameterError, match="teacher_batch_size=4096 exceeds the 60 private images"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **MERF).fit(sixty, seed=0)
    with pytest.raises(ParameterError, match="use dp-merf for one class or unlabelled"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **TINY).fit(ImageSet(sixty.images), seed=0)
    with pytest.raises(ParameterError, match="contradicts the 10 classes"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, n_classes=5, **TINY).fit(sixty, seed=0)
    assert get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5).capabilities().secure is None
    assert get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5).released_statistic(sixty, None, seed=0) is None
    with pytest.raises(ParameterError, match="n_classes"):
        get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **TINY).fit(replace(sixty, class_names=None), seed=0)


def test_dp_synth_is_an_alias_resolved_at_construction():
    assert "dp-synth" in ALIASES
    mech = get_mechanism("dp-synth", epsilon=1.0, delta=1e-5, n=10)
    assert type(mech) is mechanism_class("dp-teacher") and mech.name == "dp-teacher" and mech.n == 10
    assert parse_method_spec("dp-synth[teacher_share=0.5]") == ("dp-teacher", {"teacher_share": "0.5"})
    assert canonical_spec("dp-synth[n=10]") == "dp-teacher[n=10]" and canonical_spec("dp-merf") == "dp-merf"
    from privpix.cli.options import split_methods

    assert split_methods("dp-synth,dp-merf[epochs=2]") == ["dp-teacher", "dp-merf[epochs=2]"]


def test_an_alias_that_pins_a_parameter_refuses_a_contradiction(monkeypatch):
    from privpix.mechanisms import registry

    monkeypatch.setitem(registry.ALIASES, "dp-quick", ("dp-teacher[teacher_epochs=2]", "a test alias"))
    assert parse_method_spec("dp-quick[n=5]") == ("dp-teacher", {"teacher_epochs": "2", "n": "5"})
    assert get_mechanism("dp-quick", epsilon=1.0, delta=1e-5).teacher_epochs == 2
    with pytest.raises(ParameterError, match="dp-quick pins teacher_epochs=2"):
        parse_method_spec("dp-quick[teacher_epochs=3]")
    with pytest.raises(ValueError, match="alias"):
        from privpix.mechanisms import register

        register(type("Shadow", (mechanism_class("dp-merf"),), {"name": "dp-synth"}))


def test_privpix_mechanisms_shows_the_alias_with_the_real_method():
    from privpix.cli import main

    out = CliRunner().invoke(main, ["mechanisms", "--json"])
    assert out.exit_code == 0, out.output
    items = {it["name"]: it for it in json.loads(out.output)}
    assert "dp-synth" not in items
    assert [a["alias"] for a in items["dp-teacher"]["aliases"]] == ["dp-synth"]
    assert all(it["aliases"] == [] for name, it in items.items() if name != "dp-teacher")


@pytest.mark.slow
def test_a_ledger_charges_the_fit_its_composed_claim_and_a_release_from_it_nothing(run, tmp_path):
    from privpix.privacy.accounting import PrivacyLedger

    ledger, model = tmp_path / "ledger.json", tmp_path / "t.pt"
    params = [a for k, v in TINY.items() for a in ("--param", f"{k}={v}")]
    r = run("fit", "--method", "dp-synth", "--dataset", "builtin-mnist", "--limit", 60, "--epsilon", 1, "--delta",
            1e-5, *params, "--seed", 0, "--workers", 1, "--output", model, "--ledger", ledger, "--budget", 2,
            "--delta-budget", 1e-5)  # fmt: skip
    assert r.exit_code == 0, r.output
    book = PrivacyLedger.load(ledger)
    (entry,) = book.entries
    assert [e.kind for e in entry.events] == ["gaussian", "sampled-gaussian"]
    assert 1 - dp_teacher.TOLERANCE <= book.spent_epsilon <= 1.0
    r = run("release", "--method", "dp-synth", "--epsilon", 1, "--delta", 1e-5, "--param", f"model={model}",
            "--param", "n=30", "--workers", 1, "--output", tmp_path / "out", "--ledger", ledger)  # fmt: skip
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["mechanism"] == "dp-teacher" and manifest["parameters"]["teacher_share"] == 0.75
    assert len(manifest["labels"]) == 30
    assert PrivacyLedger.load(ledger).spent_epsilon == book.spent_epsilon


# ------------------------------------------------------------------------ the composite white-box audit (item 8)


def test_replace_one_canaries_score_the_likelihood_ratio_of_a_gradient_replaced_by_its_opposite():
    """Without sampling (q = 1) each step's gradient is ±1 + N(0, z²) units, so a canary's score Σ_t 2g_t/z² is
    N(±2T/z², 4T/z²) and its gradient sum N(±T, T·z²): each mean checked within 4 standard errors and each variance
    by a χ² test at a two-sided false-alarm rate of 1e-4 (fixed seeds)."""
    from scipy import stats

    from privpix.mechanisms import dp_sgd_training

    z, steps, n = 2.0, 20, 1000
    s = dp_sgd_training.dirac_canary_scores(n, noise_multiplier=z, max_grad_norm=0.1, sample_rate=1.0,
                                       steps_per_epoch=steps, epochs=1, sample_seed=1, noise_seed=2,
                                       relation="replace-one")  # fmt: skip
    mean, sd = 2 * steps / z**2, math.sqrt(4 * steps / z**2)
    for scores, sign in ((s.s1, 1), (s.s0, -1)):
        assert abs(scores.mean() - sign * mean) < 4 * sd / math.sqrt(n)
        chi2 = float(np.sum((scores - sign * mean) ** 2) / sd**2)
        assert stats.chi2(n).ppf(5e-5) < chi2 < stats.chi2(n).isf(5e-5)
    for sums, sign in ((s.sum1, 1), (s.sum0, -1)):
        assert abs(sums.mean() - sign * steps) < 4 * math.sqrt(steps * z**2 / n)
    # With Poisson sampling (q < 1) the score is a true log-likelihood ratio only if E₀[e^L] = E₁[e^−L] = 1:
    # checked within 4 standard errors (fixed seeds).
    s = dp_sgd_training.dirac_canary_scores(n, noise_multiplier=1.0, max_grad_norm=0.1, sample_rate=0.3,
                                       steps_per_epoch=10, epochs=1, sample_seed=3, noise_seed=4,
                                       relation="replace-one")  # fmt: skip
    for ratio in (np.exp(s.s0), np.exp(-s.s1)):
        assert abs(ratio.mean() - 1) < 4 * ratio.std() / math.sqrt(n)
    with pytest.raises(ParameterError, match="relation"):
        dp_sgd_training.dirac_canary_scores(10, noise_multiplier=z, max_grad_norm=0.1, sample_rate=1.0,
                                            steps_per_epoch=1, epochs=1, sample_seed=1, noise_seed=2,
                                            relation="swap")  # fmt: skip


def test_the_replace_one_curve_is_the_ledgers_accountant():
    """The curve the audit reads the composite through has, at scale 1, the ε the ledger charges the fit."""
    from privpix.evaluation.audit.curves import composed_curve, curve_of

    mech = get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, teacher_batch_size=4096)
    q, steps, z_g, z_t = mech._calibration(55_000)
    curve = composed_curve((("gaussian", 1 / z_g), ("sampled-gaussian", z_t, q, steps, "replace-one")), 1e-5)
    # The audit derives that very curve from the noise the claim declares for one replaced image.
    assert curve_of(mech.privacy((28, 28, 1), 55_000).unit_events, 1e-5, removes=False) == curve
    assert curve._epsilon_upper(1.0) == pytest.approx(1.0, rel=0.02)
    assert "replace-one" in curve.name
    # Read as add/remove, the same steps spend less: the relation matters.
    plain = composed_curve((("gaussian", 1 / z_g), ("sampled-gaussian", z_t, q, steps)), 1e-5)
    assert plain._epsilon_upper(1.0) < 0.8


AUDITED = {**TINY, "teacher_epochs": 2, "teacher_batch_size": 50}


@pytest.mark.slow
def test_the_composite_audit_is_consistent_and_refutes_half_the_teachers_noise(sixty, monkeypatch):
    """dp-teacher is audited white-box: both releases of its fit through their real code, the embedding on the
    pair of private sets furthest apart and a gradient canary replaced by its opposite in the teacher's DP-SGD,
    read through the composed replace-one curve. Its claim holds and can be refuted; with the teacher's noise
    halved (the calibration fault DPImageBench's DP-Kernel port has) the same audit refutes it."""
    from privpix.evaluation.audit import audit

    mech = get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **AUDITED)
    res = audit(mech, sixty, trials=1000, seed=0)
    assert res.verdict == "consistent" and res.refutable and res.max_auditable_epsilon > 1.0
    assert res.pair.startswith("white-box, one record replaced") and "replace-one" in res.curve
    assert 0.0 < res.audited_epsilon_lower < 1.0
    real = dp_teacher.teacher_noise
    monkeypatch.setattr(dp_teacher, "teacher_noise", lambda *a: real(*a) / 2)
    broken = audit(get_mechanism("dp-teacher", epsilon=1.0, delta=1e-5, **AUDITED), sixty, trials=1000, seed=0)
    assert broken.verdict == "violated" and broken.audited_epsilon_lower > 1.0


def test_the_embedding_part_is_the_real_release_projected_on_the_pairs_difference(sixty, monkeypatch):
    """With the teacher's part switched off (scores 0), the composite's scores are the embedding's log-likelihood
    ratio μ·s − μ²/2 with s ~ N(0, 1) on one side and N(μ, 1) on the other: the real release's noise in units of
    its calibrated σ (means within 4 standard errors, fixed seed)."""
    from privpix.mechanisms import dp_sgd_training

    monkeypatch.setattr(dp_sgd_training, "dirac_canary_scores",
                        lambda trials, **kw: dp_sgd_training.DiracScores(*(np.zeros(trials),) * 4))  # fmt: skip
    monkeypatch.setattr(dp_teacher, "teacher_noise", lambda *a: 5.0)  # its calibration: seconds, and unused here
    mech = get_mechanism("dp-teacher", epsilon=8.0, delta=1e-5, **AUDITED)
    wb = mech.white_box_trials(sixty, 2000, seed=0)
    mu = float(wb.pair.split("μ = ")[1].split(" ")[0])
    assert 0 < mu <= 1 / mech._embedding_noise_multiplier() + 1e-9
    s0, s1 = (np.asarray(wb.s0) + mu**2 / 2) / mu, (np.asarray(wb.s1) + mu**2 / 2) / mu
    assert abs(s0.mean()) < 4 / math.sqrt(2000) and abs(s1.mean() - mu) < 4 / math.sqrt(2000)
    assert 0.9 < s0.std() < 1.1 and 0.9 < s1.std() < 1.1
