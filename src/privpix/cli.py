"""The ``privpix`` command. Every user error is one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from privpix import __version__
from privpix.errors import PrivpixError

# A wide console even when piped, so tables stay one row per line in logs.
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, soft_wrap=True)


class _Group(click.Group):
    """Turns privpix errors and usage errors into a one-line message and exit code 2."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.UsageError as exc:
            ctx = exc.ctx
            hint = ""
            if ctx is not None:
                hint = " (see `privpix --help`)" if ctx.parent is None else f" (see `privpix {ctx.info_name} --help`)"
            err_console.print(f"[red]error:[/red] {escape(exc.format_message() + hint)}", highlight=False)
            sys.exit(2)
        except click.exceptions.Abort:
            err_console.print("[red]aborted[/red]")
            sys.exit(1)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PrivpixError as exc:
            err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            sys.exit(2)
        except KeyboardInterrupt:
            err_console.print("interrupted: nothing partial was published")
            sys.exit(130)


def _floats(text: str | None, name: str) -> list[float]:
    from privpix.errors import ParameterError, check_positive

    if text is None:
        return []
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(check_positive(name, float(part)))
        except ValueError:
            raise ParameterError(f"{name}: {part!r} is not a number") from None
    return out


def _params(items: Sequence[str]) -> dict[str, str]:
    from privpix.errors import ParameterError

    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ParameterError(f"--param {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def _size(text: str | None) -> tuple[int, int] | None:
    from privpix.errors import ParameterError

    if not text:
        return None
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ParameterError(f"--size {text!r}: expected HEIGHTxWIDTH, e.g. 64x64") from None
    if h < 1 or w < 1:
        raise ParameterError(f"--size {text!r}: both sides must be >= 1")
    return h, w


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="privpix")
def main() -> None:
    """Publish image data privately, and measure what the publication protects."""


@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the datasets live (default: $PRIVPIX_DATA or ../shared/datasets).",
)
def datasets(data_dir: str | None) -> None:
    """List the datasets privpix knows, where they were found, and their sizes."""
    from privpix.data.loaders import DATASETS, resolve_data_dir

    try:
        root: Path | None = resolve_data_dir(data_dir)
    except PrivpixError as exc:
        if data_dir is not None:
            raise
        root = None
        err_console.print(f"[yellow]note:[/yellow] {exc}")
    table = Table(title=f"datasets (data directory: {root or 'not found'})")
    for col in ("name", "found", "where", "size on disk", "description", "splits", "terms"):
        table.add_column(col)
    for info in DATASETS.values():
        if info.folder is None:
            found, where, size = "yes", "inside an installed package", "—"
        else:
            p = root / info.folder if root else None
            ok = p is not None and p.is_dir()
            found = "yes" if ok else "no"
            where = str(p) if p else "—"
            size = f"{sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) / 1e6:.1f} MB" if ok else "—"
        table.add_row(info.name, found, where, size, info.description, ",".join(info.splits), info.terms)
    console.print(table)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def mechanisms(as_json: bool) -> None:
    """List every mechanism with its guarantee model and parameters."""
    from privpix.mechanisms import MECHANISMS

    items = []
    for name in sorted(MECHANISMS):
        cls = MECHANISMS[name]
        items.append(
            {
                "name": name,
                "model": cls.model,
                "soundness": cls.soundness,
                "uses_epsilon": cls.uses_epsilon,
                "paper": cls.paper,
                "summary": cls.summary,
                "parameters": [
                    {
                        "name": p.name,
                        "type": p.kind.__name__,
                        "default": p.default,
                        "help": p.help,
                        **({"choices": list(p.choices)} if p.choices else {}),
                    }
                    for p in cls.params
                ],
            }
        )
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    table = Table(title="mechanisms")
    for col in ("name", "guarantee model", "what holds", "ε", "paper", "parameters (default)", "summary"):
        table.add_column(col)
    for it in items:
        params = "\n".join(f"{p['name']}={p['default']}" for p in it["parameters"])
        table.add_row(
            it["name"],
            it["model"],
            it["soundness"],
            "yes" if it["uses_epsilon"] else "no",
            it["paper"],
            params,
            it["summary"],
        )
    console.print(table)


@main.command()
@click.option("--dataset", "dataset", default=None, help="NAME[:SPLIT], e.g. orl or mnist:test.")
@click.option(
    "--input",
    "input_dir",
    type=click.Path(),
    default=None,
    help="A folder of images (flat, or one sub-folder per class).",
)
@click.option("--method", required=True, help="Mechanism name (see `privpix mechanisms`).")
@click.option("--epsilon", type=float, default=None, help="Privacy parameter ε (for DP mechanisms).")
@click.option("--delta", type=float, default=None, help="δ for (ε, δ) mechanisms.")
@click.option("--param", "params", multiple=True, help="Mechanism parameter key=value (repeatable).")
@click.option("--seed", type=int, default=None, help="Seed for a reproducible release.")
@click.option("--secure", is_flag=True, help="Draw noise from the OS CSPRNG with exact samplers (no seed).")
@click.option("--output", required=True, type=click.Path(), help="Directory for the PNGs and manifest.json.")
@click.option("--size", default=None, help="Resize every image to HEIGHTxWIDTH first.")
@click.option("--batch-size", type=int, default=256, show_default=True, help="Images in memory at once.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Dataset directory.")
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False),
    default=None,
    help="Privacy ledger file: the release is charged to it and refused when over budget.",
)
@click.option("--budget", type=float, default=None, help="Per-image ε budget for a new --ledger file.")
@click.option("--force", is_flag=True, help="Replace an earlier release in --output.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or summary.")
def release(
    dataset,
    input_dir,
    method,
    epsilon,
    delta,
    params,
    seed,
    secure,
    output,
    size,
    batch_size,
    data_dir,
    ledger,
    budget,
    force,
    quiet,
) -> None:
    """Privatize a dataset or a folder of images and write PNGs plus manifest.json."""
    from tqdm import tqdm

    from privpix.accounting import PrivacyLedger
    from privpix.data import ImageSet, iter_folder, list_image_files, load_dataset
    from privpix.errors import ParameterError
    from privpix.mechanisms import get_mechanism
    from privpix.noise import make_rng
    from privpix.publish import check_output, release_to_dir

    if (dataset is None) == (input_dir is None):
        raise ParameterError("give exactly one of --dataset NAME[:SPLIT] or --input DIR")
    if batch_size < 1:
        raise ParameterError(f"--batch-size must be >= 1, got {batch_size}")
    mech = get_mechanism(method, epsilon=epsilon, delta=delta, **_params(params))
    if "batch" in mech.values:
        # Dataset-level mechanisms privatize in batches of their own; stream whole batches of them.
        batch_size = max(1, batch_size // mech.batch) * mech.batch
    rng = make_rng(seed, secure=secure)
    check_output(Path(output), force)
    hw = _size(size)
    book = None
    if ledger is not None:
        lp = Path(ledger)
        if lp.exists():
            book = PrivacyLedger.load(lp)
        elif budget is None:
            raise ParameterError(f"--ledger {lp}: file does not exist; give --budget to start a new ledger")
        else:
            book = PrivacyLedger(budget)
    if input_dir is not None:
        files, skipped = list_image_files(input_dir)
        for s in skipped:
            err_console.print(f"[yellow]skipped[/yellow] (not an image): {s}")
        total = len(files)
        batches = iter_folder(input_dir, batch_size=batch_size, size=hw)
        source = str(input_dir)
    else:
        data = load_dataset(dataset, data_dir)
        if not isinstance(data, ImageSet):
            if not mech.supports_records:
                raise ParameterError(f"--dataset {dataset}: holds records, not images, and {method} releases images")
            _release_records(mech, data, dataset, output, rng, seed, secure, force, ledger, book, quiet)
            return
        if hw is not None:
            data = data.resized(*hw)
        total = len(data)
        batches = data.batches(batch_size)
        source = dataset
    if mech.values.get("public") and mech.values.get("basis") == "public":
        mech.fit(load_dataset(mech.values["public"], data_dir))  # public data from the same --data-dir
    else:
        mech.fit(None)
    if book is not None:
        # Charge before writing anything: a refused release writes nothing.
        first = next(iter(batches))
        book.check(mech.guarantee(first.shape))
        batches = _chain(first, batches)
    bar = tqdm(total=total, unit="img", disable=quiet, desc=f"{mech.name}")
    t0 = time.perf_counter()
    manifest = release_to_dir(
        mech,
        batches,
        output,
        rng,
        force=force,
        metadata={"source": source, "seed": seed, "secure_rng": secure},
        on_batch=bar.update,
    )
    bar.close()
    what = f"{len(manifest['files'])} images and {output}/manifest.json"
    _finish_release(mech, manifest, source, output, ledger, book, quiet, what, t0)


def _finish_release(mech, manifest, source, output, ledger, book, quiet, what, t0) -> None:
    """Charge the ledger (if any) and print what was written and the guarantee."""
    from privpix.guarantees import Guarantee

    g = Guarantee.from_dict(manifest["guarantee"])
    if book is not None:
        book.spend(g, label=f"{mech.name} on {source} → {output}")
        book.save(ledger)
    if not quiet:
        console.print(f"wrote {what} in {time.perf_counter() - t0:.1f} s")
        console.print(g.text(), highlight=False)
        if book is not None:
            console.print(f"ledger {ledger}: spent ε={book.spent_epsilon:.4g} of {book.epsilon_budget:.4g}")


def _release_records(mech, data, dataset, output, rng, seed, secure, force, ledger, book, quiet) -> None:
    from privpix.publish import release_records_to_dir

    mech.fit(None)
    if book is not None:
        book.check(mech.guarantee((0, 0, 0)))  # refuse before writing anything
    t0 = time.perf_counter()
    manifest = release_records_to_dir(
        mech, data, output, rng, force=force, metadata={"source": dataset, "seed": seed, "secure_rng": secure}
    )
    what = f"{manifest['records']} records to {output}/records.csv and manifest.json"
    _finish_release(mech, manifest, dataset, output, ledger, book, quiet, what, t0)


def _chain(first, rest):
    yield first
    yield from rest


@main.command()
@click.option("--dataset", required=True, help="Dataset NAME with train/test splits (e.g. orl, mnist).")
@click.option(
    "--method",
    "methods",
    required=True,
    multiple=True,
    help="Mechanism(s): comma-separated and/or repeated; name[key=value,...] pins parameters.",
)
@click.option("--epsilon", "epsilons", default="0.1,1,10", show_default=True, help="Comma-separated ε values.")
@click.option("--repeats", type=int, default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--param", "params", multiple=True, help="key=value for every method that has the parameter.")
@click.option("--limit", type=int, default=None, help="Use at most this many train and test images (seeded).")
@click.option("--size", default=None, help="Resize to HEIGHTxWIDTH first.")
@click.option("--grayscale", is_flag=True, help="Convert colour images to grey first.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write rows as JSON.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, help="Write HTML report.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--quiet", "-q", is_flag=True)
def evaluate(
    dataset, methods, epsilons, repeats, seed, params, limit, size, grayscale, json_path, report_path, data_dir, quiet
) -> None:
    """Utility (PCA + SVM) and quality of each (method, ε, repeat) on a dataset's train/test split."""
    from privpix.errors import ParameterError

    if repeats < 1:
        raise ParameterError(f"--repeats must be >= 1, got {repeats}")
    method_list = [m for spec in methods for m in _split_methods(spec)]
    eps_list = _floats(epsilons, "epsilon")
    common = _params(params)
    name = dataset.split(":")[0]
    train, test = _load_pair(name, data_dir, limit, seed, _size(size), grayscale)
    rows = _run_evaluation(train, test, method_list, eps_list, repeats, seed, common, name, quiet)
    _print_summary(rows, quiet)
    if json_path:
        from privpix.accounting import write_text_atomic

        write_text_atomic(Path(json_path), json.dumps(rows, indent=2, default=float))
        if not quiet:
            console.print(f"wrote {json_path}")
    if report_path:
        _write_report(report_path, rows, test, method_list, eps_list, seed, name, common)
        if not quiet:
            console.print(f"wrote {report_path}")


def _split_methods(spec: str) -> list[str]:
    """Split on commas outside brackets: 'a,b[x=1,y=2]' → ['a', 'b[x=1,y=2]']."""
    out, depth, cur = [], 0, ""
    for ch in spec:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _load_pair(name, data_dir, limit, seed, hw, grayscale):
    import numpy as np

    from privpix.data import ImageSet, load_dataset
    from privpix.errors import ParameterError

    train = load_dataset(f"{name}:train", data_dir)
    test = load_dataset(f"{name}:test", data_dir)
    if not isinstance(train, ImageSet):
        raise ParameterError(f"--dataset {name}: holds records, not images")
    if limit is not None:
        if limit < 2:
            raise ParameterError(f"--limit must be >= 2, got {limit}")
        rng = np.random.default_rng(seed)
        if len(train) > limit:
            train = train.subset(np.sort(rng.choice(len(train), limit, replace=False)))
        if len(test) > limit:
            test = test.subset(np.sort(rng.choice(len(test), limit, replace=False)))
    if grayscale:
        train, test = train.grayscale(), test.grayscale()
    if hw is not None:
        train, test = train.resized(*hw), test.resized(*hw)
    return train, test


def _method_params(method: str, common: dict[str, str]) -> dict[str, str]:
    """The ``--param`` values that ``method`` has a parameter for (others belong to other methods)."""
    from privpix.mechanisms import mechanism_class

    known = {p.name for p in mechanism_class(method).params}
    return {k: v for k, v in common.items() if k in known}


def _progress(total: int, desc: str, unit: str, quiet: bool):
    """A tqdm bar and the ``progress(msg)`` callback the evaluation code calls once per finished step."""
    from tqdm import tqdm

    bar = tqdm(total=total, disable=quiet, desc=desc, unit=unit)

    def step(msg: str) -> None:
        bar.set_postfix_str(msg[-60:])
        bar.update(1)

    return bar, step


def _run_evaluation(train, test, methods, epsilons, repeats, seed, common, dataset, quiet):
    from privpix.evaluation import evaluate as run
    from privpix.mechanisms import mechanism_class

    per_method = {m: _method_params(m, common) for m in methods}
    cells = sum(repeats * (len(epsilons) if mechanism_class(m).uses_epsilon else 1) for m in methods)
    bar, step = _progress(cells, "evaluate", "cell", quiet)

    rows = run(
        train, test, methods, epsilons, repeats=repeats, seed=seed, params=per_method, dataset=dataset, progress=step
    )
    bar.close()
    return rows


def _print_summary(rows, quiet):
    if quiet:
        return
    from privpix.report.html import summary_rows

    table = Table(title="evaluation (mean over repeats)")
    for col in ("method", "ε", "accuracy", "F1", "acc. release-all", "PSNR", "SSIM", "entropy", "guarantee"):
        table.add_column(col)
    for s in summary_rows(rows):
        table.add_row(
            s["method"],
            "—" if s["epsilon"] is None else f"{s['epsilon']:g}",
            f"{s['accuracy']:.3f}",
            f"{s['f1']:.3f}",
            f"{s['accuracy_release_all']:.3f}",
            f"{s['psnr']:.1f}",
            f"{s['ssim']:.3f}",
            f"{s['entropy']:.2f}",
            s["guarantee_compact"],
        )
    console.print(table)


def _write_report(path, rows, test, methods, epsilons, seed, dataset, common, notes=()):
    import numpy as np

    from privpix.data.loaders import credit
    from privpix.mechanisms import get_mechanism, mechanism_class
    from privpix.noise import make_rng
    from privpix.report import sample_grid_png, write_report

    k = min(8, len(test))
    idx = np.linspace(0, len(test) - 1, k).astype(int)
    sample = test.subset(idx)
    grids = []
    for eps in sorted(set(epsilons)) or [None]:
        released = {}
        for m in methods:
            uses_eps = mechanism_class(m).uses_epsilon
            mech = get_mechanism(m, epsilon=eps if uses_eps else None, **_method_params(m, common))
            released[m] = mech.release(sample, make_rng(seed)).images.as_float()
        png = sample_grid_png(sample.as_float(), released)
        grids.append(
            (
                f"Test images of {dataset} and their releases at ε={eps} (methods without ε: their "
                "fixed setting)." + credit(dataset),
                png,
            )
        )
    write_report(path, rows, f"privpix evaluation: {dataset}", dataset, grids, notes)


DEMO_METHODS = (
    "pixel-laplace",
    "pixel-laplace[sensitivity=bound,unit=pixel]",
    "dp-pix[b=4,m=1]",
    "sra",
    "pca-inverse",
    "ldp-pixel",
    "gaussian-blur[sigma=1.5]",
)


@main.command()
@click.option("--output", type=click.Path(file_okay=False), default="demo-output", show_default=True)
@click.option(
    "--dataset",
    default="builtin-mnist",
    show_default=True,
    help="A built-in dataset (no download, no data directory needed).",
)
@click.option("--epsilon", "epsilons", default="0.5,2,8", show_default=True)
@click.option("--limit", type=int, default=1000, show_default=True, help="Train and test images used.")
@click.option("--audit-trials", type=int, default=1000, show_default=True, help="Audit releases per side.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--quiet", "-q", is_flag=True)
def demo(output, dataset, epsilons, limit, audit_trials, seed, quiet) -> None:
    """Offline demo: `privpix bench` over a few mechanisms and ε on built-in data (utility, attacks, ε audit)
    → report.html, results.csv, results.json. Replaces an earlier demo in --output."""
    from privpix.bench import BenchConfig, run_bench
    from privpix.cli_bench import print_audit_table

    t0 = time.perf_counter()
    out = Path(output)
    for name in ("config.json", "cells.jsonl", "audits.jsonl"):  # a demo always starts afresh
        (out / name).unlink(missing_ok=True)
    eps = _floats(epsilons, "epsilon")
    train, test = _load_pair(dataset, None, limit, seed, None, False)
    config = BenchConfig(
        dataset=dataset,
        methods=list(DEMO_METHODS),
        epsilons=eps,
        seed=seed,
        limit=limit,
        cnn_epochs=0,
        audit_trials=audit_trials,
    )
    if not quiet:
        console.print(
            f"privpix demo: {dataset} ({len(train)} train / {len(test)} test images), "
            f"{len(DEMO_METHODS)} mechanisms, ε ∈ {eps}: utility, attacks and an ε audit per cell"
        )
    bar, step = _progress(2 * len(DEMO_METHODS) * len(eps), "demo", "step", quiet)
    res = run_bench(train, test, config, out, progress=step)
    bar.close()
    if quiet:
        return
    print_audit_table(res, "demo: claimed versus audited ε, utility and re-identification")
    console.print(
        "NO in 'sound' means the ε is a paper's noise knob, not a DP guarantee; 'violated' means the audit "
        "refuted the claim."
    )
    console.print(f"wrote {out / 'report.html'}, results.csv, results.json in {time.perf_counter() - t0:.0f} s")


from privpix import cli_bench, cli_ldp, cli_neural  # noqa: E402,F401  (registers the sub-commands)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
