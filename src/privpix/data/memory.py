"""Memory checks made before a big allocation: refusing up front beats a MemoryError or the OOM killer half-way."""

from __future__ import annotations

import os
from pathlib import Path

from privpix.errors import ParameterError


def available_memory() -> int | None:
    """Bytes of memory available now (MemAvailable), or the physical total; None where neither is known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_resize_fits(n: int, hw: tuple[int, int] | None, channels: int, what: str = "--size") -> None:
    """Refuse a resize of ``n`` images to ``hw`` that cannot fit in memory, before allocating any of it.

    Resizing holds each image as float64 while stacking, then a float32 copy: about 20 bytes a pixel at peak.
    Linux overcommits, so an oversized resize is often not a MemoryError but the OOM killer's silent SIGKILL.
    ``what`` names the option that asked for the size in the message.
    """
    if hw is None:
        return
    need = 20 * n * hw[0] * hw[1] * max(channels, 1)
    have = available_memory()
    if have is not None and need > have:
        raise ParameterError(
            f"{what} {hw[0]}x{hw[1]}: resizing {n} images needs about {need / 2**30:.1f} GiB of memory, but only "
            f"{have / 2**30:.1f} GiB is available (use a smaller size or --limit)"
        )
