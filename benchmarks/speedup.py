"""Two workers against one on many small JPEGs (the target: ≥ 1.7× for 2 workers over 1 on 1,500 small
JPEGs, measured with 1 and 2 workers alternating in one run, median of 3 pairs).

Makes 1,500 generated 160×160 RGB JPEGs (a smooth gradient with noise; not committed), then runs the whole command
``privpix release --input DIR --method pixel-laplace --param sensitivity=bound --param unit=pixel --epsilon 1
--seed 1 --workers W`` with W = 1, 2, 1, 2, 1, 2 and reports the median wall time of each and their ratio. Every
run's images are compared with the first's: the same seed gives the same images on any worker count.

Run: ``.venv/bin/python benchmarks/speedup.py`` → ``benchmarks/results/speedup.{json,md}`` (about a minute; on a
quiet machine: the ratio measures the cores, so anything else running lowers it); ``--render-only`` rewrites the
markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from _results import RENDER_HELP, RENDER_ONLY, Output, document, rerender, table, write

OUT = Path(__file__).parent / "results" / "speedup"
TARGET = 1.7


def make_photos(folder: Path, n: int, side: int) -> None:
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 200, side, dtype=np.float32)
    for i in range(n):
        base = ramp[:, None, None] * rng.uniform(0.3, 1) + ramp[None, :, None] * rng.uniform(0.3, 1)
        img = np.clip(base + rng.normal(0, 12, (side, side, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(folder / f"photo-{i:05d}.jpg", quality=90)


def release(src: Path, out: Path, workers: int) -> float:
    cmd = [sys.executable, "-m", "privpix", "release", "--input", str(src), "--method", "pixel-laplace",
           "--param", "sensitivity=bound", "--param", "unit=pixel", "--epsilon", "1", "--seed", "1",
           "--workers", str(workers), "-q", "--output", str(out)]  # fmt: skip
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t


# One instrumented release in a fresh interpreter: where the seconds of the command go. It runs what `privpix release`
# runs (the folder scan, the shard plan, the shards on the local executor, the commit) through the library.
PHASES = """
import json, sys, time
t0 = time.perf_counter()
import privpix.cli.release
from privpix.data.formats import open_source
from privpix.executor import make_executor
from privpix.mechanisms import get_mechanism
from privpix.publishing.shards import ShardedRelease

def main():
    src_dir, out, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t1 = time.perf_counter()
    mech = get_mechanism("pixel-laplace", epsilon=1, sensitivity="bound", unit="pixel")
    src = open_source(src_dir)
    t2 = time.perf_counter()
    job = ShardedRelease(mech, src, src.shape, seed=1, input_id=src.description)
    marks = []
    with make_executor("local", workers, None) as ex:
        expect = mech.privacy(src.shape).guarantee
        job.run(out, ex, expect=expect, on_progress=lambda n: marks.append(time.perf_counter()))
        t3 = time.perf_counter()
    t4 = time.perf_counter()
    print(json.dumps({"import": t1 - t0, "scan": t2 - t1, "first_shard": marks[0] - t2, "shards": marks[-1] - t2,
                      "commit": t3 - marks[-1], "pool_exit": t4 - t3, "total": t4 - t0}))

if __name__ == "__main__":
    main()
"""


def phases(src: Path, out: Path, workers: int) -> dict[str, float]:
    """Seconds of each phase of one release (see PHASES), in a fresh interpreter."""
    script = out.parent / "phases.py"
    script.write_text(PHASES)
    r = subprocess.run([sys.executable, str(script), str(src), str(out), str(workers)], check=True,
                       capture_output=True, text=True)  # fmt: skip
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def pixels(folder: Path) -> list[bytes]:
    """The released images as a sorted list of their PNG files' bytes (names are keyed per release)."""
    return sorted(p.read_bytes() for p in folder.rglob("*.png"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=1500)
    ap.add_argument("--side", type=int, default=160)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    times: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        src = tmp / "in"
        src.mkdir()
        make_photos(src, args.images, args.side)
        first = None
        for k in range(args.pairs):
            for w in (1, 2):
                out = tmp / f"out-{k}-{w}"
                times[w].append(release(src, out, w))
                got = pixels(out)
                first = first or got
                if got != first:
                    raise SystemExit(f"run {k} with {w} workers released other images than the first run")
                subprocess.run(["rm", "-rf", str(out)], check=True)
                print(f"pair {k}, {w} worker(s): {times[w][-1]:.2f} s", flush=True)
        where = {w: phases(src, tmp / f"phases-{w}", w) for w in (1, 2)}
    med = {w: statistics.median(v) for w, v in times.items()}
    ratio = med[1] / med[2]
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "images": args.images,
        "side": args.side,
        "seconds": times,
        "median_seconds": med,
        "speedup_2_over_1": ratio,
        "target": TARGET,
        "same_images_every_run": True,
        "phases": where,
    }
    write(RESULT, result)
    print(RESULT.md_path.read_text(encoding="utf-8"))


def render(result: dict) -> str:
    times, med, ratio, target = (
        result["seconds"],
        result["median_seconds"],
        result["speedup_2_over_1"],
        result["target"],
    )
    verdict = "met" if ratio >= target else f"missed by {target - ratio:.2f}"
    preamble = (
        f"`python benchmarks/speedup.py` ({result['machine']}): {result['images']:,} generated {result['side']}×"
        f"{result['side']} RGB JPEGs, `privpix release --input … --method pixel-laplace --param sensitivity=bound "
        "--param unit=pixel --epsilon 1 --seed 1 --workers W`, the whole command timed, W = 1 and 2 alternating, "
        f"{len(times['1'])} pairs. Every run released the same images."
    )
    body = [[w, ", ".join(f"{t:.2f}" for t in times[w]), f"{med[w]:.2f}"] for w in ("1", "2")]
    blocks = [table(["workers", "runs (s)", "median (s)"], body)]
    notes = f"Speed-up, 2 workers over 1: **{ratio:.2f}×** (target ≥ {target}×: {verdict})."
    where = result.get("phases")
    if where:
        keys = ("import", "scan", "first_shard", "shards", "commit", "pool_exit", "total")
        rows = [[w, *(f"{where[w][k]:.2f}" for k in keys)] for w in ("1", "2")]
        blocks += [
            "## Where the seconds go (one instrumented run each, through the library in a fresh interpreter)",
            table(["workers", "import", "scan", "first shard done", "shards", "commit", "pool exit", "total"], rows),
        ]
        one, two = where["1"], where["2"]
        serial = one["import"] + one["scan"] + one["commit"] + one["pool_exit"]
        parallel = one["shards"]
        bound = (serial + parallel) / (serial + parallel / 2)
        notes += (
            f"\n\nThe serial part (imports, the folder scan, the commit and the pool's exit) is {serial:.2f} s of the "
            f"1-worker run's {one['total']:.2f} s; its shards, the part that spreads, take {parallel:.2f} s "
            f"(on 2 workers {two['shards']:.2f} s, {parallel / two['shards']:.2f}× faster; the first shard is done "
            f"after {two['first_shard']:.2f} s, worker start included). With perfectly parallel shards the whole "
            f"command could reach {bound:.2f}× (Amdahl's bound from these phases)."
        )
    return document("Two workers against one on small JPEGs", *blocks, preamble=preamble, notes=notes)


RESULT = Output(OUT, render)
OUTPUTS = (RESULT,)

if __name__ == "__main__":
    main()
