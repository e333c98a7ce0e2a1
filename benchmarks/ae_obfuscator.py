"""Jamshidi et al. 2023 reproduction: the adjustable-privacy autoencoder obfuscator on UCI Adult and on CelebA.

For each case an obfuscator is trained (Algorithm 1, early stopping), then every release setting (σ² of g, K
of f, with or without f, and the Gaussian-noise baseline) is measured with the paper's protocol
(:mod:`privpix.mechanisms.neural.obfuscation`): weak adversary (trained on original data), strong adversary
(trained on released data of a disjoint split), utility provider (trained on released data, tested on the
original test data and on released test data). Convex-hull AUC with both origins; the decorrelation check
(:mod:`privpix.evaluation.obfuscator_experiments`, with the noise baseline).

Data: Adult, the official train (30,162 complete records) and test (15,060) files; CelebA, the 4,559-image
subset split by identity (3,662 train / 897 test), 64×64 centre crops. The paper trained on all of CelebA
(~160k images, 183 epochs on a GPU); this runs on 2 CPU cores.

Run: ``.venv/bin/python benchmarks/ae_obfuscator.py [--parts adult,celeba-S,celeba-M,celeba-C] [--render-only]``
→ ``benchmarks/results/ae_obfuscator.{json,md}``, ``ae_obfuscator_*.png``.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Col, Output, rerender, table, write
from privpix.data import celeba_64, load_dataset
from privpix.evaluation.obfuscator_experiments import decorrelation, gaussian_noise_release
from privpix.evaluation.tradeoff import convex_hull_auc
from privpix.mechanisms.neural.obfuscation import AttributeData, measure_release, obfuscator_release, train_inferrer
from privpix.mechanisms.neural.obfuscator import train_obfuscator
from privpix.mechanisms.neural.records import encode_records, fit_record_encoding

OUT = Path(__file__).parent / "results"
JSON = OUT / "ae_obfuscator.json"
UTILITY = {"S": "Smiling", "M": "Mouth_Slightly_Open", "C": "High_Cheekbones"}
# Per case: K of f (the authors' code: 50 for Adult, 3000 for CelebA), σ² with f, σ² without f, (K, σ²) for the
# K sweep, Gaussian variances. The authors' released plot data use σ² 5…200 for CelebA and 1…10 for Adult.
PLANS = {
    "adult": (50.0, [0, 1, 2, 3, 5, 7, 10], [0, 2, 5, 10], [(k, s) for k in (1, 10, 3000) for s in (0, 5)],
              [0.01, 0.05, 0.2]),
    "celeba-S": (3000.0, [0, 5, 10, 20, 40, 200], [0, 20, 200], [(k, s) for k in (10, 100) for s in (0, 20)],
                 [0.01, 0.05, 0.2]),
    "celeba-M": (3000.0, [5, 20, 200], [], [], []),
    "celeba-C": (3000.0, [5, 20, 200], [], [], []),
}  # fmt: skip
# Authors' released plot data (github.com/bozorgmehr77/adjustable-privacy, Others/plots_of_*_case.ipynb): the
# paper's figures, whose numbers the text copy we have lacks.
AUTHORS = {
    "adult": {"weak_original": 0.8512, "utility_original": 0.8572, "sigma2": [1, 2, 3, 5, 7, 10],
              "weak": [0.7559, 0.7309, 0.7176, 0.6971, 0.6909, 0.6828],
              "utility": [0.8255, 0.8324, 0.8183, 0.8189, 0.8065, 0.8116]},
    "celeba-S": {"weak_original": 0.9688, "utility_original": 0.9193,
                 "sigma2": [5, 10, 15, 20, 25, 30, 40, 60, 200],
                 "weak": [0.8040, 0.7308, 0.6699, 0.6183, 0.5904, 0.5704, 0.5396, 0.5344, 0.5066],
                 "utility": [0.8673, 0.8778, 0.8780, 0.8675, 0.8600, 0.8522, 0.8573, 0.8625, 0.8566]},
}  # fmt: skip


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def load_case(part: str) -> tuple[str, AttributeData, AttributeData, dict]:
    if part == "adult":
        tr, te = load_dataset("adult:train").complete(), load_dataset("adult:test").complete()
        enc = fit_record_encoding(tr, "sex")

        def data(r):
            return AttributeData(encode_records(r, enc), r.labels, (r.frame["sex"] == "Male").to_numpy())

        return "tabular", data(tr), data(te), {"train": len(tr), "test": len(te), "features": len(enc["columns"])}
    utility = UTILITY[part.split("-")[1]]
    tr, te = celeba_64(load_dataset("celeba:train")), celeba_64(load_dataset("celeba:test"))

    def data(s):
        return AttributeData(s.as_float(), np.asarray(s.attributes[utility]) > 0, np.asarray(s.attributes["Male"]) > 0)

    return "image", data(tr), data(te), {"train": len(tr), "test": len(te), "utility": utility, "size": "64x64"}


def run_case(part: str, args) -> dict:
    kind, train, test, info = load_case(part)
    log(f"{part}: {info}")
    K0, sig_f, sig_nof, k_plan, noise_vars = PLANS[part]
    inf = {"epochs": args.inferrer_epochs, "patience": 2}
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(train.x))
    n_val = round(0.1 * len(perm))
    val, tr = perm[:n_val], perm[n_val:]
    t0 = time.perf_counter()
    epochs = args.epochs if part in ("adult", "celeba-S") else max(1, args.epochs * 2 // 3)
    net, hist = train_obfuscator(
        kind, train.x[tr], train.utility[tr], train.x[val], train.utility[val], epochs=epochs, patience=3, seed=0
    )
    obf_s = time.perf_counter() - t0
    log(f"{part}: obfuscator {hist['epochs_run']} epochs, {np.mean(hist['sec']):.1f} s/epoch, {hist['val_acc']}")
    weak = train_inferrer(train, "private", **inf)
    provider = train_inferrer(train, "utility", **inf)
    base = {"weak_original": weak.score(test.x, test.private), "utility_original": provider.score(test.x, test.utility)}
    log(f"{part}: on original data {base}")
    rows = []

    def measure(label: str, release, strong: bool, **setting):
        t = time.perf_counter()
        r = measure_release(release, train, test, weak_adversary=weak, strong=strong, seed=1, inferrer=inf)
        rows.append({"series": label, **setting, **r, "seconds": round(time.perf_counter() - t, 1)})
        log(f"{part}: {label} {setting} {r}")

    for s in sig_f:
        measure("f+g", obfuscator_release(net, sigma2=s, K=K0, use_f=True), True, sigma2=s, K=K0)
    for s in sig_nof:
        measure("g only (no f)", obfuscator_release(net, sigma2=s, K=K0, use_f=False), True, sigma2=s)
    for k, s in k_plan:
        measure("K sweep", obfuscator_release(net, sigma2=s, K=k, use_f=True), False, sigma2=s, K=k)
    for v in noise_vars:
        measure("Gaussian noise", gaussian_noise_release(v), True, variance=v)
    out = {
        "info": info,
        "obfuscator": {"epochs_run": hist["epochs_run"], "sec_per_epoch": round(float(np.mean(hist["sec"])), 1),
                       "train_seconds": round(obf_s, 1), "history": hist},
        "original": base,
        "rows": rows,
        "auc": auc_table(rows, base),
    }  # fmt: skip
    if part == "celeba-S" or part == "adult":
        d = decorrelation(net, test, provider, K=K0, seed=0)
        out["decorrelation"] = {
            "agreement": d["agreement"],
            "hist_injected_1": np.histogram(d["p_class1"][d["bits"] == 1], bins=10, range=(0, 1))[0].tolist(),
            "hist_injected_0": np.histogram(d["p_class1"][d["bits"] == 0], bins=10, range=(0, 1))[0].tolist(),
        }
        log(f"{part}: decorrelation agreement {d['agreement']:.3f}")
    out["K"] = K0
    if kind == "image":
        out["grid"] = sample_grid(net, test, part, K0)
    return out


def auc_table(rows, base) -> dict:
    end = (base["weak_original"], base["utility_original"])
    res = {}
    for series in ("f+g", "g only (no f)", "Gaussian noise"):
        part = [r for r in rows if r["series"] == series]
        for adv in ("weak", "strong"):
            pts = [(r[adv], r["utility"]) for r in part if adv in r]
            if not pts:
                continue
            x, y = np.array(pts).T
            res[f"{series} / {adv}"] = {
                "origin (0,0)": round(convex_hull_auc(x, y, (0.0, 0.0), end), 4),
                "origin (0.5,0.5)": round(convex_hull_auc(x, y, (0.5, 0.5), end), 4),
            }
    return res


def sample_grid(net, test: AttributeData, part: str, K0: float) -> str:
    """Fig. 8 analogue: 8 test faces, original and released at several (σ², K, f)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = np.arange(8)
    settings = [
        ("original", None),
        (f"σ²=0, K={K0:g}", (0, K0, True)),
        (f"σ²=20, K={K0:g}", (20, K0, True)),
        (f"σ²=200, K={K0:g}", (200, K0, True)),
        ("σ²=20, no f", (20, K0, False)),
        ("σ²=20, K=1", (20, 1, True)),
    ]
    fig, axes = plt.subplots(len(settings), len(idx), figsize=(len(idx) * 1.1, len(settings) * 1.2))
    for row, (label, s) in enumerate(settings):
        x = (
            test.x[idx]
            if s is None
            else obfuscator_release(net, sigma2=s[0], K=s[1], use_f=s[2])(test.x[idx], test.utility[idx], 3)
        )
        for j in range(len(idx)):
            ax = axes[row, j]
            ax.imshow(np.clip(x[j], 0, 1))
            ax.set_xticks([])
            ax.set_yticks([])
        axes[row, 0].set_ylabel(label, fontsize=6)
    fig.suptitle(f"{part}: obfuscated test faces (CelebA, research use)", fontsize=8)
    name = f"ae_obfuscator_{part}_grid.png"
    fig.savefig(OUT / name, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return name


def render(data: dict) -> str:
    lines = [
        "# Jamshidi et al. 2023 reproduction: adjustable-privacy autoencoder obfuscator",
        "",
        "Privacy is the accuracy of an adversary inferring the private attribute (gender) from released data "
        "(lower is better; guessing the majority class scores 0.674 on Adult's test file, 67.4 % male, and 0.570 on "
        "the CelebA test split, 43.0 % male); utility is the accuracy of a utility provider trained on released "
        "data, scored on the original test data (the paper's protocol; the score on released test data is also "
        "given). Weak adversary: trained on original data. Strong adversary: trained on the released train split "
        "(same model and settings, fresh noise). No formal guarantee: these numbers are the privacy. Produced by "
        "`benchmarks/ae_obfuscator.py`.",
        "",
    ]
    for part, case in data["cases"].items():
        info, base, ob = case["info"], case["original"], case["obfuscator"]
        lines += [
            f"## {part}",
            "",
            f"Data: {json.dumps(info)}. Obfuscator: {ob['epochs_run']} epochs ({ob['sec_per_epoch']} s/epoch, "
            f"{ob['train_seconds'] / 60:.1f} min on this 2-core CPU). On original data: adversary "
            f"{base['weak_original']:.3f}, utility {base['utility_original']:.3f}.",
            "",
        ]
        if part in AUTHORS:
            a = AUTHORS[part]
            lines += [
                f"Authors' released numbers (full dataset, GPU): original adversary {a['weak_original']}, "
                f"utility {a['utility_original']}; with f, σ² = {a['sigma2']}: weak adversary {a['weak']}, "
                f"utility {a['utility']}.",
                "",
            ]
        keys = ("series", "sigma2", "K", "variance", "weak", "strong", "utility", "utility_on_released")
        cols = ["series", *(Col(h, partial(_number, key=k)) for h, k in zip(
            ("σ²", "K", "variance", "weak adv.", "strong adv.", "utility (orig. test)", "utility (rel. test)"),
            keys[1:], strict=True))]  # fmt: skip
        lines += [
            table(cols, ([r.get(k) for k in keys] for r in case["rows"])),
            "",
            "Convex-hull AUC (end point: the adversary's and the utility provider's accuracy on original data):",
            "",
            table(["curve", "origin (0,0)", "origin (0.5,0.5)"],
                  ([k, v["origin (0,0)"], v["origin (0.5,0.5)"]] for k, v in case["auc"].items())),
        ]  # fmt: skip
        if "decorrelation" in case:
            d = case["decorrelation"]
            lines += [
                "",
                f"Decorrelation (§4.2.4, K = {case['K']:g}, no noise, random class injected through f): the "
                f"utility provider trained on original data agrees with the injected class on "
                f"{d['agreement']:.3f} of test samples; histogram of its P(class 1), injected 1: "
                f"{d['hist_injected_1']}, injected 0: {d['hist_injected_0']}.",
            ]
        if "grid" in case:
            lines += ["", f"Sample grid: `{case['grid']}` (CelebA faces, © CUHK MMLAB, non-commercial research use)."]
        lines.append("")
        lines += [f"Plot: `ae_obfuscator_{part}.png`.", ""]
    return "\n".join(lines)


def _number(v, key: str) -> str:
    """A row value as the table writes it: floats to three places (K, a knob, as given), nothing for a gap."""
    return "" if v is None else (f"{v:.3f}" if isinstance(v, float) and key not in ("K",) else f"{v:g}")


def plot(data: dict) -> None:
    """``ae_obfuscator_<part>.png`` for each case of the results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for part, case in data["cases"].items():
        base = case["original"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for series, mk in (("f+g", "o-"), ("g only (no f)", "s--"), ("Gaussian noise", "^:")):
            part_rows = [r for r in case["rows"] if r["series"] == series]
            if not part_rows:
                continue
            for adv, color in (("weak", "C0"), ("strong", "C3")):
                pts = [(r[adv], r["utility"]) for r in part_rows if adv in r]
                if pts:
                    x, y = np.array(pts).T
                    axes[0].plot(x, y, mk, color=color, label=f"{series}, {adv}")
        for k in sorted({r["K"] for r in case["rows"] if r["series"] == "K sweep"}):
            pts = [(r["weak"], r["utility"]) for r in case["rows"] if r["series"] == "K sweep" and r["K"] == k]
            x, y = np.array(pts).T
            axes[0].plot(x, y, "x", ms=7, label=f"K={k:g} (weak; Fig. 7)")
        if part in AUTHORS:
            a = AUTHORS[part]
            axes[0].plot(a["weak"], a["utility"][: len(a["weak"])], "k*-", label="authors (weak)")
        axes[0].axvline(base["weak_original"], color="maroon", lw=0.8)
        axes[0].axhline(base["utility_original"], color="darkolivegreen", lw=0.8)
        axes[0].set_xlabel("adversary accuracy (leakage)")
        axes[0].set_ylabel("utility-provider accuracy")
        axes[0].legend(fontsize=6)
        axes[0].set_title(f"{part}: trade-off (Figs. 6, 14-17)", fontsize=9)
        fg = [r for r in case["rows"] if r["series"] == "f+g"]
        s = np.array([r["sigma2"] for r in fg], dtype=float)
        xs = np.arange(len(s))
        for key, mk in (("weak", "o-"), ("strong", "s-"), ("utility", "^-")):
            axes[1].plot(xs, [r[key] for r in fg], mk, label=f"{key} (f+g)")
        nf = [r for r in case["rows"] if r["series"] == "g only (no f)"]
        if nf:
            pos = [int(np.flatnonzero(s == r["sigma2"])[0]) for r in nf if r["sigma2"] in s]
            axes[1].plot(pos, [r["utility"] for r in nf if r["sigma2"] in s], "^--", label="utility (no f)")
        axes[1].set_xticks(xs, [f"{v:g}" for v in s])
        axes[1].set_xlabel("σ² (g)")
        axes[1].set_ylabel("accuracy")
        axes[1].legend(fontsize=6)
        axes[1].set_title("privacy and utility against σ² (Fig. 5)", fontsize=9)
        fig.tight_layout()
        fig.savefig(OUT / f"ae_obfuscator_{part}.png", dpi=110)
        plt.close(fig)


RESULT = Output(OUT / "ae_obfuscator", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="adult,celeba-S,celeba-M,celeba-C")
    ap.add_argument("--epochs", type=int, default=25, help="obfuscator epochs (early stopping may end sooner)")
    ap.add_argument("--inferrer-epochs", type=int, default=8)
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP + " (and the plots)")
    args = ap.parse_args()
    data = json.loads(JSON.read_text()) if JSON.exists() else {"cases": {}}
    if args.render_only:
        rerender(*OUTPUTS)
    else:
        for part in args.parts.split(","):
            data["cases"][part] = run_case(part, args)
            write(RESULT, data, indent=1)  # after each case: partial runs survive
    plot(data)
    log(f"wrote {RESULT.md_path}")


if __name__ == "__main__":
    main()
