"""Can the bench refute every claim up to ε = 10?

For each mechanism the bench and the demo run on images, at claimed ε ∈ {0.5, 1, 2, 4, 8, 10}: the claim the audit
tests (``Claim.epsilon`` of ``Mechanism.privacy``, e.g. d·ε for the paper's PCA inverse), the trials per side the
bench raises to (``grid.bench_trials``: doubling from 1,000 until the claim is refutable, at most 128,000), the
largest bound those trials could show (``audit.max_auditable``), and whether the claim is refutable. No audit is run
for that table: the ceiling is computed before running, from the trials and the curve the mechanism declares.

Then the audits that need the most trials are run as the bench runs them (``grid.bench_audit`` on its 64 audit
images), each in a fresh process, with wall time and peak memory (``ru_maxrss`` of that process).

Writes ``results/refutable.{json,md}``. Run: ``.venv/bin/python benchmarks/refutable.py`` (about 10 minutes on 2
cores; ``--skip-runs`` for the table alone, seconds; ``--render-only`` rewrites the markdown from the JSON).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, document, rerender, write
from _results import table as md_table

RESULTS = Path(__file__).parent / "results"
DELTA = 1e-5
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 10.0)
# (label, spec, needs δ): the demo's image mechanisms and the sound variants beside them.
MECHANISMS = (
    ("pixel-laplace (paper)", "pixel-laplace", False),
    ("pixel-laplace, bound, per pixel", "pixel-laplace[sensitivity=bound,unit=pixel]", False),
    ("dp-pix", "dp-pix[b=4,m=1]", False),
    ("sra (paper)", "sra", False),
    ("lra (paper)", "lra", False),
    ("pca-inverse (paper)", "pca-inverse", False),
    ("pca-inverse, DP basis", "pca-inverse[basis=dp]", True),
    ("ldp-pixel", "ldp-pixel", False),
    ("dp-sgd (white-box)", "dp-sgd[epochs=3,batch_size=100]", True),
)
# Run as the bench runs them: the most trials, or a composed curve.
RUNS = (
    ("sra", "sra", 10.0, False),
    ("pixel-laplace", "pixel-laplace", 10.0, False),
    ("ldp-pixel", "ldp-pixel", 10.0, False),
    ("pca-inverse[basis=dp]", "pca-inverse[basis=dp]", 9.5, True),
    ("dp-sgd[epochs=3,batch_size=100]", "dp-sgd[epochs=3,batch_size=100]", 10.0, True),
)


def _mechanism(spec: str, eps: float, delta: bool):
    from privpix.mechanisms import get_mechanism

    return get_mechanism(spec, epsilon=eps, delta=DELTA if delta else None)


def _images():
    from privpix.data import load_dataset

    return load_dataset("builtin-mnist").subset(np.arange(1000))


def table() -> list[dict]:
    from privpix.evaluation.audit import claimed, max_auditable, mechanism_curve
    from privpix.evaluation.grid import audit_images, bench_trials

    train = _images()
    rows = []
    for label, spec, delta in MECHANISMS:
        for eps in EPSILONS:
            mech = _mechanism(spec, eps, delta)
            # A model's white-box audit is calibrated for the training set; image releases use the 64 audit images.
            imgs = train if mech.capabilities().output == "model" else audit_images(mech, train)
            claim = claimed(mech, imgs)[0]
            trials = bench_trials(mech, imgs, 1000)
            top = max_auditable(mech, imgs, trials)
            curve = mechanism_curve(mech, imgs)
            rows.append({
                "mechanism": label, "spec": spec, "epsilon": eps, "claim": claim, "trials": trials,
                "ceiling": top, "refutable": claim is not None and claim < top,
                "curve": "" if curve is None else curve.name.split(":")[0],
            })  # fmt: skip
            print(f"{label:34s} ε={eps:<4g} claim={claim} trials={trials} ceiling={top:.2f}", flush=True)
    return rows


def run_one(spec: str, eps: float, delta: bool) -> dict:
    """One bench audit in this process (called in a child, so its peak memory is its own)."""
    from privpix.evaluation.grid import audit_images, bench_audit

    train = _images()
    mech = _mechanism(spec, eps, delta)
    imgs = train if mech.capabilities().output == "model" else audit_images(mech, train)
    t0 = time.perf_counter()
    res = bench_audit(mech, imgs, 1000, 0)
    return {
        "spec": spec, "epsilon": eps, "claim": res.claimed_epsilon, "trials": res.trials,
        "verdict": res.verdict, "refuted_by": res.refuted_by, "raw": res.raw_epsilon_lower,
        "curve_bound": res.curve_epsilon_lower, "ceiling": res.max_auditable_epsilon, "refutable": res.refutable,
        "pair": res.pair, "seconds": round(time.perf_counter() - t0, 1),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }  # fmt: skip


def _fmt(v: float | None) -> str:
    return "–" if v is None or v != v else f"{v:.2f}"


def render(res: dict) -> str:
    rows, runs = res["table"], res["runs"]
    preamble = (
        f"Command: `.venv/bin/python benchmarks/refutable.py` ({res['machine']}, 2 CPU cores; {res['seconds']:.0f} s "
        "in all). The bench's audit of each (mechanism, ε): the claim it tests, the trials per side it raises to "
        "(doubling from 1,000 until the claim is refutable, at most 128,000), the largest bound those trials can "
        "show, and whether the claim lies below it. Image mechanisms on the bench's 64 audit images (28x28 "
        "built-in MNIST), δ = 1e-5 where a mechanism takes one; dp-sgd calibrated for 1,000 training images."
    )
    claims = []
    for label, _, _ in MECHANISMS:
        mine = [r for r in rows if r["mechanism"] == label]
        cells = []
        for r in mine:
            if r["claim"] is None:
                cells.append("no claim")
            elif r["claim"] > 10:
                cells.append(f"claim {r['claim']:g} > 10: {'refutable' if r['refutable'] else 'beyond range'}")
            else:
                ok = "**yes**" if r["refutable"] else "NO"
                cells.append(f"{ok} ({r['trials'] // 1000}k, ceiling {_fmt(r['ceiling'])})")
        claims.append([label, mine[0]["curve"] or "none (raw only)", *cells])
    audits = [
        [f"{r['spec']} at ε = {r['epsilon']:g}", f"{r['claim']:g}", f"{r['trials']:,}", _fmt(r["raw"]),
         _fmt(r["curve_bound"]), _fmt(r["ceiling"]),
         f"{r['verdict']}{' (' + r['refuted_by'] + ')' if r['refuted_by'] else ''}", r["pair"], r["seconds"],
         f"{r['peak_mb']:,}"]
        for r in runs
    ]  # fmt: skip
    return document(
        "Can the bench refute every claim up to ε = 10?",
        md_table(["mechanism", "curve", *(f"ε = {e:g}" for e in EPSILONS)], claims),
        "Cells: refutable (trials per side in thousands, the ceiling). A ceiling of 40.00 is the composed curve's "
        "cap (`curves.EPSILON_CAP`).",
        "## The costliest audits, run as the bench runs them",
        "Each in a fresh process (peak memory is that process's).",
        md_table(
            [
                "audit",
                "claim",
                "trials per side",
                "raw bound",
                "curve bound",
                "ceiling",
                "verdict",
                "distinguisher",
                "seconds",
                "peak MB",
            ],
            audits,
        ),
        preamble=preamble,
    )


RESULT = Output(RESULTS / "refutable", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-runs", action="store_true", help="only the table (no audit is run)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    if args.child:
        spec, eps, delta = args.child
        print(json.dumps(run_one(spec, float(eps), delta == "1")))
        return
    t0 = time.perf_counter()
    rows = table()
    runs = []
    if not args.skip_runs:
        for _, spec, eps, delta in RUNS:
            out = subprocess.run([sys.executable, __file__, "--child", spec, str(eps), "1" if delta else "0"],
                                 check=True, capture_output=True, text=True)  # fmt: skip
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    res = {"machine": platform.machine(), "seconds": time.perf_counter() - t0, "table": rows, "runs": runs}
    write(RESULT, res)


if __name__ == "__main__":
    main()
