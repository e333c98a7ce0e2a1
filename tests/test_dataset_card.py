"""Every release carries its dataset card (``README.md``): Hugging Face dataset-card YAML that a card parser
reads, with the manifest's per-image ε, δ, unit and caveats, the ledger entry and what remains, and how to check
the folder; no source path or file name; and Hugging Face `datasets` still loads the folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

import privpix
from privpix.data import load_dataset
from privpix.mechanisms import get_mechanism
from privpix.publishing.card import dataset_card, size_category

PEOPLE = ("Woody_Allen", "Ada_Lovelace", "Alan_Turing", "Grace_Hopper")


def _faces(root):
    rng = np.random.default_rng(0)
    for i in range(12):
        cls = root / ("male" if i % 2 else "female")
        cls.mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(img).save(cls / f"{PEOPLE[i % 4]}_{i:04d}.png")
    return root


def _card(folder):
    from huggingface_hub import DatasetCard

    return DatasetCard.load(folder / "README.md")


def test_a_sound_release_states_its_guarantee_cost_and_check_in_its_card(tmp_path):
    faces = load_dataset(_faces(tmp_path / "faces"))
    out = tmp_path / "release"
    mech = get_mechanism("pixel-laplace", epsilon=1.0, sensitivity="bound", unit="image")
    privpix.release(mech, faces, out, labels=True, ledger=tmp_path / "ledger.json", budget=4.0)
    manifest = json.loads((out / "manifest.json").read_text())
    assert "README.md" in [f["name"] for f in manifest["files"]]  # checked by `privpix verify` like every file
    card = _card(out)
    meta = card.data.to_dict()
    g = manifest["guarantee"]
    assert meta["privacy"]["per_image_epsilon"] == g["per_image_epsilon"] == 1.0
    assert meta["privacy"]["delta"] == g["delta"] and meta["privacy"]["unit"] == g["unit"]
    assert meta["privacy"]["sound"] is True and meta["privacy"]["ledger_entry"] == 1
    assert meta["size_categories"] == ["n<1K"] and "differential-privacy" in meta["tags"]
    text = card.text
    for caveat in g["caveats"]:
        assert caveat in text
    assert "ε = 3 remains" in text and "privpix verify release" in text
    assert "floating point" in text  # unseeded float noise says so
    whole = (out / "README.md").read_text()
    assert str(tmp_path) not in whole and not any(person in whole for person in PEOPLE)


def test_hf_datasets_still_loads_a_release_with_its_card(tmp_path):
    import datasets

    faces = load_dataset(_faces(tmp_path / "faces"))
    out = tmp_path / "release"
    privpix.release(get_mechanism("dp-pix", epsilon=1.0), faces, out, seed=0, labels=True)
    ds = datasets.load_dataset("imagefolder", data_dir=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(ds) == 12 and sorted(set(ds["label"])) == ["female", "male"]
    assert "research run" in (out / "README.md").read_text()  # a seeded release says it is not for publication


def test_a_release_that_is_not_dp_says_so_first():
    manifest = {
        "mechanism": "sra",
        "parameters": {"epsilon": 1.0, "r": 10},
        "guarantee": {"model": "central-dp", "epsilon": 1.0, "delta": 0.0, "unit": "one image", "sound": False,
                      "per_image_epsilon": None, "caveats": ["singular vectors published without noise"]},
        "guarantee_text": "not DP",
        "images": 5,
        "rng": "os-seeded",
    }  # fmt: skip
    text = dataset_card(manifest, "out")
    body = text.split("---", 2)[2]
    assert "**This release is not differentially private.**" in body
    assert "singular vectors published without noise" in body and "not-differentially-private" in text
    assert "No ledger was charged" in body


@pytest.mark.parametrize(("n", "category"), [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (99_999, "10K<n<100K"),
                                             (5_000_000, "1M<n<10M"), (20_000_000, "n>10M")])  # fmt: skip
def test_size_categories_are_hugging_faces(n, category):
    assert size_category(n) == category
