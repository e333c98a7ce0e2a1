"""The HTML report: guarantee table, trade-off plots and sample grids, self-contained in one file."""

from privpix.report.html import render_report, write_report
from privpix.report.plots import sample_grid_png
from privpix.report.summaries import verdict_text

__all__ = ["render_report", "sample_grid_png", "verdict_text", "write_report"]
