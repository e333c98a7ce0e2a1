"""Peak memory of a release of one big photo, for every per-image mechanism (memory bounded by pixels, not by
copies; the target: at most 8× the decoded size).

Makes a 12000×12000 RGB JPEG (432 MB decoded; not committed) and releases it through the CLI, once per registered
mechanism that releases images one by one at any size (asked from each mechanism's declared capabilities: images
out, nothing fitted, no batch, no fixed shape), each in its own child process whose peak RSS (``os.wait4``) is
recorded to benchmarks/results/release_memory.json and .md.

The matrix mechanisms (lra, sra, esra) take an exact SVD of every whole channel (Zhang, Fu & Meng's method): at
12000×12000 that is three 12000² float64 factor matrices per channel and about half an hour of LAPACK per channel on
one core. They are measured on a smaller photo (``--matrix-side``, default 1000: lra's SGD passes over every entry
take minutes there) and reported beside the others.

    python benchmarks/release_memory.py --side 12000

``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from _results import RENDER_HELP, RENDER_ONLY, Output, document, rerender, table, write

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


TARGET = 8.0
SMALL = 64  # a photo this small measures the fixed cost: the interpreter, privpix's imports, the libraries
EPSILON = {"ldp-pixel": "8"}  # any ε works; the release's cost does not depend on it
MATRIX = ("lra", "sra", "esra")


def in_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter and return its stdout. A child's peak RSS starts from its parent's RSS
    at the fork, so this process stays small: no photo and no privpix in it while the releases are measured."""
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout


def per_image_mechanisms() -> list[tuple[str, bool]]:
    """(name, whether it takes ε) of the registered mechanisms that release images one by one, at any size, with
    nothing fitted: asked from their declared capabilities, not named."""
    from privpix.mechanisms import MECHANISMS, get_mechanism

    names = []
    for name, cls in MECHANISMS.items():
        mech = get_mechanism(name, 1.0) if cls.about.uses_epsilon else get_mechanism(name)
        caps = mech.capabilities()
        if caps.output == "images" and caps.fits_on == "nothing" and caps.batch_size is None and not caps.fixed_shape:
            names.append((name, cls.about.uses_epsilon))
    return names


def peak_of(cmd: list[str]) -> tuple[int, float]:
    """(peak RSS in bytes, seconds) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {status}")
    return usage.ru_maxrss * 1024, time.perf_counter() - t0


def release(src: Path, out: Path, method: str, uses_epsilon: bool) -> list[str]:
    cmd = [sys.executable, "-m", "privpix", "release", "--input", str(src), "--method", method, "--seed", "1", "-q"]
    if uses_epsilon:
        cmd += ["--epsilon", EPSILON.get(method, "1")]
    if method == "pixel-laplace":  # the default data sensitivity reads the image first; the bound is the sound one
        cmd += ["--param", "sensitivity=bound", "--param", "unit=pixel"]
    return [*cmd, "--output", str(out)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", type=int, default=12000)
    ap.add_argument("--matrix-side", type=int, default=1000)
    ap.add_argument("--methods", default=None, help="comma-separated subset (default: every per-image mechanism)")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    here = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import release_memory as r"
    found = json.loads(in_child(f"{here}; import json; print(json.dumps(r.per_image_mechanisms()))"))
    uses_epsilon = dict(found)
    methods = args.methods.split(",") if args.methods else list(uses_epsilon)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        photos = {}
        for side in sorted({args.side, args.matrix_side, SMALL}):
            src = Path(tmp) / f"in{side}"
            src.mkdir()
            in_child(f"{here}; from pathlib import Path; r.make_photo(Path({str(src / 'photo.jpg')!r}), {side})")
            photos[side] = src
        for method in methods:
            side = args.matrix_side if method in MATRIX else args.side
            out = Path(tmp) / f"out-{method}"
            fixed, _ = peak_of(release(photos[SMALL], out, method, uses_epsilon[method]))
            subprocess.run(["rm", "-rf", str(out)], check=True)
            peak, seconds = peak_of(release(photos[side], out, method, uses_epsilon[method]))
            decoded = side * side * 3
            row = {"method": method, "side": side, "decoded_bytes": decoded, "peak_rss_bytes": peak,
                   "peak_over_decoded": round(peak / decoded, 2), "fixed_rss_bytes": fixed,
                   "above_fixed_over_decoded": round((peak - fixed) / decoded, 2),
                   "seconds": round(seconds, 1)}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            subprocess.run(["rm", "-rf", str(out)], check=True)
    result = {
        "command": f"python benchmarks/release_memory.py --side {args.side} --matrix-side {args.matrix_side}",
        "image": f"{args.side}x{args.side} RGB JPEG (matrix mechanisms: {args.matrix_side}x{args.matrix_side})",
        "target_peak_over_decoded": TARGET,
        "releases": rows,
        "before_issue_16_peak_rss_bytes": 11_120_712 * 1024 if args.side == 12000 else None,
    }
    write(RESULT, result)
    print(RESULT.md_path.read_text(encoding="utf-8"))


def render(result: dict) -> str:
    target = result["target_peak_over_decoded"]
    preamble = (
        f"`{result['command']}`: one child process per mechanism, `privpix release --input` of a single RGB JPEG, "
        "seed 1, its peak RSS (the interpreter and privpix's imports included: the fixed-cost column). Target: "
        f"≤ {target:g}× the decoded size."
    )
    cols = ["mechanism", "photo", "decoded", "peak RSS", "peak / decoded", "target", "fixed cost (64² photo)",
            "(peak − fixed) / decoded", "seconds"]  # fmt: skip
    body = []
    for r in result["releases"]:
        verdict = "met" if r["peak_over_decoded"] <= target else "missed"
        body.append([
            f"`{r['method']}`", f"{r['side']}²", f"{r['decoded_bytes'] / 1e6:.3g} MB",
            f"{r['peak_rss_bytes'] / 1e9:.2f} GB", f"{r['peak_over_decoded']:.2f}×", f"≤ {target:g}× ({verdict})",
            f"{r['fixed_rss_bytes'] / 1e9:.2f} GB", f"{r['above_fixed_over_decoded']:.2f}×", f"{r['seconds']:.0f}",
        ])  # fmt: skip
    return document(
        "Peak memory of a release of one big photo",
        table(cols, body),
        preamble=preamble,
        notes="Filters (blur, median, box), DP-Pix, ldp-pixel and the pixel noises run in blocks of rows (a halo of "
        "rows for a filter's reach; whole cell rows for DP-Pix) straight into the float32 output, with the whole "
        "image's output bit for bit (`tests/test_blockwise.py`). The matrix mechanisms need each whole channel for "
        "its exact SVD.",
    )


RESULT = Output(RESULTS.with_suffix(""), render)
OUTPUTS = (RESULT,)

if __name__ == "__main__":
    main()
