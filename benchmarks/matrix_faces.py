"""Zhang, Fu & Meng 2020 reproduction on the face sets we have (ORL, Yale): LAP, LRA, SRA, ESRA.

Protocol (as the paper): per subject the first half of the images train and the second half test; PCA + SVM;
accuracy, macro recall and macro F1, both "train on released, test on original" and "everything released";
r = 100 capped at the image rank; ε ∈ {0.1, 0.5, 0.9, 1.3} and also {2, 5, 10}. The paper's CMU, Yale B,
Faces94 and Faces95 are not available here. Yale is used at 122×160 (half size) to keep LRA's per-entry SGD
affordable; ORL at its native 112×92.

Also: per-image entropy against the original's (Fig. 9 analogue), the six-panel picture of one ORL face
(Fig. 2 analogue, with a sound DP-Pix panel beside the paper's four), and every method's images per second.

Run: ``.venv/bin/python benchmarks/matrix_faces.py`` (about half an hour on 2 cores)
→ ``benchmarks/results/matrix_faces.{json,md}``, ``matrix_entropy.png``, ``matrix_six_panel.png``;
``--render-only`` rebuilds the markdown (and the pictures) from the JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, rerender, table, write
from privpix.data import load_dataset
from privpix.evaluation import evaluate
from privpix.evaluation.quality import entropy
from privpix.mechanisms import get_mechanism

OUT = Path(__file__).parent / "results"
EPSILONS = [0.1, 0.5, 0.9, 1.3, 2.0, 5.0, 10.0]
METHODS = {"pixel-laplace": "LAP", "lra": "LRA", "sra": "SRA", "esra": "ESRA"}
SIZES = {"orl": None, "yale": (122, 160)}


def _load(name):
    train, test = load_dataset(f"{name}:train"), load_dataset(f"{name}:test")
    if SIZES[name] is not None:
        train, test = train.resized(*SIZES[name]), test.resized(*SIZES[name])
    return train, test


def utility_rows(repeats: int, lra_repeats: int, log) -> list[dict]:
    rows = []
    for ds in SIZES:
        train, test = _load(ds)
        for method in METHODS:
            t0 = time.perf_counter()
            n_rep = lra_repeats if method == "lra" else repeats
            part = evaluate(train, test, [method], EPSILONS, repeats=n_rep, seed=0, dataset=ds)
            rows += part
            log(
                f"{ds}/{method}: {len(part)} cells in {time.perf_counter() - t0:.0f} s; accuracy by ε "
                + ", ".join(
                    f"{e:g}:{np.mean([r['accuracy'] for r in part if r['epsilon'] == e]):.3f}" for e in EPSILONS
                )
            )
    return rows


def speed(log) -> dict:
    orl = load_dataset("orl")
    out = {}
    for method in [*METHODS, "dp-pix"]:
        mech = get_mechanism(method, epsilon=1.0)
        t0 = time.perf_counter()
        mech.release(orl, 0)
        s = time.perf_counter() - t0
        out[method] = {"seconds_400": round(s, 3), "images_per_second": round(len(orl) / s, 1)}
        log(f"speed {method}: {s:.2f} s for {len(orl)} ORL faces")
    return out


def entropy_curve(log) -> dict:
    """Entropy of one random released image per dataset against the original's (Fig. 9)."""
    res = {}
    for ds in SIZES:
        _, test = _load(ds)
        idx = int(np.random.default_rng(9).integers(len(test)))
        one = test.subset([idx])
        res[ds] = {
            "image": str(one.names[0]) if one.names is not None else idx,
            "original": float(entropy(one.as_float())[0]),
            "methods": {},
        }
        for method in METHODS:
            vals = []
            for e in EPSILONS:
                rel = get_mechanism(method, epsilon=e).release(one, 3)
                vals.append(float(entropy(rel.images.as_float())[0]))
            res[ds]["methods"][method] = vals
        log(f"entropy {ds}: original {res[ds]['original']:.2f}")
    return res


def _mean(rows, ds, method, eps, key):
    v = [r[key] for r in rows if r["dataset"] == ds and r["method"] == method and r["epsilon"] == eps]
    return (np.mean(v), np.std(v, ddof=1) if len(v) > 1 else 0.0, len(v))


def render(data: dict) -> str:
    rows = data["rows"]
    lines = [
        "# Zhang, Fu & Meng 2020 reproduction: matrix-decomposition face release (LAP, LRA, SRA, ESRA)",
        "",
        "PCA + SVM (per subject: first half train, second half test). Mean ± std over repeats "
        f"({data['repeats']} for LAP/SRA/ESRA, {data['lra_repeats']} for LRA). None of these four is DP as "
        "implemented: the ε is a noise knob (see docs/guarantees.md). The paper's CMU, Yale B, Faces94 and "
        "Faces95 are not available here. Chance: ORL 2.5 %, Yale 6.7 %.",
        "",
    ]
    for key, title in (
        ("accuracy", "Accuracy, train on released / test on original"),
        ("accuracy_release_all", "Accuracy, everything released"),
        ("recall", "Macro recall, train on released / test on original"),
        ("f1", "Macro F1, train on released / test on original"),
        ("f1_release_all", "Macro F1, everything released"),
    ):
        body = []
        for ds in SIZES:
            for method, label in METHODS.items():
                cells = []
                for e in EPSILONS:
                    m, s, _ = _mean(rows, ds, method, e, key)
                    cells.append(f"{m:.3f} ± {s:.3f}")
                body.append([ds, label, *cells])
        lines += [f"## {title}", "", table(["dataset", "method", *(f"ε={e:g}" for e in EPSILONS)], body), ""]
    lines += [
        "## Ordering of methods (accuracy, train released / test original, mean over ε ∈ {0.1, 0.5, 0.9, 1.3})",
        "",
    ]
    for ds in SIZES:
        means = {
            label: np.mean([_mean(rows, ds, m, e, "accuracy")[0] for e in EPSILONS[:4]]) for m, label in METHODS.items()
        }
        order = " > ".join(f"{k} ({v:.3f})" for k, v in sorted(means.items(), key=lambda kv: -kv[1]))
        lines.append(f"- {ds}: {order}. The paper reports ESRA best and LRM worst.")
    ent = data["entropy"]
    lines += [
        "",
        "## Entropy of one released image (Fig. 9 analogue), bits",
        "",
        table(
            ["dataset (original)", "method", *(f"ε={e:g}" for e in EPSILONS)],
            ([f"{ds} ({res['original']:.2f})", METHODS[method], *(f"{v:.2f}" for v in vals)]
             for ds, res in ent.items() for method, vals in res["methods"].items()),
        ),
        "",
        "## Speed: all 400 ORL faces (112×92) at ε = 1, this 2-core machine",
        "",
        table(
            ["method", "seconds", "images/s"],
            ([METHODS.get(method, method), s["seconds_400"], s["images_per_second"]]
             for method, s in data["speed"].items()),
        ),
    ]  # fmt: skip
    lines += [
        "",
        "Pictures: `matrix_six_panel.png` (one ORL face, ε = 1; ORL © AT&T Laboratories Cambridge, "
        "research use), `matrix_entropy.png`.",
        "",
    ]
    return "\n".join(lines)


def plot(data: dict) -> None:
    """``matrix_entropy.png`` from the results, and ``matrix_six_panel.png`` (one ORL face released by each method)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ent = data["entropy"]
    fig, axes = plt.subplots(1, len(ent), figsize=(5 * len(ent), 3.4))
    for ax, (ds, res) in zip(np.atleast_1d(axes), ent.items(), strict=True):
        for method, vals in res["methods"].items():
            ax.plot(EPSILONS, vals, marker="o", ms=3, label=METHODS[method])
        ax.axhline(res["original"], color="k", ls="--", lw=1, label="original")
        ax.set_xscale("log")
        ax.set_xlabel("ε (noise knob; not DP)")
        ax.set_ylabel("entropy (bits)")
        ax.set_title(f"{ds}: one test image")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "matrix_entropy.png", dpi=110)
    plt.close(fig)

    orl = load_dataset("orl:test")
    face = orl.subset([0])
    panels = [("original", face.as_float()[0, ..., 0])]
    for method in [*METHODS, "dp-pix"]:
        rel = get_mechanism(method, epsilon=1.0).release(face, 1)
        label = METHODS.get(method, "DP-Pix b=4 (sound)")
        panels.append((f"{label}, ε=1", rel.images.as_float()[0, ..., 0]))
    fig, axes = plt.subplots(1, len(panels), figsize=(2.0 * len(panels), 2.6))
    for ax, (title, img) in zip(axes, panels, strict=True):
        ax.imshow(img, cmap="gray", vmin=0, vmax=1)
        ax.set_title(title, fontsize=8)
        ax.axis("off")
    fig.text(0.5, 0.01, "Face: ORL database (AT&T Laboratories Cambridge), research use.", ha="center", fontsize=7)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(OUT / "matrix_six_panel.png", dpi=110)
    plt.close(fig)


RESULT = Output(OUT / "matrix_faces", render)
OUTPUTS = (RESULT,)


WORK = Path(__file__).parent / "work"


def lra_extend(datasets: list[str], repeats: int, log) -> None:
    """Compute the LRA cells missing up to ``repeats`` (per dataset, resumable) into work/lra_rows_<ds>.jsonl.
    Cells are seeded by (method, ε, repeat) exactly as :func:`privpix.evaluation.evaluate` seeds them, so
    they extend the committed repeats; run one process per dataset on a 2-core machine."""
    from privpix.evaluation.runner import cell_seed, evaluate_cell

    WORK.mkdir(exist_ok=True)
    committed = json.loads((OUT / "matrix_faces.json").read_text())["rows"]
    for ds in datasets:
        part = WORK / f"lra_rows_{ds}.jsonl"
        rows = [json.loads(x) for x in part.read_text().splitlines() if x.strip()] if part.exists() else []
        have = {(r["epsilon"], r["repeat"]) for r in rows + committed if r["method"] == "lra" and r["dataset"] == ds}
        train, test = _load(ds)
        for rep in range(repeats):
            for eps in EPSILONS:
                if (eps, rep) in have:
                    continue
                t0 = time.perf_counter()
                row, _, _ = evaluate_cell(get_mechanism("lra", epsilon=eps), train, test, cell_seed(0, "lra", eps, rep))
                row = {"dataset": ds, "method": "lra", "repeat": rep, **row}
                with part.open("a") as fh:
                    fh.write(json.dumps(row, default=float) + "\n")
                log(f"{ds} lra ε={eps:g} rep {rep}: accuracy {row['accuracy']:.3f} ({time.perf_counter() - t0:.0f} s)")


def lra_merge(data: dict) -> None:
    """Add the rows of work/lra_rows_*.jsonl that the JSON lacks; lra_repeats = the smallest count per cell."""
    keys = {(r["dataset"], r["method"], r["epsilon"], r["repeat"]) for r in data["rows"]}
    for part in sorted(WORK.glob("lra_rows_*.jsonl")):
        for line in part.read_text().splitlines():
            r = json.loads(line)
            if (r["dataset"], r["method"], r["epsilon"], r["repeat"]) not in keys:
                data["rows"].append(r)
    counts: dict = {}
    for r in data["rows"]:
        if r["method"] == "lra":
            counts[(r["dataset"], r["epsilon"])] = counts.get((r["dataset"], r["epsilon"]), 0) + 1
    data["lra_repeats"] = min(counts.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--lra-repeats", type=int, default=2)
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP + " (and the pictures)")
    ap.add_argument("--speed-only", action="store_true", help="re-measure the speeds into the existing JSON")
    ap.add_argument("--lra-extend", type=int, default=0, help="only compute missing LRA repeats up to this count")
    ap.add_argument("--datasets", default=",".join(SIZES), help="datasets for --lra-extend")
    ap.add_argument("--merge-lra", action="store_true", help="merge --lra-extend rows into the JSON and render")
    args = ap.parse_args()
    path = RESULT.json_path

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    if args.lra_extend:
        lra_extend(args.datasets.split(","), args.lra_extend, log)
        return
    if args.render_only or args.speed_only or args.merge_lra:
        data = json.loads(path.read_text())
        if args.render_only:
            rerender(RESULT)
        if args.merge_lra:
            lra_merge(data)
            write(RESULT, data, indent=1)
        if args.speed_only:
            data["speed"] = speed(log)
            write(RESULT, data, indent=1)
    else:
        data = {"repeats": args.repeats, "lra_repeats": args.lra_repeats}
        data["speed"] = speed(log)
        data["entropy"] = entropy_curve(log)
        data["rows"] = utility_rows(args.repeats, args.lra_repeats, log)
        write(RESULT, data, indent=1)
    plot(data)
    log(f"wrote {RESULT.md_path}")


if __name__ == "__main__":
    main()
