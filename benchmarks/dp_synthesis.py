"""dp-merf on MNIST (issue 18, item 1): fit on the training split at each ε (δ = 1e-5), publish labelled synthetic
images, train downstream classifiers on them only, and test on the real MNIST test set.

Per ε: the fit (one noisy embedding of the private set, then the generator trained on it), the generation of
``--synthetic`` labelled images through ``Mechanism.release`` (its input serves only as the count and the shape;
the synthetic images are not transforms of it), and two scikit-learn classifiers with fixed settings, nothing
chosen on the test set: multinomial logistic regression, and ``MLPClassifier`` with its defaults (one hidden
layer of 100, Adam, 200 epochs), the "MLP" of DP-MERF's and DPImageBench's tables. The same classifiers trained
on as many real training images give the non-private reference. Not DPImageBench's full protocol (no 55,000 /
5,000 validation split, one seed): that is issue 18 item 5.

Run: ``.venv/bin/python benchmarks/dp_synthesis.py [--epsilons 1,10] [--limit N] [--synthetic 10000]
[--param n_features=10000 ...]`` → ``benchmarks/results/dp_synthesis.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
from PIL import Image

from privpix.data import ImageSet, load_dataset
from privpix.mechanisms import get_mechanism

OUT = Path(__file__).parent / "results"
DATA = os.environ.get("PRIVPIX_DATA", "/work/shared/datasets")


def classifiers(seed: int) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    return {
        "logreg": LogisticRegression(max_iter=200),
        "mlp": MLPClassifier(random_state=seed),
    }


def score(train: ImageSet, test: ImageSet, seed: int) -> tuple[dict, dict]:
    """Test accuracy and training seconds of each classifier trained on ``train``."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    acc, secs = {}, {}
    for name, clf in classifiers(seed).items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            clf.fit(train.flat(), train.labels)
        secs[name] = round(time.perf_counter() - t0, 1)
        acc[name] = round(float(clf.score(test.flat(), test.labels)), 4)
    return acc, secs


def grid(images: ImageSet, per_class: int = 10) -> np.ndarray:
    """(10·h, per_class·w) uint8: row k holds the first ``per_class`` images labelled k."""
    h, w, _ = images.shape
    out = np.zeros((10 * h, per_class * w), np.uint8)
    for k in range(10):
        idx = np.flatnonzero(images.labels == k)[:per_class]
        for j, i in enumerate(idx):
            out[k * h : (k + 1) * h, j * w : (j + 1) * w] = images.as_uint8()[i, :, :, 0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilons", default="1,10")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--limit", type=int, default=None, help="fit on a seeded subset of the training split")
    ap.add_argument("--synthetic", type=int, default=10000, help="synthetic images per ε")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--param", action="append", default=[], help="dp-merf parameter KEY=VALUE (repeatable)")
    ap.add_argument("--no-reference", action="store_true", help="skip the classifiers on real images")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's; 1 on a busy machine)")
    ap.add_argument("--out", default=str(OUT / "dp_synthesis"))
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    params = dict(p.split("=", 1) for p in args.param)

    train, test = load_dataset("mnist:train", DATA), load_dataset("mnist:test", DATA)
    if args.limit:
        train = train.subset(np.sort(np.random.default_rng(args.seed).choice(len(train), args.limit, replace=False)))
    print(f"MNIST: {len(train)} private training images, {len(test)} test images", flush=True)
    rows, grids = [], []
    for eps in (float(e) for e in args.epsilons.split(",")):
        mech = get_mechanism("dp-merf", epsilon=eps, delta=args.delta, **params)
        t0 = time.perf_counter()
        mech.fit(train, seed=args.seed)
        fit_s = time.perf_counter() - t0
        rel = mech.release(train.subset(np.arange(args.synthetic) % len(train)), args.seed + 1)
        synth = rel.images
        acc, secs = score(synth, test, args.seed)
        meta = mech.meta_
        row = {
            "epsilon": eps,
            "delta": args.delta,
            "n_private": len(train),
            "n_synthetic": len(synth),
            "noise_multiplier": round(meta["noise_multiplier"], 6),
            "sigma": meta["sigma"],
            "fit_seconds": round(fit_s, 1),
            "embed_seconds": round(meta["embed_seconds"], 1),
            "train_seconds": round(meta["train_seconds"], 1),
            "generate_seconds": round(rel.seconds, 2),
            "accuracy": acc,
            "classifier_seconds": secs,
            "label_probs": [round(float(p), 4) for p in mech.label_probs_],
            "final_loss": meta["history"]["loss"][-1],
            "guarantee": rel.guarantee.short(),
        }
        rows.append(row)
        grids.append(grid(synth))
        print(json.dumps(row), flush=True)
    reference = None
    if not args.no_reference:
        real = train.subset(np.arange(min(args.synthetic, len(train))))
        acc, secs = score(real, test, args.seed)
        reference = {"n_real": len(real), "accuracy": acc, "classifier_seconds": secs}
        print(json.dumps({"reference": reference}), flush=True)

    result = {
        "benchmark": "dp-merf on MNIST: train on synthetic images, test on the real test set",
        "command": "benchmarks/dp_synthesis.py "
        + " ".join(
            [f"--epsilons {args.epsilons}", f"--synthetic {args.synthetic}"]
            + ([f"--limit {args.limit}"] if args.limit else [])
            + ([f"--threads {args.threads}"] if args.threads else [])
            + [f"--param {p}" for p in args.param]
        ),
        "parameters": {k: v for k, v in mech.get_params().items() if k != "epsilon"},
        "seed": args.seed,
        "machine": f"{platform.machine()}, {os.cpu_count()} shared cores, torch threads {args.threads or 'default'}",
        "rows": rows,
        "reference_real": reference,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    sep = np.full((grids[0].shape[0], 8), 255, np.uint8)
    panels = [part for g in grids for part in (g, sep)][:-1]
    Image.fromarray(np.concatenate(panels, axis=1)).save(out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.json')}, .md, .png", flush=True)


def markdown(r: dict) -> str:
    lines = [
        "# dp-merf on MNIST (issue 18, item 1)",
        "",
        f"`{r['command']}` (seed {r['seed']}; {r['machine']}). Classifiers trained on the synthetic images only, "
        "tested on the 10,000 real MNIST test images; fixed settings, nothing selected on the test set.",
        "",
        "| ε (δ = 1e-5) | n private | σ per value | logreg | MLP | fit s (embed + train) | generate s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['epsilon']:g} | {row['n_private']} | {row['sigma']:.3g} | {row['accuracy']['logreg']:.4f} "
            f"| {row['accuracy']['mlp']:.4f} | {row['fit_seconds']:.0f} ({row['embed_seconds']:.0f} + "
            f"{row['train_seconds']:.0f}) | {row['generate_seconds']:.1f} ({row['n_synthetic']} images) |"
        )
    ref = r.get("reference_real")
    if ref:
        lines += [
            "",
            f"Non-private reference, the same classifiers on {ref['n_real']} real training images: logreg "
            f"{ref['accuracy']['logreg']:.4f}, MLP {ref['accuracy']['mlp']:.4f}.",
        ]
    lines += [
        "",
        "Target (DPImageBench's DP-MERF, MLP downstream): ≥ 0.80 at ε = 1, ≥ 0.81 at ε = 10.",
        "",
        "`dp_synthesis.png`: ten synthetic images per class (rows 0–9), one panel per ε in the table's order.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
