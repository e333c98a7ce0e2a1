"""`privpix bench`: one resumable run, tidy results, and a report that renders in a real browser."""

import os
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from conftest import once_per_run, strict_loads
from privpix.data import load_dataset
from privpix.errors import ParameterError
from privpix.evaluation.bench import BenchConfig, run_bench

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
    """One bench for the run, read (never written) by the tests: test_bench_resumes_and_extends works on a copy."""
    cfg = BenchConfig(dataset="builtin-mnist", methods=METHODS, epsilons=[1.0], audit_trials=200, cnn_epochs=1)
    return once_per_run(tmp_path_factory, "bench", lambda out: run_bench(*data, cfg, out)), cfg


def test_bench_writes_tidy_results(bench_dir):
    out, _ = bench_dir
    for name in ("config.json", "cells.jsonl", "audits.jsonl", "results.csv", "results.json", "report.html"):
        assert (out / name).is_file(), name
    df = pd.read_csv(out / "results.csv")
    assert sorted(df["method"]) == sorted(METHODS)
    for col in ("accuracy", "ssim", "reid_best", "attr_strong", "mia_dcr_auc", "mia_loss_auc", "recon_ridge_psnr",
                "recon_cnn_psnr", "guarantee_sound", "cell_seconds"):  # fmt: skip
        assert col in df.columns and df[col].notna().all(), col
    # Strict JSON: the audits hold NaN bounds (no curve for dp-pix, no claim for the blur), written null.
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


def test_bench_resumes_and_extends(bench_dir, data, tmp_path):
    out, cfg = tmp_path / "bench", bench_dir[1]
    shutil.copytree(bench_dir[0], out)
    before = (out / "cells.jsonl").read_text()
    seen, reports = [], []
    with pytest.MonkeyPatch.context() as mp:
        # The report of a resumed run is rendered after the torn-line run below; here it is only asked for, so
        # that the same figures are not drawn twice (about half of this test's time).
        mp.setattr("privpix.evaluation.bench.sample_grids", lambda *args: [])
        mp.setattr("privpix.report.html.write_report", lambda path, results, grids: reports.append(results))
        run_bench(*data, cfg, out, progress=seen.append)
    assert seen == [] and (out / "cells.jsonl").read_text() == before  # nothing recomputed
    assert len(reports) == 1 and len(reports[0]["cells"]) == len(reports[0]["audits"]) == len(METHODS)
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
    # In this process: the command's options and output are tested here; a bench's points on worker processes are
    # run by test_cli.py's demo (default --workers), through the same executor.
    out = tmp_path / "b"
    res = run("bench", "--dataset", "builtin-mnist", "--methods", "pixel-laplace[sensitivity=bound],sra",
              "--epsilon", "1", "--limit", 60, "--size", "12x12", "--audit-trials", 100, "--cnn-epochs", 0,
              "--workers", 1, "--output", out)  # fmt: skip
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


def test_the_demo_fits_on_every_unscored_image_and_on_no_scored_one():
    # The demo's synthesizer learns from all the images it has, except those it is scored on.
    from privpix.data import load_pair
    from privpix.evaluation.bench import demo_fit_set

    train, test = load_pair("builtin-mnist", None, 300, 0, None, False)
    fit = demo_fit_set("builtin-mnist", test, 0)
    full_train, full_test = load_pair("builtin-mnist", None, None, 0, None, False)
    assert len(fit) == len(full_train) + len(full_test) - len(test) == 4700
    assert not np.isin(fit.names, test.names).any()
    assert np.isin(train.names, fit.names).all() and len(set(fit.names)) == len(fit)
    # Each image keeps its own label and pixels: the rows are the originals, not a shuffle of them.
    both = full_train.concat(full_test)
    at = {name: i for i, name in enumerate(both.names)}
    rows = np.array([at[name] for name in fit.names])
    assert np.array_equal(both.labels[rows], fit.labels) and np.array_equal(both.images[rows], fit.images)
    assert fit.class_names == full_train.class_names


def test_a_bench_refuses_to_fit_on_the_images_it_scores(tmp_path):
    from privpix.data import load_pair

    train, test = load_pair("builtin-mnist", None, 50, 0, None, False)
    cfg = BenchConfig(dataset="builtin-mnist", methods=["gaussian-blur"], epsilons=[1.0], fit_images=100)
    with pytest.raises(ParameterError, match="fit_train holds test images"):
        run_bench(train, test, cfg, tmp_path / "b", fit_train=train.concat(test))
    assert not (tmp_path / "b").exists()


def test_image_sets_concatenate_only_when_they_agree():
    from privpix.data.imageset import ImageSet

    a = ImageSet(np.full((2, 4, 4, 1), 255, np.uint8), labels=np.array([0, 1]), class_names=("a", "b"))
    b = ImageSet(np.ones((3, 4, 4, 1), np.float32), labels=np.array([1, 1, 0]), class_names=("a", "b"))
    ab = a.concat(b)
    # uint8 0–255 beside float [0, 1]: one scale, every pixel 1.0, not 255 beside 1.
    assert ab.images.dtype == np.float32 and np.all(ab.images == 1.0)
    assert ab.labels.tolist() == [0, 1, 1, 1, 0] and len(ab.names) == 5
    with pytest.raises(ParameterError, match="concat: images are"):
        a.concat(ImageSet(np.zeros((1, 5, 4, 1), np.uint8), labels=np.array([0]), class_names=("a", "b")))
    with pytest.raises(ParameterError, match="class names differ"):
        a.concat(ImageSet(np.zeros((1, 4, 4, 1), np.uint8), labels=np.array([0]), class_names=("x", "y")))
    with pytest.raises(ParameterError, match="labels on one set only"):
        a.concat(ImageSet(np.zeros((1, 4, 4, 1), np.uint8), class_names=("a", "b")))
