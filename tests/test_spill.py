"""Releases of millions of images list their files and images without holding the lists: the
sorted spill, the streamed manifest, the commit journal that points to a staged list, and memory that stays flat."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privpix import spill, strict_json
from privpix.errors import DataError
from privpix.publishing import staging
from privpix.publishing.staging import FILE_LIST, JOURNAL, MANIFEST, ReleaseWriter, manifest_chunks, recover
from privpix.spill import SortedSpill


def _words(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    alphabet = [*"abcdefghij/é_.", "\udcff"]  # a lone surrogate: a name decoded with surrogateescape
    return ["".join(rng.choice(alphabet, rng.integers(0, 8))) for _ in range(n)]


@pytest.mark.parametrize("run, fan_in", [(1, 2), (7, 3), (1000, 256)])
def test_a_spill_reads_back_everything_sorted_and_stable(tmp_path, monkeypatch, run, fan_in):
    monkeypatch.setattr(spill, "FAN_IN", fan_in)  # few runs per merge: the multi-pass merge runs too
    words = _words(500, seed=run)
    s = SortedSpill(tmp_path / "s", key=lambda item: item[0], decode=tuple, run=run)
    s.extend((w, i) for i, w in enumerate(words))
    # Stable: equal names keep their order of arrival (the second field), as sorted() keeps it.
    expected = sorted(((w, i) for i, w in enumerate(words)), key=lambda item: item[0])
    assert len(s) == 500 and list(s) == expected and list(s) == expected  # read twice: the same
    assert (tmp_path / "s").is_dir() == (run < 500)  # a list that fits in one run never touches the disk
    s.discard()
    assert not (tmp_path / "s").exists() and list(s) == [] and len(s) == 0


def test_a_spill_refuses_an_empty_run(tmp_path):
    with pytest.raises(ValueError, match="run must be >= 1"):
        SortedSpill(tmp_path, key=str, run=0)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_the_streamed_manifest_is_the_one_json_dumps_writes(n):
    """Byte for byte what strict_json.dumps(indent=2) gives, so verify and every reader see the same file; names
    that need escaping (quotes, non-ASCII, control characters) included."""
    names = ['a"b', "é/x.png", "tab\there", "c.png", "\u2028"][:n]
    files = [(name, f"{i:064x}") for i, name in enumerate(names)]
    manifest = {"privpix_version": "1", "images": n, "epsilon": float("inf"), "note": None}
    whole = strict_json.dumps({**manifest, "files": [{"name": a, "sha256": b} for a, b in files]}, indent=2,
                              default=None)  # fmt: skip
    assert "".join(manifest_chunks(manifest, iter(files))) == whole


def _release_of(out, names, *, kill_at=None, monkeypatch=None, force=False):
    """Stage ``names`` (a few bytes each) through a ReleaseWriter and commit; ``kill_at`` stops the commit at that
    checkpoint as a SIGKILL would (the tests in test_reliability kill real processes there)."""

    class Killed(BaseException):
        pass

    if kill_at is not None:
        monkeypatch.setattr(staging, "_checkpoint", lambda point: (_ for _ in ()).throw(Killed()) if point ==
                            kill_at else None)  # fmt: skip
    try:
        with ReleaseWriter(out, force=force) as writer:
            for name in names:
                writer.add(name, name.encode())
            return writer.commit({"privpix_version": "1", "images": len(names)})
    except Killed:
        return None


def test_a_commit_killed_after_its_journal_is_finished_from_the_staged_list(tmp_path, monkeypatch):
    out = tmp_path / "out"
    names = [f"d{i % 3}/{i:03d}.png" for i in range(40)]
    assert _release_of(out, names, kill_at="journal", monkeypatch=monkeypatch) is None
    journal = json.loads((out / JOURNAL).read_text())
    # The journal points to the staged list by its digest instead of holding every name.
    assert journal["add"]["list"] == FILE_LIST and journal["add"]["count"] == 40
    monkeypatch.undo()
    recover(out)
    manifest = json.loads((out / MANIFEST).read_text())
    assert [f["name"] for f in manifest["files"]] == sorted(names)
    assert all((out / n).read_bytes() == n.encode() for n in names) and not (out / JOURNAL).exists()
    assert staging.verify_manifest(out) == []


@pytest.mark.parametrize("tamper", ["list", "manifest", "name"])
def test_a_journal_whose_staged_list_or_manifest_changed_touches_nothing(tmp_path, monkeypatch, tamper):
    out = tmp_path / "out"
    _release_of(out, ["keep.png"])
    _release_of(out, ["a.png", "b.png"], kill_at="journal", monkeypatch=monkeypatch, force=True)
    monkeypatch.undo()
    journal = json.loads((out / JOURNAL).read_text())
    stage = out / journal["staging"]
    if tamper == "list":
        with open(stage / FILE_LIST, "a") as fh:
            fh.write(json.dumps(["keep.png", "0" * 64]) + "\n")
    elif tamper == "manifest":
        (stage / MANIFEST).write_text((stage / MANIFEST).read_text().replace('"images": 2', '"images": 3'))
    else:
        journal["add"]["list"] = "../keep.png"
        (out / JOURNAL).write_text(json.dumps(journal))
    with pytest.raises(DataError, match=r"file list of privpix's|does not match the staged manifest"):
        recover(out)
    assert (out / "keep.png").read_bytes() == b"keep.png" and not (out / "a.png").exists()


_COMMIT_PEAKS = """
import json, sys, tracemalloc
from pathlib import Path
from privpix import spill
from privpix.publishing.staging import ReleaseWriter

spill.RUN = 200
folder = Path(sys.argv[1])

def peak(n, name, traced=True):
    if traced:
        tracemalloc.start()
    with ReleaseWriter(folder / name) as writer:
        for i in range(n):  # as workers' files: registered, not written (the commit moves what exists)
            writer.adopt(f"c{i % 7}/{i * 2654435761 % 2**32:08x}.png", f"{i:064x}", synced=True)
        writer.commit({"privpix_version": "1", "images": n})
    if not traced:
        return 0.0
    top = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return top / 2**20

peak(8_000, "warm", traced=False)  # the interpreter's own tables grown once, as in a long release
print(json.dumps([peak(2_000, "out2000"), peak(8_000, "out8000")]))
"""


@pytest.mark.slow
@pytest.mark.integration
def test_the_commits_memory_is_flat_in_the_number_of_files(tmp_path):
    """Adopting and committing 8,000 files costs about what 2,000 cost (one run of the spill, here 200 entries,
    is held): the peak grows by less than 1.1 MB (0.70 MB measured), where a spill that kept every entry in memory
    grows it by 1.5 MB, and the list, its manifest text and the journal's names grew with the release before (5.8
    and 20.6 MB traced for 4,000 and 16,000 files). Measured in a fresh interpreter: tracemalloc counts every
    thread's allocations, and a test worker's own tables (pathlib interns every name it parses) resize by
    megabytes at a time."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _COMMIT_PEAKS, str(tmp_path)], capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    small, large = json.loads(r.stdout.strip().splitlines()[-1])
    assert large - small < 1.1, (small, large)
    listed = json.loads((tmp_path / "out8000" / MANIFEST).read_text())["files"]
    assert len(listed) == 8_000 and listed == sorted(listed, key=lambda f: f["name"])


def _planted(out, head, entries, manifest_text=None):
    """A received folder with a planted staging folder and a new-format journal whose digests match what is
    planted (whoever plants a journal writes its digests too)."""
    import hashlib

    stage = out / ".privpix-staging-x"
    stage.mkdir(parents=True)
    lines = [json.dumps(head) + "\n", *(json.dumps(e) + "\n" for e in entries)]
    (stage / FILE_LIST).write_text("".join(lines))
    if manifest_text is None:
        pairs = [tuple(e) for e in entries if isinstance(e, list) and len(e) == 2]
        manifest_text = "".join(manifest_chunks(head, pairs))
    (stage / MANIFEST).write_text(manifest_text)
    sha = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    add = {"list": FILE_LIST, "count": len(entries), "sha256": sha(stage / FILE_LIST),
           "manifest_sha256": sha(stage / MANIFEST)}  # fmt: skip
    (out / JOURNAL).write_text(json.dumps({"staging": stage.name, "remove": [], "add": add}))
    return stage


@pytest.mark.parametrize(
    "case, match",
    [
        ("foreign manifest", "does not match the staged manifest"),
        ("not privpix", "does not start with a privpix manifest"),
        ("malformed line", "not a \\[name, sha256\\] pair"),
        ("unsorted", "not sorted and unique"),
        ("repeated", "not sorted and unique"),
        ("link", "symbolic link"),
        ("outside", "points outside the release"),
    ],
)
def test_a_planted_journal_with_matching_digests_moves_nothing_it_does_not_check(tmp_path, case, match):
    """A review's finding: the journal's digests are the planter's own, so the roll-forward checks the whole
    list before the first move, and that the staged manifest is the privpix manifest rebuilt from it."""
    out = tmp_path / "dl"
    victim = tmp_path / "victim"
    victim.mkdir()
    head = {"privpix_version": "0", "images": 2}
    entries: list = [["a.png", "0" * 64], ["b.png", "1" * 64]]
    manifest_text = None
    if case == "foreign manifest":
        manifest_text = json.dumps({"hello": "world"})
    elif case == "not privpix":
        head = {"hello": "world"}
        manifest_text = "{}"
    elif case == "malformed line":
        entries.append([1])
    elif case == "unsorted":
        entries.append(["a0.png", "2" * 64])
    elif case == "repeated":
        entries.append(["b.png", "2" * 64])
    elif case == "link":
        entries.append(["d/evil.png", "2" * 64])
    else:
        entries.append(["c/../../evil.png", "2" * 64])
    stage = _planted(out, head, entries, manifest_text)
    for name in ("a.png", "b.png"):
        (stage / name).write_bytes(b"planted")
    if case == "link":
        (stage / "d").mkdir()
        (stage / "d" / "evil.png").write_bytes(b"evil")
        (out / "d").symlink_to(victim)
    with pytest.raises(DataError, match=match):
        recover(out)
    assert not (out / "a.png").exists() and not (out / MANIFEST).exists() and list(victim.iterdir()) == []


def test_a_journal_that_lists_its_names_is_still_rolled_forward(tmp_path):
    """A commit journal in the earlier format (the names in the journal itself) left by a killed run of an earlier
    privpix is finished as before."""
    out = tmp_path / "out"
    stage = out / ".privpix-staging-old"
    (stage / "c").mkdir(parents=True)
    (stage / "c" / "a.png").write_bytes(b"a")
    (stage / MANIFEST).write_text(json.dumps({"privpix_version": "0", "files": [{"name": "c/a.png", "sha256": "0"}]}))
    (out / JOURNAL).write_text(json.dumps({"staging": stage.name, "remove": [], "add": ["c/a.png"]}))
    recover(out)
    assert (out / "c" / "a.png").read_bytes() == b"a" and not stage.exists() and not (out / JOURNAL).exists()
    assert json.loads((out / MANIFEST).read_text())["files"][0]["name"] == "c/a.png"


def test_the_source_map_from_a_spill_is_the_one_from_a_list(tmp_path, monkeypatch):
    """--source-map's rows go through a spill (runs of 3 here): the same CSV, byte for byte, as from rows held in
    a list, names that are not UTF-8 included (written losslessly, docs/security.md)."""
    from privpix.data.formats.release_layout import SPILL
    from privpix.publishing.source_map import source_rows, stage_source_map

    monkeypatch.setattr(spill, "RUN", 3)
    rows = [(f"{(i * 7919) % 101:03d}.png", f'in/\udcff{i}, "x".png') for i in range(10)]
    s = source_rows(tmp_path / "stage")
    s.extend(rows)
    a = stage_source_map(tmp_path / "a.csv", rows)
    b = stage_source_map(tmp_path / "b.csv", s)
    assert (tmp_path / "stage" / SPILL / "sources").is_dir() and a.read_bytes() == b.read_bytes()
    lines = a.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "released_name,source" and len(lines) == 11 and lines[1:] == sorted(lines[1:])
