"""The report's first section: utility against the ε that protects one whole image, every sound
release at its true per-image ε, everything without a per-image guarantee drawn and listed apart with its reason,
and the best sound release per budget; all read from the cell rows, never from mechanism names."""

from __future__ import annotations

import base64
import io
import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from privpix.data import ImageSet, load_dataset
from privpix.mechanisms import Capabilities, SyntheticImageMechanism
from privpix.mechanisms.base import About, Claim
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import OneOfBatch
from privpix.report.html import render_report
from privpix.report.plots import frontier_plot
from privpix.report.summaries import budget_answers, frontier_points


def _cell(method: str, eps: float | None, acc: float, g: Guarantee, output: str = "images", rep: int = 0) -> dict:
    # Through JSON, as the bench stores rows: an infinite per-image ε comes back as the float Infinity.
    return json.loads(json.dumps({"method": method, "epsilon": eps, "repeat": rep, "accuracy": acc,
                                  "output": output, "guarantee": g.to_dict()}))  # fmt: skip


def _sound(
    eps: float, per_image: float, unit: str = "one image", model: str = "central-dp", delta: float = 0.0
) -> Guarantee:
    return Guarantee(model=model, epsilon=eps, delta=delta, unit=unit, per_image_epsilon=per_image, sound=True)  # type: ignore[arg-type]


PIXEL = "one pixel of one image"


@pytest.fixture
def cells() -> list[dict]:
    return [
        # Sound per image, two repeats at ε = 2 (the mean is the marker).
        _cell("per-image", 0.5, 0.50, _sound(0.5, 0.5)),
        _cell("per-image", 2.0, 0.60, _sound(2.0, 2.0)),
        _cell("per-image", 2.0, 0.80, _sound(2.0, 2.0), rep=1),
        _cell("per-image", 8.0, 0.95, _sound(8.0, 8.0)),
        # Sound per pixel with a finite but huge per-image ε: on the frontier, honestly far right.
        _cell("per-pixel-finite", 0.5, 0.97, _sound(0.5, 392.0, PIXEL)),
        # Sound per pixel with no per-image bound at all.
        _cell("per-pixel-only", 1.0, 0.99, _sound(1.0, math.inf, PIXEL, "local-dp")),
        # A paper's knob, not DP.
        _cell("knob", 1.0, 0.98, Guarantee(model="central-dp", epsilon=1.0, unit="one pixel column of one image")),
        # No claim at all, no ε.
        _cell("transform", None, 0.90, Guarantee.none("a filter")),
        _cell("measured", None, 0.85, Guarantee(model="empirical", unit="n/a")),
        # A model and no images, sound per image.
        _cell("classifier", 1.0, 0.90, _sound(1.0, 1.0, delta=1e-5), output="model"),
    ]


def test_each_guarantee_is_placed_by_what_it_protects(cells):
    pts = {(p.method, p.epsilon): p for p in frontier_points(cells)}
    assert len(pts) == 9
    two = pts["per-image", 2.0]
    assert two.on_frontier and two.per_image_epsilon == 2.0 and two.repeats == 2
    assert two.accuracy == pytest.approx(0.70) and two.accuracy_std == pytest.approx(0.10)
    assert pts["per-pixel-finite", 0.5].per_image_epsilon == 392.0 and pts["per-pixel-finite", 0.5].on_frontier
    assert pts["classifier", 1.0].on_frontier and pts["classifier", 1.0].output == "model"
    apart = {p.method: p.apart for p in pts.values() if not p.on_frontier}
    assert apart == {
        "per-pixel-only": f"DP per {PIXEL} only: no finite per-image ε",
        "knob": "paper knob, not DP",
        "transform": "no DP claim",
        "measured": "no DP claim (empirical privacy only)",
    }
    assert all(p.per_image_epsilon is None for p in pts.values() if not p.on_frontier)


def test_a_repeat_without_a_per_image_bound_puts_the_point_apart():
    rows = [_cell("m", 1.0, 0.5, _sound(1.0, 1.0)), _cell("m", 1.0, 0.6, _sound(1.0, math.inf, PIXEL), rep=1)]
    (p,) = frontier_points(rows)
    assert not p.on_frontier and "no finite per-image ε" in p.apart


def test_a_sound_point_without_accuracy_is_listed_apart():
    row = _cell("m", 1.0, 0.5, _sound(1.0, 1.0))
    row["accuracy"] = float("nan")
    (p,) = frontier_points([row])
    assert not p.on_frontier and p.apart == "no utility accuracy recorded" and p.accuracy is None


def test_budget_table_picks_the_most_useful_sound_release_within_each_budget(cells):
    answers = dict(budget_answers(cells, (0.1, 1.0, 10.0, 1000.0)))
    assert answers[0.1] is None
    # ≤ 1: the model (0.90) beats ε = 0.5 (0.50); the unsound and per-pixel-only rows are never candidates.
    assert (answers[1.0].method, answers[1.0].epsilon) == ("classifier", 1.0)
    assert (answers[10.0].method, answers[10.0].epsilon) == ("per-image", 8.0)
    assert answers[1000.0].method == "per-pixel-finite"


def test_budget_ties_go_to_the_more_private_release():
    rows = [_cell("a", 4.0, 0.8, _sound(4.0, 4.0)), _cell("b", 0.5, 0.8, _sound(0.5, 0.5))]
    ((_, best),) = budget_answers(rows, (10.0,))
    assert best.method == "b"


def _png_size(b64: str) -> tuple[int, int]:
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(b64))).size


def test_frontier_plot_renders_with_and_without_either_panel(cells):
    w_both, h_both = _png_size(frontier_plot(cells))
    w_sound, _ = _png_size(frontier_plot([c for c in cells if c["method"].startswith("per-image")]))
    w_apart, _ = _png_size(frontier_plot([c for c in cells if c["method"] in ("knob", "transform")]))
    assert h_both > 300 and w_both > w_sound  # the panel apart widens the figure
    assert w_apart > w_sound
    assert _png_size(frontier_plot([]))[0] > 300


def test_sample_grid_shows_every_image_in_its_row():
    """One picture: the originals' row, then a row per release label; a row may be shorter, of another size or
    grey, and each image is drawn where its row and column say (a white image on black ones is found there)."""
    from PIL import Image

    from privpix.report.plots import sample_grid_png

    dark = np.zeros((4, 10, 10, 3))
    marked = dark[:2].copy()
    marked[1] = 1.0  # the second image of the second row is white
    grey = np.zeros((4, 6, 6, 1))
    png = base64.b64decode(sample_grid_png(dark, {"ε = 1": marked, "grey": grey}, "caption"))
    img = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float) / 255
    assert img.shape[0] > 150 and img.shape[1] > 300
    # The images' area is the dark part of the picture; the white image sits in its second row, second column.
    dark_rows = np.flatnonzero((img < 0.1).sum(axis=1) > 20)
    dark_cols = np.flatnonzero((img < 0.1).sum(axis=0) > 20)
    top, bottom, left, right = dark_rows[0], dark_rows[-1], dark_cols[0], dark_cols[-1]
    cell_h, cell_w = (bottom - top) / 3, (right - left) / 4
    y, x = int(top + 1.45 * cell_h), int(left + 1.45 * cell_w)
    assert img[y, x] > 0.9 and img[int(top + 0.45 * cell_h), x] < 0.1 and img[y, int(left + 0.45 * cell_w)] < 0.1
    # ... inside a frame, so that it reads apart from the white page: leftwards from its centre, the first pixel
    # that is not white is the frame's grey line, then the white gap, then the black image beside it.
    row = img[y, : x + 1][::-1]
    edge = int(np.argmax(row < 0.9))
    assert 0.15 < row[edge] < 0.85, row[edge - 2 : edge + 6]
    assert (row[edge + 1 : edge + 4] > 0.9).any() or (row[edge + 2 : edge + 6] > 0.9).any()
    # Grey images given without a channel axis, and a row with no image, are drawn too.
    png = base64.b64decode(sample_grid_png(dark[..., 0], {"none": dark[:0], "grey": grey[..., 0]}))
    assert np.asarray(Image.open(io.BytesIO(png))).shape[0] > 100
    # Images missing from a row leave the page white there.
    assert img[y, int(left + 3.45 * cell_w)] > 0.9


def _results(cells: list[dict], **config: Any) -> dict:
    methods = list(dict.fromkeys(c["method"] for c in cells))
    return {"config": {"dataset": "synthetic", "methods": methods, "epsilons": [0.5, 1.0, 2.0, 8.0], **config},
            "cells": cells}  # fmt: skip


def test_report_answers_the_budget_question_first(cells):
    page = render_report(_results(cells, delta=1e-5))
    first = page.index("What should I use at my per-image budget?")
    assert first < page.index("<h2>Guarantees</h2>") < page.index("<h2>Utility and quality</h2>")
    section = page[first : page.index("<h2>Guarantees</h2>")]
    assert "Pick the highest marker left of your budget" in section
    assert section.count("data:image/png;base64,") == 1
    rows = re.findall(r"<tr><td>≤ (\d+)</td><td>(.*?)</td>", section)
    assert [(b, m.split("<br>")[0]) for b, m in rows] == [("1", "classifier"), ("10", "per-image")]
    assert "<td>1 (δ = 1e-05)</td>" in section and "<td>8</td>" in section  # δ beside an (ε, δ) claim only
    # Everything without a per-image guarantee is listed apart, with its reason.
    apart = section[section.index("Not on the frontier") :]
    for method, why in [("per-pixel-only", f"DP per {PIXEL} only"), ("knob", "paper knob, not DP"),
                        ("transform", "no DP claim"), ("measured", "no DP claim (empirical")]:  # fmt: skip
        assert re.search(rf"<td>{re.escape(method)}</td>.*?{re.escape(why)}", apart), method
    for method in ("per-image", "per-pixel-finite", "classifier"):
        assert f"<td>{method}" not in apart
    assert "δ = 1e-05" in page


def test_report_says_so_when_no_release_fits_a_budget():
    page = render_report(_results([_cell("loose", 8.0, 0.9, _sound(8.0, 50.0, PIXEL))]))
    section = page[: page.index("<h2>Guarantees</h2>")]
    assert section.count("none in this run") == 2
    assert "the most private sound release run is loose at per-image ε 50" in section
    assert "Not on the frontier" not in section


def test_report_code_names_no_mechanism():
    import privpix.mechanisms as mechanisms
    import privpix.report.html as report

    source = Path(report.__file__).read_text()
    named = [n for n in mechanisms.MECHANISMS if f'"{n}"' in source or f"'{n}'" in source or f'"{n}[' in source]
    assert named == []


# ------------------------------------------------------------------------------- the bench's audit of such rows


class RefitOnly(SyntheticImageMechanism):
    """Fitted on the private set, claim about that set, and no released statistic: only whole refits could test it."""

    name = "refit-only"
    about = About(guarantee_model="central-dp", uses_delta=True)
    fits: ClassVar[list[int]] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(fits_on="private", output="synthetic-images")

    def neighbours(self):
        return OneOfBatch(None)

    def privacy(self, data, n=None, *, secure=False):
        return Claim.of(_sound(self.epsilon, self.epsilon, "one image of the set"), self.neighbours())

    def fit(self, data=None, *, seed=None):
        self.fits.append(len(data))
        return self

    def _synthesize(self, n, shape, rng):
        return rng.random((n, *shape)), np.zeros(n, np.int64)


@pytest.mark.slow
def test_bench_marks_a_refit_only_mechanism_not_audited_without_refitting():
    from privpix.evaluation.grid import NOT_AUDITED_REFIT, bench_audit

    digits: ImageSet = load_dataset("builtin-mnist").subset(np.arange(20))
    mech = RefitOnly(epsilon=1.0, delta=1e-5).fit(digits)
    RefitOnly.fits.clear()
    res = bench_audit(mech, digits, trials=1000, seed=0)
    assert RefitOnly.fits == []  # no refit at all, let alone 4 × 1000 of them
    assert res.verdict == "not-audited" and res.statistic == NOT_AUDITED_REFIT
    assert res.claimed_epsilon == 1.0 and res.sound and math.isnan(res.audited_epsilon_lower)


def test_every_value_from_a_run_reaches_the_page_escaped():
    """The page is a template with autoescaping: a method name, a caveat, a dataset name, a
    note, an environment string and a sample caption holding markup all appear as text, in every table."""
    evil = "<script>alert(1)</script>"
    g = Guarantee(model="central-dp", epsilon=1.0, delta=0.0, unit=evil, per_image_epsilon=1.0, sound=True,
                  caveats=(f"first {evil}", "second & <b>bold</b>"))  # fmt: skip
    cells = [_cell(f"m{evil}", 1.0, 0.8, g)]
    res = _results(cells)
    res["config"]["dataset"] = f"d{evil}"
    res["notes"] = [f"note {evil}"]
    res["environment"] = {f"k{evil}": f"v{evil}"}
    res["audits"] = [{"method": f"m{evil}", "claimed_epsilon_requested": 1.0, "sound": True, "unit": evil,
                      "claimed_epsilon": 1.0, "audited_epsilon_lower": 0.5, "raw_epsilon_lower": 0.5,
                      "curve": "", "max_auditable_epsilon": 3.0, "verdict": "consistent", "refutable": True,
                      "pair": evil, "statistic": evil, "seconds": 1.0}]  # fmt: skip
    page = render_report(res, [(f"caption {evil}", "AAAA")])
    assert "<script" not in page and "<b>bold</b>" not in page
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # dataset, title twice, note, guarantee row (method, unit, caveat), frontier, audit row (method, unit, pair),
    # utility row, environment (key and value), timings, caption
    assert page.count(escaped) >= 15
    assert "second &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    # The report's own markup is untouched: the caveats on their own lines, the verdict styled.
    assert f"first {escaped}<br>second" in page and "<span class='good'>consistent" in page
