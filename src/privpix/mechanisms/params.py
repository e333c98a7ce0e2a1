"""A mechanism's declared parameter: name, type, default, bounds, help (:class:`Param`), declared once per class as
a typed field with :func:`param` (:func:`declared_params` collects them)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from privpix.errors import ParameterError


@dataclass(frozen=True)
class Param:
    """A mechanism parameter: name, type, default, what it means, and its allowed values."""

    name: str
    kind: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None  # inclusive lower bound for numbers

    def validate(self, value: Any) -> Any:
        if isinstance(value, str) and self.kind is not str:
            value = self.parse(value)
        if self.kind is bool:
            if not isinstance(value, bool | np.bool_):
                raise ParameterError(f"{self.name} must be true or false, got {value!r}")
            value = bool(value)
        elif self.kind in (int, float):
            try:
                num = self.kind(value)
            except (TypeError, ValueError):
                raise ParameterError(f"{self.name} must be {self.kind.__name__}, got {value!r}") from None
            if self.kind is int and num != value:
                raise ParameterError(f"{self.name} must be an integer, got {value!r}")
            if not np.isfinite(num):
                raise ParameterError(f"{self.name} must be finite, got {value!r}")
            if self.minimum is not None and num < self.minimum:
                raise ParameterError(f"{self.name} must be >= {self.minimum:g}, got {value!r}")
            value = num
        if self.choices is not None and value not in self.choices:
            raise ParameterError(f"{self.name} must be one of {', '.join(map(str, self.choices))}; got {value!r}")
        return value

    def parse(self, text: str) -> Any:
        t = text.strip()
        if self.kind is bool:
            low = t.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ParameterError(f"{self.name} must be true or false, got {text!r}")
        if self.kind is int:
            try:
                return int(t)
            except ValueError:
                raise ParameterError(f"{self.name} must be an integer, got {text!r}") from None
        if self.kind is float:
            try:
                return float(t)
            except ValueError:
                raise ParameterError(f"{self.name} must be a number, got {text!r}") from None
        return t


class _FromAnnotation:
    """The ``kind`` of a :func:`param` that takes its type from the annotation it is declared under."""


def param(
    default: Any,
    help: str,
    choices: tuple[Any, ...] | None = None,
    *,
    minimum: float | None = None,
    kind: type | None = None,
) -> Any:
    """Declare a mechanism parameter once, in the class body, as a typed field (like ``dataclasses.field``)::

        d: int = param(20, "number of principal components kept", minimum=1)

    The annotation is the parameter's type (``int``, ``float``, ``str`` or ``bool``; ``kind=`` only when it is not
    one of those); the name is the attribute's. :meth:`Mechanism.__init_subclass__
    <privpix.mechanisms.base.Mechanism.__init_subclass__>` turns the declarations into the class's derived
    ``params`` (the :class:`Param` tuple that validation, ``get_params``, the CLI's ``--param`` help and the docs
    read) and removes the class attribute, so that each instance holds its value. Typed ``Any`` so that a type
    checker reads the attribute's type from the annotation."""
    return Param("", kind or _FromAnnotation, default, help, choices, minimum)


# Annotations are strings under ``from __future__ import annotations``: the kinds a Param validates, by name.
_KINDS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}
# The names a class body declared with param() (their annotations stay on the class).
_DECLARED = "_declared_params_"


def _bind(owner: type, name: str, declared: Param, annotation: Any) -> Param:
    """``declared`` (a :func:`param` of ``owner``'s body) with its name and its kind read from ``annotation``."""
    if isinstance(annotation, str):
        annotation = _KINDS.get(annotation.strip(), annotation)
    if declared.kind is _FromAnnotation:
        if not isinstance(annotation, type):
            raise TypeError(
                f"{owner.__qualname__}.{name}: annotation {annotation!r} is not int, float, str or bool; "
                "give the parameter's type with param(..., kind=...)"
            )
        return replace(declared, name=name, kind=annotation)
    if isinstance(annotation, type) and annotation is not declared.kind:
        raise TypeError(
            f"{owner.__qualname__}.{name}: annotated {annotation.__name__} but declared kind={declared.kind.__name__}"
        )
    return replace(declared, name=name)


def declared_params(
    cls: type, *, params_before: str | None = None, drop_params: tuple[str, ...] = ()
) -> tuple[Param, ...]:
    """The ``params`` of ``cls``: those its bases have (the first base's first), then the ones its body declares
    with :func:`param`, in declaration order. A declaration of an inherited name overrides it in its place;
    ``drop_params`` removes inherited ones; with ``params_before``, the body's declarations (new ones and
    overrides alike) go, in their order, just before that inherited parameter instead. The declared class
    attributes are removed, so that instances hold the values. A name declared both as a parameter and as a plain
    annotation (here or in a base class), or a ``params`` written by hand, is refused: each parameter is declared
    once, where its type, default and help are."""
    if "params" in vars(cls):
        raise TypeError(
            f"{cls.__qualname__}: params is derived from the parameter declarations; declare each parameter as a "
            'typed field, e.g. d: int = param(20, "number of components", minimum=1)'
        )
    inherited: dict[str, Param] = {}
    for base in cls.__bases__:
        for p in getattr(base, "params", ()):
            inherited.setdefault(p.name, p)
    for name in drop_params:
        if inherited.pop(name, None) is None:
            raise TypeError(f"{cls.__qualname__}: drop_params names {name!r}, which it does not inherit")
    annotations = inspect.get_annotations(cls)
    for name, value in vars(cls).items():
        if isinstance(value, Param) and name not in annotations:
            raise TypeError(f"{cls.__qualname__}.{name}: a parameter needs its type, e.g. {name}: int = param(...)")
    own = [_bind(cls, n, vars(cls)[n], a) for n, a in annotations.items() if isinstance(vars(cls).get(n), Param)]
    names = {p.name for p in own}
    plain = {n for n in annotations if n in inherited and n not in names}
    for base in cls.__mro__[1:]:
        plain |= {n for n in inspect.get_annotations(base) if n in names and n not in vars(base).get(_DECLARED, ())}
    if plain:
        raise TypeError(
            f"{cls.__qualname__}: parameter(s) {', '.join(sorted(plain))} annotated outside their param() "
            "declaration; declare each parameter once, as name: type = param(...)"
        )
    for p in own:
        delattr(cls, p.name)
    setattr(cls, _DECLARED, frozenset(names))
    if params_before is None:
        merged = {**inherited, **{p.name: p for p in own}}
        return tuple(merged.values())
    if params_before not in inherited or params_before in names:
        raise TypeError(f"{cls.__qualname__}: params_before names {params_before!r}, which it does not inherit")
    out: list[Param] = []
    for p in inherited.values():
        if p.name == params_before:
            out += own
        if p.name not in names:
            out.append(p)
    return tuple(out)
