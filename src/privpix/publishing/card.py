"""The dataset card of a release (``README.md``): what was published, what protects it, what it cost, and how to
check it, in plain words for a person (a data-protection officer, a reader of the published set), with Hugging Face
dataset-card YAML front matter for tools. Written from the manifest alone, so it never holds a source path or file
name (the manifest holds none unless the user asked for it, and the card leaves that field out)."""

from __future__ import annotations

import json
import math
from typing import Any

from privpix.privacy.guarantees import Guarantee
from privpix.report.release_text import contents, ledger_text, noise_text, num_text, params_text, why_not

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
    count, what = contents(manifest)
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
              f"`{name}` ({params_text(manifest.get('parameters', {}))}).", ""]  # fmt: skip
    lines += ["## What protects the people in the data", ""]
    if sound:
        eps = g.get("per_image_epsilon")
        lines += [f"**Differential privacy, per image: ε = {num_text(eps)}, δ = {num_text(g.get('delta'))}**, for "
                  f"{g.get('unit')}. Whatever anyone does with this release, its outcome changes by at most a factor "
                  f"e^{num_text(eps)} (plus δ) when one such image is replaced.", ""]  # fmt: skip
    else:
        lines += ["**This release is not differentially private.** " + why_not(g), ""]
    lines += ["The guarantee as privpix states it (also in `manifest.json`):", "", "```text",
              (manifest.get("guarantee_text") or Guarantee.from_dict(g).text()).strip(), "```", ""]  # fmt: skip
    caveats = g.get("caveats") or []
    if caveats:
        lines += ["Caveats:", ""] + [f"- {c}" for c in caveats] + [""]
    lines += ["## The noise", "", noise_text(manifest.get("rng")), ""]
    lines += ["## What it cost", "", ledger_text(ledger), ""]
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
