"""The HTML report: guarantee table, trade-off plots and sample grids, self-contained in one file.

Its names are imported on first use (PEP 562): a release only writes its card's text
(:mod:`privpix.report.release_text`), and importing matplotlib for the plots was 0.4 of a small release's 1.4 s,
paid again by every release process and worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from privpix.lazy import lazy_exports

if TYPE_CHECKING:
    from privpix.report.html import render_report, write_report
    from privpix.report.plots import sample_grid_png
    from privpix.report.summaries import verdict_text

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "render_report": ("privpix.report.html", "render_report"),
        "write_report": ("privpix.report.html", "write_report"),
        "sample_grid_png": ("privpix.report.plots", "sample_grid_png"),
        "verdict_text": ("privpix.report.summaries", "verdict_text"),
    },
)

__all__ = ["render_report", "sample_grid_png", "verdict_text", "write_report"]
