"""Faces worth publishing? Every face generator against the real faces, the majority class and the best public-only
release, on the CelebA subset: what a small CNN learns of gender from 5,000 released images, how close the images
are to real faces (Fréchet distance), and the time to fit and draw them.

Protocol: the private set is CelebA's training split (3,662 faces of the subset, Male as the label, 32×32 or 64×64,
the whole aligned image resized), the test set CelebA's test split (897 faces of other people). Each generator fits
on the private set at ε ∈ {1, 10}, δ = 1e-5 (per image, sound), draws 5,000 labelled images, and a fixed small CNN
(two 5×5 convolutions of 32 and 64 maps with max-pooling, a dense layer of 128, about 0.5 M weights at 32×32;
Adam, learning rate 1e-3, batch 128, 8 epochs, the last epoch scored, no selection) is trained on them alone and
tested on the 897 real test faces. Seeds s = 0, 1, 2: the fit seed s, the draw seed 100 + s, the CNN seed s.
Fréchet d²: ``privpix.evaluation.frechet`` (scattering features) between the first 897 released images of seed 0
and the 897 test faces.

Reference rows: the real training faces themselves (the ceiling), the majority class, and the best public-only
release: the labelled public faces (``lfw-gender-crop``) drawn as ``dp-transport`` draws them (5,000, half mirrored)
with no private step, so what the private data add is the difference.

Run: ``.venv/bin/python benchmarks/face_release.py`` → ``benchmarks/results/face_release.{json,md}`` and grids in
``benchmarks/results/face_release/``; ``--rows`` picks rows by name, ``--cache DIR`` keeps finished rows (outside
the project) so a rerun goes on where it stopped; ``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _results import RENDER_HELP, RENDER_ONLY, Output, document, face_grid, rerender, table, write

OUT = Path(__file__).parent / "results"
DATA = os.environ.get("PRIVPIX_DATA", "/work/shared/datasets")
N_RELEASED = 5000
DELTA = 1e-5
PUBLIC = "lfw-gender-crop"
# (row name, method spec or a reference kind, ε values, image side)
ROWS: list[tuple[str, str, tuple[float | None, ...], int]] = [
    ("real", "real faces (the CelebA training split itself; no privacy)", (None,), 32),
    ("majority", "the majority class", (None,), 32),
    ("public", f"public faces only ({PUBLIC}, labelled, no private step)", (None,), 32),
    ("dp-transport", f"dp-transport[public={PUBLIC}]", (1.0, 10.0), 32),
    ("dp-eigenfaces", "dp-eigenfaces[public=lfw-gender]", (1.0, 10.0), 32),
    ("dp-eigenfaces-crop", f"dp-eigenfaces[public={PUBLIC}]", (10.0,), 32),
    ("dp-merf", "dp-merf[epochs=25]", (10.0,), 32),
    ("real-64", "real faces (the CelebA training split itself; no privacy)", (None,), 64),
    ("public-64", f"public faces only ({PUBLIC}, labelled, no private step)", (None,), 64),
    ("dp-transport-64", f"dp-transport[public={PUBLIC}]", (10.0,), 64),
]
# DPImageBench's DP-MERF (their code and configuration) on the same 3,662 faces at ε = 10, 32×32: measured once on
# this machine (2,170 s on the CPU); not rerun here, their code is not a dependency of privpix.
DPIMAGEBENCH = {"what": "DPImageBench's DP-MERF (their code and config; measured once, not rerun)", "epsilon": 10.0,
                "size": 32, "accuracy": [0.428], "fit_seconds": [2170.0]}  # fmt: skip
CAPTION = (
    "Released images only; no private face is shown. dp-transport's and the public-only rows' images are faces of "
    "Labeled Faces in the Wild (UMass Amherst; research use), changed by the release; dp-eigenfaces' and dp-merf's "
    "are drawn from models fitted with DP on the CelebA subset (MMLAB, CUHK; non-commercial research use only). "
    "Rows: female, male."
)


def make_cnn(side: int):
    from privpix.training import nn

    class FaceCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 32, 5, padding=2)
            self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
            self.fc1 = nn.Linear(64 * (side // 4) ** 2, 128)
            self.fc2 = nn.Linear(128, 2)

        def forward(self, x):
            f = nn.functional
            x = f.max_pool2d(f.relu(self.conv1(x)), 2)
            x = f.max_pool2d(f.relu(self.conv2(x)), 2)
            return self.fc2(f.relu(self.fc1(x.flatten(1))))

    return FaceCNN()


def cnn_accuracy(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, seed: int,
                 epochs: int = 8) -> float:  # fmt: skip
    """The fixed CNN trained on uint8 images (m, h, w, 3) and labels, scored on the test images at its last epoch."""
    from privpix import training
    from privpix.training import torch

    def tensor(x: np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32) / 255.0)

    net = training.build(lambda: make_cnn(train_x.shape[1]), training.generator(seed))
    x, y = tensor(train_x), torch.from_numpy(train_y.astype(np.int64))
    training.fit_classifier(net, net.parameters(), x, y, lr=1e-3, epochs=epochs, batch_size=128, seed=seed + 1,
                            model=net)  # fmt: skip
    net.eval()
    with torch.no_grad():
        xt = tensor(test_x)
        pred = np.concatenate([net(xt[i : i + 500]).argmax(1).numpy() for i in range(0, len(xt), 500)])
    return float(np.mean(pred == test_y))


def public_only(side: int, seed: int, data_dir: str):
    """5,000 labelled public faces drawn as dp-transport draws its moved ones (uniform within a class, half
    mirrored), the classes in the public set's own proportions: the release with its private step taken out."""
    from privpix.data import load_dataset

    public = load_dataset(PUBLIC, data_dir, size=(side, side))
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(public), N_RELEASED)
    images = public.as_uint8()[pick].copy()
    mirror = rng.random(N_RELEASED) < 0.5
    images[mirror] = images[mirror][:, :, ::-1]
    # LFW's labels are 0 = male; CelebA's (the test set's) are 1 = male.
    return images, 1 - np.asarray(public.labels)[pick]


def release(spec: str, eps: float, private, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    from privpix.mechanisms import fit_as_declared, get_mechanism

    t0 = time.perf_counter()
    mech = get_mechanism(spec, epsilon=eps, delta=DELTA, n=N_RELEASED)
    fit_as_declared(mech, private, seed=seed)
    drawn = mech.release(private, 100 + seed).images
    return drawn.as_uint8(), np.asarray(drawn.labels), time.perf_counter() - t0


def run_row(key: str, what: str, eps: float | None, side: int, seeds: list[int], data_dir: str,
            out: Path) -> dict[str, Any]:  # fmt: skip
    from privpix.data import ImageSet, load_dataset
    from privpix.evaluation.frechet import frechet_distance

    private = load_dataset("celeba:train", data_dir, size=(side, side))
    test = load_dataset("celeba:test", data_dir, size=(side, side))
    tx, ty = test.as_uint8(), np.asarray(test.labels)
    row: dict[str, Any] = {"key": key, "what": what, "epsilon": eps, "size": side, "seeds": seeds}
    if key == "majority":
        row["accuracy"] = [float(max(np.mean(ty), 1 - np.mean(ty)))]
        return row
    acc, fits = [], []
    for s in seeds:
        if key.startswith("real"):
            x, y, fit_s = private.as_uint8(), np.asarray(private.labels), None
        elif key.startswith("public"):
            (x, y), fit_s = public_only(side, 100 + s, data_dir), None
        else:
            assert eps is not None
            x, y, fit_s = release(what, eps, private, s)
        if s == seeds[0]:
            row["frechet"] = round(frechet_distance(ImageSet(x[: len(tx)]), test), 1)
            if not key.startswith("real"):
                face_grid(x, y, out / f"{key}_eps{eps:g}_{side}.png" if eps else out / f"{key}_{side}.png")
        t0 = time.perf_counter()
        acc.append(round(cnn_accuracy(x, y, tx, ty, s), 4))
        row["cnn_seconds"] = round(time.perf_counter() - t0, 1)
        if fit_s is not None:
            fits.append(round(fit_s, 1))
        print(json.dumps({"key": key, "epsilon": eps, "seed": s, "accuracy": acc[-1], "fit_seconds": fit_s}),
              flush=True)  # fmt: skip
    row["accuracy"] = acc
    if fits:
        row["fit_seconds"] = fits
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(k for k, *_ in ROWS), help="row keys, comma-separated")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--out", default=str(OUT / "face_release"))
    ap.add_argument("--cache", default=None, help="folder (outside the project) keeping each finished row")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args(argv)
    if args.render_only:
        return rerender(*OUTPUTS)
    from privpix.threads import one_thread

    out, seeds = Path(args.out), [int(s) for s in args.seeds.split(",")]
    cache = Path(args.cache) if args.cache else None
    wanted = set(args.rows.split(","))
    rows: list[dict[str, Any]] = []
    for key, what, epsilons, side in ROWS:
        if key not in wanted:
            continue
        for eps in epsilons:
            path = None if cache is None else cache / f"{key}_{eps}_{side}.json"
            if path is not None and path.is_file():
                rows.append(json.loads(path.read_text()))
                continue
            with one_thread():
                row = run_row(key, what, eps, side, seeds[:1] if key == "majority" else seeds, args.data_dir, out)
            rows.append(row)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(row))
    machine = f"{platform.machine()}, {os.cpu_count()} shared cores, one torch thread per fit and CNN"
    write(OUTPUTS[0], {"machine": machine, "n_released": N_RELEASED, "delta": DELTA, "rows": rows,
                       "dpimagebench": DPIMAGEBENCH})  # fmt: skip
    print(f"wrote {OUTPUTS[0].stem.with_suffix('.md')}")


def _mean(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"**{np.mean(values):.3f}** ± {np.std(values, ddof=1):.3f}"


def markdown(res: dict) -> str:
    public = {r["size"]: float(np.mean(r["accuracy"])) for r in res["rows"] if r["key"].startswith("public")}
    body = []
    for r in [*res["rows"], {**res["dpimagebench"], "key": "dpimagebench"}]:
        mean = float(np.mean(r["accuracy"]))
        over = r.get("epsilon") is not None and r["size"] in public
        gain = f"{100 * (mean - public[r['size']]):+.1f}" if over else "–"
        plain = r.get("epsilon") is None or r["key"] == "dpimagebench"
        body.append([r["size"], r["what"] if plain else f"`{r['what']}`",
                     "–" if r.get("epsilon") is None else f"{r['epsilon']:g}", _mean(r["accuracy"]),
                     ", ".join(f"{a:.3f}" for a in r["accuracy"]), gain, r.get("frechet", "–"),
                     ", ".join(f"{s:g}" for s in r["fit_seconds"]) if r.get("fit_seconds") else "–"])  # fmt: skip
    preamble = (
        f"Written by `benchmarks/face_release.py` ({res['machine']}). A small CNN trained on {res['n_released']:,} "
        "released images (or on the 3,662 real training faces), tested on CelebA's 897 test faces (Male); mean ± "
        f"sample std over the seeds listed. Per-image (ε, δ = {res['delta']:g}), replace-one. Fréchet d²: scattering "
        "features, 897 released images against the 897 test faces (lower is closer). Points over public: accuracy "
        "minus the public-only row's at the same size. See the script's docstring for the whole protocol."
    )
    columns = ["size", "images the CNN was trained on", "ε", "accuracy", "per seed", "points over public",
               "Fréchet d²", "fit + draw s (per seed)"]  # fmt: skip
    return document(
        "Faces worth publishing: gender learned from released faces (CelebA subset)",
        table(columns, body),
        preamble=preamble,
        notes=f"Grids in `face_release/` (ten per class). {CAPTION}",
    )


OUTPUTS = (Output(OUT / "face_release", markdown),)

if __name__ == "__main__":
    main()
