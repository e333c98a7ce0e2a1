"""Self-contained HTML report (plots embedded as PNG data URIs; no network, no external files).

The page is the Jinja2 template ``templates/report.html.j2``, rendered with autoescaping: this module turns a
run's records into plain values and :class:`Cell` objects, and never writes markup itself, so no value from a run
(a method name, a caveat, a dataset's name) can reach the page unescaped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from privpix.fileio import write_text_atomic
from privpix.privacy.guarantees import Guarantee
from privpix.report.plots import frontier_plot, privacy_utility_plot, tradeoff_plot
from privpix.report.summaries import (
    MODEL_ONLY,
    WEAK_PER_IMAGE_EPSILON,
    FrontierPoint,
    bound_parts,
    budget_answers,
    cell_means,
    eps_text,
    fmt,
    frontier_points,
    summary_rows,
    verdict_text,
)
from privpix.version import __version__


@dataclass(frozen=True)
class Cell:
    """A table cell with style: ``text`` (in a span of class ``cls``, bold if ``bold``), then ``tail`` on the same
    line, each of ``more`` on a line of its own, and ``note`` in italics on the last line. All of it is text: the
    template escapes it."""

    text: str
    cls: str = ""
    bold: bool = False
    tail: str = ""
    more: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[str | Cell | int]]


YES = Cell("yes", cls="good")
NO = Cell("NO", cls="bad")


@cache
def template(name: str = "report.html.j2") -> Any:
    """The Jinja2 template ``name`` of ``privpix/report/templates``, autoescaped, failing on an undefined value."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("privpix.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    return env.get_template(name)


CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px}
th{background:#f2f2f2}.bad{color:#b00020;font-weight:600}.good{color:#1b5e20;font-weight:600}
.figs img{max-width:49%}.note{background:#fff8e1;border-left:4px solid #ffb300;padding:.6em 1em}
.wide{max-width:100%;overflow-x:auto}
"""


# ------------------------------------------------------------------------------------ benchmark report

ATTACK_COLUMNS = (
    ("reid_pixel", "re-id pixel NN"),
    ("reid_pca", "re-id PCA NN"),
    ("reid_learned", "re-id learned"),
    ("reid_best", "re-id best"),
    ("identity_reid", "identity re-id"),
    ("attr_weak", "attribute weak"),
    ("attr_strong", "attribute strong"),
    ("mia_dcr_auc", "MIA distance AUC"),
    ("mia_subspace_auc", "MIA subspace AUC"),
    ("mia_loss_auc", "MIA query-loss AUC"),
    ("mia_dcr_tpr_at_1pct_fpr", "MIA distance TPR@1%FPR"),
    ("recon_ridge_psnr", "ridge inversion PSNR"),
    ("recon_ridge_ssim", "ridge inversion SSIM"),
    ("recon_cnn_psnr", "CNN inversion PSNR"),
)


def _verdict_cell(a: dict[str, Any]) -> Cell:
    cls = {"violated": "bad", "consistent": "good" if a.get("refutable", True) else ""}.get(a["verdict"], "")
    if a.get("perfect_distinguisher"):
        cls = "bad"
    return Cell(verdict_text(a), cls=cls)


def _method_cell(method: str, output: str | None) -> Cell:
    """A method's table cell, marked when it releases a model instead of images (the not-publishing reference)."""
    return Cell(fmt(method), note=MODEL_ONLY if output == "model" else "")


def _guarantee_rows(cells: Sequence[dict]) -> list[list[str | Cell]]:
    """One row per method label (its first cell: the wording is the same across ε)."""
    seen: dict[str, dict] = {}
    for r in cells:
        seen.setdefault(r["method"], r)
    rows: list[list[str | Cell]] = []
    for method, r in seen.items():
        g = Guarantee.from_dict(r["guarantee"])
        per_image: str | Cell = "—" if g.model in ("none", "empirical") else fmt(g.per_image_epsilon)
        if g.model in ("central-dp", "local-dp") and not g.sound:
            per_image = Cell("no finite bound", cls="bad")
        caveats = Cell(g.caveats[0], more=tuple(g.caveats[1:])) if g.caveats else ""
        sound = YES if g.sound else NO
        rows.append([_method_cell(method, r.get("output")), fmt(g.model), sound, fmt(g.unit), per_image, caveats])
    return rows


def _audit_rows(cells: Sequence[dict], audits: Sequence[dict]) -> list[list[str | Cell]]:
    first_cell: dict[tuple[str, Any], dict] = {}
    for c in cells:
        first_cell.setdefault((c["method"], c["epsilon"]), c)
    rows: list[list[str | Cell]] = []
    for a in audits:
        cell = first_cell.get((a["method"], a["claimed_epsilon_requested"]))
        g = Guarantee.from_dict(cell["guarantee"]) if cell else None
        head, detail = bound_parts(a)
        rows.append(
            [
                fmt(a["method"]),
                fmt(a["claimed_epsilon_requested"]),
                YES if a["sound"] else NO,
                fmt(a["unit"]),
                fmt(a["claimed_epsilon"]),
                Cell(head, bold=head != "—", more=(f"({detail})",) if detail else ()),
                eps_text(a["max_auditable_epsilon"]),
                _verdict_cell(a),
                fmt(f"{a['pair']}; {a['statistic']}"),
                fmt(g.per_image_epsilon if g and g.sound else None),
            ]
        )
    return rows


def _frontier(cells: Sequence[dict]) -> dict[str, Any]:
    """The report's first section: which release to use at a per-image budget, as a table, a plot and what is
    left out of it, all read from the cells' guarantees."""
    points = frontier_points(cells)
    on = [p for p in points if p.on_frontier]

    def acc(p: FrontierPoint) -> str:
        spread = f" ± {p.accuracy_std:.2g}" if p.repeats > 1 else ""
        return f"{fmt(p.accuracy)}{spread}"

    rows: list[list[str | Cell]] = []
    for b, p in budget_answers(cells):
        if p is not None:
            per_image = fmt(p.per_image_epsilon) + (f" (δ = {p.delta:g})" if p.delta else "")
            rows.append([f"≤ {b:g}", _method_cell(p.method, p.output), fmt(p.epsilon), per_image, acc(p)])
            continue
        closest = min(on, key=lambda q: q.per_image_epsilon or math.inf) if on else None
        nearest = (
            f"; the most private sound release run is {fmt(closest.method)} at per-image ε "
            f"{fmt(closest.per_image_epsilon)}"
            if closest
            else ""
        )
        rows.append([f"≤ {b:g}", Cell("none in this run", cls="bad", tail=nearest), "—", "—", "—"])
    headers = ["per-image ε budget", "best sound release", "ε it was run with", "ε per whole image", "accuracy"]
    apart_rows: list[list[str | Cell | int]] = [
        [_method_cell(p.method, p.output), fmt(p.epsilon), acc(p) if p.accuracy is not None else "—", fmt(p.apart)]
        for p in points
        if not p.on_frontier
    ]
    return {
        "answers": Table(headers, rows),
        "plot": frontier_plot(cells),
        "weak": f"{WEAK_PER_IMAGE_EPSILON:g}",
        "apart": Table(["method", "ε (as stated)", "accuracy", "why"], apart_rows),
    }


def _attacks(cells: Sequence[dict], present: Sequence[tuple[str, str]]) -> dict[str, Any] | None:
    if not present:
        return None
    keys = [k for k, _ in present]
    rows = [[fmt(m), fmt(e), *(fmt(v[k]) for k in keys)] for m, e, v in cell_means(cells, keys)]
    chance = {
        k: fmt(cell_means(cells, [k])[0][2][k])
        for k in ("reid_chance", "identity_chance", "attr_majority", "recon_baseline_psnr")
    }
    return {"chance": chance, "table": Table(["method", "ε", *(lab for _, lab in present)], rows)}


def _timings(cells: Sequence[dict], audits: Sequence[dict]) -> Table:
    timing: dict[str, list[float]] = defaultdict(list)
    for c in cells:
        timing[c["method"]].append(float(c.get("cell_seconds", c.get("seconds", 0.0))))
    rows: list[list[str | Cell | int]] = [
        [fmt(m), len(ts), f"{sum(ts):.1f}", f"{sum(a['seconds'] for a in audits if a['method'] == m):.1f}"]
        for m, ts in timing.items()
    ]
    return Table(["method", "cells", "cell seconds (sum)", "audit seconds"], rows)


def render_report(results: dict[str, Any], grids: Sequence[tuple[str, str]] = ()) -> str:
    """The one report of a grid (``privpix evaluate`` and ``privpix bench``) as a self-contained HTML string.

    ``results``: ``config`` (dataset, methods, epsilons, repeats, seed), ``cells`` (:class:`CellRecord` rows),
    and optionally ``audits``, ``environment``, ``run_seconds``, ``title`` and ``notes``; a section whose records
    are absent (attacks, audits, environment) is left out. ``grids`` are (caption, base64 PNG) sample grids."""
    cfg, cells = results["config"], results["cells"]
    audits, env = results.get("audits") or [], results.get("environment")
    title = results.get("title") or f"privpix {'benchmark' if audits else 'evaluation'}: {cfg['dataset']}"
    present = [(k, lab) for k, lab in ATTACK_COLUMNS if any(k in c for c in cells)]
    attribute = next((c["attribute"] for c in cells if c.get("attribute")), None)
    utility = Table(
        ["method", "ε", "repeats", "accuracy", "macro F1", "accuracy (release-all)", "PSNR dB", "SSIM",
         "entropy bits", "guarantee"],
        [
            [_method_cell(s["method"], s["output"]), fmt(s["epsilon"]), s["repeats"],
             *(fmt(s[k]) for k in ("accuracy", "f1", "accuracy_release_all", "psnr", "ssim", "entropy")),
             fmt(s["guarantee"])]
            for s in summary_rows(cells)
        ],
    )  # fmt: skip
    plots = [
        tradeoff_plot(cells, "accuracy", "utility accuracy (train on released, test on original)"),
        tradeoff_plot(cells, "ssim", "SSIM of released vs original test images"),
    ]
    if present:
        plots += [
            tradeoff_plot(cells, "reid_best", "re-identification rate (strongest of three matchers)"),
            privacy_utility_plot(cells, "reid_best", "re-identification rate (strongest matcher)"),
        ]
        if any(k == "attr_strong" for k, _ in present):
            plots.append(privacy_utility_plot(cells, "attr_strong", "strong-adversary attribute accuracy"))
        plots += [
            tradeoff_plot(cells, "mia_dcr_auc", "membership AUC (distance to closest release)"),
            tradeoff_plot(cells, "recon_ridge_psnr", "PSNR of the ridge inversion (dB)"),
        ]
    view = {
        "dataset": cfg["dataset"],
        "methods": list(cfg["methods"]),
        "epsilons": str(cfg["epsilons"]),
        "repeats": cfg.get("repeats", 1),
        "seed": cfg.get("seed", 0),
        "fit_images": int(cfg["fit_images"]) if cfg.get("fit_images") else None,
        "delta": f"{cfg['delta']:g}" if cfg.get("delta") is not None else None,
    }
    return template().render(
        title=title,
        css=CSS,
        cfg=view,
        attribute=str(attribute) if attribute else None,
        version=__version__,
        notes=list(results.get("notes", ())),
        frontier=_frontier(cells),
        guarantees=Table(
            ["method", "model", "sound", "neighbouring unit", "ε per whole image (at the first ε)", "caveats"],
            _guarantee_rows(cells),
        ),
        audits=Table(
            ["method", "ε (requested)", "sound", "audited unit", "claimed ε for that unit", "audited ε ≥",
             "max auditable", "verdict", "best distinguisher", "ε per whole image"],
            _audit_rows(cells, audits),
        ) if audits else None,
        model_only=MODEL_ONLY if any(c.get("output") == "model" for c in cells) else None,
        utility=utility,
        attacks=_attacks(cells, present),
        plots=plots,
        grids=list(grids),
        environment=Table(["", ""], [[str(k), str(v)] for k, v in env.items()]) if env else None,
        timings=_timings(cells, audits) if env else None,
        run_seconds=f"{results.get('run_seconds', 0.0):.1f}",
    )  # fmt: skip


def write_report(path: str | Path, results: dict[str, Any], grids: Sequence[tuple[str, str]] = ()) -> Path:
    """Write :func:`render_report` to ``path`` atomically."""
    p = Path(path)
    write_text_atomic(p, render_report(results, grids))
    return p
