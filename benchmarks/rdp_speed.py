"""DP-SGD's calibration (privpix.privacy.sgm_rdp) against Opacus's get_noise_multiplier: the same noise multiplier
bit for bit, and how much faster, over the settings privpix's tests, benchmarks and docs calibrate, and a few more.

Each case is a DP-SGD calibration: target ε, δ, sampling rate q, steps T, the tolerance DP-SGD asks for (0.1 % of
ε) and DP-SGD's 180 RDP orders. Both searches run once per repetition, alternating, and the median of 3 is reported;
the noise multipliers are compared with ``==`` and by type (Opacus returns an integer when the search ends on its
first bracket). Also compared: the RDP curves (every order's value, as bytes) at the noise multiplier found.

Run: ``.venv/bin/python benchmarks/rdp_speed.py`` → ``benchmarks/results/rdp_speed.{json,md}`` (about 45 seconds);
``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import platform
import statistics
import time
from importlib import metadata
from pathlib import Path

from _results import Col, Output, document, render_only, table, write

OUT = Path(__file__).parent / "results" / "rdp_speed"
REPEATS = 3

# (ε, δ, q, T, where privpix asks it)
CASES = [
    (1.0, 1e-5, 256 / 55000, 4300, "MNIST, batch 256, 20 epochs (benchmarks/dp_sgd.py)"),
    (3.0, 1e-5, 256 / 55000, 4300, "MNIST, batch 256, 20 epochs (benchmarks/dp_sgd.py)"),
    (10.0, 1e-5, 256 / 55000, 4300, "MNIST, batch 256, 20 epochs (benchmarks/dp_sgd.py)"),
    (10.0, 1e-5, 0.032, 155, "built-in digits (tests)"),
    (1.0, 1e-5, 0.1, 20, "ledger tests"),
    (1.0, 1e-5, 1 / 6, 6, "ledger tests"),
    (1.0, 1e-5, 0.2, 5, "one-run audit test"),
    (1.0, 1e-5, 1 / 3, 3, "kinds test"),
    (2.0, 1e-5, 1 / 3, 9, "white-box audit test"),
    (3.0, 1e-5, 1 / 6, 6, "ScatterNet test"),
    (3.0, 1e-5, 0.2, 20, "ScatterNet test"),
    (0.1, 1e-6, 0.01, 1000, "a small ε"),
    (8.0, 1e-3, 0.5, 2, "few steps at a large rate"),
]


def run() -> dict:
    from opacus.accountants.analysis import rdp as opacus_rdp
    from opacus.accountants.utils import get_noise_multiplier

    from privpix.mechanisms.neural.dp_sgd import ALPHAS, TOLERANCE
    from privpix.privacy import sgm_rdp

    rows = []
    for eps, delta, q, steps, where in CASES:
        kw = {"target_epsilon": eps, "target_delta": delta, "sample_rate": q, "steps": steps,
              "epsilon_tolerance": TOLERANCE * eps, "alphas": ALPHAS}  # fmt: skip
        theirs, ours = [], []
        for _ in range(REPEATS):
            sgm_rdp._int_terms.cache_clear()  # each search from nothing, as a fresh process makes it
            sgm_rdp._frac_terms.cache_clear()
            t0 = time.perf_counter()
            a = get_noise_multiplier(accountant="rdp", **kw)
            t1 = time.perf_counter()
            b = sgm_rdp.noise_multiplier(**kw)
            t2 = time.perf_counter()
            theirs.append(t1 - t0)
            ours.append(t2 - t1)
        curve_a = opacus_rdp.compute_rdp(q=q, noise_multiplier=a, steps=steps, orders=ALPHAS)
        curve_b = sgm_rdp.compute_rdp(q=q, noise_multiplier=b, steps=steps, orders=ALPHAS)
        rows.append({
            "epsilon": eps, "delta": delta, "q": q, "steps": steps, "where": where, "z": float(b),
            "equal": a == b and type(a) is type(b), "curve_equal": curve_a.tobytes() == curve_b.tobytes(),
            "opacus_s": statistics.median(theirs), "privpix_s": statistics.median(ours),
        })  # fmt: skip
        print(rows[-1], flush=True)
    return {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "opacus": metadata.version("opacus"),
        "scipy": metadata.version("scipy"),
        "numpy": metadata.version("numpy"),
        "repeats": REPEATS,
        "rows": rows,
    }


def render(result: dict) -> str:
    rows = result["rows"]
    total_o = sum(r["opacus_s"] for r in rows)
    total_p = sum(r["privpix_s"] for r in rows)
    detail = table(
        [Col("ε", align="right"), Col("δ", "{:g}", "right"), Col("q", "{:.4g}", "right"), Col("T", ",", "right"),
         Col("asked by"), Col("z", "{:.6g}", "right"), Col("Opacus", "{:.3f} s", "right"),
         Col("privpix", "{:.3f} s", "right"), Col("speed-up", "{:.1f}×", "right"), Col("z equal"),
         Col("RDP curve equal")],
        [[r["epsilon"], r["delta"], r["q"], r["steps"], r["where"], r["z"], r["opacus_s"], r["privpix_s"],
          r["opacus_s"] / r["privpix_s"], "yes" if r["equal"] else "**no**", "yes" if r["curve_equal"] else "**no**"]
         for r in rows],
    )  # fmt: skip
    equal = sum(r["equal"] and r["curve_equal"] for r in rows)
    return document(
        "DP-SGD's calibration: privpix's RDP series against Opacus's",
        detail,
        preamble=(
            f"`.venv/bin/python benchmarks/rdp_speed.py` on {result['machine']} (2 cores), Opacus {result['opacus']}, "
            f"scipy {result['scipy']}, numpy {result['numpy']}; median of {result['repeats']} alternating runs per "
            f"case. In all: Opacus {total_o:.2f} s, privpix {total_p:.2f} s ({total_o / total_p:.1f}×); "
            f"{equal} of {len(rows)} cases equal bit for bit (noise multiplier and RDP curve)."
        ),
        notes=(
            "z equal: the same number and type as Opacus's get_noise_multiplier returns. RDP curve equal: "
            "privpix.privacy.sgm_rdp.compute_rdp and Opacus's compute_rdp at that z, over DP-SGD's 180 orders, as "
            "bytes. privpix's time includes computing its per-(q, α) terms from nothing (the caches are cleared "
            "before each search)."
        ),
    )


RESULT = Output(OUT, render)
OUTPUTS = (RESULT,)


def main() -> None:
    if not render_only(None, *OUTPUTS):
        write(RESULT, run())


if __name__ == "__main__":
    main()
