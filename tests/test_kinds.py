"""One base class per output kind (privpix.mechanisms.kinds): every mechanism is an instance of the kind it declares,
sees only that kind's hooks, and generic code refuses a mechanism of another kind in one line."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from privpix.errors import ParameterError
from privpix.mechanisms import (
    KINDS,
    MECHANISMS,
    About,
    Claim,
    FeatureMechanism,
    ImageMechanism,
    Mechanism,
    ModelMechanism,
    RecordMechanism,
    SyntheticImageMechanism,
    get_mechanism,
    register,
    require_kind,
    takes_delta,
)
from privpix.privacy.guarantees import Guarantee

# dp-teacher's `predict` is its DP-SGD teacher's labelling of drawn images (published with them), not a model
# release's hook: it publishes synthetic images.
SAME_NAME = {"dp-teacher": {"predict"}}


def _unfitted(cls: type[Mechanism], **params: Any) -> Mechanism:
    return cls(epsilon=1.0 if cls.about.uses_epsilon else None, delta=1e-5 if takes_delta(cls, {}) else None, **params)


def _outputs_of(cls: type) -> set[str]:
    return {out for out, kind in KINDS.items() if issubclass(cls, kind)}


def _hooks(kind: type[Mechanism]) -> set[str]:
    """The methods and properties a kind class adds to Mechanism (``release`` is every kind's)."""
    return {
        name
        for name, value in vars(kind).items()
        if (inspect.isfunction(value) or isinstance(value, property)) and name != "release"
    }


def test_every_output_has_one_kind_class_and_the_kind_declares_it():
    assert set(KINDS) == {"images", "synthetic-images", "features", "model", "records"}
    for output, kind in KINDS.items():
        assert kind.output == output and issubclass(kind, Mechanism)
    assert all(_hooks(kind) for kind in KINDS.values())


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_a_mechanism_is_an_instance_of_exactly_the_kind_it_declares(name):
    """What a mechanism releases follows from its class alone: it subclasses one kind class, and the output its
    capabilities report is that class's, for any parameters (a model file too: the conformance suite checks its
    fitted cases the same way)."""
    cls = MECHANISMS[name]
    assert _outputs_of(cls) == {cls.output}
    mech = _unfitted(cls)
    assert mech.capabilities().output == cls.output and isinstance(mech, KINDS[cls.output])
    if any(p.name == "model" for p in cls.params):  # read lazily: no file is opened to say what it releases
        assert _unfitted(cls, model="x.pt").capabilities().output == cls.output


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_a_mechanism_has_no_hooks_of_another_kind(name):
    mech = _unfitted(MECHANISMS[name])
    others = [kind for output, kind in KINDS.items() if output not in _outputs_of(type(mech))]
    leaked = {hook for kind in others for hook in _hooks(kind) if hasattr(mech, hook)} - SAME_NAME.get(name, set())
    assert not leaked, f"{name} has hooks of another kind: {sorted(leaked)}"


def test_hooks_stay_with_their_kind():
    pixel_laplace = get_mechanism("pixel-laplace", epsilon=1.0)
    assert not hasattr(pixel_laplace, "synthesize") and not hasattr(pixel_laplace, "predict")
    assert not hasattr(pixel_laplace, "release_records") and not hasattr(pixel_laplace, "feature_files")
    dp_sgd = get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5)
    assert hasattr(dp_sgd, "predict") and not hasattr(dp_sgd, "_privatize") and not hasattr(dp_sgd, "label_names")
    merf = get_mechanism("dp-merf", epsilon=1.0, delta=1e-5)
    assert hasattr(merf, "label_names") and not hasattr(merf, "membership_score")


@pytest.mark.parametrize(
    "name,kind,message",
    [
        ("pixel-laplace", SyntheticImageMechanism, "pixel-laplace: releases images, not synthetic images"),
        ("pixel-laplace", RecordMechanism, "pixel-laplace: releases images, not tabular records"),
        ("dp-merf", FeatureMechanism, "dp-merf: releases synthetic-images, not features"),
        ("ldp-pixel-report", ModelMechanism, "ldp-pixel-report: releases features, not a model"),
        ("dp-sgd", ImageMechanism, "dp-sgd: releases model, not images"),
    ],
)
def test_require_kind_refuses_another_kind_in_one_line(name, kind, message):
    cls = MECHANISMS[name]
    with pytest.raises(ParameterError) as err:
        require_kind(_unfitted(cls), kind)
    assert str(err.value) == message


def test_register_refuses_a_mechanism_of_no_kind():
    class NoKind(Mechanism):
        name = "no-kind"
        summary = "releases nothing"
        about = About(uses_epsilon=False)

        def privacy(self, data: Any, n: int | None = None, *, secure: bool = False) -> Claim:
            return Claim.of(Guarantee.none("nothing"), self.neighbours())

    with pytest.raises(ValueError, match="subclass the base class of its output kind"):
        register(NoKind)
    assert "no-kind" not in MECHANISMS


def test_register_refuses_a_mechanism_of_two_kinds():
    class TwoKinds(ImageMechanism, RecordMechanism):
        name = "two-kinds"
        summary = "releases images or records"
        about = About(uses_epsilon=False)

        def privacy(self, data: Any, n: int | None = None, *, secure: bool = False) -> Claim:
            return Claim.of(Guarantee.none("nothing"), self.neighbours())

    with pytest.raises(ValueError, match="subclasses ImageMechanism and RecordMechanism; its output must follow"):
        register(TwoKinds)
    assert "two-kinds" not in MECHANISMS


@pytest.mark.slow
def test_a_model_release_is_refused_by_its_kind(digits):
    with pytest.raises(ParameterError, match="publishes a trained model, not images"):
        get_mechanism("dp-sgd", epsilon=1.0, delta=1e-5, epochs=1, batch_size=10).fit(
            digits.subset(range(30)), seed=0
        ).release(digits.subset(range(3)), 0)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["release", "--dataset", "builtin-mnist", "--method", "dp-sgd", "--epsilon", "1", "--delta", "1e-5"],
         "publishes a trained model, not images"),
        (["release", "--dataset", "adult:test", "--method", "pixel-laplace", "--epsilon", "1"],
         "holds records, not images, and pixel-laplace releases images"),
        (["audit", "--dataset", "adult:test", "--method", "pixel-laplace", "--epsilon", "1"],
         "holds records, and pixel-laplace releases images"),
    ],
)  # fmt: skip
def test_wrong_kind_from_the_command_line_is_one_line(run, data_dir, tmp_path, args, needle):
    output = ["--output", tmp_path / "x"] if args[0] == "release" else []
    r = run(*args, "--data-dir", data_dir, *output)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
