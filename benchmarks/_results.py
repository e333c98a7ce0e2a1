"""The benchmarks' one results writer: a run's results as strict JSON, and the markdown table of them rendered
from that JSON alone.

A benchmark splits into *run → results dict* and *render(results) → markdown*. :func:`write` renders the results as
they read back from their JSON file, then writes both files atomically, so the markdown of a run and the markdown
re-rendered later from the committed JSON (``python benchmarks/<name>.py --render-only``, no runs: many benchmarks
take hours) are the same bytes; ``tests/test_benchmark_results.py`` checks that for every benchmark.

Tables go through ``tabulate`` (pipe tables); each column says how its values are written (:class:`Col`), so the
numbers keep the precision the tables have always shown. Render functions import nothing heavy (no torch): the
test imports every benchmark.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from privpix import strict_json
from privpix.fileio import write_text_atomic

RESULTS = Path(__file__).resolve().parent / "results"
# The one flag, in every benchmark, that rewrites the markdown from the committed JSON without running anything.
RENDER_ONLY = "--render-only"
RENDER_HELP = "rewrite the markdown from the committed JSON (no runs)"

Format = str | Callable[[Any], str] | None
Render = Callable[[dict[str, Any]], str]


@dataclass(frozen=True)
class Col:
    """A table column: its header, how a value is written (``fmt``) and its alignment.

    ``fmt``: ``None`` writes ``str(value)``; a string with ``{`` is a ``str.format`` template (``"{:.3f} s"``); any
    other string a format spec (``".3f"``, ``","``); a callable returns the cell's text.
    """

    header: str
    fmt: Format = None
    align: str = "left"


@dataclass(frozen=True)
class Output:
    """One results file pair of a benchmark: ``<stem>.json`` and ``<stem>.md`` (or ``markdown``, where the table
    has a name of its own), the markdown ``render(results)``."""

    stem: Path
    render: Render
    markdown: Path | None = None

    @property
    def json_path(self) -> Path:
        return self.stem.with_name(self.stem.name + ".json")

    @property
    def md_path(self) -> Path:
        return self.markdown or self.stem.with_name(self.stem.name + ".md")


def cell(value: Any, fmt: Format = None) -> str:
    """``value`` written as ``fmt`` says (see :class:`Col`)."""
    if callable(fmt):
        return fmt(value)
    if fmt is None:
        return str(value)
    if "{" in fmt:
        return fmt.format(value)
    return format(value, fmt)


def table(columns: Sequence[Col | str], rows: Iterable[Sequence[Any]]) -> str:
    """A pipe table of ``rows`` (one value per column), each value written by its column's format."""
    cols = [c if isinstance(c, Col) else Col(c) for c in columns]
    body = [[cell(v, c.fmt) for v, c in zip(row, cols, strict=True)] for row in rows]
    return tabulate(
        body,
        headers=[c.header for c in cols],
        tablefmt="pipe",
        disable_numparse=True,
        colalign=[c.align for c in cols],
    )


def document(title: str | None, *blocks: str | None, preamble: str | None = None, notes: str | None = None) -> str:
    """A markdown document: ``# title``, the preamble paragraph (the command, the machine), the blocks (tables,
    headings, paragraphs) and the notes, a blank line between each; ``None`` blocks are left out."""
    parts = [f"# {title}" if title else None, preamble, *blocks, notes]
    return "\n\n".join(p for p in parts if p is not None) + "\n"


def dumps(results: Any, indent: int | None = 2, ensure_ascii: bool = True) -> str:
    """Strict JSON (``NaN`` → ``null``, ``±∞`` → ``±1e999``) of ``results``, with a final newline."""
    return strict_json.dumps(results, indent=indent, ensure_ascii=ensure_ascii) + "\n"


def load(path: Path) -> Any:
    """A results file as written: ``null`` stays ``None``, ``1e999`` reads back as infinity."""
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, results: Any, indent: int | None = 2) -> None:
    """Strict JSON of ``results`` to ``path``, atomically: for benchmarks whose results have no table."""
    write_text_atomic(path, dumps(results, indent))


def write(out: Output, results: Any, indent: int | None = 2, ensure_ascii: bool = True) -> None:
    """Write ``results`` to ``<stem>.json`` and ``out.render`` of them, as read back from that JSON, to ``<stem>.md``.

    The markdown is rendered before anything is written, so an error in the render leaves both files as they were;
    each file is replaced atomically (a reader sees the old file or the whole new one)."""
    text = dumps(results, indent, ensure_ascii)
    md = out.render(json.loads(text))
    write_text_atomic(out.json_path, text)
    write_text_atomic(out.md_path, md)


def render(out: Output) -> str:
    """The markdown of ``out``'s committed JSON."""
    return out.render(load(out.json_path))


def rerender(*outputs: Output) -> None:
    """Rewrite each output's markdown from its JSON (``--render-only``)."""
    for out in outputs:
        write_text_atomic(out.md_path, render(out))
        print(f"wrote {out.md_path}", file=sys.stderr)


def face_grid(images: Any, labels: Any, path: Path) -> None:
    """A PNG of released faces (uint8, (m, h, w, c)): two rows of ten, one per class (0, then 1) when ``labels`` is
    given, else the first twenty."""
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [images[:10], images[10:20]] if labels is None else [images[labels == c][:10] for c in (0, 1)]
    Image.fromarray(np.concatenate([np.concatenate(list(r), axis=1) for r in rows], axis=0)).save(path)


def render_only(argv: Sequence[str] | None, *outputs: Output) -> bool:
    """For scripts without a parser: if ``--render-only`` is among ``argv`` (``sys.argv[1:]`` when ``None``),
    re-render ``outputs`` and return True."""
    args = sys.argv[1:] if argv is None else argv
    if RENDER_ONLY not in args:
        return False
    rerender(*outputs)
    return True
