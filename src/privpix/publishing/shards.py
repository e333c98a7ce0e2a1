"""Releases split into shards: run on any executor, the same for any number of workers, resumable after a kill.

A release of ``n`` images is cut into **blocks** of consecutive input images (the unit of randomness) and **shards**
(the unit of work and of output files, a whole number of blocks). Which blocks make up which shard is a secret
keyed permutation (a random key kept in the plan, so a resumed run uses it again): a shard file holds blocks drawn
from anywhere in the input, its names are opaque and sorted, so an image's shard and its place in it tell nothing
about where it was in the input (only images of one block, at most ``MAX_BLOCK`` consecutive ones, share a shard
for sure). Block ``b`` draws its noise from its own stream, ``SeedSequence(seed, spawn_key=(b,))``
for a seeded run, so the released pixels depend on the seed and the input alone: not on the number of workers,
the backend, the shard size, or on which shards a resumed run redid. (Secure runs draw every block from the OS
CSPRNG; a resumed secure run gives the redone shards fresh noise, which changes no guarantee: each image is still
released once.)

Each worker reads its shard's images from the source (paths and indexes travel, never pixels), releases them
block by block, writes the shard's files in the chosen format into its run's own folder inside the release's
staging folder (so a worker of an earlier, interrupted run can never change them), and last writes a shard record
(files, sha256, metadata rows) atomically; the commit moves the recorded files into place. A shard is finished
exactly when its record exists, so ``--resume`` redoes only the shards without one. The final ``manifest.json``
is written last and swapped in through the commit journal of :mod:`privpix.publishing.staging`, as for every
release.

Duplicates: an image whose decoded pixels equal an earlier one's is released once (the first in the input order),
within a shard and across shards; a shard that held a later copy is redone without it.

Every release goes through here, whatever it publishes. A release made at once rather than image by image (a
**unit**: tabular records, whose mechanism privatizes the whole table; feature reports, one file of every owner's
report) is one shard of one block, drawn from the seed's own stream
(:func:`~privpix.publishing.shard_worker.unit_rng`), and written by its worker as the file(s) its format holds
(``records.csv``; the mechanism's report files); it is staged, resumed and committed like any other shard.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from privpix import strict_json
from privpix.data.formats import FORMATS, check_class_names, finish
from privpix.data.formats.release_layout import CARD, PLAN, read_manifest
from privpix.data.formats.writing import index_rows
from privpix.data.inmemory import RecordSetSource
from privpix.errors import DataError, ParameterError, arg
from privpix.executor import Executor
from privpix.mechanisms.base import Mechanism
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import rng_kind
from privpix.publishing.shard_worker import (
    ShardTask,
    folder_label,
    input_fingerprint,
    load_record,
    read_record,
    record_path,
    run_folder,
    run_shard,
    summary,
)
from privpix.publishing.source_map import check_source_map, source_rows, stage_source_map
from privpix.publishing.staging import NoLinks, ReleaseWriter, move_into
from privpix.version import __version__

# Values (pixels x channels) released together in one block, and kept in memory per shard as uint8 output.
BLOCK_VALUES = 1 << 25
SHARD_VALUES = 1 << 27
# A shard's record holds a few Python objects per image (its name, digest, key, index row), which its worker and
# the commit reading it back hold at once: at most this many images a shard (about 60 MB of them), however small.
SHARD_IMAGES = 1 << 16
MAX_BLOCK = 256
# Shards of fewer values than this are not worth a process (starting two takes about a second): a small release
# runs in one shard, in this process.
MIN_SHARD_VALUES = 1 << 24
# For a mechanism that declares its cost (Capabilities.seconds_per_value), a shard is worth a process from this
# much work: two starts cost about a second.
MIN_SHARD_SECONDS = 2.0
PLAN_VERSION = 3  # 3: each run writes into its own folder (2: shards are keyed sets of blocks; 1: ranges)


def block_size(caps_batch: int | None, shape: tuple[int, int, int]) -> int:
    """Images per random stream: the mechanism's own batch when it privatizes images together, else as many as
    fit in :data:`BLOCK_VALUES` (at most 256). Depends on the mechanism and the image size only."""
    if caps_batch is not None:
        return int(caps_batch)
    return max(1, min(MAX_BLOCK, BLOCK_VALUES // max(1, math.prod(shape))))


def shard_size(
    n: int, block: int, shape: tuple[int, int, int], workers: int, seconds_per_value: float | None = None
) -> int:
    """Images per shard: a whole number of blocks, four shards per worker when there is enough work (at least
    :data:`MIN_SHARD_VALUES` values each, or :data:`MIN_SHARD_SECONDS` of the mechanism's declared
    ``seconds_per_value``, whichever is fewer), and at most :data:`SHARD_VALUES` of output per shard (a worker
    holds one shard's output before writing it) and :data:`SHARD_IMAGES` images."""
    values = max(1, math.prod(shape))
    least = MIN_SHARD_VALUES
    if seconds_per_value is not None:
        least = max(1, min(least, int(MIN_SHARD_SECONDS / seconds_per_value)))
    by_memory = max(1, min(SHARD_VALUES // values, SHARD_IMAGES))
    by_balance = max(-(-least // values), math.ceil(n / (4 * max(1, workers))))
    size = min(by_memory, by_balance)
    return max(block, (size + block - 1) // block * block)


def later_copies(records: dict[int, dict[str, Any]]) -> list[tuple[int, int]]:
    """``(shard, position)`` of every image whose pixels an image earlier in the input has, in any shard, from the
    shards' summaries (their ``positions`` and 16-byte pixel ``digests``).

    The coordinator holds every image's summary (24 bytes); this adds about 25 bytes an image while it runs: the
    digests' first 8 bytes, sorted through an index, and only the few images whose first 8 bytes repeat (the copies,
    and chance collisions, about one in 10**5 releases of 10 M images) are compared whole. Sorting whole digests
    in input order took about 120 bytes an image (1.2 GB of the coordinator's 1.4 GB at 10 M images)."""
    done = sorted(records)
    if not done:
        return []
    sizes = np.array([len(records[i]["digests"]) for i in done], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    # An S16 array is contiguous: its uint64 view holds each digest as two words, the first eight bytes first.
    head = np.concatenate([np.ascontiguousarray(records[i]["digests"]).view(np.uint64)[::2] for i in done])
    order = np.argsort(head)
    head = head[order]
    repeated = np.flatnonzero(head[1:] == head[:-1])
    del head
    candidates = np.unique(np.concatenate([order[repeated], order[repeated + 1]]))
    del order
    groups: dict[bytes, list[tuple[int, int]]] = {}
    shard_of = np.searchsorted(starts, candidates, side="right") - 1
    for g, k in zip(candidates.tolist(), shard_of.tolist(), strict=True):
        i, local = done[k], g - int(starts[k])
        digest = bytes(records[i]["digests"][local])
        groups.setdefault(digest, []).append((int(records[i]["positions"][local]), i))
    return sorted((i, position) for members in groups.values() for position, i in sorted(members)[1:])


def block_order(key: str | None, n_blocks: int) -> np.ndarray:
    """The keyed permutation of the ``n_blocks`` block indexes that shards take in turn; identity without a key
    (plans of version 1, whose shards were contiguous)."""
    if key is None:
        return np.arange(n_blocks)
    # Its own stream (a spawn key of length 2 cannot meet a block's noise stream, whose spawn key has length 1).
    seq = np.random.SeedSequence(int(key, 16), spawn_key=(0x5348, 0x4452))
    return np.random.Generator(np.random.PCG64(seq)).permutation(n_blocks)


def _adopt(writer: ReleaseWriter, stage: Path, record: dict[str, Any]) -> None:
    """Move a finished shard's files from its run's folder to where the commit publishes them from, and register
    them (with the sha256 its worker read back)."""
    where = run_folder(stage, record.get("attempt"))
    if where is None:
        raise DataError(f"{record_path(stage, record['shard'])}: names no run of this release; nothing was published")
    synced = writer.stamp is not None  # its worker stamped and synced it (see _stamp_and_sync)
    # A record on disk is checked before anything moves: plain relative names, through no link.
    rpath = record_path(stage, record["shard"])
    in_run, in_stage = NoLinks(where, rpath, remember=False), NoLinks(stage, rpath, remember=False)
    made: set[Path] = set()
    for name, sha in record["files"]:
        move_into(in_run(name), in_stage(name), made)
        writer.adopt(name, sha, synced=synced)


@dataclass
class ShardedRelease:
    """A planned release: call :meth:`run`.

    Args:
        mechanism: fitted, ready to release (pickled to the workers).
        source: an :class:`~privpix.data.formats.ImageSource`, or ``None`` for a synthesizer drawing ``count``.
        count: images to draw (synthesizers only).
        shape: the (h, w, c) of every released image.
        seed: reproducible run (same seed, same pixels), or ``None``; ``secure`` draws from the OS CSPRNG.
        fmt: ``imagefolder`` (default), ``parquet`` or ``webdataset``.
        labels: publish the input's class labels (as given, not privatized); a synthesizer's labels, drawn by
            the mechanism, are always published.
        shard: images per shard (rounded up to whole blocks); ``None`` picks one from the executor's workers.
        block: images per random stream (``None``: from the mechanism and the image size). Part of what a seed
            reproduces: the same seed with another block size gives other noise.
        class_names: the names of the label values (folder names in ``imagefolder``, ClassLabel names in Parquet).
    """

    mechanism: Mechanism
    source: Any
    shape: tuple[int, int, int]
    count: int | None = None
    seed: int | None = None
    secure: bool = False
    fmt: str = "imagefolder"
    compress_level: int = 1
    labels: bool = False
    shard: int | None = None
    block: int | None = None
    class_names: tuple[str, ...] | None = None
    input_id: str = ""
    _staged_map: Path | None = field(default=None, init=False)
    # The number of files the committed manifest lists (it returns without its list, which can be millions long).
    files_published: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ParameterError(f"--format must be one of {', '.join(FORMATS)}, got {self.fmt!r}")
        if not 0 <= int(self.compress_level) <= 9:
            raise ParameterError(f"--png-level must be in 0..9, got {self.compress_level}")
        if self.shard is not None and self.shard < 1:
            raise ParameterError(f"--shard-size must be >= 1, got {self.shard}")
        if self.source is None and self.count is None:
            raise ParameterError(f"{self.mechanism.name}: a release without input draws synthetic images: give count")
        self.n = len(self.source) if self.source is not None else int(self.count or 0)
        caps = self.mechanism.capabilities()
        # Records are privatized as one table and feature reports are one file: released at once, as one block.
        self.unit = isinstance(self.source, RecordSetSource) or caps.output == "features"
        if self.n < 1:
            raise ParameterError(f"nothing to release: the input holds no {'records' if self.unit else 'images'}")
        if self.unit:
            given = [o for o, on in (("--format", self.fmt != "imagefolder"), ("--shard-size", self.shard is not None),
                                     ("--block-size", self.block is not None), ("--labels", self.labels and
                                     isinstance(self.source, RecordSetSource))) if on]  # fmt: skip
            if given:
                what = "records.csv" if isinstance(self.source, RecordSetSource) else "one report file"
                raise ParameterError(f"{given[0]}: {self.mechanism.name} releases {what} at once; drop {given[0]}")
            self.block = self.n
            self.label_names = None
            return
        own = caps.batch_size
        if self.block is not None and (self.block < 1 or (own is not None and self.block != own)):
            raise ParameterError(
                f"--block-size must be >= 1{f' and equal to {self.mechanism.name}’s batch of {own}' if own else ''}, "
                f"got {self.block}"
            )
        self.block = self.block or block_size(own, self.shape)
        published = self.source is None or self.labels
        names = [folder_label(str(c)) for c in self.class_names] if published and self.class_names else None
        # Checked here, so a class name the format cannot hold stops the release before any work.
        self.label_names = check_class_names(self.fmt, names) if names else None

    @property
    def block_images(self) -> int:
        """Images per random stream, as resolved at construction (``block`` as given, else from the mechanism and
        the image size)."""
        assert self.block is not None  # __post_init__ resolves it
        return self.block

    def settings(self) -> dict[str, Any]:
        """What a resumed run must share with the interrupted one (the same command gives the same settings)."""
        return {
            "privpix_version": __version__,
            "mechanism": self.mechanism.name,
            "parameters": json.loads(strict_json.dumps(self.mechanism.get_params(), default=None)),
            "input": self.input_id,
            "images": self.n,
            "shape": list(self.shape),
            "block": self.block_images,
            "seed": _seed_tag(self.seed, self.mechanism.name),
            "rng": rng_kind(self.seed, self.secure),
            "format": self.fmt,
            "png_level": int(self.compress_level),
            "labels": self.labels,
            "label_names": list(self.label_names or ()),
        }

    def shard_images(self, workers: int) -> int:
        """Images per shard for ``workers`` workers: ``shard`` as given, or sized so that every worker is busy,
        rounded up to whole blocks."""
        cost = self.mechanism.capabilities().seconds_per_value
        block = self.block_images
        size = self.n if self.unit else self.shard or shard_size(self.n, block, self.shape, workers, cost)
        return (size + block - 1) // block * block

    def plan(self, workers: int, run: str | None = None, ledger: str | None = None) -> dict[str, Any]:
        size = self.shard_images(workers)
        return {
            "version": PLAN_VERSION,
            "settings": self.settings(),
            "run": run or secrets.token_hex(8),
            "ledger": ledger,
            "shard_size": size,
            # Which blocks each shard holds: secret, so a shard tells nothing about input positions. Random even
            # for a seeded run (file names are too); the pixels of each image depend on the seed and block only.
            "block_order": secrets.token_hex(16),
            # Every released file gets this one modification time, set by the worker that writes it.
            "stamp": time.time(),
            # An unseeded fit on the private images cannot be repeated by --resume (a second fit is a second release).
            "resumable": not (self.mechanism.capabilities().fits_on == "private" and self.seed is None),
        }

    def run(
        self,
        output: str | Path,
        executor: Executor,
        *,
        expect: Guarantee,
        plan: dict[str, Any] | None = None,
        resume: bool = False,
        force: bool = False,
        inputs: Sequence[str | Path] = (),
        source_map: str | Path | None = None,
        metadata: dict[str, Any] | None = None,
        on_progress: Callable[[int], None] | None = None,
        on_skip: Callable[[str, str], None] | None = None,
        on_published: Callable[[], None] | None = None,
        note: Callable[[str], None] | None = None,
        on_discard: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Release into ``output``; returns the manifest. ``expect`` is the guarantee planned (and charged to a
        ledger): a block whose guarantee differs stops the release before anything is published. ``on_discard``
        gets the plan of an interrupted run whose unpublished work this run (without ``resume``) removes."""
        out = Path(output)
        plan = plan or self.plan(executor.workers)
        if source_map is not None and self.unit:
            what = "records" if isinstance(self.source, RecordSetSource) else "reports"
            raise ParameterError(
                f"--source-map: {self.mechanism.name} releases {what} in one file, with no image files to map to "
                "their sources"
            )
        if source_map is not None:
            check_source_map(Path(source_map), out, inputs)
        t0 = time.perf_counter()
        with ReleaseWriter(
            out, force=force, inputs=inputs, note=note, plan=plan, resume=resume, on_discard=on_discard
        ) as writer:
            assert writer.stage is not None and writer.plan is not None
            stage = writer.stage
            block = self.block_images
            per = int(writer.plan["shard_size"]) // block
            order = block_order(writer.plan.get("block_order"), -(-self.n // block))
            shards = [tuple(sorted(int(b) for b in order[a : a + per])) for a in range(0, len(order), per)]
            key = secrets.token_bytes(32)
            attempt = secrets.token_hex(8)
            base = ShardTask(
                index=0, blocks=(), n=self.n, n_shards=len(shards), block=block, mechanism=self.mechanism,
                source=self.source, shape=self.shape, seed=self.seed, secure=self.secure, fmt=self.fmt,
                compress_level=int(self.compress_level), stage=str(stage), key=key, labels=self.labels,
                expect=expect, sources=source_map is not None, label_names=self.label_names, attempt=attempt,
                unit=self.unit, stamp=writer.stamp,
            )  # fmt: skip
            records: dict[int, dict[str, Any]] = {}
            todo: list[ShardTask] = []
            for i, blocks in enumerate(shards):
                rec = read_record(stage, i) if resume else None
                # A finished shard whose input files changed since (a file replaced one for one) is read again.
                if (
                    rec is not None
                    and rec.get("blocks") == list(blocks)
                    and rec.get("inputs") == input_fingerprint(self.source, blocks, block, self.n)
                    and rec.get("with_sources") == (source_map is not None)
                ):
                    records[i] = summary(rec)
                    if on_progress is not None:
                        on_progress(rec["images"])
                else:
                    todo.append(replace(base, index=i, blocks=blocks))
            if resume and note is not None:
                note(f"resuming: {len(records)} of {len(shards)} shard(s) were finished; redoing {len(todo)}")
            # Largest first (the shard with the last, partial block, or with fewer blocks, goes last), so the
            # workers finish together instead of one waiting on a full shard handed out last. Order changes no pixel.
            last = -(-self.n // block) - 1
            todo.sort(key=lambda t: -(len(t.blocks) * block - (last in t.blocks) * (block * (last + 1) - self.n)))
            self._run_tasks(executor, todo, records, on_progress)
            # Each pass only removes images, so this ends (at the latest when no shard holds a copy any more).
            while redo := self._cross_shard_duplicates(records, base, shards):
                self._run_tasks(executor, redo, records, None)
            # The loop ends only when later_copies finds no copy left: no image is released twice.
            if sorted(records) != list(range(len(shards))):
                raise DataError(f"{stage}: shards {sorted(set(range(len(shards))) - set(records))} are missing")
            for summary_ in records.values():  # 24 bytes an image the commit does not need
                summary_["positions"] = summary_["digests"] = None
            for i in sorted(records):
                for path, why in records[i]["skipped"]:
                    if on_skip is not None:
                        on_skip(path, why)
            manifest = self._commit(writer, records, metadata, expect, t0, source_map, on_published)
        if source_map is not None and self._staged_map is not None:
            os.replace(self._staged_map, Path(source_map))
        return manifest

    @staticmethod
    def _run_tasks(
        executor: Executor,
        tasks: list[ShardTask],
        records: dict[int, dict[str, Any]],
        on_progress: Callable[[int], None] | None,
    ) -> None:
        for _, done in executor.map_unordered(run_shard, tasks):
            records[done["shard"]] = done
            if on_progress is not None:
                on_progress(done["images"])

    def _cross_shard_duplicates(
        self, records: dict[int, dict[str, Any]], base: ShardTask, shards: list[tuple[int, ...]]
    ) -> list[ShardTask]:
        """Shards to redo without the images whose pixels an image earlier in the input (in any shard) has."""
        exclude: dict[int, set[int]] = {}
        for i, position in later_copies(records):
            exclude.setdefault(i, set()).add(position)
        # A run id of its own for each pass: a redone shard is written beside, never over, the files its first pass
        # recorded (a worker of this run killed mid-redo could otherwise leave half-written files a resume adopts).
        attempt = secrets.token_hex(8)
        tasks = []
        for i, positions_i in sorted(exclude.items()):
            every = positions_i | records[i]["exclude"]  # a shard redone twice keeps its earlier exclusions
            tasks.append(replace(base, index=i, blocks=shards[i], exclude=tuple(sorted(every)), attempt=attempt))
        return tasks

    def _commit(
        self,
        writer: ReleaseWriter,
        records: dict[int, dict[str, Any]],
        metadata: dict[str, Any] | None,
        expect: Guarantee,
        t0: float,
        source_map: str | Path | None,
        on_published: Callable[[], None] | None,
    ) -> dict[str, Any]:
        stage = writer.stage
        assert stage is not None  # run() holds the writer open
        if self.unit:
            return self._commit_unit(writer, records, metadata, expect, on_published)
        rows = index_rows(stage)  # on disk in sorted runs: a million images' rows are not held
        keys: list[np.ndarray] = []
        labels: dict[str, int] = {}
        sources = source_rows(stage)  # for --source-map, on disk in sorted runs like the index rows
        total = 0
        # Full records are read back one at a time: the coordinator keeps only a compact summary per shard.
        for i in sorted(records):
            rec = load_record(stage, i)
            if rec.get("attempt", "") != records[i]["attempt"]:
                raise DataError(
                    f"{record_path(stage, i)}: shard {i} was rewritten by another process while this release ran "
                    "(a worker of an interrupted run?); nothing was published: run the same command with --resume"
                )
            _adopt(writer, stage, rec)
            if self.fmt == "imagefolder":  # the only format whose index lists every image
                rows.extend(rec["rows"])
            keys.append(np.array([int(k, 16) for k in rec["keys"]], dtype=np.uint64))
            total += rec["images"]
            if rec["sources"] or rec["labels"]:
                files_of = self._files_of(rec)
                sources.extend((files_of[k], s) for k, s in rec["sources"])
                labels.update({files_of[k]: lab for k, lab in rec["labels"]})
            del rec
        every = np.concatenate(keys) if keys else np.zeros(0, np.uint64)
        del keys
        every.sort()  # in place: 8 bytes an image (np.unique took three times that)
        if np.any(every[1:] == every[:-1]):  # pragma: no cover - a 2**-64 event (a resumed run's new key)
            raise DataError("two released images got the same name; run the release again")
        del every
        if total == 0:
            raise ParameterError("nothing to release: the input holds no images")
        for name, sha in finish(self.fmt, stage, rows):
            writer.adopt(name, sha)
        extra = {
            **(metadata or {}),
            "format": self.fmt,
            "images": total,
            "shards": len(records),
            "png_level": int(self.compress_level),
        }
        if self.fmt != "imagefolder":
            extra["shard_order"] = (
                f"each shard file holds blocks of up to {self.block_images} consecutive input images, drawn by a "
                "secret keyed permutation; names inside a shard are opaque and sorted: a shard and a place in it tell "
                "nothing of an image's input position, but the images of one block share a shard"
            )
        if self.labels and self.source is not None:
            extra["labels_published"] = (
                "class labels published as given: not privatized, not covered by the guarantee (they are treated "
                "as public)"
            )
        stated = stated_guarantee(self.mechanism, expect, self.secure, self.seed)
        manifest = release_manifest(self.mechanism, stated, time.perf_counter() - t0, extra)
        if self.source is None:
            manifest["labels"] = dict(sorted(labels.items()))
        self._staged_map = stage_source_map(Path(source_map), sources) if source_map is not None else None
        try:
            return self._committed(writer, manifest, on_published)
        except BaseException:
            if self._staged_map is not None and not writer.committed:
                self._staged_map.unlink(missing_ok=True)
            raise

    def _commit_unit(
        self,
        writer: ReleaseWriter,
        records: dict[int, dict[str, Any]],
        metadata: dict[str, Any] | None,
        expect: Guarantee,
        on_published: Callable[[], None] | None,
    ) -> dict[str, Any]:
        """The commit of a release made at once: its one shard's files, under the manifest its format states (a
        report folder's own) or, for records, the one every release states, with ``records`` counted."""
        stage = writer.stage
        assert stage is not None  # run() holds the writer open
        (rec,) = [load_record(stage, i) for i in records]
        if rec.get("attempt", "") != records[0]["attempt"]:
            raise DataError(
                f"{record_path(stage, 0)}: the release was rewritten by another process while this one ran; "
                "nothing was published: run the same command with --resume"
            )
        _adopt(writer, stage, rec)
        unit = rec["unit"]
        if unit["manifest"] is not None:
            manifest = {**unit["manifest"], **(metadata or {})}
            if isinstance(manifest.get("guarantee"), dict):
                own = Guarantee.from_dict(manifest["guarantee"])
                manifest["guarantee"] = stated_guarantee(self.mechanism, own, self.secure, self.seed).to_dict()
        else:
            stated = stated_guarantee(self.mechanism, expect, self.secure, self.seed)
            manifest = release_manifest(self.mechanism, stated, unit["seconds"], {**(metadata or {}), **unit["fields"]})
        return self._committed(writer, manifest, on_published)

    def _committed(
        self, writer: ReleaseWriter, manifest: dict[str, Any], on_published: Callable[[], None] | None
    ) -> dict[str, Any]:
        from privpix.publishing.card import dataset_card

        # The card is a file of the release like any other: staged, listed with its sha256, swapped in at once.
        writer.add(CARD, dataset_card(manifest, writer.out.name).encode())
        written = writer.commit(manifest, on_published)
        self.files_published = writer.file_count
        return written

    @staticmethod
    def _files_of(record: dict[str, Any]) -> dict[str, str]:
        """Image key → where it was released: its own PNG (imagefolder), or ``shard file#key``."""
        out = {}
        for row in record["rows"]:
            if "key" in row:
                out[row["key"]] = f"{row['file_name']}#{row['key']}"
            else:
                out[Path(row["file_name"]).stem] = row["file_name"]
        return out


# What a guarantee says of noise that was not drawn by exact samplers from the OS CSPRNG (the same words for every
# mechanism): the proof assumes exact noise, and seeded noise can be recomputed by whoever knows the seed.
FLOAT_NOISE = ("noise drawn in floating point, not by an exact sampler: floating-point noise can leak through the "
               "pattern of its low-order bits (Mironov 2012); the method has no exact sampler, or it was not asked "
               "for")  # fmt: skip
SEEDED_NOISE = ("noise drawn from a seeded generator (a research run): anyone who knows the seed can recompute and "
                "remove it; not for publication")  # fmt: skip


def exact_noise(mechanism: Mechanism, *, seed: int | None, secure: bool) -> bool:
    """Whether a release draws exact noise from the OS CSPRNG, with ``mechanism`` set for it (its
    ``Capabilities.secure`` parameters). Asked for (``secure``): always, or refused, saying why the mechanism has no
    exact sampler. Not asked for and no ``seed``: whenever the mechanism has exact samplers, the publication
    default; otherwise its noise is drawn in floating point, and the guarantee it states says so. With a ``seed``
    (a research run): never."""
    if seed is not None and not secure:
        return False
    if mechanism.capabilities().fits_on == "model-file" and not mechanism.is_fitted:
        mechanism.fit(None)  # its noise was drawn when the file was fitted: the file says whether exactly
    caps = mechanism.capabilities()
    if caps.secure is None:
        if secure:
            raise ParameterError(
                f"{arg('--secure', 'rng=SecureRandom()')}: {mechanism.name} has no exact sampler: {caps.not_secure}"
            )
        return False
    if caps.fits_on == "private" and mechanism.is_fitted:
        # Its fit drew its noise already: the parameters it was fitted with say how, and changing them now would
        # state exact noise for a fit that drew floating-point noise.
        params = mechanism.get_params()
        exact = all(params.get(k) == v for k, v in caps.secure.items())
        if secure and not exact:
            raise ParameterError(
                f"{arg('--secure', 'rng=SecureRandom()')}: {mechanism.name} was fitted with floating-point noise; fit "
                f"it again with {', '.join(f'{k}={v}' for k, v in caps.secure.items())} for exact noise"
            )
        return exact
    mechanism.set_params(**caps.secure)
    return True


def stated_guarantee(mechanism: Mechanism, guarantee: Guarantee, secure: bool, seed: int | None) -> Guarantee:
    """The guarantee a release states (its manifest, its ledger entry): ``guarantee`` with the caveat of its noise
    when that noise is not exact secure noise (:data:`FLOAT_NOISE`, :data:`SEEDED_NOISE`); a claim that is not
    DP, or a mechanism that draws no randomness, is stated as it is."""
    if secure or not guarantee.is_dp or not mechanism.capabilities().randomized:
        return guarantee
    caveat = SEEDED_NOISE if seed is not None else FLOAT_NOISE
    return guarantee if caveat in guarantee.caveats else replace(guarantee, caveats=(*guarantee.caveats, caveat))


def release_manifest(
    mechanism: Mechanism, guarantee: Guarantee, seconds: float, metadata: dict[str, Any] | None
) -> dict[str, Any]:
    """What every release's manifest states, before its own fields: privpix's version, the mechanism and its
    parameters in force, the guarantee (as data and as text) and the seconds it took."""
    return {
        "privpix_version": __version__,
        "mechanism": mechanism.name,
        "parameters": mechanism.get_params(),
        "guarantee": guarantee.to_dict(),
        "guarantee_text": guarantee.text(),
        "seconds": seconds,
        **(metadata or {}),
    }


def _seed_tag(seed: int | None, salt: str) -> str | None:
    """What the plan on disk keeps of the seed: enough to tell a resume with another seed, not the seed itself
    (the manifest never holds it either). A slow salted hash: it does not hide a small seed from a determined
    reader of the staging folder (owner-only, removed at commit), it keeps it from being read at a glance."""
    if seed is None:
        return None
    return _slow_tag(int(seed), salt)


@functools.lru_cache(maxsize=64)
def _slow_tag(seed: int, salt: str) -> str:
    # Kept per process: the hash is slow on purpose (about 40 ms and 16 MB), and a process that releases again with
    # the same seed (an API loop, a resume check) would pay it each time for the same answer.
    digest = hashlib.scrypt(str(seed).encode(), salt=b"privpix-resume:" + salt.encode(), n=2**14, r=8, p=1)
    return digest.hex()[:32]


def read_plan(output: str | Path) -> dict[str, Any] | None:
    """The plan of an interrupted sharded release in ``output`` (read-only, without the folder's lock), or
    ``None``: what ``--resume`` needs before it locks anything (the run id its ledger reservation carries)."""
    out = Path(output)
    if not out.is_dir():
        return None
    read_manifest(out)  # refuses a folder that is not privpix's
    for p in sorted(out.iterdir()):
        plan_file = p / PLAN
        if p.is_dir() and plan_file.is_file():
            try:
                return json.loads(plan_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise DataError(f"{plan_file}: unreadable plan of the interrupted run ({exc})") from None
    return None
