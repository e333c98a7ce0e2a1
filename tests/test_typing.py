"""Type hints that must not drift from what the code does at run time, and parameters declared in one place."""

from __future__ import annotations

import ast
import inspect
import itertools
import sys
import textwrap
from functools import cache

import click
import pytest

from privpix.mechanisms import MECHANISMS
from privpix.mechanisms.base import Mechanism
from privpix.mechanisms.registry import mechanism_class

# Plugins declare their own classes; only privpix's are held to the annotation checks.
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


@cache
def _body(klass: type) -> list[ast.stmt]:
    """The statements of ``klass``'s own body, from its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    node = tree.body[0]
    assert isinstance(node, ast.ClassDef) and node.name == klass.__name__
    return node.body


def _declarations(klass: type) -> list[tuple[str, str]]:
    """Every place ``klass``'s body names a parameter-like attribute: ``(name, how)`` with how ``"param"`` for
    ``name: T = param(...)``, ``"annotation"`` for a bare ``name: T``, ``"value"`` for another annotated value,
    ``"Param"`` for a ``Param("name", ...)`` written in the body and ``"params"`` for an assignment to ``params``."""
    out: list[tuple[str, str]] = []
    for st in _body(klass):
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            call = st.value
            is_param = isinstance(call, ast.Call) and getattr(call.func, "id", None) == "param"
            how = "param" if is_param else "annotation" if st.value is None else "value"
            if st.value is not None and not is_param and isinstance(call, ast.Name):
                how = "param"  # a module-level param(...) shared by several classes (pixel_range: float = _RANGE)
            out.append((st.target.id, how))
        targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "params" for t in targets):
            out.append(("params", "params"))
        for node in ast.walk(st):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Param" and node.args:
                first = node.args[0]
                out.append((first.value if isinstance(first, ast.Constant) else "?", "Param"))
    return out


def _mechanism_classes(cls: type) -> list[type]:
    """``cls`` and its bases below :class:`Mechanism` that have a source file (the classes that may declare)."""
    return [k for k in cls.__mro__ if issubclass(k, Mechanism) and k is not Mechanism]


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_every_parameter_is_declared_once(name: str) -> None:
    """Each parameter of every registered mechanism is written in one place: one ``name: type = param(...)`` in the
    class or one of its bases (a subclass may redeclare one only to change it), never also as a bare annotation,
    a ``Param(...)`` in a class body, or a ``params`` tuple; an LDP mechanism's encoder parameters are the encoder
    class's own, named nowhere in the mechanism."""
    cls = MECHANISMS[name]
    classes = _mechanism_classes(cls)
    found = {k: _declarations(k) for k in classes}
    written = [(k.__qualname__, n) for k, decls in found.items() for n, how in decls if how in ("params", "Param")]
    assert not written, f"{cls.__qualname__}: params or Param(...) written in a class body: {written}"
    encoder = getattr(cls, "encoder_class", None)
    from_encoder = {p.name for p in encoder.params} if encoder is not None else set()
    for p in cls.params:
        places = [(k, how) for k, decls in found.items() for n, how in decls if n == p.name]
        if p.name in from_encoder:
            assert not places, f"{cls.__qualname__}.{p.name}: the encoder's parameter, also named in {places}"
            continue
        bare = [k.__qualname__ for k, how in places if how != "param"]
        assert not bare, f"{cls.__qualname__}.{p.name}: annotated outside its param() declaration in {bare}"
        per_class = [k for k, _ in places]
        assert per_class, f"{cls.__qualname__}.{p.name}: declared nowhere in {[k.__qualname__ for k in classes]}"
        assert len(per_class) == len(set(per_class)), f"{cls.__qualname__}.{p.name}: declared twice in one class"
        # Redeclared in a subclass: only to change it (its help, default, bounds), not as a copy.
        versions = [_declared(k, p.name) for k in reversed(per_class)]
        copies = [(a, b) for a, b in itertools.pairwise(versions) if a == b]
        assert not copies, f"{cls.__qualname__}.{p.name}: redeclared unchanged {copies}"


def _declared(klass: type, name: str) -> object:
    """The Param ``klass`` declared for ``name`` (the one in its derived ``params``, as ``klass`` has it)."""
    return next(p for p in klass.params if p.name == name)


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_parameter_is_annotated_with_its_kind(name: str) -> None:
    """A parameter's annotation is what a type checker reads: it says the type Param.validate gives the value (its
    ``kind``). (The encoder parameters of an LDP mechanism are declared by the encoder class, not annotated.)"""
    cls = MECHANISMS[name]
    encoder = getattr(cls, "encoder_class", None)
    skip = {p.name for p in encoder.params} if encoder is not None else set()
    wrong = {
        p.name: (_annotation(cls, p.name), p.kind.__name__)
        for p in cls.params
        if p.name not in skip and _annotation(cls, p.name) is not p.kind
    }
    assert not wrong, f"{cls.__qualname__}: params annotated wrongly or not at all, (found, expected): {wrong}"


def test_the_walk_sees_the_registered_mechanisms() -> None:
    assert len(BUILT_IN) >= 20
    assert {"pca-inverse", "pixel-laplace", "dp-merf", "dp-sgd"} <= set(BUILT_IN)


@pytest.mark.parametrize(
    "command,method", [("train-obfuscator", "ae-obfuscator"), ("train-ppsgan", "ppsgan"), ("train-ppsgan", "acgan")]
)
def test_the_training_aliases_carry_no_default_of_their_own(command: str, method: str) -> None:
    """``train-obfuscator`` and ``train-ppsgan`` take their options from the mechanism's declarations: every option
    that sets a parameter has the declared default and help, and the alias's source declares no such option."""
    from privpix.cli import fit
    from privpix.cli.app import main

    cmd = main.commands[command]
    declared = {p.name: p for p in mechanism_class(method).params}
    options = [o for o in cmd.get_params(click.Context(cmd)) if isinstance(o, click.Option) and o.name in declared]
    assert len(options) >= 9
    for o in options:
        p = declared[o.name or ""]
        assert (o.default, o.help) == (p.default, p.help), f"{command} {o.opts}: not {p.name}'s declaration"
    source = inspect.getsource(fit)
    tree = ast.parse(source)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == command.replace("-", "_"))
    written = []
    for deco in function.decorator_list:
        if isinstance(deco, ast.Call) and getattr(deco.func, "attr", None) == "option":
            names = [a.value for a in deco.args if isinstance(a, ast.Constant)]
            dest = [n for n in names if not n.startswith("-")] or [names[0].lstrip("-").replace("-", "_")]
            if dest[0] in declared:
                written.append(names)
    assert not written, f"{command}: options of the mechanism's parameters written by hand: {written}"


@pytest.mark.parametrize("name", BUILT_IN)
def test_epsilon_is_annotated_float_only_where_it_is_required(name: str) -> None:
    """A class may narrow ``epsilon`` from ``float | None`` to ``float`` only when it takes ε: construction refuses
    ``None`` for those alone."""
    cls = MECHANISMS[name]
    if _annotation(cls, "epsilon") is float:
        assert cls.about.uses_epsilon, f"{cls.__qualname__} annotates epsilon as float but takes none"


@pytest.mark.slow(seconds=15)
@pytest.mark.integration
def test_mypy_finds_no_error_in_the_package(tmp_path) -> None:
    """The hints privpix ships (py.typed) hold: mypy, as [tool.mypy] configures it, checks src/privpix, and with it
    the plug-in example a contributor copies from docs/architecture.md (one file of at most 40 lines), in the same
    run. A test, not a step before the suite, so that `make test` runs it beside the other tests (19 s without a
    cache)."""
    import re
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "architecture.md").read_text()
    example = re.search(r"<!-- example: salt_pepper.py -->\n```python\n(.*?)```", doc, re.S)
    assert example is not None and len(example.group(1).splitlines()) <= 40
    plugin = tmp_path / "salt_pepper.py"
    plugin.write_text(example.group(1))
    r = subprocess.run([sys.executable, "-m", "mypy", "src/privpix", str(plugin)], cwd=root, capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, f"mypy found errors:\n{r.stdout}{r.stderr}"
    assert "Success: no issues found" in r.stdout
