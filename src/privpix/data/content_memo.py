"""Results of costly functions of public arrays, kept for the process and keyed by the arrays' contents.

A fit, the refits of its audit, a bench's fits at each ε and a model's evaluation read the same public set: what
is computed from it alone (a near-copy threshold, a principal basis) is computed once. The key is the SHA-256 of the
array's bytes with its shape and dtype, and the other arguments (hashable): milliseconds, against the seconds of
what it keys."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

import numpy as np

P = ParamSpec("P")
T = TypeVar("T")


def by_content(
    kept: int,
) -> Callable[[Callable[Concatenate[np.ndarray, P], T]], Callable[Concatenate[np.ndarray, P], T]]:
    """Decorator: ``fn(x, *args, **kwargs)`` computed once per contents of ``x`` and arguments; the last ``kept``
    results are kept, the least recently used dropped first. A result is shared by every caller: return read-only
    arrays or immutable values."""

    def wrap(fn: Callable[Concatenate[np.ndarray, P], T]) -> Callable[Concatenate[np.ndarray, P], T]:
        results: OrderedDict[tuple, T] = OrderedDict()
        lock = threading.Lock()

        @functools.wraps(fn)
        def call(x: np.ndarray, *args: P.args, **kwargs: P.kwargs) -> T:
            x = np.ascontiguousarray(x)
            key = (hashlib.sha256(x.tobytes()).digest(), x.shape, x.dtype.str, args, tuple(sorted(kwargs.items())))
            with lock:
                if key in results:
                    results.move_to_end(key)
                    return results[key]
            value = fn(x, *args, **kwargs)
            with lock:
                results[key] = value
                while len(results) > kept:
                    results.popitem(last=False)
            return value

        return call

    return wrap
