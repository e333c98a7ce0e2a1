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
    assert "holds even if each ε was chosen" in text and "holds only if no ε was chosen" in text
    assert manifest["rng"] == "secure" and "exact samplers" in text  # without a seed: exact noise, and it says so
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


def _noisy_folder(root):
    rng = np.random.default_rng(1)
    root.mkdir()
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(root / f"{i}.png")
    return root


def test_a_release_without_a_seed_draws_exact_noise_or_states_a_floating_point_caveat(run, tmp_path):
    """Never neither: the publication default is the exact samplers on the OS CSPRNG wherever the method has them;
    a sound method without them states that its noise is floating-point; a seeded run states that it is one."""
    from privpix.publishing.shards import FLOAT_NOISE, SEEDED_NOISE

    src = _noisy_folder(tmp_path / "in")
    ledger = tmp_path / "ledger.json"
    r = run("release", "--input", src, "--method", "pixel-laplace[sensitivity=bound,unit=image]", "--epsilon", "1",
            "--output", tmp_path / "exact", "--ledger", ledger, "--budget", "10", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    exact = json.loads((tmp_path / "exact" / "manifest.json").read_text())
    assert exact["rng"] == "secure" and exact["secure_rng"] is True
    assert FLOAT_NOISE not in exact["guarantee"]["caveats"] and SEEDED_NOISE not in exact["guarantee"]["caveats"]
    # pca-inverse's DP basis is a floating-point Gaussian: no exact sampler, so the caveat, in the manifest, the
    # card and the ledger entry alike.
    r = run("release", "--input", src, "--method", "pca-inverse[basis=dp,d=2,batch=6]", "--epsilon", "1", "--delta",
            "1e-5", "--output", tmp_path / "float", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    floating = json.loads((tmp_path / "float" / "manifest.json").read_text())
    assert floating["rng"] == "os-seeded" and FLOAT_NOISE in floating["guarantee"]["caveats"]
    assert "not by an exact sampler" in (tmp_path / "float" / "README.md").read_text()
    r = run("release", "--input", src, "--method", "pixel-laplace[sensitivity=bound,unit=image]", "--epsilon", "1",
            "--seed", "3", "--output", tmp_path / "seeded", "--ledger", ledger, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    seeded = json.loads((tmp_path / "seeded" / "manifest.json").read_text())
    assert seeded["rng"] == "seeded" and SEEDED_NOISE in seeded["guarantee"]["caveats"]
    from privpix.privacy.accounting import PrivacyLedger

    first, second = PrivacyLedger.load(ledger).entries
    assert SEEDED_NOISE not in first.guarantee["caveats"] and SEEDED_NOISE in second.guarantee["caveats"]


def test_a_synthesizer_fitted_with_floating_point_noise_is_not_restated_as_exact(tmp_path):
    """The API's default picks exact noise only where it can still be drawn: a model already fitted in floating
    point keeps its parameters, and its release states the floating-point caveat."""
    from privpix.errors import ParameterError
    from privpix.privacy.noise import make_rng
    from privpix.publishing.shards import FLOAT_NOISE

    digits = load_dataset("builtin-mnist").subset(slice(60))
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_features=200, epochs=1, batch_size=20, width=8,
                         channels=4).fit(digits, seed=0)  # fmt: skip
    manifest = privpix.release(mech, 10, tmp_path / "synthetic")
    assert manifest["parameters"]["secure"] is False and manifest["rng"] == "os-seeded"
    assert FLOAT_NOISE in manifest["guarantee"]["caveats"]
    with pytest.raises(ParameterError, match="fitted with floating-point noise; fit it again with secure=True"):
        privpix.release(mech, 10, tmp_path / "exact", make_rng(secure=True))
