"""``privpix datasets``, ``privpix mechanisms`` and ``privpix evaluate``: what privpix knows, and utility and
quality of releases on a dataset's train/test split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from privpix import strict_json
from privpix.cli.app import console, err_console, main
from privpix.cli.options import (
    INPUT_PAIR_HELP,
    check_methods,
    method_options,
    params_for_method,
    parse_floats,
    parse_params,
    parse_size,
    progress_bar,
    split_methods,
)
from privpix.errors import PrivpixError
from privpix.publishing.outputs import check_output_path, writing


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
        err_console.print(f"[yellow]note:[/yellow] {escape(str(exc))}", highlight=False)
    table = Table(title=escape(f"datasets (data directory: {root or 'not found'})"))
    for col in ("name", "found", "where", "size on disk", "description", "splits", "terms"):
        table.add_column(col)
    for info in DATASETS.values():
        if info.folder is None:
            found, where, size = "yes", "inside an installed package", "—"
        else:
            p = root / info.folder if root else None
            ok = p is not None and p.is_dir()
            found = "yes" if ok else "no"
            where = escape(str(p)) if p else "—"
            size = f"{sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) / 1e6:.1f} MB" if p and ok else "—"
        table.add_row(info.name, found, where, size, info.description, ",".join(info.splits), info.terms)
    console.print(table)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def mechanisms(as_json: bool) -> None:
    """List the mechanisms, the recommended ones first, grouped by what they are for: what each guarantees and its
    parameters with their help."""
    from privpix.mechanisms import ALIASES, MECHANISMS, parse_method_spec
    from privpix.mechanisms.base import USES

    def order(name: str) -> tuple[int, int, str]:
        about = MECHANISMS[name].about
        return (0 if about.recommended_for else 1, list(USES).index(about.use), name)

    items: list[dict[str, Any]] = []  # JSON objects: what --json prints
    for name in sorted(MECHANISMS, key=order):
        cls = MECHANISMS[name]
        aliases = [a for a in sorted(ALIASES) if parse_method_spec(a)[0] == name]
        items.append(
            {
                "name": name,
                "recommended_for": cls.about.recommended_for or None,
                "use": cls.about.use,
                "output": cls.output,  # what it releases: its kind class's, whatever its parameters
                "aliases": [{"alias": a, "spec": ALIASES[a][0], "why": ALIASES[a][1]} for a in aliases],
                "model": cls.about.guarantee_model,
                "soundness": cls.about.soundness,
                "uses_epsilon": cls.about.uses_epsilon,
                "paper": cls.about.paper,
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
        click.echo(strict_json.dumps(items, indent=2))
        return
    table = Table(title="mechanisms (recommended first; `privpix release --method NAME --param key=value`)")
    for col in ("name", "what it is for", "what holds", "parameters (default: help)"):
        table.add_column(col)
    group = None
    for it in items:
        heading = "recommended" if it["recommended_for"] else USES[it["use"]]
        if heading != group:
            if group is not None:
                table.add_section()
            table.add_row(f"[bold]{escape(heading)}[/bold]", "", "", "")
            group = heading
        params = "\n".join(f"{p['name']}={p['default']}: {p['help']}" for p in it["parameters"])
        what = it["recommended_for"] or it["summary"]
        table.add_row(
            escape(it["name"] + "".join(f" (alias {a['alias']})" for a in it["aliases"])),
            escape(f"{what} [{it['paper']}]" if it["paper"] else what),
            escape(f"{it['model']}: {it['soundness']}"),
            escape(params),
        )
    console.print(table)


@main.command()
@click.option("--dataset", default=None, help="Dataset NAME with train/test splits (e.g. orl, mnist).")
@click.option("--input", "input_dir", type=click.Path(), default=None, help=INPUT_PAIR_HELP)
@click.option(
    "--method",
    "methods",
    required=True,
    multiple=True,
    help="Mechanism(s): comma-separated and/or repeated; name[key=value,...] pins parameters.",
)
@method_options(grid=True)
@click.option("--repeats", type=int, default=1, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--limit", type=int, default=None, help="Use at most this many train and test images (seeded).")
@click.option("--size", default=None, help="Resize to HEIGHTxWIDTH first.")
@click.option("--grayscale", is_flag=True, help="Convert colour images to grey first.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write rows as JSON.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None, help="Write HTML report.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--quiet", "-q", is_flag=True)
def evaluate(
    dataset, input_dir, methods, epsilons, delta, repeats, seed, params, limit, size, grayscale, json_path,
    report_path, data_dir, quiet,
) -> None:  # fmt: skip
    """Utility (PCA + SVM) and quality of each (method, ε, repeat) on a dataset's train/test split, or on two
    halves of your own folder (--input)."""
    from privpix.data import load_pair
    from privpix.data.pairs import INPUT_PAIR, pair_name
    from privpix.errors import ParameterError

    if repeats < 1:
        raise ParameterError(f"--repeats must be >= 1, got {repeats}")
    method_list = [m for spec in methods for m in split_methods(spec, dataset)]
    eps_list = parse_floats(epsilons, "epsilon")
    common = parse_params(params)
    check_methods(method_list, common, "--method")
    for opt, path in (("--json", json_path), ("--report", report_path)):
        if path:
            check_output_path(path, opt)  # before the evaluation, not after it
    name = pair_name(dataset) if dataset is not None else INPUT_PAIR
    train, test = load_pair(dataset, data_dir, limit, seed, parse_size(size), grayscale, input_dir=input_dir)
    rows, fitted = _run_evaluation(train, test, method_list, eps_list, repeats, seed, common, name, data_dir, quiet,
                                   delta)  # fmt: skip
    _print_summary(rows, quiet)
    if json_path:
        from privpix.fileio import write_text_atomic

        with writing(json_path, "--json"):
            write_text_atomic(Path(json_path), strict_json.dumps(rows, indent=2, default=float))
        if not quiet:
            console.print(f"wrote {escape(json_path)}", highlight=False)
    if report_path:
        with writing(report_path, "--report"):
            _write_report(report_path, rows, test, method_list, eps_list, repeats, seed, name, fitted)
        if not quiet:
            console.print(f"wrote {escape(report_path)}", highlight=False)


def _run_evaluation(train, test, methods, epsilons, repeats, seed, common, dataset, data_dir, quiet, delta=None):
    from privpix.evaluation.grid import FittedMechanisms, grid_points, run_grid

    fitted = FittedMechanisms({m: params_for_method(m, common) for m in methods}, train, seed, data_dir, delta)
    points = grid_points(methods, epsilons)
    bar, step = progress_bar(repeats * len(points), "evaluate", "cell", quiet)
    rows = run_grid(train, test, points, fitted, dataset=dataset, repeats=repeats, seed=seed, progress=step)
    bar.close()
    return rows, fitted


def _print_summary(rows, quiet):
    if quiet:
        return
    from privpix.report.summaries import num, summary_rows

    table = Table(title="evaluation (mean over repeats)")
    for col in ("method", "ε", "accuracy", "F1", "acc. release-all", "PSNR", "SSIM", "entropy", "guarantee"):
        table.add_column(col)
    for s in summary_rows(rows):
        table.add_row(
            escape(s["method"]),  # name[key=value] labels are not markup
            "—" if s["epsilon"] is None else f"{s['epsilon']:g}",
            num(s["accuracy"]),
            num(s["f1"]),
            num(s["accuracy_release_all"]),
            num(s["psnr"], ".1f"),
            num(s["ssim"]),
            num(s["entropy"], ".2f"),
            escape(s["guarantee_compact"]),
        )
    console.print(table)


def _write_report(path, rows, test, methods, epsilons, repeats, seed, dataset, fitted):
    from privpix.data.loaders import credit
    from privpix.evaluation.grid import grid_points, sample_grids
    from privpix.report import write_report

    grids = sample_grids(grid_points(methods, epsilons), fitted, test, seed, credit(dataset), k=8)
    config = {
        "dataset": dataset,
        "methods": list(methods),
        "epsilons": list(epsilons),
        "repeats": repeats,
        "seed": seed,
    }
    write_report(path, {"config": config, "cells": rows}, grids)
