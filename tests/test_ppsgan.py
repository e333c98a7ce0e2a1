"""Kim & Yang 2020: PPSGAN networks, noise amplifier, training, model file and the three mechanisms."""

import json
import math

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from privpix.data import ImageSet  # noqa: E402
from privpix.errors import DataError, ParameterError  # noqa: E402
from privpix.mechanisms import get_mechanism  # noqa: E402
from privpix.mechanisms.neural.ppsgan import (  # noqa: E402
    anonymize,
    approximate_sensitivity,
    attention,
    build_networks,
    latent_noise_budget,
    load_model,
    save_model,
    sigma_star,
    train_ppsgan,
)


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_network_shapes(shape):
    g, c = build_networks("ppsgan", shape, d=16, width=4, n_classes=10)
    g.eval()
    c.eval()
    x = torch.rand(3, *shape)
    with torch.no_grad():
        z = g.encode(x)
        out = g.decode(z)
        real, cls = c(out)
    assert z.shape == (3, 16) and out.shape == (3, *shape) and real.shape == (3,) and cls.shape == (3, 10)
    assert 0 <= float(out.min()) and float(out.max()) <= 1  # sigmoid
    # The paper's width 128 gives its 4096 × d dense layer.
    big, _ = build_networks("ppsgan", shape, d=128, width=128)
    assert big.encoder[1].in_features == 4096
    a, _ = build_networks("acgan", shape, d=16, width=4, n_classes=10)
    assert a.eval().sample(torch.tensor([0, 9])).shape == (2, *shape)
    with pytest.raises(ParameterError, match="28×28 or 32×32"):
        build_networks("ppsgan", (1, 64, 64))


def test_attention_rows_sum_to_one_and_amplifier_formula():
    z = torch.randn(5, 8)
    a = attention(z)
    assert a.shape == (5, 8, 8)
    torch.testing.assert_close(a.sum(2), torch.ones(5, 8))
    expected = torch.softmax(torch.outer(z[0], z[0]) / math.sqrt(8), dim=1)
    torch.testing.assert_close(a[0], expected)
    g, _ = build_networks("ppsgan", (1, 28, 28), d=8, width=4)
    g.sigma_star.fill_(0.7)
    g.gaussian.fill_(True)
    noise = g.noise(1, torch.Generator().manual_seed(3))
    out = g.amplify(z[:1], torch.Generator().manual_seed(3))
    torch.testing.assert_close(out[0], a[0] @ z[0] + (1 - a[0]) @ noise[0])  # z̃ = A z + (J − A)(α∘σ*)
    p, _ = build_networks("ppapnet", (1, 28, 28), d=8, width=4)
    p.sigma_star.fill_(0.7)
    p.gaussian.fill_(True)
    torch.testing.assert_close(p.amplify(z[:1], torch.Generator().manual_seed(3)), z[:1] + noise)


def test_sigma_star_and_noise_distributions():
    s_e = np.array([1.0, 2.0, 0.5])
    np.testing.assert_allclose(sigma_star(s_e, 0.5, 0.0), s_e / 0.5)
    np.testing.assert_allclose(sigma_star(s_e, 1.0, 1e-8), math.sqrt(2 * math.log(1.25e8)) * s_e)
    with pytest.raises(ParameterError, match="epsilon > 0"):
        sigma_star(s_e, 0.0, 0.0)
    g, _ = build_networks("ppsgan", (1, 28, 28), d=4, width=4)
    g.sigma_star.fill_(2.0)
    gen = torch.Generator().manual_seed(0)
    lap = (g.noise(20000, gen) / 2.0).numpy().ravel()  # δ = 0: α ~ Lap(0, 1)
    assert stats.kstest(lap, "laplace").pvalue > 1e-3
    g.gaussian.fill_(True)
    gau = (g.noise(20000, gen) / 2.0).numpy().ravel()  # δ > 0: α ~ N(0, 1)
    assert stats.kstest(gau, "norm").pvalue > 1e-3
    assert stats.kstest(lap, "norm").pvalue < 1e-6  # the two are told apart


def test_sensitivity_is_the_pairwise_max_without_the_pair_loop():
    g, _ = build_networks("ppsgan", (1, 28, 28), d=6, width=4)
    x = torch.rand(40, 1, 28, 28)
    s_e = approximate_sensitivity(g, x)
    with torch.no_grad():
        z = g.eval().encode(x).numpy()
    brute = np.max(np.abs(z[:, None, :] - z[None, :, :]), axis=(0, 1))
    np.testing.assert_allclose(s_e, brute, rtol=1e-5)


def _digits(n=192, seed=0):
    from privpix.data import load_dataset

    data = load_dataset("builtin-mnist")
    idx = np.random.default_rng(seed).choice(len(data), n, replace=False)
    sub = data.subset(idx)  # random order: the built-in set is sorted by class
    return sub.as_float(), sub.labels


@pytest.mark.slow
def test_tiny_training_lowers_losses_and_is_reproducible(tmp_path):
    x, y = _digits()
    kw = {
        "epsilon": 1.0,
        "delta": 0.0,
        "d": 16,
        "width": 4,
        "ae_epochs": 4,
        "epochs": 2,
        "batch_size": 32,
        "n_critic": 2,
    }
    g, hist = train_ppsgan("ppsgan", x, y, seed=1, **kw)
    assert hist["ae_mse"][-1] < hist["ae_mse"][0]  # the autoencoder pretraining learns
    assert hist["zero"][-1] < hist["ae_mse"][0]  # the zero-noise path G_e → G_d keeps reconstructing
    assert np.all(np.isfinite(hist["critic"])) and np.all(np.isfinite(hist["gen"]))
    assert float(g.sigma_star.mean()) == pytest.approx(hist["s_e_mean"] / 1.0, rel=1e-5)
    g2, _ = train_ppsgan("ppsgan", x, y, seed=1, **kw)
    a, b = anonymize(g, x[:8], seed=5), anonymize(g2, x[:8], seed=5)
    np.testing.assert_array_equal(a, b)
    assert a.shape == x[:8].shape and not np.array_equal(a, anonymize(g, x[:8], seed=6))
    # PPAPNet from the same pretrained autoencoder skips the pretraining.
    _, ph = train_ppsgan("ppapnet", x, y, seed=1, pretrained=hist["autoencoder"], **{**kw, "epochs": 0})
    assert ph["ae_mse"] == [] and ph["s_e_mean"] == pytest.approx(hist["s_e_mean"])
    path = save_model(tmp_path / "m.pt", g, {"shape": [1, 28, 28], "d": 16, "width": 4, "epsilon": 1.0, "delta": 0})
    g3, meta = load_model(path)
    np.testing.assert_allclose(anonymize(g3, x[:8], seed=5), a, atol=1e-6)
    assert meta["kind"] == "ppsgan" and meta["classes"] == list(range(10))
    with pytest.raises(DataError, match="not a privpix PPSGAN model"):
        (tmp_path / "bad.pt").write_bytes(b"x")
        load_model(tmp_path / "bad.pt")


@pytest.mark.slow
def test_authors_recipe_recomputes_sensitivity_and_trains_classifier_on_real_only():
    x, y = _digits()
    kw = {"d": 16, "width": 4, "ae_epochs": 2, "epochs": 2, "batch_size": 32, "n_critic": 1, "seed": 3}
    g, hist = train_ppsgan("ppsgan", x, y, recipe="authors", resensitize_every=5, **kw)
    steps = len(x) // 32
    # s_e is measured after pretraining and again every 5 generator steps, from the encoder as it is then.
    assert len(hist["s_e_means"]) == (2 * steps - 1) // 5
    assert float(g.sigma_star.mean()) == pytest.approx(hist["s_e_means"][-1], rel=1e-5)
    assert hist["s_e_means"][-1] != pytest.approx(hist["s_e_mean"])
    assert np.all(np.isfinite(hist["gen"])) and np.all(np.isfinite(hist["critic"]))
    # The non-saturating term −log D(x̃) is non-negative, so the authors' generator loss is too; the paper's
    # −L_d term is not.
    assert min(hist["gen"]) > 0
    _, paper = train_ppsgan("ppsgan", x, y, recipe="paper", **kw)
    assert "s_e_means" not in paper
    with pytest.raises(ParameterError, match="recipe"):
        train_ppsgan("ppsgan", x, y, recipe="tensorflow", **kw)
    with pytest.raises(ParameterError, match="resensitize_every"):
        train_ppsgan("ppsgan", x, y, recipe="authors", resensitize_every=0, **kw)


@pytest.mark.slow
def test_latent_noise_budget_scales_with_epsilon_and_sees_the_common_mode():
    x, y = _digits(256)
    kw = {"d": 16, "width": 4, "ae_epochs": 1, "epochs": 0, "batch_size": 64, "seed": 0}
    g, hist = train_ppsgan("ppsgan", x, y, epsilon=1.0, **kw)
    p, _ = train_ppsgan("ppapnet", x, y, epsilon=1.0, pretrained=hist["autoencoder"], **kw)
    b1 = latent_noise_budget(g, x, seed=4)
    g.sigma_star.mul_(10.0)  # ε = 0.1: σ* ten times larger, the same α
    b01 = latent_noise_budget(g, x, seed=4)
    assert b01["snr"] == pytest.approx(b1["snr"] / 10, rel=1e-4)  # float32 arithmetic
    assert b01["signal_spread"] == pytest.approx(b1["signal_spread"], rel=1e-9)
    # (J − A) sums the noise of all d coordinates into each: most of it is one shared offset per image,
    # whereas PPAPNet's i.i.d. noise has about 1/d of its energy there.
    bp = latent_noise_budget(p, x, seed=4)
    assert b1["common_fraction"] > 0.5 > 4 / 16 > bp["common_fraction"]
    with pytest.raises(ParameterError, match="ACGAN"):
        acgan, _ = train_ppsgan("acgan", x, y, **kw)
        latent_noise_budget(acgan, x)


@pytest.mark.slow
def test_trunk_classifier_learns_digits():
    from privpix.mechanisms.neural.ppsgan import TrunkClassifier

    x, y = _digits(600, seed=2)
    clf = TrunkClassifier(width=8, epochs=4, batch_size=32).fit(x[:500], y[:500])
    assert clf.score(x[500:], y[500:]) > 0.6  # chance 0.1
    assert clf.features(x[:3]).shape == (3, 8 * 8 * 2 * 2)


@pytest.mark.slow
def test_cli_train_and_release_all_three(run, data_dir, tmp_path):
    for kind in ("ppsgan", "ppapnet", "acgan"):
        model = tmp_path / f"{kind}.pt"
        r = run(
            "train-ppsgan", "--model", kind, "--dataset", "mnist:train", "--limit", 128, "--width", 4,
            "--latent", 16, "--ae-epochs", 1, "--epochs", 1, "--batch-size", 32, "--n-critic", 1,
            "--delta", 1e-8, "--seed", 0, "--output", model, "--data-dir", data_dir, "-q",
            *(["--recipe", "authors", "--resensitize-every", 2] if kind == "ppsgan" else []),
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        meta = load_model(model)[1]
        assert meta["classes"] == list(range(10)), meta["classes"]  # the seeded 128 hold every digit
        assert meta["recipe"] == ("authors" if kind == "ppsgan" else "paper")
        assert len(meta["history"].get("s_e_means", [])) == (1 if kind == "ppsgan" else 0)
        out = tmp_path / f"rel-{kind}"
        r = run(
            "release", "--dataset", "builtin-mnist:test", "--method", kind, "--param", f"model={model}",
            "--seed", 0, "--output", out,
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        m = json.loads((out / "manifest.json").read_text())
        g = m["guarantee"]
        assert g["model"] == "empirical" and g["epsilon"] is None and m["images"] == 2500
        assert "no formal privacy guarantee" in " ".join(g["caveats"])
    assert "noise" in " ".join(
        json.loads((tmp_path / "rel-ppsgan" / "manifest.json").read_text())["guarantee"]["caveats"]
    )
    with pytest.raises(ParameterError, match="a ppsgan model, not acgan"):
        get_mechanism("acgan", model=str(tmp_path / "ppsgan.pt")).release(ImageSet(np.zeros((1, 28, 28, 1))), 0)
    with pytest.raises(ParameterError, match="--size 28x28"):
        get_mechanism("ppsgan", model=str(tmp_path / "ppsgan.pt")).release(ImageSet(np.zeros((1, 32, 32, 1))), 0)
    with pytest.raises(ParameterError, match="need labels"):
        get_mechanism("acgan", model=str(tmp_path / "acgan.pt")).release(ImageSet(np.zeros((2, 28, 28, 1))), 0)
    with pytest.raises(ParameterError, match=r"labels \[11\] are outside the classes the model was trained on \[0, 1,"):
        get_mechanism("acgan", model=str(tmp_path / "acgan.pt")).release(
            ImageSet(np.zeros((2, 28, 28, 1)), labels=np.array([3, 11])), 0
        )


def test_a_trained_network_pickles_to_a_fresh_process():
    """A bench point fitted in a worker process sends its fitted generator back to the coordinator: the networks'
    classes are module-level (they were local to build_networks, and `bench --workers 2` failed on PPSGAN)."""
    import pickle
    import subprocess
    import sys

    gen, critic = build_networks("ppsgan", (1, 28, 28), d=8, width=4)
    code = (
        "import pickle, sys\n"
        "gen, critic = pickle.loads(sys.stdin.buffer.read())\n"
        "n = sum(p.numel() for p in gen.parameters())\n"
        "print(type(gen).__module__, type(gen).__name__, type(critic).__name__, n)"
    )
    r = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((gen, critic)), capture_output=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    module, gname, cname, n = r.stdout.decode().split()
    assert (module, gname, cname) == ("privpix.mechanisms.neural.ppsgan.networks", "Generator", "Critic")
    assert int(n) == sum(p.numel() for p in gen.parameters())
