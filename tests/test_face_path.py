"""The synthesizer path works for face sets as a new user tries it. Each test failed on the code
before: the class list came from a default of 10 instead of the data set's names, a flat folder was refused,
`privpix fit` took no folder and no size, class names were lost in the model file (folders 0/ and 1/, string
labels in Parquet), a release from a model file silently ignored its --dataset, and a fit of 5 generator steps
gave no warning."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image

from privpix.data import load_dataset
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.synthesis.embedding import ShortTrainingWarning

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {"n_features": 200, "epochs": 1, "batch_size": 20, "width": 8, "channels": 4}
PARAMS = [a for k, v in TINY.items() for a in ("--param", f"{k}={v}")]
CLAIM = ["--epsilon", "1", "--delta", "1e-5"]


def _faces(tmp_path: Path, classes: dict[str, int] | None, n: int = 12) -> Path:
    """A folder of 24x24 grey "faces" from the built-in LFW patches: one sub-folder per class, or flat."""
    patches = load_dataset("lfw-subset").resized(24, 24).as_uint8()
    root = tmp_path / "faces"
    groups = classes or {"": n}
    k = 0
    for name, count in groups.items():
        folder = root / name if name else root
        folder.mkdir(parents=True, exist_ok=True)
        for _ in range(count):
            Image.fromarray(patches[k % len(patches), :, :, 0]).save(folder / f"{k:03d}.png")
            k += 1
    return root


@pytest.mark.integration
def test_a_two_class_data_set_releases_under_its_own_class_names(run, tmp_path):
    """lfw-subset declares 2 classes (non-face, face): the release writes face/ and non-face/ (it stopped with
    "label '9' is not one of the class names" when K defaulted to 10)."""
    r = run("release", "--dataset", "lfw-subset:train", "--size", "24x24", "--method", "dp-merf", *CLAIM, *PARAMS,
            "--param", "n=40", "--workers", 1, "--output", tmp_path / "out", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["parameters"]["n_classes"] == 2
    folders = {p.name for p in (tmp_path / "out").iterdir() if p.is_dir()}
    assert folders <= {"face", "non-face"} and folders


@pytest.mark.integration
def test_an_n_classes_that_contradicts_the_data_set_is_refused_before_any_work(run, tmp_path, monkeypatch):
    from privpix.mechanisms.synthesis import embedding

    def no_training(*args, **kwargs):
        raise AssertionError("trained although n_classes contradicts the data set")

    monkeypatch.setattr(embedding, "_parallel_chunk_sums", no_training)
    src = _faces(tmp_path, {"smiling": 10})
    r = run("release", "--input", src, "--method", "dp-merf", *CLAIM, *PARAMS, "--param", "n_classes=2",
            "--param", "n=10", "--workers", 1, "--output", tmp_path / "out")  # fmt: skip
    assert r.exit_code == 2 and "contradicts the 1 classes" in r.output and not (tmp_path / "out").exists()


@pytest.mark.integration
def test_one_class_folder_releases_every_image_in_that_class(run, tmp_path):
    """With n_classes from the data (one class), the noisy label draw cannot produce a class that does not exist (2
    of 3 runs failed with n_classes=2)."""
    src = _faces(tmp_path, {"smiling": 10})
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        r = run("release", "--input", src, "--method", "dp-merf", *CLAIM, *PARAMS, "--param", "n=15", "--workers", 1,
                "--output", out, "-q")  # fmt: skip
        assert r.exit_code == 0, r.output
        assert [p.name for p in out.iterdir() if p.is_dir()] == ["smiling"]


@pytest.mark.integration
def test_a_flat_unlabelled_folder_gets_unconditional_synthesis(run, tmp_path):
    src = _faces(tmp_path, None)
    r = run("release", "--input", src, "--method", "dp-merf", *CLAIM, *PARAMS, "--param", "n=9", "--workers", 1,
            "--output", tmp_path / "out", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["images"] == 9 and manifest["parameters"]["n_classes"] == 1
    assert not [p for p in (tmp_path / "out").iterdir() if p.is_dir()]  # no label folders: nothing to label
    flat = replace(load_dataset("lfw-subset").resized(24, 24), labels=None, class_names=None)
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(flat, seed=0)
    assert mech.synthesize(5, 0).images.labels is None


@pytest.mark.integration
def test_fit_takes_a_folder_and_a_size_and_the_model_keeps_its_class_names(run, tmp_path):
    """`privpix fit --input DIR --size HxW` (its own error suggested --size); the model file keeps the class
    names, so a release from it writes the named folders, and Parquet stores a ClassLabel."""
    src = _faces(tmp_path, {"female": 8, "male": 8})
    model = tmp_path / "m.pt"
    r = run("fit", "--method", "dp-merf", "--input", src, "--size", "16x16", *CLAIM, *PARAMS, "--seed", 0,
            "--workers", 1, "--output", model, "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(model)).fit()
    assert mech.label_names() == ("female", "male") and mech.capabilities().fixed_shape == (16, 16, 1)
    assert str(src) not in model.read_bytes().decode("latin-1")  # the folder's path (it can name people) is not kept
    r = run("release", "--method", "dp-merf", *CLAIM, "--param", f"model={model}", "--param", "n=20", "--workers", 1,
            "--output", tmp_path / "folders", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert {p.name for p in (tmp_path / "folders").iterdir() if p.is_dir()} <= {"female", "male"}
    r = run("release", "--method", "dp-merf", *CLAIM, "--param", f"model={model}", "--param", "n=20", "--workers", 1,
            "--format", "parquet", "--output", tmp_path / "pq", "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    import datasets

    ds = datasets.load_dataset("parquet", data_dir=str(tmp_path / "pq"), split="train")
    assert isinstance(ds.features["label"], datasets.ClassLabel) and ds.features["label"].names == ["female", "male"]


@pytest.mark.slow
def test_a_release_from_a_model_file_refuses_an_input_it_would_ignore(run, tmp_path, sixty):
    model = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=0).save_model(tmp_path / "m.pt")
    for given in (["--dataset", "orl:test"], ["--input", str(tmp_path)]):
        r = run("release", *given, "--method", "dp-merf", *CLAIM, "--param", f"model={model}", "--param", "n=5",
                "--output", tmp_path / "out")  # fmt: skip
        assert r.exit_code == 2 and "reads no input" in r.output and given[0] in r.output
        assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_training_too_short_for_the_data_is_warned(run, tmp_path, sixty):
    """DP-MERF's schedule on a small set, 5 epochs of ceil(n / 500) steps, is 5 generator steps for 300 images:
    coloured noise. The default (epochs=0) trains the minimum whatever n; an explicit short schedule warns."""
    import warnings

    from privpix.mechanisms.synthesis.embedding import MIN_GENERATOR_STEPS

    small = {"epsilon": 1.0, "delta": 1e-5, "n_features": 200, "width": 8, "channels": 4}
    with pytest.warns(ShortTrainingWarning, match="5 steps"):
        get_mechanism("dp-merf", **small, epochs=5).fit(sixty, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShortTrainingWarning)
        # Batches of 20, not 500, only to keep the test short: the schedule is the default's, 5 epochs of
        # max(ceil(60 / 20), MIN_GENERATOR_STEPS / 5) steps.
        default = get_mechanism("dp-merf", **small, batch_size=20).fit(sixty, seed=0)
    assert default.meta_["generator_steps"] == MIN_GENERATOR_STEPS and default.meta_["generator_epochs"] == 5
    assert len(default.meta_["history"]["loss"]) == 5
    src = _faces(tmp_path, {"a": 6, "b": 6})
    r = run("fit", "--method", "dp-merf", "--input", src, *CLAIM, *PARAMS, "--workers", 1, "--output",
            tmp_path / "m.pt")  # fmt: skip
    assert r.exit_code == 0 and "too few to learn images from" in r.output and "leave epochs at 0" in r.output


def test_data_that_names_no_classes_needs_n_classes(sixty):
    unnamed = replace(sixty, class_names=None)
    with pytest.raises(ParameterError, match="give n_classes"):
        get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(unnamed, seed=0)
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, n_classes=10, **TINY).fit(unnamed, seed=0)
    assert mech.n_classes == 10 and mech.label_names() is None


@pytest.mark.integration
@pytest.mark.slow
def test_bench_runs_a_synthesizer_on_a_face_set_with_the_attacks_that_apply(run, data_dir, tmp_path):
    """`privpix bench --dataset orl --methods dp-merf[...]` stopped with "identity re-identification needs subjects on
    both splits": synthetic images carry no subject. Now the cell gets the membership attacks (distance of each real
    face to the closest synthetic one), and no linkage score that would pair unrelated images by index."""
    spec = "dp-merf[n_features=200,epochs=1,batch_size=20,width=8,channels=4]"
    r = run("bench", "--dataset", "orl", "--methods", spec, "--epsilon", 1, "--delta", 1e-5, "--size", "28x24",
            "--limit", 80, "--audit-trials", 100, "--audit-max-trials", 100, "--cnn-epochs", 0, "--workers", 1,
            "--data-dir", data_dir, "--output", tmp_path / "bench")  # fmt: skip
    assert r.exit_code == 0, r.output
    (row,) = json.loads((tmp_path / "bench" / "results.json").read_text())["cells"]
    assert 0 <= row["mia_dcr_auc"] <= 1 and 0 <= row["mia_subspace_auc"] <= 1
    assert "reid_best" not in row and "identity_reid" not in row
