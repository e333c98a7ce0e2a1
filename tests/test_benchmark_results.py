"""The benchmarks' results writer (benchmarks/_results.py): every committed markdown table is its
committed JSON rendered, byte for byte, so the two never drift apart; and the writer's own rules (strict JSON,
column formats, atomic writes)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import once_per_run

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))  # the benchmarks import their helpers as scripts do: `from _results import ...`

import _results  # noqa: E402
from _results import Col, Output  # noqa: E402

# Benchmarks whose results are on the writer: those that define OUTPUTS.
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if "\nOUTPUTS = " in p.read_text(encoding="utf-8"))

# Run in a fresh process (this one may hold torch from other tests): import every benchmark, render each of its
# outputs from the committed JSON and compare with the committed markdown, and list the heavy modules imported.
RENDER_ALL = """
import importlib.util, json, sys, traceback
sys.path.insert(0, sys.argv[1])
import _results
report = {"scripts": {}, "covered": []}
for path in sys.argv[2:]:
    try:
        spec = importlib.util.spec_from_file_location("bench_" + path.rsplit("/", 1)[-1][:-3], path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        outs = {}
        for out in mod.OUTPUTS:
            rel = out.md_path.relative_to(_results.RESULTS.parent).as_posix()
            report["covered"].append(rel)
            md = out.md_path.read_text(encoding="utf-8") if out.md_path.is_file() else None
            outs[rel] = "same" if _results.render(out) == md else "differs"
        report["scripts"][path] = outs
    except Exception:
        report["scripts"][path] = {"error": traceback.format_exc()}
report["heavy"] = sorted(n for n in ("torch", "opacus") if n in sys.modules)
print(json.dumps(report))
"""


def _render_all() -> dict:
    r = subprocess.run(
        [sys.executable, "-c", RENDER_ALL, str(BENCH), *map(str, SCRIPTS)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    """The fresh process's report, made once per run (2.4 CPU-s): under xdist the other workers read the first
    one's, of the same committed files."""
    folder = once_per_run(
        tmp_path_factory, "benchmark-results", lambda out: (out / "report.json").write_text(json.dumps(_render_all()))
    )
    return json.loads((folder / "report.json").read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_committed_markdown_is_the_committed_json_rendered(rendered, script):
    outs = rendered["scripts"][str(script)]
    assert "error" not in outs, outs.get("error")
    assert outs
    differ = sorted(rel for rel, v in outs.items() if v != "same")
    assert not differ, (
        f"{differ}: not the committed JSON rendered; run `python benchmarks/{script.name} {_results.RENDER_ONLY}` "
        "(or fix the render)"
    )


def test_every_committed_table_has_its_writer(rendered):
    """Each markdown file under benchmarks/results/ is some benchmark's output, rendered from its JSON."""
    committed = {p.relative_to(BENCH).as_posix() for p in (BENCH / "results").rglob("*.md")}
    assert committed <= set(rendered["covered"]), sorted(committed - set(rendered["covered"]))


def test_rendering_imports_nothing_heavy(rendered):
    """Every benchmark imports and renders without torch: the heavy imports stay in the runs."""
    assert rendered["heavy"] == []


def test_strict_json_nan_becomes_null_and_infinity_a_number():
    text = _results.dumps({"a": math.nan, "b": [math.inf, -math.inf], "c": 1.5}, indent=None)
    assert text == '{"a": null, "b": [1e999, -1e999], "c": 1.5}\n'
    back = json.loads(text)
    assert back["a"] is None and back["b"] == [math.inf, -math.inf]


def test_write_renders_what_the_json_reads_back(tmp_path):
    seen = []

    def render(res):
        seen.append(res)
        return _results.document("T", _results.table(["x"], [[res["x"]]]))

    out = Output(tmp_path / "sub" / "r", render)
    _results.write(out, {"x": math.nan, "t": (1, 2)})
    assert seen == [{"x": None, "t": [1, 2]}]  # the render sees the file's values, not the run's objects
    assert json.loads(out.json_path.read_text()) == {"x": None, "t": [1, 2]}
    assert out.md_path.read_text() == _results.render(out)
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["r.json", "r.md"]


def test_column_formats():
    cols = [Col("name"), Col("spec", ".3f"), Col("template", "`{}`"), Col("call", lambda v: f"<{v}>"), Col("n", ",")]
    text = _results.table(cols, [["a", 0.12345, "x", 1, 12345], ["bb", 2.0, "y|z", None, 7]])
    lines = text.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["name", "spec", "template", "call", "n"]
    assert [c.strip() for c in lines[2].strip("|").split("|")] == ["a", "0.123", "`x`", "<1>", "12,345"]
    assert "0.123" in lines[2] and "2.000" in lines[3] and "<None>" in lines[3]
    assert set(lines[1]) <= set("|:-")  # a pipe table's rule
    # Numbers are text once formatted: tabulate does not reparse "1.50" into 1.5.
    assert "1.50" in _results.table([Col("v", ".2f", "right")], [[1.5]]).splitlines()[2]


def test_document_layout():
    md = _results.document("Title", "| t |", None, "## Part", preamble="Ran `x`.", notes="A note.")
    assert md == "# Title\n\nRan `x`.\n\n| t |\n\n## Part\n\nA note.\n"


def test_a_failing_render_writes_nothing(tmp_path):
    out = Output(tmp_path / "r", lambda res: 1 / 0)
    out.json_path.write_text("old json")
    with pytest.raises(ZeroDivisionError):
        _results.write(out, {"x": 1})
    assert out.json_path.read_text() == "old json" and not out.md_path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_failing_write_leaves_the_old_file_and_no_partial_one(tmp_path, monkeypatch):
    out = Output(tmp_path / "r", lambda res: "# new\n")
    out.md_path.write_text("# old\n")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        _results.write(out, {"x": 1})
    assert out.md_path.read_text() == "# old\n" and not out.json_path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]  # no temporary file left behind


def test_unserializable_results_write_nothing(tmp_path):
    out = Output(tmp_path / "r", lambda res: "# t\n")
    with pytest.raises(ValueError):
        _results.write(out, {"x": "\x00privpix:+inf\x00"})  # refused by strict JSON
    assert list(tmp_path.iterdir()) == []


def test_render_only_flag(tmp_path, monkeypatch):
    out = Output(tmp_path / "r", lambda res: f"# {res['x']}\n")
    out.json_path.write_text('{"x": 3}')
    assert not _results.render_only([], out) and not out.md_path.exists()
    assert _results.render_only([_results.RENDER_ONLY], out)
    assert out.md_path.read_text() == "# 3\n"
