"""A release folder that no kill, race or mistake can corrupt: staging, a commit journal, recovery, checks.

A release folder holds ``manifest.json`` (written by privpix, with the list of files and their sha256) and the
files it lists. The rules this module keeps (docs/security.md says how each is tested):

* A folder is a release folder only when its manifest is a privpix manifest. Anything else that is not empty is
  never written into, with or without ``force``.
* ``force`` replaces exactly the files the earlier manifest lists, after checking each against its sha256; other
  files in the folder (a user's notes, say) are never touched.
* The new release is staged in a hidden folder inside the output and swapped in through a commit journal: until
  the journal is written the earlier release is whole; after it, the swap is rolled forward, by this run or, if
  it was killed, by the next privpix command that opens the folder. Leftover staging without a journal (a run
  killed while staging) is removed by the next run.
* One writer at a time per folder (a lock file, ``.privpix-lock``, which is not part of the release).
* Released file names are opaque (a keyed hash of the image's position, sorted in the manifest), so neither the
  names nor the manifest's order reveal the sources; the mapping back to the sources is written only on request,
  to a file outside the release.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from privpix import strict_json
from privpix.data.formats.release_layout import (
    JOURNAL,
    LOCK,
    MANIFEST,
    OWN_FILES,
    PLAN,
    SHARDS,
    SPILL,
    STAGING_PREFIX,
    listed_files,
    png_image,
    read_manifest,
    safe_name,
)
from privpix.errors import DataError, ParameterError, arg
from privpix.fileio import fsync_path, sha256_file, write_chunks_atomic, write_text_atomic
from privpix.spill import SortedSpill

# Inside the staging folder: the sorted list the commit journal points to (the manifest less its list, then one
# JSON [name, sha256] per line). It goes with the staging folder; so do the spilled lists (SPILL).
FILE_LIST = ".privpix-files.jsonl"

# Test hook: the named point sends SIGKILL to this process, so the tests can kill a real release exactly there.
FAULT_ENV = "PRIVPIX_FAULT_INJECT"


def _checkpoint(point: str) -> None:
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


class OpaqueNames:
    """File names that do not identify: ``HMAC-SHA256(key, position)`` cut to 16 hex digits.

    The key is drawn from the OS CSPRNG for every release and never written anywhere, so names differ from run
    to run even with the same seed: a key derived from a seed would let anyone recover the seed from the names,
    and with it the noise. Positions are unique, so names are too (a collision of 64-bit prefixes is still
    checked for)."""

    def __init__(self, key: bytes | None = None) -> None:
        # A key is passed only to the worker processes of one release (in memory), never written anywhere.
        self._key = key if key is not None else secrets.token_bytes(32)
        self._used: set[str] = set()

    def name(self, position: int, suffix: str = ".png") -> str:
        digest = hmac.new(self._key, int(position).to_bytes(8, "little"), hashlib.sha256).hexdigest()
        k = 16
        while (name := digest[:k] + suffix) in self._used:  # pragma: no cover - a 2**-64 event
            k += 4
        self._used.add(name)
        return name


# --------------------------------------------------------------------------------------- what is in a folder


def verify_manifest(
    output: str | Path, note: Callable[[str], None] | None = None, *, repair: bool = False
) -> list[str]:
    """Problems found when checking a release folder against its manifest (empty list: all good).

    Checks every listed file's sha256, and that no other file lies in the folder beside privpix's own. Read-only:
    an interrupted replacement (a commit journal or staging left by a killed run) is reported, and finished only
    with ``repair`` (under the folder's lock, with every check of :func:`recover`)."""
    out = Path(output)
    if not out.is_dir():
        return [f"{out}: not a folder"]
    pending = (out / JOURNAL).exists() or any(p.name.startswith(STAGING_PREFIX) for p in out.iterdir())
    if pending and not repair:
        return [
            f"{out}: a release was interrupted there; `privpix verify --repair {out}` finishes or removes it (the "
            "same `privpix release` command with --resume continues a sharded one instead)"
        ]
    if pending:
        lock = FileLock(out / LOCK)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            return [f"{out}: a privpix release is writing there now"]
        try:
            # Here, not at the top: the accounting imports dp-accounting (about 0.9 s), which a release without a
            # ledger never needs.
            from privpix.privacy.accounting import release_unpublished

            proof = f"its staging in {out} was removed uncommitted (no commit journal) by `privpix verify --repair`"
            recover(
                out,
                note or (lambda _m: None),
                on_discard=lambda plan: release_unpublished(plan.get("ledger"), plan.get("run"), proof, note),
            )
        finally:
            lock.release()
    manifest = read_manifest(out)
    if manifest is None:
        return [f"{out / MANIFEST}: missing"]
    problems = []
    listed = listed_files(manifest, out)
    in_out = NoLinks(out, out / MANIFEST)
    for name, sha in listed:
        p = out / name
        try:
            in_out(name)
        except DataError:
            problems.append(f"{p}: passes through a symbolic link, not a released file")
            continue
        if not p.is_file():
            problems.append(f"{p}: missing")
        elif sha256_file(p) != sha:
            problems.append(f"{p}: sha256 mismatch")
    known = {n for n, _ in listed} | {MANIFEST, *OWN_FILES}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_file() and rel not in known:
            problems.append(f"{p}: not listed in the manifest")
    return problems


# ------------------------------------------------------------------------------------------------ checks


def _resolved(p: Path) -> Path:
    return p.expanduser().resolve(strict=False)


def check_no_overlap(output: Path, inputs: Sequence[str | Path], option: str = "--output",
                     what: str = "the input") -> None:  # fmt: skip
    """Refuse an output (``option``) that is, contains or lies inside one of ``inputs`` (``what`` they are): a
    release must never overwrite or mix with its sources."""
    out = _resolved(output)
    for src in inputs:
        s = _resolved(Path(src))
        if out == s or s in out.parents or out in s.parents:
            raise ParameterError(f"{option} {output}: overlaps {what} {src}; write it somewhere else")


def _own_entry(p: Path) -> bool:
    return p.name in OWN_FILES or p.name.startswith(STAGING_PREFIX)


def check_output(output: Path, force: bool, inputs: Sequence[str | Path] = ()) -> dict[str, Any] | None:
    """Refuse, before any work is done, an output that privpix may not write into. Returns the earlier
    manifest when ``force`` replaces an earlier release.

    A folder may be written into when it is missing or empty, or when it holds a privpix release and ``force``
    is given. A non-empty folder without a privpix manifest is refused even with ``force``."""
    check_no_overlap(output, inputs)
    if output.exists() and not output.is_dir():
        raise ParameterError(f"{arg('--output', 'output')} {output}: exists and is not a directory")
    if not output.is_dir():
        return None
    if (output / JOURNAL).exists():
        return read_manifest(output)  # an interrupted swap: opening the folder rolls it forward first
    entries = [p for p in output.iterdir() if not _own_entry(p)]
    if not entries:
        return None
    manifest = read_manifest(output)
    if manifest is None:
        raise ParameterError(
            f"{arg('--output', 'output')} {output}: not empty and holds no privpix manifest; refusing to touch it"
        )
    if not force:
        raise ParameterError(
            f"{arg('--output', 'output')} {output}: holds an earlier release; pass {arg('--force', 'force=True')} to "
            "replace it"
        )
    return manifest


# ------------------------------------------------------------------------------------------------ writer


UNSEEDED_FIT = (
    "This release fits on the private images without a seed, so it cannot be resumed: run it again (its "
    "reservation, if any, was released)"
)


def _by_name(entry: tuple[str, str]) -> str:
    return entry[0]


def manifest_chunks(manifest: dict[str, Any], files: Iterable[tuple[str, str]]) -> Iterator[str]:
    """The text of ``manifest`` with ``"files"`` (last) listing ``files`` as ``{"name", "sha256"}`` objects, in
    pieces, for a list too long to hold: exactly ``strict_json.dumps({**manifest, "files": [...]}, indent=2)``."""
    text = strict_json.dumps({**manifest, "files": []}, indent=2, default=None)
    tail = '"files": []\n}'
    assert text.endswith(tail), "files must be the manifest's last field"
    yield text[: -len("[]\n}")]
    first = True
    for name, sha in files:
        entry = f'    {{\n      "name": {json.dumps(name)},\n      "sha256": {json.dumps(sha)}\n    }}'
        yield ("[\n" if first else ",\n") + entry
        first = False
    yield "[]\n}" if first else "\n  ]\n}"


class ReleaseWriter:
    """Stage a release inside ``output`` and swap it in atomically (see the module docstring).

    Use as a context manager: files added with :meth:`add` go to a hidden staging folder; :meth:`commit` writes the
    manifest and swaps. Leaving the block without a commit removes the staging and leaves the folder as it was.

    Args:
        output: the release folder (created if missing).
        force: replace an earlier privpix release in ``output``.
        inputs: source folders the output must not overlap.
        note: called with one line for each thing a user should know (a recovered interrupted run).
    """

    def __init__(
        self,
        output: str | Path,
        *,
        force: bool = False,
        inputs: Sequence[str | Path] = (),
        note: Callable[[str], None] | None = None,
        plan: dict[str, Any] | None = None,
        resume: bool = False,
        on_discard: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.on_discard = on_discard
        if resume and plan is None:
            raise ParameterError("resume needs the plan of the run to continue")
        self.plan = plan
        self.resume = resume
        self.out = Path(output)
        self.force = force
        self.inputs = inputs
        self.note = note or (lambda _msg: None)
        self.stage: Path | None = None
        self.committed = False
        self.old: list[tuple[str, str]] = []
        self._lock: FileLock | None = None
        self._created = False
        # (name, sha256) of every staged file, on disk in sorted runs once there are many (made in __enter__).
        self._spilled: SortedSpill | None = None
        # Files the commit stamps with the release's time and syncs. A file a worker already stamped and synced
        # (adopt(..., synced=True)) is not among them: a second per-file pass that was serial (1 s per 1,500 files).
        self._unsynced: list[str] = []
        self.file_count = 0  # files the manifest lists, once committed

    def __enter__(self) -> ReleaseWriter:
        check_no_overlap(self.out, self.inputs)
        if self.out.exists() and not self.out.is_dir():
            raise ParameterError(f"{self._where()}: exists and is not a directory")
        if not self.out.is_dir():
            try:
                self.out.mkdir(parents=True)
            except OSError as exc:
                raise ParameterError(f"{self._where()}: cannot create it ({exc.strerror or exc})") from None
            self._created = True
        self._lock = FileLock(self.out / LOCK)
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise ParameterError(f"{self._where()}: another privpix release is writing there now") from None
        except OSError as exc:
            self._undo_create()
            raise ParameterError(f"{self._where()}: cannot write there ({exc.strerror or exc})") from None
        try:
            recover(self.out, self.note, keep_resumable=self.resume, on_discard=self.on_discard)
            earlier = check_output(self.out, self.force, self.inputs)
            if earlier is not None:
                self.old = listed_files(earlier, self.out)
                in_out = NoLinks(self.out, self.out / MANIFEST)
                for name, sha in self.old:
                    p = in_out(name)
                    if p.exists() and (not p.is_file() or sha256_file(p) != sha):
                        raise ParameterError(
                            f"{self._where()}: {name} was changed after the earlier release was written; "
                            "privpix replaces only its own unchanged files (move it away first)"
                        )
            if self.resume:
                self.stage = self._resumable()
                shutil.rmtree(self.stage / SPILL, ignore_errors=True)  # the interrupted run's lists: redone here
            else:
                self.stage = self.out / f"{STAGING_PREFIX}{secrets.token_hex(6)}"
                self.stage.mkdir(mode=0o700)  # the plan and shard records name sources: owner only
                if self.plan is not None:
                    (self.stage / SHARDS).mkdir()
                    write_text_atomic(self.stage / PLAN, strict_json.dumps(self.plan, indent=2, default=None))
        except OSError as exc:
            self._release_lock()
            raise ParameterError(f"{self._where()}: cannot write there ({exc.strerror or exc})") from None
        except BaseException:
            self._release_lock()
            raise
        self._spilled = SortedSpill(self.stage / SPILL / "files", key=_by_name, decode=tuple)
        return self

    @property
    def _files(self) -> SortedSpill:
        assert self._spilled is not None, "use ReleaseWriter as a context manager"
        return self._spilled

    def _resumable(self) -> Path:
        """The staging folder of the interrupted run this one continues: it must have been planned with the same
        settings (``plan["settings"]``)."""
        assert self.plan is not None
        found = [p for p in self.out.iterdir() if p.name.startswith(STAGING_PREFIX) and (p / PLAN).is_file()]
        if not found:
            raise ParameterError(f"--resume: {self.out} holds no interrupted release to continue")
        stage = found[0]
        try:
            earlier = json.loads((stage / PLAN).read_text(encoding="utf-8"))
            settings = earlier["settings"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{stage / PLAN}: unreadable plan of the interrupted run ({exc})") from None
        mine = self.plan["settings"]
        differ = sorted(k for k in set(settings) | set(mine) if settings.get(k) != mine.get(k))
        if differ:
            raise ParameterError(
                f"--resume: the interrupted release in {self.out} was made with other settings ({', '.join(differ)});"
                " give the same command again with --resume, or leave --resume out to start over"
            )
        self.plan = earlier
        return stage

    def adopt(self, name: str, sha256: str, *, synced: bool = False) -> None:
        """Register a file that a worker wrote into the staging folder (its sha256 as the worker read it back).
        ``synced``: the worker set its modification time to :attr:`stamp` and synced it to disk."""
        assert self.stage is not None, "use ReleaseWriter as a context manager"
        safe_name(name, self.out / MANIFEST)
        self._files.add((name, sha256))
        if not synced:
            self._unsynced.append(name)

    @property
    def stamp(self) -> float | None:
        """The one modification time every file of a planned release gets (``plan["stamp"]``; ``None`` without a
        plan, when the commit's own time is used)."""
        stamp = (self.plan or {}).get("stamp")
        return float(stamp) if isinstance(stamp, int | float) else None

    def add(self, name: str, data: bytes) -> str:
        """Stage one file of the release; returns its sha256."""
        return self._stage_file(name, lambda path: path.write_bytes(data))

    def add_image(self, name: str, image: np.ndarray, compress_level: int = 6) -> str:
        """Stage one (h, w, c) uint8 image as a PNG, encoded straight into its file (a big photo is not held a
        second time as bytes); returns its sha256."""
        return self._stage_file(
            name, lambda path: png_image(image).save(path, format="PNG", compress_level=compress_level)
        )

    def _stage_file(self, name: str, write: Callable[[Path], object]) -> str:
        """Write one staged file with ``write(path)``, record its sha256 (read back from the file) and return it."""
        assert self.stage is not None, "use ReleaseWriter as a context manager"
        safe_name(name, self.out / MANIFEST)
        path = self.stage / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            sha = sha256_file(path)
            self._files.add((name, sha))  # may spill a run to disk
        except OSError as exc:
            raise ParameterError(
                f"{self._where()}: cannot write the release ({exc.strerror or exc}); nothing was published"
            ) from None
        self._unsynced.append(name)
        return sha

    def commit(self, manifest: dict[str, Any], on_published: Callable[[], None] | None = None) -> dict[str, Any]:
        """Write ``manifest`` with ``files`` (every staged file and its sha256, sorted by name, so the order tells
        nothing about the sources) and swap the release in. ``on_published`` is called as soon as the swap cannot
        be undone any more (the journal is on disk). Returns the manifest as written, less ``files`` (at millions
        of images the list is streamed to disk, never held: read ``manifest.json`` for it)."""
        assert self.stage is not None, "use ReleaseWriter as a context manager"
        if "files" in manifest:
            raise ValueError("commit() writes the manifest's files itself")
        stamp = self.stamp if self.stamp is not None else time.time()
        for name in self._unsynced:  # one mtime for all: the write order would otherwise show the input order
            path = self.stage / name
            os.utime(path, (stamp, stamp))
            fsync_path(path)
        stage = self.stage
        listing = hashlib.sha256()
        count = len(self._files)

        def listed() -> Iterator[tuple[str, str]]:
            with open(stage / FILE_LIST, "w", encoding="utf-8") as fh:
                # Its first line is the manifest less its list: a roll-forward rebuilds the manifest from the list
                # and checks it is the staged one, so the list cannot name other files than the manifest does.
                head = strict_json.dumps(manifest, default=None) + "\n"
                fh.write(head)
                listing.update(head.encode())
                for name, sha in self._files:
                    line = json.dumps([name, sha]) + "\n"
                    fh.write(line)
                    listing.update(line.encode())
                    yield name, sha
                fh.flush()
                os.fsync(fh.fileno())

        written = write_chunks_atomic(stage / MANIFEST, manifest_chunks(manifest, listed()))
        self._files.discard()
        self.file_count = count
        _checkpoint("staged")
        journal = {
            "staging": stage.name,
            "remove": [n for n, _ in self.old],
            # The list of files to move in is the staged one the manifest was written from (a list in the journal
            # itself would be held whole: 100 MB at a million images); its digests catch a damaged file early.
            "add": {"list": FILE_LIST, "count": count, "sha256": listing.hexdigest(), "manifest_sha256": written},
        }
        write_text_atomic(self.out / JOURNAL, json.dumps(journal))
        self.committed = True
        if on_published is not None:
            on_published()
        _checkpoint("journal")
        _roll_forward(self.out)
        return manifest

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.committed and self.stage is not None and (self.out / JOURNAL).exists():
                self.committed = True  # interrupted right after the journal was written: that is a commit
            resumable = self.plan is not None and self.plan.get("resumable", True)
            # A refusal of the command's parameters would meet --resume (the same command) again: nothing to keep.
            refused = exc_type is not None and issubclass(exc_type, ParameterError)
            if not self.committed and self.stage is not None and resumable and exc_type is not None and not refused:
                # A sharded run stopped by an error or Ctrl-C: its finished shards stay for --resume (nothing of
                # them is published until a commit).
                done = len(list((self.stage / SHARDS).glob("*.json")))
                self.note(f"{self.out}: stopped with {done} shard(s) finished; the same command with --resume "
                          "continues the release")  # fmt: skip
            elif not self.committed and self.stage is not None:
                # Why it cannot be resumed, from its plan ("": a command without --resume, whose error says it all).
                why = (self.plan or {}).get("why_not_resumable", UNSEEDED_FIT)
                if self.plan is not None and exc_type is not None and why and not refused:
                    self.note(f"{self.out}: stopped; nothing was published. {why}")
                shutil.rmtree(self.stage, ignore_errors=True)
        finally:
            self._release_lock()
            if not self.committed:
                self._undo_create()

    def _where(self) -> str:
        """The output as an error names it: the option a command-line user typed, or the Python argument."""
        return f"{arg('--output', 'output')} {self.out}"

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _undo_create(self) -> None:
        """A failed first release leaves no folder behind (only when this writer created it)."""
        if self._created:
            (self.out / LOCK).unlink(missing_ok=True)
            try:
                self.out.rmdir()
            except OSError:
                pass


def recover(
    out: Path,
    note: Callable[[str], None] = lambda _m: None,
    *,
    keep_resumable: bool = False,
    on_discard: Callable[[dict[str, Any]], object] | None = None,
) -> None:
    """Finish what a killed run left in ``out``: roll a journalled swap forward, remove dead staging (but keep a
    sharded run's staging with ``keep_resumable``, for ``--resume`` to continue). ``on_discard`` gets the plan of
    each sharded run whose staging is removed (nothing of it was published: its ledger reservation may go).

    Call only while holding the folder's lock (so no staging folder found belongs to a live run)."""
    if (out / JOURNAL).exists():
        if _roll_forward(out):
            note(f"{out}: finished replacing the release that an interrupted run had already committed")
        else:
            note(f"{out}: removed what an interrupted run left after it had replaced the release")
    for p in out.iterdir():
        if p.name.startswith(STAGING_PREFIX) and p.is_dir():
            resumable = (p / PLAN).is_file()
            if resumable and keep_resumable:
                continue
            done = len(list((p / SHARDS).glob("*.json"))) if resumable else 0
            plan = None
            if resumable:
                try:
                    plan = json.loads((p / PLAN).read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    plan = None
            shutil.rmtree(p, ignore_errors=True)
            if plan is not None and on_discard is not None:
                on_discard(plan)
            note(f"{out}: removed {p.name}, left by an interrupted run (nothing of it had been published)")
            if resumable:
                note(f"it had finished {done} shard(s); `privpix release ... --resume` would have continued it")


class NoLinks:
    """``root / name`` for names under one folder, refused when any part of it below ``root`` is a symbolic
    link (a planted link would make a removal or a move land outside the release folder).

    A commit checks every name four times (staging and release folder, when it checks the list and when it
    moves the files), all in the coordinator. Here a name costs :func:`safe_name`'s string checks, one ``lstat``
    of the file and one of each directory not seen before: 8 µs, against 20 µs part by part with pathlib (80 s
    of a million-image commit). A name that is not plain is refused by :func:`safe_name`, which says why. With
    ``remember``, a directory is trusted for the rest of the pass once seen to be no link: for passes that only
    check. A pass that moves files checks every part of every name, as what it moves may bring a link along (the
    review of 2026-11-27 built such a list, with one folder spelled two ways)."""

    def __init__(self, root: Path, where: Path, *, remember: bool = True) -> None:
        self.root = os.fspath(root)
        self.where = where
        # A pass that moves files checks every directory again: what it moves may bring a link along.
        self._dirs: set[str] | None = set() if remember else None

    def __call__(self, name: str) -> Path:
        parts = safe_name(name, self.where).split("/")
        for k in range(1, len(parts)):
            below = "/".join(parts[:k])
            if self._dirs is None or below not in self._dirs:
                self._refuse_link(below, name)
                if self._dirs is not None:
                    self._dirs.add(below)
        self._refuse_link(name, name)
        return Path(self.root, name)

    def _refuse_link(self, rel: str, name: str) -> None:
        path = os.path.join(self.root, rel)
        try:
            link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError as exc:  # missing: no link there (other errors are raised, as Path.is_symlink does)
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
                return
            raise
        except ValueError:  # a NUL in the name, which safe_name lets through: as Path.is_symlink says
            return
        if link:
            raise DataError(f"{self.where}: {name!r} passes through a symbolic link ({path}); refusing to touch it")


def move_into(source: Path, target: Path, made: set[Path]) -> None:
    """``os.replace(source, target)``, making the target's folder first: once per folder in a pass that moves
    many files (``made`` holds the folders this pass made or found)."""
    if target.parent not in made:
        target.parent.mkdir(parents=True, exist_ok=True)
        made.add(target.parent)
    os.replace(source, target)


def _staged_names(out: Path, stage: Path, listing: str, digests: tuple[str, str], jpath: Path) -> Iterator[str]:
    """The names in the staged file list a journal points to, streamed, once the whole list has been checked
    before anything moves, in one read of it: its digest is the journal's, each entry is a ``[name, sha256]`` pair
    of strings, names are strictly increasing (sorted, no repeats), plain and through no link on either side, and
    the manifest rebuilt from the list's first line (a privpix manifest less its list) and its entries is byte for
    byte the staged ``manifest.json``. A planted journal can name only what a privpix manifest in the staging
    folder lists."""
    path, manifest = stage / listing, stage / MANIFEST
    if listing != FILE_LIST or not path.is_file() or path.is_symlink():
        raise DataError(f"{jpath}: names no file list of privpix's; refusing to touch the folder")
    mismatch = f"{jpath}: does not match the staged manifest; refusing to touch the folder"
    if sha256_file(manifest) != digests[1]:
        raise DataError(mismatch)
    read, rebuilt = hashlib.sha256(), hashlib.sha256()
    previous: str | None = None
    in_stage, in_out = NoLinks(stage, jpath), NoLinks(out, jpath)

    def checked(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
        nonlocal previous
        for line in lines:
            read.update(line.encode())
            entry = json.loads(line)
            if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
                raise DataError(f"{path}: holds {entry!r}, not a [name, sha256] pair; refusing to touch the folder")
            name = entry[0]
            if previous is not None and name <= previous:
                raise DataError(f"{path}: names not sorted and unique at {name!r}; refusing to touch the folder")
            in_stage(name)
            in_out(name)
            previous = name
            yield name, entry[1]

    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
            read.update(first.encode())
            head = json.loads(first)
            if not isinstance(head, dict) or "privpix_version" not in head or "files" in head:
                raise DataError(f"{path}: does not start with a privpix manifest; refusing to touch the folder")
            for chunk in manifest_chunks(head, checked(fh)):
                rebuilt.update(chunk.encode())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: unreadable file list ({exc}); refusing to touch the folder") from None
    if read.hexdigest() != digests[0] or rebuilt.hexdigest() != digests[1]:
        raise DataError(mismatch)

    def names() -> Iterator[str]:
        with open(path, encoding="utf-8") as fh:
            next(fh)
            for line in fh:
                yield json.loads(line)[0]

    return names()


def _roll_forward(out: Path) -> bool:
    """Apply the commit journal: idempotent, so a run killed half-way through is finished by the next one.

    Nothing in the journal is trusted on its own: the staging folder must hold a privpix manifest whose files
    are exactly the journal's ``add`` list, every name to remove must be listed by the earlier manifest still in
    the folder, and no path may pass through a symbolic link. The old manifest is replaced last, in one rename.
    Returns whether a release was swapped in (False: only leftovers were removed).
    """
    jpath = out / JOURNAL
    try:
        journal = json.loads(jpath.read_text())
        stage = out / journal["staging"]
        remove, add = list(journal["remove"]), journal["add"]
        if not isinstance(add, list):
            count, listing = int(add["count"]), str(add["list"])
            digests = (str(add["sha256"]), str(add["manifest_sha256"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{jpath}: unreadable commit journal ({exc}); move the folder's contents by hand") from None
    if not stage.name.startswith(STAGING_PREFIX) or stage.parent != out or stage.is_symlink():
        raise DataError(f"{jpath}: staging folder {stage.name!r} is not privpix's; refusing to touch it")
    new_manifest = stage / MANIFEST
    if new_manifest.is_file() and not new_manifest.is_symlink():
        if isinstance(add, list):  # a journal that lists the names itself (as earlier privpix versions wrote them)
            staged = read_manifest(stage)
            if staged is None or sorted(n for n, _ in listed_files(staged, stage)) != sorted(add):
                raise DataError(f"{jpath}: does not match the staged manifest; refusing to touch the folder")
            names: Iterable[str] = add
            count = len(add)
        else:
            names = _staged_names(out, stage, listing, digests, jpath)
        earlier = read_manifest(out)
        old_names = set() if earlier is None else {n for n, _ in listed_files(earlier, out)}
        if not set(remove) <= old_names:
            raise DataError(f"{jpath}: removes files the earlier manifest does not list; refusing to touch them")
        gone = set(remove)  # the earlier files the new release does not put back
        in_stage, in_out = NoLinks(stage, jpath, remember=False), NoLinks(out, jpath, remember=False)
        made: set[Path] = set()
        for i, name in enumerate(names):
            gone.discard(name)
            src = in_stage(name)
            if src.exists():
                move_into(src, in_out(name), made)
            if i == count // 2:
                _checkpoint("swapping")
        for name in remove:
            if name in gone:
                in_out(name).unlink(missing_ok=True)
        os.replace(new_manifest, out / MANIFEST)
        replaced = True
    else:
        replaced = False  # the manifest had been moved in already: only the leftovers remain
    shutil.rmtree(stage, ignore_errors=True)
    jpath.unlink(missing_ok=True)
    return replaced
