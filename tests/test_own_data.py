"""Measure on your own data: `evaluate`, `bench`, `audit` and `ledger check` take `--input DIR` as `release` does,
so a data owner gets the report and "what should I use at my budget?" for their own folder. The folder's path and
file names never reach what the commands write."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from privpix.data import ImageSet
from privpix.data.pairs import INPUT_PAIR, load_pair
from privpix.errors import ParameterError
from privpix.privacy.accounting import PrivacyLedger

BOUND = ["--param", "sensitivity=bound", "--param", "unit=image"]


def _folder(root, n=24, seed=0):
    """``n`` small grey images in two class folders, named like people."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        cls = root / ("a" if i % 2 else "b")
        cls.mkdir(parents=True, exist_ok=True)
        base = 60 if i % 2 else 180
        img = np.clip(base + rng.normal(0, 30, (8, 8)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(cls / f"Person_Name_{i:04d}.png")
    return root


def test_a_folder_splits_in_two_halves_within_each_class(tmp_path):
    root = _folder(tmp_path / "own", n=25)
    train, test = load_pair(None, input_dir=root, seed=3)
    assert isinstance(train, ImageSet) and len(train) + len(test) == 25 and len(train) == 13
    for half in (train, test):
        assert set(half.labels.tolist()) == {0, 1} and half.source == INPUT_PAIR
    assert not set(train.image_names().tolist()) & set(test.image_names().tolist())
    again, _ = load_pair(None, input_dir=root, seed=3)
    assert np.array_equal(again.images, train.images)  # the same seed, the same split
    other, _ = load_pair(None, input_dir=root, seed=4)
    assert not np.array_equal(other.images, train.images)
    with pytest.raises(ParameterError, match="exactly one of --dataset NAME and --input DIR"):
        load_pair("orl", input_dir=root)


def test_evaluate_on_your_own_folder(run, tmp_path):
    root = _folder(tmp_path / "own")
    out = tmp_path / "rows.json"
    r = run("evaluate", "--input", root, "--method", "pixel-laplace", *BOUND, "--epsilon", "1,10", "--json", out, "-q")
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())
    assert len(rows) == 2 and {row["dataset"] for row in rows} == {INPUT_PAIR}
    assert str(tmp_path) not in out.read_text() and "Person_Name" not in out.read_text()


def test_audit_and_ledger_check_on_your_own_folder(run, tmp_path):
    root = _folder(tmp_path / "own")
    out = tmp_path / "audit.json"
    r = run("audit", "--input", root, "--method", "pixel-laplace", *BOUND, "--epsilon", "1", "--trials", "100",
            "--images", "8", "--json", out, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["claimed_epsilon"] == 1.0 and str(tmp_path) not in out.read_text()
    ledger = tmp_path / "ledger.json"
    PrivacyLedger(1.5).save(ledger)
    r = run("ledger", "check", ledger, "--input", root, "--method", "pixel-laplace", *BOUND, "--epsilon", "1")
    assert r.exit_code == 0 and r.output.startswith("yes:"), r.output
    r = run("ledger", "check", ledger, "--input", root, "--method", "pixel-laplace", *BOUND, "--epsilon", "2")
    assert r.exit_code == 1 and r.output.startswith("no:"), r.output
    r = run("ledger", "check", ledger, "--input", root, "--dataset", "orl", "--method", "pixel-laplace", *BOUND,
            "--epsilon", "1")  # fmt: skip
    assert r.exit_code == 2 and "not both" in r.output


@pytest.mark.slow
def test_bench_on_your_own_folder_answers_what_to_use(run, tmp_path):
    root = _folder(tmp_path / "own", n=32)
    out = tmp_path / "bench"
    r = run("bench", "--input", root, "--methods", "pixel-laplace[sensitivity=bound,unit=image],dp-pix",
            "--epsilon", "1,10", "--audit-trials", "20", "--audit-max-trials", "20", "--cnn-epochs", "0",
            "--workers", "1", "--output", out, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert (out / "report.html").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["dataset"] == INPUT_PAIR
    for f in out.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".csv", ".html"):
            text = f.read_text(errors="replace")
            assert str(tmp_path) not in text and "Person_Name" not in text, f
    r = run("bench", "--methods", "dp-pix", "--output", tmp_path / "b2", "-q")
    assert r.exit_code == 2 and "exactly one of --dataset NAME and --input DIR" in r.output
