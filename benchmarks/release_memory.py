"""Peak memory of a release of one big photo (issue 16: memory bounded by pixels, not by copies).

Makes a 12000×12000 RGB JPEG (432 MB decoded; not committed), releases it with pixel-laplace through the CLI in
a child process and records the child's peak RSS to benchmarks/results/release_memory.json.

    python benchmarks/release_memory.py --side 12000
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

RESULTS = Path(__file__).resolve().parent / "results" / "release_memory.json"


def make_photo(path: Path, side: int) -> None:
    """A smooth gradient with noise, written in strips so this script itself stays small."""
    rng = np.random.default_rng(0)
    img = np.empty((side, side, 3), np.uint8)
    ramp = np.linspace(0, 255, side, dtype=np.float32)
    for i in range(0, side, 1000):
        rows = slice(i, min(i + 1000, side))
        block = (ramp[rows, None] * 0.5 + ramp[None, :] * 0.5)[..., None]
        block = block + rng.normal(0, 20, (block.shape[0], side, 3)).astype(np.float32)
        img[rows] = np.clip(block, 0, 255)
    Image.fromarray(img).save(path, quality=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", type=int, default=12000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in"
        src.mkdir()
        make_photo(src / "photo.jpg", args.side)
        cmd = [sys.executable, "-m", "privpix", "release", "--input", str(src), "--method", "pixel-laplace"]
        cmd += ["--param", "sensitivity=bound", "--param", "unit=pixel", "--epsilon", "1", "--seed", "1", "-q"]
        cmd += ["--output", str(Path(tmp) / "out")]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        seconds = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    decoded = args.side * args.side * 3
    result = {
        "command": f"python benchmarks/release_memory.py --side {args.side}",
        "image": f"{args.side}x{args.side} RGB JPEG",
        "decoded_bytes": decoded,
        "peak_rss_bytes": peak_kib * 1024,
        "peak_over_decoded": round(peak_kib * 1024 / decoded, 2),
        "seconds": round(seconds, 1),
        "before_issue_16_peak_rss_bytes": 11_120_712 * 1024 if args.side == 12000 else None,
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
