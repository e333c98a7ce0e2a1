"""The mechanism protocol (issue 17): parameters are real attributes, capabilities are declared, fitting is one
step that every path shares, and generic code never names a mechanism."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from privpix.data import ImageSet
from privpix.errors import ParameterError
from privpix.mechanisms import MECHANISMS, Capabilities, fit_as_declared, get_mechanism


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
    assert m.model == "x.pt" and m.guarantee_model == "empirical"
    assert m.get_params()["model"] == "x.pt"


def test_parameters_normalise_strings_like_the_cli_gives_them():
    m = get_mechanism("dp-pix", epsilon="1", b="4", clip="false")
    assert (m.epsilon, m.b, m.clip) == (1.0, 4, False)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_mechanism_declares_capabilities(name):
    cls = MECHANISMS[name]
    params = {"model": "x.pt"} if any(p.name == "model" for p in cls.params) else {}
    m = cls(epsilon=1.0 if cls.uses_epsilon else None, **params)
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


GENERIC = [
    "cli/app.py",
    "cli/options.py",
    "cli/evaluate.py",
    "cli/release.py",
    "cli/bench.py",
    "bench.py",
    "evaluation/audit.py",
    "evaluation/runner.py",
]


@pytest.mark.parametrize("module", GENERIC)
def test_generic_code_does_not_guess_from_parameter_names(module):
    text = (Path(__file__).parents[1] / "src" / "privpix" / module).read_text()
    assert not re.search(r"\.values\[|\.values\.get\(|\"batch\" in|getattr\(mech, \"batch\"", text)


def test_a_new_neighbour_relation_is_one_class_and_the_audit_uses_it():
    """A relation defined outside privpix (here: one colour channel of one image) drives the audit's pairs and
    wording with no edit to the audit."""
    from privpix.evaluation.audit import audit
    from privpix.mechanisms.pixel import PixelLaplace
    from privpix.neighbours import NeighbourPair, Neighbours, _Base

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
