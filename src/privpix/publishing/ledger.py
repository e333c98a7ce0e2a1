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
                  note=note)  # fmt: skip


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
) -> tuple[dict[str, Any], PrivacyLedger | None]:
    """Run ``publish`` under the ledger's lock with the charge reserved first (or plainly, without a ledger).

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
        held = (session.resume(guarantee, run_id, label, events) if resume
                else session.reserve(guarantee, label, run_id, events))  # fmt: skip
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
