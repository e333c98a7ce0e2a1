"""Audit power and calibration: certified ε against true ε for mechanisms whose ε is
known exactly, raw and curve bounds side by side.

Mechanisms (one scalar release per trial, neighbours x₀ = 0 and x₁ = 1, sensitivity 1):

* Laplace: x + Laplace(1/ε), pure ε-DP, read through the Laplace curve.
* Gaussian: x + N(0, z²), z from the analytic Gaussian mechanism at (ε, δ = 1e-5), read through Gaussian DP.
* GRR: binary randomized response keeping x with probability e^ε / (1 + e^ε), read through the (ε, δ)-DP curve.

For each mechanism, true ε ∈ {1, 2, 4, 8, 10} and trials per side ∈ {1,000, 2,000, 10,000}, ``--seeds`` independent
audits run :func:`privpix.evaluation.audit.bounds_from_samples` (the audit's own selection and held-out split and
both bounds at 95 % jointly). Reported: the mean and 5th percentile of each bound, its **coverage** (the share of
seeds whose bound is at or below the true ε; the bounds hold at 95 %, so coverage should be ≥ 95 %), and the
seconds per audit. A second table runs mechanisms that spend 2ε while claiming ε and counts how often the claim is
refuted (at 2,000 trials per side).

A third table calibrates the composed curves (:func:`privpix.evaluation.audit.curves.composed_curve`) on the composition
pca-inverse basis=dp declares: Laplace(ε_L) ⊗ Gaussian μ, μ = 0.5 / √(2 ln(1.25/δ)) (basis_epsilon 0.5), for
ε_L ∈ {0.5, 2, 4, 8, 9.5}. The samples are the exact log-likelihood-ratio statistic of the composition
(:func:`~privpix.evaluation.audit.curves.composed_samples`); the true ε at δ comes from dp-accounting's PLD, pessimistic
(upper) and optimistic (lower) estimates, and coverage is counted against the pessimistic one. The same rows count
how often a mechanism spending twice (every part at scale 2), read through the scale-1 curve, is refuted: a bound
above the scale-1 true ε (pessimistic). Its ms / audit is the mean over the row's bounds: the curve caches the PLDs
its bisections compute, so the first bound of a row pays about a second and later ones little.

Writes ``results/audit_power.{json,md}``. Run: ``.venv/bin/python benchmarks/audit_power.py`` (a few minutes);
``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Col, Output, document, rerender, table, write
from privpix.evaluation.audit import bounds_from_samples
from privpix.evaluation.audit.curves import composed_curve, composed_samples, reference_samples

RESULTS = Path(__file__).parent / "results"
DELTA = 1e-5
FAMILIES = {"Laplace": ("laplace", 0.0), "Gaussian": ("gaussian", DELTA), "GRR": ("randomized-response", 0.0)}
# pca-inverse basis=dp: the Gaussian basis at basis_epsilon 0.5 (μ = Δ/σ of the classic calibration at δ).
BASIS_MU = 0.5 / math.sqrt(2 * math.log(1.25 / DELTA))


def samples(mech: str, eps: float, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n releases of x₀ = 0 and n of x₁ = 1 by the mechanism with true ε = ``eps``."""
    return reference_samples(FAMILIES[mech][0], eps, n, rng, DELTA)


def summary(raw: list[float], curve: list[float], true: float) -> dict:
    """Mean, 5th percentile and coverage (share at or below the ``true`` ε) of the raw and the curve bounds."""
    out = {}
    for name, values in (("raw", np.array(raw)), ("curve", np.array(curve))):
        out.update({f"{name}_mean": float(values.mean()), f"{name}_p05": float(np.quantile(values, 0.05)),
                    f"{name}_coverage": float(np.mean(values <= true))})  # fmt: skip
    return out


def composition(seeds: int, laplace_epsilons: list[float], trials: list[int]) -> list[dict]:
    """Rows of the Laplace ⊗ Gaussian composition (module docstring)."""
    rows = []
    for eps_l in laplace_epsilons:
        parts = (("laplace", eps_l), ("gaussian", BASIS_MU))
        curve = composed_curve(parts, DELTA)
        true_hi = float(curve._pld(1.0, True).get_epsilon_for_delta(DELTA))
        true_lo = curve._epsilon_at(1.0)
        for n in trials:
            raw, cur, secs, refuted = [], [], [], 0
            for seed in range(seeds):
                s0, s1 = composed_samples(parts, n, np.random.default_rng([seed, n, int(eps_l * 10), 3]))
                t0 = time.perf_counter()
                b = bounds_from_samples(s0, s1, DELTA, curve=curve)
                secs.append(time.perf_counter() - t0)
                raw.append(b.raw_epsilon_lower)
                cur.append(b.curve_epsilon_lower)
                s0, s1 = composed_samples(parts, n, np.random.default_rng([seed, n, int(eps_l * 10), 4]), scale=2.0)
                t0 = time.perf_counter()
                b = bounds_from_samples(s0, s1, DELTA, curve=curve)
                secs.append(time.perf_counter() - t0)
                refuted += b.epsilon_lower > true_hi
            rows.append(
                {
                    "mechanism": "Laplace ⊗ Gaussian",
                    "laplace_epsilon": eps_l,
                    "gaussian_mu": BASIS_MU,
                    "true_epsilon_pessimistic": true_hi,
                    "true_epsilon_optimistic": true_lo,
                    "trials_per_side": n,
                    "seeds": seeds,
                    **summary(raw, cur, true_hi),
                    "curve_max": float(max(cur)),
                    "raw_max": float(max(raw)),
                    "twice_refuted_share": refuted / seeds,
                    "seconds_per_audit": float(np.mean(secs)),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def run(seeds: int, epsilons: list[float], trials: list[int], laplace_epsilons: list[float]) -> dict:
    power, cheat = [], []
    for mech, (family, delta) in FAMILIES.items():
        for eps in epsilons:
            for n in trials:
                raw, curve, secs = [], [], []
                for seed in range(seeds):
                    s0, s1 = samples(mech, eps, n, np.random.default_rng([seed, n, int(eps * 10)]))
                    t0 = time.perf_counter()
                    b = bounds_from_samples(s0, s1, delta, family)
                    secs.append(time.perf_counter() - t0)
                    raw.append(b.raw_epsilon_lower)
                    curve.append(b.curve_epsilon_lower)
                power.append(
                    {
                        "mechanism": mech,
                        "true_epsilon": eps,
                        "trials_per_side": n,
                        "seeds": seeds,
                        **summary(raw, curve, eps),
                        "seconds_per_audit": float(np.mean(secs)),
                    }
                )
                print(json.dumps(power[-1]), flush=True)
        for eps in (0.5, 1.0, 2.0, 4.0, 5.0):
            refuted = 0
            for seed in range(seeds):
                s0, s1 = samples(mech, 2 * eps, 2000, np.random.default_rng([seed, 77, int(eps * 10)]))
                b = bounds_from_samples(s0, s1, delta, family)
                refuted += b.epsilon_lower > eps
            cheat.append({"mechanism": mech, "claimed_epsilon": eps, "true_epsilon": 2 * eps, "trials_per_side": 2000,
                          "refuted_share": refuted / seeds})  # fmt: skip
    composed = composition(seeds, laplace_epsilons, trials)
    return {"power": power, "cheat": cheat, "composition": composed, "seeds": seeds, "delta": DELTA,
            "machine": platform.machine()}  # fmt: skip


def render(res: dict) -> str:
    preamble = (
        f"`benchmarks/audit_power.py`, {res['seeds']} seeds per row; scalar mechanisms with known ε (Laplace: "
        f"pure; Gaussian: analytic calibration at δ = {res['delta']:g}; GRR: binary randomized response). Both "
        "bounds at 95 % jointly, the raw test chosen on the first half of the trials, the curve test on the first "
        "fifth. Coverage: share of seeds whose "
        "bound is at or below the true ε (should be ≥ 0.95)."
    )
    power = table(
        ["mechanism", "true ε", "trials / side", "raw: mean (p05)", "raw coverage", "curve: mean (p05)",
         "curve coverage", "ms / audit"],
        ([r["mechanism"], f"{r['true_epsilon']:g}", r["trials_per_side"], f"{r['raw_mean']:.2f} ({r['raw_p05']:.2f})",
          f"{r['raw_coverage']:.3f}", f"{r['curve_mean']:.2f} ({r['curve_p05']:.2f})", f"{r['curve_coverage']:.3f}",
          f"{1000 * r['seconds_per_audit']:.1f}"] for r in res["power"]),
    )  # fmt: skip
    cheat = table(
        [Col("mechanism"), Col("claimed ε", "g"), Col("true ε", "g"), Col("refuted", ".2f")],
        ([r["mechanism"], r["claimed_epsilon"], r["true_epsilon"], r["refuted_share"]] for r in res["cheat"]),
    )
    composed = (
        f"Composed curve (PLD) on pca-inverse basis=dp's composition: Laplace ε_L ⊗ Gaussian μ = "
        f"{BASIS_MU:.4f} (basis_epsilon 0.5) at δ = {res['delta']:g}, the samples the exact log-likelihood-ratio "
        "statistic. True ε: the composition's ε at δ from dp-accounting's PLD, pessimistic (optimistic); coverage "
        "against the pessimistic one. Spending 2×: every part at twice its ε (μ), read through the scale-1 curve; "
        "refuted when the larger bound exceeds the scale-1 true ε (pessimistic). ms / audit: mean over the row's "
        "bounds, both kinds (the curve's PLDs are cached across bounds, so the first costs about a second)."
    )
    composition = table(
        ["ε_L", "true ε", "trials / side", "raw: mean (p05)", "raw coverage", "curve: mean (p05)", "curve coverage",
         "spending 2×: refuted", "ms / audit"],
        ([f"{r['laplace_epsilon']:g}", f"{r['true_epsilon_pessimistic']:.4f} ({r['true_epsilon_optimistic']:.4f})",
          r["trials_per_side"], f"{r['raw_mean']:.2f} ({r['raw_p05']:.2f})", f"{r['raw_coverage']:.3f}",
          f"{r['curve_mean']:.2f} ({r['curve_p05']:.2f})", f"{r['curve_coverage']:.3f}",
          f"{r['twice_refuted_share']:.2f}", f"{1000 * r['seconds_per_audit']:.1f}"]
         for r in res.get("composition", [])),
    )  # fmt: skip
    return document(
        "Audit power and calibration",
        power,
        "Mechanisms that spend 2ε while claiming ε (2,000 trials per side): share of seeds that refute the claim.",
        cheat,
        composed,
        composition,
        preamble=preamble,
        notes=f"Machine: {res['machine']}, one core.",
    )


RESULT = Output(RESULTS / "audit_power", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--epsilons", default="1,2,4,8,10")
    ap.add_argument("--trials", default="1000,2000,10000")
    ap.add_argument("--laplace-epsilons", default="0.5,2,4,8,9.5", help="ε_L of the Laplace ⊗ Gaussian rows")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    res = run(args.seeds, [float(e) for e in args.epsilons.split(",")], [int(t) for t in args.trials.split(",")],
              [float(e) for e in args.laplace_epsilons.split(",")])  # fmt: skip
    write(RESULT, res, indent=1)
    print(RESULT.md_path.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
