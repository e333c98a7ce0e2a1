"""The dataset card of a release (``README.md``): what was published, what protects it, what it cost, and how to
check it, in plain words for a person (a data-protection officer, a reader of the published set), with Hugging Face
dataset-card YAML front matter for tools. Written from the manifest alone, so it never holds a source path or file
name (the manifest holds none unless the user asked for it, and the card leaves that field out)."""

from __future__ import annotations

import json
import math
from typing import Any

from privpix.privacy.guarantees import Guarantee

# Hugging Face's size categories (the `size_categories` field of a dataset card).
SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"))  # fmt: skip


def size_category(n: int) -> str:
    """The Hugging Face size category of ``n`` items."""
    return next((name for bound, name in SIZE_CATEGORIES if n < bound), "n>10M")


def dataset_card(manifest: dict[str, Any], folder_name: str = "RELEASE") -> str:
    """The card for a release whose manifest is ``manifest`` (without its ``files``); ``folder_name`` is how the
    card names the folder in its commands (the output's name, never a path)."""
    g = manifest["guarantee"]
    name = str(manifest.get("mechanism") or "local-DP reports")
    count, what = _contents(manifest)
    sound = bool(g.get("sound"))
    privacy = {
        "mechanism": name,
        "model": g.get("model"),
        "sound": sound,
        "epsilon": g.get("epsilon"),
        "delta": g.get("delta"),
        "per_image_epsilon": g.get("per_image_epsilon"),
        "unit": g.get("unit"),
        "noise": manifest.get("rng", "unknown"),
    }
    ledger = manifest.get("ledger")
    if isinstance(ledger, dict):
        privacy["ledger_entry"] = ledger.get("entry")
    tags = ["privpix", "privacy", "differential-privacy" if sound else "not-differentially-private"]
    if manifest.get("synthetic_images") or isinstance(manifest.get("labels"), dict):
        tags.append("synthetic")
    front = {
        "pretty_name": f"privpix release ({name})",
        "size_categories": [size_category(count)],
        "task_categories": ["image-classification"] if "records" not in manifest else ["tabular-classification"],
        "tags": tags,
        "privacy": privacy,
    }
    lines = ["---", *_yaml(front), "---", "", f"# privpix release: {name}", ""]
    lines += [f"This folder holds {what}, released by privpix {manifest.get('privpix_version', '')} with "
              f"`{name}` ({_params(manifest.get('parameters', {}))}).", ""]  # fmt: skip
    lines += ["## What protects the people in the data", ""]
    if sound:
        eps = g.get("per_image_epsilon")
        lines += [f"**Differential privacy, per image: ε = {_num(eps)}, δ = {_num(g.get('delta'))}**, for "
                  f"{g.get('unit')}. Whatever anyone does with this release, its outcome changes by at most a factor "
                  f"e^{_num(eps)} (plus δ) when one such image is replaced.", ""]  # fmt: skip
    else:
        lines += ["**This release is not differentially private.** " + _why_not(g), ""]
    lines += ["The guarantee as privpix states it (also in `manifest.json`):", "", "```text",
              (manifest.get("guarantee_text") or Guarantee.from_dict(g).text()).strip(), "```", ""]  # fmt: skip
    caveats = g.get("caveats") or []
    if caveats:
        lines += ["Caveats:", ""] + [f"- {c}" for c in caveats] + [""]
    lines += ["## The noise", "", _noise_text(manifest.get("rng")), ""]
    lines += ["## What it cost", "", _ledger_text(ledger), ""]
    lines += ["## Measured privacy", "",
              "No audit was run with this release. `privpix audit --method " + name + " ...` bounds "
              "the ε the mechanism really spends (a 95 % lower bound), and `privpix bench` measures re-identification, "
              "attribute-inference and membership attacks against it.", ""]  # fmt: skip
    lines += ["## Check it", "",
              f"`privpix verify {folder_name}` checks every file of this folder against the sha256 listed in "
              "`manifest.json` (this card included), and that no other file was added.", ""]  # fmt: skip
    if "records" not in manifest and manifest.get("format", "imagefolder") == "imagefolder" and "m" not in manifest:
        lines += ["## Load it", "", "```python", "import datasets", "",
                  f'data = datasets.load_dataset("imagefolder", data_dir="{folder_name}")', "```", ""]  # fmt: skip
    return "\n".join(lines)


def _contents(manifest: dict[str, Any]) -> tuple[int, str]:
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


def _why_not(g: dict[str, Any]) -> str:
    if g.get("model") == "empirical":
        return ("Its privacy is only what attacks measure; an ε or δ among its parameters is a noise knob, not a "
                "guarantee.")  # fmt: skip
    if g.get("model") == "none":
        return "It makes no privacy claim."
    return "What its method claims does not hold as implemented; the caveats below say why."


def _noise_text(rng: Any) -> str:
    if rng == "secure":
        return "Every noise value behind the guarantee was drawn from the operating system's CSPRNG by exact samplers."
    if rng == "seeded":
        return ("The noise was drawn from a seeded generator (a research run): anyone who knows the seed can remove "
                "it. This release is not for publication.")  # fmt: skip
    return ("The noise was drawn in floating point from fresh OS entropy; floating-point noise is not an exact "
            "sampler (Mironov 2012). `--secure` draws exact noise where the method has an exact sampler.")  # fmt: skip


def _ledger_text(ledger: Any) -> str:
    if not isinstance(ledger, dict):
        return "No ledger was charged for this release."
    spent = ledger.get("spent") or {}
    budget = ledger.get("budget") or {}
    text = f"Ledger charge: {ledger.get('charge')}. "
    if spent:
        text += f"The ledger has spent ε = {_num(spent.get('epsilon'))} at δ = {_num(spent.get('delta'))} with it"
        if budget:
            left = max(0.0, float(budget["epsilon"]) - float(spent.get("epsilon", 0.0)))
            text += f", of a budget of ε = {_num(budget['epsilon'])}: ε = {_num(left)} remains"
        text += f" ({spent.get('accountant', '')})."
    return text


def _params(params: dict[str, Any]) -> str:
    shown = [f"{k}={v}" for k, v in params.items() if k not in ("model",)]
    return ", ".join(shown) if shown else "default parameters"


def _num(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _yaml(value: Any, indent: int = 0) -> list[str]:
    """A small YAML writer for the card's front matter: mappings, lists of scalars and scalars as JSON (valid
    YAML), so no YAML library is needed and every string is quoted."""
    pad = " " * indent
    out = []
    for key, v in value.items():
        if isinstance(v, dict):
            out.append(f"{pad}{key}:")
            out += _yaml(v, indent + 2)
        elif isinstance(v, list):
            out.append(f"{pad}{key}:")
            out += [f"{pad}- {_scalar(item)}" for item in v]
        else:
            out.append(f"{pad}{key}: {_scalar(v)}")
    return out


def _scalar(v: Any) -> str:
    if isinstance(v, float) and math.isinf(v):
        return ".inf" if v > 0 else "-.inf"  # YAML's infinity (JSON has none)
    return json.dumps(v)
