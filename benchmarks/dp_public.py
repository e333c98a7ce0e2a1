"""What a public set buys a mean-embedding synthesizer: ``public=…`` against none, paired by seed.

A small private set is where public data should matter (the noise per embedding value is σ = z·2/n): the private
set is ``--n`` images drawn (``--split-seed``) from ``--private``; the public set is ``--public``, a different
dataset (by default scikit-learn's 1,797 UCI digits, 8×8 from 43 writers, resized to 28×28: really public and
distinct from MNIST). For each ε and seed the synthesizer is fitted twice with the same seed, so both fits release
the *same* noisy embedding (the public set never enters it) and differ only in the generator's pretraining; 5,000
synthetic images (seed + 1000) train a logistic regression (scikit-learn, max_iter 300), scored on ``--test``.

Every finished (spec, ε, seed, public) is appended to ``results/dp_public/runs.jsonl`` (a rerun skips it); the
table (mean ± std and the paired difference) is rewritten to ``results/dp_public.{json,md}`` after each run.

Run: ``.venv/bin/python benchmarks/dp_public.py`` (defaults below; a rerun with every run stored rewrites the
table from the JSONL), ``--render-only`` to rewrite the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, document, rerender, table, write
from privpix.data import load_dataset
from privpix.mechanisms import get_mechanism, parse_method_spec

RESULTS = Path(__file__).parent / "results"
RUNS = RESULTS / "dp_public" / "runs.jsonl"
DATA = os.environ.get("PRIVPIX_DATA")


def run_one(spec: str, eps: float, seed: int, public: str, private, test, delta: float) -> dict:
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    name, params = parse_method_spec(spec)
    t0, c0 = time.perf_counter(), time.process_time()
    mech = get_mechanism(name, epsilon=eps, delta=delta, public=public, **params).fit(private, seed=seed)
    fit_s, fit_cpu = time.perf_counter() - t0, time.process_time() - c0
    synth = mech.synthesize(5000, seed + 1000).images
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = LogisticRegression(max_iter=300).fit(synth.flat(), synth.labels)
    return {
        "spec": spec,
        "epsilon": eps,
        "seed": seed,
        "public": public,
        "n_private": len(private),
        "accuracy": round(float(clf.score(test.flat(), test.labels)), 4),
        "fit_seconds": round(fit_s, 1),
        "fit_cpu_seconds": round(fit_cpu, 1),
        "public_n": mech.meta_.get("public_n"),
        # Equal within a (ε, seed) pair: the public set does not change the release.
        "embedding_sha256": hashlib.sha256(mech.embedding_.tobytes()).hexdigest()[:16],
    }


def render(res: dict) -> str:
    args, runs = res["args"], res["runs"]
    preamble = (
        f"Private: {args['n']} images of `{args['private']}` (split seed {args['split_seed']}); public: "
        f"`{args['public']}`; test: `{args['test']}`; δ = {args['delta']:g}. Logistic regression trained on 5,000 "
        "synthetic images. Both columns of a row use the same seeds, hence the same noisy embedding; the difference "
        "is the pretraining alone (mean ± std over seeds of the paired difference)."
    )
    public = args["public"]
    keyed = {(r["spec"], r["epsilon"], r["seed"], r["public"]): r for r in runs}
    body = []
    for spec in dict.fromkeys(r["spec"] for r in runs):
        for eps in sorted({r["epsilon"] for r in runs if r["spec"] == spec}):
            seeds = sorted(
                s for (sp, e, s, p) in keyed if sp == spec and e == eps and p == "" and (sp, e, s, public) in keyed
            )
            if not seeds:
                continue
            a = np.array([keyed[(spec, eps, s, "")]["accuracy"] for s in seeds])
            b = np.array([keyed[(spec, eps, s, public)]["accuracy"] for s in seeds])
            ca = np.mean([keyed[(spec, eps, s, "")]["fit_cpu_seconds"] for s in seeds])
            cb = np.mean([keyed[(spec, eps, s, public)]["fit_cpu_seconds"] for s in seeds])
            d = b - a
            body.append([
                f"`{spec}`", f"{eps:g}", len(seeds), f"{a.mean():.3f} ± {a.std(ddof=1) if len(a) > 1 else 0:.3f}",
                f"{b.mean():.3f} ± {b.std(ddof=1) if len(b) > 1 else 0:.3f}",
                f"{d.mean():+.3f} ± {d.std(ddof=1) if len(d) > 1 else 0:.3f}", f"{ca:.0f} / {cb:.0f}",
            ])  # fmt: skip
    cols = ["method", "ε", "seeds", "no public", "public", "paired difference", "fit CPU-s (none / public)"]
    return document(
        "Public pretraining of the generator",
        table(cols, body),
        preamble=preamble,
        notes=f"Machine: {res['machine']}, 2 shared cores, one torch thread.",
    )


RESULT = Output(RESULTS / "dp_public", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--private", default="mnist:train")
    ap.add_argument("--test", default="mnist:test")
    ap.add_argument("--public", default="digits")
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--split-seed", type=int, default=1805)
    ap.add_argument("--spec", default="dp-merf[n_features=2000,epochs=5,batch_size=100]")
    ap.add_argument("--epsilons", default="0.1,0.3,1,10")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    import torch

    torch.set_num_threads(1)
    RUNS.parent.mkdir(parents=True, exist_ok=True)
    runs = [json.loads(x) for x in RUNS.read_text().splitlines()] if RUNS.exists() else []
    full = load_dataset(args.private, DATA)
    pick = np.random.default_rng(args.split_seed).choice(len(full), args.n, replace=False)
    private, test = full.subset(np.sort(pick)), load_dataset(args.test, DATA)
    done = {(r["spec"], r["epsilon"], r["seed"], r["public"]) for r in runs}
    for eps in [float(e) for e in args.epsilons.split(",")]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for public in ("", args.public):
                if (args.spec, eps, seed, public) in done:
                    continue
                r = run_one(args.spec, eps, seed, public, private, test, args.delta)
                runs.append(r)
                with RUNS.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                print(json.dumps(r), flush=True)
                write(RESULT, {"machine": platform.machine(), "args": vars(args), "runs": runs}, indent=1)
    write(RESULT, {"machine": platform.machine(), "args": vars(args), "runs": runs}, indent=1)
    print(RESULT.md_path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
