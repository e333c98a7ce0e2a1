"""White-box audit of DP-SGD (``privpix.evaluation.audit.audit`` on an unfitted ``dp-sgd``): Dirac gradient canaries
through the real Opacus training loop (:func:`privpix.mechanisms.dp_sgd_training.dirac_canary_scores`), calibrated
as a fit on n images would be, read raw and through the composed curve of T sampled Gaussian steps (PLD).

Settings (δ = 1e-5, claimed ε ∈ {1, 2, 4, 8, 10}, seeds 0..4):

* ``bench``: n = 1,000 built-in MNIST digits, 3 epochs, batch 100 (q = 0.1, T = 30), at 2,000 and 10,000 trials per
  side.
* ``mnist``: n = 60,000 (a stand-in set of 60,000 1x1 images: an unfitted mechanism's audit reads only len(images)),
  20 epochs, batch 256 (q ≈ 0.0043, T = 4,680), at 2,000 trials per side.

Plus a calibration bug: ``privpix.mechanisms.neural.dp_sgd.noise_multiplier`` patched in this process to return half the
calibrated z, at claimed ε ∈ {1, 2, 4, 8}, both settings at 2,000 trials; the audit should say "violated".

Writes ``results/white_box_audit.{json,md}``. Run: ``.venv/bin/python benchmarks/white_box_audit.py`` (a few
minutes on one core); ``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, rerender, table, write
from privpix.data import load_dataset
from privpix.data.imageset import ImageSet
from privpix.evaluation.audit import audit, mechanism_curve
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.neural import dp_sgd

RESULTS = Path(__file__).parent / "results"
DELTA = 1e-5


def settings(mnist_epochs: int) -> dict[str, tuple[ImageSet, dict]]:
    bench = load_dataset("builtin-mnist").subset(np.arange(1000))
    n = 60_000
    mnist = ImageSet(np.zeros((n, 1, 1, 1), np.uint8), labels=np.zeros(n, np.int64), source="stand-in (60,000 1x1)")
    return {
        "bench": (bench, {"epochs": 3, "batch_size": 100}),
        "mnist": (mnist, {"epochs": mnist_epochs, "batch_size": 256}),
    }


def one_row(setting: str, images: ImageSet, kw: dict, eps: float, trials: int, seeds: list[int], bug: bool) -> dict:
    """``len(seeds)`` audits of dp-sgd at claimed ``eps``; ``bug``: z halved (the patched calibration)."""
    original = dp_sgd.noise_multiplier
    if bug:
        dp_sgd.noise_multiplier = lambda *a: original(*a) / 2
    try:
        mech = get_mechanism("dp-sgd", epsilon=eps, delta=DELTA, **kw)
        t0 = time.perf_counter()
        curve = mechanism_curve(mech, images)  # the z search (cached afterwards) and the composed curve
        (_, z, q, steps), = curve.parts  # fmt: skip
        z_search = time.perf_counter() - t0
        t0 = time.perf_counter()
        pld_opt = curve._epsilon_at(1.0)
        pld_pess = float(curve._pld(1.0, True).get_epsilon_for_delta(DELTA))
        pld_secs = time.perf_counter() - t0
        runs = []
        for seed in seeds:
            t0 = time.perf_counter()
            r = audit(mech, images, trials=trials, seed=seed)
            runs.append({"seed": seed, "raw": r.raw_epsilon_lower, "curve": r.curve_epsilon_lower,
                         "verdict": r.verdict, "refuted_by": r.refuted_by, "seconds": r.seconds,
                         "wall_seconds": time.perf_counter() - t0, "ceiling": r.max_auditable_epsilon,
                         "curve_name": r.curve})  # fmt: skip
    finally:
        dp_sgd.noise_multiplier = original
    raw = np.array([r["raw"] for r in runs])
    cur = np.array([r["curve"] for r in runs])
    row = {
        "setting": setting,
        "n": len(images),
        "epochs": kw["epochs"],
        "batch_size": kw["batch_size"],
        "bug": "z/2" if bug else "",
        "claimed_epsilon": eps,
        "trials_per_side": trials,
        "q": q,
        "steps": steps,
        "z": z,
        "pld_epsilon_optimistic": pld_opt,
        "pld_epsilon_pessimistic": pld_pess,
        "rdp_epsilon": dp_sgd.epsilon_of(z, q, steps, DELTA),
        "raw_mean": float(raw.mean()),
        "raw_max": float(raw.max()),
        "curve_mean": float(cur.mean()),
        "curve_min": float(cur.min()),
        "curve_max": float(cur.max()),
        "verdicts": dict(Counter(r["verdict"] for r in runs)),
        "refuted_by": dict(Counter(r["refuted_by"] for r in runs if r["refuted_by"])),
        "seconds_per_audit": float(np.mean([r["seconds"] for r in runs])),
        "z_search_seconds": z_search,
        "pld_seconds": pld_secs,
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
    return row


def render(res: dict) -> str:
    lines = [
        "# White-box audit of DP-SGD",
        "",
        f"Command: `{res['command']}` ({res['machine']}, 2 CPU cores, one torch thread; {res['seconds']:.0f} s in "
        f"all). δ = {res['delta']:g}, seeds {', '.join(str(s) for s in res['seeds'])} per row, bounds at 95 % "
        "jointly.",
        "",
        "Threat model. The audit plays the strongest adversary DP-SGD's accounting covers: one who sees every noisy "
        "gradient of every step (not just the final model) and who writes the rest of the training set. It plants "
        "Dirac gradient canaries: a crafted linear model with learning rate 0 in which each canary example's clipped "
        "gradient is exactly C on a coordinate of its own that nothing else touches, so whether the canary was in "
        "the training set shows only through that coordinate's noisy gradients. Those pass through the real "
        "training loop of a fit (Opacus's Poisson sampler, per-example clipping, Gaussian noise, the step count and "
        "the z the accountant calibrated for this n, batch size and epochs), and the audit scores each coordinate "
        "by the exact log-likelihood ratio of its gradients, canary in against out. What it tests is therefore the "
        "privacy machinery (sampling, clipping, noise, calibration, accounting); the CNN itself is never run, and "
        "nothing here says how much a realistic attacker learns from the released CNN alone.",
        "",
        "Columns: q, T, z: the run audited (z from Opacus's RDP accountant at the claimed ε). PLD ε: the "
        "composition's ε at δ from dp-accounting's PLD at the real z, `curve._epsilon_at(1.0)` (the optimistic "
        "estimate the curve bound is read with), pessimistic estimate in brackets. raw / curve: the audit's two "
        "lower bounds. s / audit: `AuditResult.seconds` (the z search, once per row, excluded).",
    ]
    body = []
    for r in res["rows"]:
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(r["verdicts"].items()))
        by = "; ".join(f"by {k}: {v}" for k, v in sorted(r["refuted_by"].items()))
        body.append([
            r["setting"], r["n"], r["epochs"], r["bug"] or "–", f"{r['claimed_epsilon']:g}", r["trials_per_side"],
            f"{r['q']:.4g}", r["steps"], f"{r['z']:.4g}",
            f"{r['pld_epsilon_optimistic']:.3f} ({r['pld_epsilon_pessimistic']:.3f})", f"{r['raw_mean']:.3f}",
            f"{r['curve_mean']:.3f} ({r['curve_min']:.3f})", f"{verdicts}{' (' + by + ')' if by else ''}",
            f"{r['seconds_per_audit']:.1f}",
        ])  # fmt: skip
    cols = ["setting", "n", "epochs", "bug", "claimed ε", "trials / side", "q", "T", "z", "PLD ε opt. (pess.)",
            "raw: mean", "curve: mean (min)", "verdicts", "s / audit"]  # fmt: skip
    lines += ["", table(cols, body)]
    weak = [r for r in res["rows"] if r["pld_epsilon_optimistic"] < 0.9 * r["pld_epsilon_pessimistic"]]
    if weak:
        lines += [
            "",
            "Caution: in "
            + ", ".join(sorted({f"{r['setting']} (T = {r['steps']}, q = {r['q']:.4g})" for r in weak}))
            + " the optimistic PLD ε the curve is read with lies far below the pessimistic one (as low as "
            + f"{min(r['pld_epsilon_optimistic'] / r['pld_epsilon_pessimistic'] for r in weak):.2f} of it): over "
            "many steps the optimistic discretization's per-step rounding adds up, so curve bounds there stay valid "
            "but lose power.",
        ]
    ceilings = sorted({round(x["ceiling"], 2) for r in res["rows"] for x in r["runs"]})
    lines += ["", f"Ceilings (`max_auditable_epsilon`) seen: {', '.join(f'{c:g}' for c in ceilings)}."]
    return "\n".join(lines) + "\n"


RESULT = Output(RESULTS / "white_box_audit", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--epsilons", default="1,2,4,8,10")
    ap.add_argument("--bug-epsilons", default="1,2,4,8")
    ap.add_argument("--bench-trials", default="2000,10000")
    ap.add_argument("--mnist-trials", default="2000")
    ap.add_argument("--mnist-epochs", type=int, default=20)
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    import torch

    torch.set_num_threads(1)
    t_all = time.perf_counter()
    seeds = [int(s) for s in args.seeds.split(",")]
    trials = {"bench": [int(t) for t in args.bench_trials.split(",")],
              "mnist": [int(t) for t in args.mnist_trials.split(",")]}  # fmt: skip
    rows = []
    for setting, (images, kw) in settings(args.mnist_epochs).items():
        for n in trials[setting]:
            for eps in [float(e) for e in args.epsilons.split(",")]:
                rows.append(one_row(setting, images, kw, eps, n, seeds, bug=False))
        for eps in [float(e) for e in args.bug_epsilons.split(",")]:
            rows.append(one_row(setting, images, kw, eps, min(trials[setting]), seeds, bug=True))
    res = {
        "command": ".venv/bin/python benchmarks/white_box_audit.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "machine": platform.machine(),
        "delta": DELTA,
        "seeds": seeds,
        "seconds": time.perf_counter() - t_all,
        "rows": rows,
    }
    write(RESULT, res, indent=1)
    print(RESULT.md_path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
