"""One model file per trained network, whichever family trained it: weights plus a JSON description, loaded without
unpickling code."""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

from privpix import strict_json
from privpix.errors import DataError, require_torch


def save_model_file(path: str | Path, state: dict, meta: dict) -> Path:
    """Write ``{"meta": json, "state": state_dict}`` atomically; ``meta`` must hold a ``format`` tag."""
    torch = require_torch("model files")
    from privpix.fileio import write_bytes_atomic

    buf = io.BytesIO()
    torch.save({"meta": strict_json.dumps(meta, default=None), "state": state}, buf)
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)


def load_model_file(path: str | Path, fmt: str, what: str) -> tuple[dict, dict]:
    """``(state_dict, meta)`` of a file written by :func:`save_model_file` with ``meta["format"] == fmt``.

    Loads with ``weights_only=True``; a missing, truncated or foreign file raises :class:`DataError` naming
    the file and ``what``."""
    torch = require_torch("model files")
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {what} model file not found")
    bad = f"{path}: not a privpix {what} model file"
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except Exception as exc:  # torch's zip reader and weights-only unpickler raise many kinds
        raise DataError(f"{bad} ({_reason(exc)})") from None
    meta_text = blob.get("meta") if isinstance(blob, dict) else None
    state = blob.get("state") if isinstance(blob, dict) else None
    if not isinstance(meta_text, str) or not isinstance(state, dict):
        raise DataError(f"{bad} (a torch file, but without privpix's meta and state entries)")
    try:
        meta = json.loads(meta_text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{bad} (its meta is not valid JSON: {exc})") from None
    found = meta.get("format") if isinstance(meta, dict) else None
    if found != fmt:
        raise DataError(f"{bad} (format {found!r}, expected {fmt!r})")
    if not state or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise DataError(f"{bad} (its state is not a set of named weight tensors)")
    return state, meta


def read_model_meta(path: str | Path) -> dict:
    """The JSON description of any privpix model file (whichever mechanism wrote it), weights only; a missing or
    foreign file raises :class:`DataError` naming it."""
    torch = require_torch("model files")
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: model file not found")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        meta = json.loads(blob["meta"])
    except MemoryError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: not a privpix model file ({_reason(exc)})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("format"), str):
        raise DataError(f"{path}: not a privpix model file (no format in its meta)")
    return meta


def build_from_file(path: str | Path, what: str, build):
    """``build()`` (which makes the network from a model file's meta and loads its weights), with any mismatch
    between the file's description and its weights turned into one :class:`DataError` naming the file."""
    try:
        return build()
    except MemoryError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        first = str(exc).split("\n")[0][:200]
        raise DataError(
            f"{path}: {what} model file does not match its own description ({type(exc).__name__}: {first})"
        ) from None


def _reason(exc: Exception) -> str:
    """A short cause for a failed ``torch.load``: its first sentence, never its advice to load with
    ``weights_only=False`` (which would run code from the file)."""
    if isinstance(exc, pickle.UnpicklingError):
        return "not a weights-only torch file"
    first = str(exc).split(". ")[0].strip()
    return f"{type(exc).__name__}: {first[:200]}"
