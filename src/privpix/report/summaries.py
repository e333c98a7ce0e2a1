"""What a grid's results say, as numbers and words: the summary rows, the means per cell, the audit verdicts and
bounds, each mechanism's standing per image, and the answers at fixed per-image budgets. The console (`privpix
evaluate`, `bench`, `demo`) and the HTML report print the same text from here."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privpix.privacy.guarantees import Guarantee


def fmt(x: Any) -> str:
    """A value as the report and the console print it: "—" for none, floats with four significant digits. Plain
    text (the report's template escapes it)."""
    if x is None:
        return "—"
    if isinstance(x, float):
        return "∞" if math.isinf(x) else f"{x:.4g}"
    return str(x)


def num(x: float | None, spec: str = ".3f") -> str:
    """A table cell: ``x`` formatted by ``spec``, "—" when it is missing (``None`` or NaN: a score that was not
    measured), "∞" when infinite; never "nan"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return format(x, spec)


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


def verdict_text(a: dict[str, Any]) -> str:
    """An audit record's verdict in words, qualified where the bare word would mislead (the one wording the
    console, the report and the benchmarks use)."""
    text = a["verdict"]
    if text == "consistent" and not a.get("refutable", True):
        # "Consistent" would read as evidence; a claim this audit could not have refuted is none.
        trials = a.get("trials")
        text = f"not refutable with {trials} trials" if trials else "not refutable by this audit"
        text += " (claim beyond the audit's range)"
    if a.get("refuted_by"):
        text += f" (by the {a['refuted_by']} bound)"
    if a.get("perfect_distinguisher"):
        text += "; perfect distinguisher: no finite ε on this pair"
    return text


def bound_parts(a: dict[str, Any]) -> tuple[str, str | None]:
    """An audit record's lower bound ("—" when not audited), and the raw and curve bounds it is the larger of
    (``None`` without a curve bound)."""
    bound = a["audited_epsilon_lower"]
    if bound is None or math.isnan(bound):
        return "—", None
    curve = a.get("curve_epsilon_lower")
    if not a.get("curve") or curve is None or math.isnan(curve):
        return eps_text(bound), None
    return eps_text(bound), f"raw {eps_text(a['raw_epsilon_lower'])}, {a['curve']} curve {eps_text(curve)}"


def bound_text(a: dict[str, Any]) -> str:
    """:func:`bound_parts` on one line, for the console."""
    head, detail = bound_parts(a)
    return f"{head} ({detail})" if detail else head


MODEL_ONLY = "model only: no images released"


# ------------------------------------------------------------------------------------------ frontier

# The per-image budgets the report's first question is answered for.
FRONTIER_BUDGETS = (1.0, 10.0)
# Above this a per-image ε bounds next to nothing (e^100); such claims are still drawn at their value, shaded.
WEAK_PER_IMAGE_EPSILON = 100.0


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
