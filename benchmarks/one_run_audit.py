"""One-run audits of the dataset-level mechanisms: dp-merf on its released
embedding, dp-sgd on its released model, each fitted once on MNIST training images with canary slots.

Rows: the mechanisms as built at ε = 1 and 10, and dp-merf with its noise calibrated for a sensitivity 10× and
100× too small (the module's ``sensitivity`` patched in this process: a stand-in for a broken implementation
that still claims ε = 1). Writes ``results/one_run_audit.{json,md}``.

Run: ``.venv/bin/python benchmarks/one_run_audit.py`` (about 10 minutes on one core); ``--render-only`` rewrites
the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Col, Output, document, rerender, table, write
from privpix.data import load_dataset
from privpix.evaluation.audit.one_run import audit_one_run
from privpix.mechanisms import get_mechanism

RESULTS = Path(__file__).parent / "results"
DATA = os.environ.get("PRIVPIX_DATA")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--canaries", type=int, default=1000)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    import torch

    from privpix.mechanisms.synthesis import embedding

    torch.set_num_threads(1)
    imgs = load_dataset("mnist:train", DATA).subset(np.arange(args.images))
    rows = []
    original = embedding.sensitivity
    cases = [
        ("dp-merf[n_features=2000]", 1.0, 1),
        ("dp-merf[n_features=2000]", 10.0, 1),
        ("dp-merf[n_features=2000]", 1.0, 10),
        ("dp-merf[n_features=2000]", 1.0, 100),
        ("dp-sgd", 1.0, 1),
        ("dp-sgd", 10.0, 1),
    ]
    for spec, eps, cut in cases:
        for seed in [int(s) for s in args.seeds.split(",")]:
            embedding.sensitivity = (lambda n, c=cut: original(n) / c) if cut > 1 else original
            name, _, rest = spec.partition("[")
            params = dict(kv.split("=") for kv in rest.rstrip("]").split(",")) if rest else {}
            mech = get_mechanism(name, epsilon=eps, delta=1e-5, **params)
            t0 = time.perf_counter()
            res = audit_one_run(mech, imgs, canaries=args.canaries, seed=seed)
            row = {"method": spec, "epsilon": eps, "noise_cut": cut, "seed": seed, "bound": res.audited_epsilon_lower,
                   "ceiling": res.max_auditable_epsilon, "verdict": res.verdict, "guesses": res.statistic}  # fmt: skip
            rows.append({**row, "seconds": time.perf_counter() - t0})
            print(json.dumps(rows[-1]), flush=True)
    embedding.sensitivity = original
    res = {"machine": platform.machine(), "args": vars(args), "rows": rows}
    write(RESULT, res, indent=1)
    print(RESULT.md_path.read_text(encoding="utf-8"))


def render(res: dict) -> str:
    args = res["args"]
    preamble = (
        f"{args['images']} MNIST training images, {args['canaries']} canary slots (an image with a wrong label, in "
        "or out with probability 1/2: replaced by its true label for dp-merf, removed for dp-sgd), one fit per row, "
        "δ = 1e-5, 95 % confidence. `noise cut`: the noise calibrated for a sensitivity that many times too small "
        "(a broken implementation that still claims ε)."
    )
    cols = [
        Col("method", "`{}`"), Col("claimed ε", "g"), Col("noise cut", "{}×"), Col("seed"), Col("bound ε ≥", ".3f"),
        Col("ceiling", ".2f"), Col("verdict"), Col("guesses", lambda g: g.split("; ")[-1]), Col("seconds", ".0f"),
    ]  # fmt: skip
    keys = ("method", "epsilon", "noise_cut", "seed", "bound", "ceiling", "verdict", "guesses", "seconds")
    body = table(cols, ([r[k] for k in keys] for r in res["rows"]))
    notes = f"Machine: {res['machine']}, 2 shared cores, one torch thread."
    return document("One-run audits (Steinke, Nasr & Jagielski 2023)", body, preamble=preamble, notes=notes)


RESULT = Output(RESULTS / "one_run_audit", render)
OUTPUTS = (RESULT,)

if __name__ == "__main__":
    main()
