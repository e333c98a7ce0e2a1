"""How many threads privpix's work uses: one per process inside :func:`one_thread`, the cores shared among workers.

Kept apart from :mod:`privpix.executor` so that :func:`privpix.errors.require_torch`, the one place privpix loads
torch, can pin a torch loaded inside :func:`one_thread` without importing the executor.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
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
    from threadpoolctl import threadpool_limits  # here, not at import: 36 ms on every CLI start

    global _depth, _torch_default
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    _depth += 1
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        _depth -= 1
        if torch is not None and before is not None:
            torch.set_num_threads(before)
        elif _depth == 0 and _torch_default is not None and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(_torch_default)
            _torch_default = None


def torch_loaded(torch: Any) -> None:
    """Called each time privpix asks for ``torch`` (:func:`privpix.errors.require_torch`), so also right after it
    first loads it: inside :func:`one_thread` a torch loaded there gets one thread at once, as it would have on
    entering the block; elsewhere, or when it already has one thread, nothing happens."""
    global _torch_default
    if _depth and torch.get_num_threads() != 1:
        if _torch_default is None:
            _torch_default = torch.get_num_threads()
        torch.set_num_threads(1)
