"""`privpix report FOLDER`: the one-page HTML statement of a release, from the same Jinja2 template system as the
bench's report: the guarantee that holds, its caveats, the noise, the cost, whether the files still match the
manifest, and released images; rendered in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

import privpix
from privpix.data import ImageSet
from privpix.mechanisms import get_mechanism


@pytest.fixture
def release(tmp_path):
    images = ImageSet(np.random.default_rng(0).integers(0, 256, (10, 8, 8, 3), dtype=np.uint8))
    mech = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="image")
    privpix.release(mech, images, tmp_path / "rel", ledger=tmp_path / "ledger.json", budget=4.0)
    return tmp_path / "rel"


def test_the_statement_says_what_holds_what_it_cost_and_that_the_files_match(run, release):
    r = run("report", release)
    assert r.exit_code == 0, r.output
    page = (release.parent / "rel.html").read_text()
    assert "Differential privacy, per image: ε = 1, δ = 0" in page
    assert "ε = 3 remains" in page and "<span class='good'>yes</span>" in page
    # Both figures, each with what it assumes: the ledger's rule (pure ε, δ = 0) and the PLD composition.
    assert "spent ε = 1 at δ = 0 of a budget of ε = 4" in page and "by basic composition" in page
    assert "holds even if each ε was chosen after seeing earlier releases" in page
    assert "by dp-accounting PLD" in page and "holds only if no ε was chosen after seeing an earlier release" in page
    assert "exact samplers" in page and page.count("<li>") >= 1 and "data:image/png;base64," in page
    assert str(release.parent) not in page  # the folder is named, never its path
    # A file changed after the release: the statement says the folder no longer matches, and shows no image.
    png = next(release.glob("*.png"))
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(png)
    r = run("report", release, "--output", release.parent / "after.html")
    after = (release.parent / "after.html").read_text()
    assert "<span class='bad'>NO</span>" in after and "data:image/png" not in after
    r = run("report", release, "--output", release / "inside.html")
    assert r.exit_code == 2 and "inside the release folder" in r.output and not (release / "inside.html").exists()
    r = run("report", release.parent)
    assert r.exit_code == 2 and "no privpix release" in r.output


@pytest.mark.integration
def test_the_statement_renders_in_headless_chromium(run, release, tmp_path):
    from test_bench import CHROMIUM_FLAGS

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian package 'chromium'; `make test` installs it as root)")
    assert run("report", release).exit_code == 0
    url = (release.parent / "rel.html").resolve().as_uri()
    shot = tmp_path / "shot.png"
    common = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=900,1200", url], capture_output=True, timeout=120)
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.shape == (1200, 900, 3) and pixels.std() > 20  # text, a table and images, not a blank page
    green = (pixels[..., 1] > 80) & (pixels[..., 0] < 60) & (pixels[..., 2] < 60)
    assert green.sum() > 200  # the guarantee's line, in the colour of a sound claim
