"""``privpix release``: publish a dataset or a folder, charged to a locked ledger; the checks of the command's options,
then the library's release (:mod:`privpix.cli.publish`, :func:`privpix.publishing.ledger.publish_job`).

The order of a release is what keeps its promises (docs/security.md): every check that can fail runs before any
work; the ledger is locked and the charge reserved on disk before any file is written; the release is staged and
swapped in atomically; the reservation becomes a charge, or is rolled back only if nothing was published.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from privpix.cli.app import main
from privpix.cli.options import INPUT_FOLDER, executor_options, method_options, parse_params, parse_size, print_note
from privpix.cli.publish import ReleaseRun, open_input, print_skipped, read_all, release_sharded, release_synthetic
from privpix.data.files import DEFAULT_MAX_PIXELS


@main.command()
@click.option("--dataset", "dataset", default=None, help="NAME[:SPLIT], e.g. orl or mnist:test.")
@click.option(
    "--input",
    "input_dir",
    type=click.Path(),
    default=None,
    help="A folder of images (flat, or one sub-folder per class).",
)
@method_options()
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed for a reproducible research release. Anyone who knows it can remove the noise: not for publication.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="Require exact samplers on the OS CSPRNG (refused for a mechanism that has none). Without --seed they are "
    "the default wherever the mechanism has them; otherwise its noise is floating-point and the guarantee says so.",
)
@click.option("--output", required=True, type=click.Path(), help="Directory for the PNGs and manifest.json.")
@click.option("--size", default=None, help="Resize every image to HEIGHTxWIDTH first.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="Dataset directory.")
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False),
    default=None,
    help="Privacy ledger file: locked for the release, charged before anything is written, refused over budget.",
)
@click.option("--budget", type=float, default=None, help="Per-image ε budget for a new --ledger file.")
@click.option(
    "--delta-budget",
    type=float,
    default=None,
    help="δ budget for a new --ledger file (default 1e-5; pure ε-DP charges spend none).",
)
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
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["imagefolder", "parquet", "webdataset"]),
    default="imagefolder",
    show_default=True,
    help="Release layout: PNGs (label/name.png + metadata.jsonl), Parquet shards (Hugging Face Image struct), or "
    "WebDataset tar shards. manifest.json lies beside each.",
)
@click.option(
    "--labels/--no-labels",
    default=False,
    show_default=True,
    help="Publish the input's class labels (as given: not privatized, not covered by the guarantee). A "
    "synthesizer's labels are drawn privately and always published.",
)
@click.option("--png-level", type=int, default=1, show_default=True, help="PNG compression level, 0 (fastest) to 9.")
@executor_options
@click.option("--shard-size", type=int, default=None, help="Images per shard (default: from the workers and sizes).")
@click.option(
    "--block-size",
    type=int,
    default=None,
    help="Images per random stream (default: from the image size). With --seed, the same seed and block size give "
    "the same pixels whatever the workers or shards.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue a release that was interrupted in --output: redo only its unfinished shards (same command).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or summary.")
def release(dataset, input_dir, method, epsilon, delta, params, seed, secure, output, size, data_dir, ledger, budget,
            delta_budget, force, source_map, record_source, max_pixels, fmt, labels, png_level, workers, engine,
            scheduler, shard_size, block_size, resume, quiet) -> None:  # fmt: skip
    """Privatize a dataset, a folder of images, Parquet or WebDataset shards, and write the release plus
    manifest.json, in shards spread over every core (or a Dask cluster).

    File names are opaque (they do not carry the source names) and the manifest holds no source path unless
    asked. With --ledger, concurrent releases on the same ledger run one at a time and never overspend it."""
    from privpix.data import RecordSet, load_dataset
    from privpix.data.inmemory import ImageSetSource, RecordSetSource
    from privpix.data.load import load_images
    from privpix.data.loaders import dataset_domain, holds_records, staged_folder
    from privpix.data.memory import check_resize_fits
    from privpix.errors import ParameterError
    from privpix.mechanisms import RecordMechanism, fit_as_declared, get_mechanism
    from privpix.privacy.noise import make_rng, rng_kind
    from privpix.publishing.noise_source import exact_noise
    from privpix.publishing.release import check_output, check_public_distinct, check_source_map

    # Every check that can fail runs before any work is done.
    mech = get_mechanism(method, epsilon=epsilon, delta=delta, domain=dataset_domain(dataset), **parse_params(params))
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
    if synthetic and caps.fits_on == "model-file" and (dataset is not None or input_dir is not None):
        # It would be ignored: the images come from the model file alone, and the user may think it was used.
        given = f"--dataset {dataset}" if dataset is not None else f"--input {input_dir}"
        raise ParameterError(
            f"{given}: a release from a model file draws its images from the model alone and reads no input; drop "
            f"{given.split()[0]} and say how many images with --param n=N (or fit on it: privpix fit --method "
            f"{mech.name} ...)"
        )
    if dataset is None and input_dir is None and not (synthetic and caps.fits_on != "private"):
        raise ParameterError("give exactly one of --dataset NAME[:SPLIT] or --input DIR")
    if max_pixels < 1:
        raise ParameterError(f"--max-pixels must be >= 1, got {max_pixels}")
    if ledger is None and (budget is not None or delta_budget is not None):
        raise ParameterError("--budget and --delta-budget need --ledger FILE")
    if not 0 <= png_level <= 9:
        raise ParameterError(f"--png-level must be in 0..9, got {png_level}")
    records = dataset is not None and holds_records(dataset)
    if records and not isinstance(mech, RecordMechanism):  # before any option is judged for a records release
        raise ParameterError(f"--dataset {dataset}: holds records, not images, and {method} releases images")
    if caps.output == "features" or records:
        # Released at once, as one file (reports.npz, records.csv): no image files to map, no image layout, no
        # shards or blocks to size. Refused here, before any fit.
        options = (("--source-map", source_map is not None), ("--format", fmt != "imagefolder"),
                   ("--shard-size", shard_size is not None), ("--block-size", block_size is not None),
                   ("--labels", labels and records))  # fmt: skip
        refused = [opt for opt, on in options if on]
        if refused:
            what = "records.csv" if records else "one report file (reports.npz)"
            raise ParameterError(
                f"{refused[0]}: --method {method} releases {what} at once, with no image files to map, no image "
                "layout and no shards or blocks to size"
            )
    make_rng(seed, secure=secure)  # the same checks of --seed / --secure as every command
    # Exact samplers for every noise draw behind the claim: asked for (--secure, refused without them), or by
    # default without --seed wherever the method has them.
    secure = exact_noise(mech, seed=seed, secure=secure)
    if resume and caps.fits_on == "private" and seed is None:
        # A resumed run fits again; without a seed that is a second, different fit of the private images (a second
        # DP release for a synthesizer), and the shards finished before would come from the first one.
        raise ParameterError(
            f"--resume: {method} fits on the private images, and an unseeded fit cannot be repeated; start the "
            "release over without --resume (or fit once with `privpix fit` and release from the model file)"
        )
    out = Path(output)
    staged = staged_folder(dataset, data_dir) if dataset is not None else None
    inputs = [Path(input_dir)] if input_dir is not None else [] if staged is None else [staged]
    if not resume:
        check_output(out, force, inputs)
    if source_map is not None:
        check_source_map(Path(source_map), out, inputs)
    if seed is not None and not quiet:
        print_note("--seed makes the noise reproducible by anyone who knows the seed; publish with --secure instead")
    hw = parse_size(size)
    metadata = {"secure_rng": secure, "rng": rng_kind(seed, secure)}
    run = ReleaseRun(seed=seed, secure=secure, fmt=fmt, png_level=png_level, labels=labels, workers=workers,
                     shard_size=shard_size, block_size=block_size, resume=resume, out=out, force=force, inputs=inputs,
                     source_map=source_map, ledger=ledger, budget=budget, delta_budget=delta_budget,
                     quiet=quiet)  # fmt: skip
    from privpix.executor import make_executor, using

    # One executor for the whole command: a synthesizer's fit spreads its embedding sums over it too. Its local
    # workers start with what a shard and the scan's first pass import already loaded.
    preload = ("privpix.publishing.shard_worker", "privpix.data.folders")
    with make_executor(engine, workers, scheduler, preload) as executor, using(executor):
        executor.note = print_note
        run.executor = executor
        if synthetic:
            if source_map is not None:
                raise ParameterError(
                    "--source-map: synthetic images are drawn from a model, not made from source files"
                )
            private = None
            if dataset is not None:
                private = load_images(dataset, None, data_dir, size=hw)[0]  # refused before allocating a resize
            elif input_dir is not None:
                private = read_all(open_input(input_dir, None, None, hw, max_pixels))
                if not record_source:
                    # Its path would reach the manifest and the model's caveat ("fitted on ..."): paths can name people.
                    private = replace(private, source=INPUT_FOLDER)
            where = str(Path(input_dir).expanduser().resolve()) if input_dir is not None and record_source else None
            ctx = (dataset or where or INPUT_FOLDER) if caps.fits_on == "private" else None
            release_synthetic(mech, private, ctx, data_dir, metadata, run)
            return
        if records:
            data = load_dataset(dataset, data_dir)
            # `records` is the registry's kind of the data set, and load_dataset reads a records data set as such.
            assert isinstance(data, RecordSet), f"{dataset}: a records data set read as {type(data).__name__}"
            metadata["source"] = dataset
            fit_as_declared(mech, data)  # used only by a mechanism that fits on the private records
            label = f"{mech.name} on {dataset} → {output}"
            release_sharded(mech, RecordSetSource(data, dataset), None, (0, 0, 0), None, dataset, metadata, label, run)
            return
        source = open_input(input_dir, dataset, data_dir, hw, max_pixels)
        print_skipped([(Path(p), why) for p, why in source.skipped])
        if input_dir is not None and record_source:
            metadata["source"] = str(Path(input_dir).expanduser().resolve())
        elif dataset is not None:
            metadata["source"] = dataset
        if caps.fits_on == "private":
            # Read whole (the fit needs every image at once): refused up front when that cannot fit in memory.
            check_resize_fits(len(source), hw, source.shape[2])
        private = read_all(source) if caps.fits_on == "private" else None
        fit_as_declared(mech, private, data_dir, seed=seed)  # public data comes from the same --data-dir
        del private
        check_public_distinct(mech, source)
        label = f"{mech.name} on {input_dir or dataset} → {output}"
        if caps.output == "features":
            check_resize_fits(len(source), hw, source.shape[2])  # the reports are computed from every image at once
            images = read_all(source)
            if dataset is not None:  # its split too: what an encoder's fitting data is checked against
                images = replace(images, source=dataset)
            # The guarantee of these very images (an encoder fitted on some of them does not protect them), charged.
            expect = mech.privacy(images).guarantee
            whole = ImageSetSource(images, source.description)
            release_sharded(mech, whole, None, images.shape, None, source.description, metadata, label, run, expect)
            return
        release_sharded(mech, source, None, source.shape, source.class_names, source.description, metadata, label, run)
