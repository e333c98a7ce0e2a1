"""How a release scales: workers, backends, a plain NumPy + Pillow loop, memory against size, a million images.

Run: ``.venv/bin/python benchmarks/scale.py`` (about 15 minutes on 2 cores; ``--quick`` for a smoke run)
→ ``benchmarks/results/scale.json`` and ``benchmarks/results/scale.md`` (``--render-only``: the markdown from the JSON).

Parts:

1. **Workers and backends** on real photos (CelebA JPEGs, 178×218, from ``$PRIVPIX_DATA``): pixel-laplace at
   ε = 1, images/s with 1 worker (this process), 2 local worker processes, and a 2-worker Dask LocalCluster.
2. **The plain loop** on the same images: Pillow decode, NumPy Laplace noise, Pillow PNG encode, one image at a
   time in one process (what a user would write by hand), at PNG level 6 (Pillow's default) and at privpix's 1.
3. **Memory against size**: peak resident memory (the coordinator and, separately, the largest worker) of
   releases of 5k, 50k and 200k generated 64×64 images (each in a fresh process).
4. **A million images**: a release of 1,000,000 generated 64×64 images as WebDataset shards, with its rate;
   ``millionfolder``: a million 16×16 images as an ImageFolder (a PNG per image and a ``metadata.jsonl`` row per
   image, the format whose lists grow with the release), with the coordinator's peak memory.
5. **Ten million images** (``tenmillion``): 8×8 images as WebDataset shards.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Col, Output, document, dumps, rerender, table, write
from privpix.fileio import write_text_atomic

RESULTS = Path(__file__).parent / "results"
EPS = 1.0


def _mech():
    from privpix.mechanisms import get_mechanism

    return get_mechanism("pixel-laplace", epsilon=EPS, sensitivity="bound", unit="pixel").fit(None)


def _release(source, workers: int, engine: str, fmt: str, out: Path, seed: int = 0) -> dict:
    from privpix.executor import make_executor
    from privpix.publishing.shards import ShardedRelease

    mech = _mech()
    job = ShardedRelease(mech, source, source.shape, seed=seed, fmt=fmt, input_id=source.description)
    with make_executor(engine, workers) as ex:
        t0 = time.perf_counter()
        m = job.run(out, ex, expect=mech.privacy(source.shape).guarantee)
        seconds = time.perf_counter() - t0
    return {"images": m["images"], "seconds": seconds, "images_per_s": m["images"] / seconds, "shards": m["shards"]}


def celeba_files(n: int) -> list[Path]:
    from privpix.data.loaders import resolve_data_dir

    folder = resolve_data_dir() / "celeba_subset" / "img_align_celeba"
    files = sorted(folder.glob("*.jpg"))[:n]
    if len(files) < n:
        raise SystemExit(f"{folder}: found {len(files)} JPEGs, need {n}")
    return files


def plain_loop(files: list[Path], out: Path, level: int) -> dict:
    """The loop a user writes by hand: decode, noise, encode, one image at a time."""
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    scale = 1.0 / EPS  # unit=pixel, values in [0, 1], sensitivity 1
    t = {"decode": 0.0, "noise": 0.0, "encode": 0.0}
    t0 = time.perf_counter()
    for i, f in enumerate(files):
        a = time.perf_counter()
        x = np.asarray(Image.open(f).convert("RGB"), dtype=np.float32) / 255.0
        b = time.perf_counter()
        y = np.clip(x + rng.laplace(0.0, scale, x.shape), 0.0, 1.0)
        y = np.rint(y * 255).astype(np.uint8)
        c = time.perf_counter()
        Image.fromarray(y).save(out / f"{i:06d}.png", compress_level=level)
        d = time.perf_counter()
        t["decode"] += b - a
        t["noise"] += c - b
        t["encode"] += d - c
    seconds = time.perf_counter() - t0
    return {
        "images": len(files),
        "seconds": seconds,
        "images_per_s": len(files) / seconds,
        "png_level": level,
        "split_s": {k: round(v, 2) for k, v in t.items()},
    }


def part_workers(n: int, tmp: Path) -> dict:
    from privpix.data.formats import open_source

    files = celeba_files(n)
    folder = tmp / "celeba"
    folder.mkdir()
    for f in files:  # a folder of exactly these n photos (copies: privpix refuses links that leave the input)
        shutil.copyfile(f, folder / f.name)
    source = open_source(folder)
    rows = {}
    for label, workers, engine in [
        ("privpix, 1 worker", 1, "local"),
        ("privpix, 2 local processes", 2, "local"),
        ("privpix, Dask LocalCluster (2 workers)", 2, "dask"),
    ]:
        rows[label] = _release(source, workers, engine, "imagefolder", tmp / f"out-{engine}-{workers}")
        print(label, rows[label], flush=True)
    for level in (6, 1):
        label = f"plain NumPy + Pillow loop, PNG level {level}"
        rows[label] = plain_loop(files, tmp / f"plain-{level}", level)
        print(label, rows[label], flush=True)
    one = rows["privpix, 1 worker"]["images_per_s"]
    return {
        "images": n,
        "image_size": "178x218 RGB JPEG (CelebA)",
        "rows": rows,
        "speedup_2_workers": rows["privpix, 2 local processes"]["images_per_s"] / one,
        "speedup_dask_2_workers": rows["privpix, Dask LocalCluster (2 workers)"]["images_per_s"] / one,
    }


class _MemorySampler:
    """Peak resident memory of this process and of its worker processes, sampled every 0.1 s (the workers are
    children of the forkserver, not of this process, so getrusage cannot see them)."""

    def __init__(self) -> None:
        import threading

        import psutil  # installed with dask.distributed

        self.me = psutil.Process()
        self.peak_self = self.peak_worker = self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(0.1):
            try:
                mine = self.me.memory_info().rss
                others = [p.memory_info().rss for p in self._workers()]
            except psutil.Error:
                continue
            self.peak_self = max(self.peak_self, mine)
            self.peak_worker = max([self.peak_worker, *others])
            self.peak_total = max(self.peak_total, mine + sum(others))

    def _workers(self):
        import psutil

        # Every python process started from this one, however deep (forkserver → workers).
        return [p for p in psutil.Process().children(recursive=True) if "python" in p.name()]

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        mb = 1 / 2**20
        return {
            "peak_rss_mb_coordinator": self.peak_self * mb,
            "peak_rss_mb_largest_worker": self.peak_worker * mb,
            "peak_rss_mb_total": self.peak_total * mb,
        }


def _memory_child(n: int, fmt: str, workers: int, out: str, side: int = 64) -> None:
    """Run in a fresh process: one release of ``n`` generated images; prints its numbers as JSON."""
    from privpix.data.generated import GeneratedSource

    sampler = _MemorySampler()
    row = _release(GeneratedSource(n, (side, side, 3)), workers, "local", fmt, Path(out))
    # Sampled, not getrusage: Linux carries a process's peak RSS across exec, so a child started from a big
    # benchmark process would report its parent's peak.
    row.update(sampler.stop())
    print(json.dumps(row))


def _in_child(n: int, fmt: str, workers: int, out: Path, side: int = 64) -> dict:
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import scale; "
        f"scale._memory_child({n}, {fmt!r}, {workers}, {str(out)!r}, {side})"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def part_memory(sizes: list[int], tmp: Path) -> list[dict]:
    rows = []
    for fmt in ("webdataset", "imagefolder"):
        for n in sizes:
            row = {"format": fmt, **_in_child(n, fmt, 2, tmp / f"mem-{fmt}-{n}")}
            print(row, flush=True)
            rows.append(row)
    return rows


PARTS = ("workers", "memory", "million", "millionfolder", "tenmillion")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run, not for the results")
    ap.add_argument(
        "--parts", default="workers,memory,million", help="any of workers,memory,million,millionfolder,tenmillion"
    )
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    parts = args.parts.split(",")
    n_photos, sizes, million, ten = (
        (200, [2000, 5000], 20_000, 100_000) if args.quick else (4559, [5000, 50_000, 200_000], 10**6, 10**7)
    )
    path = RESULTS / ("scale_quick.json" if args.quick else "scale.json")
    results = json.loads(path.read_text()) if path.exists() else {}
    results.update(
        {
            "date": dt.date.today().isoformat(),
            "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores, "
            f"python {platform.python_version()}",
            "command": "python benchmarks/scale.py" + (" --quick" if args.quick else ""),
        }
    )
    # Each part keeps the date it was measured on: a run of some parts keeps the others' results as they were.
    dates = results.setdefault("dates", {k: results.get("date") for k in PARTS if k in results})
    dates.update({k: dt.date.today().isoformat() for k in PARTS if k in parts})
    speed = RESULTS / "speedup.json"
    if speed.exists():  # copied, so this benchmark's markdown renders from its own JSON alone
        results["serial_seconds"] = json.loads(speed.read_text()).get("phases")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if "workers" in parts:
            results["workers"] = part_workers(n_photos, tmp)
        if "memory" in parts:
            results["memory"] = part_memory(sizes, tmp)
        if "million" in parts:
            row = _in_child(million, "webdataset", 2, tmp / "million")
            print("million", row, flush=True)
            results["million"] = {"format": "webdataset", "image_size": "64x64 RGB, generated on the fly", **row}
        if "millionfolder" in parts:
            # The format whose index lists every image (metadata.jsonl), a file per image.
            row = _in_child(million, "imagefolder", 2, tmp / "millionfolder", side=16)
            print("million as imagefolder", row, flush=True)
            results["millionfolder"] = {"format": "imagefolder", "image_size": "16x16 RGB, generated on the fly",
                                        **row}  # fmt: skip
        if "tenmillion" in parts:
            # Ten million images small enough (8×8) for the run to end within 30 minutes here.
            row = _in_child(ten, "webdataset", 2, tmp / "ten", side=8)
            print("ten million", row, flush=True)
            results["tenmillion"] = {"format": "webdataset", "image_size": "8x8 RGB, generated on the fly", **row}
    if args.quick:  # a smoke run: its JSON only, beside the results
        write_text_atomic(path, dumps(results))
    else:
        write(RESULT, results)
    print(f"wrote {path}")


def render(r: dict) -> str:
    blocks = [f"Command: `{r['command']}`."]
    num = "right"
    dates = r.get("dates", {})

    def when(part: str) -> str:
        return f" (measured {dates[part]})" if part in dates else ""

    if "workers" in r:
        w = r["workers"]
        blocks += [
            f"## Workers and backends: {w['images']:,} CelebA photos ({w['image_size']}), pixel-laplace ε = 1"
            + when("workers"),
            table(
                [Col("run"), Col("images/s", ".0f", num), Col("seconds", ".1f", num)],
                ([label, row["images_per_s"], row["seconds"]] for label, row in w["rows"].items()),
            ),
            f"2 local processes / 1 worker: **{w['speedup_2_workers']:.2f}×**; Dask LocalCluster / 1 worker: "
            f"{w['speedup_dask_2_workers']:.2f}×.",
        ]
    if "memory" in r:
        keys = ("format", "images", "images_per_s", "peak_rss_mb_coordinator", "peak_rss_mb_largest_worker",
                "peak_rss_mb_total")  # fmt: skip
        cols = [Col("format"), Col("images", ",", num), Col("images/s", ".0f", num),
                Col("coordinator peak MB", ".0f", num), Col("largest worker peak MB", ".0f", num),
                Col("all processes MB", ".0f", num)]  # fmt: skip
        blocks += [
            "## Peak memory against size (generated 64×64 RGB images, 2 local workers)" + when("memory"),
            table(cols, ([row[k] for k in keys] for row in r["memory"])),
        ]
    for part, title, where in (("million", "A million images", ""),
                               ("millionfolder", "A million images as an ImageFolder", " on 2 local workers"),
                               ("tenmillion", "Ten million images", " on 2 local workers")):  # fmt: skip
        if part in r:
            m = r[part]
            blocks += [
                f"## {title}" + when(part),
                f"{m['images']:,} generated {m['image_size']} images as {m['format']} shards ({m['shards']} shards)"
                f"{where}: {m['seconds']:.0f} s, **{m['images_per_s']:.0f} images/s**, coordinator peak "
                f"{m['peak_rss_mb_coordinator']:.0f} MB, largest worker {m['peak_rss_mb_largest_worker']:.0f} MB, "
                f"all processes {m['peak_rss_mb_total']:.0f} MB.",
            ]
    blocks += _serial_seconds(r.get("serial_seconds"))
    return document(f"Release at scale ({r['machine']})", *blocks)


def _serial_seconds(phases: dict | None) -> list[str]:
    """Where the serial seconds of a release go (``benchmarks/speedup.py``'s instrumented runs, copied into this
    benchmark's results when it runs): the part of a release that more workers do not shorten."""
    if not phases or not {"1", "2"} <= set(phases):
        return []
    keys = ("import", "scan", "commit", "pool_exit", "shards", "total")
    rows = ([w, *(phases[w][k] for k in keys)] for w in ("1", "2"))
    cols = [Col("workers"), *(Col(k.replace("_", " ") + " s", ".2f", "right") for k in keys)]
    one = phases["1"]
    serial = one["import"] + one["scan"] + one["commit"] + one["pool_exit"]
    return [
        "## Where the serial seconds go (1,500 generated 160×160 JPEGs, one instrumented run each, from "
        "`python benchmarks/speedup.py`)",
        table(cols, rows),
        f"Imports, the folder scan, the commit and the pool's exit take {serial:.2f} s of the one-worker run's "
        f"{one['total']:.2f} s; everything else is shards, which spread over the workers.",
    ]


RESULT = Output(RESULTS / "scale", render)
OUTPUTS = (RESULT,)

if __name__ == "__main__":
    main()
