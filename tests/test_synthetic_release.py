"""Publishing a synthesizer's output: `privpix release` fits or loads the model, draws the number
of images the mechanism says, writes the DP labels into the manifest, and refuses what makes no sense."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privpix.data import load_dataset
from privpix.errors import ParameterError
from privpix.mechanisms import SyntheticImageMechanism, get_mechanism, require_kind

TINY = ["--param", "n_features=200", "--param", "epochs=1", "--param", "batch_size=50", "--param", "width=16",
        "--param", "channels=4"]  # fmt: skip
CLAIM = ["--epsilon", "1", "--delta", "1e-5"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny dp-merf model fitted on 300 built-in digits."""
    from click.testing import CliRunner

    from privpix.cli import main

    path = tmp_path_factory.mktemp("model") / "merf.pt"
    args = ["fit", "--method", "dp-merf", "--dataset", "builtin-mnist", "--limit", "300", *CLAIM, *TINY,
            "--seed", "1", "--output", str(path)]  # fmt: skip
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return path


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


@pytest.mark.integration
@pytest.mark.slow
def test_release_from_a_model_file_writes_labels_for_every_image(run, model, tmp_path):
    out = tmp_path / "synth"
    res = run("release", "--method", "dp-merf", *CLAIM, "--param", f"model={model}", "--param", "n=40",
              "--block-size", "15", "--shard-size", "15", "--workers", "2", "--seed", "2", "--output", out)  # fmt: skip
    assert res.exit_code == 0, res.output
    m = _manifest(out)
    names = [f["name"] for f in m["files"] if f["name"].endswith(".png")]
    assert m["shards"] == 3  # 40 images in shards of 15, on two worker processes
    assert len(names) == 40 == m["synthetic_images"]
    assert sorted(m["labels"]) == sorted(names)
    labels = np.array(list(m["labels"].values()))
    assert set(labels) <= set(range(10)) and len(set(labels)) >= 4
    assert m["guarantee"]["model"] == "central-dp" and m["guarantee"]["sound"]
    assert run("verify", out).exit_code == 0


def test_same_seed_same_synthetic_release(run, model, tmp_path):
    def once(name):
        res = run("release", "--method", "dp-merf", *CLAIM, "--param", f"model={model}", "--param", "n=40",
                  "--seed", "5", "--output", tmp_path / name)  # fmt: skip
        assert res.exit_code == 0, res.output
        m = _manifest(tmp_path / name)
        # Names are random by design (never seed-derived); the images and labels, in draw order, are not.
        return sorted((f["sha256"], m["labels"][f["name"]]) for f in m["files"] if f["name"].endswith(".png"))

    assert once("a") == once("b")


def test_model_file_without_input_needs_a_count(run, model, tmp_path):
    res = run("release", "--method", "dp-merf", *CLAIM, "--param", f"model={model}", "--output", tmp_path / "x")
    assert res.exit_code != 0
    assert "--param n=N" in res.output
    assert not (tmp_path / "x").exists()


def test_fit_on_private_needs_the_private_images(run, tmp_path):
    res = run("release", "--method", "dp-merf", *CLAIM, *TINY, "--output", tmp_path / "x")
    assert res.exit_code != 0 and "--dataset" in res.output


def test_source_map_is_refused_for_synthetic_images(run, model, tmp_path):
    res = run("release", "--method", "dp-merf", *CLAIM, "--param", f"model={model}", "--param", "n=5",
              "--output", tmp_path / "x", "--source-map", tmp_path / "map.csv")  # fmt: skip
    assert res.exit_code != 0 and "--source-map" in res.output
    assert not (tmp_path / "x").exists() and not (tmp_path / "map.csv").exists()


def test_synthesize_draws_n_labelled_images(model):
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(model))
    rel = mech.synthesize(37, 0)
    assert rel.images.images.shape == (37, 28, 28, 1) and rel.images.labels.shape == (37,)
    assert rel.source is None and rel.guarantee.per_image_epsilon == 1.0
    with pytest.raises(ParameterError, match=">= 1"):
        mech.synthesize(0, 0)
    # An image mechanism has no synthesizer's hooks at all; generic code asks for the kind and refuses in one line.
    pixels = get_mechanism("pixel-laplace", epsilon=1.0)
    assert not hasattr(pixels, "synthesize")
    with pytest.raises(ParameterError, match=r"^pixel-laplace: releases images, not synthetic images$"):
        require_kind(pixels, SyntheticImageMechanism)


@pytest.mark.slow
def test_release_of_images_still_returns_one_image_per_input(model):
    digits = load_dataset("builtin-mnist").subset(np.arange(11))
    rel = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(model)).release(digits, 0)
    assert len(rel.images) == 11 and rel.source is digits


def test_release_draws_n_images_when_n_is_set_and_publish_batches_stay_one_per_input(model, tmp_path):
    from privpix.publishing.release import release_to_dir

    digits = load_dataset("builtin-mnist").subset(np.arange(11))
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(model), n=7)
    rel = mech.release(digits, 0)
    assert len(rel.images) == 7 and rel.images.labels.shape == (7,) and rel.source is digits
    # release_to_dir's image sets are the caller's choice of count: one new image per given image; a count
    # draws that many.
    batches = [digits.subset(np.arange(5)), digits.subset(np.arange(5, 8))]
    manifest = release_to_dir(mech, batches, tmp_path / "o", np.random.default_rng(0))
    assert len(manifest["labels"]) == 8 and manifest["images"] == 8
    assert len(release_to_dir(mech, [2, 3], tmp_path / "p", 0)["labels"]) == 5
