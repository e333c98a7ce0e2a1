"""File primitives every writer shares (the ledger, release folders, reports, model files): atomic writes, so a reader
sees the old file or the whole new one, and file digests."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one, never a part."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` as :func:`write_text_atomic` does. ``durable=False``: not synced to disk before the rename (a
    cache, which a crash may lose but never tear: after a power cut the file can be empty, never a part of the new
    one mixed with the old); a sync costs milliseconds on a disk, thousands of small files at a time."""
    _write_atomic(path, lambda fh: fh.write(data), durable=durable)


def start_writeback(fh: BinaryIO) -> None:
    """Ask the kernel to start writing an open file's data to disk now, without waiting for it.

    For files that are synced later (a shard syncs each released file before its record): written back while the
    next images are encoded, they no longer stall the worker at the shard's end, nor two workers at once on the
    same disk (2 workers on 1,500 small JPEGs: their shards' summed time 10.2-11.3 s → 9.1-9.7 s). Linux starts
    the writeback of dirty pages on ``posix_fadvise(DONTNEED)`` and never drops a page not yet written. Where the
    call does not start it (other systems), is missing, or fails, the later sync does all the work."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:  # pragma: no cover - not Linux
        return
    fh.flush()
    try:
        advise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:  # pragma: no cover - a file system that refuses the advice
        pass


def _write_atomic(path: Path, write: Callable[[BinaryIO], object], durable: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would (0666 minus umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        # Name the file the caller asked for, not the temporary one.
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_chunks_atomic(path: Path, chunks: Iterable[str]) -> str:
    """Write the text ``chunks`` to ``path`` as :func:`write_text_atomic` does, without ever holding it whole (a
    manifest listing millions of files); returns the sha256 of what was written."""
    import hashlib

    digest = hashlib.sha256()

    def write(fh: BinaryIO) -> None:
        source = iter(chunks)
        while True:
            try:
                chunk = next(source)
            except StopIteration:
                return
            except OSError as exc:  # from what makes the text (a spilled list): not an error writing ``path``
                raise _SourceError(exc) from exc
            data = chunk.encode()
            digest.update(data)
            fh.write(data)

    try:
        _write_atomic(path, write)
    except _SourceError as wrapped:
        raise wrapped.error from None
    return digest.hexdigest()


class _SourceError(Exception):
    """An OSError of the chunks' source, carried past :func:`_write_atomic` (which names its own file)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def fsync_path(path: Path) -> None:
    """Flush the file (or folder) at ``path`` to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks (a release folder's check and the duplicate finder's)."""
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()
