"""``privpix fit``: fit a mechanism that learns a model (Jamshidi et al. 2023's obfuscator, Kim & Yang 2020's
GANs, the DP synthesizers) on a dataset and write its model file, which ``--param model=FILE`` loads in
``release``, ``evaluate``, ``bench`` and ``audit``; a thin layer over :func:`privpix.publishing.fit.fit`.
``train-obfuscator`` and ``train-ppsgan`` are the earlier names, kept as aliases whose options are the mechanisms'
training parameters, each with the default, help and checks of its declaration."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from privpix.cli.app import main
from privpix.cli.options import (
    executor_options,
    method_options,
    notes_from_warnings,
    parse_params,
    parse_size,
    plain,
    print_note,
)

if TYPE_CHECKING:
    from privpix.mechanisms import Mechanism, Param


def fit_to_file(
    method: str,
    dataset: str | None,
    output: str,
    params: dict[str, Any],
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    limit: int | None = None,
    seed: int | None = None,
    data_dir: str | None = None,
    force: bool = False,
    quiet: bool = False,
    ledger: str | None = None,
    budget: float | None = None,
    delta_budget: float | None = None,
    input_dir: str | None = None,
    size: tuple[int, int] | None = None,
) -> Path:
    """What ``privpix fit`` does: ``method``'s fit on ``dataset`` or the image folder ``input_dir`` (a seeded subset
    of ``limit``, resized to ``size``), then its model file written to ``output``. Every check that needs no data
    runs before the data is loaded.

    With ``ledger``: a fit that is itself a DP release (``Capabilities.dp_fit``) is charged to it, reserved before
    any training (refused over budget), and the model file records the entry; releases from the file are then
    post-processing and charge nothing more (docs/accounting.md)."""
    from privpix.data.load import load_input, seeded_pick
    from privpix.data.loaders import dataset_domain
    from privpix.errors import ParameterError
    from privpix.mechanisms import ModelFile, get_mechanism, mechanism_class
    from privpix.publishing.fit import check_fit
    from privpix.publishing.fit import fit as fit_model
    from privpix.threads import one_thread

    out = Path(output)
    if ledger is None and (budget is not None or delta_budget is not None):
        raise ParameterError("--budget and --delta-budget need --ledger FILE")
    if not issubclass(mechanism_class(method, dataset_domain(dataset)), ModelFile):  # before its parameters are judged
        raise ParameterError(
            f"--method {method}: has no model file to write; whatever it needs it fits when it releases (use it "
            "with release, evaluate or bench directly)"
        )
    mech = get_mechanism(method, epsilon, delta, domain=dataset_domain(dataset), **params)
    # Before hours of training, and before the data is loaded.
    check_fit(mech, out, ledger=ledger, budget=budget, delta_budget=delta_budget, force=force)
    if limit is not None and limit < 2:
        raise ParameterError(f"--limit must be >= 2, got {limit}")
    if (dataset is None) == (input_dir is None):
        raise ParameterError("give exactly one of --dataset NAME[:SPLIT] or --input DIR")
    data = load_input(dataset, input_dir, data_dir, size, seeded_pick(limit, seed))
    what = dataset if dataset is not None else "the --input folder"
    if not quiet:
        how = "OS entropy" if seed is None else f"seed {seed}"
        plain(f"privpix fit: {method} on {what} ({len(data)} items), {how} → {out}")
    t0 = time.perf_counter()

    def reserved(entry: int, path: Path) -> None:
        plain(f"reserved as entry {entry} of {path} before training")

    # One torch thread, as in every fit privpix runs: the same seed then gives the same model on any machine.
    with notes_from_warnings(), one_thread():
        done = fit_model(mech, data, out, ledger=ledger, budget=budget, delta_budget=delta_budget, seed=seed,
                         force=force, label=f"fit {mech.name} on {what} → {out}",
                         note=print_note, on_reserved=None if quiet else reserved)  # fmt: skip
    if not quiet:
        if done.spent is not None:
            plain(f"charged as entry {done.entry} of {done.ledger}: spent {done.spent.text()}")
        plain(f"wrote {out} in {time.perf_counter() - t0:.0f} s; its releases carry: {done.guarantee.compact()}")
        for caveat in done.guarantee.caveats:
            plain(f"  {caveat}")
    return out


_COMMON = [
    click.option(
        "--seed",
        type=int,
        default=None,
        help="Seeds the --limit subset and the fit (reproducible research runs). Default: OS entropy, as a fit "
        "whose noise is a DP release must be (anyone who knows a seed can remove the noise), its noise drawn by "
        "exact samplers where the method has them, as privpix release draws it.",
    ),
    click.option("--data-dir", type=click.Path(file_okay=False), default=None),
    click.option("--output", required=True, type=click.Path(dir_okay=False), help="Model file to write."),
    click.option("--force", is_flag=True, help="Replace an existing --output."),
    click.option("--quiet", "-q", is_flag=True),
]


def _common(fn):
    for opt in reversed(_COMMON):
        fn = opt(fn)
    return fn


@main.command()
@method_options(epsilon_help="ε, for a mechanism whose fit spends one.")
@click.option("--dataset", default=None, help="NAME[:SPLIT] to fit on (images or records, as the method needs).")
@click.option(
    "--input",
    "input_dir",
    type=click.Path(),
    default=None,
    help="Or a folder of images to fit on (flat: unlabelled; one sub-folder per class: the folder names are the "
    "class names), or Parquet / WebDataset shards.",
)
@click.option("--size", default=None, help="Resize every image to HEIGHTxWIDTH first.")
@click.option("--limit", type=int, default=None, help="Fit on a seeded subset of this many items.")
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False),
    default=None,
    help="Privacy ledger to charge a fit that is a DP release (DP synthesizers, DP-SGD): reserved before training, "
    "refused over budget; releases from the model file are then free (post-processing).",
)
@click.option("--budget", type=float, default=None, help="Per-image ε budget for a new --ledger file.")
@click.option(
    "--delta-budget",
    type=float,
    default=None,
    help="δ budget for a new --ledger file (default 1e-5; pure ε-DP charges spend none).",
)
@executor_options
@_common
def fit(method, dataset, input_dir, size, params, epsilon, delta, limit, ledger, budget, delta_budget, workers, engine,
        scheduler, seed, data_dir, output, force, quiet) -> None:  # fmt: skip
    """Fit a mechanism that learns a model on --dataset (or an --input folder) and write its model file (release
    it with --param model=FILE). Training parameters are the mechanism's own (`privpix mechanisms`). A DP synthesizer
    computes its private embedding on the workers (--workers, --engine): the same sums as in one process.

    With --ledger, a fit that is a DP release is charged once (docs/accounting.md)."""
    from privpix.executor import make_executor, using

    with make_executor(engine, workers, scheduler) as executor, using(executor):
        executor.note = print_note
        fit_to_file(method, dataset, output, parse_params(params), epsilon=epsilon, delta=delta, limit=limit, seed=seed,
                    data_dir=data_dir, force=force, quiet=quiet, ledger=ledger, budget=budget,
                    delta_budget=delta_budget, input_dir=input_dir, size=parse_size(size))  # fmt: skip


class _ParamValue(click.ParamType):
    """A training parameter's value on the command line, checked as the mechanism checks it: its declaration's
    type, bounds and choices, then the mechanism's own checks of it (e.g. noise_delta < 1) with the other parameters
    at their defaults. Out-of-range values are usage errors naming the option, before any data is loaded."""

    def __init__(self, cls: type[Mechanism], declared: Param) -> None:
        self.cls, self.declared = cls, declared
        self.name = declared.kind.__name__

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        if self.declared.choices is not None:
            return f"[{'|'.join(map(str, self.declared.choices))}]"
        return {int: "INTEGER", float: "FLOAT", bool: "BOOLEAN"}.get(self.declared.kind, "TEXT")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from privpix.errors import ParameterError

        try:
            value = self.declared.validate(value)
            if not self.cls.about.uses_epsilon:
                self.cls(**{self.declared.name: value})
        except ParameterError as exc:
            self.fail(str(exc), param, ctx)
        return value


class _Alias(click.Command):
    """An alias of ``privpix fit --method METHOD`` whose options, after ``--dataset``, are METHOD's training
    parameters named in ``options`` (parameter → flag): each takes its default, help and checks from the
    parameter's declaration, read when the command is first parsed or shown (the mechanisms are not imported when
    the CLI starts). The callback receives them under the parameters' names."""

    def __init__(self, *args: Any, method: str, options: dict[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.method, self.options, self.declared = method, options, False

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not self.declared:
            from privpix.mechanisms import mechanism_class

            cls = mechanism_class(self.method)
            params = {p.name: p for p in cls.params}
            generated = [
                click.Option([flag, name], type=_ParamValue(cls, params[name]), default=params[name].default,
                             show_default=params[name].default != "", help=params[name].help)
                for name, flag in self.options.items()
            ]  # fmt: skip
            at = next(i for i, p in enumerate(self.params) if p.name == "dataset") + 1
            self.params[at:at] = generated
            self.declared = True
        return super().get_params(ctx)


# The training parameters each alias takes, under the flags it has always had.
_OBFUSCATOR_OPTIONS = {
    "utility": "--utility", "private": "--private", "epochs": "--epochs", "batch_size": "--batch-size", "lr": "--lr",
    "patience": "--patience", "val_fraction": "--val-fraction", "measure": "--measure", "measure_k": "--measure-k",
}  # fmt: skip
_PPSGAN_OPTIONS = {
    "noise_epsilon": "--epsilon", "noise_delta": "--delta", "d": "--latent", "width": "--width",
    "ae_epochs": "--ae-epochs", "epochs": "--epochs", "batch_size": "--batch-size", "n_critic": "--n-critic",
    "recipe": "--recipe", "resensitize_every": "--resensitize-every",
}  # fmt: skip


@main.command("train-obfuscator", cls=_Alias, method="ae-obfuscator", options=_OBFUSCATOR_OPTIONS)
@click.option("--dataset", required=True, help="celeba[:train] (images) or adult[:train] (records).")
@click.option("--limit", type=click.IntRange(min=10), default=None, help="Train on a seeded subset.")
@_common
def train_obfuscator(dataset, limit, seed, data_dir, output, force, quiet, **params) -> None:
    """Alias of `privpix fit --method ae-obfuscator` on images, and of `--method ae-obfuscator-records` on a
    records dataset (Jamshidi et al. 2023's Algorithm 1; the two share these training parameters)."""
    from privpix.data.loaders import holds_records

    method = "ae-obfuscator-records" if holds_records(dataset) else "ae-obfuscator"
    fit_to_file(method, dataset, output, params, limit=limit, seed=seed, data_dir=data_dir, force=force, quiet=quiet)


@main.command("train-ppsgan", cls=_Alias, method="ppsgan", options=_PPSGAN_OPTIONS)
@click.option("--model", "kind", type=click.Choice(["ppsgan", "ppapnet", "acgan"]), default="ppsgan", show_default=True)
@click.option("--dataset", required=True, help="NAME[:SPLIT] with labels, e.g. mnist:train.")
@click.option("--limit", type=click.IntRange(min=2), default=None, help="Train on a seeded subset.")
@_common
def train_ppsgan(kind, dataset, limit, seed, data_dir, output, force, quiet, **params) -> None:
    """Alias of `privpix fit --method ppsgan|ppapnet|acgan` (Kim & Yang 2020; the three share their
    training parameters)."""
    fit_to_file(kind, dataset, output, params, limit=limit, seed=seed, data_dir=data_dir, force=force, quiet=quiet)
