"""Paper 003: the autoencoder obfuscator's networks, training, f and g, the model file and the mechanism."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privpix.data import ImageSet  # noqa: E402
from privpix.errors import DataError, ParameterError  # noqa: E402
from privpix.mechanisms import get_mechanism  # noqa: E402
from privpix.mechanisms.neural.obfuscator import (  # noqa: E402
    build_obfuscator,
    load_obfuscator,
    obfuscate,
    save_obfuscator,
    train_obfuscator,
)


def test_architectures_match_tables_1_and_2():
    img = build_obfuscator("image").eval()
    with torch.no_grad():
        recon, c, r = img(torch.rand(2, 3, 64, 64))
    assert recon.shape == (2, 3, 64, 64) and c.shape == (2, 2) and r.shape == (2, 1022)
    assert torch.allclose(c.exp().sum(1), torch.ones(2), atol=1e-5)  # LogSoftmax
    assert 0 <= float(recon.min()) and float(recon.max()) <= 1  # sigmoid output
    tab = build_obfuscator("tabular", 102).eval()
    with torch.no_grad():
        recon, c, r = tab(torch.rand(3, 102))
    assert recon.shape == (3, 102) and c.shape == (3, 2) and r.shape == (3, 62)
    with pytest.raises(ParameterError, match="kind must be one of"):
        build_obfuscator("audio")


def _toy_records(n=500, seed=0):
    """Records whose first feature carries the utility label and the next ones a 'private' bit."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    priv = rng.integers(0, 2, n)
    x = rng.random((n, 20)).astype(np.float32) * 0.2
    x[:, 0] = 0.2 + 0.6 * y
    x[:, 1:4] = (0.2 + 0.6 * priv)[:, None]
    return x, y, priv


def test_training_learns_and_f_g_control_the_release(tmp_path):
    x, y, _ = _toy_records()
    net, hist = train_obfuscator("tabular", x[:400], y[:400], x[400:], y[400:], epochs=10, batch_size=32, seed=0)
    assert hist["val_ae"][-1] < hist["val_ae"][0] or min(hist["val_ae"]) < hist["val_ae"][0]
    assert max(hist["val_acc"]) > 0.9  # the classifier head learns the utility feature
    test = x[400:]
    plain = obfuscate(net, test, y[400:], sigma2=0.0, K=3000, use_f=True, seed=1)
    assert plain.shape == test.shape and 0 <= plain.min() and plain.max() <= 1
    # f writes the true utility label into the release: flipping the labels changes the output.
    flipped = obfuscate(net, test, 1 - y[400:], sigma2=0.0, K=3000, use_f=True, seed=1)
    assert np.abs(flipped - plain).mean() > 1e-3
    # g: noise changes the release, reproducibly by seed. (K = 3000, the paper's value, saturates this toy
    # decoder, so a moderate K shows g's effect.)
    calm = obfuscate(net, test, y[400:], sigma2=0.0, K=5, use_f=True, seed=2)
    noisy = [obfuscate(net, test, y[400:], sigma2=5.0, K=5, use_f=True, seed=s) for s in (2, 2, 3)]
    assert np.array_equal(noisy[0], noisy[1]) and not np.array_equal(noisy[0], noisy[2])
    assert np.abs(noisy[0] - calm).mean() > 1e-3
    with pytest.raises(ParameterError, match="f needs each record's true utility label"):
        obfuscate(net, test, None, sigma2=0.0, K=1, use_f=True, seed=0)
    path = save_obfuscator(tmp_path / "m.pt", net, {"utility": "u", "private": "p", "n_features": 20})
    again, meta = load_obfuscator(path)
    assert meta["utility"] == "u" and meta["kind"] == "tabular"
    np.testing.assert_allclose(
        obfuscate(again, test, y[400:], sigma2=0.0, K=3000, use_f=True, seed=1), plain, atol=1e-6
    )


def test_model_file_errors(tmp_path):
    with pytest.raises(DataError, match="model file not found"):
        load_obfuscator(tmp_path / "none.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"junk")
    with pytest.raises(DataError, match="not a privpix obfuscator model"):
        load_obfuscator(bad)
    with pytest.raises(ParameterError, match="--param model=FILE"):
        get_mechanism("ae-obfuscator")


def test_cli_train_and_release_on_celeba(run, data_dir, tmp_path):
    model = tmp_path / "obf.pt"
    r = run(
        "train-obfuscator",
        "--dataset",
        "celeba:train",
        "--utility",
        "Smiling",
        "--limit",
        96,
        "--epochs",
        1,
        "--batch-size",
        32,
        "--output",
        model,
        "--data-dir",
        data_dir,
        "-q",
    )
    assert r.exit_code == 0, r.output
    out = tmp_path / "rel"
    r = run(
        "release",
        "--dataset",
        "celeba:test",
        "--size",
        "64x64",
        "--method",
        "ae-obfuscator",
        "--param",
        f"model={model}",
        "--param",
        "sigma2=10",
        "--param",
        "K=3000",
        "--seed",
        0,
        "--batch-size",
        512,
        "--output",
        out,
        "--data-dir",
        data_dir,
    )
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["guarantee"]["model"] == "empirical" and m["guarantee"]["epsilon"] is None
    assert m["parameters"]["sigma2"] == 10 and len(m["files"]) > 500
    assert "empirical only" in r.output
    # Images without the utility attribute cannot use f; the error says what to do.
    gray = ImageSet(np.zeros((2, 64, 64, 3), np.uint8))
    with pytest.raises(ParameterError, match="use_f=false"):
        get_mechanism("ae-obfuscator", model=str(model)).release(gray, 0)
    rel = get_mechanism("ae-obfuscator", model=str(model), use_f=False).release(gray, 0)
    assert rel.images.images.shape == (2, 64, 64, 3)
