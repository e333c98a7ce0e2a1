"""How many threads privpix's work uses: one per process inside :func:`one_thread`, the cores shared among workers.

Kept apart from :mod:`privpix.executor` so that :func:`privpix.errors.require_torch`, the one place privpix loads
torch, can pin a torch loaded inside :func:`one_thread` without importing the executor.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# The variables the BLAS and OpenMP runtimes read when they load (numpy's OpenBLAS, torch's OpenMP, MKL).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def share_cores(threads: int) -> None:
    """In a worker process: at most ``threads`` BLAS/OpenMP threads (the cores divided among the workers). Each
    runtime otherwise starts one thread per core in every worker, and their busy-waiting threads slow each other:
    two workers auditing pca-inverse at once took 7 s each against 1.7 s alone, and 1.5–1.8 s with one thread each.
    Set in the environment for runtimes loaded later, and through threadpoolctl for those already loaded."""
    from threadpoolctl import threadpool_limits

    for var in THREAD_VARIABLES:
        os.environ[var] = str(threads)
    threadpool_limits(threads)


# Depth of the :func:`one_thread` blocks this process is in, and torch's own thread count when torch was first
# loaded inside one (restored when the outermost block ends). Process-wide, like the settings they guard: run one
# task per process (Dask workers with ``--nthreads 1``, as docs/scale.md says), not several threads of them.
_depth = 0
_torch_default: int | None = None


@contextmanager
def one_thread() -> Iterator[None]:
    """One torch thread and one BLAS/OpenMP thread inside, in a worker process or in this one; the caller's counts
    are restored after. A float product's rounding depends on how many threads split it, and a trained network
    amplifies those last bits: a synthesizer fitted on 4,000 digits scored 0.783 with two torch threads and 0.787
    with one, and the bench's attack scores moved in their 7th digit with numpy's BLAS threads. Shards, bench
    points, audit trials and fits run inside this, so the same seed gives the same numbers on any machine and any
    worker count (the cores go to the worker processes instead of to threads). torch is not loaded for this: if
    the work loads it (through :func:`privpix.errors.require_torch`), it starts with one thread."""
    global _depth, _torch_default
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    _depth += 1
    try:
        with _one_thread_limits():
            yield
    finally:
        _depth -= 1
        if torch is not None and before is not None:
            torch.set_num_threads(before)
        elif _depth == 0 and _torch_default is not None and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(_torch_default)
            _torch_default = None


# The libraries threadpoolctl found, and how many shared objects the process had loaded when it looked. Finding them
# reads every loaded library (3 ms with torch, numpy, scipy and scikit-learn loaded): once per shard, bench point and
# audit trial, 4.6 CPU-s of the test suite. Only a newly loaded library can change what it finds (Python never
# unloads one), so the scan is kept until the count of loaded objects changes.
_controller: tuple[int, Any] | None = None


@functools.cache
def _object_counter() -> Callable[[], int] | None:
    """A function that counts the shared objects this process has loaded (the dynamic linker's list, read with
    ``dl_iterate_phdr``: 47 µs), or None where the C library has no such call (macOS, Windows)."""
    import ctypes

    try:
        iterate = ctypes.CDLL(None).dl_iterate_phdr
    except (AttributeError, OSError, TypeError):  # no such call (macOS), or no process handle by None (Windows)
        return None
    seen = [0]

    def one(info: Any, size: int, data: Any) -> int:
        seen[0] += 1
        return 0

    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)(one)

    def count() -> int:
        seen[0] = 0
        iterate(callback, None)
        return seen[0]

    return count


def _loaded_objects() -> int | None:
    """How many shared objects this process has loaded, or None where that cannot be counted."""
    counter = _object_counter()
    return counter() if counter else None


def _one_thread_limits() -> Any:
    """``threadpoolctl.threadpool_limits(limits=1)``: every BLAS and OpenMP runtime loaded now held to one thread,
    the caller's counts restored on exit; the runtimes found by the last scan while no library was loaded since."""
    from threadpoolctl import ThreadpoolController, threadpool_limits  # here, not at import: 36 ms on every CLI start

    global _controller
    loaded = _loaded_objects()
    if loaded is None:
        return threadpool_limits(limits=1)
    if _controller is None or _controller[0] != loaded:
        _controller = (loaded, ThreadpoolController())
    return _controller[1].limit(limits=1)


def torch_loaded(torch: Any) -> None:
    """Called each time privpix asks for ``torch`` (:func:`privpix.errors.require_torch`), so also right after it
    first loads it: inside :func:`one_thread` a torch loaded there gets one thread at once, as it would have on
    entering the block; elsewhere, or when it already has one thread, nothing happens."""
    global _torch_default
    if _depth and torch.get_num_threads() != 1:
        if _torch_default is None:
            _torch_default = torch.get_num_threads()
        torch.set_num_threads(1)
