"""The worker's side of a sharded release (:mod:`privpix.publishing.shards` is the coordinator's): one shard's
task, its random streams, its release into its run's own folder, and the record that says it is finished.

A task is small and picklable (the source holds paths, not pixels). The worker reads its blocks, releases each
from the block's own stream (:func:`block_rng`; a release made at once, from the seed's own :func:`unit_rng`),
writes the shard's files into ``.privpix-runs/<run id>/`` inside the staging folder, gives each the release's one
modification time and syncs it, and last writes the shard record atomically. A worker of an earlier, interrupted
run writes only into its own run's folder, so it can never change what a later run recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privpix import strict_json
from privpix.data.formats import Item, write_shard
from privpix.data.formats.release_layout import RECORDS, SHARDS
from privpix.data.imageset import RecordSet
from privpix.errors import DataError, ParameterError
from privpix.fileio import fsync_path, write_bytes_atomic
from privpix.mechanisms.base import Mechanism
from privpix.mechanisms.kinds import FeatureMechanism, RecordMechanism, SyntheticImageMechanism, require_kind
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.noise import RNG, SecureRandom, make_rng
from privpix.publishing.records_csv import records_csv
from privpix.publishing.staging import NoLinks, OpaqueNames
from privpix.threads import one_thread

ATTEMPTS = ".privpix-runs"  # inside the staging folder: one folder per run (attempt) of the release
DELAY_ENV = "PRIVPIX_SHARD_DELAY"


def block_rng(seed: int | None, secure: bool, block: int) -> RNG:
    """Block ``block``'s random stream: keyed by the block, never by the worker that draws it."""
    if secure:
        return SecureRandom()
    if seed is None:
        return np.random.default_rng()  # fresh OS entropy, like an unseeded release
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(block,))))


def unit_rng(seed: int | None, secure: bool) -> RNG:
    """The random stream of a release made at once (records, feature reports): the seed's own stream, the one
    :func:`~privpix.privacy.noise.make_rng` gives (there are no blocks to key it by)."""
    return make_rng(seed, secure=secure)


_UNSAFE = re.compile(r"[^A-Za-z0-9._ +-]")


def folder_label(name: str) -> str:
    """A class name as a folder name: path separators and control characters replaced, no leading dot."""
    safe = _UNSAFE.sub("_", name).strip() or "_"
    return "_" + safe if safe.startswith(".") else safe


def pixel_digest(image: np.ndarray) -> str:
    """128-bit digest of decoded pixels and shape: equal pixels, equal digest."""
    h = hashlib.sha256(np.ascontiguousarray(image).data)
    h.update(str(image.shape).encode())
    return h.hexdigest()[:32]


@dataclass(frozen=True)
class ShardTask:
    """Everything a worker needs for one shard (small and picklable: the source holds paths, not pixels)."""

    index: int
    blocks: tuple[int, ...]  # ascending block indexes: images [b·block, min((b + 1)·block, n)) of each
    n: int
    n_shards: int
    block: int
    mechanism: Mechanism
    source: Any  # privpix.data.formats.ImageSource, or None for a synthesizer
    shape: tuple[int, int, int]
    seed: int | None
    secure: bool
    fmt: str
    compress_level: int
    stage: str
    key: bytes
    labels: bool
    expect: Guarantee
    exclude: tuple[int, ...] = ()
    sources: bool = False
    label_names: tuple[str, ...] | None = None
    attempt: str = ""  # this coordinator's run: a record written by another (an orphaned worker) is refused
    unit: bool = False  # a release made at once (records, feature reports): one shard of one block
    stamp: float | None = None  # the one modification time of every released file (the plan's)


def _label_name(label: int, label_names: Sequence[str] | None) -> str:
    if label_names is not None and 0 <= int(label) < len(label_names):
        return label_names[int(label)]
    return str(int(label))


def run_shard(task: ShardTask) -> dict[str, Any]:
    """Release one shard into the staging folder and write its record last; returns the record's
    :func:`summary` (what the coordinator keeps: the full record, with a name, key and index row per image, stays
    on disk until the commit reads it back)."""
    with one_thread():
        return summary(_run_unit(task) if task.unit else _run_shard(task))


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What the coordinator keeps of a finished shard until the commit: counts, and the pixel digests with their
    positions (24 bytes per image in NumPy arrays, for the duplicates across shards); the rest stays in the
    record on disk."""
    digests = record["digests"]
    return {
        "shard": record["shard"],
        "images": record["images"],
        "attempt": record.get("attempt", ""),
        "exclude": set(record.get("exclude", [])),
        "skipped": record["skipped"],
        "positions": np.array([p for p, _ in digests], dtype=np.int64),
        "digests": np.array([bytes.fromhex(d) for _, d in digests], dtype="S16"),
    }


def _run_unit(task: ShardTask) -> dict[str, Any]:
    """A release made at once: read everything, release it with the seed's own stream, write its file(s) and the
    record. Records go to ``records.csv``; feature reports to the files the mechanism's format names
    (:meth:`~privpix.mechanisms.FeatureMechanism.feature_files`), whose manifest fields the record carries to the
    commit."""
    if not Path(task.stage).is_dir():
        raise DataError(f"{task.stage}: the release's staging folder is gone; shard {task.index} not written")
    mech = task.mechanism
    data = task.source.read(0, task.n)
    rng = unit_rng(task.seed, task.secure)
    t0 = time.perf_counter()
    manifest: dict[str, Any] | None = None
    if isinstance(data, RecordSet):
        table = require_kind(mech, RecordMechanism).release_records(data, rng)
        if len(table.frame) == 0:
            raise ParameterError("nothing to release: the input holds no records")
        files = {RECORDS: records_csv(table.frame, float_format="%.6g")}
        fields: dict[str, Any] = {"records": len(table.frame)}
        guarantee, count = table.guarantee, len(table.frame)
    else:
        rel = mech.release(data, rng)
        reports = require_kind(mech, FeatureMechanism)
        files, manifest = reports.feature_files(rel, data.labels if task.labels else None)
        fields, guarantee, count = {}, rel.guarantee, len(data)
    if guarantee != task.expect:
        raise ParameterError(
            f"the release's guarantee ({guarantee.short()}) is not the one planned ({task.expect.short()})"
        )
    stage = Path(task.stage)
    where = _attempt_folder(stage, task.attempt)
    written = []
    for name, payload in files.items():
        try:
            write_bytes_atomic(where / name, payload)
            _stamp_and_sync(where / name, task.stamp)
        except OSError as exc:
            why = exc.strerror or exc
            raise ParameterError(
                f"--output {stage.parent}: cannot write the release ({why}); nothing was published"
            ) from None
        written.append([name, hashlib.sha256(payload).hexdigest()])
    record = {
        "shard": task.index, "blocks": list(task.blocks), "images": count, "files": written, "rows": [], "keys": [],
        "digests": [], "skipped": [], "sources": [], "labels": [], "with_sources": False, "exclude": [],
        "inputs": input_fingerprint(task.source, task.blocks, task.block, task.n), "attempt": task.attempt,
        "unit": {"manifest": manifest, "fields": fields, "seconds": time.perf_counter() - t0},
    }  # fmt: skip
    _write_record(stage, task.index, record)
    return record


def _run_shard(task: ShardTask) -> dict[str, Any]:
    if not Path(task.stage).is_dir():
        # The release this shard belonged to stopped (its staging was removed): write nothing anywhere.
        raise DataError(f"{task.stage}: the release's staging folder is gone; shard {task.index} not written")
    mech = task.mechanism
    synthetic = task.source is None
    names = OpaqueNames(task.key)
    exclude = set(task.exclude)
    items: list[Item] = []
    digests: list[tuple[int, str]] = []
    skipped: list[tuple[str, str]] = []
    sources: list[tuple[str, str]] = []
    int_labels: list[tuple[str, int]] = []
    seen: dict[str, str] = {}
    for b in task.blocks:
        b0, b1 = b * task.block, min((b + 1) * task.block, task.n)
        rng = block_rng(task.seed, task.secure, b)
        if synthetic:
            rel = require_kind(mech, SyntheticImageMechanism).synthesize(b1 - b0, rng, task.shape)
            positions = list(range(b0, b1))
            src_names = [""] * len(positions)
        else:
            batch = task.source.read(b0, b1)
            keep = []
            for i, img in enumerate(batch.images):
                pos = b0 + i
                d = pixel_digest(img)
                if pos in exclude:
                    skipped.append((str(batch.names[i]), "same pixels as an image earlier in the input"))
                    # Later copies in this shard are copies of that earlier image too: skip them as well.
                    seen.setdefault(d, "an image earlier in the input")
                    continue
                if d in seen:
                    skipped.append((str(batch.names[i]), f"same pixels as {seen[d]}"))
                    continue
                seen[d] = str(batch.names[i])
                digests.append((pos, d))
                keep.append(i)
            if not keep:
                continue
            batch = batch if len(keep) == len(batch) else batch.subset(np.array(keep))
            positions = [b0 + i for i in keep]
            src_names = [str(s) for s in batch.names]
            rel = mech.release(batch, rng)
        if rel.guarantee != task.expect:
            raise ParameterError(
                f"the release's guarantee ({rel.guarantee.short()}) is not the one planned ({task.expect.short()}); "
                "images of different shapes give different guarantees: release them apart"
            )
        if rel.images is None:  # pragma: no cover - an image or synthetic-image mechanism always returns images
            raise AssertionError(f"{mech.name}: its release holds no images")
        out = rel.images.as_uint8()
        labels = rel.images.labels
        del rel
        for j, pos in enumerate(positions):
            key = names.name(pos, suffix="")
            label = None
            if labels is not None and (synthetic or task.labels):
                label = _label_name(labels[j], task.label_names)
                if synthetic:
                    int_labels.append((key, int(labels[j])))
            items.append(Item(key=key, image=out[j], label=label))
            if task.sources:
                sources.append((key, src_names[j]))
        del out
    stage = Path(task.stage)
    if os.environ.get(DELAY_ENV):  # test hook: slow shards down so a test's SIGKILL lands mid-release
        # Said on stderr, so a test signals once the workers are inside their shards, not after a guessed delay; in
        # one write (print writes the line and its end apart), so two workers' lines never run into one.
        sys.stderr.write(f"{DELAY_ENV}: shard {task.index} sleeps {os.environ[DELAY_ENV]} s\n")
        sys.stderr.flush()
        time.sleep(float(os.environ[DELAY_ENV]))
    where = _attempt_folder(stage, task.attempt)
    written = write_shard(task.fmt, where, task.index, task.n_shards, items, compress_level=task.compress_level,
                          class_names=task.label_names)  # fmt: skip
    for name, _ in written.files:
        _stamp_and_sync(where / name, task.stamp)
    record = {
        "shard": task.index,
        "blocks": list(task.blocks),
        "images": len(items),
        "files": written.files,
        "rows": written.rows,
        "keys": [it.key for it in items],
        "digests": digests,
        "skipped": skipped,
        "sources": sources,
        "labels": int_labels,
        "with_sources": task.sources,
        "inputs": input_fingerprint(task.source, task.blocks, task.block, task.n),
        "attempt": task.attempt,
        "exclude": sorted(exclude),
    }
    _write_record(stage, task.index, record)
    return record


def input_fingerprint(source: Any, blocks: Sequence[int], block: int, n: int) -> str:
    """The fingerprint of what a shard read (``""`` for a synthesizer's shard, which reads nothing)."""
    if source is None:
        return ""
    return source.fingerprint_ranges([(b * block, min((b + 1) * block, n)) for b in blocks])


def _stamp_and_sync(path: Path, stamp: float | None) -> None:
    """Give a released file the release's one modification time (the write order would otherwise show the input
    order) and sync it to disk, here in the worker, so the commit has neither to do for it."""
    if stamp is not None:
        os.utime(path, (stamp, stamp))
    fsync_path(path)


def _attempt_folder(stage: Path, attempt: str) -> Path:
    """Where a shard of run ``attempt`` writes its files: a folder of that run's own inside the staging folder. A
    worker of an interrupted run that is still running (a Dask task cannot be stopped, a killed coordinator's
    process pool finishes its shard) writes only there, so it can never change a file a later run recorded or
    publishes. Made without parents: a worker whose release was published or removed (its staging is gone) fails
    here instead of recreating the folder."""
    folder = run_folder(stage, attempt)
    if folder is None:
        raise DataError(f"attempt {attempt!r}: not a run id")
    try:
        (stage / ATTEMPTS).mkdir(exist_ok=True)
        folder.mkdir(exist_ok=True)
    except FileNotFoundError:
        raise DataError(f"{stage}: the release's staging folder is gone; nothing written") from None
    return folder


def run_folder(stage: Path, attempt: Any) -> Path | None:
    """The folder of run ``attempt`` (a hex id, as :meth:`ShardedRelease.run` makes them), or ``None`` for anything
    else a record on disk might hold (it must never name a path outside the staging folder)."""
    if not (isinstance(attempt, str) and re.fullmatch(r"[0-9a-f]{1,64}", attempt)):
        return None
    return stage / ATTEMPTS / attempt


def record_path(stage: Path, index: int) -> Path:
    """Where shard ``index``'s record lives in the stage folder ``stage``."""
    return stage / SHARDS / f"shard-{index:06d}.json"


def _write_record(stage: Path, index: int, record: dict[str, Any]) -> None:
    from privpix.fileio import write_text_atomic

    write_text_atomic(record_path(stage, index), strict_json.dumps(record, default=None))


def load_record(stage: Path, index: int) -> dict[str, Any]:
    """A shard record known to be finished (written by this run or checked by :func:`read_record`)."""
    return json.loads(record_path(stage, index).read_text(encoding="utf-8"))


def read_record(stage: Path, index: int) -> dict[str, Any] | None:
    """A finished shard's record, or None when the shard must be (re)done: no record, or a file it lists is
    missing or changed (checked by sha256)."""
    from privpix.fileio import sha256_file

    p = record_path(stage, index)
    if not p.is_file():
        return None
    try:
        record = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    where = run_folder(stage, record.get("attempt"))
    if where is None:
        return None
    in_run = NoLinks(where, p)
    for name, sha in record.get("files", []):
        try:
            f = in_run(name)  # a plain relative name, through no link: never a file elsewhere
        except DataError:
            return None
        if not f.is_file() or sha256_file(f) != sha:
            return None
    return record
