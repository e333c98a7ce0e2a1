"""The API's fit (``privpix.fit``): a mechanism fitted on private data and its model file written, charged to a
ledger when the fit is itself a DP release, with the protocol ``privpix fit`` uses.

Under a ledger the charge is reserved before any training (refused over budget, nothing trained); the model file is
written through a temporary name, its SHA-256 recorded in the charge, and only then given its name. An exception or
Ctrl-C before that removes the reservation (no model file left the process); a fit killed outright leaves it, and
it keeps counting, since its file may exist (:func:`privpix.privacy.accounting.reserved_fit`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import DataError, ParameterError, arg
from privpix.mechanisms.base import Mechanism, ModelFile
from privpix.privacy.accounting import Spend
from privpix.privacy.guarantees import Guarantee
from privpix.publishing.outputs import check_output_path, writing


@dataclass(frozen=True)
class Fitted:
    """What :func:`fit` wrote: the model ``path``, the ``guarantee`` its releases carry (with the caveat of its
    noise when that was not drawn by exact samplers), under a ledger the ``ledger`` file (its resolved path), the
    ``entry`` that charged the fit and what the ledger has ``spent`` with it (``None`` without a ledger), and whether
    the fit's noise was drawn by exact samplers from the OS CSPRNG (``secure``)."""

    path: Path
    guarantee: Guarantee
    ledger: Path | None = None
    entry: int | None = None
    spent: Spend | None = None
    secure: bool = False


def check_fit(
    mechanism: Mechanism,
    output: str | Path,
    *,
    ledger: str | Path | None = None,
    budget: float | None = None,
    delta_budget: float | None = None,
    force: bool = False,
) -> None:
    """Every check of a fit that needs no data, so that a caller can make them before loading any: the model file
    can be written, the mechanism writes one and learns it from private data, and a ledger can charge the fit.
    Errors name the command line's options under it, else the Python arguments (:func:`privpix.errors.arg`)."""
    out = Path(output)
    option = arg("--output", "output")
    check_output_path(out, option)
    if out.exists() and not force:
        raise ParameterError(f"{option} {out}: exists; pass {arg('--force', 'force=True')} to replace it")
    if ledger is None and (budget is not None or delta_budget is not None):
        raise ParameterError(arg("--budget and --delta-budget need --ledger FILE",
                                 "a budget (budget, delta_budget) needs a ledger file (ledger)"))  # fmt: skip
    name, ledger_arg = arg(f"--method {mechanism.name}", mechanism.name), arg("--ledger", "ledger")
    if not isinstance(mechanism, ModelFile):
        raise ParameterError(
            f"{name}: has no model file to write; whatever it needs it fits when it releases (use it with release, "
            "evaluate or bench directly)"
        )
    if mechanism.capabilities().fits_on != "private":
        raise ParameterError(f"{name}: a model file is already given (model=...); a fit trains a new one")
    if ledger is not None and not mechanism.capabilities().dp_fit:
        raise ParameterError(
            f"{ledger_arg}: the fit of {mechanism.name} is not a DP release (its releases carry a "
            f"'{mechanism.about.guarantee_model}' guarantee), so it has no ε a ledger could charge; fit it without a "
            "ledger"
        )


def fit(
    mechanism: Mechanism,
    data: ImageSet | RecordSet,
    output: str | Path,
    *,
    ledger: str | Path | None = None,
    budget: float | None = None,
    delta_budget: float | None = None,
    seed: int | None = None,
    force: bool = False,
    label: str = "",
    note: Callable[[str], None] | None = None,
    on_reserved: Callable[[int, Path], None] | None = None,
) -> Fitted:
    """Fit ``mechanism`` on the private ``data`` and write its model file to ``output``, which ``model=FILE``
    loads in a release.

    With ``ledger`` (a ledger file; ``budget``/``delta_budget`` create a new one): the fit, which must be a DP
    release (``Capabilities.dp_fit``), is charged once, reserved before any training; the model file records its
    entry, and releases from the file are post-processing that charge nothing more. ``seed`` makes the fit
    reproducible (for research: anyone who knows it can remove the noise); ``None`` draws its noise with exact
    samplers from the OS CSPRNG where the mechanism has them (``Capabilities.secure``, set on ``mechanism``), as a
    release does, else in floating point from OS entropy, with a caveat in the guarantee.
    ``note`` is told what is being waited for (another process holding the ledger); ``on_reserved`` gets the entry
    id and the ledger's path once the charge is reserved, before training."""
    from privpix.publishing.shards import exact_noise
    from privpix.threads import one_thread

    check_fit(mechanism, output, ledger=ledger, budget=budget, delta_budget=delta_budget, force=force)
    assert isinstance(mechanism, ModelFile)  # check_fit refuses any other
    # The noise of an unseeded fit is a publication's: exact samplers on the OS CSPRNG wherever the mechanism has
    # them, as `privpix release` draws it (set before the claim is computed: the exact noise is calibrated by its
    # own accountant).
    secure = exact_noise(mechanism, seed=seed, secure=False)
    out = Path(output)
    shape = tuple(data.shape) if isinstance(data, ImageSet) else (0, 0, 0)
    # One thread for torch and BLAS, as in every fit privpix runs: the same seed then gives the same model on any
    # machine (a parallel reduction sums in another order on another core count).
    with one_thread():
        if ledger is None:
            mechanism.fit(data, seed=seed)
            with writing(out, arg("--output", "output")):
                mechanism.save_model(out)
            return Fitted(out, _stated(mechanism, secure, seed), secure=secure)
        return _charged_fit(mechanism, data, out, shape, ledger, budget, delta_budget, label, seed, secure, note,
                            on_reserved)  # fmt: skip


def _stated(mech: Mechanism, secure: bool, seed: int | None, guarantee: Guarantee | None = None) -> Guarantee:
    """The guarantee the fitted ``mech``'s releases carry (or ``guarantee``), with the caveat of the fit's noise
    when it was not exact secure noise, in the words a release states it."""
    from privpix.publishing.shards import stated_guarantee

    if guarantee is None:
        guarantee = mech.privacy(mech.capabilities().fixed_shape or (0, 0, 0)).guarantee
    return stated_guarantee(mech, guarantee, secure, seed)


def _charged_fit(mech, data, out, shape, ledger, budget, delta_budget, label, seed, secure, note,
                 on_reserved) -> Fitted:  # fmt: skip
    from privpix.fileio import sha256_file
    from privpix.privacy.accounting import reserved_fit

    claim = mech.privacy(shape, len(data))
    guarantee, events = _stated(mech, secure, seed, claim.guarantee), claim.events
    if events is None:
        raise ParameterError(f"ledger: {mech.name} declares no noise for its fit; nothing can be charged")
    label = label or f"fit {mech.name} → {out}"
    with reserved_fit(ledger, guarantee, list(events), label, budget=budget, delta_budget=delta_budget,
                      wait=note) as charge:  # fmt: skip
        if on_reserved is not None:
            on_reserved(charge.entry, charge.path)
        mech.fit(data, seed=seed)
        done = mech.privacy(shape, len(data)).events
        if done is None or list(done) != list(events):
            # What was reserved must be what the fit spent; nothing was written, so the reservation goes.
            raise DataError(f"{mech.name}: the fit's noise {done} is not the noise reserved {events}; nothing written")
        mech.ledger_entry_ = charge.ref()
        tmp = out.parent / f".privpix-fit-{charge.run[:12]}.tmp"
        option = arg("--output", "output")
        try:
            with writing(out, option):
                mech.save_model(tmp)
            charge.finish(sha256_file(tmp))
            with writing(out, option):
                os.replace(tmp, out)
        finally:
            if tmp.exists():
                tmp.unlink()
    return Fitted(out, _stated(mech, secure, seed), charge.path, charge.entry, charge.spent, secure)
