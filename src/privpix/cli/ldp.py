"""``privpix ldp``: Wang & Chang 2020's two-party workflow on the command line.

The data user fits an encoder (``fit-encoder``) and hands the file to the owners; each owner encodes and
perturbs their images (``perturb``); the data user trains and evaluates a classifier on the reports
(``train``). The same encoders + randomized response are the registered mechanisms ``ldp-pixel-report``,
``ldp-hog-bovw``, ``ldp-dcaconv`` and ``ldp-bnn`` (``privpix audit``, ``bench``); an encoder file written here
is their ``model`` parameter.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import click

from privpix import strict_json
from privpix.cli.app import err_console, main
from privpix.cli.options import INPUT_FOLDER, parse_params, parse_size, plain
from privpix.publishing.outputs import check_output_path, writing

RECORD_SOURCE = click.option(
    "--record-source",
    is_flag=True,
    help="Write the --input folder's path (and the encoder file's) into the output (off by default: paths can "
    "name people).",
)


def _images(dataset, input_dir, data_dir, size, limit, seed, what="images", record_source=False):
    """(ImageSet, source description) from --dataset or --input, resized and limited as asked. An --input folder
    is described by its path only with ``record_source``."""
    import numpy as np

    from privpix.data import ImageSet, load_dataset, load_folder
    from privpix.data.memory import check_resize_fits
    from privpix.errors import ParameterError

    if (dataset is None) == (input_dir is None):
        raise ParameterError(f"give exactly one of --dataset NAME[:SPLIT] or --input DIR for the {what}")
    if input_dir is not None:
        data, source = load_folder(input_dir), str(input_dir) if record_source else INPUT_FOLDER
    else:
        data, source = load_dataset(dataset, data_dir), dataset
        if not isinstance(data, ImageSet):
            raise ParameterError(f"--dataset {dataset}: holds records, not images")
    if limit is not None:
        if limit < 1:
            raise ParameterError(f"--limit must be >= 1, got {limit}")
        if len(data) > limit:
            data = data.subset(np.sort(np.random.default_rng(seed).choice(len(data), limit, replace=False)))
            source = f"{source} (seeded subset of {limit})"
    if size is not None:
        check_resize_fits(len(data), size, data.shape[2])
        data = data.resized(*size)
    return data.grayscale(), source


def _fit_to_encoder(data, encoder, quiet):
    from privpix.data.memory import check_resize_fits

    if tuple(data.shape[:2]) != tuple(encoder.image_shape):
        h, w = encoder.image_shape
        if not quiet:
            err_console.print(
                f"[yellow]note:[/yellow] resizing {data.shape[0]}x{data.shape[1]} images to the encoder's {h}x{w}"
            )
        check_resize_fits(len(data), (h, w), data.shape[2], "the encoder's image size")
        data = data.resized(h, w)
    return data


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
    from privpix.errors import ParameterError
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
    from privpix.errors import ParameterError
    from privpix.executor import Executor
    from privpix.mechanisms import get_mechanism
    from privpix.mechanisms.ldp import load_encoder
    from privpix.mechanisms.ldp.encoder_base import ENCODERS
    from privpix.privacy.noise import make_rng, rng_kind
    from privpix.publishing.release import exact_noise
    from privpix.publishing.staging import check_output

    if not epsilon > 0:  # also NaN
        raise ParameterError(f"--epsilon must be > 0 (or inf for no perturbation), got {epsilon}")
    make_rng(seed, secure=secure)  # the same checks of --seed / --secure as every command
    enc = load_encoder(encoder_file)
    mech = get_mechanism(ENCODERS.providers()[enc.name][0], epsilon=epsilon, model=str(encoder_file))
    mech.fit(None)
    secure = exact_noise(mech, seed=seed, secure=secure)  # exact GRR by default without --seed
    data, source = _images(dataset, input_dir, data_dir, None, limit, seed or 0, "owners' images", record_source)
    # The description the guarantee checks against the encoder's fitting data (a subset says which).
    data = replace(_fit_to_encoder(data, enc, quiet), source=source)
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
    import numpy as np

    from privpix.errors import ParameterError
    from privpix.evaluation.ldp_learners import CLASSIFIERS, make_classifier
    from privpix.fileio import write_text_atomic
    from privpix.mechanisms.base import Param
    from privpix.mechanisms.ldp import load_encoder
    from privpix.mechanisms.ldp.reports import MANIFEST, read_reports

    if json_path:
        check_output_path(json_path, "--json")
    reports = read_reports(reports_dir)
    if reports.labels is None:
        raise ParameterError(f"--reports {reports_dir}: the reports carry no labels, so no classifier can be fitted")
    kinds = {"n_neighbors": int, "alpha": float, "p": float}
    kw = {}
    for k, v in parse_params(params).items():
        if k not in kinds or k not in CLASSIFIERS[classifier]().get_params():
            raise ParameterError(f"--param {k}: not a parameter of classifier {classifier}")
        kw[k] = Param(k, kinds[k], None, "").parse(v)
    t0 = time.perf_counter()
    clf = make_classifier(classifier, reports.d, reports.epsilon, **kw).fit(reports.values, reports.labels)
    result = {
        "classifier": classifier,
        "params": clf.get_params(),
        "reports": str(reports_dir),
        "n_train": len(reports),
        "m": reports.n_features,
        "d": reports.d,
        "epsilon_per_feature": None if math.isinf(reports.epsilon) else reports.epsilon,
        "epsilon_per_image": None if math.isinf(reports.epsilon) else reports.epsilon * reports.n_features,
        "guarantee": reports.guarantee.to_dict(),
        "fit_seconds": round(time.perf_counter() - t0, 3),
    }
    if (test_dataset is None) != (test_input is None):
        if encoder_file is None:
            encoder_file = json.loads((Path(reports_dir) / MANIFEST).read_text()).get("encoder_file")
            if not encoder_file or not isinstance(encoder_file, str):
                raise ParameterError(
                    "give --encoder: the reports' manifest names no encoder file (`ldp perturb` records its path "
                    "only with --record-source)"
                )
        enc = load_encoder(encoder_file)
        # Same name and config is not enough: a pixel encoder for 8x8 images has the config of one for 28x28.
        keys = ("encoder", "config", "d", "image_shape", "n_features")
        if any(enc.describe()[k] != reports.encoder.get(k) for k in keys):
            raise ParameterError(f"--encoder {encoder_file}: is not the encoder these reports were made with")
        test, tsource = _images(test_dataset, test_input, data_dir, None, limit, seed, "test images")
        test = _fit_to_encoder(test, enc, quiet)
        if test.labels is None:
            raise ParameterError("the test images carry no labels (use a dataset split or one sub-folder per class)")
        t1 = time.perf_counter()
        x_test = enc.encode(test)
        pred = clf.predict(x_test)
        result.update(
            test=tsource,
            n_test=len(test),
            accuracy=float(np.mean(pred == test.labels)),
            predict_seconds=round(time.perf_counter() - t1, 3),
        )
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
