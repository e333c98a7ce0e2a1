"""Names a package exports but imports on first use (PEP 562), so that importing the package stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], table: Mapping[str, tuple[str, str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for the names of ``table`` (name → (module, attribute)): each is
    imported on first use and then kept in ``namespace`` (the package's ``globals()``), so the next use is a plain
    attribute."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name in table:
            module, attribute = table[name]
            value = getattr(importlib.import_module(module), attribute)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
