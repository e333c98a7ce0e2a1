"""``privpix ldp``: Wang & Chang 2020's two-party workflow on the command line.

The data user fits an encoder (``fit-encoder``) and hands the file to the owners; each owner encodes and
perturbs their images (``perturb``); the data user trains and evaluates a classifier on the reports
(``train``). The same encoders + randomized response are the registered mechanisms ``ldp-pixel-report``,
``ldp-hog-bovw``, ``ldp-dcaconv`` and ``ldp-bnn`` (``privpix audit``, ``bench``); an encoder file written here
is their ``model`` parameter.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import click

from privpix import strict_json
from privpix.cli.app import err_console, main
from privpix.cli.options import parse_params, parse_size, plain
from privpix.errors import ParameterError
from privpix.publishing.outputs import check_output_path, writing

RECORD_SOURCE = click.option(
    "--record-source",
    is_flag=True,
    help="Write the --input folder's path (and the encoder file's) into the output (off by default: paths can "
    "name people).",
)


def _images(dataset, input_dir, data_dir, size, limit, seed, what="images", record_source=False):
    """(grey ImageSet, source description) from --dataset or --input (:func:`privpix.data.load.load_images`)."""
    from privpix.data.load import load_images

    data, source = load_images(dataset, input_dir, data_dir, size=size, limit=limit, seed=seed, what=what,
                               record_source=record_source)  # fmt: skip
    return data.grayscale(), source


def _at_encoder_size(data, encoder, quiet):
    """``data`` resized to the encoder's image size (:meth:`Encoder.at_size`), saying so."""
    if tuple(data.shape[:2]) != tuple(encoder.image_shape) and not quiet:
        h, w = encoder.image_shape
        err_console.print(
            f"[yellow]note:[/yellow] resizing {data.shape[0]}x{data.shape[1]} images to the encoder's {h}x{w}"
        )
    return encoder.at_size(data)


@main.group()
def ldp() -> None:
    """Local-DP image classification (Wang & Chang 2020): fit-encoder → perturb (owners) → train (data user)."""


@ldp.command("fit-encoder")
@click.option(
    "--encoder",
    "name",
    required=True,
    help="pixel, hog-bovw, dcaconv or bnn (the encoders of the ldp-* mechanisms; the file is their model=FILE).",
)
@click.option("--levels", type=int, default=None, help="Domain size d for the pixel encoder.")
@click.option("--param", "params", multiple=True, help="Encoder parameter key=value (repeatable).")
@click.option("--dataset", default=None, help="NAME[:SPLIT] of public or consented images to fit on.")
@click.option("--input", "input_dir", type=click.Path(), default=None, help="Folder of images (sub-folder = class).")
@click.option("--shape", default=None, help="HEIGHTxWIDTH: make a fixed pixel encoder without any images.")
@click.option("--size", default=None, help="Resize images to HEIGHTxWIDTH first.")
@click.option("--limit", type=int, default=None, help="Fit on a seeded random subset of this many images.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--output", required=True, type=click.Path(dir_okay=False), help="Encoder file to write (.npz).")
@click.option("--force", is_flag=True, help="Replace an existing encoder file.")
@RECORD_SOURCE
@click.option("--quiet", "-q", is_flag=True)
def fit_encoder(
    name, levels, params, dataset, input_dir, shape, size, limit, seed, data_dir, output, force, record_source, quiet
):
    """Fit an encoder and write the file the data owners will use."""
    from privpix.mechanisms.ldp import make_encoder

    out = Path(output)
    check_output_path(out, "--output")
    if out.exists() and not force:
        raise ParameterError(f"--output {out}: exists; pass --force to replace it")
    kw = parse_params(params)
    if levels is not None:
        if name != "pixel":
            raise ParameterError(f"--levels is for the pixel encoder; {name} sets d itself (see --param)")
        kw["levels"] = str(levels)
    enc = make_encoder(name, **kw)
    t0 = time.perf_counter()
    if shape is not None:
        if name != "pixel" or dataset or input_dir:
            raise ParameterError("--shape makes a pixel encoder without data; do not combine it with --dataset/--input")
        hw = parse_size(shape, "--shape")
        if hw is None:
            raise ParameterError("--shape: empty; expected HEIGHTxWIDTH, e.g. 28x28")
        enc.fit_unsupervised_shape(*hw)
    else:
        data, source = _images(
            dataset, input_dir, data_dir, parse_size(size), limit, seed, "fitting images", record_source
        )
        enc.fit(data, source=source, seed=seed, progress=not quiet)
    with writing(out, "--output"):
        enc.save(out)
    if not quiet:
        plain(
            f"wrote {out}: encoder {enc.name}, d = {enc.d}, m = {enc.n_features} features per "
            f"{enc.image_shape[0]}x{enc.image_shape[1]} image, fitted on {enc.fitted_on} in "
            f"{time.perf_counter() - t0:.1f} s"
        )


@ldp.command()
@click.option("--encoder", "encoder_file", required=True, type=click.Path(dir_okay=False), help="Encoder file.")
@click.option("--epsilon", type=float, required=True, help="ε per feature (the paper's axis); inf = no noise.")
@click.option("--dataset", default=None, help="NAME[:SPLIT] of the owners' images.")
@click.option("--input", "input_dir", type=click.Path(), default=None, help="Folder of the owners' images.")
@click.option("--limit", type=int, default=None, help="Use a seeded random subset of this many images.")
@click.option("--seed", type=int, default=None, help="Seed for reproducible research runs.")
@click.option("--secure", is_flag=True,
              help="OS CSPRNG with the exact GRR sampler (the default without --seed).")  # fmt: skip
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--output", required=True, type=click.Path(), help="Folder for reports.npz and manifest.json.")
@click.option("--force", is_flag=True, help="Replace earlier reports in --output.")
@RECORD_SOURCE
@click.option("--quiet", "-q", is_flag=True)
def perturb(encoder_file, epsilon, dataset, input_dir, limit, seed, secure, data_dir, output, force, record_source,
            quiet):  # fmt: skip
    """Encode the owners' images and perturb every feature with ε-LDP randomized response.

    An alias of `privpix release --method <the encoder's ldp-* mechanism> --param model=ENCODER --labels`, written by
    the same writer, with two options of its own: --limit, and --epsilon inf (the features without perturbation,
    released with no guarantee: the paper's ε = ∞ column)."""
    from dataclasses import replace

    from privpix.cli.publish import ReleaseRun, release_sharded
    from privpix.data.inmemory import ImageSetSource
    from privpix.executor import Executor
    from privpix.mechanisms.ldp import reports_mechanism
    from privpix.privacy.noise import make_rng, rng_kind
    from privpix.publishing.noise_source import exact_noise
    from privpix.publishing.staging import check_output

    if not epsilon > 0:  # also NaN
        raise ParameterError(f"--epsilon must be > 0 (or inf for no perturbation), got {epsilon}")
    make_rng(seed, secure=secure)  # the same checks of --seed / --secure as every command
    mech = reports_mechanism(encoder_file, epsilon)
    secure = exact_noise(mech, seed=seed, secure=secure)  # exact GRR by default without --seed
    data, source = _images(dataset, input_dir, data_dir, None, limit, seed or 0, "owners' images", record_source)
    # The description the guarantee checks against the encoder's fitting data (a subset says which).
    data = replace(_at_encoder_size(data, mech.encoder_, quiet), source=source)
    out = Path(output)
    # Refuse a bad --output before any work is done.
    check_output_path(out, "--output", folder=True)
    inputs = [Path(input_dir)] if input_dir is not None else []
    check_output(out, force, inputs)
    if seed is not None and not quiet:
        plain("note: --seed makes the randomized response reproducible by anyone who knows the seed")
    # No seed in the manifest: with it, anyone could recompute the responses' randomness.
    metadata = {
        "source": source,
        "secure_rng": secure,
        "rng": rng_kind(seed, secure),
        **({"encoder_file": str(Path(encoder_file).resolve())} if record_source else {}),
    }
    run = ReleaseRun(seed=seed, secure=secure, png_level=1, labels=True, workers=1, out=out, force=force,
                     inputs=inputs, quiet=quiet, resumable=False)  # fmt: skip
    with Executor(1) as executor, writing(out, "--output"):
        run.executor = executor
        label = f"{mech.name} on {source} → {out}"
        release_sharded(mech, ImageSetSource(data, source), None, data.shape, None, source, metadata, label, run,
                        mech.privacy(data).guarantee)  # fmt: skip


@ldp.command()
@click.option("--reports", "reports_dir", required=True, type=click.Path(file_okay=False), help="Report folder.")
@click.option("--classifier", required=True, type=click.Choice(["nb", "ncc", "knn"]), help="Learner.")
@click.option("--param", "params", multiple=True, help="Classifier parameter, e.g. n_neighbors=100, alpha=1.")
@click.option(
    "--encoder",
    "encoder_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Encoder for the test images (default: the one named in the reports' manifest).",
)
@click.option("--test-dataset", default=None, help="NAME:SPLIT of clean test images to score on.")
@click.option("--test-input", type=click.Path(), default=None, help="Folder of clean test images.")
@click.option("--limit", type=int, default=None, help="Score on a seeded subset of this many test images.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the result here.")
@click.option("--quiet", "-q", is_flag=True)
def train(
    reports_dir, classifier, params, encoder_file, test_dataset, test_input, limit, seed, data_dir, json_path, quiet
):
    """Fit a classifier on perturbed reports and (optionally) score it on clean test images."""
    from privpix.evaluation.ldp_reports import fit_on_reports, reports_encoder, score
    from privpix.fileio import write_text_atomic

    if json_path:
        check_output_path(json_path, "--json")
    clf, reports, result = fit_on_reports(reports_dir, classifier, parse_params(params))
    if (test_dataset is None) != (test_input is None):
        enc = reports_encoder(reports_dir, reports, encoder_file)
        test, tsource = _images(test_dataset, test_input, data_dir, None, limit, seed, "test images")
        result.update(test=tsource, **score(clf, enc, _at_encoder_size(test, enc, quiet)))
    elif test_dataset is not None:
        raise ParameterError("give only one of --test-dataset or --test-input")
    if json_path:
        with writing(json_path, "--json"):
            write_text_atomic(Path(json_path), strict_json.dumps(result, indent=2, default=str))
    if not quiet:
        eps = "∞" if math.isinf(reports.epsilon) else f"{reports.epsilon:g}"
        line = f"{classifier} on {len(reports)} reports (d = {reports.d}, m = {reports.n_features}, ε/feature = {eps})"
        if "accuracy" in result:
            line += f": accuracy {result['accuracy']:.4f} on {result['n_test']} images of {result['test']}"
        plain(line)
        plain(reports.guarantee.text())
