"""Strict JSON (RFC 8259) for every file and ``--json`` output that privpix writes for others to read.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default; they are not JSON, and ``JSON.parse``, ``jq`` and most
other readers refuse the whole document. privpix writes:

- ``NaN`` (a number that does not exist: an accuracy not measured, a bound not reached) as ``null``;
- ``+∞`` and ``-∞`` (a perfect distinguisher's bound, the PSNR of identical images) as the numbers ``1e999`` and
  ``-1e999``: valid JSON numbers beyond double range, which Python's ``json`` and JavaScript's ``JSON.parse`` read
  back as infinity (``jq`` as the largest double).

:func:`dumps` always passes ``allow_nan=False``, so a value that slips past the conversion is an error here, never
an invalid file there. Readers of privpix's own result files that compute with them get ``NaN`` back for ``null``
with :func:`nan_fields`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import PurePath
from typing import Any

import numpy as np

# Infinities travel through json.dumps as these strings and are then replaced by bare numbers; a string value
# that equals one of them is refused, so the replacement can never touch a user's text.
_TOKENS = {math.inf: "\x00privpix:+inf\x00", -math.inf: "\x00privpix:-inf\x00"}
_NUMBERS = {json.dumps(_TOKENS[math.inf]): "1e999", json.dumps(_TOKENS[-math.inf]): "-1e999"}


def dumps(obj: Any, *, default: Callable[[Any], Any] | None = str, **kwargs: Any) -> str:
    """``json.dumps`` of ``obj``, strict: ``NaN`` becomes ``null`` and ``±∞`` the numbers ``±1e999``; NumPy scalars
    and arrays become Python values, tuples lists, paths strings. ``default`` converts objects JSON has no type for
    (``str`` unless given; ``None`` makes them an error), and its result is converted the same way."""

    def fallback(x: Any) -> Any:
        if default is None:
            raise TypeError(f"{type(x).__name__} is not JSON serializable")
        return _jsonable(default(x))

    text = json.dumps(_jsonable(obj), allow_nan=False, default=fallback, **kwargs)
    for token, number in _NUMBERS.items():
        text = text.replace(token, number)
    return text


def _jsonable(obj: Any) -> Any:
    """``obj`` ready for ``json.dumps(allow_nan=False)``, in one pass: ``NaN`` → ``None``, an infinity → its token."""
    if isinstance(obj, float):  # NumPy's float64 too
        if math.isnan(obj):
            return None
        return _TOKENS[obj] if math.isinf(obj) else float(obj)
    if isinstance(obj, str):
        if obj in _TOKENS.values():
            raise ValueError("a string equal to privpix's infinity token cannot be written")
        return obj
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, PurePath):
        return str(obj)
    return obj


def nan_fields(record: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """``record`` with ``None`` turned back into ``NaN`` in the named numeric ``fields`` (a copy), for code that
    reads a strict-JSON record it wrote and computes with it."""
    out = dict(record)
    for k in fields:
        if k in out and out[k] is None:
            out[k] = math.nan
    return out
