"""The recommended synthesizer, as a user runs it: ``privpix release --method dp-synth
--dataset mnist:train --epsilon 1 --delta 1e-5 --param n=10000`` from the command line, then an independent small CNN
trained on the published folder alone (its PNG files and the labels in its manifest, read here without privpix)
and tested on the real MNIST test set. The CNN is scored at its last epoch: nothing is chosen on private data.

Run: ``.venv/bin/python benchmarks/dp_synth_release.py`` → ``benchmarks/results/dp_synth_release.{json,md}``.
``--seed S`` adds ``--seed S`` to the release (reproducible; without it the release draws its noise from the OS
CSPRNG, as a real release should). ``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
from _results import RENDER_HELP, RENDER_ONLY, Output, document, rerender, table, write
from dp_synthesis import DATA, OUT, accuracy, make_cnn

TARGET = 0.92


def read_release(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images (n, 1, 28, 28) float32 in [0, 1], labels (n,)) from a release folder: its manifest's labels and
    the PNG files they name."""
    manifest = json.loads((folder / "manifest.json").read_text())
    names = sorted(manifest["labels"])
    images = np.stack([np.asarray(Image.open(folder / name).convert("L"), np.float32) / 255.0 for name in names])
    labels = np.array([manifest["labels"][name] for name in names], np.int64)
    return images[:, None], labels


def train_and_test(x: np.ndarray, y: np.ndarray, epochs: int, seed: int, data_dir: str) -> tuple[float, list[float]]:
    import torch

    from privpix.data import load_dataset

    torch.manual_seed(seed)
    net = make_cnn(1, 28, 28, 10)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    test = load_dataset("mnist:test", data_dir)
    xs = torch.from_numpy(np.ascontiguousarray(test.as_float().transpose(0, 3, 1, 2)))
    curve = []
    for _ in range(epochs):
        net.train()
        for idx in torch.randperm(len(xt), generator=gen).split(128):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
        net.eval()
        curve.append(round(accuracy(net, xs, test.labels), 4))
    return curve[-1], curve


def render(result: dict) -> str:
    g = result["guarantee"] or {}
    acc, target = result["test_accuracy_last_epoch"], result["target"]
    preamble = (
        f"`{result['command']}` (`python benchmarks/dp_synth_release.py`), then a small CNN (the protocol's: 2 "
        f"convolutions + 2 dense layers, Adam, {result['cnn_epochs']} epochs, batch 128) trained on the published "
        "folder alone (its PNG files and the manifest's labels, read without privpix), tested on the 10,000 real "
        "MNIST test images at its last epoch (no selection)."
    )
    row = [
        f"`{result['mechanism']}` (alias `dp-synth`)", result["images"],
        f"{g.get('model')}, ε = {g.get('epsilon')}, δ = {g.get('delta')} per image ({g.get('unit')})",
        result["release_seconds"], f"**{acc:.4f}**", f"≥ {target} ({'met' if acc >= target else 'missed'})",
    ]  # fmt: skip
    return document(
        "`dp-synth` as a user runs it",
        table(["mechanism", "images", "guarantee", "release seconds", "test accuracy", "target"], [row]),
        preamble=preamble,
        notes=f"Label counts: {result['label_counts']}. Test accuracy per epoch: {result['test_curve']}. Machine: "
        f"{result['machine']}.",
    )


OUTPUTS = (Output(OUT / "dp_synth_release", render),)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None, help="release seed (default: none, OS CSPRNG noise)")
    ap.add_argument("--cnn-epochs", type=int, default=10)
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--out", default=str(OUT / "dp_synth_release"))
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args(argv)
    if args.render_only:
        return rerender(*OUTPUTS)
    privpix = str(Path(sys.executable).with_name("privpix"))
    command = [privpix, "release", "--method", "dp-synth", "--dataset", "mnist:train", "--epsilon", "1", "--delta",
               "1e-5", "--param", "n=10000"]  # fmt: skip
    if args.seed is not None:
        command += ["--seed", str(args.seed)]
    env = {**os.environ, "PRIVPIX_DATA": args.data_dir}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "synth"
        t0 = time.perf_counter()
        done = subprocess.run([*command, "--output", str(folder)], env=env, capture_output=True, text=True)
        release_s = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"the release failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        manifest = json.loads((folder / "manifest.json").read_text())
        x, y = read_release(folder)
    acc, curve = train_and_test(x, y, args.cnn_epochs, 0, args.data_dir)
    result = {
        "command": " ".join(["privpix", *command[1:], "--output", "synth"]),
        "images": len(y),
        "label_counts": np.bincount(y, minlength=10).tolist(),
        "mechanism": manifest.get("mechanism"),
        "parameters": manifest.get("parameters"),
        "guarantee": manifest.get("guarantee"),
        "release_seconds": round(release_s, 1),
        "cnn_epochs": args.cnn_epochs,
        "test_accuracy_last_epoch": acc,
        "test_curve": curve,
        "target": TARGET,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    write(Output(Path(args.out), render), result)
    print(json.dumps({k: result[k] for k in ("images", "release_seconds", "test_accuracy_last_epoch")}))


if __name__ == "__main__":
    main()
