"""Self-contained HTML report (plots embedded as PNG data URIs; no network, no external files)."""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privpix.fileio import write_text_atomic
from privpix.privacy.guarantees import Guarantee
from privpix.report.plots import frontier_plot, privacy_utility_plot, tradeoff_plot
from privpix.report.summaries import (
    MODEL_ONLY,
    WEAK_PER_IMAGE_EPSILON,
    FrontierPoint,
    _fmt,
    bound_text,
    budget_answers,
    cell_means,
    eps_text,
    frontier_points,
    summary_rows,
    verdict_text,
)
from privpix.version import __version__


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    # Wide tables (the attack table has a column per attack) scroll inside the page instead of overflowing it.
    return f"<div class='wide'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _figs(plots: Sequence[str]) -> str:
    """Plots (base64 PNGs) side by side."""
    return "<div class='figs'>" + "".join(f"<img src='data:image/png;base64,{p}'>" for p in plots) + "</div>"


def _samples(grids: Sequence[tuple[str, str]], intro: str = "") -> list[str]:
    """The sample-grid section: a heading, then each (caption, base64 PNG) as a figure."""
    if not grids:
        return []
    out = [f"<h2>Samples</h2>{intro}"]
    for caption, png in grids:
        out.append(
            f"<figure><img src='data:image/png;base64,{png}' style='max-width:100%'>"
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )
    return out


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


def _verdict_html(a: dict[str, Any]) -> str:
    cls = {"violated": "bad", "consistent": "good" if a.get("refutable", True) else ""}.get(a["verdict"], "")
    if a.get("perfect_distinguisher"):
        cls = "bad"
    text = html.escape(verdict_text(a))
    return f"<span class='{cls}'>{text}</span>" if cls else text


def _method_cell(method: str, output: str | None) -> str:
    """A method's table cell, marked when it releases a model instead of images (the not-publishing reference)."""
    if output == "model":
        return f"{_fmt(method)}<br><i>({MODEL_ONLY})</i>"
    return _fmt(method)


def _guarantee_rows(cells: Sequence[dict]) -> list[list[str]]:
    """One row per method label (its first cell: the wording is the same across ε)."""
    seen: dict[str, dict] = {}
    for r in cells:
        seen.setdefault(r["method"], r)
    rows = []
    for method, r in seen.items():
        g = Guarantee.from_dict(r["guarantee"])
        sound = '<span class="good">yes</span>' if g.sound else '<span class="bad">NO</span>'
        per_image = "—" if g.model in ("none", "empirical") else _fmt(g.per_image_epsilon)
        if g.model in ("central-dp", "local-dp") and not g.sound:
            per_image = '<span class="bad">no finite bound</span>'
        rows.append(
            [
                _method_cell(method, r.get("output")),
                _fmt(g.model),
                sound,
                _fmt(g.unit),
                per_image,
                "<br>".join(html.escape(c) for c in g.caveats),
            ]
        )
    return rows


def _audit_rows(cells: Sequence[dict], audits: Sequence[dict]) -> list[list[str]]:
    first_cell: dict[tuple[str, Any], dict] = {}
    for c in cells:
        first_cell.setdefault((c["method"], c["epsilon"]), c)
    rows = []
    for a in audits:
        cell = first_cell.get((a["method"], a["claimed_epsilon_requested"]))
        g = Guarantee.from_dict(cell["guarantee"]) if cell else None
        rows.append(
            [
                _fmt(a["method"]),
                _fmt(a["claimed_epsilon_requested"]),
                '<span class="good">yes</span>' if a["sound"] else '<span class="bad">NO</span>',
                _fmt(a["unit"]),
                _fmt(a["claimed_epsilon"]),
                bound_text(a, html_=True),
                eps_text(a["max_auditable_epsilon"]),
                _verdict_html(a),
                _fmt(f"{a['pair']}; {a['statistic']}"),
                _fmt(g.per_image_epsilon if g and g.sound else None),
            ]
        )
    return rows


FRONTIER_CAPTION = (
    "How to read it: every marker on the left is a release that is differentially private as implemented, drawn at "
    "the ε that protects one <i>whole image</i> (not a pixel, not a feature), on a log axis: left is more private, "
    "up is more useful. <b>Pick the highest marker left of your budget.</b> Dotted lines mark the budgets of the "
    "table; the shaded band holds per-image ε above {weak:g}, bounds that protect next to nothing. Marker shapes: "
    "circle, image transform; square, synthetic images; triangle, feature reports; diamond, a model only (no images "
    "released). The right panel holds what has no per-image guarantee, whatever its accuracy (its ε, if it has "
    "one, is per pixel or per feature only, or a paper's noise knob, or there is no DP claim): it cannot answer a "
    "per-image budget."
)


def _frontier_section(cells: Sequence[dict]) -> list[str]:
    """The report's first section: which release to use at a per-image budget, as a table, a plot and what is
    left out of it, all read from the cells' guarantees."""
    points = frontier_points(cells)
    on = [p for p in points if p.on_frontier]

    def acc(p: FrontierPoint) -> str:
        spread = f" ± {p.accuracy_std:.2g}" if p.repeats > 1 else ""
        return f"{_fmt(p.accuracy)}{spread}"

    rows = []
    for b, p in budget_answers(cells):
        if p is not None:
            per_image = _fmt(p.per_image_epsilon) + (f" (δ = {p.delta:g})" if p.delta else "")
            rows.append([f"≤ {b:g}", _method_cell(p.method, p.output), _fmt(p.epsilon), per_image, acc(p)])
            continue
        closest = min(on, key=lambda q: q.per_image_epsilon or math.inf) if on else None
        nearest = (
            f"; the most private sound release run is {_fmt(closest.method)} at per-image ε "
            f"{_fmt(closest.per_image_epsilon)}"
            if closest
            else ""
        )
        rows.append([f"≤ {b:g}", f"<span class='bad'>none in this run</span>{nearest}", "—", "—", "—"])
    headers = ["per-image ε budget", "best sound release", "ε it was run with", "ε per whole image", "accuracy"]
    apart_rows = [
        [_method_cell(p.method, p.output), _fmt(p.epsilon), acc(p) if p.accuracy is not None else "—", _fmt(p.apart)]
        for p in points
        if not p.on_frontier
    ]
    out = [
        "<h2>What should I use at my per-image budget?</h2>",
        "<p>The most useful release whose differential-privacy guarantee covers one whole image within each budget "
        "(utility accuracy as in the table below: a classifier trained on the release, tested on original images; "
        "a model release: its own accuracy on them).</p>",
        _table(headers, rows),
        f"<figure><img src='data:image/png;base64,{frontier_plot(cells)}' style='max-width:100%'>"
        f"<figcaption>{FRONTIER_CAPTION.format(weak=WEAK_PER_IMAGE_EPSILON)}</figcaption></figure>",
    ]
    if apart_rows:
        out += [
            "<p>Not on the frontier (no per-image guarantee):</p>",
            _table(["method", "ε (as stated)", "accuracy", "why"], apart_rows),
        ]
    return out


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
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>",
        f"<p>Dataset <b>{html.escape(cfg['dataset'])}</b>; methods {html.escape(', '.join(cfg['methods']))}; "
        f"ε ∈ {html.escape(str(cfg['epsilons']))}; {cfg.get('repeats', 1)} repeat(s); seed {cfg.get('seed', 0)}"
        + (f"; attribute attacked: {html.escape(str(attribute))}" if attribute else "")
        + (
            f"; mechanisms that fit on the private images were fitted on {int(cfg['fit_images'])} images, none of "
            "them scored as a test image"
            if cfg.get("fit_images")
            else ""
        )
        + (f"; δ = {cfg['delta']:g} for the (ε, δ) mechanisms" if cfg.get("delta") is not None else "")
        + f" · privpix {__version__}</p>",
        *(f"<p class='note'>{html.escape(n)}</p>" for n in results.get("notes", ())),
        *_frontier_section(cells),
        "<h2>Guarantees</h2><p>What each release truly promises. <b>sound: NO</b> means the ε is a noise knob "
        "from the paper, not a differential-privacy guarantee.</p>",
        _table(
            ["method", "model", "sound", "neighbouring unit", "ε per whole image (at the first ε)", "caveats"],
            _guarantee_rows(cells),
        ),
    ]
    if audits:
        parts += [
            "<h2>Guarantees: claimed versus audited ε</h2>",
            "<p class='note'>How to read this. The audited ε is a 95 %-confidence <i>lower</i> bound on the ε the "
            "mechanism really spends for the unit shown, found by distinguishing worst-case neighbours; "
            "<b>violated</b> means the claim is refuted. <b>consistent</b> only means this audit could not refute "
            "it: no bound above the 'max auditable' column can be shown with the trials run. Two bounds share the "
            "95 %: the raw one assumes nothing; the curve one reads a balanced test's errors through the trade-off "
            "curve of the mechanism's declared noise family (Gaussian DP, Laplace, or the (ε, δ)-DP curve that "
            "randomized response meets) and holds if the mechanism is at least as private as that curve at its "
            "true ε. The verdict says which bound refuted a claim.</p>",
            _table(
                [
                    "method",
                    "ε (requested)",
                    "sound",
                    "audited unit",
                    "claimed ε for that unit",
                    "audited ε ≥",
                    "max auditable",
                    "verdict",
                    "best distinguisher",
                    "ε per whole image",
                ],
                _audit_rows(cells, audits),
            ),
        ]
    s_rows = [
        [_method_cell(s["method"], s["output"]), _fmt(s["epsilon"]), s["repeats"], *(_fmt(s[k]) for k in
         ("accuracy", "f1", "accuracy_release_all", "psnr", "ssim", "entropy")), _fmt(s["guarantee"])]
        for s in summary_rows(cells)
    ]  # fmt: skip
    parts += [
        "<h2>Utility and quality</h2><p>accuracy / F1: PCA + SVM trained on released training images, tested on "
        "original test images. release-all: trained and tested on released images. PSNR / SSIM / entropy: "
        "released test images against their sources (mean over repeats)."
        + (
            f" Rows marked <i>{MODEL_ONLY}</i> publish a classifier trained on the private training images instead "
            "of any image: their accuracy / F1 are that classifier's own on the original test images, the price of "
            "not publishing to compare the image releases against."
            if any(c.get("output") == "model" for c in cells)
            else ""
        )
        + "</p>",
        _table(
            [
                "method",
                "ε",
                "repeats",
                "accuracy",
                "macro F1",
                "accuracy (release-all)",
                "PSNR dB",
                "SSIM",
                "entropy bits",
                "guarantee",
            ],
            s_rows,
        ),
    ]
    plots = [
        tradeoff_plot(cells, "accuracy", "utility accuracy (train on released, test on original)"),
        tradeoff_plot(cells, "ssim", "SSIM of released vs original test images"),
    ]
    if present:
        keys = [k for k, _ in present]
        a_rows = [[_fmt(m), _fmt(e), *(_fmt(v[k]) for k in keys)] for m, e, v in cell_means(cells, keys)]
        chance = {
            k: cell_means(cells, [k])[0][2][k]
            for k in ("reid_chance", "identity_chance", "attr_majority", "recon_baseline_psnr")
        }
        parts += [
            "<h2>Attacks</h2><p>Re-identification: top-1 link of each released test image to its source among all "
            f"test originals (chance {_fmt(chance['reid_chance'])}); identity re-id: subject named by a classifier "
            f"trained on other images (chance {_fmt(chance['identity_chance'])}); attribute: weak adversary trained "
            f"on originals, strong on releases (majority {_fmt(chance['attr_majority'])}); membership: was the "
            "image in the published training split (AUC 0.5 = no information); inversion: a regressor from release "
            "back to original, trained on the training pairs (the mean training image, no release at all, scores "
            f"{_fmt(chance['recon_baseline_psnr'])} dB).</p>",
            _table(["method", "ε", *(lab for _, lab in present)], a_rows),
        ]
        plots += [
            tradeoff_plot(cells, "reid_best", "re-identification rate (strongest of three matchers)"),
            privacy_utility_plot(cells, "reid_best", "re-identification rate (strongest matcher)"),
        ]
        if "attr_strong" in keys:
            plots.append(privacy_utility_plot(cells, "attr_strong", "strong-adversary attribute accuracy"))
        plots += [
            tradeoff_plot(cells, "mia_dcr_auc", "membership AUC (distance to closest release)"),
            tradeoff_plot(cells, "recon_ridge_psnr", "PSNR of the ridge inversion (dB)"),
        ]
    parts += [_figs(plots), *_samples(grids, "<p>Test images (top row) and their releases, one row per ε.</p>")]
    if env:
        timing: dict[str, list[float]] = defaultdict(list)
        for c in cells:
            timing[c["method"]].append(float(c.get("cell_seconds", c.get("seconds", 0.0))))
        t_rows = [
            [_fmt(m), len(ts), f"{sum(ts):.1f}", f"{sum(a['seconds'] for a in audits if a['method'] == m):.1f}"]
            for m, ts in timing.items()
        ]
        parts += [
            "<h2>Environment and timings</h2>",
            _table(["", ""], [[html.escape(k), html.escape(str(v))] for k, v in env.items()]),
            _table(["method", "cells", "cell seconds (sum)", "audit seconds"], t_rows),
            f"<p>Run time of the last invocation: {results.get('run_seconds', 0.0):.1f} s (cells already done "
            "were skipped).</p>",
        ]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(path: str | Path, results: dict[str, Any], grids: Sequence[tuple[str, str]] = ()) -> Path:
    """Write :func:`render_report` to ``path`` atomically."""
    p = Path(path)
    write_text_atomic(p, render_report(results, grids))
    return p
