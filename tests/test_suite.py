"""The suite's own promises: derandomized property tests, marked data tests, and a loud failure when
the data sets are missing."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings


def test_property_tests_are_derandomized():
    if os.environ.get("HYPOTHESIS_PROFILE", "privpix") == "privpix":
        assert settings.default.derandomize and settings.default.database is None


def test_a_test_that_reads_the_data_sets_is_marked_data(request, data_dir):
    assert request.node.get_closest_marker("data") is not None


@pytest.mark.integration
def test_missing_data_sets_fail_loudly_and_name_the_way_out(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        textwrap.dedent("""
        def test_reads(data_dir):
            assert data_dir
    """)
    )
    conftest = os.path.join(os.path.dirname(__file__), "conftest.py")
    (tmp_path / "conftest.py").write_text(open(conftest, encoding="utf-8").read())
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    data: reads the data sets\n")
    env = {**os.environ, "PRIVPIX_DATA": str(tmp_path / "no-such-folder")}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(probe)]
    r = subprocess.run([*run, "--rootdir", str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 1 and "1 error" in r.stdout, r.stdout  # the fixture fails: an error, not a skip
    assert "real datasets not available" in r.stdout and "-m 'not data'" in r.stdout
    r = subprocess.run([*run, "-m", "not data"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 5 and "1 deselected" in r.stdout, r.stdout  # 5: nothing left to run, nothing failed


README = Path(__file__).parents[1] / "README.md"


def _readme_blocks(lang: str) -> list[str]:
    import re

    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_the_readme_is_a_short_product_page_whose_quick_start_is_what_ci_runs():
    """Every code block of the README runs in a test: the quick start's two commands are the Makefile's targets and
    `make test` is exactly what CI runs (running them here would run the suite inside itself); the command-line
    flow and the Python example run below."""
    root = README.parent
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert "issue " not in text.lower() and "paper 00" not in text
    blocks = _readme_blocks("bash")
    assert len(blocks) == 2 and len(_readme_blocks("python")) == 1
    quick = [line.split("#")[0].strip() for line in blocks[0].strip().splitlines()]
    assert quick == ["make demo", "make test"]
    assert (root / ".ci" / "run").read_text().strip().splitlines()[-1] == "make test"
    makefile = (root / "Makefile").read_text()
    assert "\ndemo: $(STAMP)" in makefile and "\ntest:\n" in makefile
    # The first screen says which method for which data.
    assert text.index("## Which method for my data") < text.index("## Publish a folder of faces")


@pytest.mark.slow(seconds=12)
@pytest.mark.integration
def test_the_readme_command_line_flow_runs_as_written(data_dir, tmp_path):
    """The README's face-folder flow, as written, on a folder of 120 real faces (CelebA test split, one
    sub-folder per class): the release, its verification and the ledger it charged once."""
    from PIL import Image

    from privpix.data import load_dataset
    from privpix.privacy.accounting import PrivacyLedger

    faces = load_dataset("celeba:test", data_dir, pick=lambda n: np.arange(120))  # decodes these 120 only
    for i in range(120):
        cls = tmp_path / "faces" / ("male" if faces.attributes["Male"][i] else "female")
        cls.mkdir(parents=True, exist_ok=True)
        Image.fromarray(faces.images[i]).save(cls / f"{i}.jpg")
    env = {**os.environ, "PRIVPIX_DATA": str(data_dir),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
    flow = _readme_blocks("bash")[1]
    r = subprocess.run(["bash", "-e", "-c", flow], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every file matches its manifest" in r.stdout and (tmp_path / "release.html").is_file()
    manifest = json.loads((tmp_path / "release" / "manifest.json").read_text())
    assert manifest["guarantee"]["per_image_epsilon"] == 1.0 and manifest["guarantee"]["sound"]
    (entry,) = PrivacyLedger.load(tmp_path / "ledger.json").entries
    assert entry.status == "charged" and entry.epsilon == 1.0


@pytest.mark.slow
def test_the_readme_python_example_runs_as_written(monkeypatch, capsys, tmp_path):
    """The README's Python example, as written, in an empty folder: the fit charged once, the release from its
    model file not at all, the per-image release once."""
    from privpix.privacy.accounting import PrivacyLedger

    (code,) = _readme_blocks("python")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    book = PrivacyLedger.load(tmp_path / "ledger.json")
    assert [(e.kind, e.status) for e in book.entries] == [("fit", "charged"), ("release", "charged")]
    synthetic = json.loads((tmp_path / "synthetic" / "manifest.json").read_text())
    assert synthetic["ledger"]["charge"].startswith("none: post-processing of the DP fit charged as entry 1")
    assert scope["manifest"]["ledger"]["charge"] == "entry 2"
    assert "Spend(" in capsys.readouterr().out


@pytest.mark.integration
def test_the_package_exports_the_user_api_and_imports_light():
    code = (
        _none_imported("privpix", ("torch", "sklearn", "scipy")) + "for name in privpix.__all__:\n"
        "    assert getattr(privpix, name) is not None, name\n"
        "from privpix import audit, get_mechanism, load_dataset, release\n"
        "from privpix.publishing.release import release_to_dir\n"
        "assert release is release_to_dir and callable(audit) and callable(load_dataset)\n"
        "assert get_mechanism('dp-pix', epsilon=1).name == 'dp-pix'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    import privpix

    assert (Path(privpix.__file__).parent / "py.typed").is_file()


@pytest.mark.integration
def test_loading_every_mechanism_imports_no_heavy_module_a_release_worker_does_not_need():
    """Every command and every release worker imports privpix.mechanisms (the registry loads every mechanism
    module) before its first shard: serial time of every parallel release. The libraries a few
    mechanisms need (scipy.optimize for SRA/ESRA, scipy.ndimage for the filters, scipy.linalg for DCA, torch for the
    networks, pandas and pyarrow for records and Parquet) are imported when they are used, not here."""
    late = ("scipy.optimize", "scipy.ndimage", "scipy.linalg", "torch", "sklearn", "pandas", "pyarrow")
    code = _none_imported("privpix.mechanisms, privpix.publishing.shards", late)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _none_imported(modules: str, heavy: tuple[str, ...]) -> str:
    """Python code that imports ``modules`` in a fresh process and fails naming any of ``heavy`` that came along."""
    return f"import sys, {modules}\nheavy = [m for m in {heavy!r} if m in sys.modules]\nassert not heavy, heavy\n"
