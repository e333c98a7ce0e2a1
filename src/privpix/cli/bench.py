"""``privpix audit`` (empirical ε lower bound for one mechanism), ``privpix bench`` (the unified benchmark) and
``privpix demo`` (a small bench on built-in data)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from privpix import strict_json
from privpix.cli.app import console, main
from privpix.cli.options import (
    INPUT_PAIR_HELP,
    check_methods,
    executor_options,
    method_options,
    params_for_method,
    parse_floats,
    parse_params,
    parse_size,
    plain,
    progress_bar,
    split_methods,
)
from privpix.publishing.outputs import check_output_path, writing


@main.command()
@method_options()
@click.option(
    "--dataset",
    default="builtin-mnist",
    show_default=True,
    help="Images the neighbour pairs are built from (NAME[:SPLIT]; test split by default).",
)
@click.option("--input", "input_dir", type=click.Path(), default=None,
              help="A folder of your own images (or Parquet / WebDataset shards) instead of --dataset.")  # fmt: skip
@click.option("--images", "n_images", type=int, default=64, show_default=True, help="Images taken from it.")
@click.option("--size", default=None, help="Resize them to HEIGHTxWIDTH first (audits of slow mechanisms).")
@click.option("--trials", type=int, default=2000, show_default=True, help="Releases per side of each pair.")
@click.option(
    "--target",
    type=click.Choice(["auto", "statistic", "output"]),
    default="auto",
    show_default=True,
    help="For a mechanism fitted on the private set (a DP synthesizer), refitted per trial: audit the one DP "
    "statistic its fit releases (auto, when it has one: the strongest test) or the images it then synthesizes.",
)
@click.option(
    "--one-run",
    "canaries",
    type=int,
    default=None,
    help="One-run audit (Steinke et al. 2023) with this many canary slots: one fit (or one release) instead of "
    "one per trial, for dataset-level mechanisms: fitted on the private set (synthesizers, DP-SGD) or releasing a "
    "batch at once (pca-inverse). Use with --images larger than twice it.",
)
@click.option(
    "--budget-seconds",
    type=float,
    default=None,
    help="Adaptive: double the trials each round until the claim is refuted or this time runs out (the "
    "confidence is split over rounds, so a refutation holds at 95 %).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the result JSON.")
@executor_options
@click.option("--quiet", "-q", is_flag=True)
def audit(
    method,
    epsilon,
    delta,
    params,
    dataset,
    input_dir,
    n_images,
    size,
    trials,
    target,
    canaries,
    budget_seconds,
    seed,
    data_dir,
    json_path,
    workers,
    engine,
    scheduler,
    quiet,
) -> None:
    """Empirical ε audit: a 95 %-confidence lower bound on the ε a mechanism really spends, and a verdict.

    A mechanism fitted on the private set is refitted for every trial; those trials run on the workers
    (--workers, --engine), each seeded on its own, so the bound does not depend on where they ran."""
    import numpy as np

    from privpix.data import ImageSet, load_dataset
    from privpix.data.loaders import dataset_domain
    from privpix.data.memory import check_resize_fits
    from privpix.errors import ParameterError
    from privpix.fileio import write_text_atomic
    from privpix.mechanisms import fit_as_declared, get_mechanism

    mech = get_mechanism(method, epsilon, delta, domain=dataset_domain(dataset), **parse_params(params))
    hw = parse_size(size)  # a bad --size or --json fails before any data is loaded
    if json_path:
        check_output_path(json_path, "--json")
    if input_dir is not None:
        data = load_dataset(Path(input_dir))
        spec = data.source  # the folder named, never its path
    else:
        spec = dataset if ":" in dataset else f"{dataset}:test"
        data = load_dataset(spec, data_dir)
    if n_images < 2:
        raise ParameterError(f"--images must be >= 2, got {n_images}")
    if not isinstance(data, ImageSet) and mech.capabilities().fits_on != "model-file":
        if mech.capabilities().output != "records":  # before any fit on them
            raise ParameterError(f"--dataset {dataset}: holds records, and {mech.name} releases images")
    data = data.subset(np.arange(min(n_images, len(data))))
    if hw is not None:
        if not isinstance(data, ImageSet):
            raise ParameterError("--size: records have no image size")
        check_resize_fits(len(data), hw, data.shape[2])
        data = data.resized(*hw)
    # A mechanism that fits on the private set fits on these images (the audit's neighbour pairs come from them).
    if canaries is None:  # the one-run audit makes its own single fit on its canary design
        fit_as_declared(mech, data, data_dir, seed=seed)
    # Known once a model file is read: whether the mechanism releases records.
    if not isinstance(data, ImageSet) and mech.capabilities().output != "records":
        raise ParameterError(f"--dataset {dataset}: holds records, and {mech.name} releases images")
    # Imported once the arguments are checked: the evaluation package imports scikit-learn (2.3 CPU-s for a command
    # that only had to say an argument was bad; 0.5 now).
    from privpix.evaluation.audit import audit as run_audit

    t0 = time.perf_counter()
    if canaries is not None:
        from privpix.evaluation.audit.one_run import audit_one_run

        if not isinstance(data, ImageSet):
            raise ParameterError(f"--one-run: its canaries are images; --dataset {dataset} holds records")
        res = audit_one_run(mech, data, canaries=canaries, seed=seed, progress=None if quiet else plain)
    else:
        from privpix.executor import make_executor, using

        with make_executor(engine, workers, scheduler) as ex, using(ex):
            res = run_audit(mech, data, trials=trials, seed=seed, progress=None if quiet else plain, target=target,
                            budget_seconds=budget_seconds)  # fmt: skip
    out = {"dataset": spec, **res.to_dict()}
    if json_path:
        with writing(json_path, "--json"):
            write_text_atomic(Path(json_path), strict_json.dumps(out, indent=2, default=float))
    if quiet:
        return
    from privpix.report.summaries import verdict_text

    one_run = res.kind == "one-run"
    how = (
        "one run" if one_run else f"{res.trials} trials per side" + (f", round {res.rounds}" if res.rounds > 1 else "")
    )
    table = Table(title=escape(f"ε audit of {method} ({how}, {time.perf_counter() - t0:.1f} s)"), show_header=False)
    table.add_column("what")
    table.add_column("value")
    claimed = "none" if res.claimed_epsilon is None else f"{res.claimed_epsilon:g}"
    if res.claimed_delta:
        claimed += f" (δ = {res.claimed_delta:g})"
    if one_run:
        bounds = [("  one-run bound (Steinke, Nasr & Jagielski 2023)", f"{res.raw_epsilon_lower:.3f}")]
    elif res.curve:
        bounds = [
            ("  raw bound (no assumption)", f"{res.raw_epsilon_lower:.3f}"),
            (f"  bound through the {res.curve} curve", f"{res.curve_epsilon_lower:.3f}"),
            *([("  which assumes", res.curve_assumption)] if res.curve_assumption else []),
        ]
    else:
        bounds = [
            ("  raw bound (no assumption; no noise family declared, so no curve)", f"{res.raw_epsilon_lower:.3f}")
        ]
    tests = [("design and guesses", f"{res.pair}; {res.statistic}")] if one_run else [
        ("best distinguisher (raw)", f"{res.pair}; {res.statistic}"),
        ("held-out FPR / FNR", f"{res.false_positive_rate:.4f} / {res.false_negative_rate:.4f}"),
        *([("balanced test (curve)", f"{res.curve_statistic}; error rate {res.curve_error_rate:.4f}")]
          if res.curve else []),
    ]  # fmt: skip
    for k, v in [
        ("claimed ε", claimed + ("" if res.sound else "  [not sound: a noise knob, not a DP guarantee]")),
        ("neighbouring unit audited", res.unit),
        (f"audited ε ({100 * res.confidence:g} % lower bound)", f"{res.audited_epsilon_lower:.3f}"),
        *bounds,
        ("largest bound this audit can show", _ceiling_text(res.max_auditable_epsilon)),
        *tests,
        (
            "verdict",
            verdict_text(res.to_dict())
            + (f"; {100 * res.overall_confidence:g} % over the {res.rounds} rounds" if res.rounds > 1 else ""),
        ),
    ]:
        table.add_row(k, escape(v))
    console.print(table)
    if res.perfect_distinguisher:
        console.print(
            "[red]perfect distinguisher[/red]: no held-out error on this pair, so no finite ε holds for it; the "
            "bound is capped only by the number of trials."
        )
    if res.verdict == "consistent" and not res.refutable:
        console.print(
            f"not refutable with {trials} trials: the claim is above what they can refute "
            f"({res.max_auditable_epsilon:.2f}); rerun with more --trials or a smaller ε."
        )
    elif res.verdict == "consistent":
        console.print(
            "consistent: this audit could not refute the claim (it is a lower bound, not a proof of privacy)."
        )
    elif res.verdict == "violated":
        console.print("[red]violated[/red]: the claimed ε is refuted with 95 % confidence.")
    if json_path:
        plain(f"wrote {json_path}")


def _ceiling_text(ceiling: float) -> str:
    from privpix.evaluation.audit.curves import EPSILON_CAP

    if ceiling >= EPSILON_CAP:
        return f"≥ {EPSILON_CAP:g} (curves are followed no further)"
    return f"{ceiling:.3f}"


# What every grid point needs on a local worker (scikit-learn, SciPy and scikit-image come with them, about 1.4
# CPU-s): imported once in the fork server the workers start from, not once per worker.
GRID_MODULES = ("privpix.evaluation.grid", "privpix.evaluation.attacks", "privpix.evaluation.audit")


@main.command()
@click.option("--dataset", default=None, help="Dataset NAME with train/test splits (e.g. orl, mnist).")
@click.option("--input", "input_dir", type=click.Path(), default=None, help=INPUT_PAIR_HELP)
@click.option("--methods", required=True, help="Comma-separated mechanisms, each optionally name[key=value,...].")
@method_options(grid=True)
@click.option("--repeats", type=int, default=1, show_default=True)
@click.option("--output", required=True, type=click.Path(file_okay=False), help="Directory (resumable).")
@click.option("--attribute", default="", help="Attribute the inference attack targets (default: label).")
@click.option("--audit-trials", type=int, default=1000, show_default=True, help="Audit releases per side.")
@click.option(
    "--audit-max-trials",
    type=int,
    default=None,
    help="Most audit trials per side the bench may raise to so that claims up to ε = 10 are refutable "
    "(default: the audit's cap, 128,000); a claim that needs more keeps --audit-trials and is reported not "
    "refutable.",
)
@click.option("--cnn-epochs", type=int, default=3, show_default=True, help="CNN inversion attack epochs (0: off).")
@click.option("--limit", type=int, default=None, help="At most this many train and test images (seeded).")
@click.option("--size", default=None, help="Resize to HEIGHTxWIDTH first.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@executor_options
@click.option("--quiet", "-q", is_flag=True)
def bench(
    dataset, input_dir, methods, epsilons, delta, repeats, output, params, attribute, audit_trials, audit_max_trials,
    cnn_epochs, limit, size, seed, data_dir, workers, engine, scheduler, quiet,
) -> None:  # fmt: skip
    """Utility, quality, attacks and the ε audit for every (method, ε): tidy results and report.html.

    The (method, ε) points run in parallel (--workers, --engine); every cell is seeded on its own, so the
    results do not depend on where they ran."""
    from privpix.data import load_pair
    from privpix.data.pairs import INPUT_PAIR
    from privpix.errors import ParameterError
    from privpix.evaluation.attacks import attribute_values
    from privpix.evaluation.bench import BenchConfig, run_bench
    from privpix.executor import make_executor
    from privpix.mechanisms import mechanism_class

    method_list = split_methods(methods, dataset)
    common = parse_params(params)
    check_methods(method_list, common, "--methods")
    eps = parse_floats(epsilons, "epsilon")
    hw = parse_size(size)
    # Checked here, not by the run: it writes config.json into --output first, and a later run with the
    # corrected value would then be refused as "a benchmark with different" settings.
    for opt, value, least in (
        ("--repeats", repeats, 1),
        ("--audit-trials", audit_trials, 20),
        ("--audit-max-trials", audit_trials if audit_max_trials is None else audit_max_trials, audit_trials),
        ("--cnn-epochs", cnn_epochs, 0),
    ):
        if value < least:
            raise ParameterError(f"{opt} must be >= {least}, got {value}")
    check_output_path(output, "--output", folder=True)
    if (dataset is None) == (input_dir is None):
        raise ParameterError("give exactly one of --dataset NAME and --input DIR")
    config = BenchConfig(
        dataset=dataset if dataset is not None else INPUT_PAIR,
        methods=method_list,
        epsilons=eps,
        repeats=repeats,
        seed=seed,
        params={m: params_for_method(m, common) for m in method_list},
        attribute=attribute,
        audit_trials=audit_trials,
        audit_max_trials=audit_max_trials,
        cnn_epochs=cnn_epochs,
        limit=limit,
        size=hw,
        delta=delta,
    )
    train, test = load_pair(dataset, data_dir, limit, seed, hw, False, input_dir=input_dir)
    if attribute:
        try:
            attribute_values(train, attribute)
        except ParameterError as exc:
            raise ParameterError(f"--attribute: {exc}") from None
    steps = sum((repeats + 1) * (len(eps) if mechanism_class(m).about.uses_epsilon else 1) for m in method_list)
    bar, step = progress_bar(steps, "bench", "step", quiet)

    if not quiet:
        plain(
            f"privpix bench: {dataset} ({len(train)} train / {len(test)} test), {len(method_list)} methods, "
            f"ε ∈ {eps}, {repeats} repeat(s) → {output}"
        )
    t0 = time.perf_counter()
    with writing(output, "--output"), make_executor(engine, workers, scheduler, GRID_MODULES) as executor:
        res = run_bench(train, test, config, output, progress=step, data_dir=data_dir, executor=executor)
    bar.close()
    if quiet:
        return
    print_audit_table(res, "claimed versus audited ε")
    plain(f"wrote {Path(output) / 'report.html'}, results.csv, results.json in {time.perf_counter() - t0:.0f} s")


def print_audit_table(res: dict, title: str) -> None:
    """The bench's summary on the console: per (method, ε) the claim, the audited bound, the verdict, and the
    mean utility and re-identification over repeats."""
    from privpix.report.summaries import bound_text, cell_means, num, verdict_text

    table = Table(title=title)
    for col in ("method", "ε", "sound", "claimed (unit)", "audited ≥", "verdict", "accuracy", "re-id (best)"):
        table.add_column(col)
    keys = ("accuracy", "reid_best")
    means = {(m, e): v for m, e, v in cell_means(res["cells"], keys)}
    for a in res["audits"]:
        v = means.get((a["method"], a["claimed_epsilon_requested"]), {})
        mean = [float("nan") if v.get(k) is None else v[k] for k in keys]
        claimed = "—" if a["claimed_epsilon"] is None else f"{a['claimed_epsilon']:g}"
        table.add_row(
            escape(a["method"]),
            "—" if a["claimed_epsilon_requested"] is None else f"{a['claimed_epsilon_requested']:g}",
            "yes" if a["sound"] else "NO",
            f"{claimed} ({a['unit']})",
            bound_text(a),
            verdict_text(a),
            num(mean[0]),
            num(mean[1]),
        )
    console.print(table)


# δ of the demo's (ε, δ) mechanisms: below 1/n for any private set of fewer than 100 000 images.
DEMO_DELTA = 1e-5
# The demo's audits raise their trials to at most this (32,000 per side makes the paper mechanisms' ε = 8 refutable);
# the paper's PCA inverse at ε = 0.5 claims d·ε = 10 and would need 128,000 batch releases per side (> 10 minutes),
# so it keeps the trials asked for and is shown not refutable.
DEMO_AUDIT_MAX_TRIALS = 32_000


@main.command()
@click.option("--output", type=click.Path(file_okay=False), default="demo-output", show_default=True)
@click.option(
    "--dataset",
    default="builtin-mnist",
    show_default=True,
    help="A built-in dataset (no download, no data directory needed).",
)
# ε = 1 (not lower) is the grid's smallest: the report's first answer is for "per-image ε ≤ 1", and a synthesizer
# fitted on 4,000 images needs all of it (0.61 at ε = 0.5, benchmarks/results/demo_answer.md).
@click.option("--epsilon", "epsilons", default="1,2,8", show_default=True)
@click.option("--limit", type=int, default=1000, show_default=True, help="Train and test images used.")
@click.option("--audit-trials", type=int, default=1000, show_default=True, help="Audit releases per side.")
@click.option(
    "--audit-max-trials",
    type=int,
    default=DEMO_AUDIT_MAX_TRIALS,
    show_default=True,
    help="Most audit trials per side the demo raises to (a claim that needs more is shown not refutable).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@executor_options
@click.option("--quiet", "-q", is_flag=True)
def demo(output, dataset, epsilons, limit, audit_trials, audit_max_trials, seed, workers, engine, scheduler,
         quiet) -> None:  # fmt: skip
    """Offline demo: `privpix bench` over a few mechanisms and ε on built-in data (utility, attacks, ε audit)
    → report.html, results.csv, results.json. Replaces an earlier demo in --output. The (method, ε) points run
    on every core (--workers); each is seeded on its own, so the results do not depend on the worker count."""
    from privpix.data import load_pair
    from privpix.errors import ParameterError
    from privpix.evaluation.bench import DEMO_METHODS, BenchConfig, demo_fit_set, run_bench
    from privpix.executor import make_executor

    t0 = time.perf_counter()
    out = Path(output)
    eps = parse_floats(epsilons, "epsilon")
    train, test = load_pair(dataset, None, limit, seed, None, False)
    fit_set = demo_fit_set(dataset, test, seed)
    cfg = out / "config.json"
    if out.is_dir() and any(out.iterdir()):
        # A demo starts afresh, but only ever removes the files of an earlier privpix run.
        try:
            stored = json.loads(cfg.read_text())
            ours = isinstance(stored, dict) and {"dataset", "seed", "audit_trials"} <= set(stored)
        except (OSError, ValueError):
            ours = False
        if not ours:
            raise ParameterError(f"--output {out}: not empty and not an earlier privpix demo or bench; choose another")
        for name in ("config.json", "cells.jsonl", "audits.jsonl"):
            (out / name).unlink(missing_ok=True)
    config = BenchConfig(
        dataset=dataset,
        methods=list(DEMO_METHODS),
        epsilons=eps,
        seed=seed,
        limit=limit,
        cnn_epochs=0,
        audit_trials=audit_trials,
        audit_max_trials=audit_max_trials,
        delta=DEMO_DELTA,
        fit_images=len(fit_set),
    )
    if not quiet:
        console.print(
            escape(
                f"privpix demo: {dataset} ({len(train)} train / {len(test)} test images), "
                f"{len(DEMO_METHODS)} mechanisms, ε ∈ {eps} (δ = {DEMO_DELTA:g} for (ε, δ) claims): utility, attacks "
                f"and an ε audit per cell; the synthesizer is fitted on all {len(fit_set)} images not scored as test "
                "images"
            ),
            highlight=False,
        )
    bar, step = progress_bar(2 * len(DEMO_METHODS) * len(eps), "demo", "step", quiet)
    with make_executor(engine, workers, scheduler, GRID_MODULES) as executor:
        res = run_bench(train, test, config, out, progress=step, fit_train=fit_set, executor=executor)
    bar.close()
    if quiet:
        return
    print_audit_table(res, "demo: claimed versus audited ε, utility and re-identification")
    console.print(
        "NO in 'sound' means the ε is a paper's noise knob, not a DP guarantee; 'violated' means the audit "
        "refuted the claim."
    )
    _print_budget_answers(res["cells"])
    console.print(
        escape(f"wrote {out / 'report.html'}, results.csv, results.json in {time.perf_counter() - t0:.0f} s"),
        highlight=False,
    )


def _print_budget_answers(cells: list[dict]) -> None:
    """The report's first answer on the console: the most useful sound release within each per-image budget."""
    from privpix.report.summaries import budget_answers

    for budget, best in budget_answers(cells):
        if best is None:
            answer = "no release of this run has a sound guarantee that strong"
        else:
            run_at = "" if best.epsilon is None else f" at ε={best.epsilon:g}"
            answer = f"{best.method}{run_at} (per-image ε {best.per_image_epsilon:g}): accuracy {best.accuracy:.3f}"
        console.print(escape(f"per-image ε ≤ {budget:g}: {answer}"), highlight=False)
    console.print("the frontier plot is the first section of report.html: 'What should I use at my per-image budget?'")
