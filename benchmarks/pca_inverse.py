"""Zhang et al. 2022 reproduction: PCA-inverse privatization of MNIST and of LFW gender faces, and the sound variants.

Protocol (as the paper): a CNN is trained on raw training images and tested on privatized test images;
privatization runs in batches (100 MNIST images, 300 faces), each with its own PCA. The paper's ε is per
reduced attribute and its basis is private: not DP. The sound variants (``basis=public``: mean and axes
from the training split, which the data owner treats as public; ``basis=dp``) are compared at equal
per-image ε.

Run: ``.venv/bin/python benchmarks/pca_inverse.py`` (about 30 min on 2 cores) →
``benchmarks/results/pca_inverse.{json,md}`` and ``pca_*.png``; ``--render-only`` rewrites the markdown (and
the curves' figure) from the JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, rerender, table, write
from privpix.data import ImageSet, load_dataset
from privpix.evaluation.cnn import CNNClassifier
from privpix.mechanisms import get_mechanism

OUT = Path(__file__).parent / "results"
MNIST_D = [5, 10, 20, 40, 60, 80, 100, 120, 150, 200]
MNIST_EPS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 30, 50, 100]
FACE_D = [4, 5, 20, 50, 100]
FACE_EPS = [1, 2, 3, 5, 8, 10, 15]
SOUND_D = [5, 10, 20, 40]
SOUND_EPS = [1, 10, 100, 1000, 10000]  # per image


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def _acc(clf, mech, test, seed):
    rel = mech.release(test, seed)
    return clf.score(rel.images, test.labels), rel


def mnist(data: dict) -> None:
    train, test = load_dataset("mnist:train"), load_dataset("mnist:test")
    t0 = time.perf_counter()
    clf = CNNClassifier("mnist-002", epochs=5, seed=0).fit(train)
    data["mnist_cnn_seconds"] = time.perf_counter() - t0
    data["mnist_raw_accuracy"] = clf.score(test)
    log(f"MNIST CNN: raw test accuracy {data['mnist_raw_accuracy']:.4f} ({data['mnist_cnn_seconds']:.0f} s)")
    t0 = time.perf_counter()
    get_mechanism("pca-inverse", epsilon=5.0, d=20, batch=100).release(test, 0)
    data["mnist_speed_10000_s"] = time.perf_counter() - t0
    grid = {}
    for d in MNIST_D:
        for e in MNIST_EPS:
            acc, _ = _acc(clf, get_mechanism("pca-inverse", epsilon=float(e), d=d, batch=100), test, d * 1000 + e)
            grid[f"{d}/{e}"] = acc
        log(f"MNIST faithful d={d}: " + ", ".join(f"{e}:{grid[f'{d}/{e}']:.3f}" for e in MNIST_EPS))
    data["mnist_grid"] = grid
    sound = {}
    for d in SOUND_D:
        for e in SOUND_EPS:
            pub = get_mechanism("pca-inverse", epsilon=float(e), d=d, basis="public").fit(train)
            sound[f"public/{d}/{e}"] = _acc(clf, pub, test, d * 7 + e)[0]
            dp = get_mechanism(
                "pca-inverse",
                epsilon=float(e) * 0.9,
                d=d,
                basis="dp",
                delta=1e-5,
                basis_epsilon=min(1.0, 0.1 * e),
                batch=1000,
            )
            sound[f"dp/{d}/{e}"] = _acc(clf, dp, test, d * 11 + e)[0]
            sound[f"paper/{d}/{e}"] = _acc(clf, get_mechanism("pca-inverse", epsilon=float(e) / d, d=d), test, d)[0]
        log(
            f"MNIST sound d={d}: "
            + ", ".join(
                f"{e}: paper {sound[f'paper/{d}/{e}']:.3f} public {sound[f'public/{d}/{e}']:.3f} "
                f"dp {sound[f'dp/{d}/{e}']:.3f}"
                for e in SOUND_EPS
            )
        )
    data["mnist_sound"] = sound
    # Picture grids (Tables 2 and 3 analogues): the first test batch of 100, which holds a '2'.
    batch = test.subset(slice(0, 100))
    two = int(np.flatnonzero(batch.labels == 2)[0])
    digits = [int(np.flatnonzero(batch.labels == k)[0]) for k in range(10)]
    pics = {}
    for d in (5, 20, 50, 100, 200):
        for e in (1, 5, 20, 100):
            pics[f"{d}/{e}"] = get_mechanism("pca-inverse", epsilon=float(e), d=d).release(batch, 5).images.images
    _grid_png(
        OUT / "pca_mnist_two.png",
        [[pics[f"{d}/{e}"][two] for e in (1, 5, 20, 100)] for d in (5, 20, 50, 100, 200)],
        [f"d={d}" for d in (5, 20, 50, 100, 200)],
        [f"ε={e}" for e in (1, 5, 20, 100)],
        "MNIST digit '2', paper-faithful PCA inverse (batch of 100; ε per attribute, not DP)",
    )
    rows = []
    for e in (1, 5, 20, 100):
        rel = pics[f"20/{e}"]
        rows.append([rel[i] for i in digits])
    _grid_png(
        OUT / "pca_mnist_digits.png",
        rows,
        [f"ε={e}" for e in (1, 5, 20, 100)],
        [str(k) for k in range(10)],
        "MNIST digits 0-9, d = 20, paper-faithful (not DP)",
    )


def faces(data: dict) -> None:
    size = (80, 80)
    train = load_dataset("lfw-gender:train", size=size).grayscale()
    test = load_dataset("lfw-gender:test", size=size).grayscale()
    clf = _face_grid(data, "faces", train, test)
    sound = {}
    for d in (5, 20):
        for e in SOUND_EPS:
            pub = get_mechanism("pca-inverse", epsilon=float(e), d=d, basis="public").fit(train)
            sound[f"public/{d}/{e}"] = _acc(clf, pub, test, e)[0]
            sound[f"paper/{d}/{e}"] = _acc(clf, get_mechanism("pca-inverse", epsilon=e / d, d=d, batch=300), test, e)[0]
    data["faces_sound"] = sound
    log("faces sound: " + json.dumps(sound))
    face_pictures(data, test)


def face_pictures(data: dict, test=None) -> None:
    """Tables 4 and 5 analogues: one face over d × ε, and 18 faces over ε (LFW, research use)."""
    if test is None:
        test = load_dataset("lfw-gender:test", size=(80, 80)).grayscale()
    batch = test.subset(slice(0, 300))
    rows = []
    for d in (4, 20, 100):
        rows.append(
            [
                get_mechanism("pca-inverse", epsilon=float(e), d=d, batch=300).release(batch, 2).images.images[0]
                for e in (1, 5, 15)
            ]
        )
    _grid_png(
        OUT / "pca_face_grid.png",
        rows,
        [f"d={d}" for d in (4, 20, 100)],
        [f"ε={e}" for e in (1, 5, 15)],
        "One LFW face (research use), paper-faithful PCA inverse, batch of 300 (not DP)",
    )
    rows = [list(batch.as_float()[:18])]
    for e in (1, 5, 15):
        rel = get_mechanism("pca-inverse", epsilon=float(e), d=20, batch=300).release(batch, 3).images.images
        rows.append(list(rel[:18]))
    _grid_png(
        OUT / "pca_faces_eps.png",
        rows,
        ["original", *(f"ε={e}" for e in (1, 5, 15))],
        [""] * 18,
        "18 LFW faces (research use) at d = 20 over ε, paper-faithful (not DP)",
    )


def celeba(data: dict) -> None:
    """The second face set: CelebA subset, attribute Male, 80×80 grey centre crops, split by identity."""
    from privpix.data import celeba_64

    def load(split):
        s = celeba_64(load_dataset(f"celeba:{split}")).resized(80, 80).grayscale()
        return ImageSet(s.images, labels=(np.asarray(s.attributes["Male"]) > 0).astype(int), source=s.source)

    train, test = load("train"), load("test")
    _face_grid(data, "celeba", train, test)


def _face_grid(data: dict, key: str, train, test):
    """The paper's seven-layer CNN on raw training faces, then accuracy on faithful releases over d × ε."""
    t0 = time.perf_counter()
    clf = CNNClassifier("faces-002", epochs=12, batch_size=32, seed=0).fit(train)
    data[f"{key}_cnn_seconds"] = time.perf_counter() - t0
    data[f"{key}_raw_accuracy"] = clf.score(test)
    data[f"{key}_n"] = [len(train), len(test)]
    log(f"{key} CNN: raw accuracy {data[f'{key}_raw_accuracy']:.4f} on {len(test)} ({time.perf_counter() - t0:.0f} s)")
    grid = {}
    for d in FACE_D:
        for e in FACE_EPS:
            grid[f"{d}/{e}"] = _acc(clf, get_mechanism("pca-inverse", epsilon=float(e), d=d, batch=300), test, d + e)[0]
        log(f"{key} faithful d={d}: " + ", ".join(f"{e}:{grid[f'{d}/{e}']:.3f}" for e in FACE_EPS))
    data[f"{key}_grid"] = grid
    return clf


def _grid_png(path, rows, row_labels, col_labels, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nr, nc = len(rows), len(rows[0])
    fig, axes = plt.subplots(nr, nc, figsize=(1.3 * nc + 0.6, 1.3 * nr + 0.6), squeeze=False)
    for i, row in enumerate(rows):
        for j, img in enumerate(row):
            ax = axes[i, j]
            ax.imshow(np.asarray(img)[..., 0], cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(row_labels[i], fontsize=8)
            if i == 0:
                ax.set_title(col_labels[j], fontsize=8)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _grid_table(grid: dict, ds: list, eps: list) -> str:
    return table(["d", *(f"ε={e}" for e in eps)], ([d, *(f"{100 * grid[f'{d}/{e}']:.1f}" for e in eps)] for d in ds))


def _sound_table(res: dict, ds, variants) -> str:
    return table(
        ["d", "variant", *(f"ε/image={e}" for e in SOUND_EPS)],
        ([d, v, *(f"{100 * res[f'{v}/{d}/{e}']:.1f}" for e in SOUND_EPS)] for d in ds for v in variants),
    )


def render(data: dict) -> str:
    lines = ["# Zhang et al. 2022 reproduction: PCA-inverse image database privatization", ""]
    if "mnist_grid" in data:
        g = data["mnist_grid"]
        lines += [
            f"CNN (two conv layers of five 5×5 filters) trained on raw MNIST: raw test accuracy "
            f"{100 * data['mnist_raw_accuracy']:.2f} % (paper 98.68 %), trained in {data['mnist_cnn_seconds']:.0f} s. "
            f"Privatizing the 10,000 test images (batches of 100, d = 20): {data['mnist_speed_10000_s']:.2f} s "
            "(target < 5 s).",
            "",
            "## MNIST, paper-faithful (ε per attribute, private basis: not DP): test accuracy %",
            "",
            _grid_table(g, MNIST_D, MNIST_EPS),
        ]
        s = data["mnist_sound"]
        lines += [
            "",
            "## MNIST at equal per-image ε: paper (ε/d per attribute, its own accounting; still not DP) "
            "vs sound variants",
            "",
            "`public`: basis from the training split, coefficients clipped, ε-DP per image. `dp`: DP basis "
            "per batch of 1,000 (Gaussian, δ = 1e-5, basis ε = min(1, ε/10)) plus 0.9·ε for coefficients.",
            "",
            _sound_table(s, SOUND_D, ("paper", "public", "dp")),
        ]
    if "faces_grid" in data:
        g = data["faces_grid"]
        lines += [
            "",
            f"## LFW gender (GenderRecog sample, {data['faces_n'][0]} train / {data['faces_n'][1]} test, "
            f"80×80 grey; split by person): raw accuracy {100 * data['faces_raw_accuracy']:.1f} %",
            "",
            "Paper-faithful, batches of 300, accuracy %:",
            "",
            _grid_table(g, FACE_D, FACE_EPS),
        ]
        s = data["faces_sound"]
        lines += [
            "",
            "Equal per-image ε, paper vs public basis:",
            "",
            _sound_table(s, (5, 20), ("paper", "public")),
        ]
    if "celeba_grid" in data:
        lines += [
            "",
            f"## CelebA subset, attribute Male ({data['celeba_n'][0]} train / {data['celeba_n'][1]} test, split by "
            f"identity, 80×80 grey): raw accuracy {100 * data['celeba_raw_accuracy']:.1f} %",
            "",
            "Paper-faithful, batches of 300, accuracy %:",
            "",
            _grid_table(data["celeba_grid"], FACE_D, FACE_EPS),
        ]
    lines += [
        "",
        "## What we found",
        "",
        "- MNIST: accuracy rises with ε and saturates with d; the paper's 'pitfall' valley for d ≈ 80–120 does not "
        "appear here (at every ε the curve over d is flat within about 2 points beyond d = 60). The paper does not "
        "say how its CNN or its batches were seeded; we see no mechanism in eqs. 1–14 that would create a valley.",
        "- At equal per-image ε the public-basis variant (ε-DP) matches or beats the paper's own accounting "
        "(d·ε per image, not DP) where either is useful (ε/image ≥ 100 for d ≥ 20).",
        "- The DP-basis variant is at chance everywhere: the Gaussian mechanism on a 784×784 second-moment matrix "
        "of 1,000 images needs noise of norm far above the signal (sensitivity s/2 per replaced image). A DP "
        "basis only pays with many more images per basis; a public basis is the practical sound choice.",
        "- Faces: the raw accuracy of the paper's seven-layer CNN on our 2,000-image GenderRecog sample is well "
        "below the paper's 90.24 % (it trained on the full GenderRecog set); privatized accuracy grows with ε and "
        "d as the paper's Fig. 4 says, from near chance. On the CelebA subset (Male) the same CNN reaches 84.5 % raw "
        "and 71.6 % at d = 100, ε = 15; no valley over d either.",
    ]
    lines += [
        "",
        "Pictures: `pca_mnist_two.png`, `pca_mnist_digits.png`, `pca_face_grid.png`, `pca_faces_eps.png` "
        "(faces: LFW, research use), `pca_mnist_curves.png`.",
        "",
    ]
    return "\n".join(lines)


def plot_curves(data: dict) -> None:
    """``pca_mnist_curves.png`` from the MNIST grid of the results."""
    if "mnist_grid" not in data:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = data["mnist_grid"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for d in MNIST_D:
        axes[0].plot(MNIST_EPS, [g[f"{d}/{e}"] for e in MNIST_EPS], marker="o", ms=2, label=f"d={d}")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("ε per attribute (noise knob)")
    axes[0].set_ylabel("CNN accuracy on privatized test")
    axes[0].legend(fontsize=6, ncol=2)
    axes[0].set_title("accuracy vs ε (Fig. 2 analogue)")
    for e in (1, 3, 5, 10, 20, 100):
        axes[1].plot(MNIST_D, [g[f"{d}/{e}"] for d in MNIST_D], marker="o", ms=2, label=f"ε={e}")
    axes[1].set_xlabel("d (components)")
    axes[1].legend(fontsize=6)
    axes[1].set_title("accuracy vs d (Fig. 3 analogue)")
    fig.tight_layout()
    fig.savefig(OUT / "pca_mnist_curves.png", dpi=110)
    plt.close(fig)


RESULT = Output(OUT / "pca_inverse", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="mnist,faces,celeba")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP + " (and the curves' figure)")
    args = ap.parse_args()
    path = RESULT.json_path
    data = json.loads(path.read_text()) if path.exists() else {}
    if args.render_only:
        rerender(*OUTPUTS)
    else:
        for part in args.parts.split(","):
            {"mnist": mnist, "faces": faces, "celeba": celeba, "pictures": face_pictures}[part](data)
            write(RESULT, data, indent=1)  # after each part: partial runs survive
    plot_curves(data)
    log(f"wrote {RESULT.md_path}")


if __name__ == "__main__":
    main()
