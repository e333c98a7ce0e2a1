"""dp-sgd: the accountant's calibration, the guarantee, seeded and isolated training, a model file,
an end-to-end fit on built-in digits, and the generic paths for a mechanism that releases a model (grid row, audit,
report, release CLI)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privpix.data import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.neural import dp_sgd as dps
from privpix.mechanisms.trained import sampling
from privpix.privacy.composition import SampledGaussianNoise

TINY = {"epochs": 1, "batch_size": 10}


# Every test here trains or audits a DP-SGD network.
pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


@pytest.fixture(scope="module")
def fitted(sixty):
    return get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)


def _weights(mech) -> dict[str, np.ndarray]:
    return {k: v.numpy().copy() for k, v in mech.network().state_dict().items()}


# ------------------------------------------------------------------------------------------ calibration


@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_noise_multiplier_gives_the_target_epsilon_by_the_accountant(epsilon):
    """For the MNIST benchmark's sampling (q = 256/55,000, 20 epochs), the accountant's ε for z is at most the
    target and within 0.1 % of it, a 1 % smaller z overshoots, and Google's dp-accounting RDP accountant (a second,
    independent computation of the same Poisson-sampled Gaussian composition) agrees to 3 %."""
    import dp_accounting

    q, per_epoch = sampling(55_000, 256)
    steps = 20 * per_epoch
    z = dps.noise_multiplier(epsilon, 1e-5, q, steps)
    eps = dps.epsilon_of(z, q, steps, 1e-5)
    assert eps <= epsilon and eps >= (1 - dps.TOLERANCE) * epsilon
    assert dps.epsilon_of(0.99 * z, q, steps, 1e-5) > epsilon
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps)
    assert rdp.get_epsilon(1e-5) == pytest.approx(epsilon, rel=0.03)


def test_sampling_rate_and_steps():
    assert sampling(55_000, 256) == (256 / 55_000, 215)
    assert sampling(60, 10) == (1 / 6, 6)
    with pytest.raises(ParameterError, match="batch_size"):
        sampling(50, 64)


# ------------------------------------------------------------------------------------------ the guarantee


def test_guarantee_is_central_dp_per_example_added_or_removed(fitted):
    g = fitted.privacy((28, 28, 1)).guarantee
    assert g.model == "central-dp" and g.sound and g.is_dp
    assert (g.epsilon, g.delta, g.per_image_epsilon) == (1.0, 1e-5, 1.0)
    assert "added or removed" in g.unit
    # n is in the model file, so one example replaced is the relation that holds: the guarantee states its ε, the
    # replace-one PLD of the same steps (what a ledger's PLD figure charges), above the add/remove ε and below 2ε.
    from privpix.privacy.composition import compose

    replaced, _ = compose(list(fitted.privacy((28, 28, 1)).events), 1e-5)
    assert 1.0 < replaced < 2.0
    assert f"(the model file records it): ε = {replaced:.4g} at δ = 1e-05" in " ".join(g.caveats)
    text = " ".join(g.caveats)
    for words in ("Poisson sampling as implemented by Opacus", "RDP accountant", "group privacy", "seed 0",
                  "not a CSPRNG", "checkpoint selection on private data is not covered"):  # fmt: skip
        assert words in text
    meta = fitted.meta_
    assert meta["steps"] == 6 and meta["sample_rate"] == pytest.approx(1 / 6)
    assert meta["noise_multiplier"] == pytest.approx(dps.noise_multiplier(1.0, 1e-5, 1 / 6, 6))
    # The accountant attached to the optimizer counted every step, and its ε is the claim's or below.
    assert (1 - dps.TOLERANCE) <= meta["epsilon_spent"] <= 1.0
    assert fitted.capabilities().output == "model" and fitted.capabilities().fixed_shape == (28, 28, 1)


def test_guarantee_needs_a_delta():
    with pytest.raises(ParameterError, match="delta"):
        get_mechanism("dp-sgd", epsilon=1.0).privacy((28, 28, 1))


def test_bad_input_is_refused_naming_the_parameter(sixty):
    with pytest.raises(ParameterError, match="momentum"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, momentum=1.0)
    with pytest.raises(ParameterError, match="lr_decay"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, lr_decay=1.5)
    with pytest.raises(ParameterError, match="max_grad_norm"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, max_grad_norm=0)
    with pytest.raises(ParameterError, match="n_classes"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, n_classes=5, **TINY).fit(sixty, seed=0)
    with pytest.raises(ParameterError, match="batch_size"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, batch_size=100).fit(sixty, seed=0)
    with pytest.raises(ParameterError, match="labelled"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, **TINY).fit(ImageSet(sixty.images), seed=0)
    with pytest.raises(ParameterError, match="too small"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, **TINY).fit(sixty.resized(12, 12), seed=0)


# ------------------------------------------------------------------------------------------ training


def test_same_seed_same_weights_other_seed_others_and_no_global_torch_state(fitted, sixty):
    import torch

    state = torch.get_rng_state()
    again = get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0)
    other = get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    a, b, c = _weights(fitted), _weights(again), _weights(other)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not any(np.array_equal(a[k], c[k]) for k in a)
    np.testing.assert_array_equal(fitted.predict(sixty), again.predict(sixty))


def test_noise_is_really_added():
    """With ε = 1 on 60 images the noise (σ = z·C per coordinate, divided by the expected batch size) dominates the
    clipped gradients: two seeds that share the weights' initialisation still end far apart."""
    from privpix.mechanisms import dp_sgd_training

    net = dp_sgd_training.build_network((28, 28, 1), 10, 0)
    start = {k: v.clone() for k, v in net.state_dict().items()}
    x = dp_sgd_training.to_tensor(np.zeros((60, 28, 28, 1), np.float32))
    y = dp_sgd_training.torch.zeros(60, dtype=dp_sgd_training.torch.long)
    from opacus.accountants import RDPAccountant

    moved = []
    for noise_seed in (1, 2):
        net.load_state_dict(start)
        dp_sgd_training.train_dp_sgd(net, x, y, noise_multiplier=5.0, max_grad_norm=0.1, batch_size=10.0,
                                steps_per_epoch=1, epochs=1, lr=1.0, momentum=0.0, sample_seed=0,
                                noise_seed=noise_seed, accountant=RDPAccountant())  # fmt: skip
        moved.append(net.fc2.bias.detach().numpy() - start["fc2.bias"].numpy())
    # One step: Δb = −lr·(clipped sum + N(0, (5·0.1)²))/10, so its noise part has std 0.05 per coordinate.
    assert 0.02 < float(np.std(moved[0] - moved[1])) / math.sqrt(2) < 0.1


def test_empty_poisson_batches_still_take_their_noisy_step():
    """At an expected batch of one image of 30, about a third of the batches are empty; each is still a noise-only
    step that the optimizer takes and the accountant counts."""
    from opacus.accountants import RDPAccountant

    from privpix.mechanisms import dp_sgd_training

    torch = dp_sgd_training.torch
    net = dp_sgd_training.build_network((28, 28, 1), 10, 0)
    start = net.fc2.bias.detach().clone()
    x, y = dp_sgd_training.to_tensor(np.random.default_rng(0).random((30, 28, 28, 1))), torch.arange(30) % 10
    acc = RDPAccountant()
    dp_sgd_training.train_dp_sgd(net, x, y, noise_multiplier=1.0, max_grad_norm=0.1, batch_size=1.0, steps_per_epoch=30,
                            epochs=1, lr=0.1, momentum=0.0, sample_seed=0, noise_seed=0, accountant=acc)  # fmt: skip
    assert acc.history == [(1.0, 1 / 30, 30)]
    assert all(torch.isfinite(p).all() for p in net.parameters()) and not torch.equal(net.fc2.bias, start)
    assert all(not hasattr(p, "grad_sample") for p in net.parameters())  # Opacus's hooks and buffers are gone


def test_end_to_end_fit_on_built_in_digits_beats_chance(digits):
    """2,000 digits, ε = 10, 5 epochs: the released classifier is far above chance (0.1) on 1,000 other digits."""
    order = np.random.default_rng(0).permutation(len(digits))
    train, test = digits.subset(order[:2000]), digits.subset(order[2000:3000])
    m = get_mechanism("dp-sgd", epsilon=10.0, delta=1e-5, epochs=5, batch_size=64).fit(train, seed=0)
    acc = float(np.mean(m.predict(test) == test.labels))
    assert acc > 0.6, acc


# ------------------------------------------------------------------------------------------ the model file


def test_model_file_round_trip(fitted, sixty, tmp_path):
    path = fitted.save_model(tmp_path / "m.pt")
    loaded = get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, model=str(path)).fit()
    np.testing.assert_array_equal(loaded.predict(sixty), fitted.predict(sixty))
    assert loaded.get_params()["batch_size"] == 10 and loaded.capabilities().fits_on == "model-file"
    assert loaded.privacy((28, 28, 1)).guarantee == fitted.privacy((28, 28, 1)).guarantee
    with pytest.raises(ParameterError, match="trained for ε=1"):
        get_mechanism("dp-sgd", epsilon=2.0, delta=1e-5, model=str(path)).fit()
    with pytest.raises(ParameterError, match="batch_size=64 was given"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, model=str(path), batch_size=64).fit()
    with pytest.raises(ParameterError, match="model takes 28x28"):
        loaded.predict(sixty.resized(14, 14))


# ------------------------------------------------------------------------------------------ generic paths


def test_release_refuses_there_are_no_images_to_publish(fitted, sixty):
    with pytest.raises(ParameterError, match="publishes a trained model"):
        fitted.release(sixty, 0)


def test_grid_row_scores_the_models_own_predictions(fitted, sixty):
    from privpix.evaluation.runner import ROW_KEYS, evaluate_cell

    row, rel_train, rel_test = evaluate_cell(fitted, sixty, sixty, 7)
    assert rel_train is None and rel_test is None
    assert ROW_KEYS - {"dataset", "method", "repeat"} <= set(row)
    assert row["output"] == "model"
    assert row["accuracy"] == pytest.approx(float(np.mean(fitted.predict(sixty) == sixty.labels)))
    assert all(math.isnan(row[k]) for k in ("accuracy_release_all", "psnr", "ssim", "entropy"))
    assert row["guarantee"]["sound"] and row["parameters"] == fitted.get_params()


def test_neighbours_are_training_sets_one_example_apart(fitted, sixty):
    rel = fitted.neighbours()
    assert rel.dataset_level and rel.wording() == fitted.privacy((28, 28, 1)).guarantee.unit
    for pair in rel.pairs(sixty.subset(np.arange(12))):
        small, large = sorted((pair.a, pair.b), key=len)
        assert (len(small), len(large)) == (11, 12) and pair.index == 11
        np.testing.assert_array_equal(large.images[:11], small.images)  # the larger set is the smaller plus one


def test_audit_runs_gradient_canaries_at_the_fitted_models_calibration(fitted, sixty):
    from privpix.evaluation.audit import audit

    res = audit(fitted, sixty.subset(np.arange(12)), trials=400, seed=0)
    meta = fitted.meta_
    assert res.kind == "trials" and res.trials == 400 and res.verdict == "consistent" and res.refutable
    # The fitted model's own (q, T, z), not a calibration for the 12 audit images.
    assert f"z = {meta['noise_multiplier']:.4g}" in res.pair and f"{meta['steps']} steps" in res.pair
    assert res.curve.startswith("composition (PLD)") and "sampled Gaussian" in res.curve
    assert 0 <= res.audited_epsilon_lower <= 1.0 and res.claimed_epsilon == 1.0 and "added or removed" in res.unit


def test_dirac_canaries_count_sampled_steps_and_carry_the_stated_noise():
    """The white-box harness runs the real training loop: with almost no noise, a canary's gradient sum counts the
    steps that sampled it (clipping makes each exactly one unit; mean T·q, the Poisson rate), an empty coordinate
    sums to 0; with z = 1 an empty coordinate's sum is N(0, T) (variance checked by a χ² test at a two-sided
    false-alarm rate of 1e-4, fixed seeds)."""
    from scipy import stats

    from privpix.mechanisms import dp_sgd_training

    common = {"max_grad_norm": 0.1, "sample_rate": 0.2, "steps_per_epoch": 5, "epochs": 2, "sample_seed": 1,
              "noise_seed": 2}  # fmt: skip
    quiet = dp_sgd_training.dirac_canary_scores(1000, noise_multiplier=1e-5, **common)
    counts = np.round(quiet.sum1)
    np.testing.assert_allclose(quiet.sum1, counts, atol=1e-3)
    np.testing.assert_allclose(quiet.sum0, 0.0, atol=1e-3)
    assert abs(counts.mean() - 10 * 0.2) < 4 * math.sqrt(10 * 0.2 * 0.8 / 1000)
    assert quiet.s1.mean() > quiet.s0.max()  # the likelihood ratio separates every sampled canary
    noisy = dp_sgd_training.dirac_canary_scores(1000, noise_multiplier=1.0, **common)
    chi2 = float(np.sum(noisy.sum0**2) / 10)
    assert stats.chi2(1000).ppf(5e-5) < chi2 < stats.chi2(1000).isf(5e-5)


def test_white_box_audit_refutes_a_noise_multiplier_half_the_calibrated_one(sixty, monkeypatch):
    from privpix.evaluation.audit import audit

    real = dps.noise_multiplier
    monkeypatch.setattr(dps, "noise_multiplier", lambda e, d, q, t: real(e, d, q, t) / 2)
    mech = get_mechanism("dp-sgd", epsilon=2.0, delta=1e-5, epochs=3, batch_size=20)
    res = audit(mech, sixty, trials=2000, seed=0)
    assert res.verdict == "violated" and "curve" in res.refuted_by and res.curve_epsilon_lower > 2.0


def test_one_run_audit_of_the_released_model(sixty):
    from privpix.evaluation.audit.one_run import audit_one_run

    mech = get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, **TINY)
    res = audit_one_run(mech, sixty, canaries=20, seed=0)
    assert res.kind == "one-run" and res.trials == 1 and res.verdict == "consistent"
    assert "membership score" in res.statistic and "added or removed" in res.unit
    assert 0 <= res.audited_epsilon_lower < res.max_auditable_epsilon
    # 20 canaries under add/remove: the trained set is the 40 others plus the canaries drawn in.
    assert "beside 40 images" in res.pair


def test_bench_shows_a_model_only_row_audited_by_gradient_canaries(digits, sixty, tmp_path):
    from privpix.evaluation.bench import BenchConfig, run_bench

    test = digits.subset(np.arange(42, 5000, 250))
    # One full-batch step (q = 1): the same white-box audit, but the curve that sizes its trials is one Gaussian
    # instead of the composition of six sampled ones (dp-accounting's PLD of those took 8 of the test's 10 s).
    one_step = {"epochs": 1, "batch_size": 60}
    config = BenchConfig(dataset="builtin-mnist", methods=["dp-sgd"], epsilons=[1.0], seed=0,
                         params={"dp-sgd": one_step}, audit_trials=20, cnn_epochs=0, delta=1e-5)  # fmt: skip
    res = run_bench(sixty, test, config, tmp_path / "bench")
    [cell] = res["cells"]
    assert cell["output"] == "model" and "reid_best" not in cell and cell["guarantee"]["delta"] == 1e-5
    [audit] = res["audits"]
    # Audited by its white-box experiment (gradient canaries), with trials raised until ε = 1 is refutable.
    assert audit["kind"] == "trials" and audit["verdict"] == "consistent" and audit["refutable"]
    assert audit["pair"].startswith("white-box: a Dirac gradient canary")
    html = (tmp_path / "bench" / "report.html").read_text()
    assert html.count("model only: no images released") >= 3  # guarantees, utility table and its legend (at least)
    assert "white-box: a Dirac gradient canary" in html and "Samples" not in html
    config.delta = None
    with pytest.raises(ParameterError, match="delta"):
        run_bench(sixty, test, config, tmp_path / "no-delta")


def test_release_cli_points_to_privpix_fit(run, tmp_path):
    r = run("release", "--dataset", "builtin-mnist", "--method", "dp-sgd", "--epsilon", 1, "--delta", 1e-5,
            "--output", tmp_path / "out")  # fmt: skip
    assert r.exit_code == 2 and "privpix fit --method dp-sgd" in r.output
    assert not (tmp_path / "out").exists()


def test_fit_cli_writes_a_model_file(run, data_dir, sixty, tmp_path):
    out = tmp_path / "m.pt"
    r = run("fit", "--method", "dp-sgd", "--dataset", "mnist:test", "--data-dir", data_dir, "--limit", 60,
            "--epsilon", 1, "--delta", 1e-5, "--param", "epochs=1", "--param", "batch_size=10", "--output", out,
            "--seed", 3)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "DP, ε/image=1" in r.output
    m = get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, model=str(out)).fit()
    assert m.meta_["n"] == 60 and m.meta_["seed"] == 3 and m.predict(sixty).shape == (60,)


# ------------------------------------------------------------------------------------------ ScatterNet


@pytest.fixture(scope="module")
def scatter_fit(digits):
    train = digits.subset(np.arange(0, 5000, 5))  # the built-in digits are sorted by class: every fifth is balanced
    mech = get_mechanism("dp-sgd", epsilon=3.0, delta=1e-5, features="scatternet", epochs=4, batch_size=200, lr=4.0)
    return mech.fit(train, seed=0)


def test_scatternet_features_train_a_linear_head_far_above_chance(scatter_fit, digits):
    """Tramèr & Boneh's ScatterNet + linear on 1,000 built-in digits at ε = 3: the fixed scattering transform (81 ×
    7 × 7 coefficients) and a dense layer trained with DP-SGD. Far above chance (0.1) on 1,000 other digits."""
    from privpix.mechanisms import dp_sgd_training

    net = scatter_fit.network()
    assert isinstance(net, dp_sgd_training.ScatterNetLinear)
    assert set(net.state_dict()) == {"head.2.weight", "head.2.bias"}  # only the dense layer: the wavelets are fixed
    test = digits.subset(np.arange(1, 5000, 5))
    assert np.mean(scatter_fit.predict(test) == test.labels) > 0.7
    assert scatter_fit.meta_["features"] == "scatternet"
    assert isinstance(scatter_fit.privacy((28, 28, 1)).events[0], SampledGaussianNoise)


def test_scatternet_model_file_round_trip(scatter_fit, digits, tmp_path):
    path = scatter_fit.save_model(tmp_path / "s.pt")
    loaded = get_mechanism("dp-sgd", epsilon=3.0, delta=1e-5, model=str(path)).fit()
    assert loaded.features == "scatternet" and loaded.batch_size == 200  # the file's training parameters
    imgs = digits.subset(np.arange(2, 5000, 100))
    np.testing.assert_array_equal(loaded.predict(imgs), scatter_fit.predict(imgs))
    np.testing.assert_allclose(loaded.membership_score(imgs), scatter_fit.membership_score(imgs), rtol=1e-5)


def test_scatternet_refuses_sizes_the_transform_cannot_take(digits):
    with pytest.raises(ParameterError, match="divisible by 4"):
        get_mechanism("dp-sgd", epsilon=3.0, delta=1e-5, features="scatternet", **TINY).fit(
            digits.subset(np.arange(60)).resized(30, 30), seed=0
        )
