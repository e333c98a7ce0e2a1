import os
import shutil
import subprocess

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two xdist workers on two cores: each gets one BLAS/OpenMP thread. Two workers of two threads
    # each spin in OpenMP barriers behind each other (the suite took 11 min 54 s that way, 7 min 41 s this way).
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np
import pytest
from hypothesis import settings

from privpix.data import resolve_data_dir
from privpix.errors import DataError
from privpix.privacy import noise

# Property tests draw the same examples on every run: a failure reproduces, and CI cannot fail on a rare example
# one run in a hundred. Explorations with fresh examples set HYPOTHESIS_PROFILE=explore.
settings.register_profile("privpix", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "privpix"))


class ReplayedSecure(noise.SecureRandom):
    """:class:`noise.SecureRandom` with its two entropy calls (``bits64``, ``bytes``) answered by a seeded PCG64.

    Statistical tests of the secure samplers use it so they run the exact secure code path and stay deterministic;
    an unseeded test at level α fails one CI run in 1/α.
    """

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._bits = np.random.Generator(np.random.PCG64(seed))

    def bits64(self, n: int) -> np.ndarray:
        return self._bits.integers(0, 2**64, size=int(n), dtype=np.uint64)

    def bytes(self, n: int) -> bytes:
        return self._bits.bytes(int(n))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "data_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.data)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The suite ends when its last test does: the slow tests go out first, the heaviest of them (those whose
        # `slow` marker says how many seconds they take, `slow(seconds=…)`) before the rest, each group in its files'
        # order, so that short ones fill the end on every worker. xdist's worksteal hands each worker half of the
        # list and moves the tail of one's queue to the other when it runs dry: with only "slow first", the floor
        # of the recommended methods (60 s, late in file order) was stolen last and ran alone at the end while the
        # other worker idled 19 s. Every worker sorts the same way, as xdist requires.
        def order(item) -> tuple[bool, float]:
            slow = item.get_closest_marker("slow")
            return slow is None, -float(slow.kwargs.get("seconds", 0)) if slow is not None else 0.0

        items.sort(key=order)


@pytest.fixture(scope="session", autouse=True)
def shared_face_cache(tmp_path_factory):
    """Every test process, and every command a test starts, keeps the data sets' faces as read at a size in one
    folder of this run (privpix.data.face_cache): CelebA and LFW are decoded once per size and crop, not once per
    test and process (the README's face flow read 4,000 LFW faces, 9 of its 21 s, that other tests had read)."""
    from privpix.data import face_cache

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's root, which every worker shares
    os.environ[face_cache.CACHE_ENV] = str(root / "face-cache")
    yield
    os.environ.pop(face_cache.CACHE_ENV, None)


@pytest.fixture(scope="session")
def data_dir():
    """The staged datasets. Missing, they fail every test that reads them, loudly and with the way out: a suite
    that skips them passes without testing the real data paths."""
    try:
        return resolve_data_dir()
    except DataError as exc:
        pytest.fail(f"real datasets not available: {exc}. Set PRIVPIX_DATA, or deselect the tests that read them "
                    "with -m 'not data'", pytrace=False)  # fmt: skip


@pytest.fixture
def run():
    """Invoke the ``privpix`` CLI in-process; arguments may be any objects (converted with str)."""
    from click.testing import CliRunner

    from privpix.cli import main

    runner = CliRunner()

    def call(*args):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return call


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


# Real read-only and full file systems come from a private mount namespace (root ignores permission bits).
needs_unshare = pytest.mark.skipif(not _can_unshare(), reason="needs `unshare -rm` (user and mount namespaces)")


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny networks: one torch thread beats two on a shared 2-core machine (no OpenMP barrier waits behind other
    processes). Opt in per module with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def digits():
    """The 5,000 offline built-in MNIST digits (a module may define its own ``digits``)."""
    from privpix.data import load_dataset

    return load_dataset("builtin-mnist")


@pytest.fixture(scope="module")
def sixty(digits):
    """60 built-in digits, every class."""
    import numpy as np

    return digits.subset(np.arange(0, 5000, 84))


def strict_loads(text: str):
    """``json.loads`` that fails on ``NaN``/``Infinity``, which are not JSON (``JSON.parse`` refuses them)."""
    import json

    def refuse(token):
        raise AssertionError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def noise_folder(folder, n: int, shape: tuple[int, ...], seed: int = 0):
    """``folder`` holding ``n`` PNGs of seeded uniform noise of ``shape`` ((h, w) grey or (h, w, c)), ``0.png`` on:
    a public set no real image is a copy of, or an input whose only property is its size."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)):
        Image.fromarray(image).save(folder / f"{i}.png")
    return folder


def start_all_waiting_on_the_ledger(ledger, commands, timeout: float = 120.0, program=("-m", "privpix")):
    """Start every ``privpix`` command (argument lists; with ``program=("-c", CODE)``, the arguments of a Python
    script) while holding ``ledger``'s lock, and return once each has said it waits for that lock (then the lock is
    released and they race for it): ``(processes, stderr lines of each)``. This forces the overlap a concurrency
    test needs: without the lock, no command waits and this fails."""
    import sys
    import threading
    import time

    from filelock import FileLock

    lock = FileLock(str(ledger.resolve()) + ".lock")
    lock.acquire()
    procs, errs = [], []
    try:
        for cmd in commands:
            p = subprocess.Popen([sys.executable, *program, *map(str, cmd)], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)  # fmt: skip
            lines: list[str] = []
            threading.Thread(target=lambda p=p, lines=lines: lines.extend(p.stderr), daemon=True).start()
            procs.append(p)
            errs.append(lines)
        deadline = time.time() + timeout
        while not all(any("waiting for the ledger" in ln for ln in lines) for lines in errs):
            assert time.time() < deadline, errs
            assert all(p.poll() is None for p in procs), ("a command did not wait for the ledger", errs)
            time.sleep(0.05)
    finally:
        lock.release()
    return procs, errs


def once_per_run(tmp_path_factory, name: str, make):
    """A folder that ``make(folder)`` fills once per test run, also under xdist, where each worker would otherwise
    make its own (a module fixture is per process, and the tests that read it go to any worker). The workers share
    the run's temporary root: the first to take the lock makes the folder, the others wait for it and read it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        out = tmp_path_factory.mktemp(name)
        make(out)
        return out
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent
    out, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)  # left by a worker whose make failed
            out.mkdir()
            make(out)
            done.touch()
    return out


def kill_a_fit_once_reserved(command, ledger, model):
    """Start the fit ``command`` (a process argument list), SIGKILL it once its reservation is in ``ledger`` and it
    has trained a second, and check what a killed fit must leave: its reservation, counted as spent, and no model
    file at ``model``. Returns the ledger's entry."""
    import signal
    import sys
    import time

    from privpix.privacy.accounting import PrivacyLedger

    proc = subprocess.Popen([sys.executable, *map(str, command)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (ledger.exists() and PrivacyLedger.load(ledger).entries):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.2)
        time.sleep(1.0)  # into the training
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    (entry,) = PrivacyLedger.load(ledger).entries
    assert entry.status == "reserved" and entry.kind == "fit" and not model.exists()
    return entry
