"""One model file per trained network: weights plus a JSON description, loaded without unpickling code."""

from __future__ import annotations

import io
import json
from pathlib import Path

from privpix.errors import DataError, require_torch


def save_model_file(path: str | Path, state: dict, meta: dict) -> Path:
    """Write ``{"meta": json, "state": state_dict}`` atomically; ``meta`` must hold a ``format`` tag."""
    torch = require_torch("model files")
    from privpix.accounting import write_bytes_atomic

    buf = io.BytesIO()
    torch.save({"meta": json.dumps(meta), "state": state}, buf)
    write_bytes_atomic(Path(path), buf.getvalue())
    return Path(path)


def load_model_file(path: str | Path, fmt: str, what: str) -> tuple[dict, dict]:
    """``(state_dict, meta)`` of a file written by :func:`save_model_file` with ``meta["format"] == fmt``.

    Loads with ``weights_only=True``; a missing or foreign file raises :class:`DataError` naming ``what``."""
    torch = require_torch("model files")
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {what} model file not found")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        meta = json.loads(blob["meta"])
    except Exception as exc:
        raise DataError(f"{path}: not a privpix {what} model ({type(exc).__name__}: {exc})") from None
    if meta.get("format") != fmt:
        raise DataError(f"{path}: not a privpix {what} model (format {meta.get('format')!r})")
    return blob["state"], meta
