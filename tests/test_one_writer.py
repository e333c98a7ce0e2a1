"""One release writer. The API's ``privpix.release``, ``privpix release`` and ``privpix ldp
perturb`` all write through the sharded writer: the same seed gives the same output whichever path a user takes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privpix.data import ImageSet, load_dataset, load_folder
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.privacy.noise import SecureRandom
from privpix.publishing.release import release_to_dir


def _pixels(folder) -> np.ndarray:
    """The released images, in an order that does not depend on their (random, opaque) names."""
    x = load_folder(folder).as_uint8().reshape(-1, 28 * 28)
    return x[np.lexsort(x.T[::-1])]


@pytest.mark.slow
def test_the_api_release_is_the_command_lines_for_the_same_seed(run, tmp_path):
    """The API draws block by block from the seed, as `privpix release --seed` does: the same pixels. A Generator
    gives one seed drawn from it (the same state, the same release). 600 digits are three noise blocks of 256."""
    from PIL import Image

    src = tmp_path / "in"
    src.mkdir()
    for i, img in enumerate(load_dataset("builtin-mnist:test").subset(np.arange(600)).as_uint8()[..., 0]):
        Image.fromarray(img).save(src / f"{i:04d}.png")
    r = run("release", "--input", src, "--method", "pixel-laplace", "--epsilon", 1, "--seed", 7, "--output",
            tmp_path / "cli", "--workers", 1, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    everything = load_folder(src)
    mech = get_mechanism("pixel-laplace", epsilon=1)
    manifest = release_to_dir(mech, everything, tmp_path / "api", 7)
    assert manifest["images"] == json.loads((tmp_path / "cli" / "manifest.json").read_text())["images"] == 600
    np.testing.assert_array_equal(_pixels(tmp_path / "api"), _pixels(tmp_path / "cli"))
    # Batches are joined: the same images in two parts (split inside the second block) are the same release.
    parts = [everything.subset(np.arange(0, 300)), everything.subset(np.arange(300, len(everything)))]
    release_to_dir(mech, parts, tmp_path / "parts", 7)
    np.testing.assert_array_equal(_pixels(tmp_path / "parts"), _pixels(tmp_path / "cli"))
    # A Generator: one seed drawn from it.
    digits = everything.subset(np.arange(100))
    a = release_to_dir(mech, digits, tmp_path / "g1", np.random.default_rng(3))
    b = release_to_dir(mech, digits, tmp_path / "g2", np.random.default_rng(3))
    assert a["images"] == b["images"] == 100
    np.testing.assert_array_equal(_pixels(tmp_path / "g1"), _pixels(tmp_path / "g2"))
    assert not np.array_equal(_pixels(tmp_path / "g1"), _pixels(tmp_path / "cli")[:100])


def test_the_api_release_writes_every_layout_secure_noise_and_refuses_what_it_cannot_use(tmp_path):
    digits = load_dataset("builtin-mnist:test").subset(np.arange(40))
    mech = get_mechanism("pixel-laplace", epsilon=1)
    manifest = release_to_dir(mech, digits, tmp_path / "pq", SecureRandom(), fmt="parquet", labels=True)
    assert manifest["format"] == "parquet" and manifest["secure_rng"] is True and manifest["rng"] == "secure"
    assert manifest["images"] == 40 and "labels_published" in manifest
    with pytest.raises(ParameterError, match="rng must be an integer seed"):
        release_to_dir(mech, digits, tmp_path / "x", 1.5)
    with pytest.raises(ParameterError, match="seed must be a non-negative integer"):
        release_to_dir(mech, digits, tmp_path / "x", -1)
    with pytest.raises(ParameterError, match="draws no synthetic images"):
        release_to_dir(mech, 5, tmp_path / "x", 0)
    with pytest.raises(ParameterError, match="data must be an ImageSet"):
        release_to_dir(mech, "photos/", tmp_path / "x", 0)
    with pytest.raises(ParameterError, match="image sets or counts, not both"):
        release_to_dir(mech, [digits, 3], tmp_path / "x", 0)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_ldp_perturb_is_an_alias_with_epsilon_inf_for_the_noise_free_column(run, tmp_path):
    """`ldp perturb` releases through the same path as `privpix release --method ldp-*`; its own --epsilon inf
    gives the clean encodings with no guarantee, which every other mechanism and `release` of another kind refuse."""
    enc = tmp_path / "enc.npz"
    assert run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "8x8", "--output", enc, "-q").exit_code == 0
    outs = []
    for seed in (1, 2):
        out = tmp_path / f"inf{seed}"
        r = run("ldp", "perturb", "--encoder", enc, "--epsilon", "inf", "--dataset", "builtin-mnist:test", "--seed",
                seed, "--output", out, "-q")  # fmt: skip
        assert r.exit_code == 0, r.output
        outs.append(np.load(out / "reports.npz")["values"])
    np.testing.assert_array_equal(outs[0], outs[1])  # no randomness at ε = ∞
    manifest = json.loads((tmp_path / "inf1" / "manifest.json").read_text())
    assert manifest["guarantee"]["model"] == "none" and manifest["epsilon_per_feature"] is None
    mech = get_mechanism("ldp-pixel-report", epsilon=float("inf"), model=str(enc)).fit()
    images = ImageSet(np.zeros((2, 8, 8, 1), np.float32))
    np.testing.assert_array_equal(mech.release(images, 0).features, mech.encode(images))
    with pytest.raises(ParameterError, match="epsilon must be finite"):
        get_mechanism("pixel-laplace", epsilon=float("inf"))
    # At a finite ε the reports are the ones `privpix release` writes for the same seed (an encoder of the digits'
    # own size: `ldp perturb` and `release --size` resize by different paths).
    enc = tmp_path / "enc28.npz"
    assert run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "28x28", "--output", enc, "-q").exit_code == 0
    r = run("ldp", "perturb", "--encoder", enc, "--epsilon", 1, "--dataset", "builtin-mnist:test", "--seed", 5,
            "--output", tmp_path / "p", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    r = run("release", "--method", "ldp-pixel-report", "--param", f"model={enc}", "--epsilon", 1, "--dataset",
            "builtin-mnist:test", "--seed", 5, "--labels", "--output", tmp_path / "r", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    a, b = np.load(tmp_path / "p" / "reports.npz"), np.load(tmp_path / "r" / "reports.npz")
    np.testing.assert_array_equal(a["values"], b["values"])
    np.testing.assert_array_equal(a["labels"], b["labels"])


@pytest.mark.slow
def test_a_feature_release_that_stopped_is_resumed_by_the_same_command(run, tmp_path, monkeypatch):
    """A report folder is one shard of the one writer, so --resume works for it as for images: a run stopped before
    its commit leaves its staging, and the same command with --resume publishes the same reports."""
    from privpix.publishing import shards

    enc = tmp_path / "enc.npz"
    assert run("ldp", "fit-encoder", "--encoder", "pixel", "--shape", "8x8", "--output", enc, "-q").exit_code == 0
    args = ("release", "--method", "ldp-pixel-report", "--param", f"model={enc}", "--epsilon", 1, "--dataset",
            "builtin-mnist:test", "--size", "8x8", "--seed", 5, "--output", tmp_path / "r")  # fmt: skip

    def boom(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(shards.ShardedRelease, "_commit_unit", boom)
        r = run(*args)
    assert r.exit_code != 0 and "the same command with --resume continues the release" in r.output, r.output
    assert not (tmp_path / "r" / "reports.npz").exists()
    r = run(*args, "--resume")
    assert r.exit_code == 0, r.output
    assert "resuming: 1 of 1 shard(s) were finished" in r.output
    r = run(*args[:-2], "--output", tmp_path / "fresh", "-q")
    assert r.exit_code == 0, r.output
    a, b = np.load(tmp_path / "r" / "reports.npz"), np.load(tmp_path / "fresh" / "reports.npz")
    np.testing.assert_array_equal(a["values"], b["values"])
