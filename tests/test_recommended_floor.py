"""The methods privpix recommends give, at their defaults, images a classifier learns from.

Read from the registry, never named here: every registered mechanism with a recommendation
(``About.recommended_for``) that publishes images, on each shipped data set it is recommended for
(``About.recommended_on``), with the parameters the recommendation sets (``About.recommended_params``) and every
other parameter at its default, as a data owner would run it first. It is fitted (seed 0) at ε = 1, δ = 1e-5 on a
seeded part of the training split (up to ``N_FIT`` images) shrunk to 16×16 and releases ``N_RELEASE`` images; the
small CNN of :mod:`privpix.evaluation.cnn` (``mnist-002``, 3 epochs) trained on those alone must beat the majority
class of 1,000 real test images by ``MARGIN`` = 0.03.

False alarms and power, measured with :func:`floor_run` on seeds 0-4 of each case the registry declared then
(three; the table is in ``docs/synthesis.md``, "The floor of the recommended methods"): none of the 15 runs fell
below the floor, the closest 0.023 above it; the same images under shuffled labels (a control without label
information) never reached it, the closest 0.016 below it.

Slow, unavoidably: a default fit trains a generator for its minimum number of steps (``MIN_GENERATOR_STEPS`` of 500
generated images, each featurised into 10,000 values), seconds at any image size or n, and CelebA's faces are
decoded from JPEG; a case takes 11-25 CPU-s. The defaults are what this test is about.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from conftest import once_per_run
from privpix.data import load_dataset
from privpix.data.loaders import DATASETS
from privpix.evaluation.cnn import CNNClassifier
from privpix.mechanisms import MECHANISMS, fit_as_declared, get_mechanism
from privpix.mechanisms.kinds import KINDS

EPSILON, DELTA = 1.0, 1e-5
SIZE = 16
N_FIT = 4096  # or the whole training split when smaller; dp-teacher's default teacher batch needs n ≥ 4,096
N_RELEASE = 10_000  # images released (a synthesizer draws them; other mechanisms release the fit images repeated)
N_TEST = 1000
CNN_EPOCHS = 3
MARGIN = 0.03
IMAGE_KINDS = (KINDS["images"], KINDS["synthetic-images"])

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _recommended() -> list:
    cases = []
    for name, cls in sorted(MECHANISMS.items()):
        if not cls.about.recommended_for or not issubclass(cls, IMAGE_KINDS):
            continue
        for dataset in cls.about.recommended_on:
            needs_files = DATASETS[dataset].folder is not None
            cases.append(pytest.param(name, dataset, id=f"{name}-{dataset}",
                                      marks=[pytest.mark.data] if needs_files else []))  # fmt: skip
    return cases


def _part(dataset: str, split: str, n: int, seed: int, data_dir):
    def pick(total: int):
        return None if n >= total else np.sort(np.random.default_rng(seed).choice(total, n, replace=False))

    return load_dataset(f"{dataset}:{split}", data_dir, pick=pick).resized(SIZE, SIZE)


def floor_run(name: str, dataset: str, seed: int, data_dir, shuffled: bool = False,
              params: dict | None = None, part=_part) -> tuple[float, float]:  # fmt: skip
    """(the CNN's test accuracy, the test split's majority-class rate) of ``name`` at its defaults on ``dataset``,
    every draw from ``seed``. For measurements of the floor: ``shuffled``, the CNN learns the released images under
    permuted labels (a control that carries no label information); ``params``, set beside the recommendation's.
    ``part``: how the images are read (:func:`_part`'s arguments and result)."""
    train = part(dataset, "train", N_FIT, seed, data_dir)
    test = part(dataset, "test", N_TEST, 1, data_dir)
    about = MECHANISMS[name].about
    given = {**dict(about.recommended_params), **(params or {})}
    mech = get_mechanism(name, EPSILON, DELTA if about.uses_delta else None, **given)
    fit_as_declared(mech, train, data_dir, seed=seed)
    released = mech.release(train.subset(np.arange(N_RELEASE) % len(train)), seed + 1).images
    assert released.labels is not None and len(released) == N_RELEASE
    labels = np.random.default_rng(seed).permutation(released.labels) if shuffled else None
    accuracy = CNNClassifier("mnist-002", epochs=CNN_EPOCHS, seed=seed).fit(released, labels).score(test)
    return accuracy, float(np.bincount(test.labels).max() / len(test))


def test_every_recommended_image_method_names_the_shipped_data_it_is_recommended_for():
    """A recommendation without a shipped data set would escape the floor below."""
    recommended = [n for n, c in MECHANISMS.items() if c.about.recommended_for and issubclass(c, IMAGE_KINDS)]
    assert recommended
    for name in recommended:
        about = MECHANISMS[name].about
        assert about.recommended_on, f"{name}: recommended, but names no shipped data set (About.recommended_on)"
        for dataset in about.recommended_on:
            assert dataset in DATASETS and DATASETS[dataset].kind == "images", (name, dataset)
            assert {"train", "test"} <= set(DATASETS[dataset].splits), (name, dataset)
        known = {p.name for p in MECHANISMS[name].params}
        assert {k for k, _ in about.recommended_params} <= known, name


@pytest.fixture
def shared_part(tmp_path_factory):
    """:func:`_part`, each set read once per run: the cases recommended on one data set (dp-eigenfaces' and
    dp-transport's CelebA) fit the same images, and decoding and shrinking 5,096 CelebA faces is 4-5 CPU-s. The
    first case to ask reads them; a case on another worker waits for it and loads the same set."""

    def part(dataset: str, split: str, n: int, seed: int, data_dir):
        def make(folder):
            (folder / "set.pkl").write_bytes(pickle.dumps(_part(dataset, split, n, seed, data_dir)))

        folder = once_per_run(tmp_path_factory, f"floor-{dataset}-{split}-{n}-{seed}", make)
        return pickle.loads((folder / "set.pkl").read_bytes())

    return part


@pytest.mark.slow(seconds=15)
@pytest.mark.parametrize(("name", "dataset"), _recommended())
def test_a_recommended_method_at_its_defaults_gives_images_a_cnn_learns_from(name, dataset, request, shared_part):
    data_dir = request.getfixturevalue("data_dir") if DATASETS[dataset].folder is not None else None
    accuracy, majority = floor_run(name, dataset, 0, data_dir, part=shared_part)
    assert accuracy >= majority + MARGIN, f"{name} on {dataset}: CNN {accuracy:.3f}, majority class {majority:.3f}"
