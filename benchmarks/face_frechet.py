"""Synthetic faces against real ones: the Fréchet distance in the scattering feature space, and sample grids.

The private set is the CelebA subset's fit split of ``dp_synthesis.py`` (3,357 faces, Male as the label; the
other 305 training faces are never read), the held-out real faces are CelebA's test split (897 faces of other
people). Each synthesizer fits on the private faces at ε ∈ {1, 10}, δ = 1e-5, draws as many faces as the held-out
set holds, and is scored by ``privpix.evaluation.frechet.frechet_distance`` against them (d², 204 scattering
features per image; lower is closer). Reference rows put the numbers on a scale:

* **real faces**: 897 faces of the fit split itself (the floor: the same distribution, other people);
* **public faces**: 897 LFW faces (the public set, resized; what the basis is built from);
* **public alone**: a Gaussian fitted to the public faces' own coefficients in their basis, no private step (what
  dp-eigenfaces would draw with no private data: the DP step must beat it to have added anything);
* **uniform noise**: random pixels (the ceiling).

Also at 64×64 for dp-eigenfaces (faces of that size from the same method; DP-MERF's conv generator is not run
there).

Run: ``.venv/bin/python benchmarks/face_frechet.py`` → ``benchmarks/results/face_frechet.{json,md}`` and the grids
in ``benchmarks/results/face_frechet/``; ``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import dp_synthesis as protocol
from _results import RENDER_HELP, RENDER_ONLY, Output, document, face_grid, rerender, table, write
from privpix.data import ImageSet, load_dataset
from privpix.evaluation.frechet import frechet_distance
from privpix.mechanisms import fit_as_declared, get_mechanism
from privpix.mechanisms.synthesis.dp_eigenfaces import public_basis

OUT = Path(__file__).parent / "results"
DATA = os.environ.get("PRIVPIX_DATA", "/work/shared/datasets")
PUBLIC = "lfw-gender"
METHODS = {32: ["dp-eigenfaces[public=lfw-gender]", "dp-merf[epochs=80]"], 64: ["dp-eigenfaces[public=lfw-gender]"]}
CAPTION = (
    "Synthetic faces only (no dataset image is shown): drawn from models fitted with DP on the CelebA subset "
    "(MMLAB, CUHK; non-commercial research use only), dp-eigenfaces in the principal components of LFW "
    "(University of Massachusetts, Amherst; research use). Rows: female, male."
)


def faces(size: int, data_dir: str) -> tuple[ImageSet, ImageSet]:
    """(the private fit split, CelebA's test split) at size×size: the protocol's split of the training faces."""
    train = load_dataset("celeba:train", data_dir, size=(size, size))
    test = load_dataset("celeba:test", data_dir, size=(size, size))
    fit_idx, _ = protocol.split_private(len(train))
    return train.subset(fit_idx), test


def public_alone(public: ImageSet, count: int, seed: int) -> ImageSet:
    """Faces drawn from a Gaussian fitted to the public faces' coefficients in their own 50-component basis."""
    x = public.flat().astype(np.float64)
    centre, basis, _ = public_basis(x, 50, 0.9)
    coeff = (x - centre) @ basis.T
    rng = np.random.default_rng(seed)
    z = rng.multivariate_normal(coeff.mean(0), np.cov(coeff, rowvar=False), size=count)
    images = np.clip(centre + z @ basis, 0, 1).reshape(count, *public.shape)
    return ImageSet(np.rint(255 * images).astype(np.uint8))


def draw(spec: str, eps: float, private: ImageSet, n: int, seed: int, cache: str | None) -> tuple[ImageSet, float]:
    """Fit ``spec`` at ε on the private faces and draw ``n``; with ``cache``, the drawn faces are kept there (outside
    the project: they come from research-only data) and read back by a later run, so the feature space can change
    without refitting."""
    h, w, _ = private.shape
    path = None if cache is None else Path(cache) / f"{protocol.slug(spec)}_eps{eps:g}_{h}x{w}_seed{seed}.npz"
    if path is not None and path.is_file():
        with np.load(path) as f:
            return ImageSet(f["images"], labels=f["labels"]), float(f["fit_seconds"])
    t0 = time.perf_counter()
    mech = get_mechanism(spec, epsilon=eps, delta=1e-5, n_classes=2)
    fit_as_declared(mech, private, seed=seed)
    fit_s = time.perf_counter() - t0
    drawn = mech.synthesize(n, np.random.default_rng(seed + 1), private.shape).images
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, images=drawn.as_uint8(), labels=drawn.labels, fit_seconds=fit_s)
    return drawn, fit_s


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epsilons", default="1,10")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", default="32,64")
    ap.add_argument("--data-dir", default=DATA)
    ap.add_argument("--out", default=str(OUT / "face_frechet"))
    ap.add_argument("--cache", default=None, help="folder for the drawn faces (outside the project), reused by reruns")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args(argv)
    if args.render_only:
        return rerender(*OUTPUTS)
    out = Path(args.out)
    rows: list[dict] = []
    for size in (int(s) for s in args.sizes.split(",")):
        private, held_out = faces(size, args.data_dir)
        public = load_dataset(PUBLIC, args.data_dir, size=(size, size))
        n = len(held_out)
        rng = np.random.default_rng(args.seed)
        refs = {
            "real faces (CelebA fit split)": private.subset(np.sort(rng.choice(len(private), n, replace=False))),
            "public faces (LFW)": public.subset(np.arange(n)),
            "public alone (LFW Gaussian, no private step)": public_alone(public, n, args.seed),
            "uniform noise": ImageSet(rng.integers(0, 256, (n, size, size, 3)).astype(np.uint8)),
        }
        for name, images in refs.items():
            rows.append({"size": size, "what": name, "epsilon": None, "fid": frechet_distance(images, held_out)})
            print(json.dumps(rows[-1]), flush=True)
        alone = refs["public alone (LFW Gaussian, no private step)"]
        face_grid(alone.as_uint8(), alone.labels, out / f"public-alone_{size}.png")
        for spec in METHODS[size]:
            for eps in (float(e) for e in args.epsilons.split(",")):
                drawn, fit_s = draw(spec, eps, private, n, args.seed, args.cache)
                rows.append({"size": size, "what": spec, "epsilon": eps, "fid": frechet_distance(drawn, held_out),
                             "fit_seconds": round(fit_s, 1)})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
                face_grid(drawn.as_uint8(), drawn.labels, out / f"{protocol.slug(spec)}_eps{eps:g}_{size}.png")
    machine = f"{platform.machine()}, {os.cpu_count()} shared cores"
    write(output(out), {"machine": machine, "seed": args.seed, "rows": rows})
    print(f"wrote {out.with_suffix('.md')}")


def markdown(res: dict, stem: str) -> str:
    preamble = (
        f"Written by `benchmarks/face_frechet.py` ({res['machine']}). d² between Gaussians fitted to 204 scattering "
        "features per image (`privpix.evaluation.frechet`: J = 2, L = 8, each channel's order-0 and order-1 maps "
        "averaged over the four quadrants, pixel units; fixed wavelets, no learned weights). Each row against "
        "CelebA's 897 held-out test "
        "faces, with as many images; lower is closer. Private set: the protocol's CelebA fit split (3,357 faces); "
        "δ = 1e-5; one seed."
    )
    body = [
        [r["size"], r["what"] if r["epsilon"] is None else f"`{r['what']}`",
         "–" if r["epsilon"] is None else f"{r['epsilon']:g}", f"{r['fid']:.1f}", r.get("fit_seconds", "–")]
        for r in res["rows"]
    ]  # fmt: skip
    return document(
        "Synthetic faces against real ones: Fréchet distance",
        table(["size", "images", "ε", "Fréchet d²", "fit s"], body),
        preamble=preamble,
        notes=f"Grids in `{stem}/` (ten per class, rows female then male). {CAPTION}",
    )


def output(stem: Path) -> Output:
    """The results at ``stem`` (.json, .md); the markdown names the grid folder ``stem``'s name."""
    return Output(stem, partial(markdown, stem=stem.name))


OUTPUTS = (output(OUT / "face_frechet"),)

if __name__ == "__main__":
    main()
