"""The HTML report: guarantee table, trade-off plots and sample grids, self-contained in one file.

Its names are imported on first use (PEP 562): a release only writes its card's text
(:mod:`privpix.report.release_text`), and importing matplotlib for the plots was 0.4 of a small release's 1.4 s,
paid again by every release process and worker.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privpix.report.html import render_report, write_report
    from privpix.report.plots import sample_grid_png
    from privpix.report.summaries import verdict_text

_WHERE = {
    "render_report": "privpix.report.html",
    "write_report": "privpix.report.html",
    "sample_grid_png": "privpix.report.plots",
    "verdict_text": "privpix.report.summaries",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'privpix.report' has no attribute {name!r}")


__all__ = ["render_report", "sample_grid_png", "verdict_text", "write_report"]
