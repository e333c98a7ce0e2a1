"""One way to spread work over cores or a cluster: map a function over tasks, get results as they finish.

privpix does not schedule anything itself. Two backends, chosen with :func:`make_executor`:

* ``local`` (default): worker processes on this machine (:class:`concurrent.futures.ProcessPoolExecutor`,
  ``forkserver`` start so a worker never inherits a half-initialised torch or numba from the parent). With one
  worker the tasks run in this process, with no pool at all.
* ``dask``: a ``dask.distributed`` client, on a :class:`~distributed.LocalCluster` of ``workers`` single-threaded
  processes, or on an existing cluster when ``scheduler`` names its address (``tcp://host:8786``). The workers
  there must have privpix installed (the same version) and must see the input and output paths (docs/scale.md).

Results never depend on the backend or the number of workers: callers key every random stream by the task (not
by the worker that runs it) and reduce with exact arithmetic (integer sums), so the order in which results
arrive changes nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from privpix.errors import ParameterError
from privpix.threads import share_cores

T = TypeVar("T")
R = TypeVar("R")

ENGINES = ("local", "dask")
# How long to try reaching a --scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = "20s"


def default_workers() -> int:
    """Every core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Executor:
    """Maps ``fn`` over tasks; subclasses say where the calls run. Use as a context manager."""

    engine = "inline"
    # Told once, at once, when Ctrl-C stops work that is running elsewhere (the CLI prints it).
    note: Callable[[str], None] | None = None

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        """``(index, fn(tasks[index]))`` for every task, in the order they finish. An exception in a task is
        raised here, after the tasks still queued are cancelled."""
        for i, task in enumerate(tasks):
            yield i, fn(task)

    def describe(self) -> str:
        return f"{self.workers} worker (this process)"

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """Worker processes on this machine."""

    engine = "local"

    def __init__(self, workers: int, preload: Sequence[str] = ()) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        super().__init__(workers)
        self._pool: ProcessPoolExecutor | None = None
        threads = max(1, default_workers() // workers)
        ctx = multiprocessing.get_context("forkserver")
        env = _start_forkserver(ctx, preload) if preload else None
        self._make = lambda: ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_worker_start,
            initargs=(threads, env, _module_files() if env is not None else {}),
        )

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        from concurrent.futures import FIRST_COMPLETED, wait

        if len(tasks) <= 1:  # one task: starting processes would only cost time
            yield from super().map_unordered(fn, tasks)
            return
        if self._pool is None:
            self._pool = self._make()

        # At most two tasks per worker are in flight: a task holds its inputs in memory until it runs, and a
        # million-image release must not queue them all at once.
        pending: dict[Any, int] = {}
        nxt = 0
        stopped = False
        try:
            while nxt < len(tasks) or pending:
                while nxt < len(tasks) and len(pending) < 2 * self.workers:
                    pending[self._pool.submit(fn, tasks[nxt])] = nxt
                    nxt += 1
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = pending.pop(fut)
                    yield i, fut.result()
        except KeyboardInterrupt:
            # The workers do not see the terminal's Ctrl-C (they descend from the forkserver, which ignores it), so
            # waiting for them would take as long as their tasks: stop them instead.
            stopped = True  # before stopping them: a second Ctrl-C meanwhile must not fall back to waiting
            if self.note is not None:
                self.note(f"interrupted: stopping the {self.workers} worker processes and the tasks they run")
            self._terminate()
            raise
        finally:
            # On an error: cancel what has not started and wait for what has, so no task is still writing after
            # the caller cleaned up (a release's staging folder). A cancelled future is never waited for: it never
            # runs, and the pool may never mark it done (a broken pool's manager thread stops at the first
            # cancelled future it tries to fail, and a wait on it hung a Ctrl-C for good). After an interrupt the
            # workers are already stopped and joined: nothing of theirs runs any more.
            if not stopped:
                wait([fut for fut in pending if not fut.cancel()])

    def _terminate(self) -> None:
        """Stop every worker process now and wait until each has exited; the next map starts a fresh pool."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # CPython's ProcessPoolExecutor keeps its worker processes here; it has no public way to stop running tasks.
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():  # a task that ignores SIGTERM (native code holding it off): stop it for good
                proc.kill()
                proc.join(timeout=5)
        pool.shutdown(wait=False, cancel_futures=True)

    def describe(self) -> str:
        return f"{self.workers} local worker processes"

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


# Set for the fork server's start only: its imports must find the modules this process found (see below).
_SERVER_ENV = ("PYTHONPATH", "PYTHONSAFEPATH")


def _start_forkserver(ctx: Any, preload: Sequence[str]) -> dict[str, str | None] | None:
    """Start this process's fork server now, importing ``preload`` (module names) once there; returns the
    variables of :data:`_SERVER_ENV` as they were, for the workers to restore (``None``: not preloaded).

    Each worker is forked from the server, so it starts with those modules loaded instead of importing (and, where
    no bytecode is cached, compiling) them itself: on 1,500 small JPEGs that was about 0.3 s of every worker's first
    task. Started here, at the executor's creation, the server imports them on another core while this process
    still scans the input. The server is per process and keeps the modules of its first start.

    The server runs ``python -c``: left alone, it would look first in the current folder (a ``numpy.py`` there
    would be its numpy) and never see paths this process added to ``sys.path`` (Python 3.11 does not pass them on
    before the preload). So it starts with this process's ``sys.path`` as ``PYTHONPATH`` and ``PYTHONSAFEPATH``
    set: the same modules, found in the same order. Each worker checks that before its first task
    (:func:`_worker_start`)."""
    from multiprocessing import forkserver

    if any(os.pathsep in p for p in sys.path):  # cannot be passed as PYTHONPATH: the workers import as before
        return None
    saved = {k: os.environ.get(k) for k in _SERVER_ENV}
    ctx.set_forkserver_preload(list(preload))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        forkserver.ensure_running()
    finally:
        _set_env(saved)
    return saved


def _set_env(values: dict[str, str | None]) -> None:
    """Set each variable to its value, or unset it for ``None``."""
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _module_files() -> dict[str, str]:
    """Where each module this process has loaded comes from."""
    return {
        name: f
        for name, m in list(sys.modules.items())
        if name not in ("__main__", "__mp_main__") and isinstance(f := getattr(m, "__file__", None), str)
    }


def _worker_start(threads: int, env: dict[str, str | None] | None, files: dict[str, str]) -> None:
    """A local worker's first step: its share of the cores; with a preloading fork server, the coordinator's
    environment back (the server's start variables are not the workers'), and a check that every module it
    holds that the coordinator holds too is the same file (a worker running other code than the coordinator
    would be a silent fault: stop here instead)."""
    share_cores(threads)
    if env is None:
        return
    _set_env(env)
    for name, f in _module_files().items():
        if name in files and files[name] != f:
            raise RuntimeError(f"this worker loaded {name} from {f}, the coordinator from {files[name]}")


class DaskExecutor(Executor):
    """A ``dask.distributed`` client: a new LocalCluster, or an existing cluster at ``scheduler``."""

    engine = "dask"

    def __init__(self, workers: int | None, scheduler: str | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ParameterError(
                "--engine dask: dask.distributed is not installed (pip install 'privpix[cluster]')"
            ) from None
        self._cluster = None
        if scheduler is not None:
            # TLS settings come from Dask's own configuration (distributed.comm.tls.*: a YAML file or
            # DASK_DISTRIBUTED__COMM__TLS__* variables, docs/scale.md), as for any Dask client.
            try:
                self._client = Client(scheduler, timeout=CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as exc:
                raise ParameterError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
            except (TypeError, ValueError) as exc:
                import dask

                if not scheduler.lower().startswith("tls://") or dask.config.get("distributed.comm.tls.ca-file", None):
                    raise
                raise ParameterError(
                    f"--scheduler {scheduler}: a TLS-secured cluster, and this client has no TLS certificates; give "
                    "Dask the CA file, client certificate and key (DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
                    "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT, DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY; "
                    f"docs/scale.md) ({type(exc).__name__}: {exc})"
                ) from None
            n = len(self._client.scheduler_info().get("workers", {}))
            if n == 0:
                self._client.close()
                raise ParameterError(f"--scheduler {scheduler}: the cluster has no workers")
            super().__init__(n)
        else:
            n = workers or default_workers()
            # One thread per worker process: the mechanisms are NumPy code that holds the GIL between calls.
            self._cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
            )
            self._client = Client(self._cluster)
            super().__init__(n)
        self.scheduler = scheduler

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        from distributed import as_completed

        futures = self._client.map(fn, list(tasks), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for fut in as_completed(futures):
                yield index[fut.key], fut.result()
        finally:
            # Dask cannot stop a task that already runs; a release's tasks check that their staging folder still
            # exists before they write, and a record from a stopped run is refused by the next (its attempt id).
            self._client.cancel(futures)

    def describe(self) -> str:
        where = f"cluster at {self.scheduler}" if self.scheduler else "Dask LocalCluster"
        return f"{self.workers} Dask workers ({where})"

    def close(self) -> None:
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_executor(
    engine: str = "local", workers: int | None = None, scheduler: str | None = None, preload: Sequence[str] = ()
) -> Executor:
    """The executor for ``--engine`` / ``--workers`` / ``--scheduler``.

    ``workers`` defaults to every core (local) or the cluster's workers (dask with ``scheduler``); ``local``
    with one worker runs in this process. ``preload`` names modules the local workers' tasks will need: they are
    imported once, in the fork server the workers start from (see :func:`_start_forkserver`)."""
    if engine not in ENGINES:
        raise ParameterError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ParameterError(f"--workers must be an integer >= 1, got {workers!r}")
    if scheduler is not None and engine != "dask":
        raise ParameterError("--scheduler needs --engine dask")
    if engine == "dask":
        return DaskExecutor(workers, scheduler)
    n = workers or default_workers()
    return Executor(1) if n == 1 else LocalExecutor(n, preload)


def tree_reduce(parts: Iterable[T], combine: Callable[[T, T], T]) -> T:
    """Combine ``parts`` pairwise, level by level (a balanced tree: depth log2(n), each part combined once per
    level). With exact ``combine`` (integer sums) the result does not depend on how the work was split."""
    level = list(parts)
    if not level:
        raise ParameterError("nothing to reduce")
    while len(level) > 1:
        nxt = [combine(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


_ACTIVE: ContextVar[Executor | None] = ContextVar("privpix_executor", default=None)


@contextmanager
def using(executor: Executor) -> Iterator[Executor]:
    """Make ``executor`` the one that work deep inside a call (a synthesizer's embedding sums during ``fit``) is
    spread over, without passing it through every signature."""
    token = _ACTIVE.set(executor)
    try:
        yield executor
    finally:
        _ACTIVE.reset(token)


def active() -> Executor:
    """The executor set by :func:`using`, else this process."""
    return _ACTIVE.get() or Executor(1)
