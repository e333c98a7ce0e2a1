"""Publishing under a privacy ledger: the one protocol that ``privpix.release``, ``privpix release`` and
``privpix ldp perturb`` share.

The order is what keeps the ledger's promise (docs/security.md): the ledger is locked and the charge reserved on
disk before any file is written; the release is staged and swapped in atomically; the reservation becomes a charge
once the release may be visible, and is rolled back only if nothing was published. A process killed in between
leaves the reservation on disk, where it keeps counting: a killed run may have published. A release from a model
file whose fit was itself a DP release is post-processing of that fit: it charges nothing, but only under a ledger
that holds the fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from privpix.errors import BudgetExceededError, DataError, ParameterError, arg
from privpix.privacy.guarantees import Guarantee

if TYPE_CHECKING:
    from privpix.executor import Executor
    from privpix.privacy.accounting import LedgerEntry, LedgerSession, PrivacyLedger
    from privpix.privacy.composition import NoiseEvent
    from privpix.publishing.shards import ShardedRelease

# What the release callback receives: ``on_published`` (called once the release may be visible) and the ledger
# session held meanwhile (``None`` without a ledger); it returns the manifest.
Publish = Callable[..., dict[str, Any]]


def resolved(ledger: str | Path | None) -> str | None:
    """The path a ledger is recorded under (in a release's plan): absolute, links resolved, or ``None``."""
    return None if ledger is None else str(Path(ledger).expanduser().resolve())


def publish_job(
    job: ShardedRelease,
    output: str | Path,
    executor: Executor,
    *,
    expect: Guarantee | None = None,
    ledger: str | Path | None = None,
    budget: float | None = None,
    delta_budget: float | None = None,
    label: str = "",
    resume: bool = False,
    resumable: bool = True,
    force: bool = False,
    inputs: Sequence[str | Path] = (),
    source_map: str | Path | None = None,
    metadata: dict[str, Any] | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_skip: Callable[[str, str], None] | None = None,
    on_published: Callable[[], None] | None = None,
    note: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], PrivacyLedger | None]:
    """Plan ``job``, charge ``ledger`` (or take over the reservation of the interrupted run being resumed),
    release into ``output``, and return ``(manifest, ledger as it stands after the release, or None)``.

    ``expect`` is the guarantee planned and checked on every block (default: the guarantee of a release of the
    job's shape); the ledger is charged for it as the manifest states it, with its noise's caveat. ``resume``
    continues the interrupted release in ``output``, which must have been started with the same ledger.
    ``budget``/``delta_budget`` create a new ledger file (and must match an existing one's). What the
    ledger did goes into the manifest (``metadata["ledger"]``)."""
    from privpix.mechanisms.base import ModelFile
    from privpix.publishing.shards import read_plan, stated_guarantee

    mech = job.mechanism
    planned = expect if expect is not None else mech.privacy(job.shape).guarantee
    # What the ledger is charged for and the manifest states: the planned guarantee with its noise's caveat. The
    # shards are checked against the planned one, which is what each block's release computes.
    guarantee = stated_guarantee(mech, planned, job.secure, job.seed)
    if ledger is None and (budget is not None or delta_budget is not None):
        raise ParameterError(arg("--budget and --delta-budget need --ledger FILE",
                                 "a budget (budget, delta_budget) needs a ledger file (ledger)"))  # fmt: skip
    ledger_path = resolved(ledger)
    earlier = read_plan(output) if resume else None
    if resume:
        if earlier is None:
            raise ParameterError(f"--resume: {output} holds no interrupted release to continue")
        if earlier.get("ledger") != ledger_path:
            want = f"--ledger {earlier['ledger']}" if earlier.get("ledger") else "no --ledger"
            raise ParameterError(f"--resume: the interrupted run was started with {want}; resume it the same way")
    plan = job.plan(executor.workers, run=earlier["run"] if earlier else None, ledger=ledger_path)
    if not resumable:  # a caller without a resume of its own: its failure must not suggest one
        plan.update(resumable=False, why_not_resumable="")

    def run(published: Callable[[], None] | None = None, session: LedgerSession | None = None) -> dict[str, Any]:
        def discard(earlier_plan: dict[str, Any]) -> None:
            # An interrupted run's unpublished work was removed: its reservation on this ledger spent nothing.
            if session is None or earlier_plan.get("ledger") != ledger_path:
                return
            run_id = earlier_plan["run"]
            proof = f"its run {run_id} published nothing: a later release removed its staging in {output} uncommitted"
            if session.drop(run_id, proof=proof) and note is not None:
                note(f"the interrupted run's reservation in {ledger} was released (nothing of it was published)")

        def visible() -> None:
            if published is not None:
                published()
            if on_published is not None:
                on_published()

        return job.run(output, executor, expect=planned, plan=plan, resume=resume, force=force, inputs=inputs,
                       source_map=source_map, metadata=metadata, on_progress=on_progress, on_skip=on_skip,
                       on_published=visible, note=note, on_discard=discard)  # fmt: skip

    caps = mech.capabilities()
    fit = mech.dp_fit_record() if caps.fits_on == "model-file" and isinstance(mech, ModelFile) else None
    events = None
    if fit is None:
        found = mech.privacy(job.shape, None if job.count is not None else job.n, secure=job.secure).events
        events = None if found is None else list(found)
    return charge(ledger, guarantee, run, budget=budget, delta_budget=delta_budget, label=label, run_id=plan["run"],
                  resume=resume, events=events, fit=fit, metadata=metadata, model=str(getattr(mech, "model", "")),
                  note=note, output=str(Path(output).expanduser().resolve()))  # fmt: skip


def charge(
    ledger: str | Path | None,
    guarantee: Guarantee,
    publish: Publish,
    *,
    budget: float | None = None,
    delta_budget: float | None = None,
    label: str = "",
    run_id: str = "",
    resume: bool = False,
    events: list[NoiseEvent] | None = None,
    fit: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    model: str = "",
    note: Callable[[str], None] | None = None,
    output: str = "",
) -> tuple[dict[str, Any], PrivacyLedger | None]:
    """Run ``publish`` under the ledger's lock with the charge reserved first (or plainly, without a ledger);
    the reservation records ``output``, the folder the release writes into.

    A resumed run finishes the reservation its interrupted run ``run_id`` left instead of reserving again. A
    release from a model file whose fit was a DP release (``fit``: the mechanism's ``dp_fit_record()``) is
    post-processing: admitted with no charge when the ledger holds that fit, refused when it does not. What the
    ledger did goes into ``metadata["ledger"]``. Returns ``(manifest, ledger or None)``."""
    from privpix.privacy.accounting import open_ledger

    if metadata is not None and fit is not None:
        metadata["model_sha256"] = fit["sha256"]
    if ledger is None:
        return publish(), None
    with open_ledger(ledger, budget=budget, delta_budget=delta_budget, wait=note) as session:
        if fit is not None:
            entry = fit_entry(session, fit, model)
            if metadata is not None:
                metadata["ledger"] = {
                    "charge": f"none: post-processing of the DP fit charged as entry {entry.id}",
                    "entry": entry.id,
                    "model_sha256": fit["sha256"],
                    "spent": session.ledger.spent.to_dict(),
                    "budget": _budget(session),
                }
            return publish(None, session), session.ledger
        held = (session.resume(guarantee, run_id, label, events, output) if resume
                else session.reserve(guarantee, label, run_id, events, output))  # fmt: skip
        with held as reservation:
            if metadata is not None:
                e = reservation.entry
                metadata["ledger"] = {
                    "charge": f"entry {e.id}",
                    "entry": e.id,
                    "epsilon": e.epsilon,
                    "delta": e.delta,
                    "events": [ev.to_dict() for ev in e.noise()],
                    "spent": session.ledger.spent.to_dict(),
                    "budget": _budget(session),
                }
            manifest = publish(reservation.published, session)
        return manifest, session.ledger


def _budget(session: LedgerSession) -> dict[str, float]:
    return {"epsilon": session.ledger.epsilon_budget, "delta": session.ledger.delta_budget}


def fit_entry(session: LedgerSession, fit: dict[str, Any], model: str) -> LedgerEntry:
    """The ledger entry that charged the DP fit a model file records (``fit``), or a one-line refusal naming the
    two ways to charge it, or the tampering when the file names this ledger's entry but its bytes changed."""
    book, path = session.ledger, session.path
    entry = book.entry_for_model(fit["sha256"])
    if entry is not None:
        return entry
    ref = fit.get("ledger") or {}
    if ref.get("path") == str(path) and isinstance(ref.get("entry"), int):
        named = book.entry(ref["entry"])
        if named is not None and named.model_sha256:
            raise DataError(
                f"{model}: its fit was charged as entry {named.id} of {path} for a file with sha256 "
                f"{named.model_sha256[:16]}…, but this file's is {fit['sha256'][:16]}…: the model file was changed "
                "after its fit; refuse to release from it"
            )
        if named is not None and named.status == "reserved":
            raise BudgetExceededError(
                f"{model}: its fit's entry {named.id} in {path} is a reservation a killed fit left; record the file "
                f"with `privpix ledger charge {path} --model {model}` (no second charge)"
            )
    raise BudgetExceededError(
        f"ledger {path}: the DP fit of {model} (sha256 {fit['sha256'][:16]}…) is not charged in this ledger; fit "
        f"again under this ledger (`privpix fit ... --ledger {path}`, or privpix.fit(..., ledger=...)), or charge "
        f"it once with `privpix ledger charge {path} --model {model}`"
    )


@dataclass(frozen=True)
class Dropped:
    """What :func:`drop_unpublished` did with one reservation: ``released`` it (``why`` is the proof recorded in
    the entry) or kept it (``why`` says what is missing)."""

    entry: int
    released: bool
    why: str


def drop_unpublished(ledger: str | Path) -> list[Dropped]:
    """Release every reservation in ``ledger`` whose run published nothing and whose noise nobody could have seen,
    by the rule ``privpix verify --repair`` applies: its release folder (recorded in the entry) holds that run's
    staging, owner-only, and no commit journal, so nothing of it left the staging. The staging is removed (the
    noise with it) and the entry becomes ``released``, with that proof. Anything else keeps counting: a folder
    without the run's staging, one with a journal or a manifest of the entry (it may have published), an entry
    whose folder is not recorded, and a fit's reservation, whose model file may exist. Returns one
    :class:`Dropped` per reservation."""
    from privpix.privacy.accounting import PrivacyLedger, release_unpublished

    path = Path(ledger).expanduser().resolve()
    book = PrivacyLedger.load(path)
    done = []
    for e in (e for e in book.entries if e.status == "reserved"):
        if e.kind != "release":
            why = (
                "a fit's reservation is kept: its model file, or the temporary file beside it, may exist and hold "
                f"its noise (`privpix ledger charge {path} --model FILE` records a file it wrote)"
            )
        elif not (e.output and e.run):
            why = ("the folder its release was writing is not recorded (an entry of an older ledger): "
                   "`privpix verify --repair FOLDER` on that folder releases it")  # fmt: skip
        else:
            why = _remove_unpublished_staging(Path(e.output), e.run, e.id)
            if not why:
                proof = (f"its staging in {e.output} was removed uncommitted (no commit journal) by "
                         "`privpix ledger drop-unpublished`")  # fmt: skip
                if release_unpublished(path, e.run, proof):
                    done.append(Dropped(e.id, True, proof))
                    continue
                why = "its staging was removed, but the ledger could not be written: it keeps counting"
        done.append(Dropped(e.id, False, why))
    return done


def _remove_unpublished_staging(out: Path, run: str, entry: int) -> str:
    """Under the folder's lock, remove the staging run ``run`` left in ``out`` if nothing of it can have been
    published; returns "" when removed, else why not."""
    import json
    import shutil

    from filelock import FileLock, Timeout

    from privpix.data.formats.release_layout import JOURNAL, LOCK, PLAN, STAGING_PREFIX, read_manifest

    if not out.is_dir():
        return f"its folder {out} is gone: nothing shows that its run published nothing"
    lock = FileLock(out / LOCK)
    try:
        lock.acquire(timeout=0)
    except (Timeout, OSError):
        return f"a privpix release is writing in {out} now, or the folder cannot be locked"
    try:
        if (out / JOURNAL).exists():
            return f"{out} holds a commit journal, so the run may have published: `privpix verify --repair {out}`"
        try:
            published = read_manifest(out)
        except DataError:
            published = None
        if isinstance(published, dict) and (published.get("ledger") or {}).get("entry") == entry:
            return f"the release in {out} names this entry: its run published"
        for p in sorted(out.iterdir()):
            if not (p.name.startswith(STAGING_PREFIX) and p.is_dir() and not p.is_symlink()):
                continue
            try:
                plan = json.loads((p / PLAN).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(plan, dict) and plan.get("run") == run:
                shutil.rmtree(p)
                return ""
        return f"{out} holds no staging of its run: nothing shows that it published nothing"
    finally:
        lock.release()


def create_ledger(
    path: str | Path,
    budget: float,
    delta_budget: float | None = None,
    composition: str = "basic",
    wait: Callable[[str], None] | None = None,
) -> PrivacyLedger:
    """Write a new, empty ledger at ``path`` with the budget (``budget``, ``delta_budget``: default 10⁻⁵) and the
    admission rule ``composition`` (:mod:`privpix.privacy.filters`), fixed from then on. Refused when a file is
    there already."""
    from privpix.privacy.accounting import open_ledger

    there = f"{Path(path).expanduser()}: a ledger is there already; its budget and rule are fixed (`ledger show`)"
    if Path(path).expanduser().exists():
        raise ParameterError(there)
    with open_ledger(path, budget=budget, delta_budget=delta_budget, composition=composition, wait=wait) as session:
        if session.path.exists():  # created by another process meanwhile
            raise ParameterError(there)
        session.ledger.save(session.path)
        return session.ledger


def ledger_json(book: PrivacyLedger) -> dict:
    """A ledger as the JSON document ``privpix ledger show --json`` prints: budget, composition rule, spend,
    remaining ε and every entry (keys fixed by docs/accounting.md)."""
    spent = book.spent
    return {
        "budget": {"epsilon": book.epsilon_budget, "delta": book.delta_budget},
        "composition": book.composition,
        "spent": spent.to_dict(),
        "remaining_epsilon": max(0.0, book.epsilon_budget - spent.epsilon) if spent.epsilon < float("inf") else 0.0,
        "entries": [
            {
                "id": e.id,
                "label": e.label,
                "kind": e.kind,
                "run": e.run,
                "status": e.status,
                "epsilon": e.epsilon,
                "delta": e.delta,
                "noise": [ev.to_dict() for ev in e.noise()],
                "noise_declared": e.events is not None,
                "time": e.time,
                "model_sha256": e.model_sha256,
                "proof": e.proof,
                "guarantee": e.guarantee,
            }
            for e in book.entries
        ],
    }
