"""``privpix release`` and ``privpix verify``: publish a dataset or a folder, charged to a locked ledger.

The order of a release is what keeps its promises (docs/security.md): every check that can fail runs before any
work; the ledger is locked and the charge reserved on disk before any file is written; the release is staged and
swapped in atomically; the reservation becomes a charge, or is rolled back only if nothing was published.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.markup import escape

from privpix.cli.app import console, err_console, main
from privpix.cli.options import _params, _size
from privpix.data.files import DEFAULT_MAX_PIXELS

# Values (pixels × 3 channels) decoded at once from an input folder: about 128 MB as float32.
BATCH_VALUES = 1 << 25
SKIPPED_SHOWN = 20


def _note(msg: str) -> None:
    err_console.print(f"[yellow]note:[/yellow] {escape(msg)}", highlight=False)


def _printable(path: Path | str) -> str:
    """A file name shown on one line as it is, control characters escaped (a name holding a newline must not
    print a line that looks like privpix's own)."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in str(path))


def _print_skipped(skipped: list[tuple[Path, str]]) -> None:
    """Every skipped file is reported; past the first few, as counts per reason (a .git folder has thousands)."""
    from collections import Counter

    for path, why in skipped[:SKIPPED_SHOWN]:
        err_console.print(f"[yellow]skipped[/yellow] ({escape(why)}): {escape(_printable(path))}", highlight=False)
    rest = skipped[SKIPPED_SHOWN:]
    if rest:
        kinds = Counter(why.split(" of ")[0].split(" as ")[0] for _, why in rest)
        summary = ", ".join(f"{n} {k}" for k, n in kinds.most_common())
        err_console.print(f"[yellow]skipped[/yellow] {len(rest)} more: {escape(summary)}", highlight=False)


def _dataset_folder(dataset: str, data_dir: str | None) -> list[Path]:
    """The folder a staged dataset is read from (an output must not overlap it); none for built-in sets."""
    from privpix.data.loaders import DATASETS, parse_dataset_spec, resolve_data_dir

    name, _ = parse_dataset_spec(dataset)
    folder = DATASETS[name].folder
    return [] if folder is None else [resolve_data_dir(data_dir) / folder]


@main.command()
@click.option("--dataset", "dataset", default=None, help="NAME[:SPLIT], e.g. orl or mnist:test.")
@click.option(
    "--input",
    "input_dir",
    type=click.Path(),
    default=None,
    help="A folder of images (flat, or one sub-folder per class).",
)
@click.option("--method", required=True, help="Mechanism name (see `privpix mechanisms`).")
@click.option("--epsilon", type=float, default=None, help="Privacy parameter ε (for DP mechanisms).")
@click.option("--delta", type=float, default=None, help="δ for (ε, δ) mechanisms.")
@click.option("--param", "params", multiple=True, help="Mechanism parameter key=value (repeatable).")
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for a reproducible research release. Anyone who knows it can remove the noise: not for publication.",
)
@click.option("--secure", is_flag=True, help="Draw noise from the OS CSPRNG with exact samplers (no seed).")
@click.option("--output", required=True, type=click.Path(), help="Directory for the PNGs and manifest.json.")
@click.option("--size", default=None, help="Resize every image to HEIGHTxWIDTH first.")
@click.option("--batch-size", type=int, default=256, show_default=True, help="Images in memory at once.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Dataset directory.")
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False),
    default=None,
    help="Privacy ledger file: locked for the release, charged before anything is written, refused over budget.",
)
@click.option("--budget", type=float, default=None, help="Per-image ε budget for a new --ledger file.")
@click.option("--delta-budget", type=float, default=None, help="δ budget for a new --ledger file (default 0).")
@click.option(
    "--force",
    is_flag=True,
    help="Replace an earlier privpix release in --output (only the files its manifest lists).",
)
@click.option(
    "--source-map",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a CSV mapping released names to source files (outside --output; keep it private).",
)
@click.option(
    "--record-source",
    is_flag=True,
    help="Write the input folder's path into the manifest (off by default: paths can name people).",
)
@click.option(
    "--max-pixels",
    type=int,
    default=DEFAULT_MAX_PIXELS,
    show_default=True,
    help="Refuse an input image larger than this many pixels (checked from its header, before decoding).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or summary.")
def release(
    dataset,
    input_dir,
    method,
    epsilon,
    delta,
    params,
    seed,
    secure,
    output,
    size,
    batch_size,
    data_dir,
    ledger,
    budget,
    delta_budget,
    force,
    source_map,
    record_source,
    max_pixels,
    quiet,
) -> None:
    """Privatize a dataset or a folder of images and write PNGs plus manifest.json.

    File names are opaque (they do not carry the source names) and the manifest holds no source path unless
    asked. With --ledger, concurrent releases on the same ledger run one at a time and never overspend it."""
    from tqdm import tqdm

    from privpix.data import ImageSet, iter_folder, list_image_files, load_dataset, load_folder
    from privpix.data.files import read_header
    from privpix.errors import ParameterError
    from privpix.mechanisms import fit_as_declared, get_mechanism
    from privpix.noise import make_rng
    from privpix.publish import OpaqueNames, check_output, check_source_map, release_to_dir

    # Every check that can fail runs before any work is done.
    mech = get_mechanism(method, epsilon=epsilon, delta=delta, **_params(params))
    caps = mech.capabilities()
    if caps.output == "model":
        # What it publishes is a trained model file; a release folder holds images or records.
        raise ParameterError(
            f"--method {method}: publishes a trained model, not images; write it with `privpix fit --method "
            f"{method} --dataset NAME[:SPLIT] --epsilon E --delta D --output model.pt`"
        )
    synthetic = caps.output == "synthetic-images"
    if dataset is not None and input_dir is not None:
        raise ParameterError("give one of --dataset NAME[:SPLIT] or --input DIR, not both")
    if dataset is None and input_dir is None and not (synthetic and caps.fits_on != "private"):
        raise ParameterError("give exactly one of --dataset NAME[:SPLIT] or --input DIR")
    if batch_size < 1:
        raise ParameterError(f"--batch-size must be >= 1, got {batch_size}")
    if max_pixels < 1:
        raise ParameterError(f"--max-pixels must be >= 1, got {max_pixels}")
    if ledger is None and (budget is not None or delta_budget is not None):
        raise ParameterError("--budget and --delta-budget need --ledger FILE")
    if caps.output == "features":
        # A release folder holds images or records; per-owner report vectors have their own format.
        raise ParameterError(
            f"--method {method}: releases per-owner feature reports, not images; write them with "
            "`privpix ldp perturb` (report folder), or measure them with `privpix bench` / `privpix audit`"
        )
    if caps.batch_size is not None:
        # Dataset-level mechanisms privatize in batches of their own; stream whole batches of them.
        batch_size = max(1, batch_size // caps.batch_size) * caps.batch_size
    rng = make_rng(seed, secure=secure)
    out = Path(output)
    inputs = [Path(input_dir)] if input_dir is not None else _dataset_folder(dataset, data_dir) if dataset else []
    check_output(out, force, inputs)
    if source_map is not None:
        check_source_map(Path(source_map), [out, *inputs])
    if seed is not None and not quiet:
        _note("--seed makes the noise reproducible by anyone who knows the seed; publish with --secure instead")
    hw = _size(size)
    metadata = {"secure_rng": secure, "rng": "secure" if secure else ("seeded" if seed is not None else "os-seeded")}
    if synthetic:
        if source_map is not None:
            raise ParameterError("--source-map: synthetic images are drawn from a model, not made from source files")
        private = None
        if dataset is not None:
            private = load_dataset(dataset, data_dir)
            if not isinstance(private, ImageSet):
                raise ParameterError(f"--dataset {dataset}: holds records, not images")
            private = private.resized(*hw) if hw is not None else private
        elif input_dir is not None:
            private = load_folder(input_dir, size=hw, max_pixels=max_pixels)
        ctx = (dataset or str(input_dir)) if caps.fits_on == "private" else None
        _release_synthetic(mech, private, ctx, rng, seed, data_dir, out, force, inputs, batch_size, ledger, budget,
                           delta_budget, metadata, quiet)  # fmt: skip
        return
    if input_dir is not None:
        files, skipped = list_image_files(input_dir, max_pixels=max_pixels)
        _print_skipped(skipped)
        total = len(files)
        if caps.batch_size is None:
            # Memory follows pixels, not image counts: a batch of big photos holds fewer of them.
            head = read_header(files[0][0], max_pixels)
            first_h, first_w = hw or (head.height, head.width)
            batch_size = max(1, min(batch_size, BATCH_VALUES // (first_h * first_w * 3)))
        batches = iter_folder(
            input_dir,
            batch_size=batch_size,
            size=hw,
            max_pixels=max_pixels,
            on_skip=lambda path, why: _print_skipped([(path, why)]),
        )
        source = str(input_dir)
        if record_source:
            metadata["source"] = str(Path(input_dir).expanduser().resolve())
    else:
        data = load_dataset(dataset, data_dir)
        metadata["source"] = dataset
        if not isinstance(data, ImageSet):
            if not mech.supports_records:
                raise ParameterError(f"--dataset {dataset}: holds records, not images, and {method} releases images")
            _release_records(mech, data, dataset, out, rng, force, ledger, budget, delta_budget, quiet, metadata)
            return
        if hw is not None:
            data = data.resized(*hw)
        total = len(data)
        batches = data.batches(batch_size)
        source = dataset
    private = None
    if caps.fits_on == "private":
        private = data if input_dir is None else load_folder(input_dir, size=hw, max_pixels=max_pixels)
    fit_as_declared(mech, private, data_dir, seed=seed)  # public data comes from the same --data-dir
    batches = iter(batches)
    first = next(batches, None)
    if first is None:
        raise ParameterError("nothing to release: the input holds no images")
    guarantee = mech.guarantee(first.shape)
    bar = tqdm(total=total, unit="img", disable=quiet, desc=f"{mech.name}")
    t0 = time.perf_counter()

    def publish(on_published=None):
        return release_to_dir(
            mech,
            _chain(first, batches),
            out,
            rng,
            force=force,
            metadata=metadata,
            on_batch=bar.update,
            inputs=inputs,
            names=OpaqueNames(),
            source_map=source_map,
            on_published=on_published,
            note=_note,
            expect=guarantee,
        )

    book = _charged(ledger, budget, delta_budget, guarantee, f"{mech.name} on {source} → {output}", publish)
    manifest = book[0]
    bar.close()
    what = f"{len(manifest['files'])} images and {output}/manifest.json"
    _report(manifest, output, ledger, book[1], quiet, what, t0)


def _charged(ledger, budget, delta_budget, guarantee, label, publish):
    """Run ``publish`` under the ledger's lock with the charge reserved first (or plainly, without a ledger).
    Returns ``(manifest, ledger or None)``."""
    from privpix.accounting import open_ledger

    if ledger is None:
        return publish(), None
    with open_ledger(ledger, budget=budget, delta_budget=delta_budget, wait=_note) as session:
        with session.reserve(guarantee, label) as reservation:
            manifest = publish(reservation.published)
        return manifest, session.ledger


def _report(manifest, output, ledger, book, quiet, what, t0) -> None:
    """Print what was written, the guarantee and the ledger's state."""
    from privpix.guarantees import Guarantee

    if quiet:
        return
    g = Guarantee.from_dict(manifest["guarantee"])
    console.print(f"wrote {escape(what)} in {time.perf_counter() - t0:.1f} s", highlight=False)
    console.print(escape(g.text()), highlight=False)
    if book is not None:
        console.print(
            f"ledger {escape(str(ledger))}: spent ε={book.spent_epsilon:.4g} of {book.epsilon_budget:.4g}",
            highlight=False,
        )
        held = [e for e in book.entries if e.status == "reserved"]
        if held:
            _note(
                f"{len(held)} reservation(s) in the ledger (ε={sum(e.epsilon for e in held):.4g}) come from runs "
                "that were killed; they count as spent, since a killed run may have published"
            )


def _release_records(mech, data, dataset, out, rng, force, ledger, budget, delta_budget, quiet, metadata) -> None:
    from privpix.mechanisms import fit_as_declared
    from privpix.publish import release_records_to_dir

    fit_as_declared(mech, data)  # used only by a mechanism that fits on the private records
    guarantee = mech.guarantee((0, 0, 0))
    t0 = time.perf_counter()

    def publish(on_published=None):
        return release_records_to_dir(
            mech, data, out, rng, force=force, metadata=metadata, on_published=on_published, note=_note
        )

    manifest, book = _charged(ledger, budget, delta_budget, guarantee, f"{mech.name} on {dataset} → {out}", publish)
    what = f"{manifest['records']} records to {out}/records.csv and manifest.json"
    _report(manifest, out, ledger, book, quiet, what, t0)


def _release_synthetic(mech, private, source, rng, seed, data_dir, out, force, inputs, batch_size, ledger, budget,
                       delta_budget, metadata, quiet) -> None:  # fmt: skip
    """A synthesizer's release: fit (on the private images, or read its model file), then draw as many new labelled
    images as it says (``synthetic_count``), in batches, with the labels in the manifest."""
    from tqdm import tqdm

    from privpix.errors import ParameterError
    from privpix.mechanisms import fit_as_declared
    from privpix.publish import OpaqueNames, release_to_dir

    fit_as_declared(mech, private if mech.capabilities().fits_on == "private" else None, data_dir, seed=seed)
    count = mech.synthetic_count(None if private is None else len(private))
    if not count:
        raise ParameterError(f"--method {mech.name}: draws synthetic images; say how many with --param n=N")
    shape = mech.capabilities().fixed_shape
    if shape is None:
        raise ParameterError(f"--method {mech.name}: the fitted model does not say its image shape")
    if source is not None:
        metadata["source"] = source  # the private set the model was fitted on in this run
    metadata["synthetic_images"] = count
    guarantee = mech.guarantee(shape)
    chunks = [min(batch_size, count - i) for i in range(0, count, batch_size)]
    bar = tqdm(total=count, unit="img", disable=quiet, desc=f"{mech.name}")
    t0 = time.perf_counter()

    def publish(on_published=None):
        return release_to_dir(mech, chunks, out, rng, force=force, metadata=metadata, on_batch=bar.update,
                              inputs=inputs, names=OpaqueNames(), on_published=on_published, note=_note,
                              expect=guarantee)  # fmt: skip

    manifest, book = _charged(ledger, budget, delta_budget, guarantee, f"{mech.name} → {out}", publish)
    bar.close()
    what = f"{len(manifest['files'])} synthetic images (labels in the manifest) and {out}/manifest.json"
    _report(manifest, out, ledger, book, quiet, what, t0)


def _chain(first, rest):
    yield first
    yield from rest


@main.command()
@click.argument("folder", type=click.Path())
@click.option("--repair", is_flag=True, help="Finish (or remove) a release that a killed run left half-swapped.")
def verify(folder: str, repair: bool) -> None:
    """Check a release folder against its manifest: every file's sha256, none missing, none extra.

    Exits 0 when they match, 1 with the differences listed when they do not. Read-only unless --repair."""
    import sys

    from privpix.publish import verify_manifest

    problems = verify_manifest(folder, note=_note, repair=repair)
    for p in problems:
        console.print(escape(p), highlight=False)
    if problems:
        err_console.print(f"[red]{len(problems)} problem(s)[/red] in {escape(folder)}", highlight=False)
        sys.exit(1)
    console.print(f"{escape(folder)}: every file matches its manifest", highlight=False)
