"""The public-data option of the mean-embedding synthesizers: loading and label mapping of the
public set, its refusals, and that it never enters the private release (same seed, same noisy embedding)."""

import numpy as np
import pytest
from PIL import Image

from privpix.data import ImageSet
from privpix.data.loaders import DIGIT_NAMES
from privpix.errors import ParameterError
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.synthesis.public import fingerprint, load_public

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY = {"n_features": 200, "epochs": 1, "batch_size": 20, "width": 16, "channels": 4, "public_epochs": 1}


def _folder(root, classes, shape=(10, 12, 3), per_class=3):
    rng = np.random.default_rng(0)
    for cls in classes:
        (root / cls).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(root / cls / f"{i}.png")
    return root


def test_digits_become_labelled_images_of_the_private_shape():
    pub = load_public("digits", (28, 28, 1), 10, DIGIT_NAMES)
    assert pub.shape == (28, 28, 1) and len(pub) == 1797 and pub.images.dtype == np.uint8
    assert set(np.unique(pub.labels)) == set(range(10))
    assert fingerprint(pub) == fingerprint(load_public("digits", (28, 28, 1), 10, DIGIT_NAMES))


def test_labels_are_mapped_by_class_name_and_channels_converted(tmp_path):
    folder = _folder(tmp_path / "pub", ["female", "male"])  # the folder's labels: female 0, male 1
    pub = load_public(str(folder), (8, 8, 1), 2, class_names=("male", "female"))
    assert pub.shape == (8, 8, 1)
    # Same order of files: every label flipped, since the private set calls male 0.
    plain = load_public(str(folder), (8, 8, 1), 2, class_names=("female", "male"))
    np.testing.assert_array_equal(pub.labels, 1 - plain.labels)


@pytest.mark.parametrize(
    "setup,spec_of,kwargs,match",
    [
        (None, lambda p: "no-such-dataset-or-folder", {}, "neither a dataset name"),
        (["a", "b", "c"], lambda p: str(p), {}, r"names its classes \['a', 'b', 'c'\], the private set does not"),
        (["cat", "dog"], lambda p: str(p), {"class_names": ("male", "female")}, r"classes \['cat', 'dog'\]"),
        ("flat", lambda p: str(p), {}, "no labelled images"),
        (None, lambda p: "adult", {}, "holds records"),
        (None, lambda p: "digits", {"class_names": ("0", "1")}, r"classes \['2', .*'9'\] of 'digits' are not among"),
    ],
)
def test_bad_public_sets_are_refused_naming_the_parameter(tmp_path, setup, spec_of, kwargs, match):
    root = tmp_path / "pub"
    if setup == "flat":
        root.mkdir()
        Image.fromarray(np.zeros((4, 4), np.uint8)).save(root / "x.png")
    elif setup:
        _folder(root, setup)
    with pytest.raises(ParameterError, match=match) as err:
        load_public(spec_of(root), (8, 8, 1), 2, **kwargs)
    assert str(err.value).startswith("public:")


def test_rgb_public_set_into_gray_and_gray_into_rgb(tmp_path):
    rgb = _folder(tmp_path / "rgb", ["0", "1"])
    assert load_public(str(rgb), (6, 6, 1), 2, class_names=("0", "1")).shape == (6, 6, 1)
    assert load_public("digits", (8, 8, 3), 10, DIGIT_NAMES).shape == (8, 8, 3)


@pytest.fixture(scope="module")
def fits(sixty):
    plain = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, **TINY).fit(sixty, seed=3)
    public = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, public="digits", **TINY).fit(sixty, seed=3)
    return plain, public


@pytest.mark.slow
def test_the_public_set_never_enters_the_release(fits):
    plain, public = fits
    # Same seed: the same feature map and the same noise, so the released embedding is bit for bit the same;
    # only the generator's starting weights differ.
    np.testing.assert_array_equal(public.embedding_, plain.embedding_)
    np.testing.assert_array_equal(public.label_probs_, plain.label_probs_)
    a = plain.model_.state_dict()["fc1.weight"].numpy()
    b = public.model_.state_dict()["fc1.weight"].numpy()
    assert not np.array_equal(a, b)


def test_the_model_and_guarantee_name_the_public_set(fits, tmp_path):
    _, public = fits
    meta = public.meta_
    assert meta["public"] == "digits" and meta["public_n"] == 1797 and len(meta["public_sha256"]) == 64
    assert len(meta["public_history"]["loss"]) == 1
    g = public.privacy((28, 28, 1)).guarantee
    text = " ".join(g.caveats)
    assert g.epsilon == 1.0 and g.per_image_epsilon == 1.0 and g.sound
    assert "not protected" in text and "distinct from the private set" in text and "1797 images" in text
    loaded = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, model=str(public.save_model(tmp_path / "m.pt"))).fit()
    assert loaded.public == "digits" and loaded.public_epochs == 1
    assert "not protected" in " ".join(loaded.privacy((28, 28, 1)).guarantee.caveats)


def test_a_bad_public_set_fails_before_the_private_release(sixty, monkeypatch):
    from privpix.mechanisms.synthesis import embed_net

    def touched(*args, **kwargs):
        raise AssertionError("the private images were embedded before the public set was checked")

    monkeypatch.setattr(embed_net, "mean_embedding", touched)
    mech = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, public="nowhere", order=2, epochs=1)
    with pytest.raises(ParameterError, match="public: 'nowhere'"):
        mech.fit(sixty, seed=0)
    assert mech.meta_ is None


@pytest.mark.slow
def test_a_public_set_sharing_images_with_the_private_one_is_refused(sixty):
    # builtin-mnist holds the very digits of `sixty`: they would be exposed through the pretraining without noise.
    mech = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5, public="builtin-mnist", **TINY)
    with pytest.raises(ParameterError, match=r"60 of the 60 private images are copies of its images \(identical"):
        mech.fit(sixty, seed=0)


def test_dp_hp_takes_the_same_option(sixty):
    m = get_mechanism("dp-hp", epsilon=1.0, delta=1e-5, public="digits", order=2, epochs=1, batch_size=20,
                      width=16, channels=4, public_epochs=1).fit(sixty, seed=0)  # fmt: skip
    assert m.meta_["public_n"] == 1797
    out = m.synthesize(5, 0).images
    assert len(out) == 5 and out.shape == (28, 28, 1) and isinstance(out, ImageSet)
