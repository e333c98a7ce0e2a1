"""Throughput of privpix's samplers, beside OpenDP's exact ``make_laplace`` on the same machine.

Run: ``.venv/bin/python benchmarks/noise_throughput.py`` → ``benchmarks/results/noise_throughput.json``.
Each figure is the best of ``REPEATS`` timed runs of ``N`` values (values per second).
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import numpy as np

from privpix import noise

N = 200_000
REPEATS = 3
SCALES = (1.0, 3.0, 30.0)


def best_rate(fn, n: int) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    results: dict[str, object] = {
        "n_values": N,
        "repeats": REPEATS,
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, python {platform.python_version()}",
        "rows": [],
    }
    secure = noise.SecureRandom()
    seeded = noise.make_rng(0)
    rows = results["rows"]
    for scale in SCALES:
        rows.append(
            {
                "sampler": "privpix discrete_laplace, secure (exact, OS CSPRNG)",
                "scale": scale,
                "values_per_s": best_rate(lambda s=scale: noise.discrete_laplace(secure, s, N), N),
            }
        )
        rows.append(
            {
                "sampler": "privpix discrete_laplace, reproducible (NumPy, seeded)",
                "scale": scale,
                "values_per_s": best_rate(lambda s=scale: noise.discrete_laplace(seeded, s, N), N),
            }
        )
        try:
            import opendp.prelude as dp

            dp.enable_features("contrib")
            meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=scale)
            zeros = [0] * N
            rows.append(
                {
                    "sampler": "OpenDP make_laplace on int vectors (exact, OS CSPRNG)",
                    "scale": scale,
                    "values_per_s": best_rate(lambda m=meas, z=zeros: m(z), N),
                }
            )
        except ImportError:
            rows.append(
                {"sampler": "OpenDP make_laplace", "scale": scale, "values_per_s": None, "note": "opendp not installed"}
            )
    rows.append(
        {
            "sampler": "privpix randomized_response d=16 ε=1, secure (exact)",
            "scale": None,
            "values_per_s": best_rate(lambda: noise.randomized_response(secure, np.zeros(N, int), 16, 1.0), N),
        }
    )
    rows.append(
        {
            "sampler": "privpix add_laplace on pixels, secure (grid 1/(255·64))",
            "scale": 0.1,
            "values_per_s": best_rate(lambda: noise.add_laplace(np.zeros(N), 0.1, secure), N),
        }
    )
    out = Path(__file__).parent / "results" / "noise_throughput.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    for r in rows:
        rate = r["values_per_s"]
        print(f"{r['sampler']:<62} scale={r['scale']!s:<5} {'n/a' if rate is None else f'{rate:,.0f}'} values/s")


if __name__ == "__main__":
    main()
