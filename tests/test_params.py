"""Parameters declared once, as typed fields (privpix.mechanisms.params.param), and the params derived from them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from privpix.errors import ParameterError
from privpix.mechanisms import ImageMechanism, Param, get_mechanism, param
from privpix.mechanisms.base import About, Claim
from privpix.privacy.guarantees import Guarantee


class _Base(ImageMechanism):
    name = "params-test"
    about = About(uses_epsilon=False)
    a: int = param(3, "an integer", minimum=1)
    b: str = param("x", "a choice", ("x", "y"))
    c: bool = param(True, "a flag")

    def privacy(self, data: Any, n: int | None = None, *, secure: bool = False) -> Claim:
        return Claim.of(Guarantee.none("test"), self.neighbours())

    def _privatize(self, x: np.ndarray, rng: Any) -> np.ndarray:
        return x


def test_a_declaration_gives_the_param_its_name_and_the_annotation_s_type() -> None:
    assert _Base.params == (
        Param("a", int, 3, "an integer", minimum=1),
        Param("b", str, "x", "a choice", ("x", "y")),
        Param("c", bool, True, "a flag"),
    )


def test_instances_hold_the_values_and_the_class_holds_no_default() -> None:
    m = _Base(a="4")
    assert m.get_params() == {"a": 4, "b": "x", "c": True}
    assert "a" not in vars(_Base) and vars(m)["a"] == 4
    with pytest.raises(AttributeError):
        _Base.a  # noqa: B018  (the default lives in the Param, not on the class)


def test_validation_and_its_messages_are_the_param_s() -> None:
    with pytest.raises(ParameterError, match=r"^a must be >= 1, got 0$"):
        _Base(a=0)
    with pytest.raises(ParameterError, match=r"^b must be one of x, y; got 'z'$"):
        _Base(b="z")
    with pytest.raises(ParameterError, match="unknown parameter"):
        _Base(d=1)
    with pytest.raises(ParameterError, match=r"^d must be >= 1, got 0$"):
        get_mechanism("pca-inverse", epsilon=1, d=0)


def test_inherited_first_an_override_keeps_its_place_and_new_ones_follow() -> None:
    class Child(_Base):
        d: float = param(0.5, "a number")
        b: str = param("y", "a choice, y by default", ("x", "y"))

    assert [p.name for p in Child.params] == ["a", "b", "c", "d"]
    assert Child().b == "y" and _Base().b == "x"


def test_params_before_places_the_body_s_declarations_and_drop_params_removes() -> None:
    class Before(_Base, params_before="b", drop_params=("c",)):
        z: int = param(0, "first of the subclass's", minimum=0)
        a: int = param(5, "moved with the body's declarations", minimum=1)

    assert [p.name for p in Before.params] == ["z", "a", "b"]
    assert Before().get_params() == {"z": 0, "a": 5, "b": "x"}


def test_a_kind_that_is_not_a_plain_type_is_given_to_param() -> None:
    class Kinded(_Base):
        e: Any = param(1.5, "a float", kind=float)

    assert Kinded.params[-1] == Param("e", float, 1.5, "a float")


@pytest.mark.parametrize(
    "body,message",
    [
        ("params = ()", "params is derived"),
        ("a: int", "annotated outside their param"),
        ("e = param(1, 'no type')", "needs its type"),
        ("e: list = param([], 'not a kind')", "is not int, float, str or bool"),
        ("e: int = param(1, 'two kinds', kind=float)", "annotated int but declared kind=float"),
        ("pass", None),
    ],
)
def test_a_second_declaration_or_a_missing_type_is_refused(body: str, message: str | None) -> None:
    code = f"class Bad(_Base):\n    {body}\n"
    if message is None:
        exec(code, {"_Base": _Base, "param": param})  # a plain subclass declares nothing
        return
    with pytest.raises(TypeError, match=message):
        exec(code, {"_Base": _Base, "param": param})


def test_a_base_s_plain_annotation_of_a_parameter_is_refused() -> None:
    class Annotated(_Base):
        e: int

    with pytest.raises(TypeError, match="annotated outside their param"):

        class Declares(Annotated):
            e: int = param(1, "declared below a plain annotation")


def test_params_before_and_drop_params_name_inherited_parameters() -> None:
    with pytest.raises(TypeError, match="params_before names 'nope'"):

        class Nope(_Base, params_before="nope"):
            e: int = param(1, "e")

    with pytest.raises(TypeError, match="drop_params names 'nope'"):

        class Drop(_Base, drop_params=("nope",)):
            pass
