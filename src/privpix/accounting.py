"""Budget accounting across releases of the same data (basic sequential composition)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from privpix.errors import BudgetExceededError, ParameterError, check_delta, check_positive
from privpix.guarantees import Guarantee


@dataclass
class LedgerEntry:
    label: str
    epsilon: float
    delta: float
    guarantee: dict


@dataclass
class PrivacyLedger:
    """Tracks the per-image ε and δ spent on one dataset and refuses a release that would exceed the budget.

    Composition is basic sequential composition: ε and δ add up. Only sound DP guarantees can be accounted;
    a release whose guarantee is unsound, empirical or none is refused, since no ε can be charged for it.

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
        return float(sum(e.epsilon for e in self.entries))

    @property
    def spent_delta(self) -> float:
        return float(sum(e.delta for e in self.entries))

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

    def spend(self, guarantee: Guarantee, label: str = "") -> LedgerEntry:
        """Charge a release; raises :class:`BudgetExceededError` (and records nothing) if over budget."""
        self.check(guarantee)
        entry = LedgerEntry(label, float(guarantee.per_image_epsilon), float(guarantee.delta), guarantee.to_dict())
        self.entries.append(entry)
        return entry

    def to_dict(self) -> dict:
        return {
            "epsilon_budget": self.epsilon_budget,
            "delta_budget": self.delta_budget,
            "spent_epsilon": self.spent_epsilon,
            "spent_delta": self.spent_delta,
            "entries": [e.__dict__ for e in self.entries],
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (temporary file, then rename)."""
        write_text_atomic(Path(path), json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, path: str | os.PathLike) -> PrivacyLedger:
        p = Path(path)
        try:
            d = json.loads(p.read_text())
            ledger = cls(d["epsilon_budget"], d.get("delta_budget", 0.0))
            ledger.entries = [LedgerEntry(**e) for e in d.get("entries", [])]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ParameterError(f"{p}: not a privpix ledger file ({exc})") from None
        return ledger


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
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
