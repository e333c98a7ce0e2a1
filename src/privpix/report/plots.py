"""The report's figures (matplotlib, embedded as PNG data URIs): trade-off curves, privacy against utility, the
frontier of per-image ε against accuracy, and sample grids."""

from __future__ import annotations

import base64
import io
import math
import re
import textwrap
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import PatchCollection
from matplotlib.patches import Rectangle

from privpix.report.summaries import (
    FRONTIER_BUDGETS,
    WEAK_PER_IMAGE_EPSILON,
    FrontierPoint,
    cell_means,
    frontier_points,
)


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
    """Base64 PNG: a row of originals, then one row per release label; arrays (k, h, w, c) or (k, h, w) in [0, 1]
    (a row may hold fewer images, or images of another size, than the originals).

    The images are laid out in one array and drawn as one picture with the labels as its row ticks: an axes per
    image (60 of them for 6 images at 9 ε) took a second a grid, most of a report's drawing time."""
    labels = ["original", *released]
    arrays = []
    for a in (original, *released.values()):
        a = np.clip(np.asarray(a, dtype=np.float64), 0, 1)
        arrays.append(a[..., None] if a.ndim == 3 else a)  # (k, h, w) grey images without a channel axis
    k = max(1, *(len(a) for a in arrays))  # a column even when every row is empty
    h = max((a.shape[1] for a in arrays if len(a)), default=1)
    w = max((a.shape[2] for a in arrays if len(a)), default=1)
    gap = max(1, round(0.1 * max(h, w)))
    canvas = np.ones((len(arrays) * (h + gap) - gap, k * (w + gap) - gap, 3))  # white between the images
    frames = []
    for r, arr in enumerate(arrays):
        for j, im in enumerate(arr):
            y, x = r * (h + gap) + (h - im.shape[0]) // 2, j * (w + gap) + (w - im.shape[1]) // 2
            # RGB (an alpha channel dropped), or grey from the first channel.
            canvas[y : y + im.shape[0], x : x + im.shape[1]] = im[..., :3] if im.shape[-1] >= 3 else im[..., :1]
            frames.append(Rectangle((x - 0.5, y - 0.5), im.shape[1], im.shape[0]))  # a white image stays visible
    fig, ax = plt.subplots(figsize=(1.1 * k + 1.8, 1.15 * len(arrays)))
    ax.imshow(canvas, interpolation="nearest")
    ax.add_collection(PatchCollection(frames, facecolor="none", edgecolor="0.3", linewidth=0.6))
    ax.set_xticks([])
    ax.set_yticks([r * (h + gap) + h / 2 for r in range(len(arrays))], labels, fontsize=7)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if caption:
        ax.set_title(caption, fontsize=8)
    return _png(fig)


def privacy_utility_plot(cells: Sequence[dict], privacy_key: str, xlabel: str) -> str:
    """Utility accuracy against an attack's success, one line per method through its ε values."""
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    by_method: dict[str, list[tuple[float, float, Any]]] = defaultdict(list)
    for m, e, v in cell_means(cells, [privacy_key, "accuracy"]):
        attack, accuracy = v[privacy_key], v["accuracy"]
        if attack is not None and accuracy is not None:
            by_method[m].append((attack, accuracy, e))
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


# Marker per declared output kind, so a synthesizer or a model-only release reads apart from an image transform.
OUTPUT_MARKERS = {"images": "o", "synthetic-images": "s", "features": "^", "model": "D", "records": "v"}
OUTPUT_WORDS = {
    "synthetic-images": "synthetic images",
    "features": "feature reports",
    "model": "model only, no images",
    "records": "records",
}


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
