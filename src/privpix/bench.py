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

import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privpix import __version__
from privpix.accounting import write_text_atomic
from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError, PrivpixError
from privpix.evaluation import attacks
from privpix.evaluation.audit import audit
from privpix.evaluation.runner import cell_seed, evaluate_cell
from privpix.mechanisms.base import mechanism_class, ready_mechanism

AUDIT_MAX_SIDE = 32


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

    def identity(self) -> dict[str, Any]:
        """The part a resumed run must share with the stored one (cells are only comparable under it)."""
        return {
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
    try:
        import torch

        env["torch"] = torch.__version__
    except ImportError:  # pragma: no cover - torch is an optional extra
        env["torch"] = "not installed"
    return env


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Lines of a JSONL file; a torn last line (a run killed mid-write) is dropped and the file repaired."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise PrivpixError(f"{path}: line {i + 1} is not JSON; the file is damaged") from None
            write_text_atomic(path, "".join(json.dumps(r, default=float) + "\n" for r in out))
    return out


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(record, default=float) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _eps_key(eps: float | None) -> str:
    return "none" if eps is None else repr(float(eps))


def _audit_images(mech, test: ImageSet) -> ImageSet:
    """At most 64 test images, downscaled so the longer side is ≤ 32 px (the audit's cost is thousands of
    releases); a mechanism bound to the native size (a public PCA basis) keeps it."""
    imgs = test.subset(np.arange(min(64, len(test))))
    h, w, _ = imgs.shape
    if max(h, w) <= AUDIT_MAX_SIDE:
        return imgs
    if mech.capabilities().fixed_shape is not None:
        return imgs
    scale = AUDIT_MAX_SIDE / max(h, w)
    return imgs.resized(max(2, round(h * scale)), max(2, round(w * scale)))


def _attack_row(mech, train, test, rel_train, rel_test, attribute, cnn_epochs, seed) -> dict[str, float]:
    row: dict[str, float] = {}
    row.update(attacks.reidentification(test, rel_test.images, train, rel_train.images, seed=seed))
    if attribute:
        row.update(attacks.attribute_inference(train, rel_train.images, test, rel_test.images, attribute, seed=seed))
    query_rng = np.random.default_rng(seed + 1)

    def query(s: ImageSet) -> ImageSet:
        return mech.release(s, query_rng).images

    row.update(attacks.membership_inference(train, rel_train.images, test, query=query, seed=seed))
    row.update(attacks.reconstruction(train, rel_train.images, test, rel_test.images, cnn_epochs, seed=seed))
    return row


def run_bench(
    train: ImageSet,
    test: ImageSet,
    config: BenchConfig,
    output: str | Path,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the grid of ``config`` into ``output``; returns the results JSON (also written)."""
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
    done = {(c["method"], _eps_key(c["epsilon"]), c["repeat"]) for c in _read_jsonl(cells_path)}
    audited = {(a["method"], _eps_key(a["claimed_epsilon_requested"])) for a in _read_jsonl(audits_path)}
    t_run = time.perf_counter()
    for method in config.methods:
        cls = mechanism_class(method)
        for eps in config.epsilons if cls.uses_epsilon else [None]:
            mech = ready_mechanism(method, eps, params=config.params.get(method, {}), private=train)
            for rep in range(config.repeats):
                if (method, _eps_key(eps), rep) in done:
                    continue
                t0 = time.perf_counter()
                seed = cell_seed(config.seed, method, eps, rep)
                row, rel_train, rel_test = evaluate_cell(mech, train, test, seed)
                row = {"dataset": config.dataset, "method": method, "repeat": rep, **row, "attribute": attribute}
                row.update(_attack_row(mech, train, test, rel_train, rel_test, attribute, config.cnn_epochs, seed))
                row["cell_seconds"] = time.perf_counter() - t0
                _append(cells_path, row)
                if progress is not None:
                    progress(f"{method} ε={eps} rep {rep}: acc {row['accuracy']:.3f} re-id {row['reid_best']:.2f}")
            if (method, _eps_key(eps)) not in audited:
                res = audit(mech, _audit_images(mech, test), trials=config.audit_trials, seed=config.seed)
                _append(audits_path, {"claimed_epsilon_requested": eps, **res.to_dict(), "method": method})
                if progress is not None:
                    progress(f"{method} ε={eps} audit: ≥ {res.audited_epsilon_lower:.2f} ({res.verdict})")
    return write_results(out, config, test, time.perf_counter() - t_run)


def verdict_text(a: dict[str, Any]) -> str:
    """An audit's verdict in words, qualified where the bare word would mislead."""
    text = a["verdict"]
    if text == "consistent" and not a.get("refutable", True):
        text += " (claim beyond the audit's range)"
    if a.get("perfect_distinguisher"):
        text += "; perfect distinguisher"
    return text


def _selected(records: Sequence[dict], config: BenchConfig, with_repeat: bool) -> list[dict]:
    wanted = {
        (m, _eps_key(e))
        for m in config.methods
        for e in (config.epsilons if mechanism_class(m).uses_epsilon else [None])
    }
    key = "epsilon" if with_repeat else "claimed_epsilon_requested"
    keep = [r for r in records if (r["method"], _eps_key(r[key])) in wanted]
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


def write_results(out: Path, config: BenchConfig, test: ImageSet | None = None, seconds: float = 0.0) -> dict[str, Any]:
    """results.csv, results.json and report.html from the JSONL files (the requested grid only); with the
    ``test`` images the report also shows per-mechanism sample grids."""
    import pandas as pd

    from privpix.report.html import write_bench_report

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
    write_text_atomic(out / "results.json", json.dumps(results, indent=1, default=_json_default))
    write_bench_report(out / "report.html", results, _grids(config, test) if test is not None else [])
    return results


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, np.generic):
        return x.item()
    return str(x)


def _grids(config: BenchConfig, test: ImageSet) -> list[tuple[str, str]]:
    """Per-mechanism sample grids (originals, then one row per ε) of a few test images."""
    from privpix.data.loaders import credit
    from privpix.report.html import sample_grid_png

    k = min(6, len(test))
    sample = test.subset(np.linspace(0, len(test) - 1, k).astype(int))
    grids = []
    for method in config.methods:
        cls = mechanism_class(method)
        released = {}
        for eps in config.epsilons if cls.uses_epsilon else [None]:
            mech = ready_mechanism(method, eps, params=config.params.get(method, {}), private=test)
            label = "release" if eps is None else f"ε={eps:g}"
            released[label] = mech.release(sample, np.random.default_rng(config.seed)).images.as_float()
        grids.append(
            (method + "." + credit(config.dataset.split(":")[0]), sample_grid_png(sample.as_float(), released))
        )
    return grids
