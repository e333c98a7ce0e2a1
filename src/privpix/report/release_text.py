"""What a release is and what it promises, in plain words, from its manifest alone: the sentences the dataset card
(:mod:`privpix.publishing.card`) and the release statement (:mod:`privpix.report.statement`) share, so the two
never word the same fact two ways."""

from __future__ import annotations

import math
from typing import Any


def contents(manifest: dict[str, Any]) -> tuple[int, str]:
    if "records" in manifest:
        return int(manifest["records"]), f"{manifest['records']} records (`records.csv`)"
    if "m" in manifest and "n" in manifest:
        return int(manifest["n"]), f"{manifest['n']} reports of {manifest['m']} features each"
    n = int(manifest.get("images", 0))
    kind = "synthetic images drawn from a model" if manifest.get("synthetic_images") else "privatized images"
    fmt = manifest.get("format", "imagefolder")
    labels = (
        " with their labels" if (isinstance(manifest.get("labels"), dict) or manifest.get("labels_published")) else ""
    )
    return n, f"{n} {kind}{labels}, as {fmt}"


def why_not(g: dict[str, Any]) -> str:
    if g.get("model") == "empirical":
        return ("Its privacy is only what attacks measure; an ε or δ among its parameters is a noise knob, not a "
                "guarantee.")  # fmt: skip
    if g.get("model") == "none":
        return "It makes no privacy claim."
    return "What its method claims does not hold as implemented; the caveats below say why."


def noise_text(rng: Any) -> str:
    if rng == "secure":
        return "Every noise value behind the guarantee was drawn from the operating system's CSPRNG by exact samplers."
    if rng == "seeded":
        return ("The noise was drawn from a seeded generator (a research run): anyone who knows the seed can remove "
                "it. This release is not for publication.")  # fmt: skip
    return ("The noise was drawn in floating point from fresh OS entropy; floating-point noise is not an exact "
            "sampler (Mironov 2012). `--secure` draws exact noise where the method has an exact sampler.")  # fmt: skip


def ledger_text(ledger: Any) -> str:
    from privpix.privacy.filters import spent_text

    if not isinstance(ledger, dict):
        return "No ledger was charged for this release."
    spent = ledger.get("spent") or {}
    budget = ledger.get("budget") or {}
    text = f"Ledger charge: {ledger.get('charge')}. "
    if spent:
        of = float(budget["epsilon"]) if budget.get("epsilon") is not None else None
        text += f"With it the ledger has spent {spent_text(spent, of, sep=' = ')}."
    return text


def params_text(params: dict[str, Any]) -> str:
    """The parameters a release was made with, ``k=v, ...``; a model file's path is left out (paths can name
    people, and the manifest's ``model_sha256`` names the file)."""
    shown = [f"{k}={v}" for k, v in params.items() if k != "model"]
    return ", ".join(shown) if shown else "default parameters"


def num_text(x: Any) -> str:
    """A number as the card and the statement print it: four significant digits, "—" for none, "∞"."""
    if x is None:
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.4g}" if isinstance(x, float) else str(x)
