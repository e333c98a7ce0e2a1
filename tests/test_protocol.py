"""The mechanism protocol: parameters are real attributes, capabilities are declared, fitting is one
step that every path shares, and generic code never names a mechanism (that one is pyproject.toml's import-linter
contract on generic code, run by tests/test_layout.py::test_the_layers_hold)."""

from __future__ import annotations

import numpy as np
import pytest

from privpix.data import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms import MECHANISMS, Capabilities, Mechanism, ModelFile, fit_as_declared, get_mechanism


def _images(n: int = 30, seed: int = 0) -> ImageSet:
    rng = np.random.default_rng(seed)
    return ImageSet(rng.integers(0, 256, size=(n, 6, 5, 1), dtype=np.uint8), labels=np.arange(n) % 3)


def test_parameters_are_real_attributes_and_the_manifest_records_what_was_used():
    m = get_mechanism("pca-inverse", epsilon=1.0, batch=10)
    assert m.d == 20 and "values" not in vars(m)
    m.d = 5
    rel = m.release(_images(), 0)
    assert rel.parameters["d"] == 5 == m.get_params()["d"]
    assert any("d = 5 attributes" in c for c in rel.guarantee.caveats)
    m.set_params(d=3, epsilon=2.0)
    assert m.get_params()["d"] == 3 and m.epsilon == 2.0
    with pytest.raises(ParameterError, match="d must be >= 1"):
        m.set_params(d=0)
    assert m.d == 3  # a refused set_params changes nothing
    m.d = -1
    with pytest.raises(ParameterError, match="d must be >= 1"):
        m.release(_images(), 0)  # a bad value set directly is caught before it is used


def test_a_parameter_named_model_is_the_parameter_not_the_guarantee_model():
    m = get_mechanism("ae-obfuscator", model="x.pt")
    assert m.model == "x.pt" and m.about.guarantee_model == "empirical"
    assert m.get_params()["model"] == "x.pt"


def test_parameters_normalise_strings_like_the_cli_gives_them():
    m = get_mechanism("dp-pix", epsilon="1", b="4", clip="false")
    assert (m.epsilon, m.b, m.clip) == (1.0, 4, False)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_mechanism_declares_capabilities(name):
    cls = MECHANISMS[name]
    params = {"model": "x.pt"} if any(p.name == "model" for p in cls.params) else {}
    m = cls(epsilon=1.0 if cls.about.uses_epsilon else None, **params)
    caps = m.capabilities()
    assert isinstance(caps, Capabilities)
    assert caps.batch_size is None or caps.batch_size >= 2


def test_public_basis_is_fitted_through_the_one_fitting_step():
    m = get_mechanism("pca-inverse", epsilon=1.0, d=3, basis="public")
    assert m.capabilities().fits_on == "public" and not m.is_fitted
    with pytest.raises(ParameterError, match="name them"):
        fit_as_declared(m)
    m.fit(_images(40, seed=1))
    assert m.is_fitted and m.capabilities().fixed_shape == (6, 5, 1)
    m.d = 2  # a changed parameter invalidates the fit: releasing with a basis of another d would lie
    assert not m.is_fitted
    with pytest.raises(ParameterError, match="not fitted"):
        m.release(_images(), 0)


def test_batch_dependence_is_declared_not_guessed():
    assert get_mechanism("pca-inverse", epsilon=1.0, batch=50).capabilities().batch_size == 50
    assert get_mechanism("pixel-laplace", epsilon=1.0).capabilities().batch_size is None
    assert get_mechanism("acgan", model="x.pt").capabilities().needs_labels
    assert not get_mechanism("ppsgan", model="x.pt").capabilities().needs_labels


def test_a_new_neighbour_relation_is_one_class_and_the_audit_uses_it():
    """A relation defined outside privpix (here: one colour channel of one image) drives the audit's pairs and
    wording with no edit to the audit."""
    from privpix.evaluation.audit import audit
    from privpix.mechanisms.pixel import PixelLaplace
    from privpix.privacy.neighbours import NeighbourPair, Neighbours, _Base

    class OneChannel(Neighbours):
        key = "channel"

        def wording(self) -> str:
            return "one channel of one image"

        def pairs(self, images):
            b = _Base(images)
            changed = b.black.copy()
            changed[..., 0] = 1.0
            return [NeighbourPair("black vs one white channel", b.one(b.black), b.one(changed))]

    class PerChannel(PixelLaplace):
        name = "test-per-channel"

        def neighbours(self):
            return OneChannel()

    rgb = ImageSet(np.random.default_rng(0).integers(0, 256, (6, 4, 4, 3), dtype=np.uint8))
    res = audit(PerChannel(epsilon=1.0, sensitivity="bound", unit="image"), rgb, trials=40, seed=0)
    assert res.unit == "one channel of one image" and res.pair == "black vs one white channel"


# ------------------------------------------------------------------------------ fitting is one path (item 2)

TINY_GAN = {"d": 8, "width": 4, "ae_epochs": 1, "epochs": 1, "batch_size": 16, "n_critic": 1}


def _digits(n: int = 60) -> ImageSet:
    from privpix.data import load_dataset

    return load_dataset("builtin-mnist").subset(np.random.default_rng(0).permutation(5000)[:n])


@pytest.mark.slow
def test_privpix_fit_trains_writes_and_the_model_file_carries_its_training_parameters(run, tmp_path):
    model = tmp_path / "acgan.pt"
    args = [f"--param={k}={v}" for k, v in TINY_GAN.items()]
    r = run("fit", "--method", "acgan", "--dataset", "builtin-mnist:train", "--limit", 60, *args, "--seed", 0,
            "--output", model)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "no formal privacy guarantee" in r.output and model.is_file()
    m = get_mechanism("acgan", model=str(model)).fit()
    # With a model file the training parameters in force are the file's, and the manifest records them.
    assert {k: m.get_params()[k] for k in TINY_GAN} == TINY_GAN
    rel = m.release(_digits(12), 0)
    assert rel.parameters == m.get_params() and rel.images.shape == (28, 28, 1)
    with pytest.raises(ParameterError, match="trained with width=4"):
        get_mechanism("acgan", model=str(model), width=8).fit()
    # The same fit from the API writes the same weights: one path, seeded.
    again = get_mechanism("acgan", **TINY_GAN)
    from privpix.data import load_dataset

    data = load_dataset("builtin-mnist:train")
    data = data.subset(np.sort(np.random.default_rng(0).choice(len(data), 60, replace=False)))
    from privpix.threads import one_thread

    with one_thread():  # as `privpix fit` trains: one torch thread, whatever this process has
        again.fit(data, seed=0).save_model(tmp_path / "again.pt")
    import torch

    a = torch.load(model, weights_only=True)["state"]
    b = torch.load(tmp_path / "again.pt", weights_only=True)["state"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    r = run("fit", "--method", "acgan", "--dataset", "builtin-mnist:train", "--output", model)
    assert r.exit_code != 0 and "exists; pass --force" in r.output


@pytest.mark.slow
def test_fit_refuses_what_has_no_model_and_unfitted_mechanisms_refuse_to_release(run, tmp_path):
    r = run("fit", "--method", "pixel-laplace", "--dataset", "builtin-mnist", "--output", tmp_path / "m.pt")
    assert r.exit_code == 2 and "has no model file to write" in r.output and not (tmp_path / "m.pt").exists()
    for name in ("ppsgan", "ae-obfuscator"):
        m = get_mechanism(name)
        assert m.capabilities().fits_on == "private" and not m.is_fitted
        with pytest.raises(ParameterError, match="not fitted; call fit"):
            m.release(_digits(4), 0)


@pytest.mark.slow
def test_the_bench_trains_a_gan_itself_once_per_run(tmp_path, monkeypatch):
    from privpix.evaluation.bench import BenchConfig, run_bench
    from privpix.mechanisms.neural import ppsgan

    calls = []
    real = ppsgan.train_ppsgan
    monkeypatch.setattr(ppsgan, "train_ppsgan", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    data = _digits(80)
    train, test = data.subset(np.arange(60)), data.subset(np.arange(60, 80))
    cfg = BenchConfig("builtin-mnist", ["acgan"], [1.0], repeats=2, params={"acgan": TINY_GAN}, audit_trials=20,
                      cnn_epochs=0)  # fmt: skip
    res = run_bench(train, test, cfg, tmp_path / "b")
    assert calls == ["acgan"]  # two cells, the audit and the sample grid share one fit
    assert len(res["cells"]) == 2 and len(res["audits"]) == 1
    assert "trained without DP on builtin-mnist (60 images, seed 0)" in res["cells"][0]["guarantee"]["caveats"][0]
    assert res["cells"][0]["parameters"]["width"] == 4


@pytest.mark.slow
def test_evaluate_is_the_grid_without_attacks_and_audit(run, tmp_path):
    from privpix.evaluation import evaluate

    data = _digits(60)
    rows = evaluate(data.subset(np.arange(40)), data.subset(np.arange(40, 60)), ["pixel-laplace", "gaussian-blur"],
                    [1.0, 4.0])  # fmt: skip
    assert [(r["method"], r["epsilon"]) for r in rows] == [
        ("pixel-laplace", 1.0), ("pixel-laplace", 4.0), ("gaussian-blur", None)
    ]  # fmt: skip
    assert not any(k.startswith(("reid", "mia", "recon")) for r in rows for k in r)
    report = tmp_path / "r.html"
    r = run("evaluate", "--dataset", "builtin-mnist", "--method", "gaussian-blur", "--limit", 40, "--report", report,
            "-q")  # fmt: skip
    assert r.exit_code == 0, r.output
    text = report.read_text()
    assert "<h2>Guarantees</h2>" in text and "<h2>Utility and quality</h2>" in text and "<h2>Samples</h2>" in text
    assert "<h2>Attacks</h2>" not in text and "claimed versus audited" not in text


@pytest.mark.parametrize(
    ("field", "value"),
    [("fits_on", "everything"), ("output", "pixels"), ("seconds_per_value", 0.0)],
)
def test_capabilities_refuse_an_undeclared_kind(field, value):
    """The declared kinds are Literal types (a type checker sees them) and checked at run time too: generic code
    compares them by string, so a misspelt kind would silently take no branch."""
    with pytest.raises(ValueError, match=field):
        Capabilities(**{field: value})


def test_privacy_is_one_method_and_the_audits_own_experiments_a_mixin():
    """A mechanism states its privacy in privacy() alone (the ledger, the audit and the report read its Claim);
    the audit's experiments are hooks of the Auditable mixin, on the mechanisms that have them."""
    from privpix.mechanisms import Auditable, Mechanism

    for gone in ("audit_claim", "noise_composition", "privacy_events", "guarantee_for", "white_box",
                 "white_box_trials", "released_statistic"):  # fmt: skip
        assert not hasattr(Mechanism, gone), gone
    assert {n for n, cls in MECHANISMS.items() if issubclass(cls, Auditable)} == {
        "dp-sgd", "dp-teacher", "dp-merf", "dp-hp", "dp-eigenfaces", "dp-transport"
    }  # fmt: skip


def test_the_core_protocol_has_at_most_twelve_public_members():
    # What a plug-in implements and generic code may call; anything only some mechanisms need (a model file, the
    # audit's experiments, conformance cases) is an optional mixin or hook, outside this list.
    public = sorted(n for n in dir(Mechanism) if not n.startswith("_"))
    assert len(public) <= 12, public
    assert public == [
        "about",
        "capabilities",
        "fit",
        "get_params",
        "is_fitted",
        "neighbours",
        "params",
        "privacy",
        "release",
        "set_params",
    ]


def test_model_files_and_secure_noise_are_declared_where_generic_code_reads_them():
    trained = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5)
    assert isinstance(trained, ModelFile) and trained.capabilities().secure == {"secure": True}
    blur = get_mechanism("gaussian-blur")
    assert not isinstance(blur, ModelFile)
    assert blur.capabilities().secure is None and "no randomness" in blur.capabilities().not_secure
    dp_basis = get_mechanism("pca-inverse[basis=dp]", epsilon=1.0, delta=1e-5).capabilities()
    assert dp_basis.secure is None and "basis=dp" in dp_basis.not_secure
    assert get_mechanism("pixel-laplace", epsilon=1.0).capabilities().secure == {}
