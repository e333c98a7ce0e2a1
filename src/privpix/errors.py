"""Exceptions raised by privpix. Every message names the parameter or file at fault."""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Callable, Iterator

# Whether the code runs under the command line (set by it): an error then names the option a user typed, else the
# argument a Python caller passed.
_COMMAND_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar("privpix_command_line", default=False)


class PrivpixError(Exception):
    """Base class: an error the user can fix (bad parameter, missing file, exhausted budget)."""


class ParameterError(PrivpixError, ValueError):
    """A parameter is out of its domain; the message names it and what was expected."""


class DataError(PrivpixError):
    """A data file is missing, unreadable or not in the expected format; the message names the file."""


class BudgetExceededError(PrivpixError):
    """A release would spend more privacy budget than the ledger allows."""


class PrivpixWarning(UserWarning):
    """Something the user should change to get what they want (not an error: the work goes on); the CLI prints it
    as a one-line note."""


@contextlib.contextmanager
def privpix_warnings_to(emit: Callable[[str], None]) -> Iterator[None]:
    """Inside the block, each :class:`PrivpixWarning` (every one, even a repeat) goes to ``emit`` as its message
    once the block ends; any other warning is shown as Python would have shown it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PrivpixWarning)
        yield
    for w in caught:
        if issubclass(w.category, PrivpixWarning):
            emit(str(w.message))
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def check_positive(name: str, value: float | str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as float if it is a finite number > 0 (or >= 0), else raise ParameterError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {value!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise ParameterError(f"{name} must be finite, got {value!r}")
    if v < 0 or (v == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ParameterError(f"{name} must be {bound}, got {value!r}")
    return v


def check_delta(value: float) -> float:
    """δ must lie in [0, 1)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"delta must be a number in [0, 1), got {value!r}") from None
    if not (0.0 <= v < 1.0):
        raise ParameterError(f"delta must be in [0, 1), got {value!r}")
    return v


def require_torch(purpose: str):
    """Import and return torch, or raise a ParameterError saying that ``purpose`` needs the neural extra."""
    try:
        import torch
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ParameterError(f"{purpose} needs PyTorch: pip install 'privpix[neural]'") from None
    from privpix.threads import torch_loaded

    torch_loaded(torch)  # loaded inside one_thread(): one thread from the start
    return torch


def arg(option: str, python: str) -> str:
    """How an error names a setting: ``option`` (``--force``) under the command line, ``python`` (``force=True``)
    for a Python caller, so that neither is told to pass what it cannot."""
    return option if _COMMAND_LINE.get() else python


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Errors raised inside name the command line's options (:func:`arg`)."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)
