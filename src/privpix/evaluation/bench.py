"""The unified benchmark: utility, quality, attacks and the empirical ε audit for every (method, ε), one
resumable run, tidy results and one self-contained HTML report.

Layout of an output directory::

    config.json    what the run is (dataset, sizes, seed): a rerun must match it
    cells.jsonl    one line per finished (method, ε, repeat) cell, appended as each finishes
    audits.jsonl   one line per finished (method, ε) audit
    results.csv    tidy table, one row per cell (flat columns)
    results.json   cells, audits, environment and timings
    report.html    guarantees (claimed vs audited ε), trade-off plots, sample grids, environment

A rerun with the same ``--output`` skips every cell and audit already in the JSONL files (a run cut off
mid-cell loses only that cell), so a grid can also be extended with new methods or ε.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privpix import strict_json
from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError, PrivpixError
from privpix.evaluation import attacks
from privpix.evaluation.grid import (
    AttackSettings,
    FittedMechanisms,
    eps_key,
    grid_points,
    run_grid,
    sample_grids,
)
from privpix.executor import Executor
from privpix.fileio import write_text_atomic
from privpix.mechanisms.registry import mechanism_class
from privpix.version import __version__


@dataclass
class BenchConfig:
    """What one benchmark run measures. ``params`` maps a method label to its parameters."""

    dataset: str
    methods: list[str]
    epsilons: list[float]
    repeats: int = 1
    seed: int = 0
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    attribute: str = ""
    audit_trials: int = 1000
    cnn_epochs: int = 3
    limit: int | None = None
    size: tuple[int, int] | None = None
    delta: float | None = None  # for the (ε, δ) mechanisms of the grid; the others take none
    # The most audit trials per side the bench may raise to (to make claims up to ε = 10 refutable); None: the
    # audit's own cap. A smaller cap bounds the run's time; a claim that needs more is reported not refutable.
    audit_max_trials: int | None = None
    # Mechanisms that fit on the private set (a synthesizer, a GAN) are fitted on this many training images (all the
    # run has: ``run_bench``'s ``fit_train``) rather than only on the cells' ``limit``-ed ones; None: the cells'.
    fit_images: int | None = None

    def identity(self) -> dict[str, Any]:
        """The part a resumed run must share with the stored one (cells are only comparable under it)."""
        # δ only when given, so a run without it still matches the config.json of a bench that predates it.
        return {
            **({"delta": self.delta} if self.delta is not None else {}),
            **({"audit_max_trials": self.audit_max_trials} if self.audit_max_trials is not None else {}),
            **({"fit_images": self.fit_images} if self.fit_images is not None else {}),
            "dataset": self.dataset,
            "seed": self.seed,
            "limit": self.limit,
            "size": list(self.size) if self.size else None,
            "attribute": self.attribute,
            "audit_trials": self.audit_trials,
            "cnn_epochs": self.cnn_epochs,
        }


def environment() -> dict[str, Any]:
    """Versions and machine facts for the report."""
    import scipy
    import sklearn

    env = {
        "privpix": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
    }
    # A bench of methods that never import torch does not import it to name its version (1.6 CPU-s): the installed
    # distribution's version is the one the module would report.
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
    else:
        try:
            env["torch"] = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - torch is an optional extra
            env["torch"] = "not installed"
    return env


# The records' fields that may be null for a reason other than a NaN: a mechanism that takes no ε.
_NULLABLE = frozenset({"epsilon", "claimed_epsilon", "claimed_epsilon_requested"})


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file, with ``null`` read back as ``NaN`` in their numeric fields (everything but
    ``_NULLABLE``; strict JSON has no NaN). A torn last line (a run killed mid-write) is dropped and the file
    repaired."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise PrivpixError(f"{path}: line {i + 1} is not JSON; the file is damaged") from None
            write_text_atomic(path, "".join(strict_json.dumps(r, default=float) + "\n" for r in out))
            continue
        out.append(strict_json.nan_fields(record, [k for k in record if k not in _NULLABLE]))
    return out


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(strict_json.dumps(record, default=float) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def run_bench(
    train: ImageSet,
    test: ImageSet,
    config: BenchConfig,
    output: str | Path,
    progress: Callable[[str], None] | None = None,
    data_dir: str | None = None,
    executor: Executor | None = None,
    fit_train: ImageSet | None = None,
) -> dict[str, Any]:
    """Run (or resume) the grid of ``config`` into ``output``; returns the results JSON (also written). Each
    mechanism is fitted once, as it declares: one that fits on the private set (a GAN) is trained on ``train``, or
    on ``fit_train`` when given (a larger private set that holds ``train``; ``config.fit_images`` must be its size).
    ``executor`` spreads the grid points over processes or a cluster (default: this process)."""
    if (fit_train is None) != (config.fit_images is None) or (
        fit_train is not None and len(fit_train) != config.fit_images
    ):
        raise ParameterError(
            f"fit_train ({'none' if fit_train is None else len(fit_train)} images) and config.fit_images "
            f"({config.fit_images}) must agree"
        )
    if fit_train is not None and np.isin(fit_train.image_names(), test.image_names()).any():
        # The report says no scored image was fitted on; that must hold, not be assumed.
        raise ParameterError("fit_train holds test images (by name): a fit must not see the images it is scored on")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.json"
    if cfg_path.exists():
        stored = json.loads(cfg_path.read_text())
        if stored != config.identity():
            diff = sorted(
                k for k in stored.keys() | config.identity().keys() if stored.get(k) != config.identity().get(k)
            )
            raise ParameterError(
                f"--output {out}: holds a benchmark with different {', '.join(diff)}; use another directory"
            )
    else:
        write_text_atomic(cfg_path, json.dumps(config.identity(), indent=2))
    for m in config.methods:
        mechanism_class(m)  # unknown names fail before any work
    if config.repeats < 1:
        raise ParameterError(f"repeats must be >= 1, got {config.repeats}")
    attribute = config.attribute or (
        "label" if train.labels is not None else "subject" if train.subjects is not None else ""
    )
    if attribute:
        attacks.attribute_values(train, attribute)  # clear error now rather than after the first release
    cells_path, audits_path = out / "cells.jsonl", out / "audits.jsonl"
    done = {(c["method"], eps_key(c["epsilon"]), c["repeat"]) for c in _read_jsonl(cells_path)}
    audited = {(a["method"], eps_key(a["claimed_epsilon_requested"])) for a in _read_jsonl(audits_path)}
    t_run = time.perf_counter()
    fit_set = train if fit_train is None else fit_train
    fitted = FittedMechanisms(config.params, fit_set, config.seed, data_dir, config.delta)
    run_grid(
        train,
        test,
        grid_points(config.methods, config.epsilons),
        fitted,
        dataset=config.dataset,
        repeats=config.repeats,
        seed=config.seed,
        attacks=AttackSettings(attribute, config.cnn_epochs),
        audit_trials=config.audit_trials,
        audit_max_trials=config.audit_max_trials,
        skip_cells=done,
        skip_audits=audited,
        on_cell=lambda c: _append(cells_path, dict(c)),
        on_audit=lambda a: _append(audits_path, dict(a)),
        progress=progress,
        executor=executor,
    )
    return write_results(out, config, test, time.perf_counter() - t_run, fitted)


def _selected(records: Sequence[dict], config: BenchConfig, with_repeat: bool) -> list[dict]:
    wanted = {p.key for p in grid_points(config.methods, config.epsilons)}
    key = "epsilon" if with_repeat else "claimed_epsilon_requested"
    keep = [r for r in records if (r["method"], eps_key(r[key])) in wanted]
    if with_repeat:
        keep = [r for r in keep if r["repeat"] < config.repeats]
    return keep


def tidy_rows(cells: Sequence[dict]) -> list[dict[str, Any]]:
    """Flat rows for CSV: nested parameters dropped, the guarantee reduced to its main fields."""
    rows = []
    for c in cells:
        g = c.get("guarantee", {})
        flat = {k: v for k, v in c.items() if k not in ("guarantee", "parameters")}
        flat.update(
            guarantee_model=g.get("model"),
            guarantee_sound=g.get("sound"),
            guarantee_unit=g.get("unit"),
            per_image_epsilon=g.get("per_image_epsilon"),
        )
        rows.append(flat)
    return rows


def write_results(
    out: Path,
    config: BenchConfig,
    test: ImageSet | None = None,
    seconds: float = 0.0,
    fitted: FittedMechanisms | None = None,
) -> dict[str, Any]:
    """results.csv, results.json and report.html from the JSONL files (the requested grid only); with the
    ``test`` images and the run's ``fitted`` mechanisms the report also shows per-mechanism sample grids."""
    import pandas as pd

    from privpix.data.loaders import credit
    from privpix.report.html import write_report

    cells = _selected(_read_jsonl(out / "cells.jsonl"), config, True)
    audits = _selected(_read_jsonl(out / "audits.jsonl"), config, False)
    pd.DataFrame(tidy_rows(cells)).to_csv(out / "results.csv.tmp", index=False)
    os.replace(out / "results.csv.tmp", out / "results.csv")
    results = {
        "config": {**asdict(config), "size": list(config.size) if config.size else None},
        "environment": environment(),
        "run_seconds": seconds,
        "cells": cells,
        "audits": audits,
    }
    write_text_atomic(out / "results.json", strict_json.dumps(results, indent=1))
    grids = []
    if test is not None and fitted is not None:
        points = grid_points(config.methods, config.epsilons)
        grids = sample_grids(points, fitted, test, config.seed, credit(config.dataset.split(":")[0]))
    write_report(out / "report.html", results, grids)
    return results


# ``privpix demo``'s mechanisms.
DEMO_METHODS = (
    "pixel-laplace",
    "pixel-laplace[sensitivity=bound,unit=pixel]",
    "dp-pix[b=4,m=1]",
    "sra",
    "pca-inverse",
    "ldp-pixel",
    "gaussian-blur[sigma=1.5]",
    # A sound per-image synthesizer for the frontier, fitted once on every image the demo has and does not score
    # (4,000, not only the cells' 1,000: its noise shrinks as 1/n) with the CNN generator and 5 short epochs (about
    # 13 CPU-s with its release). benchmarks/demo_answer.py measures the choice over 5 seeds: at ε = 1 it scores
    # 0.743 on 4,000 images with 2,000 features and 0.757 with 4,000, against 0.661 on the 2,500 training images.
    "dp-merf[n_features=4000,epochs=5,batch_size=100]",
)


def demo_fit_set(dataset: str, test: ImageSet, seed: int) -> ImageSet:
    """What the demo's synthesizer is fitted on: every image of ``dataset`` that is not in ``test`` (the images
    the demo scores on), i.e. the whole train split (which holds the cells' seeded subset) and the test split's
    unscored rest. A synthesizer's noise shrinks as 1/n, so leaving images unused only costs accuracy; none of
    the scored images is ever fitted on, so no score is measured on the fit's own images."""
    from privpix.data import load_pair

    full_train, full_test = load_pair(dataset, None, None, seed, None, False)
    unscored = np.flatnonzero(~np.isin(full_test.image_names(), test.image_names()))
    return full_train.concat(full_test.subset(unscored)) if len(unscored) else full_train
