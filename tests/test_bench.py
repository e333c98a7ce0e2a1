"""`privpix bench`: one resumable run, tidy results, and a report that renders in a real browser."""

import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import strict_loads
from privpix.bench import BenchConfig, run_bench
from privpix.data import load_dataset
from privpix.errors import ParameterError

METHODS = ["pixel-laplace", "dp-pix[b=2]", "gaussian-blur"]

# Every test here runs the bench or reads its output.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data():
    d = load_dataset("builtin-mnist:train")
    idx = np.random.default_rng(0).permutation(len(d))
    return d.subset(idx[:120]).resized(14, 14), d.subset(idx[120:200]).resized(14, 14)


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory, data):
    out = tmp_path_factory.mktemp("bench")
    cfg = BenchConfig(dataset="builtin-mnist", methods=METHODS, epsilons=[1.0], audit_trials=200, cnn_epochs=1)
    run_bench(*data, cfg, out)
    return out, cfg


def test_bench_writes_tidy_results(bench_dir):
    out, _ = bench_dir
    for name in ("config.json", "cells.jsonl", "audits.jsonl", "results.csv", "results.json", "report.html"):
        assert (out / name).is_file(), name
    df = pd.read_csv(out / "results.csv")
    assert sorted(df["method"]) == sorted(METHODS)
    for col in ("accuracy", "ssim", "reid_best", "attr_strong", "mia_dcr_auc", "mia_loss_auc", "recon_ridge_psnr",
                "recon_cnn_psnr", "guarantee_sound", "cell_seconds"):  # fmt: skip
        assert col in df.columns and df[col].notna().all(), col
    # Strict JSON (issue 30): the audits hold NaN bounds (no curve for dp-pix, no claim for the blur), written null.
    res = strict_loads((out / "results.json").read_text())
    assert any(a["curve_epsilon_lower"] is None for a in res["audits"])
    for name in ("cells.jsonl", "audits.jsonl"):
        for line in (out / name).read_text().splitlines():
            strict_loads(line)
    verdicts = {a["method"]: a["verdict"] for a in res["audits"]}
    assert verdicts == {"pixel-laplace": "violated", "dp-pix[b=2]": "consistent", "gaussian-blur": "no-claim"}
    assert res["environment"]["numpy"] == np.__version__
    # Every table scrolls inside the page (the attack table overflowed a 1,400 px window).
    page = (out / "report.html").read_text()
    assert page.count("<table>") == page.count("<div class='wide'><table>") > 3


def test_bench_resumes_and_extends(bench_dir, data):
    out, cfg = bench_dir
    before = (out / "cells.jsonl").read_text()
    seen = []
    run_bench(*data, cfg, out, progress=seen.append)
    assert seen == [] and (out / "cells.jsonl").read_text() == before  # nothing recomputed
    # A torn last line (a run killed mid-write) is dropped, and only that cell is redone.
    lines = before.splitlines()
    (out / "cells.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    run_bench(*data, cfg, out, progress=seen.append)
    assert len(seen) == 1 and len((out / "cells.jsonl").read_text().splitlines()) == len(lines)


def test_bench_refuses_a_different_configuration(bench_dir, data):
    out, cfg = bench_dir
    other = BenchConfig(**{**cfg.__dict__, "seed": 7})
    with pytest.raises(ParameterError, match="seed"):
        run_bench(*data, other, out)


def test_bench_cli(run, tmp_path):
    out = tmp_path / "b"
    res = run("bench", "--dataset", "builtin-mnist", "--methods", "pixel-laplace[sensitivity=bound],sra",
              "--epsilon", "1", "--limit", 60, "--size", "12x12", "--audit-trials", 100, "--cnn-epochs", 0,
              "--output", out)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "claimed versus audited" in res.output and "violated" in res.output
    assert (out / "report.html").is_file()
    res = run("bench", "--dataset", "builtin-mnist", "--methods", "nope", "--output", out)
    assert res.exit_code == 2


CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.mark.integration
def test_report_renders_in_headless_chromium(bench_dir, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian package 'chromium'; `make test` installs it as root)")
    from PIL import Image

    out, _ = bench_dir
    url = (out / "report.html").resolve().as_uri()
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert "claimed versus audited" in dom and "violated" in dom
    assert dom.count("<img") >= 6 and "data:image/png;base64," in dom
    shot = tmp_path / "shot.png"
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1200,1600", url], capture_output=True, timeout=120)
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.shape == (1600, 1200)
    assert pixels.std() > 20  # text and tables, not a blank page


def test_outputs_get_ordinary_file_modes(bench_dir):
    import os

    out, _ = bench_dir
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "report.html").stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_larger_fitting_set_must_match_the_config(data, tmp_path):
    train, test = data
    cfg = BenchConfig(dataset="builtin-mnist", methods=["gaussian-blur"], epsilons=[1.0], fit_images=500)
    with pytest.raises(ParameterError, match="fit_images"):
        run_bench(train, test, cfg, tmp_path / "a")  # no fit_train given
    with pytest.raises(ParameterError, match="fit_images"):
        run_bench(train, test, cfg, tmp_path / "b", fit_train=train)  # 120 images, not 500
