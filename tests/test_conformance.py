"""Every registered mechanism (built-in or from an entry point) through privpix's generic path, and the worked
example of docs/architecture.md plugged in as a third-party package."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from privpix.mechanisms import MECHANISMS
from privpix.testing.conformance import check_mechanism

DOC = Path(__file__).parents[1] / "docs" / "architecture.md"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_registered_mechanism_conforms(name, tmp_path):
    assert check_mechanism(name, tmp_path) == []


def test_sklearn_clone_rebuilds_an_unfitted_mechanism_with_the_same_parameters(digits):
    from sklearn.base import clone

    from privpix.mechanisms import get_mechanism

    mech = get_mechanism("pca-inverse", epsilon=1, d=5, batch=10)
    twin = clone(mech)
    assert type(twin) is type(mech) and twin is not mech and twin.get_params() == mech.get_params()
    fitted = get_mechanism("dp-pix", epsilon=2, b=4).fit(digits.subset(range(20)))
    assert fitted.get_params(deep=True) == clone(fitted).get_params(deep=False)


@pytest.mark.slow
def test_conformance_catches_a_broken_mechanism(tmp_path, monkeypatch):
    """The suite can fail: a mechanism whose release ignores the seed is caught, and so is one whose declared
    output is not its class's (here once fitted: the record obfuscator saying it releases images)."""
    from privpix.mechanisms import Capabilities
    from privpix.mechanisms.neural.ae import AERecordObfuscator
    from privpix.mechanisms.pixel import PixelLaplace

    monkeypatch.setattr(PixelLaplace, "_privatize_set", lambda self, images, rng: images.as_float())
    problems = check_mechanism("pixel-laplace", tmp_path)
    assert any("another seed gave the same release" in p for p in problems)

    def lies(self):
        return Capabilities(fits_on=self._fits_on(), output="images" if self.is_fitted else "records")

    monkeypatch.setattr(AERecordObfuscator, "capabilities", lies)
    problems = check_mechanism("ae-obfuscator-records", tmp_path / "records")
    assert problems and all(
        "declares output 'images', but its class is of the kinds ['records']" in p for p in problems
    )


def _example_package(root: Path) -> Path:
    """docs/architecture.md's example as package ``privpix_example``, with an installed-distribution record
    that declares its entry point (what pip writes for a package with that pyproject.toml)."""
    code = re.search(r"<!-- example: salt_pepper.py -->\n```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    pkg = root / "privpix_example"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "salt_pepper.py").write_text(code)
    info = root / "privpix_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: privpix-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[privpix.mechanisms]\nsalt-pepper = privpix_example.salt_pepper:SaltPepper\n"
    )
    return root


@pytest.mark.integration
@pytest.mark.slow
def test_worked_example_plugs_in_through_an_entry_point(tmp_path, monkeypatch):
    site = _example_package(tmp_path / "site")
    # The caller's path stays after the package: the privpix under test, not whichever one is installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(site), os.environ.get("PYTHONPATH"))))}

    def privpix(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "privpix", *args], capture_output=True, text=True, env=env, timeout=300
        )

    listed = privpix("mechanisms", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "salt-pepper" in {m["name"] for m in json.loads(listed.stdout)}
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):
        Image.fromarray(np.full((6, 5), 40 * i, np.uint8)).save(src / f"{i}.png")
    out = tmp_path / "out"
    rel = privpix("release", "--input", str(src), "--method", "salt-pepper", "--param", "amount=0.5", "--output",
                  str(out), "--seed", "0", "-q")  # fmt: skip
    assert rel.returncode == 0, rel.stderr
    assert json.loads((out / "manifest.json").read_text())["parameters"] == {"amount": 0.5}
    bad = privpix("release", "--input", str(src), "--method", "salt-pepper", "--param", "amount=2", "--output",
                  str(tmp_path / "o2"), "-q")  # fmt: skip
    assert bad.returncode == 2 and "amount must be <= 1" in bad.stderr
    # The conformance suite in this process, on the class the same entry point loads: the fresh interpreters above
    # already showed the plugin found by privpix at start-up; another one would only import privpix again.
    from privpix.mechanisms import load_plugins

    monkeypatch.syspath_prepend(str(site))
    try:
        assert load_plugins() == ["salt-pepper"]
        assert check_mechanism("salt-pepper", tmp_path / "w") == []
    finally:  # the rest of the session sees the registry, and no example package, as before
        MECHANISMS.pop("salt-pepper", None)
        for mod in [m for m in sys.modules if m.partition(".")[0] == "privpix_example"]:
            del sys.modules[mod]


@pytest.mark.integration
@pytest.mark.slow
def test_a_broken_plugin_is_skipped_with_a_warning(tmp_path):
    site = tmp_path / "site"
    info = site / "broken-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[privpix.mechanisms]\nbroken = no_such_module:Thing\n")
    r = subprocess.run(
        [sys.executable, "-m", "privpix", "mechanisms", "--json"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)}, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0 and "plugin 'broken'" in r.stderr and "skipped" in r.stderr
    assert "pixel-laplace" in r.stdout


def test_the_suite_writes_through_the_path_privpix_release_takes(tmp_path, monkeypatch):
    """The conformance suite's release folder is the sharded writer's (the command line's), so a
    fault there is a conformance failure: a manifest whose parameters are not the mechanism's is reported."""
    from privpix.publishing import shards
    from privpix.testing.conformance import check_mechanism

    assert check_mechanism("pixel-laplace", tmp_path / "ok") == []
    real = shards.release_manifest

    def wrong_parameters(mech, expect, seconds, extra):
        manifest = real(mech, expect, seconds, extra)
        manifest["parameters"] = {**manifest["parameters"], "sensitivity": "tampered"}
        return manifest

    monkeypatch.setattr(shards, "release_manifest", wrong_parameters)
    problems = check_mechanism("pixel-laplace", tmp_path / "bad")
    assert problems and all("the manifest records" in p for p in problems)
