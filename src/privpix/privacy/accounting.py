"""The privacy ledger: every DP event on one dataset charged once, composed tightly, on a locked file.

What is charged (docs/accounting.md): a release that touches the private images (``privpix release``), and a fit
that is itself a DP release (``privpix fit`` of a DP synthesizer or DP-SGD: the noisy embedding or the noisy
training). A release from a fitted model file is post-processing of its fit and is charged nothing, once the fit
is in the ledger. Each entry records the noise its event adds (:data:`privpix.privacy.composition.NoiseEvent`).
A charge is admitted only if the entries with it stay within the budget by the ledger's rule, fixed when it was
created and valid even when each ε is chosen after seeing earlier releases (:mod:`privpix.privacy.filters`: basic
composition, or Gaussian DP for a ledger of Gaussian noise only). The PLD composition of every entry's noise is
shown beside it, labelled as the figure that holds only when no ε was chosen from earlier outputs.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from privpix.errors import (
    BudgetExceededError,
    DataError,
    ParameterError,
    PrivpixError,
    arg,
    check_delta,
    check_positive,
)
from privpix.fileio import write_text_atomic
from privpix.privacy.composition import (
    LEDGER_RELATION,
    NoiseEvent,
    approx,
    compose,
    events_from_dicts,
    gaussian_only,
    replace_one,
)
from privpix.privacy.filters import COMPOSITIONS, DEFAULT_DELTA_BUDGET, Spend, spent_by
from privpix.privacy.guarantees import Guarantee

# What touched the private data: a release, a fit, a model's fit charged afterwards (`privpix ledger charge`).
ENTRY_KINDS = ("release", "fit", "model")
# "reserved" counts while its run may still publish; "released" is a reservation whose run provably published
# nothing (its proof says how that was shown), and counts for nothing.
STATUSES = ("charged", "reserved", "released")


@dataclass
class LedgerEntry:
    """One charge. ``status`` is ``"charged"`` for a finished event and ``"reserved"`` while a release is written
    or a fit trains: a reservation counts against the budget like a charge, so a run killed half-way never gives
    back ε it may have spent.

    ``epsilon`` and ``delta`` are the entry's own cost for one image replaced (the ledger's relation; an add/remove
    guarantee is converted by group privacy), what basic composition adds up. ``events`` is the noise it adds, what
    the PLD composition reads; ``None`` for entries of older ledgers, composed as bare (ε, δ) events."""

    label: str
    epsilon: float
    delta: float
    guarantee: dict
    status: str = "charged"
    # The sharded release (or the fit) a reservation belongs to: `privpix release --resume` finds its reservation by
    # it and charges that one instead of a second.
    run: str = ""
    id: int = 0
    kind: str = "release"
    events: list[NoiseEvent] | None = None
    time: str = ""
    model_sha256: str = ""
    # Why a reservation was released (status "released"): what showed that its run published nothing. A released
    # entry spends nothing; it stays in the file as the record of that decision.
    proof: str = ""
    # The folder a release was written into (resolved): where `privpix ledger drop-unpublished` looks for what a
    # killed run left. Empty for fits and for entries of older ledgers.
    output: str = ""

    def noise(self) -> list[NoiseEvent]:
        """What the composition reads: the declared events, else the entry's (ε, δ) as one bare event."""
        if self.events:
            return list(self.events)
        return [approx(self.epsilon, self.delta)]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "kind": self.kind, "label": self.label, "epsilon": self.epsilon,
                             "delta": self.delta, "status": self.status}  # fmt: skip
        if self.events is not None:
            d["events"] = [e.to_dict() for e in self.events]
        for key in ("run", "time", "model_sha256", "proof", "output"):
            if getattr(self, key):
                d[key] = getattr(self, key)
        d["guarantee"] = self.guarantee
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str) -> LedgerEntry:
        """Validate one entry read from a file: one-line :class:`DataError` naming it when anything is off."""
        if not isinstance(d, dict):
            raise DataError(f"{where}: not an object")
        known = {"label", "epsilon", "delta", "guarantee", "status", "run", "id", "kind", "events", "time",
                 "model_sha256", "proof", "output"}  # fmt: skip
        unknown = set(d) - known
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
        if status not in STATUSES:
            raise DataError(f"{where}: status must be one of {', '.join(STATUSES)}, got {status!r}")
        if status == "released" and not d.get("proof"):
            raise DataError(f"{where}: a released entry must say why (proof)")
        for key in ("run", "time", "model_sha256", "proof", "output"):
            if not isinstance(d.get(key, ""), str):
                raise DataError(f"{where}: {key} must be a string, got {d[key]!r}")
        kind = d.get("kind", "release")
        if kind not in ENTRY_KINDS:
            raise DataError(f"{where}: kind must be one of {', '.join(ENTRY_KINDS)}, got {kind!r}")
        ident = d.get("id", 0)
        if isinstance(ident, bool) or not isinstance(ident, int) or ident < 0:
            raise DataError(f"{where}: id must be a positive integer, got {ident!r}")
        events = d.get("events")
        if events is not None:
            events = events_from_dicts(events, where)
        return cls(label, eps, delta, guarantee, status, d.get("run", ""), ident, kind, events, d.get("time", ""),
                   d.get("model_sha256", ""), d.get("proof", ""), d.get("output", ""))  # fmt: skip


def _number(value: Any, what: str) -> float:
    """A finite non-negative JSON number (not a string, not a boolean), else a DataError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise DataError(f"{what} must be finite and >= 0, got {value!r}")
    return v


def spend_of(entries: list[LedgerEntry], delta: float, composition: str = "basic") -> Spend:
    """:class:`Spend` of ``entries`` at the δ budget ``delta`` by the rule ``composition``
    (:mod:`privpix.privacy.filters`); released reservations spend nothing."""
    live = [e for e in entries if e.status != "released"]
    return spent_by([e.noise() for e in live], [(e.epsilon, e.delta) for e in live], delta, composition)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class PrivacyLedger:
    """Tracks the per-image ε and δ spent on one dataset and refuses an event that would exceed the budget.

    The budget is an (ε, δ) statement for one image and its label replaced, kept even when each release's ε is
    chosen after seeing earlier releases: a charge is admitted only while the entries with it fit the budget by the
    ledger's ``composition`` rule (:mod:`privpix.privacy.filters`). Only sound DP guarantees can be accounted; an
    event whose guarantee is unsound, empirical or none is refused, since no ε can be charged for it. Used on a
    file, go through :func:`open_ledger`, which locks it across check, charge and publish.

    Args:
        epsilon_budget: total per-image ε allowed.
        delta_budget: the δ the budget's ε is stated at (default 10⁻⁵; 0 admits pure ε-DP events only). Pure events
            spend none of it.
        composition: the admission rule, fixed for the ledger's life: ``"basic"`` (basic composition, every kind of
            noise) or ``"gaussian"`` (Gaussian DP, continuous Gaussian noise only; needs ``delta_budget`` > 0).
    """

    epsilon_budget: float
    delta_budget: float = DEFAULT_DELTA_BUDGET
    entries: list[LedgerEntry] = field(default_factory=list)
    next_id: int = 1
    composition: str = "basic"

    def __post_init__(self) -> None:
        self.epsilon_budget = check_positive("epsilon_budget", self.epsilon_budget)
        self.delta_budget = check_delta(self.delta_budget)
        if self.composition not in COMPOSITIONS:
            raise ParameterError(
                f"{arg('--composition', 'composition')} must be one of {', '.join(COMPOSITIONS)}, "
                f"got {self.composition!r}"
            )
        if self.composition == "gaussian" and self.delta_budget == 0:
            raise ParameterError(
                f"{arg('--composition', 'composition')} gaussian needs a δ budget > 0 "
                f"({arg('--delta-budget', 'delta_budget')}): no Gaussian is ε-DP at δ = 0"
            )

    @property
    def spent(self) -> Spend:
        """What every entry (charges and reservations) spends together by the ledger's rule, with the PLD figure
        beside it (computed on each read)."""
        return spend_of(self.entries, self.delta_budget, self.composition)

    @property
    def spent_epsilon(self) -> float:
        """The per-image ε spent: ``spent.epsilon``."""
        return self.spent.epsilon

    @property
    def remaining_epsilon(self) -> float:
        """The per-image ε left: the budget less ``spent_epsilon``."""
        return self.epsilon_budget - self.spent_epsilon

    def entry(self, ident: int) -> LedgerEntry | None:
        return next((e for e in self.entries if e.id == ident), None)

    def entry_for_model(self, sha256: str) -> LedgerEntry | None:
        """The entry that charged the fit of the model file whose SHA-256 is ``sha256``, if any."""
        return next((e for e in self.entries if sha256 and e.model_sha256 == sha256), None)

    def _proposed(self, guarantee: Guarantee, events: list[NoiseEvent] | None, label: str, status: str, run: str,
                  kind: str, model_sha256: str, output: str = "") -> LedgerEntry:  # fmt: skip
        if not guarantee.is_dp:
            raise BudgetExceededError(
                f"cannot charge an event whose guarantee is {guarantee.short()!r}: only sound DP releases and fits "
                "have an ε to charge"
            )
        assert guarantee.per_image_epsilon is not None  # sound guarantees always state it
        relations = {e.relation for e in events or ()}
        if len(relations) > 1:
            # Events of both relations: a mechanism that composed them itself into a replace-one claim (dp-teacher's
            # embedding and DP-SGD steps). Its ε needs no doubling, but only if its events prove it under replace-one.
            if compose(list(events or ()), guarantee.delta)[0] > guarantee.per_image_epsilon * (1 + 1e-9):
                raise BudgetExceededError(
                    f"events stated for {sorted(relations)} do not compose to the claimed replace-one "
                    f"ε={guarantee.per_image_epsilon:g} at δ={guarantee.delta:g}"
                )
            relations = {LEDGER_RELATION}
        relation = relations.pop() if relations else LEDGER_RELATION
        eps, delta = replace_one(guarantee.per_image_epsilon, guarantee.delta, relation)
        return LedgerEntry(label, eps, delta, guarantee.to_dict(), status, run, self.next_id, kind,
                           list(events) if events else None, _now(), model_sha256, output=output)  # fmt: skip

    def check(self, guarantee: Guarantee, events: list[NoiseEvent] | None = None, kind: str = "release") -> Spend:
        """Raise unless an event with ``guarantee`` (adding ``events``; default: its bare (ε, δ)) fits the budget;
        returns what the ledger would then spend. ``kind`` (release, fit) words the refusal."""
        entry = self._proposed(guarantee, events, "", "reserved", "", kind, "")
        return self._admit(entry)

    def _admit(self, entry: LedgerEntry) -> Spend:
        tol = 1e-9
        before = self.spent
        after = spend_of([*self.entries, entry], self.delta_budget, self.composition)
        if after.epsilon <= self.epsilon_budget * (1 + tol):
            return after
        what = {"fit": "fit", "model": "the model's fit"}.get(entry.kind, "release")
        needs = f"{what} needs per-image ε={entry.epsilon:.4g}" + (f", δ={entry.delta:g}" if entry.delta else "")
        if entry.events and {e.relation for e in entry.events} == {"add-remove"}:
            needs += " (its add/remove guarantee, doubled by group privacy for one image replaced)"
        noise = entry.noise()
        if self.composition == "gaussian" and not gaussian_only(noise):
            raise BudgetExceededError(
                f"{needs}, but its noise ({', '.join(e.describe() for e in noise)}) is not continuous Gaussian noise, "
                "and this ledger composes Gaussian noise only, by Gaussian DP: a rule fixed when it was created"
            )
        if not math.isfinite(after.epsilon):
            spent = before.basic_delta
            why = (
                f"the ledger's δ budget ({arg('--delta-budget', 'delta_budget')}) is 0, so only pure ε-DP events "
                "can be charged"
                if self.delta_budget == 0
                else f"basic composition adds up δ: {spent:.3g} of the δ budget {self.delta_budget:g} is spent, "
                f"{max(0.0, self.delta_budget - spent):.3g} remains"
            )
            raise BudgetExceededError(f"{needs}, but {why}; a ledger's budgets are fixed when it is created: "
                                      f"{self._new_ledger_hint(entry)}")  # fmt: skip
        remains = max(0.0, self.epsilon_budget - before.epsilon)
        text = (
            f"{needs} (with it the ledger would have spent ε={after.epsilon:.4g} at δ={after.delta:g}, "
            f"{after.accountant}) but only {remains:.4g} of {self.epsilon_budget:.4g} remains"
        )
        if self.composition == "basic" and after.non_adaptive_epsilon <= self.epsilon_budget * (1 + tol):
            text += (
                f"; the PLD composition (ε={after.non_adaptive_epsilon:.4g}) would fit, but it holds only if no ε "
                "was chosen after seeing an earlier release"
            )
            if all(gaussian_only(e.noise()) for e in [*self.entries, entry] if e.status != "released"):
                rule = arg("--composition gaussian", 'composition="gaussian"')
                text += f"; a ledger created with {rule} composes Gaussian noise by Gaussian DP, which holds either way"
        raise BudgetExceededError(text)

    def _new_ledger_hint(self, entry: LedgerEntry) -> str:
        """How to create a ledger with room for this event: a δ budget for as many such events as its ε budget
        admits, and the Gaussian-DP rule when the event is Gaussian noise."""
        k = max(1, int(self.epsilon_budget / entry.epsilon * (1 + 1e-9))) if entry.epsilon > 0 else 1
        delta = f"{entry.delta * k:.2g}" if entry.delta else "1e-5"
        hint = arg(f"`privpix ledger create FILE --budget {self.epsilon_budget:g} --delta-budget {delta}`",
                   f"PrivacyLedger({self.epsilon_budget:g}, {delta}).save(path)")  # fmt: skip
        hint += f" has room for {k} such charge{'s' if k > 1 else ''} by basic composition"
        if gaussian_only(entry.noise()):
            hint += arg("; with --composition gaussian", '; with composition="gaussian"')
            hint += ", Gaussian noise is composed by Gaussian DP, where δ does not add up"
        return hint

    def spend(
        self,
        guarantee: Guarantee,
        label: str = "",
        status: str = "charged",
        run: str = "",
        *,
        events: list[NoiseEvent] | None = None,
        kind: str = "release",
        model_sha256: str = "",
        output: str = "",
    ) -> LedgerEntry:
        """Charge an event; raises :class:`BudgetExceededError` (and records nothing) if over budget. ``output``: the
        folder a release writes into (where a killed run's staging would be)."""
        entry = self._proposed(guarantee, events, label, status, run, kind, model_sha256, output)
        self._admit(entry)
        self.entries.append(entry)
        self.next_id += 1
        return entry

    def to_dict(self) -> dict:
        return {
            "format": LEDGER_FORMAT,
            "epsilon_budget": self.epsilon_budget,
            "delta_budget": self.delta_budget,
            "composition": self.composition,
            "relation": "replace-one: one image and its label replaced; the number of images is public",
            "spent": self.spent.to_dict(),
            "next_id": self.next_id,
            "entries": [e.to_dict() for e in self.entries],
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
        """Read and validate a ledger file (this format or an earlier one: the first's entries become bare (ε, δ)
        events; a ledger written before the rule was recorded composes by Gaussian DP when it holds Gaussian noise
        only, else by basic composition); every problem is a one-line :class:`DataError` naming the entry."""
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
        entries = [LedgerEntry.from_dict(e, f"{p}: entry {i + 1}") for i, e in enumerate(raw)]
        live = [e for e in entries if e.status != "released"]
        composition = d.get("composition")
        if composition is None:
            # Written before the rule was recorded: its entries were admitted by the PLD composition. The rule that
            # keeps most of them valid under adaptive choice is the one their noise allows.
            gaussian = live and delta_budget > 0 and all(gaussian_only(e.noise()) for e in live)
            composition = "gaussian" if gaussian else "basic"
        if composition not in COMPOSITIONS:
            raise DataError(f"{p}: composition must be one of {', '.join(COMPOSITIONS)}, got {composition!r}")
        if composition == "gaussian":
            if delta_budget == 0:
                raise DataError(f"{p}: a Gaussian-DP ledger (composition gaussian) needs delta_budget > 0")
            for i, e in enumerate(entries):
                if e.status != "released" and not gaussian_only(e.noise()):
                    raise DataError(f"{p}: entry {i + 1} is not continuous Gaussian noise, which a Gaussian-DP ledger "
                                    "(composition gaussian) cannot hold")  # fmt: skip
        ledger = cls(budget, delta_budget, composition=composition)
        ledger.entries = entries
        # Entries of the first format have no id: numbered by position, after any that have one.
        top = max((e.id for e in ledger.entries), default=0)
        for e in ledger.entries:
            if e.id == 0:
                top += 1
                e.id = top
        ids = [e.id for e in ledger.entries]
        if len(set(ids)) != len(ids):
            raise DataError(f"{p}: two entries have the same id")
        next_id = d.get("next_id", top + 1)
        if isinstance(next_id, bool) or not isinstance(next_id, int):
            raise DataError(f"{p}: next_id must be an integer, got {next_id!r}")
        ledger.next_id = max(next_id, top + 1)
        return ledger


# 3: the admission rule ("composition") and each release's folder ("output") are recorded; 2: entries have ids and
# noise events; 1: bare (ε, δ) entries.
LEDGER_FORMAT = "privpix-ledger-3"


class LedgerSession:
    """A ledger file held under its lock; see :func:`open_ledger`."""

    def __init__(self, path: Path, ledger: PrivacyLedger) -> None:
        self.path = path
        self.ledger = ledger

    def add(
        self,
        guarantee: Guarantee,
        label: str = "",
        *,
        run: str = "",
        status: str = "reserved",
        events: list[NoiseEvent] | None = None,
        kind: str = "release",
        model_sha256: str = "",
        output: str = "",
    ) -> LedgerEntry:
        """Check and record an entry, saved before this returns (nothing recorded if over budget or unwritable)."""
        entry = self.ledger.spend(guarantee, label, status=status, run=run, events=events, kind=kind,
                                  model_sha256=model_sha256, output=output)  # fmt: skip
        try:
            self.ledger.save(self.path)
        except BaseException:
            self.ledger.entries.remove(entry)
            self.ledger.next_id -= 1
            raise
        return entry

    @contextmanager
    def reserve(self, guarantee: Guarantee, label: str = "", run: str = "",
                events: list[NoiseEvent] | None = None, output: str = "") -> Iterator[Reservation]:  # fmt: skip
        """Check and record the charge *before* anything is written, as a reservation on disk (with ``output``, the
        folder the release writes into).

        On normal exit the reservation becomes a charge. On an exception it is rolled back only if the caller
        never called :meth:`Reservation.published`; once a release may be visible the charge stays. A process
        killed inside the block leaves the reservation on disk: it keeps counting, which never overspends."""
        entry = self.add(guarantee, label, run=run, events=events, output=output)
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
    def resume(self, guarantee: Guarantee, run: str, label: str = "",
               events: list[NoiseEvent] | None = None, output: str = "") -> Iterator[Reservation]:  # fmt: skip
        """The reservation an interrupted run ``run`` left, to be finished by its resumed run: nothing new is
        charged; on normal exit the reservation becomes a charge, and an exception leaves it as it is (it counts
        as spent, as a killed run's does). A run stopped by an error rolled its reservation back (nothing was
        published); its resumed run then reserves afresh, as :meth:`reserve` does."""
        found = [e for e in self.ledger.entries if e.run == run and e.status == "reserved"]
        if not found:
            with self.reserve(guarantee, label, run=run, events=events, output=output) as res:
                yield res
            return
        entry = found[0]
        if entry.guarantee != guarantee.to_dict():
            raise ParameterError(f"--resume: the ledger's reservation for run {run} is for another guarantee")
        res = Reservation(entry, is_published=True)
        yield res
        entry.status = "charged"
        self.ledger.save(self.path)

    def drop(self, run: str, proof: str = "") -> int:
        """Release the reservations of run ``run``, whose work was discarded before anything of it was published
        (its staging removed, no commit journal): it spent nothing. With ``proof`` (how that was shown) each entry
        stays, as ``released`` with its proof; without, it is removed (a fit stopped before it wrote any file).
        Returns how many were released."""
        gone = [e for e in self.ledger.entries if e.run == run and e.status == "reserved"]
        if gone:
            if proof:
                for e in gone:
                    e.status, e.proof = "released", f"{proof} ({_now()})"
            else:
                self.ledger.entries = [e for e in self.ledger.entries if e not in gone]
            self.ledger.save(self.path)
        return len(gone)

    def finish(self, ident: int, model_sha256: str = "", run: str | None = None) -> LedgerEntry:
        """Turn the fit's reservation ``ident`` into a charge, recording the SHA-256 of the model file it wrote.
        Refused unless the entry is still that fit's reservation (its ``run`` when given): a ledger edited or
        recreated meanwhile must not lend its entry to the model."""
        entry = self.ledger.entry(ident)
        if (
            entry is None
            or entry.kind != "fit"
            or entry.status != "reserved"
            or entry.model_sha256
            or (run is not None and entry.run != run)
        ):
            raise DataError(
                f"{self.path}: entry {ident} is not the reservation this fit made (the ledger was changed while it "
                "ran); no model file was written"
            )
        entry.status = "charged"
        if model_sha256:
            entry.model_sha256 = model_sha256
        self.ledger.save(self.path)
        return entry


def release_unpublished(
    ledger: str | os.PathLike | None, run: object, proof: str, note: Callable[[str], None] | None = None
) -> int:
    """Release, in ``ledger``, the reservation of the sharded run ``run`` whose work was shown to be unpublished:
    its staging was removed without a commit, so nothing of it was published and its noisy files never left the
    owner-only staging folder. ``proof`` says how that was shown; the entry stays, as ``released`` with it. Returns
    how many were released; a ledger that is gone or cannot be read is left as it is (the reservation keeps
    counting: never an overspend)."""
    if not ledger or not isinstance(run, str) or not Path(ledger).is_file():
        return 0
    try:
        with open_ledger(ledger, wait=note) as session:
            released = session.drop(run, proof=f"its run {run} published nothing: {proof}")
    except (PrivpixError, OSError) as exc:
        if note is not None:
            note(f"{ledger}: could not release the interrupted run's reservation ({exc}); it keeps counting")
        return 0
    if released and note is not None:
        note(f"the interrupted run's reservation in {ledger} was released (nothing of it was published)")
    return released


class FitCharge:
    """The reservation of a fit that is a DP release (:func:`reserved_fit`): ``ref`` goes into the model file,
    :meth:`finish` records the file's SHA-256 and turns the reservation into a charge."""

    def __init__(self, path: Path, entry: int, run: str, wait: Callable[[str], None] | None) -> None:
        self.path, self.entry, self.run, self.wait = path, entry, run, wait
        self.finished = False
        self.spent: Spend | None = None

    def ref(self) -> dict[str, Any]:
        """What the model file records of its charge: the ledger's resolved path, the entry id and the fit's run."""
        return {"path": str(self.path), "entry": self.entry, "run": self.run}

    def finish(self, model_sha256: str) -> LedgerEntry:
        with open_ledger(self.path, wait=self.wait) as session:
            entry = session.finish(self.entry, model_sha256, run=self.run)
            self.spent = session.ledger.spent
        self.finished = True
        return entry


@contextmanager
def reserved_fit(
    path: str | os.PathLike,
    guarantee: Guarantee,
    events: list[NoiseEvent] | None,
    label: str,
    *,
    budget: float | None = None,
    delta_budget: float | None = None,
    wait: Callable[[str], None] | None = None,
) -> Iterator[FitCharge]:
    """Charge a fit that is a DP release, by the protocol of a release: the charge is checked and saved as a
    reservation under the ledger's lock before the block runs (over budget: refused, nothing trained); the lock is
    then released, so a long fit does not hold up the ledger (the reservation counts for everyone meanwhile). The
    block trains, writes the model file and calls :meth:`FitCharge.finish` with its SHA-256. An exception or
    Ctrl-C before that removes the reservation (nothing left the process: no model file was written); a killed
    fit leaves it, and it keeps counting."""
    run = uuid.uuid4().hex
    with open_ledger(path, budget=budget, delta_budget=delta_budget, wait=wait) as session:
        entry = session.add(guarantee, label, run=run, events=events, kind="fit")
        resolved = session.path
    charge = FitCharge(resolved, entry.id, run, wait)
    try:
        yield charge
    except BaseException as exc:
        if not charge.finished:
            try:
                with open_ledger(resolved, wait=wait) as session:
                    session.drop(run)
            except Exception as drop_error:  # the reservation stays, and counts: never an overspend
                raise exc from drop_error
        raise
    if not charge.finished:
        raise AssertionError("reserved_fit: the block returned without finishing its charge")


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
    composition: str | None = None,
    wait: Callable[[str], None] | None = None,
) -> Iterator[LedgerSession]:
    """Lock the ledger file at ``path`` for the whole block, then load it (or create it with ``budget``, δ budget
    ``delta_budget`` (default 10⁻⁵) and the rule ``composition`` (default basic); it is written at its first
    charge).

    The lock (``PATH.lock``, an OS file lock that dies with its process) is held across check, charge and
    publish, so concurrent releases on one ledger run one after the other and can never overspend it.
    A ``budget``, ``delta_budget`` or ``composition`` that differs from an existing ledger's is an error, never
    ignored. ``wait`` is told once when another process holds the lock."""
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
                wait(f"waiting for the ledger {p}: another process holds it")
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
            if composition is not None and composition != ledger.composition:
                raise ParameterError(
                    f"{arg('--composition', 'composition')} {composition} differs from the rule "
                    f"{ledger.composition} recorded in the ledger {p}; a ledger's rule is fixed when it is created"
                )
        elif budget is None:
            raise ParameterError(f"--ledger {p}: file does not exist; give --budget to start a new ledger")
        else:
            ledger = PrivacyLedger(budget, DEFAULT_DELTA_BUDGET if delta_budget is None else delta_budget,
                                   composition=composition or "basic")  # fmt: skip
        yield LedgerSession(p, ledger)
    finally:
        lock.release()
