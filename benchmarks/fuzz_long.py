"""The property-based fuzz suite (tests/test_fuzz.py) run for much longer than in CI.

Runs each property with ``--examples`` examples (CI runs 200), derandomized with ``--seed`` so a run can be repeated,
and writes what passed, how many examples ran and how long it took to ``benchmarks/results/fuzz_long.json``.

    python benchmarks/fuzz_long.py --examples 2000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from _results import write_json

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "fuzz_long.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=2000, help="examples per property")
    ap.add_argument("--seed", type=int, default=0, help="hypothesis seed (the run is derandomized from it)")
    args = ap.parse_args()
    env = {**os.environ, "PRIVPIX_FUZZ_EXAMPLES": str(args.examples), "PRIVPIX_FUZZ_SEED": str(args.seed)}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:warnings",
        "tests/test_fuzz.py",
        "-rA",
        "--durations=0",
        "--hypothesis-show-statistics",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    properties = {}
    for m in re.finditer(r"^(PASSED|FAILED|ERROR) tests/test_fuzz\.py::(\w+)", proc.stdout, re.M):
        properties[m.group(2)] = {"outcome": m.group(1).lower()}
    for m in re.finditer(r"^([\d.]+)s call\s+tests/test_fuzz\.py::(\w+)", proc.stdout, re.M):
        properties.setdefault(m.group(2), {})["seconds"] = float(m.group(1))
    for m in re.finditer(r"^tests/test_fuzz\.py::(\w+):\n(.*?)(?=^tests/|^=|\Z)", proc.stdout, re.M | re.S):
        properties.setdefault(m.group(1), {})["statistics"] = [
            ln.strip() for ln in m.group(2).splitlines() if ln.strip()
        ]
    result = {
        "command": f"python benchmarks/fuzz_long.py --examples {args.examples} --seed {args.seed}",
        "examples_per_property": args.examples,
        "seed": args.seed,
        "seconds": round(seconds, 1),
        "exit_code": proc.returncode,
        "properties": properties,
        "failures": proc.stdout[-6000:] if proc.returncode else "",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_json(RESULTS, result)
    print(json.dumps({k: v for k, v in result.items() if k != "failures"}, indent=2))
    if proc.returncode:
        print(proc.stdout[-6000:])
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
