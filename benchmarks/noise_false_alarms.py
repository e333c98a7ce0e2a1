"""False-alarm rate of the discrete-Laplace goodness-of-fit test over many fresh seeds.

The samplers are correct, so every rejection is a false alarm. A calibrated test rejects at about its level α.
The old unpooled χ² (25 bins, tails with expected counts far below 5) is measured beside the pooled one that
tests/test_noise.py now uses.

    python benchmarks/noise_false_alarms.py --seeds 2000
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy import stats

from _results import write_json
from privpix.privacy import noise
from privpix.testing.stattests import discrete_laplace_pmf, pooled_chisquare_pvalue

RESULTS = Path(__file__).resolve().parent / "results" / "noise_false_alarms.json"
N = 40_000
SCALES = (0.7, 3.0, 2.5)
ALPHAS = (0.05, 0.01, 1e-3)


def unpooled_pvalue(x: np.ndarray, scale: float) -> float:
    """The test as it was before: bins −12…12 plus one |x| > 12 bin, whatever their expected counts."""
    support = np.arange(-12, 13)
    p = np.exp(-np.abs(support) / scale)
    p /= np.exp(-np.abs(np.arange(-2000, 2001)) / scale).sum()
    obs = np.array([(x == k).sum() for k in support] + [(np.abs(x) > 12).sum()])
    exp = np.r_[p, 1 - p.sum()] * len(x)
    return float(stats.chisquare(obs, exp).pvalue)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    for scale in SCALES:
        pooled, unpooled = [], []
        for seed in range(args.seeds):
            x = noise.discrete_laplace(noise.make_rng(10_000 + seed), scale, N)
            pooled.append(pooled_chisquare_pvalue(x, discrete_laplace_pmf(scale)))
            unpooled.append(unpooled_pvalue(x, scale))
        for name, pv in (("pooled", np.array(pooled)), ("unpooled (before)", np.array(unpooled))):
            rows.append(
                {
                    "scale": scale,
                    "test": name,
                    "seeds": args.seeds,
                    **{f"rejected at alpha={a:g}": float(np.mean(pv <= a)) for a in ALPHAS},
                }
            )
            print(rows[-1])
    result = {
        "command": f"python benchmarks/noise_false_alarms.py --seeds {args.seeds}",
        "n_per_test": N,
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": rows,
    }
    write_json(RESULTS, result)


if __name__ == "__main__":
    main()
