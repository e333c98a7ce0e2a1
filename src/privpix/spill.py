"""Lists too long to hold in memory, read back sorted: the file list and the image index of a release of millions.

A release lists every file it publishes (``manifest.json``) and, as ImageFolder, every image (``metadata.jsonl``),
both in name order. Held as Python objects, such lists cost about 400 bytes an entry: 1.5 GB in the coordinator at a
million images. A :class:`SortedSpill` keeps at most ``run`` items in memory; each full batch is sorted and written
to disk as one run, and reading merges the runs lazily (:func:`heapq.merge`), so memory stays flat in the number of
items (one run, plus one line per run while merging).
"""

from __future__ import annotations

import heapq
import json
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

# Items held before a run is spilled: about 30 MB of small entries, and few enough runs at ten million.
RUN = 65_536
# Runs merged at once; more are first merged into longer runs (a release of a billion items opens 256 files).
FAN_IN = 256


class SortedSpill:
    """Items appended in any order; iteration yields them sorted by ``key`` (stable: equal keys keep their order
    of arrival within a run). Items must survive a JSON round trip through ``decode`` (``decode(json.loads(
    json.dumps(item))) == item``): tuples, for instance, come back through ``decode=tuple``.

    Args:
        folder: where runs are written (created on the first spill; :meth:`discard` removes it).
        key: the sort key of an item.
        decode: turns a JSON-decoded item back into what was added.
        run: items held in memory before a run is spilled (default :data:`RUN`).
    """

    def __init__(
        self,
        folder: Path,
        key: Callable[[Any], Any],
        decode: Callable[[Any], Any] = lambda item: item,
        run: int | None = None,
    ) -> None:
        run = RUN if run is None else run
        if run < 1:
            raise ValueError(f"run must be >= 1, got {run}")
        self.folder = Path(folder)
        self.key = key
        self.decode = decode
        self.run = run
        self._held: list[Any] = []
        self._runs: list[Path] = []
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, item: Any) -> None:
        self._held.append(item)
        self._count += 1
        if len(self._held) >= self.run:
            self._spill()

    def extend(self, items: Iterable[Any]) -> None:
        for item in items:
            self.add(item)

    def __iter__(self) -> Iterator[Any]:
        if not self._runs:  # small: never touches the disk
            return iter(sorted(self._held, key=self.key))
        if self._held:
            self._spill()
        while len(self._runs) > FAN_IN:
            self._runs = [self._merge_to_run(self._runs[i : i + FAN_IN]) for i in range(0, len(self._runs), FAN_IN)]
        return heapq.merge(*(self._read(p) for p in self._runs), key=self.key)

    def discard(self) -> None:
        """Forget every item and remove the runs from disk."""
        self._held, self._runs, self._count = [], [], 0
        shutil.rmtree(self.folder, ignore_errors=True)

    def _spill(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"run-{len(self._runs):06d}-{id(self):x}.jsonl"
        self._write(path, sorted(self._held, key=self.key))
        self._runs.append(path)
        self._held = []

    def _merge_to_run(self, runs: list[Path]) -> Path:
        path = runs[0].with_name(runs[0].stem + "-m.jsonl")
        self._write(path, heapq.merge(*(self._read(p) for p in runs), key=self.key))
        for p in runs:
            p.unlink()
        return path

    @staticmethod
    def _write(path: Path, items: Iterable[Any]) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(item, separators=(",", ":")))  # ASCII: any str, lone surrogates too
                fh.write("\n")

    def _read(self, path: Path) -> Iterator[Any]:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                yield self.decode(json.loads(line))
