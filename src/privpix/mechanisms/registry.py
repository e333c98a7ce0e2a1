"""The registry: registered mechanisms and aliases, plugins, method specs (``name[key=value,...]``), and building a
mechanism ready to release (:func:`get_mechanism`, :func:`fit_as_declared`)."""

from __future__ import annotations

import os
from typing import Any, TypeVar

from privpix.data.imageset import ImageSet, RecordSet
from privpix.errors import ParameterError
from privpix.mechanisms.base import Capabilities, Mechanism
from privpix.mechanisms.kinds import KINDS

MECHANISMS: dict[str, type[Mechanism]] = {}
# Names that stand for a registered mechanism (with parameters pinned), resolved when a spec is parsed: the object
# built, its manifest and its report carry the real name. The value is (spec it resolves to, why one would pick it).
ALIASES: dict[str, tuple[str, str]] = {
    "dp-synth": ("dp-teacher", "the recommended DP synthesizer: dp-teacher for labelled sets of ten thousand images "
                 "or more, dp-transport on faces (docs/synthesis.md, 'Which to pick')"),
}  # fmt: skip
# An alias that stands for another mechanism on data of a declared domain (privpix.data.DatasetInfo.domain, or the
# domain of the public set its parameters name): the spec's parameters are defaults there, not pins. dp-synth on
# faces: a few thousand faces are too few for a generator to learn faces from under DP (docs/synthesis.md).
DOMAIN_ALIASES: dict[str, dict[str, str]] = {
    "dp-synth": {"faces": "dp-transport[public=lfw-gender-crop]"},
}


def domain_of(params: dict[str, Any], domain: str = "") -> str:
    """``domain`` when given, else the declared domain of the public set ``params`` name (``public=``), else ""."""
    if domain or not params.get("public"):
        return domain
    from privpix.data.loaders import dataset_domain

    return dataset_domain(str(params["public"]))


ENTRY_POINT_GROUP = "privpix.mechanisms"
# register() gives back the class it was given, so a decorated subclass keeps its own type for type checkers.
_M = TypeVar("_M", bound=Mechanism)


def load_plugins() -> list[str]:
    """Register the mechanisms other packages declare in the entry-point group ``privpix.mechanisms``.

    An entry point names a :class:`Mechanism` subclass (``pkg.module:Class``) or a module whose import registers
    its mechanisms with :func:`register`. A plugin that fails to load, or whose name is taken, is skipped with a
    warning: one broken package must not break privpix. Returns the names registered."""
    import warnings
    from importlib.metadata import entry_points

    added: list[str] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        before = set(MECHANISMS)
        try:
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, Mechanism) and obj.name not in MECHANISMS:
                register(obj)
            elif isinstance(obj, type) and issubclass(obj, Mechanism) and MECHANISMS[obj.name] is not obj:
                raise ValueError(f"the name {obj.name!r} is taken")
        except Exception as exc:  # any failure of a third-party package
            warnings.warn(f"privpix: mechanism plugin {ep.name!r} ({ep.value}) skipped: {exc}", stacklevel=2)
            continue
        added += sorted(set(MECHANISMS) - before)
    return added


def register(cls: type[_M]) -> type[_M]:
    """Add ``cls`` to :data:`MECHANISMS` under its ``name``; it must subclass one output kind
    (:mod:`privpix.mechanisms.kinds`), which gives it its ``release``, its kind's hooks and its output."""
    kinds = [k.__name__ for k in KINDS.values() if issubclass(cls, k)]
    if len(kinds) != 1:
        name = getattr(cls, "name", cls.__qualname__)
        raise ValueError(
            f"mechanism {name!r}: subclass the base class of its output kind "
            f"({', '.join(k.__name__ for k in KINDS.values())}), not Mechanism itself"
            if not kinds
            else f"mechanism {name!r}: subclasses {' and '.join(kinds)}; its output must follow from one kind class "
            "(register one mechanism per kind, sharing a base)"
        )
    if cls.name in MECHANISMS:
        raise ValueError(f"mechanism {cls.name!r} registered twice")
    if cls.name in ALIASES:
        raise ValueError(f"mechanism {cls.name!r}: the name is an alias of {ALIASES[cls.name][0]!r}")
    MECHANISMS[cls.name] = cls
    return cls


def parse_method_spec(spec: str, domain: str = "") -> tuple[str, dict[str, str]]:
    """``"pixel-laplace[sensitivity=bound,unit=pixel]"`` → ``("pixel-laplace", {...})``: a method label that
    carries its own parameters, so one run can compare variants of a mechanism. An alias (:data:`ALIASES`,
    e.g. ``dp-synth``) gives the mechanism it stands for, with the parameters it pins; on data of a ``domain`` it
    has an entry for in :data:`DOMAIN_ALIASES` (also found from a ``public=`` it is given), that entry's mechanism,
    its parameters as defaults."""
    text = spec.strip()
    name, inline = _parse(text, spec)
    target = DOMAIN_ALIASES.get(name, {}).get(domain_of(inline, domain))
    if target is not None:
        chosen, defaults = _parse(target, target)
        return chosen, {**defaults, **inline}
    if name in ALIASES:
        target, pinned = _parse(ALIASES[name][0], ALIASES[name][0])
        for key, value in inline.items():
            if key in pinned and pinned[key] != value:
                raise ParameterError(f"method: {name} pins {key}={pinned[key]}; {spec!r} gives {key}={value}")
        return target, {**pinned, **inline}
    return name, inline


def canonical_spec(spec: str, domain: str = "") -> str:
    """``spec`` itself, or, when it names an alias, the mechanism the alias stands for with the same parameters
    (``"dp-synth[n=10]"`` → ``"dp-teacher[n=10]"``; on faces, ``domain="faces"``, ``dp-transport[public=…]``): the
    label a bench or evaluation row shows."""
    if _parse(spec.strip(), spec)[0] not in ALIASES:
        return spec
    name, params = parse_method_spec(spec, domain)
    return name + (f"[{','.join(f'{k}={v}' for k, v in params.items())}]" if params else "")


def _parse(text: str, spec: str) -> tuple[str, dict[str, str]]:
    if "[" not in text:
        return text.lower(), {}
    if not text.endswith("]"):
        raise ParameterError(f"method: {spec!r} must look like name[key=value,...]")
    name, _, inner = text[:-1].partition("[")
    params: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in inner.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ParameterError(f"method: parameter {item!r} in {spec!r} must be key=value")
        # Keeping the last of two different values would silently drop the other.
        if key in params and params[key] != value:
            raise ParameterError(f"method: parameter {key} given twice in {spec!r} ({params[key]} and {value})")
        params[key] = value
    return name.strip().lower(), params


def mechanism_class(spec: str, domain: str = "") -> type[Mechanism]:
    """The registered class a method name or ``name[key=value,...]`` label refers to (an alias on data of
    ``domain``: see :func:`parse_method_spec`)."""
    key, _ = parse_method_spec(spec, domain)
    if key not in MECHANISMS:
        raise ParameterError(f"method: unknown mechanism {spec!r}; known: {', '.join(sorted(MECHANISMS))}")
    return MECHANISMS[key]


def method_params(spec: str, params: dict[str, Any] | None = None, domain: str = "") -> dict[str, Any]:
    """The parameters pinned in ``spec``'s brackets merged with ``params`` (``--param``), refusing a ``params``
    value that contradicts a pinned one: the label names the variant that is published, so overriding it
    would publish another one (e.g. the unsound ``sensitivity=data`` under ``[sensitivity=bound]``). A domain
    alias's parameters are defaults, which ``params`` may change."""
    domain = domain_of(params or {}, domain)
    _, inline = parse_method_spec(spec, domain)
    name, written = _parse(spec.strip(), spec)
    # Under a domain alias only what the spec itself wrote is pinned; the alias's own parameters are defaults.
    explicit = written if DOMAIN_ALIASES.get(name, {}).get(domain_of(written, domain)) else inline
    known = {p.name: p for p in mechanism_class(spec, domain).params}
    for key, value in (params or {}).items():
        if key not in explicit or key not in known:
            continue  # nothing to contradict; an unknown key is refused by the constructor, naming it
        # Compare as the mechanism reads them, so [b=4] and b=4.0 agree.
        if known[key].validate(inline[key]) != known[key].validate(value):
            raise ParameterError(
                f"method {spec.strip()!r} pins {key}={inline[key]}, and --param {key}={value} contradicts it; "
                "give the parameter in one place"
            )
    return {**inline, **(params or {})}


def get_mechanism(name: str, epsilon: float | None = None, delta: float | None = None, *, domain: str = "",
                  **params) -> Mechanism:  # fmt: skip
    """Instantiate a registered mechanism by name (inline ``[key=value]`` parameters are merged in; a ``params``
    value that contradicts one of them is an error, see :func:`method_params`). ``domain``: what the data shows
    (a data set's declared ``domain``, e.g. ``"faces"``), for an alias that picks its mechanism by it
    (``dp-synth``); a ``public=`` parameter naming a data set gives it too."""
    domain = domain_of(params, domain)
    cls = mechanism_class(name, domain)
    merged = method_params(name, params, domain)
    for key in ("epsilon", "delta"):
        if key in merged:
            raise ParameterError(f"method {name.strip()!r}: give {key} with --{key}, not as a method parameter")
    return cls(epsilon=epsilon, delta=delta, **merged)


def fit_as_declared(
    mech: Mechanism,
    private: ImageSet | RecordSet | None = None,
    data_dir: str | os.PathLike | None = None,
    *,
    seed: int | None = None,
) -> Mechanism:
    """Fit ``mech`` on what its :meth:`Mechanism.capabilities` say it fits on: the ``private`` images (or
    records; read only when it fits on the private set), the public data set it names (read from ``data_dir``),
    its model file, or nothing; ``seed`` seeds a fit that draws randomness (training). The one fitting step that
    release, evaluate, bench and audit share; returns ``mech``. A fit on data runs with one torch thread, so the
    same seed fits the same model on any machine (:func:`privpix.threads.one_thread`)."""
    from privpix.threads import one_thread

    caps = mech.capabilities()
    if caps.fits_on in ("private", "public"):
        with one_thread():
            return _fit_as_declared(mech, caps, private, data_dir, seed)
    return _fit_as_declared(mech, caps, private, data_dir, seed)


def _fit_as_declared(mech: Mechanism, caps: Capabilities, private: ImageSet | RecordSet | None,
                     data_dir: str | os.PathLike | None, seed: int | None) -> Mechanism:  # fmt: skip
    if caps.fits_on == "public":
        if not caps.public_data:
            raise ParameterError(f"{mech.name}: fits on public images; name them (e.g. --param public=NAME:SPLIT)")
        from privpix.data.loaders import load_named

        data = load_named(caps.public_data, data_dir)
        if not isinstance(data, ImageSet):
            raise ParameterError(f"{mech.name}: public data {caps.public_data} holds records, not images")
        return mech.fit(data, seed=seed)
    if caps.fits_on == "private":
        if private is None:
            raise ParameterError(f"{mech.name}: fits on the private images, and none were given")
        return mech.fit(private, seed=seed)
    return mech.fit(None, seed=seed)


def ready_mechanism(
    spec: str,
    epsilon: float | None = None,
    delta: float | None = None,
    params: dict[str, Any] | None = None,
    *,
    private: ImageSet | None = None,
    data_dir: str | os.PathLike | None = None,
    seed: int | None = None,
) -> Mechanism:
    """:func:`get_mechanism` then :func:`fit_as_declared`: a mechanism ready to release."""
    return fit_as_declared(get_mechanism(spec, epsilon, delta, **(params or {})), private, data_dir, seed=seed)
