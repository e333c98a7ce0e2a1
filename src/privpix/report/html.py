"""Self-contained HTML report (plots embedded as PNG data URIs; no network, no external files)."""

from __future__ import annotations

import base64
import html
import io
import math
from collections import defaultdict
from collections.abc import Sequence
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
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return "∞" if math.isinf(x) else f"{x:.4g}"
    return html.escape(str(x))


def summary_rows(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """Mean over repeats per (method, ε)."""
    groups: dict[tuple[str, Any], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["method"], r["epsilon"])].append(r)
    out = []
    for (method, eps), rs in groups.items():
        out.append(
            {
                "method": method,
                "epsilon": eps,
                "repeats": len(rs),
                **{
                    k: float(np.mean([x[k] for x in rs]))
                    for k in ("accuracy", "f1", "accuracy_release_all", "psnr", "ssim", "entropy")
                },
                "guarantee": Guarantee.from_dict(rs[0]["guarantee"]).short(),
                "guarantee_compact": Guarantee.from_dict(rs[0]["guarantee"]).compact(),
            }
        )
    return out


CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px}
th{background:#f2f2f2}.bad{color:#b00020;font-weight:600}.good{color:#1b5e20;font-weight:600}
.figs img{max-width:49%}.note{background:#fff8e1;border-left:4px solid #ffb300;padding:.6em 1em}
"""


def render_report(
    rows: Sequence[dict],
    title: str,
    dataset: str,
    grids: Sequence[tuple[str, str]] = (),
    notes: Sequence[str] = (),
) -> str:
    """The report as one HTML string. ``grids`` are (caption, base64 PNG) sample grids."""
    # One guarantee per method label (the first ε shown: the wording is the same across ε).
    seen: dict[str, dict] = {}
    for r in rows:
        seen.setdefault(r["method"], r)
    g_rows = []
    for method, r in seen.items():
        g = Guarantee.from_dict(r["guarantee"])
        sound = '<span class="good">yes</span>' if g.sound else '<span class="bad">NO</span>'
        per_image = "—" if g.model in ("none", "empirical") else _fmt(g.per_image_epsilon)
        if g.model in ("central-dp", "local-dp") and not g.sound:
            per_image = '<span class="bad">no finite bound</span>'
        g_rows.append(
            [
                _fmt(method),
                _fmt(g.model),
                sound,
                _fmt(g.unit),
                per_image,
                "<br>".join(html.escape(c) for c in g.caveats),
            ]
        )
    s_rows = [
        [
            _fmt(s["method"]),
            _fmt(s["epsilon"]),
            s["repeats"],
            _fmt(s["accuracy"]),
            _fmt(s["f1"]),
            _fmt(s["accuracy_release_all"]),
            _fmt(s["psnr"]),
            _fmt(s["ssim"]),
            _fmt(s["entropy"]),
            _fmt(s["guarantee"]),
        ]
        for s in summary_rows(rows)
    ]
    plots = [
        tradeoff_plot(rows, "accuracy", "accuracy (train on released, test on original)"),
        tradeoff_plot(rows, "ssim", "SSIM of released vs original test images"),
    ]
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>",
        f"<p>Dataset: <b>{html.escape(dataset)}</b> · privpix {__version__}</p>",
        *(f"<p class='note'>{html.escape(n)}</p>" for n in notes),
        "<h2>Guarantees</h2><p>What each release truly promises. <b>sound: NO</b> means the ε is a noise knob "
        "from the paper, not a differential-privacy guarantee.</p>",
        _table(
            ["method", "model", "sound", "neighbouring unit", "ε per whole image (at the ε below)", "caveats"], g_rows
        ),
        "<h2>Utility and quality</h2><p>accuracy / F1: PCA + SVM trained on released training images, tested on "
        "original test images. release-all: trained and tested on released images. PSNR / SSIM / entropy: "
        "released test images against their sources.</p>",
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
        "<div class='figs'>" + "".join(f"<img src='data:image/png;base64,{p}'>" for p in plots) + "</div>",
    ]
    if grids:
        parts.append("<h2>Samples</h2>")
        for caption, png in grids:
            parts.append(
                f"<figure><img src='data:image/png;base64,{png}' style='max-width:100%'>"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    path: str | Path,
    rows: Sequence[dict],
    title: str,
    dataset: str,
    grids: Sequence[tuple[str, str]] = (),
    notes: Sequence[str] = (),
) -> Path:
    p = Path(path)
    write_text_atomic(p, render_report(rows, title, dataset, grids, notes))
    return p
