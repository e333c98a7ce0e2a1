"""Budget accounting across releases of the same data (basic sequential composition), on a locked file."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from privpix.errors import BudgetExceededError, DataError, ParameterError, check_delta, check_positive
from privpix.guarantees import Guarantee


@dataclass
class LedgerEntry:
    """One charge. ``status`` is ``"charged"`` for a finished release and ``"reserved"`` while a release is being
    written: a reservation counts against the budget like a charge, so a run killed half-way never gives back ε
    it may have spent."""

    label: str
    epsilon: float
    delta: float
    guarantee: dict
    status: str = "charged"
    # The sharded release a reservation belongs to: `privpix release --resume` finds its reservation by it and
    # charges that one instead of a second.
    run: str = ""

    @classmethod
    def from_dict(cls, d: Any, where: str) -> LedgerEntry:
        """Validate one entry read from a file: one-line :class:`DataError` naming it when anything is off."""
        if not isinstance(d, dict):
            raise DataError(f"{where}: not an object")
        unknown = set(d) - {"label", "epsilon", "delta", "guarantee", "status", "run"}
        if unknown:
            raise DataError(f"{where}: unknown field(s) {sorted(unknown)}")
        label = d.get("label", "")
        if not isinstance(label, str):
            raise DataError(f"{where}: label must be a string, got {label!r}")
        eps = _number(d.get("epsilon"), f"{where}: epsilon")
        delta = _number(d.get("delta", 0.0), f"{where}: delta")
        if delta >= 1.0:
            raise DataError(f"{where}: delta must be in [0, 1), got {delta!r}")
        guarantee = d.get("guarantee", {})
        if not isinstance(guarantee, dict):
            raise DataError(f"{where}: guarantee must be an object")
        status = d.get("status", "charged")
        if status not in ("charged", "reserved"):
            raise DataError(f"{where}: status must be 'charged' or 'reserved', got {status!r}")
        run = d.get("run", "")
        if not isinstance(run, str):
            raise DataError(f"{where}: run must be a string, got {run!r}")
        return cls(label, eps, delta, guarantee, status, run)


def _number(value: Any, what: str) -> float:
    """A finite non-negative JSON number (not a string, not a boolean), else a DataError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise DataError(f"{what} must be finite and >= 0, got {value!r}")
    return v


@dataclass
class PrivacyLedger:
    """Tracks the per-image ε and δ spent on one dataset and refuses a release that would exceed the budget.

    Composition is basic sequential composition: ε and δ add up. Only sound DP guarantees can be accounted;
    a release whose guarantee is unsound, empirical or none is refused, since no ε can be charged for it.
    Used on a file, go through :func:`open_ledger`, which locks it across check, charge and publish.

    Args:
        epsilon_budget: total per-image ε allowed.
        delta_budget: total δ allowed (0 for pure DP).
    """

    epsilon_budget: float
    delta_budget: float = 0.0
    entries: list[LedgerEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.epsilon_budget = check_positive("epsilon_budget", self.epsilon_budget)
        self.delta_budget = check_delta(self.delta_budget)

    @property
    def spent_epsilon(self) -> float:
        return float(math.fsum(e.epsilon for e in self.entries))

    @property
    def spent_delta(self) -> float:
        return float(math.fsum(e.delta for e in self.entries))

    @property
    def remaining_epsilon(self) -> float:
        return self.epsilon_budget - self.spent_epsilon

    def check(self, guarantee: Guarantee) -> None:
        """Raise unless ``guarantee`` can be charged within the remaining budget."""
        if not guarantee.is_dp:
            raise BudgetExceededError(
                f"cannot account a release whose guarantee is {guarantee.short()!r}: only sound DP releases "
                "have an ε to charge"
            )
        eps = guarantee.per_image_epsilon
        assert eps is not None  # sound guarantees always state it
        tol = 1e-12
        if self.spent_epsilon + eps > self.epsilon_budget + tol:
            raise BudgetExceededError(
                f"release needs per-image ε={eps:.4g} but only {self.remaining_epsilon:.4g} of "
                f"{self.epsilon_budget:.4g} remains"
            )
        if self.spent_delta + guarantee.delta > self.delta_budget + tol:
            raise BudgetExceededError(
                f"release needs δ={guarantee.delta:g} but only {self.delta_budget - self.spent_delta:g} remains"
            )

    def spend(self, guarantee: Guarantee, label: str = "", status: str = "charged", run: str = "") -> LedgerEntry:
        """Charge a release; raises :class:`BudgetExceededError` (and records nothing) if over budget."""
        self.check(guarantee)
        entry = LedgerEntry(
            label, float(guarantee.per_image_epsilon), float(guarantee.delta), guarantee.to_dict(), status, run
        )
        self.entries.append(entry)
        return entry

    def to_dict(self) -> dict:
        return {
            "format": LEDGER_FORMAT,
            "epsilon_budget": self.epsilon_budget,
            "delta_budget": self.delta_budget,
            "spent_epsilon": self.spent_epsilon,
            "spent_delta": self.spent_delta,
            "entries": [{k: v for k, v in e.__dict__.items() if k != "run" or v} for e in self.entries],
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (temporary file, then rename)."""
        p = Path(path)
        try:
            write_text_atomic(p, json.dumps(self.to_dict(), indent=2, allow_nan=False))
        except OSError as exc:
            raise DataError(f"{p}: cannot write the ledger ({exc.strerror or exc})") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> PrivacyLedger:
        """Read and validate a ledger file; every problem is a one-line :class:`DataError` naming the entry."""
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise DataError(f"{p}: cannot read the ledger ({exc.strerror or exc})") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise DataError(f"{p}: not a privpix ledger file ({type(exc).__name__}: {exc})") from None
        if not isinstance(d, dict) or "epsilon_budget" not in d:
            raise DataError(f"{p}: not a privpix ledger file (no epsilon_budget)")
        budget = _number(d["epsilon_budget"], f"{p}: epsilon_budget")
        delta_budget = _number(d.get("delta_budget", 0.0), f"{p}: delta_budget")
        if budget <= 0 or delta_budget >= 1:
            raise DataError(f"{p}: budgets out of range (epsilon_budget > 0, delta_budget in [0, 1) expected)")
        raw = d.get("entries", [])
        if not isinstance(raw, list):
            raise DataError(f"{p}: entries must be a list")
        ledger = cls(budget, delta_budget)
        ledger.entries = [LedgerEntry.from_dict(e, f"{p}: entry {i + 1}") for i, e in enumerate(raw)]
        return ledger


LEDGER_FORMAT = "privpix-ledger-1"


class LedgerSession:
    """A ledger file held under its lock; see :func:`open_ledger`."""

    def __init__(self, path: Path, ledger: PrivacyLedger) -> None:
        self.path = path
        self.ledger = ledger

    @contextmanager
    def reserve(self, guarantee: Guarantee, label: str = "", run: str = "") -> Iterator[Reservation]:
        """Check and record the charge *before* anything is written, as a reservation on disk.

        On normal exit the reservation becomes a charge. On an exception it is rolled back only if the caller
        never called :meth:`Reservation.published`; once a release may be visible the charge stays. A process
        killed inside the block leaves the reservation on disk: it keeps counting, which never overspends."""
        entry = self.ledger.spend(guarantee, label, status="reserved", run=run)
        try:
            self.ledger.save(self.path)
        except BaseException:
            self.ledger.entries.remove(entry)
            raise
        res = Reservation(entry)
        try:
            yield res
        except BaseException:
            if not res.is_published:
                self.ledger.entries.remove(entry)
                self.ledger.save(self.path)
            else:
                entry.status = "charged"
                self.ledger.save(self.path)
            raise
        entry.status = "charged"
        self.ledger.save(self.path)

    @contextmanager
    def resume(self, guarantee: Guarantee, run: str, label: str = "") -> Iterator[Reservation]:
        """The reservation an interrupted run ``run`` left, to be finished by its resumed run: nothing new is
        charged; on normal exit the reservation becomes a charge, and an exception leaves it as it is (it counts
        as spent, as a killed run's does). A run stopped by an error rolled its reservation back (nothing was
        published); its resumed run then reserves afresh, as :meth:`reserve` does."""
        found = [e for e in self.ledger.entries if e.run == run and e.status == "reserved"]
        if not found:
            with self.reserve(guarantee, label, run=run) as res:
                yield res
            return
        entry = found[0]
        if entry.guarantee != guarantee.to_dict():
            raise ParameterError(f"--resume: the ledger's reservation for run {run} is for another guarantee")
        res = Reservation(entry, is_published=True)
        yield res
        entry.status = "charged"
        self.ledger.save(self.path)

    def drop(self, run: str) -> int:
        """Remove the reservations of run ``run``, whose work was discarded before anything of it was published
        (its staging removed, no commit journal): it spent nothing. Returns how many were removed."""
        gone = [e for e in self.ledger.entries if e.run == run and e.status == "reserved"]
        if gone:
            self.ledger.entries = [e for e in self.ledger.entries if e not in gone]
            self.ledger.save(self.path)
        return len(gone)


@dataclass
class Reservation:
    entry: LedgerEntry
    is_published: bool = False

    def published(self) -> None:
        """Mark the release as (about to be) visible: from now on the charge is never rolled back."""
        self.is_published = True


@contextmanager
def open_ledger(
    path: str | os.PathLike,
    *,
    budget: float | None = None,
    delta_budget: float | None = None,
    wait: Callable[[str], None] | None = None,
) -> Iterator[LedgerSession]:
    """Lock the ledger file at ``path`` for the whole block, then load it (or create it with ``budget``).

    The lock (``PATH.lock``, an OS file lock that dies with its process) is held across check, charge and
    publish, so concurrent releases on one ledger run one after the other and can never overspend it.
    A ``budget`` (or ``delta_budget``) that differs from an existing ledger's is an error, never ignored.
    ``wait`` is told once when another process holds the lock."""
    given = Path(path)
    # One ledger, one lock: every name of the file (a symbolic link) must lock and write the same file.
    p = given.expanduser().resolve()
    if p.exists() and not p.is_file():
        raise ParameterError(f"--ledger {given}: is not a file")
    if p.exists() and p.stat().st_nlink > 1:
        raise ParameterError(
            f"--ledger {given}: has {p.stat().st_nlink} hard links; a ledger must have one name, or releases "
            "charged through another name would not see each other"
        )
    if not p.parent.is_dir():
        raise ParameterError(f"--ledger {p}: folder {p.parent} does not exist")
    lock = FileLock(str(p) + ".lock")
    try:
        try:
            lock.acquire(timeout=1)
        except Timeout:
            if wait is not None:
                wait(f"waiting for the ledger {p}: another release holds it")
            lock.acquire()
    except OSError as exc:
        raise DataError(
            f"--ledger {p}: cannot lock the ledger ({exc.strerror or exc}); nothing was published"
        ) from None
    try:
        if p.exists():
            ledger = PrivacyLedger.load(p)
            if budget is not None and not math.isclose(budget, ledger.epsilon_budget, rel_tol=1e-12, abs_tol=0):
                raise ParameterError(
                    f"--budget {budget:g} differs from the budget {ledger.epsilon_budget:g} recorded in the ledger "
                    f"{p}; a ledger's budget is fixed when it is created (omit --budget to use it)"
                )
            if delta_budget is not None and not math.isclose(delta_budget, ledger.delta_budget, abs_tol=0):
                raise ParameterError(
                    f"--delta-budget {delta_budget:g} differs from the δ budget {ledger.delta_budget:g} recorded in "
                    f"the ledger {p}"
                )
        elif budget is None:
            raise ParameterError(f"--ledger {p}: file does not exist; give --budget to start a new ledger")
        else:
            ledger = PrivacyLedger(budget, delta_budget or 0.0)
        yield LedgerSession(p, ledger)
    finally:
        lock.release()


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one, never a part."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would (0666 minus umask).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
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
