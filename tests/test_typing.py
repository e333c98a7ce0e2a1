"""Type hints that must not drift from what the code does at run time."""

from __future__ import annotations

import sys

import pytest

from privpix.mechanisms import MECHANISMS
from privpix.mechanisms.base import Mechanism

# Plugins declare their own classes; only privpix's are held to this.
BUILT_IN = sorted(name for name, cls in MECHANISMS.items() if cls.__module__.startswith("privpix."))


def _annotation(cls: type, attr: str) -> object:
    """The class-level annotation of ``attr`` that type checkers see on ``cls`` (the nearest in the MRO), evaluated
    in its own module; ``None`` when there is none. One annotation at a time, as typing.get_type_hints would fail
    on the whole class for a name imported only under TYPE_CHECKING."""
    for klass in cls.__mro__:
        hints = vars(klass).get("__annotations__", {})
        if attr in hints:
            hint = hints[attr]
            return eval(hint, vars(sys.modules[klass.__module__])) if isinstance(hint, str) else hint
    return None


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_param_is_annotated_with_its_kind(name: str) -> None:
    """Mechanism.__init__ sets each declared Param as an attribute with setattr, which a type checker cannot see:
    the class annotates it. The annotation must say the type Param.validate gives the value (its ``kind``)."""
    cls = MECHANISMS[name]
    assert issubclass(cls, Mechanism)
    wrong = {
        p.name: (_annotation(cls, p.name), p.kind.__name__)
        for p in cls.params
        if _annotation(cls, p.name) is not p.kind
    }
    assert not wrong, f"{cls.__qualname__}: params annotated wrongly or not at all, (found, expected): {wrong}"


def test_the_walk_sees_the_registered_mechanisms() -> None:
    assert len(BUILT_IN) >= 20
    assert {"pca-inverse", "pixel-laplace", "dp-merf", "dp-sgd"} <= set(BUILT_IN)


@pytest.mark.parametrize("name", BUILT_IN)
def test_epsilon_is_annotated_float_only_where_it_is_required(name: str) -> None:
    """A class may narrow ``epsilon`` from ``float | None`` to ``float`` only when it takes ε: construction refuses
    ``None`` for those alone."""
    cls = MECHANISMS[name]
    if _annotation(cls, "epsilon") is float:
        assert cls.uses_epsilon, f"{cls.__qualname__} annotates epsilon as float but takes none"


@pytest.mark.slow
@pytest.mark.integration
def test_mypy_finds_no_error_in_the_package() -> None:
    """The hints privpix ships (py.typed) hold: mypy, as [tool.mypy] configures it, checks src/privpix. A test, not
    a step before the suite, so that `make test` runs it beside the other tests (19 s without a cache)."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"mypy found errors:\n{r.stdout}{r.stderr}"
    assert "Success: no issues found" in r.stdout
