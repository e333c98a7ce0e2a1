"""What the commands that publish share: the options of a sharded release, the release itself through the library's
ledger protocol (:func:`privpix.publishing.ledger.publish_job`) with a progress bar, a synthesizer's release, and the
summary printed after it. ``privpix release`` and ``privpix ldp perturb`` are thin layers over it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from privpix.cli.app import console, err_console
from privpix.cli.options import notes_from_warnings, print_note

if TYPE_CHECKING:  # the executor module is imported when a release starts, not when the CLI loads
    from privpix.executor import Executor

SKIPPED_SHOWN = 20


def _printable(path: Path | str) -> str:
    """A file name shown on one line as it is, control characters escaped (a name holding a newline must not
    print a line that looks like privpix's own)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in str(path))


def print_skipped(skipped: list[tuple[Path, str]]) -> None:
    """Every skipped file is reported; past the first few, as counts per reason (a .git folder has thousands)."""
    from collections import Counter

    for path, why in skipped[:SKIPPED_SHOWN]:
        err_console.print(f"[yellow]skipped[/yellow] ({escape(why)}): {escape(_printable(path))}", highlight=False)
    rest = skipped[SKIPPED_SHOWN:]
    if rest:
        kinds = Counter(why.split(" of ")[0].split(" as ")[0] for _, why in rest)
        summary = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
        err_console.print(f"[yellow]skipped[/yellow] {len(rest)} more: {escape(summary)}", highlight=False)


@dataclass
class ReleaseRun:
    """The options every sharded release of the command line shares (one place, so the kinds of release pass them
    alike)."""

    out: Path
    seed: int | None = None
    secure: bool = False
    fmt: str = "imagefolder"
    png_level: int = 1
    labels: bool = False
    workers: int | None = None
    shard_size: int | None = None
    block_size: int | None = None
    resume: bool = False
    force: bool = False
    inputs: list[Path] = field(default_factory=list)
    source_map: str | None = None
    ledger: str | None = None
    budget: float | None = None
    delta_budget: float | None = None
    quiet: bool = False
    resumable: bool = True
    # The command's one executor, set when the command opens it (after every check that can fail).
    executor: Executor | None = None

    def pool(self) -> Executor:
        """The executor the command opened; releasing before it is opened is a bug of the command."""
        if self.executor is None:
            raise AssertionError("the command releases before opening its executor")
        return self.executor


def open_input(input_dir, dataset, data_dir, hw, max_pixels):
    """The image source of --input (folder, Parquet, WebDataset) or --dataset, read lazily by index."""
    from privpix.data.formats import dataset_source, open_source

    if input_dir is not None:
        return open_source(input_dir, size=hw, max_pixels=max_pixels)
    return dataset_source(dataset, data_dir, hw)


def read_all(source):
    """Every image of a source at once: what a mechanism that fits on the private images needs."""
    return source.read(0, len(source))


def release_sharded(mech, source, count, shape, class_names, input_id, metadata, label, run: ReleaseRun,
                    expect=None) -> None:  # fmt: skip
    """Release through the library's ledger protocol (:func:`privpix.publishing.ledger.publish_job`) with a
    progress bar, then report. Every release of the command line comes here: images, synthetic images
    (``count``), records and feature reports. ``expect``: the guarantee to charge, when the release's own differs
    from its shape's (feature reports)."""
    from tqdm import tqdm

    from privpix.data.inmemory import RecordSetSource
    from privpix.publishing.ledger import publish_job
    from privpix.publishing.shards import ShardedRelease

    job = ShardedRelease(mech, source, shape, count=count, seed=run.seed, secure=run.secure, fmt=run.fmt,
                         compress_level=run.png_level, labels=run.labels, shard=run.shard_size, block=run.block_size,
                         class_names=class_names, input_id=input_id)  # fmt: skip
    executor = run.pool()
    unit = "record" if isinstance(source, RecordSetSource) else "img"
    bar = tqdm(total=job.n, unit=unit, disable=run.quiet, desc=f"{mech.name}")
    t0 = time.perf_counter()
    if not run.quiet and not job.unit:
        print_note(
            f"{job.n} images in {-(-job.n // job.shard_images(executor.workers))} shard(s) on {executor.describe()}"
        )
    manifest, book = publish_job(job, run.out, executor, expect=expect, ledger=run.ledger, budget=run.budget,
                                 delta_budget=run.delta_budget, label=label, resume=run.resume,
                                 resumable=run.resumable, force=run.force, inputs=run.inputs,
                                 source_map=run.source_map, metadata=metadata, on_progress=bar.update,
                                 on_skip=lambda p, why: print_skipped([(Path(p), why)]), note=print_note)  # fmt: skip
    bar.close()
    if "records" in manifest:
        what = f"{manifest['records']} records to {run.out}/records.csv and manifest.json"
    elif mech.capabilities().output == "features":
        what = f"{manifest['n']} reports of {manifest['m']} features to {run.out}/{manifest['file']} and manifest.json"
    else:
        kind = "synthetic images (labels in the manifest)" if count is not None else "images"
        what = f"{manifest['images']} {kind} as {run.fmt} ({job.files_published} files) and {run.out}/manifest.json"
    report(manifest, run.out, run.ledger, book, run.quiet, what, t0)


def report(manifest, output, ledger, book, quiet, what, t0) -> None:
    """Print what was written, the guarantee and the ledger's state."""
    from privpix.privacy.guarantees import Guarantee

    if quiet:
        return
    g = Guarantee.from_dict(manifest["guarantee"])
    console.print(f"wrote {escape(what)} in {time.perf_counter() - t0:.1f} s", highlight=False)
    console.print(escape(g.text()), highlight=False)
    if book is not None:
        info = manifest.get("ledger", {})
        if info.get("charge", "").startswith("none"):
            console.print(f"ledger: charged nothing ({escape(info['charge'])})", highlight=False)
        console.print(f"ledger {escape(str(ledger))}: {escape(spent_text(book))}", highlight=False)
        held = [e for e in book.entries if e.status == "reserved"]
        if held:
            print_note(
                f"{len(held)} reservation(s) in the ledger (ε={sum(e.epsilon for e in held):.4g}) come from runs "
                "that were killed; they count as spent, since a killed run may have published"
            )


def spent_text(book) -> str:
    """``spent ε=… at δ=… of a budget …`` by the ledger's rule, and the PLD figure beside it, each labelled."""
    return f"spent {book.spent.text(book.epsilon_budget)}"


def release_synthetic(mech, private, source, data_dir, metadata, run: ReleaseRun) -> None:
    """A synthesizer's release: fit (on the private images, or read its model file), then draw as many new labelled
    images as it says (``synthetic_count``), in shards, with the labels in the manifest."""
    from privpix.errors import ParameterError
    from privpix.mechanisms import SyntheticImageMechanism, fit_as_declared, require_kind

    mech = require_kind(mech, SyntheticImageMechanism)  # the caller sends only what declares synthetic images
    with notes_from_warnings():
        fit_as_declared(mech, private if mech.capabilities().fits_on == "private" else None, data_dir, seed=run.seed)
    count = mech.synthetic_count(None if private is None else len(private))
    if not count:
        raise ParameterError(f"--method {mech.name}: draws synthetic images; say how many with --param n=N")
    shape = mech.capabilities().fixed_shape
    if shape is None:
        raise ParameterError(f"--method {mech.name}: the fitted model does not say its image shape")
    if source is not None:
        metadata["source"] = source  # the private set the model was fitted on in this run
    metadata["synthetic_images"] = count
    # The model's class names (kept in its model file) name the labels: female/ and male/, not 0/ and 1/.
    class_names = mech.label_names() or (None if private is None else private.class_names)
    release_sharded(mech, None, count, shape, class_names, source or "", metadata, f"{mech.name} → {run.out}", run)
