"""NoLinks, the commit's check that a name stays inside its folder and passes through no symbolic link: the same
verdicts and paths as the part-by-part check it replaced, links refused at any depth, each directory checked once."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privpix.data.formats.release_layout import safe_name
from privpix.errors import DataError
from privpix.publishing.staging import NoLinks


def _plain(name, where: Path) -> str:
    """safe_name's rule as pathlib states it (safe_name itself accepts with string checks): the reference."""
    if not isinstance(name, str) or not name:
        raise DataError(f"{where}: a file name is not a string: {name!r}")
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or "\\" in name or name in ("manifest.json", ".privpix-lock",
                                                                      ".privpix-commit.json"):  # fmt: skip
        raise DataError(f"{where}: file name {name!r} points outside the release; refusing to touch it")
    if p.as_posix() != name or name == "." or p.parts[0].startswith(".privpix-"):
        raise DataError(f"{where}: file name {name!r} is not a plain name of a released file")
    return name


def _part_by_part(out: Path, name, where: Path) -> Path:
    """The check NoLinks replaced (privpix before 2026-11-27), kept here as the reference."""
    p = out
    for part in PurePosixPath(_plain(name, where)).parts:
        p = p / part
        if p.is_symlink():
            raise DataError(f"{where}: {name!r} passes through a symbolic link ({p}); refusing to touch it")
    return p


def _verdict(check, name):
    try:
        return check(name)
    except DataError as exc:
        text = str(exc)
        return "refused: " + ("link" if "symbolic link" in text else "outside" if "outside" in text else "name")


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
         "d/e/../../x", ".privpix-staging-x/a", ".privpix-lock", "d/.privpix-x", 3, None]  # fmt: skip


def test_the_same_verdicts_and_paths_as_the_part_by_part_check(tree):
    where = tree / "manifest.json"
    guard = NoLinks(tree, where)  # one guard for every name: its directory cache must not change a verdict
    for name in NAMES + NAMES[::-1]:
        assert _verdict(guard, name) == _verdict(lambda n: _part_by_part(tree, n, where), name), name
        assert _verdict(lambda n: safe_name(n, where), name) == _verdict(lambda n: _plain(n, where), name), name


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
    assert _verdict(lambda n: safe_name(n, where), name) == _verdict(lambda n: _plain(n, where), name)


@pytest.mark.parametrize("spelling", ["as written", "with an alias"])
def test_a_link_moved_in_during_the_commit_is_refused(tmp_path, spelling):
    """The review of 2026-11-27: a crafted list moved a planted folder holding a link into the staging folder
    (named under a nested staging folder), then named a file through it, in a folder the pass had already seen (a
    second spelling of the same folder). Such names are refused, and the moving pass checks every part again."""
    from privpix.data.formats.release_layout import JOURNAL, STAGING_PREFIX
    from privpix.publishing.staging import recover

    out, stage_name = tmp_path / "rel", STAGING_PREFIX + "x"
    stage = out / stage_name
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "g").write_bytes(b"precious")
    planted = stage / stage_name / "zz"
    planted.mkdir(parents=True)
    (planted / "L").symlink_to(victim, target_is_directory=True)
    first = "./zz/L/h" if spelling == "with an alias" else "zz/L/h"
    names = [first, stage_name + "/zz", "zz/L/g"]
    (stage / "manifest.json").write_text(
        json.dumps({"privpix_version": "0", "files": [{"name": n, "sha256": "0"} for n in names]})
    )
    (out / JOURNAL).write_text(json.dumps({"staging": stage_name, "remove": [], "add": names}))
    with pytest.raises(DataError, match="not a plain name"):
        recover(out)
    assert (victim / "g").read_bytes() == b"precious" and not (out / "zz").exists()


def test_a_moving_pass_checks_every_directory_again(tmp_path):
    """remember=False: a folder seen to be no link and then replaced by one (as a move within the pass could do)
    is refused the next time a name passes through it."""
    root = tmp_path / "root"
    (root / "d").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    for remember, refused in [(True, False), (False, True)]:
        guard = NoLinks(root, root / "m", remember=remember)
        guard("d/a.png")
        (root / "d").rmdir()
        (root / "d").symlink_to(outside, target_is_directory=True)
        if refused:
            with pytest.raises(DataError, match="symbolic link"):
                guard("d/b.png")
        else:
            guard("d/b.png")  # a checking pass trusts what it saw (nothing moves during it)
        (root / "d").unlink()
        (root / "d").mkdir()
