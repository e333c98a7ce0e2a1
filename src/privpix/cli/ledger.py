"""``privpix ledger``: create and read a privacy ledger, charge the fit of an existing model file once, ask whether a
release or a fit would fit the budget, and release what killed runs provably never published (docs/accounting.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from privpix.cli.app import console, main
from privpix.cli.options import parse_params, parse_size, plain, print_note


@main.group()
def ledger() -> None:
    """Privacy ledgers: what was charged, how it composes, what still fits.

    A ledger charges every event that touches the private images once: a release, or a fit that is a DP release
    (`privpix fit --ledger`). Releases from a fitted model file are post-processing and charge nothing. A charge is
    admitted by the ledger's rule, fixed when it is created and valid even when each ε is chosen after seeing
    earlier releases: basic composition (the default), or Gaussian DP for Gaussian noise only. The PLD composition
    (dp-accounting, pessimistic) is shown beside it: it holds only if no ε was chosen from earlier outputs."""


@ledger.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the ledger as JSON (budget, spent, remaining, entries).")
def show(file: str, as_json: bool) -> None:
    """Budget and rule, spent (by the rule, and by the PLD composition), remaining, and every entry of the ledger
    FILE."""
    from privpix.privacy.accounting import PrivacyLedger

    book = PrivacyLedger.load(file)
    from privpix.publishing.ledger import ledger_json

    doc = ledger_json(book)
    if as_json:
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
        return
    from privpix.privacy.filters import composition_text

    s = book.spent
    plain(f"ledger {file}: budget ε={book.epsilon_budget:g} at δ={book.delta_budget:g}, one image replaced; "
          f"admitted by {composition_text(book.composition)}")  # fmt: skip
    plain(f"spent {s.text(book.epsilon_budget)}")
    plain(f"basic sum ε={s.basic_epsilon:.4g}, δ={s.basic_delta:.3g}")
    table = Table(show_lines=False)
    for col in ("id", "kind", "status", "ε", "δ", "noise", "time", "model sha256", "label"):
        table.add_column(col)
    for e in book.entries:
        noise = ", ".join(ev.describe() for ev in e.noise()) + ("" if e.events is not None else " (bare)")
        table.add_row(str(e.id), e.kind, e.status, f"{e.epsilon:.4g}", f"{e.delta:g}", escape(noise), e.time,
                      e.model_sha256[:12], escape(e.label))  # fmt: skip
    console.print(table)
    plain(
        "The ledger admits by its rule, which keeps the budget even when each ε is chosen after seeing earlier "
        "releases; the PLD figure holds only when every entry's noise was fixed in advance (which mechanism runs "
        "next may still depend on earlier outputs). docs/accounting.md"
    )


def load_fitted_model(path: str):
    """The mechanism that wrote the model file ``path`` (its meta names it), fitted from the file: every recorded
    number checked against the noise it records."""
    from privpix.errors import DataError
    from privpix.mechanisms import MECHANISMS, get_mechanism
    from privpix.mechanisms.modelfile import read_model_meta

    meta = read_model_meta(path)
    kind = meta.get("kind")
    if not isinstance(kind, str) or kind not in MECHANISMS:
        raise DataError(f"{path}: a model file of {kind!r}, which is not a registered mechanism")
    cls = MECHANISMS[kind]
    known = {p.name for p in cls.params}
    if "model" not in known:
        raise DataError(f"{path}: {kind} model files are not read back through a model parameter")
    args = {"model": str(path)}
    eps = meta.get("epsilon") if cls.about.uses_epsilon else None
    delta = meta.get("delta") if cls.about.uses_delta else None
    mech = get_mechanism(kind, eps, delta, **args)
    return mech.fit(None)


@ledger.command("charge")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--model", required=True, type=click.Path(dir_okay=False), help="Model file whose fit to charge.")
@click.option("--budget", type=float, default=None, help="Per-image ε budget for a new ledger FILE.")
@click.option("--delta-budget", type=float, default=None, help="δ budget for a new ledger FILE (default 1e-5).")
def charge(file: str, model: str, budget: float | None, delta_budget: float | None) -> None:
    """Charge the DP fit of an existing model file to the ledger FILE, once: afterwards releases from the model with
    --ledger FILE are post-processing (nothing more is charged). Refused over budget, for a model whose fit is not
    a DP release, and for a file whose recorded fit does not match its noise."""
    from privpix.errors import BudgetExceededError, DataError
    from privpix.mechanisms import ModelFile
    from privpix.privacy.accounting import open_ledger
    from privpix.privacy.composition import events_from_dicts
    from privpix.privacy.guarantees import Guarantee

    mech = load_fitted_model(model)
    fit = mech.dp_fit_record() if isinstance(mech, ModelFile) else None
    if fit is None:
        raise BudgetExceededError(
            f"--model {model}: its fit is not a DP release ({mech.about.guarantee_model} guarantee), nothing can be "
            "charged"
        )
    with open_ledger(file, budget=budget, delta_budget=delta_budget, wait=print_note) as session:
        book = session.ledger
        found = book.entry_for_model(fit["sha256"])
        if found is not None:
            plain(f"{model}: its fit is already charged as entry {found.id} of {session.path}; nothing charged")
            return
        named = _named_entry(book, fit, session.path)
        if named is not None and named.model_sha256:
            raise DataError(
                f"--model {model}: its fit was charged as entry {named.id} for a file with sha256 "
                f"{named.model_sha256[:16]}…, not this one ({fit['sha256'][:16]}…): the file was changed after "
                "its fit; refit it"
            )
        if named is not None and _is_its_reservation(named, fit):
            # A fit killed after writing its file but before recording it: its reservation already counts.
            session.finish(named.id, fit["sha256"], run=named.run)
            plain(f"{model}: recorded as entry {named.id} (the reservation of its fit); nothing more charged")
            return
        g = Guarantee.from_dict(fit["guarantee"])
        entry = session.add(g, f"model {Path(model).name} (charged after its fit)", status="charged",
                            events=events_from_dicts(fit["events"], model), kind="model",
                            model_sha256=fit["sha256"])  # fmt: skip
        plain(f"charged the fit of {model} as entry {entry.id} of {session.path}: spent "
              f"{book.spent.text(book.epsilon_budget)}")  # fmt: skip


def _named_entry(book, fit: dict, path: Path):
    """The entry of this ledger the model file's fit record names, if it names this ledger."""
    ref = fit.get("ledger") or {}
    ident = ref.get("entry")
    if ref.get("path") != str(path) or isinstance(ident, bool) or not isinstance(ident, int):
        return None
    return book.entry(ident)


def _is_its_reservation(entry, fit: dict) -> bool:
    """Whether ``entry`` is the reservation the fit recorded in the file made: a fit's, still reserved, of the same
    run and the same noise. Anything else (a release's entry named by an edited file) is no reservation of it."""
    ref = fit.get("ledger") or {}
    return (
        entry.kind == "fit"
        and entry.status == "reserved"
        and not entry.model_sha256
        and bool(entry.run)
        and entry.run == ref.get("run")
        and [e.to_dict() for e in entry.noise()] == fit["events"]
    )


@ledger.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--method", required=True, help="Mechanism name, optionally name[key=value,...].")
@click.option("--epsilon", type=float, default=None, help="ε of the release or fit.")
@click.option("--delta", type=float, default=None, help="δ of the release or fit.")
@click.option("--param", "params", multiple=True, help="Mechanism parameter key=value (repeatable).")
@click.option("--dataset", default=None, help="NAME[:SPLIT]: the images' shape and count are read from it.")
@click.option("--input", "input_dir", type=click.Path(), default=None,
              help="A folder of your own images (or shards): their shape and count are read from it.")  # fmt: skip
@click.option("--shape", default=None, help="HEIGHTxWIDTH[xCHANNELS] of the images (instead of --dataset).")
@click.option("--n", "count", type=int, default=None, help="Number of private images (a fit's noise may need it).")
@click.option("--secure", is_flag=True, help="The release would use --secure (its exact noise is charged as such).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
def check(file, method, epsilon, delta, params, dataset, input_dir, shape, count, secure, data_dir) -> None:
    """Would this release (or a fit that is a DP release) fit the budget of the ledger FILE? Nothing is charged.
    Exit 0 when it fits, 1 when it does not (the reason printed), 2 on bad input."""
    from privpix.data.loaders import dataset_domain
    from privpix.errors import BudgetExceededError, ParameterError
    from privpix.mechanisms import ModelFile, get_mechanism
    from privpix.privacy.accounting import PrivacyLedger

    book = PrivacyLedger.load(file)
    mech = get_mechanism(method, epsilon, delta, domain=dataset_domain(dataset), **parse_params(params))
    if secure:
        if mech.capabilities().fits_on == "model-file":
            mech.fit(None)  # its noise was drawn when the file was fitted: the file says whether exactly
        exact = mech.capabilities().secure
        if exact is None:
            raise ParameterError(f"--secure: {method} has no exact sampler: {mech.capabilities().not_secure}")
        mech.set_params(**exact)
    caps = mech.capabilities()
    if caps.fits_on == "model-file":
        mech.fit(None)
        fit = mech.dp_fit_record() if isinstance(mech, ModelFile) else None
        if fit is not None:
            entry = book.entry_for_model(fit["sha256"])
            if entry is None:
                plain(f"no: the DP fit of this model file is not charged in {file}; charge it with `privpix ledger "
                       f"charge {file} --model FILE` (or fit with --ledger)")  # fmt: skip
                sys.exit(1)
            plain(f"yes: post-processing of the DP fit charged as entry {entry.id}; nothing more is charged")
            return
    if dataset is not None and input_dir is not None:
        raise ParameterError("give one of --dataset and --input, not both")
    hwc, n = _shape_and_count(dataset or input_dir, shape, count, data_dir, caps.fixed_shape)
    claim = mech.privacy(hwc, n, secure=secure)
    guarantee, events = claim.guarantee, claim.events
    try:
        after = book.check(guarantee, list(events) if events else None, "fit" if caps.dp_fit else "release")
    except BudgetExceededError as exc:
        plain(f"no: {exc}")
        sys.exit(1)
    what = "fit" if caps.dp_fit else "release"
    plain(f"yes: the {what} is within the budget; the ledger would then have spent {after.text(book.epsilon_budget)}")


def _shape_and_count(dataset, shape, count, data_dir, fixed):
    """(h, w, c) and n for ``check``: from --dataset, or --shape and --n, or the mechanism's fixed shape."""
    from privpix.errors import ParameterError

    if dataset is not None and shape is not None:
        raise ParameterError("give one of --dataset and --shape, not both")
    if dataset is not None:
        from privpix.data import load_dataset

        data = load_dataset(dataset, data_dir)
        if not hasattr(data, "shape"):
            return (0, 0, 0), count or len(data)
        return tuple(data.shape), count or len(data)
    if shape is not None:
        parts = shape.lower().split("x")
        if len(parts) == 3:
            h, w = parse_size("x".join(parts[:2]), "--shape") or (0, 0)
            try:
                c = int(parts[2])
            except ValueError:
                raise ParameterError(f"--shape {shape!r}: expected HEIGHTxWIDTH[xCHANNELS]") from None
            return (h, w, c), count
        h, w = parse_size(shape, "--shape") or (0, 0)
        return (h, w, 1), count
    if fixed is not None:
        return tuple(fixed), count
    raise ParameterError("give --dataset NAME[:SPLIT] or --shape HxW[xC]: a release's per-image ε depends on the "
                         "image shape")  # fmt: skip


@ledger.command("create")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--budget", type=float, required=True, help="Per-image ε budget.")
@click.option("--delta-budget", type=float, default=None, help="δ budget (default 1e-5; pure events spend none).")
@click.option("--composition", type=click.Choice(["basic", "gaussian"]), default="basic", show_default=True,
              help="The admission rule, fixed for the ledger's life: basic composition (every kind of noise), or "
                   "Gaussian DP (continuous Gaussian noise only; δ does not add up).")  # fmt: skip
def create(file: str, budget: float, delta_budget: float | None, composition: str) -> None:
    """Create the empty ledger FILE with its budget and admission rule. A release or a fit with --ledger and
    --budget creates one too, with basic composition; create it here first to compose Gaussian noise by Gaussian
    DP. Both rules keep the budget even when each ε is chosen after seeing earlier releases."""
    from privpix.privacy.filters import composition_text
    from privpix.publishing.ledger import create_ledger

    book = create_ledger(file, budget, delta_budget, composition, wait=print_note)
    plain(f"created {file}: budget ε={book.epsilon_budget:g} at δ={book.delta_budget:g}, admitted by "
          f"{composition_text(book.composition)}")  # fmt: skip


@ledger.command("drop-unpublished")
@click.argument("file", type=click.Path(dir_okay=False))
def drop_unpublished(file: str) -> None:
    """Release every reservation of the ledger FILE whose run published nothing and whose noise nobody could have
    seen: its release folder holds that run's uncommitted staging, which is removed (the rule of `privpix verify
    --repair`). Each released entry records that proof; every other reservation keeps counting, and is listed with
    the reason (a fit's reservation always is: its model file may exist)."""
    from privpix.privacy.accounting import PrivacyLedger
    from privpix.publishing.ledger import drop_unpublished as drop

    done = drop(file)
    if not done:
        plain(f"{file}: no reservations; nothing to release")
        return
    for d in done:
        plain(f"entry {d.entry}: " + (f"released ({d.why})" if d.released else f"kept: {d.why}"))
    book = PrivacyLedger.load(file)
    released = sum(d.released for d in done)
    plain(f"released {released} of {len(done)} reservation(s); {file} has spent {book.spent.text(book.epsilon_budget)}")
