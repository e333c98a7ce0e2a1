"""``privpix train-obfuscator`` (paper 003's autoencoder obfuscator) and ``privpix train-ppsgan`` (paper 004's
PPSGAN, PPAPNet, ACGAN): train a model and save the one file that providers and `privpix release` load."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np

from privpix.cli.app import main
from privpix.cli.options import _check_output_path, _floats, _plain, _writing

# Out-of-range numbers are usage errors naming the option, before any data is loaded; a learning rate or a
# noise knob of 0 trains nothing useful, so both must be strictly positive (and finite: FloatRange checks).
_POSITIVE = click.FloatRange(min=0, min_open=True, max=1e300)


def _training_options(fn):
    """The options every training command shares: seed, data location, model file, overwrite, quiet."""
    for opt in reversed(
        [
            click.option("--seed", type=int, default=0, show_default=True),
            click.option("--data-dir", type=click.Path(file_okay=False), default=None),
            click.option("--output", required=True, type=click.Path(dir_okay=False), help="Model file to write."),
            click.option("--force", is_flag=True),
            click.option("--quiet", "-q", is_flag=True),
        ]
    ):
        fn = opt(fn)
    return fn


@main.command("train-obfuscator")
@click.option("--dataset", required=True, help="celeba[:train] (images) or adult[:train] (records).")
@click.option("--utility", default=None, help="Utility feature: a CelebA attribute (default Smiling) or income.")
@click.option("--private", "private", default=None, help="Private feature, recorded in the model (default Male/sex).")
@click.option("--epochs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--lr", type=_POSITIVE, default=1e-3, show_default=True)
@click.option(
    "--patience", type=click.IntRange(min=1), default=3, show_default=True, help="Early stopping on validation loss."
)
@click.option("--val-fraction", type=float, default=0.1, show_default=True)
@click.option(
    "--limit", type=click.IntRange(min=10), default=None, help="Train on a seeded subset of this many records."
)
@click.option(
    "--measure",
    default=None,
    help="Comma-separated σ² values: measure weak/strong adversaries and the utility provider on the validation "
    "split at each (with f and --measure-k) and store the accuracies in the model file, for every release to carry.",
)
@click.option(
    "--measure-k", type=click.FloatRange(min=0), default=None, help="K for --measure (default 3000 images, 50 records)."
)
@_training_options
def train_obfuscator(
    dataset,
    utility,
    private,
    epochs,
    batch_size,
    lr,
    patience,
    val_fraction,
    limit,
    measure,
    measure_k,
    seed,
    data_dir,
    output,
    force,
    quiet,
):
    """Train the obfuscator (Algorithm 1) for one utility feature; privacy is then measured, not proven."""
    from privpix.data import ImageSet, celeba_64, load_dataset
    from privpix.errors import ParameterError
    from privpix.mechanisms.neural.obfuscator import save_obfuscator
    from privpix.mechanisms.neural.obfuscator import train_obfuscator as fit

    out = Path(output)
    _check_output_path(out, "--output")  # before hours of training, not after
    if out.exists() and not force:
        raise ParameterError(f"--output {out}: exists; pass --force to replace it")
    if not 0 < val_fraction < 1:
        raise ParameterError(f"--val-fraction must be in (0, 1), got {val_fraction}")
    data = load_dataset(dataset, data_dir)
    rng = np.random.default_rng(seed)
    if isinstance(data, ImageSet):
        kind = "image"
        utility = utility or "Smiling"
        private = private or "Male"
        if utility not in data.attributes:
            raise ParameterError(f"--utility {utility}: not an attribute of {dataset}")
        if limit is not None and limit < len(data):
            data = data.subset(np.sort(rng.choice(len(data), limit, replace=False)))
        data = celeba_64(data) if data.shape[:2] != (64, 64) else data
        x = data.as_float()
        y = (np.asarray(data.attributes[utility]) > 0).astype(np.int64)
        if private not in data.attributes:
            raise ParameterError(f"--private {private}: not an attribute of {dataset}")
        priv = (np.asarray(data.attributes[private]) > 0).astype(np.int64)
        n_features = 0
        encoding = None
    else:
        kind = "tabular"
        utility = utility or "income"
        private = private or "sex"
        if utility != data.label_column:
            raise ParameterError(f"--utility for {dataset} must be its label column {data.label_column!r}")
        from privpix.mechanisms.neural.records import encode_records, fit_record_encoding

        data = data.complete()  # the paper drops records with missing values
        if limit is not None and limit < len(data):
            data = data.subset(np.sort(rng.choice(len(data), limit, replace=False)))
        encoding = fit_record_encoding(data, private)
        x, y = encode_records(data, encoding), data.labels
        values = sorted(data.frame[private].unique())
        if len(values) != 2:
            raise ParameterError(f"--private {private}: must be a binary column, has {len(values)} values")
        priv = (data.frame[private] == values[1]).to_numpy(dtype=np.int64)
        n_features = x.shape[1]
    perm = rng.permutation(len(x))
    n_val = max(2, round(val_fraction * len(x)))
    val, tr = perm[:n_val], perm[n_val:]
    t0 = time.perf_counter()
    net, hist = fit(
        kind,
        x[tr],
        y[tr],
        x[val],
        y[val],
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        patience=patience,
        seed=seed,
        progress=not quiet,
    )
    meta = {
        "utility": utility,
        "private": private,
        "fitted_on": f"{dataset} ({len(tr)} train / {len(val)} validation records, seed {seed})",
        "n_features": n_features,
        "record_encoding": encoding,
        "history": hist,
        "train_seconds": round(time.perf_counter() - t0, 1),
    }
    if measure:
        k = measure_k if measure_k is not None else (3000.0 if kind == "image" else 50.0)
        meta["measured"] = _measure(net, x, y, priv, tr, val, _floats(measure, "--measure"), k, quiet)
    with _writing(out, "--output"):
        save_obfuscator(out, net, meta)
    if not quiet:
        sec = np.mean(hist["sec"])
        _plain(
            f"wrote {out}: {kind} obfuscator for {utility} (private {private}), {hist['epochs_run']} epochs, "
            f"{sec:.1f} s/epoch on {len(tr)} records; validation MSE {hist['val_ae'][-1]:.4f}, "
            f"utility accuracy {hist['val_acc'][-1]:.3f}"
        )
        _plain(json.dumps({k: hist[k][-1] for k in ("val_ae", "val_nll", "val_acc")}))


def _measure(net, x, y, priv, tr, val, sigma2s, K, quiet) -> list[dict]:
    """Weak/strong adversary and utility-provider accuracies on the validation split, per σ² (with f, K)."""
    from privpix.evaluation.obfuscation import AttributeData, measure_release, obfuscator_release, train_inferrer

    train, test = AttributeData(x[tr], y[tr], priv[tr]), AttributeData(x[val], y[val], priv[val])
    weak = train_inferrer(train, "private")
    rows = [{"sigma2": None, "K": None, "use_f": None, "weak": weak.score(test.x, test.private)}]
    for s2 in sigma2s:
        r = measure_release(obfuscator_release(net, sigma2=s2, K=K, use_f=True), train, test, weak_adversary=weak)
        rows.append({"sigma2": s2, "K": K, "use_f": True, **r})
        if not quiet:
            _plain(f"measured at σ²={s2:g}, K={K:g}: {json.dumps(r)}")
    return rows


@main.command("train-ppsgan")
@click.option("--model", "kind", type=click.Choice(["ppsgan", "ppapnet", "acgan"]), default="ppsgan", show_default=True)
@click.option("--dataset", required=True, help="NAME[:SPLIT] with labels, e.g. mnist:train or fashion-mnist:train.")
@click.option("--epsilon", type=_POSITIVE, default=1.0, show_default=True, help="Noise knob ε (not a DP guarantee).")
@click.option(
    "--delta",
    type=click.FloatRange(0, 1, max_open=True),
    default=0.0,
    show_default=True,
    help="Noise knob δ: 0 → Laplace, > 0 → Gaussian.",
)
@click.option("--latent", "d", type=click.IntRange(min=1), default=128, show_default=True, help="Latent size d.")
@click.option(
    "--width",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="First conv width (paper 128; 32 on a CPU).",
)
@click.option(
    "--ae-epochs", type=click.IntRange(min=0), default=5, show_default=True, help="Autoencoder pretraining epochs."
)
@click.option(
    "--epochs", type=click.IntRange(min=1), default=5, show_default=True, help="Adversarial epochs (Algorithm 1)."
)
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option(
    "--n-critic", type=click.IntRange(min=1), default=5, show_default=True, help="Critic steps per generator step."
)
@click.option("--limit", type=click.IntRange(min=2), default=None, help="Train on a seeded subset of this many images.")
@click.option(
    "--recipe", type=click.Choice(["paper", "authors"]), default="paper", show_default=True,
    help="paper: §3.4 as written; authors: the released code's losses (non-saturating generator term, C_c on real "
    "images only, s_e recomputed every --resensitize-every generator steps).",
)  # fmt: skip
@click.option(
    "--resensitize-every", type=click.IntRange(min=1), default=1000, show_default=True, help="With --recipe authors."
)
@_training_options
def train_ppsgan(
    kind, dataset, epsilon, delta, d, width, ae_epochs, epochs, batch_size, n_critic, limit, recipe, resensitize_every,
    seed, data_dir, output, force, quiet,
):  # fmt: skip
    """Train PPSGAN, PPAPNet or ACGAN (paper 004) and save the model file `privpix release` loads."""
    from privpix.data import ImageSet, load_dataset
    from privpix.errors import ParameterError
    from privpix.mechanisms.neural.ppsgan import fit_model_file

    out = Path(output)
    _check_output_path(out, "--output")  # before hours of training, not after
    if out.exists() and not force:
        raise ParameterError(f"--output {out}: exists; pass --force to replace it")
    data = load_dataset(dataset, data_dir)
    if not isinstance(data, ImageSet) or data.labels is None:
        raise ParameterError(f"--dataset {dataset}: needs labelled images")
    if limit is not None and limit < len(data):
        data = data.subset(np.sort(np.random.default_rng(seed).choice(len(data), limit, replace=False)))
    with _writing(out, "--output"):
        _, meta = fit_model_file(
            kind, data, out, fitted_on=f"{dataset} ({len(data)} images, seed {seed})", seed=seed, epsilon=epsilon,
            delta=delta, d=d, width=width, ae_epochs=ae_epochs, epochs=epochs, batch_size=batch_size,
            n_critic=n_critic, recipe=recipe, resensitize_every=resensitize_every, progress=not quiet,
        )  # fmt: skip
    hist = meta["history"]
    if not quiet:
        sec = np.mean(hist["sec"]) if hist["sec"] else 0.0
        _plain(
            f"wrote {out}: {kind} on {len(data)} images, {epochs} adversarial epochs ({sec:.1f} s/epoch); "
            f"ε = {epsilon}, δ = {delta} are noise knobs, not a DP guarantee"
        )
