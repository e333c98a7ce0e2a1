"""Checks of an output path made before any work, and OS errors that name what could not be written: shared by the
API's writers and the command line."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from privpix.errors import ParameterError

# Longest file name (bytes) on Linux file systems, and what an atomic write adds for its temporary file
# (".NAME.XXXXXXXX.tmp"): a name that fits but whose temporary file does not would fail only at the end.
NAME_MAX = 255
ATOMIC_SUFFIX = 14


def check_output_path(path: str | os.PathLike, option: str, *, folder: bool = False) -> None:
    """Refuse an output that cannot be written before any work is done: a name too long for the file system,
    a parent that is a file, or a folder that cannot be written in (permissions, read-only file system).

    ``option`` names the output in errors (``--output``, or a Python argument); ``folder``: ``path`` is a folder
    the caller creates and fills, else a file written atomically beside."""
    p = Path(path)
    for part in p.parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise ParameterError(f"{option} {p}: the name {part[:24]}… is {size} bytes; at most {NAME_MAX} fit")
    if not folder and len(os.fsencode(p.name)) > NAME_MAX - ATOMIC_SUFFIX:
        raise ParameterError(
            f"{option} {p}: the file name is {len(os.fsencode(p.name))} bytes; at most {NAME_MAX - ATOMIC_SUFFIX} "
            f"fit (it is written through a temporary file {ATOMIC_SUFFIX} bytes longer)"
        )
    if folder and p.exists() and not p.is_dir():
        raise ParameterError(f"{option} {p}: exists and is not a folder")
    base = p if folder else p.parent
    while not base.exists():  # the nearest folder that exists is where the first write happens
        base = base.parent
    if not base.is_dir():
        raise ParameterError(f"{option} {p}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ParameterError(f"{option} {p}: cannot write in {base} (permission denied or read-only file system)")


@contextlib.contextmanager
def writing(path: str | os.PathLike, option: str) -> Iterator[None]:
    """Name ``option PATH`` in an OS error that names no file: a full disk or quota fails in write(), whose
    error carries no file name, so the one-line message would not say what could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno in (None, errno.EPIPE):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), f"{option} {path}") from exc
