"""Why does our KNN trail the paper's Table 1 at small ε? Accuracy against k (neighbours) for DCAConv d = 16.

Table 1 does not state k (Table 2 uses 100). One neighbour search per ε with the largest k gives every
smaller k by voting over a prefix of the sorted neighbours.
Run: ``.venv/bin/python benchmarks/ldp_knn_k.py [--dataset mnist]`` → ``results/ldp_knn_k_<dataset>.json``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
from sklearn.neighbors import NearestNeighbors

from _results import write_json
from privpix.data import load_dataset
from privpix.mechanisms.ldp import make_encoder
from privpix.privacy.grr import grr_perturb

KS = [1, 5, 10, 30, 100, 300, 1000]
EPSILONS = [0.5, 1.0, 2.0, math.inf]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--test", type=int, default=2000)
    args = ap.parse_args()
    train, test = load_dataset(f"{args.dataset}:train"), load_dataset(f"{args.dataset}:test")
    test = test.subset(np.sort(np.random.default_rng(0).permutation(len(test))[: args.test]))
    enc = make_encoder("dcaconv").fit(train, source=f"{args.dataset}:train")
    x_train, x_test = enc.encode(train).astype(np.float32), enc.encode(test).astype(np.float32)
    out = {"dataset": args.dataset, "n_test": len(test), "k": KS, "accuracy": {}}
    for eps in EPSILONS:
        t0 = time.perf_counter()
        rep = grr_perturb(x_train.astype(np.uint8), 16, eps, np.random.default_rng(1)).astype(np.float32)
        _, idx = NearestNeighbors(n_neighbors=max(KS), algorithm="brute").fit(rep).kneighbors(x_test)
        labels = train.labels[idx]
        accs = []
        for k in KS:
            votes = np.apply_along_axis(np.bincount, 1, labels[:, :k], minlength=10)
            accs.append(float(np.mean(votes.argmax(1) == test.labels)))
        out["accuracy"]["inf" if math.isinf(eps) else str(eps)] = accs
        print(
            f"ε={eps:g}: " + ", ".join(f"k={k}: {a:.3f}" for k, a in zip(KS, accs, strict=True)),
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    path = Path(__file__).parent / "results" / f"ldp_knn_k_{args.dataset}.json"
    write_json(path, out, indent=1)


if __name__ == "__main__":
    main()
