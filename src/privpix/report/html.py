"""Self-contained HTML report (plots embedded as PNG data URIs; no network, no external files)."""

from __future__ import annotations

import base64
import html
import io
import math
import re
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from privpix import __version__
from privpix.accounting import write_text_atomic
from privpix.guarantees import Guarantee


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _mean_by(rows: Sequence[dict], key: str) -> dict[str, list[tuple[float, float, float]]]:
    """method → sorted [(ε, mean, std)] of ``key`` over repeats (rows with ε)."""
    acc: dict[tuple[str, float], list[float]] = defaultdict(list)
    for r in rows:
        if r.get("epsilon") is not None and r.get(key) is not None and math.isfinite(r[key]):
            acc[(r["method"], float(r["epsilon"]))].append(float(r[key]))
    out: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    for (m, e), vals in sorted(acc.items()):
        out[m].append((e, float(np.mean(vals)), float(np.std(vals))))
    return out


def tradeoff_plot(rows: Sequence[dict], key: str, ylabel: str) -> str:
    """Base64 PNG of ``key`` against ε per method (log ε axis); ε-free methods as horizontal lines."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for method, pts in _mean_by(rows, key).items():
        e, m, s = map(np.array, zip(*pts, strict=True))
        ax.errorbar(e, m, yerr=s, marker="o", capsize=3, label=method)
    flat: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("epsilon") is None and r.get(key) is not None and math.isfinite(r[key]):
            flat[r["method"]].append(float(r[key]))
    for method, vals in flat.items():
        ax.axhline(float(np.mean(vals)), linestyle="--", linewidth=1, label=f"{method} (no ε)")
    ax.set_xscale("log")
    ax.set_xlabel("ε (as stated by the mechanism; see the guarantee table)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # none when no method has the score (a model release has no SSIM)
        ax.legend(fontsize=7)
    return _png(fig)


def sample_grid_png(original: np.ndarray, released: dict[str, np.ndarray], caption: str = "") -> str:
    """Base64 PNG: a row of originals, then one row per release label; arrays (k, h, w, c) in [0, 1]."""
    labels = ["original", *released]
    arrays = [original, *released.values()]
    k = len(original)
    fig, axes = plt.subplots(len(arrays), k, figsize=(1.1 * k + 1.8, 1.15 * len(arrays)), squeeze=False)
    for r, (lab, arr) in enumerate(zip(labels, arrays, strict=True)):
        for j in range(k):
            ax = axes[r][j]
            im = np.clip(arr[j], 0, 1)
            ax.imshow(im[..., 0] if im.shape[-1] == 1 else im, cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(lab, rotation=0, ha="right", va="center", fontsize=7)
    if caption:
        fig.suptitle(caption, fontsize=8)
    return _png(fig)


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


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return "∞" if math.isinf(x) else f"{x:.4g}"
    return html.escape(str(x))


def eps_text(x: float | None) -> str:
    """An audited ε, a bound or a ceiling: all with two decimals, so a bound and the ceiling it is compared with
    never read as different precisions ("10.4" beside "10.39")."""
    if x is None or math.isnan(x):
        return "—"
    return "∞" if math.isinf(x) else f"{x:.2f}"


def summary_rows(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """Mean over repeats per (method, ε) of the utility and quality scores, with the guarantee in words."""
    keys = ("accuracy", "f1", "accuracy_release_all", "psnr", "ssim", "entropy")
    first: dict[tuple[str, Any], dict] = {}
    count: dict[tuple[str, Any], int] = defaultdict(int)
    for r in rows:
        first.setdefault((r["method"], r["epsilon"]), r)
        count[(r["method"], r["epsilon"])] += 1
    out = []
    for method, eps, vals in cell_means(rows, keys):
        g = Guarantee.from_dict(first[(method, eps)]["guarantee"])
        out.append(
            {
                "method": method,
                "epsilon": eps,
                "repeats": count[(method, eps)],
                **{k: math.nan if vals[k] is None else vals[k] for k in keys},
                "output": first[(method, eps)].get("output", "images"),
                "guarantee": g.short(),
                "guarantee_compact": g.compact(),
            }
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


def cell_means(cells: Sequence[dict], keys: Sequence[str]) -> list[tuple[str, Any, dict[str, float | None]]]:
    """(method, ε, {key: mean over repeats}) in first-seen order."""
    groups: dict[tuple[str, Any], list[dict]] = {}
    for c in cells:
        groups.setdefault((c["method"], c["epsilon"]), []).append(c)
    out = []
    for (m, e), rs in groups.items():
        vals: dict[str, float | None] = {}
        for k in keys:
            xs = [float(r[k]) for r in rs if isinstance(r.get(k), int | float) and math.isfinite(float(r[k]))]
            vals[k] = float(np.mean(xs)) if xs else None
        out.append((m, e, vals))
    return out


def privacy_utility_plot(cells: Sequence[dict], privacy_key: str, xlabel: str) -> str:
    """Utility accuracy against an attack's success, one line per method through its ε values."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    by_method: dict[str, list[tuple[float, float, Any]]] = defaultdict(list)
    for m, e, v in cell_means(cells, [privacy_key, "accuracy"]):
        if v[privacy_key] is not None and v["accuracy"] is not None:
            by_method[m].append((v[privacy_key], v["accuracy"], e))
    for m, pts in by_method.items():
        x, y, _ = zip(*pts, strict=True)
        ax.plot(x, y, marker="o", label=m)
        for xi, yi, ei in pts:
            if ei is not None:
                ax.annotate(f"{ei:g}", (xi, yi), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel(xlabel + " (lower = more private)")
    ax.set_ylabel("utility accuracy (train released, test original)")
    ax.grid(alpha=0.3)
    if by_method:  # a grid of synthesizers only has no re-identification score to plot
        ax.legend(fontsize=7)
    return _png(fig)


def verdict_text(a: dict[str, Any]) -> str:
    """An audit record's verdict in words, qualified where the bare word would mislead (the one wording the
    console, the report and the benchmarks use)."""
    text = a["verdict"]
    if text == "consistent" and not a.get("refutable", True):
        text += " (claim beyond the audit's range)"
    if a.get("refuted_by"):
        text += f" (by the {a['refuted_by']} bound)"
    if a.get("perfect_distinguisher"):
        text += "; perfect distinguisher: no finite ε on this pair"
    return text


def bound_text(a: dict[str, Any], html_: bool = False) -> str:
    """An audit record's lower bound, with the raw and curve bounds it is the larger of ("—" when not audited)."""
    bound = a["audited_epsilon_lower"]
    if bound is None or math.isnan(bound):
        return "—"
    head = f"<b>{eps_text(bound)}</b>" if html_ else eps_text(bound)
    curve = a.get("curve_epsilon_lower")
    if not a.get("curve") or curve is None or math.isnan(curve):
        return head
    sep = "<br>" if html_ else " "
    detail = f"raw {eps_text(a['raw_epsilon_lower'])}, {a['curve']} curve {eps_text(curve)}"
    return f"{head}{sep}({html.escape(detail) if html_ else detail})"


def _verdict_html(a: dict[str, Any]) -> str:
    cls = {"violated": "bad", "consistent": "good" if a.get("refutable", True) else ""}.get(a["verdict"], "")
    if a.get("perfect_distinguisher"):
        cls = "bad"
    text = html.escape(verdict_text(a))
    return f"<span class='{cls}'>{text}</span>" if cls else text


MODEL_ONLY = "model only: no images released"


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


# ------------------------------------------------------------------------------------------ frontier

# The per-image budgets the report's first question is answered for.
FRONTIER_BUDGETS = (1.0, 10.0)
# Above this a per-image ε bounds next to nothing (e^100); such claims are still drawn at their value, shaded.
WEAK_PER_IMAGE_EPSILON = 100.0
# Marker per declared output kind, so a synthesizer or a model-only release reads apart from an image transform.
OUTPUT_MARKERS = {"images": "o", "synthetic-images": "s", "features": "^", "model": "D", "records": "v"}
OUTPUT_WORDS = {
    "synthetic-images": "synthetic images",
    "features": "feature reports",
    "model": "model only, no images",
    "records": "records",
}


@dataclass(frozen=True)
class FrontierPoint:
    """One (method, ε) of a run as the frontier sees it: its mean utility accuracy over repeats and either the
    per-image ε its sound DP guarantee earns or, in ``apart``, why it has none."""

    method: str
    epsilon: float | None
    output: str
    accuracy: float | None
    accuracy_std: float
    repeats: int
    per_image_epsilon: float | None
    apart: str
    delta: float = 0.0

    @property
    def on_frontier(self) -> bool:
        return not self.apart


def _positive_finite(x: Any) -> float | None:
    # JSON writers differ on ∞ (Infinity, "inf", null); anything that is not a finite positive number has no place
    # on a log axis.
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def per_image_standing(g: Guarantee) -> tuple[float | None, str]:
    """(per-image ε, "") for a sound DP guarantee with a finite per-image ε; otherwise (None, why it has none)."""
    if g.model == "none":
        return None, "no DP claim"
    if g.model == "empirical":
        return None, "no DP claim (empirical privacy only)"
    if not g.sound:
        return None, "paper knob, not DP"
    eps = _positive_finite(g.per_image_epsilon)
    if eps is None:
        return None, f"DP per {g.unit} only: no finite per-image ε"
    return eps, ""


def frontier_points(cells: Sequence[dict]) -> list[FrontierPoint]:
    """Every (method, ε) of ``cells`` in first-seen order. A guarantee that differs between repeats counts at its
    worst: one repeat without a per-image bound puts the point apart, else the largest per-image ε holds."""
    groups: dict[tuple[str, Any], list[dict]] = {}
    for c in cells:
        groups.setdefault((c["method"], c["epsilon"]), []).append(c)
    out = []
    for (method, eps), rows in groups.items():
        guarantees = [Guarantee.from_dict(r["guarantee"]) for r in rows]
        standings = [per_image_standing(g) for g in guarantees]
        why = next((w for _, w in standings if w), "")
        per_image = None if why else max(e for e, _ in standings if e is not None)
        accs = [float(r["accuracy"]) for r in rows if _is_number(r.get("accuracy"))]
        if not accs and not why:
            why = "no utility accuracy recorded"
        out.append(
            FrontierPoint(
                method=method,
                epsilon=eps,
                output=str(rows[0].get("output", "images")),
                accuracy=float(np.mean(accs)) if accs else None,
                accuracy_std=float(np.std(accs)) if accs else 0.0,
                repeats=len(rows),
                per_image_epsilon=per_image,
                apart=why,
                delta=max(float(g.delta or 0.0) for g in guarantees),
            )
        )
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(float(x))


def budget_answers(
    cells: Sequence[dict], budgets: Sequence[float] = FRONTIER_BUDGETS
) -> list[tuple[float, FrontierPoint | None]]:
    """For each per-image budget, the most accurate sound (method, ε) whose per-image ε is within it (the more
    private one on a tie), or None when no point of the run is that private."""
    on = [p for p in frontier_points(cells) if p.on_frontier]
    out: list[tuple[float, FrontierPoint | None]] = []
    for b in budgets:
        fits = [p for p in on if p.per_image_epsilon is not None and p.per_image_epsilon <= b]
        out.append((b, max(fits, key=lambda p: (p.accuracy, -(p.per_image_epsilon or 0.0))) if fits else None))
    return out


def _output_label(method: str, output: str) -> str:
    return f"{method} ({OUTPUT_WORDS[output]})" if output in OUTPUT_WORDS else method


def _wrap_label(text: str, width: int) -> str:
    # A method label carries its parameters as one long token: break after its bracket, commas and spaces, never
    # inside a parameter name.
    lines, line = [], ""
    for piece in re.split(r"(?<=[\[,\s])", text):
        if line and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = ""
        line += piece
    return "\n".join([*lines, line.rstrip()])


def frontier_plot(cells: Sequence[dict]) -> str:
    """Base64 PNG: utility accuracy against per-image ε (log axis), one marker per sound (method, ε) at its true
    per-image ε, each method's points joined; beside it, a panel of the releases with no per-image guarantee."""
    points = [p for p in frontier_points(cells) if p.accuracy is not None]
    on = [p for p in points if p.on_frontier]
    apart: dict[str, list[FrontierPoint]] = {}
    for p in points:
        if not p.on_frontier:
            apart.setdefault(p.method, []).append(p)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {m: palette[i % len(palette)] for i, m in enumerate(dict.fromkeys(p.method for p in points))}
    if apart:
        fig, (ax, side) = plt.subplots(
            1, 2, figsize=(7.2 + 0.95 * len(apart), 4.6), sharey=True,
            gridspec_kw={"width_ratios": [5.0, 0.95 * len(apart) + 0.4]},
        )  # fmt: skip
    else:
        fig, ax = plt.subplots(figsize=(7.2, 4.6))
        side = None
    series: dict[str, list[FrontierPoint]] = {}
    for p in on:
        series.setdefault(p.method, []).append(p)
    for method, pts in series.items():
        pts.sort(key=lambda p: p.per_image_epsilon or 0.0)
        x = [p.per_image_epsilon for p in pts]
        y = [p.accuracy for p in pts]
        err = [p.accuracy_std for p in pts]
        ax.errorbar(
            x, y, yerr=err if any(err) else None, marker=OUTPUT_MARKERS.get(pts[0].output, "o"), capsize=3,
            color=colour[method], label=_wrap_label(_output_label(method, pts[0].output), 48),
        )  # fmt: skip
        for p in pts:
            # Say so when the mechanism's own ε is not the per-image one (a per-pixel ε times the pixels, say).
            if p.epsilon is not None and not math.isclose(float(p.epsilon), p.per_image_epsilon or 0.0):
                ax.annotate(
                    f"ε={float(p.epsilon):g}", (p.per_image_epsilon, p.accuracy), fontsize=6,
                    xytext=(4, -8), textcoords="offset points", color=colour[method],
                )  # fmt: skip
    xs = [p.per_image_epsilon for p in on if p.per_image_epsilon is not None]
    lo = min([*xs, *FRONTIER_BUDGETS]) / 2
    hi = max([*xs, *FRONTIER_BUDGETS]) * 2
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    if hi > WEAK_PER_IMAGE_EPSILON:
        ax.axvspan(WEAK_PER_IMAGE_EPSILON, hi, color="0.93", zorder=0)
        ax.text(
            WEAK_PER_IMAGE_EPSILON * 1.1, 0.05, f"per-image ε > {WEAK_PER_IMAGE_EPSILON:g}:\nnext to no protection",
            transform=ax.get_xaxis_transform(), fontsize=6.5, va="bottom", color="0.35",
        )  # fmt: skip
    for b in FRONTIER_BUDGETS:
        ax.axvline(b, linestyle=":", color="0.45", linewidth=1)
        ax.text(b * 1.05, 0.01, f"budget {b:g}", transform=ax.get_xaxis_transform(), fontsize=6.5, color="0.35")
    if not on:
        ax.text(0.5, 0.5, "no sound release with a finite\nper-image ε in this run", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="0.35")  # fmt: skip
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("ε protecting one whole image (log; left = more private)")
    ax.set_ylabel("utility accuracy (a model: its own test accuracy)")
    ax.set_title("sound DP releases at their per-image ε", fontsize=9)
    ax.grid(alpha=0.3)
    if on:
        # Below the axes: inside, it would hide the low-accuracy markers that matter most at small budgets.
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    if side is not None:
        for i, (method, pts) in enumerate(apart.items()):
            for p in pts:
                side.plot(i, p.accuracy, marker=OUTPUT_MARKERS.get(p.output, "o"), color=colour[method], linestyle="")
                if p.epsilon is not None:
                    side.annotate(f"ε={float(p.epsilon):g}", (i, p.accuracy), fontsize=6, xytext=(5, -2),
                                  textcoords="offset points", color=colour[method])  # fmt: skip
        labels = [
            _wrap_label(_output_label(m, pts[0].output), 18) + "\n" + textwrap.fill(f"({pts[0].apart})", 18)
            for m, pts in apart.items()
        ]
        side.set_xticks(range(len(apart)), labels, fontsize=6)
        side.set_xlim(-0.6, len(apart) - 0.4)
        side.set_title("no per-image guarantee", fontsize=9)
        side.grid(alpha=0.3, axis="y")
    return _png(fig)


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
