"""A mechanism's declared parameter: name, type, default, bounds, help (:class:`Param`)."""

from __future__ import annotations

from dataclasses import dataclass
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
