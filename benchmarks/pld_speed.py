"""privpix's Gaussian PLDs (privpix.privacy.gaussian_pld) against dp-accounting's from_gaussian_mechanism: equal bit
for bit, and how much faster, over a sweep wider than the test's.

The sweep: noise σ ∈ {0.5, 1, 2.5} (a small σ spreads the loss over more grid points), sensitivity ∈ {1, 1.3} (1.3:
dividing by it rounds, so an operation taken in another order would show), the ledger's grid 1e-4 and the audit's
coarse 1e-3, and four constructions:
no subsampling under add/remove and under replace-one, Poisson subsampling at q ∈ {0.01, 0.0745, 0.3} under
replace-one (computed at once), and under add/remove (left to dp-accounting: there only the equality is shown).
For each case both builders run once per repetition, alternating, and the median of 3 is reported; the PLDs are
compared on everything ε and δ are read from (each side's lowest loss, probabilities, mass at infinity, grid).

Run: ``.venv/bin/python benchmarks/pld_speed.py`` → ``benchmarks/results/pld_speed.{json,md}`` (about 3 minutes);
``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import itertools
import platform
import statistics
import time
from importlib import metadata
from pathlib import Path

from _results import Col, Output, document, render_only, table, write

OUT = Path(__file__).parent / "results" / "pld_speed"
REPEATS = 3
ADD_REMOVE_SAMPLED = "Poisson-sampled, add/remove (dp-accounting's path)"


def cases() -> list[dict]:
    from dp_accounting import NeighboringRelation as Rel

    out = []
    for sd, s, interval in itertools.product([0.5, 1.0, 2.5], [1.0, 1.3], [1e-4, 1e-3]):
        base = {"standard_deviation": sd, "sensitivity": s, "value_discretization_interval": interval}
        out.append({**base, "construction": "no subsampling, add/remove"})
        out.append({**base, "construction": "no subsampling, replace-one", "neighboring_relation": Rel.REPLACE_ONE})
        for q in (0.01, 0.0745, 0.3):
            out.append({**base, "construction": "Poisson-sampled, replace-one", "sampling_prob": q,
                        "neighboring_relation": Rel.REPLACE_ONE})  # fmt: skip
        out.append({**base, "construction": ADD_REMOVE_SAMPLED, "sampling_prob": 0.0745})
    return out


def run() -> dict:
    from dp_accounting.pld import privacy_loss_distribution as pld

    from privpix.privacy.gaussian_pld import gaussian_pld, pld_bits

    rows = []
    for case in cases():
        kw = {k: v for k, v in case.items() if k != "construction"}
        theirs, ours = [], []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            a = pld.from_gaussian_mechanism(**kw)
            t1 = time.perf_counter()
            b = gaussian_pld(**kw)
            t2 = time.perf_counter()
            theirs.append(t1 - t0)
            ours.append(t2 - t1)
        rows.append({
            "construction": case["construction"], "sigma": kw["standard_deviation"], "sensitivity": kw["sensitivity"],
            "q": kw.get("sampling_prob", 1.0), "grid": kw["value_discretization_interval"],
            "points": int(a._pmf_remove.size), "equal": pld_bits(a) == pld_bits(b),
            "dp_accounting_s": statistics.median(theirs), "privpix_s": statistics.median(ours),
        })  # fmt: skip
        print(rows[-1], flush=True)
    return {
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "dp_accounting": metadata.version("dp-accounting"),
        "numpy": metadata.version("numpy"),
        "repeats": REPEATS,
        "rows": rows,
    }


def render(result: dict) -> str:
    rows = result["rows"]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["construction"], []).append(r)
    summary = table(
        [Col("construction"), Col("cases", align="right"), Col("equal bit for bit", align="right"),
         Col("dp-accounting, total", "{:.2f} s", "right"), Col("privpix, total", "{:.2f} s", "right"),
         Col("speed-up", "{:.1f}×", "right")],
        [[name, len(g), f"{sum(r['equal'] for r in g)} of {len(g)}", sum(r["dp_accounting_s"] for r in g),
          sum(r["privpix_s"] for r in g), sum(r["dp_accounting_s"] for r in g) / sum(r["privpix_s"] for r in g)]
         for name, g in groups.items()],
    )  # fmt: skip
    fine = [r for r in rows if r["grid"] == 1e-4 and r["sensitivity"] == 1.0]
    detail = table(
        [Col("construction"), Col("σ", align="right"), Col("q", align="right"), Col("loss points", ",", "right"),
         Col("dp-accounting", "{:.3f} s", "right"), Col("privpix", "{:.3f} s", "right"), Col("equal")],
        [[r["construction"], r["sigma"], r["q"], r["points"], r["dp_accounting_s"], r["privpix_s"],
          "yes" if r["equal"] else "**no**"] for r in fine],
    )  # fmt: skip
    return document(
        "Gaussian PLDs: privpix's grid construction against dp-accounting's",
        "## Every case, by construction",
        summary,
        "## On the ledger's grid (1e-4), sensitivity 1",
        detail,
        preamble=(
            f"`.venv/bin/python benchmarks/pld_speed.py` on {result['machine']} (2 cores), dp-accounting "
            f"{result['dp_accounting']}, numpy {result['numpy']}; median of {result['repeats']} alternating runs per "
            "case. Equal: both sides' lowest loss, probabilities (as bytes), mass at infinity and grid are the same."
        ),
        notes=(
            "The ledger (privpix.privacy.composition), dp-teacher's and DP-SGD's calibrations and the audit curves "
            "build their Gaussian PLDs this way. A Poisson-sampled Gaussian under add/remove is built by "
            "dp-accounting itself (its inverse takes numpy's logarithms one value at a time, which a vectorised "
            "numpy logarithm may round differently), so its speed-up is about 1."
        ),
    )


RESULT = Output(OUT, render)
OUTPUTS = (RESULT,)


def main() -> None:
    if not render_only(None, *OUTPUTS):
        write(RESULT, run())


if __name__ == "__main__":
    main()
