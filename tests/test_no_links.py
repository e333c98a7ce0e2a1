"""NoLinks, the commit's check that a name stays inside its folder and passes through no symbolic link: the same
verdicts and paths as the part-by-part check it replaced, links refused at any depth, each directory checked once."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privpix.data.formats.release_layout import safe_name
from privpix.errors import DataError
from privpix.publishing.staging import NoLinks


def _part_by_part(out: Path, name, where: Path) -> Path:
    """The check NoLinks replaced (privpix before 2026-11-27), kept here as the reference."""
    p = out
    for part in PurePosixPath(safe_name(name, where)).parts:
        p = p / part
        if p.is_symlink():
            raise DataError(f"{where}: {name!r} passes through a symbolic link ({p}); refusing to touch it")
    return p


def _verdict(check, name):
    try:
        return check(name)
    except DataError as exc:
        return "refused: " + ("link" if "symbolic link" in str(exc) else "name")


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "e" / "f.png").write_bytes(b"x")
    (root / "a.png").write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "d" / "deep").symlink_to(outside, target_is_directory=True)
    (root / "d" / "file-link.png").symlink_to(root / "a.png")
    return root


NAMES = ["a.png", "d/e/f.png", "d/e/new.png", "missing/x.png", "a/./b", "a//b", "a/", "link", "link/x.png",
         "d/deep/x.png", "d/file-link.png", "/abs", "../x", "a/../b", "", "manifest.json", "a\\b", ".", "./a",
         "d/e/../../x", 3, None]  # fmt: skip


def test_the_same_verdicts_and_paths_as_the_part_by_part_check(tree):
    where = tree / "manifest.json"
    guard = NoLinks(tree, where)  # one guard for every name: its directory cache must not change a verdict
    for name in NAMES + NAMES[::-1]:
        assert _verdict(guard, name) == _verdict(lambda n: _part_by_part(tree, n, where), name), name


def test_a_link_is_refused_below_a_directory_already_checked(tree):
    guard = NoLinks(tree, tree / "m")
    assert guard("d/e/f.png") == tree / "d" / "e" / "f.png"
    with pytest.raises(DataError, match="symbolic link"):
        guard("d/deep/x.png")  # d was seen to be no link; d/deep is one
    with pytest.raises(DataError, match="symbolic link"):
        guard("d/file-link.png")  # the file itself, in a directory seen before


def test_each_directory_is_checked_once(tree, monkeypatch):
    seen: list[str] = []
    real = os.lstat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: (seen.append(os.fspath(p)), real(p, *a, **k))[1])
    guard = NoLinks(tree, tree / "m")
    for i in range(50):
        guard(f"d/e/{i}.png")
    dirs = [p for p in seen if not p.endswith(".png")]
    assert sorted(dirs) == [str(tree / "d"), str(tree / "d" / "e")] and len(seen) == 52


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "link", "x.png", "c\\d", "manifest.json"]), max_size=4))
def test_any_name_gets_the_verdict_and_path_of_the_part_by_part_check(tmp_path_factory, parts):
    root = tmp_path_factory.getbasetemp() / "fuzz-root"
    if not root.exists():
        (root / "a" / "b").mkdir(parents=True)
        (root / "link").symlink_to(root / "a", target_is_directory=True)
    name = "/".join(parts)
    where = root / "manifest.json"
    assert _verdict(NoLinks(root, where), name) == _verdict(lambda n: _part_by_part(root, n, where), name)
