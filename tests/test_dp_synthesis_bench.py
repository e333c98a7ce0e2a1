"""benchmarks/dp_synthesis.py's protocol on tiny settings: the 11:1 split, that the synthesizer
sees only the fit part, that epoch selection never reads the test set, resume, and the aggregation."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from privpix.data import ImageSet, load_dataset

pytest.importorskip("torch")

TINY = "dp-merf[n_features=200,epochs=1,batch_size=50,width=16,channels=4]"


@pytest.fixture(scope="module")
def bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "dp_synthesis.py"
    spec = importlib.util.spec_from_file_location("dp_synthesis_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def digits() -> tuple[ImageSet, ImageSet]:
    train, test = load_dataset("builtin-mnist").split_halves()
    return train.subset(np.arange(0, 2500, 5)), test.subset(np.arange(0, 2500, 10))


def test_split_is_fixed_disjoint_and_eleven_to_one(bench):
    fit, val = bench.split_private(60000)
    assert (len(fit), len(val)) == (55000, 5000)
    assert not np.intersect1d(fit, val).size and np.array_equal(np.union1d(fit, val), np.arange(60000))
    again_fit, again_val = bench.split_private(60000)
    assert np.array_equal(fit, again_fit) and np.array_equal(val, again_val)
    # The split is the protocol's, not the run's: it does not move with anything but n.
    assert not np.array_equal(val, bench.split_private(60000, seed=bench.SPLIT_SEED + 1)[1])
    assert len(bench.split_private(3648)[1]) == 3648 // 12


@pytest.mark.slow
def test_synthesizer_sees_only_the_fit_part(bench, digits, monkeypatch):
    from privpix.mechanisms.synthesis.dp_merf import DPMERF

    private, test = digits
    fit_idx, val_idx = bench.split_private(len(private))
    seen: list[set] = []
    real_fit, real_release = DPMERF.fit, DPMERF.release

    def fit(self, data=None, *, seed=None):
        seen.append(set(data.names))
        return real_fit(self, data, seed=seed)

    def release(self, images, rng=None):
        seen.append(set(images.names))
        return real_release(self, images, rng)

    monkeypatch.setattr(DPMERF, "fit", fit)
    monkeypatch.setattr(DPMERF, "release", release)
    row = bench.run_one("builtin-mnist", TINY, 1.0, 0, private, fit_idx, val_idx, test, delta=1e-5,
                        synthetic=300, cnn_epochs=2, sklearn=False)  # fmt: skip
    val_names = set(private.names[val_idx])
    assert len(seen) == 2 and seen[0] == set(private.names[fit_idx])
    assert all(not (s & val_names) and not (s & set(test.names)) for s in seen)
    assert (row["n_fit"], row["n_val"], row["n_synthetic"]) == (len(fit_idx), len(val_idx), 300)
    assert row["fit_seconds"] >= row["train_seconds"] >= 0 and row["embed_seconds"] is not None
    assert set(row["cnn"]["accuracy"]) == {"val", "synthetic", "last"}


def test_selection_never_reads_the_test_set(bench, digits):
    private, test = digits
    fit_idx, val_idx = bench.split_private(len(private))
    # Real digits stand in for synthetic ones: the selection logic does not care where they came from.
    synth, val = private.subset(fit_idx), private.subset(val_idx)
    a = bench.train_cnn(synth, val, test, 10, 3, epochs=3)
    scrambled = test.subset(np.arange(len(test)))
    scrambled.labels = np.random.default_rng(0).permutation(scrambled.labels)
    b = bench.train_cnn(synth, val, scrambled, 10, 3, epochs=3)
    assert a["epoch"] == b["epoch"] and a["val_curve"] == b["val_curve"]
    assert a["epoch"]["val"] == bench.select_epoch(a["val_curve"])
    assert a["epoch"]["synthetic"] == bench.select_epoch(a["synthetic_curve"])
    assert a["epoch"]["last"] == 3
    assert bench.select_epoch([0.2, 0.5, 0.5, 0.1]) == 2


def fake_synthesizer(spec, epsilon, delta, private_fit, count, seed, k):
    """Real fit images with their labels, standing in for a fitted synthesizer (seconds, not minutes)."""
    idx = np.random.default_rng(seed).integers(0, len(private_fit), count)
    images = ImageSet(private_fit.as_float()[idx], labels=private_fit.labels[idx])
    info = {"parameters": {}, "fit_seconds": 0.0, "embed_seconds": 0.0, "train_seconds": 0.0,
            "generate_seconds": 0.0, "fit_generate_seconds": 0.0, "guarantee": "none (test stand-in)"}  # fmt: skip
    return images, info


def test_resume_skips_finished_runs(bench, digits, monkeypatch, tmp_path):
    private, test = digits
    monkeypatch.setattr(bench, "load_private", lambda dataset, data_dir=None: (private, test))
    calls: list[tuple] = []
    real = bench.run_one

    def run_one(dataset, spec, eps, seed, *args, **kw):
        calls.append((spec, eps, seed))
        return real(dataset, spec, eps, seed, *args, **{**kw, "synthesizer": fake_synthesizer})

    monkeypatch.setattr(bench, "run_one", run_one)
    argv = ["--dataset", "builtin-mnist", "--methods", TINY, "--epsilons", "1", "--seeds", "0,1",
            "--synthetic", "200", "--cnn-epochs", "1", "--no-sklearn", "--out", str(tmp_path / "p")]  # fmt: skip
    bench.main(argv)
    assert calls == [(TINY, 1.0, 0), (TINY, 1.0, 1)]
    jsonl = tmp_path / "p" / "runs.jsonl"
    # A run killed mid-write leaves a torn line: it is ignored, not a crash.
    with jsonl.open("a") as fh:
        fh.write('{"dataset": "builtin-mnist", "meth')
    bench.main([*argv[:7], "0,1,2", *argv[8:]])
    assert calls[2:] == [(TINY, 1.0, 2)]
    result = json.loads((tmp_path / "p.json").read_text())
    assert result["summary"][0]["seeds"] == [0, 1, 2] and (tmp_path / "p.md").exists()
    assert list((tmp_path / "p").glob("builtin-mnist_*_eps1.png"))


def test_aggregation_mean_and_sample_std(bench):
    def row(seed: int, val: float, mlp: float, n_classifier: int = 10000) -> dict:
        return {"dataset": "mnist", "method": "dp-merf", "epsilon": 1.0, "seed": seed, "n_synthetic": 60000,
                "n_classifier": n_classifier, "cnn": {"accuracy": {"val": val, "synthetic": 0.5, "last": 0.4}},
                "sklearn": {"accuracy": {"mlp": mlp, "logreg": 0.7}}}  # fmt: skip

    rows = [row(0, 0.80, 0.81), row(1, 0.84, 0.79), row(2, 0.82, 0.83)]
    # Runs whose classifiers saw another number of synthetic images are another cell, never pooled.
    other = bench.aggregate([*rows, row(0, 0.99, 0.99, n_classifier=60000)])
    assert {s["n_classifier"] for s in other} == {10000, 60000}
    assert [s["mean"] for s in other if s["n_classifier"] == 60000 and s["selection"] == "val"] == [0.99]
    out = {(s["classifier"], s["selection"]): s for s in bench.aggregate(rows)}
    assert out[("cnn", "val")]["mean"] == pytest.approx(0.82)
    assert out[("cnn", "val")]["std"] == pytest.approx(np.std([0.80, 0.84, 0.82], ddof=1), abs=1e-4)
    assert out[("mlp", "none")]["std"] == pytest.approx(0.02, abs=1e-4)
    assert out[("logreg", "none")]["std"] == 0.0 and out[("cnn", "val")]["seeds"] == [0, 1, 2]
    assert out[("cnn", "val")]["target"] == 0.80
    assert bench.aggregate(rows[:1])[0]["std"] is None


def test_method_specs(bench):
    assert bench.split_methods("dp-merf[a=1,b=2],dp-hp;x") == ["dp-merf[a=1,b=2]", "dp-hp", "x"]
    assert bench.method_params("dp-merf", 2) == {"n_classes": 2}
    assert bench.method_params("dp-merf[n_classes=10]", 2) == {}
