"""Throughput of privpix's exact secure samplers beside OpenDP's, on one core, in one run.

    .venv/bin/python benchmarks/noise_throughput.py [--baseline 9b61448]

writes ``benchmarks/results/noise_throughput.json`` and ``.md`` (``--render-only``: the markdown from the JSON alone).
The process is pinned to one CPU. Each rate is the
best of ``REPEATS`` timed calls, each drawing ``n`` values into one array:

* privpix secure mode (``SecureRandom``, os.urandom) through the public functions, compiled kernels, 1,000,000
  values; the bits each value took from the CSPRNG are counted;
* the same functions at ``--baseline`` (a git commit, loaded from ``git show``; the vectorised-NumPy / Python-loop
  implementation before the kernels), fewer values as it is slow;
* OpenDP's ``make_laplace`` / ``make_gaussian`` on vectors of Python ints (its exact samplers, OS randomness),
  100,000 values (the list conversion is part of what a caller pays).

Scales: discrete Laplace 1, 3, 30, and the grid scales of ``add_laplace`` (grid 1/(255·64), so a pixel scale s is
16320·s grid units: s = 1/ε at ε = 1, 0.9 and 0.1, the last two rationals of denominator 2**20); discrete Gaussian
σ = 1, 10, 1000 and the σ of ``gaussian_release.exact_gaussian_release`` for a dp-merf embedding (bits = 20,
width 2001) at ε = 2 and 1, δ = 1e-5. The first-call compile time of the kernels is measured in fresh processes
with an empty numba cache (and then with the cache written).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, rerender, table, write
from privpix.privacy import gaussian_release, noise

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
REPEATS = 3
N = 1_000_000
N_BASELINE = {"laplace": 200_000, "gaussian": 20_000, "other": 200_000}
N_OPENDP = 100_000
GRID = 1 / (255 * 64)
TARGETS = {"discrete Laplace": 10.0, "discrete Gaussian": 5.0}  # M values/s on one core


class CountingSecure(noise.SecureRandom):
    """SecureRandom that counts the 64-bit words it hands out."""

    def __init__(self) -> None:
        super().__init__()
        self.words = 0

    def bits64(self, n: int) -> np.ndarray:
        self.words += int(n)
        return super().bits64(n)


def best_rate(fn, n: int) -> float:
    fn(min(n, 1000))  # warm-up: compile or load the kernels, fill caches
    best = math.inf
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t0)
    return n / best


def bits_per_value(fn, n: int) -> float:
    rng = CountingSecure()
    fn(rng, n)
    return 64 * rng.words / n


def load_baseline(commit: str):
    """The noise module (then privpix.noise) as it was at ``commit`` (read with ``git show``; the work tree is
    untouched)."""
    src = subprocess.run(["git", "show", f"{commit}:src/privpix/noise.py"], cwd=ROOT, check=True, capture_output=True)
    path = Path(tempfile.mkdtemp()) / "noise_baseline.py"
    path.write_bytes(src.stdout)
    spec = importlib.util.spec_from_file_location("noise_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_COMPILE_PROBE = """
import json, time
import numpy as np
t0 = time.perf_counter()
from privpix.privacy import noise
r, out = noise.SecureRandom(), {}
calls = {
    "discrete_laplace": lambda: noise.discrete_laplace(r, 3.0, 10),
    "discrete_gaussian": lambda: noise.discrete_gaussian(r, 10.0, 10),
    "randomized_response": lambda: noise.randomized_response(r, np.zeros(10, int), 4, 1.0),
    "exponential_mechanism": lambda: noise.exponential_mechanism(r, np.arange(4.0), 1.0, 1.0, size=10),
}
for name, call in calls.items():
    t = time.perf_counter()
    call()
    out[name] = time.perf_counter() - t
out["total"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def compile_seconds() -> dict[str, dict[str, float]]:
    """Seconds to the first value of each kernel in a fresh process: with an empty numba cache (compiling), then
    again with the cache that run wrote (loading)."""
    result = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for label in ("cold (compile)", "warm (cached)"):
            out = subprocess.run([sys.executable, "-c", _COMPILE_PROBE], env=env, check=True, capture_output=True)
            result[label] = {k: round(v, 3) for k, v in json.loads(out.stdout).items()}
    return result


def merf_sigma(eps: float) -> float:
    """σ_int of exact_gaussian_release for a dp-merf embedding (width 2001, lattice 2**-20) at (ε, 1e-5)."""
    acc = gaussian_release.FixedPointSum(1, 2001, bits=20)
    return math.nextafter(gaussian_release.rdp_noise_multiplier(eps, 1e-5) * 2 * acc.bound, math.inf)


def cases(base, secure, old_secure):
    """(sampler, parameter, {implementation: (draw n values, n)}, bits fn) for every row of the table."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    ints = dp.vector_domain(dp.atom_domain(T=int))
    nb = N_BASELINE
    for label, scale in [
        ("1", 1.0),
        ("3", 3.0),
        ("30", 30.0),
        ("16320 (add_laplace, pixel scale 1: ε = 1)", 1.0 / GRID),
        ("18133.3 (add_laplace, ε = 0.9)", (1 / 0.9) / GRID),
        ("163200 (add_laplace, ε = 0.1)", (1 / 0.1) / GRID),
    ]:
        p, q = noise._rational_at_least(scale)
        odp = dp.m.make_laplace(ints, dp.l1_distance(T=int), scale=p / q)
        impls = {
            "privpix (kernels)": (lambda n, s=scale: noise.discrete_laplace(secure, s, n), N),
            "baseline": (lambda n, s=scale: base.discrete_laplace(old_secure, s, n), nb["laplace"]),
            "OpenDP": (lambda n, m=odp: m([0] * n), N_OPENDP),
        }
        yield (
            "discrete Laplace",
            (label if q == 1 else f"{label} = {p}/{q}"),
            impls,
            (lambda r, n, s=scale: noise.discrete_laplace(r, s, n)),
        )
    for label, sigma in [
        ("1", 1.0),
        ("10", 10.0),
        ("1000", 1000.0),
        (f"{merf_sigma(2.0):.4g} (exact_gaussian_release, dp-merf, ε = 2)", merf_sigma(2.0)),
        (f"{merf_sigma(1.0):.4g} (exact_gaussian_release, dp-merf, ε = 1)", merf_sigma(1.0)),
    ]:
        odp = dp.m.make_gaussian(ints, dp.l2_distance(T=int), scale=sigma)
        impls = {
            "privpix (kernels)": (lambda n, s=sigma: noise.discrete_gaussian(secure, s, n), N),
            "baseline": (lambda n, s=sigma: base.discrete_gaussian(old_secure, s, n), nb["gaussian"]),
            "OpenDP": (lambda n, m=odp: m([0] * n), N_OPENDP),
        }
        yield "discrete Gaussian", label, impls, (lambda r, n, s=sigma: noise.discrete_gaussian(r, s, n))
    others = [
        ("add_laplace", "pixel scale 1/0.9, grid 1/16320", lambda mod, r, n: mod.add_laplace(np.zeros(n), 1 / 0.9, r)),
        ("randomized_response", "d = 16, ε = 1", lambda mod, r, n: mod.randomized_response(r, np.zeros(n, int), 16, 1)),
        ("exponential_mechanism", "16 scores, ε = 1", lambda mod, r, n: mod.exponential_mechanism(r, RANKS, 1, 1, n)),
    ]
    for sampler, param, fn in others:
        impls = {
            "privpix (kernels)": (lambda n, f=fn: f(noise, secure, n), N),
            "baseline": (lambda n, f=fn: f(base, old_secure, n), nb["other"]),
        }
        yield sampler, param, impls, (lambda r, n, f=fn: f(noise, r, n))
    seeded = noise.make_rng(0)
    yield (
        "discrete Gaussian",
        "1000",
        {"privpix reproducible (seeded)": (lambda n: noise.discrete_gaussian(seeded, 1e3, n), N)},
        None,
    )
    yield (
        "discrete Laplace",
        "30",
        {"NumPy seeded (not exact)": (lambda n: noise.discrete_laplace(seeded, 30.0, n), N)},
        None,
    )


RANKS = np.arange(16.0)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="9b61448", help="git commit of the implementation before the kernels")
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the last one available)")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    compile_times = compile_seconds()
    base = load_baseline(args.baseline)
    rows = []
    for sampler, param, impls, bits_fn in cases(base, noise.SecureRandom(), base.SecureRandom()):
        for impl, (fn, n) in impls.items():
            name = f"privpix {args.baseline}" if impl == "baseline" else impl
            bits = bits_per_value(bits_fn, N) if impl == "privpix (kernels)" else None
            rate = best_rate(fn, n)
            rows.append({"sampler": sampler, "parameter": param, "implementation": name, "n": n,
                         "values_per_s": rate, "bits_per_value": bits})  # fmt: skip
            extra = "" if bits is None else f"  {bits:5.1f} bits/value"
            print(f"{sampler:<22} {param:<55} {name:<30} {rate / 1e6:9.3f} M values/s{extra}", flush=True)
    t0 = time.perf_counter()
    os.urandom(8 * N)
    result = {
        "command": f"python benchmarks/noise_throughput.py --baseline {args.baseline}",
        "baseline": args.baseline,
        "date": datetime.date.today().isoformat(),
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs (shared), pinned to CPU {cpu}",
        "python": platform.python_version(),
        "repeats": REPEATS,
        "os_urandom_words_per_s": N / (time.perf_counter() - t0),
        "compile_seconds": compile_times,
        "rows": rows,
    }
    write(RESULT, result, ensure_ascii=False)


def render(result: dict) -> str:
    baseline = result["baseline"]
    rates: dict[tuple[str, str], dict[str, dict]] = {}
    for r in result["rows"]:
        rates.setdefault((r["sampler"], r["parameter"]), {})[r["implementation"]] = r
    preamble = (
        f"`{result['command']}` on {result['date']}; {result['machine']}. Values per second, best of "
        f"{result['repeats']} calls that each draw n values into one array (privpix: n = 1,000,000; the baseline "
        f"{baseline}, the vectorised-NumPy and Python-loop samplers before the compiled kernels: 200,000, or 20,000 "
        "for the Gaussian; OpenDP: 100,000 Python ints). Secure mode throughout: every exact sampler reads the OS "
        f"CSPRNG (os.urandom: {result['os_urandom_words_per_s'] / 1e6:.0f} M 64-bit words/s here). The machine is "
        "shared with other work, so a row can differ by up to about 40 % between runs."
    )
    body = []
    for (sampler, param), impl in rates.items():
        new = impl.get("privpix (kernels)")
        if new is None:
            continue
        old = impl.get(f"privpix {baseline}")
        odp = next((v for k, v in impl.items() if k.startswith("OpenDP")), None)
        body.append([
            sampler, param, f"{new['values_per_s'] / 1e6:.1f}", f"{new['bits_per_value']:.1f}",
            f"{old['values_per_s'] / 1e6:.2f}" if old else "–", f"{odp['values_per_s'] / 1e6:.3f}" if odp else "–",
            f"{new['values_per_s'] / odp['values_per_s']:.0f}×" if odp else "–",
        ])  # fmt: skip
    cols = ["sampler", "parameter", "privpix, M/s", "bits/value", f"privpix {baseline}, M/s", "OpenDP 0.16, M/s",
            "vs OpenDP"]  # fmt: skip
    lines = ["# Exact noise samplers: throughput", "", preamble, "", table(cols, body)]
    kernels = [r for r in result["rows"] if r["implementation"] == "privpix (kernels)"]
    verdicts = []
    for name, goal in TARGETS.items():
        worst = min(r["values_per_s"] for r in kernels if r["sampler"] == name) / 1e6
        verdicts.append(
            f"{name} >= {goal:g} M/s: slowest scale {worst:.1f} M/s, {'met' if worst >= goal else 'NOT MET'}"
        )
    lines += ["", "Targets (one core): " + "; ".join(verdicts) + "."]
    lines += ["", "Other rows (reference points):", ""]
    for r in result["rows"]:
        if r["implementation"] in ("privpix reproducible (seeded)", "NumPy seeded (not exact)"):
            lines.append(f"* {r['sampler']} {r['parameter']}, {r['implementation']}: {r['values_per_s'] / 1e6:.1f} M/s")
    cold, warm = result["compile_seconds"]["cold (compile)"], result["compile_seconds"]["warm (cached)"]
    lines += [
        "",
        "First call in a fresh process (numba `cache=True`; seconds): "
        + ", ".join(f"{k} {cold[k]:.2f}" for k in cold if k != "total")
        + " with an empty cache (compiling; the first call compiles the shared helpers), "
        + ", ".join(f"{k} {warm[k]:.3f}" for k in warm if k != "total")
        + " with the cache written.",
        "",
    ]
    return "\n".join(lines)


RESULT = Output(RESULTS / "noise_throughput", render)
OUTPUTS = (RESULT,)

if __name__ == "__main__":
    main()
