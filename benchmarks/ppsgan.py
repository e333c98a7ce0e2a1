"""Kim & Yang 2020 reproduction on a CPU: PPSGAN, PPAPNet, ACGAN and the conventional baselines on MNIST and
Fashion-MNIST.

Utility (Table 2): a C_c-shaped classifier trained on the released training set, tested on the real test set.
Privacy (measured; the paper only shows pictures): re-identification rate of released training images against
all the originals by nearest neighbour in pixel space and in the feature space of a classifier trained on the
real data (chance 1/n), and SSIM to the source. Sample diversity: a Fréchet distance on that classifier's
features (not FID: no Inception weights here). Pictures: five released images per class (Fig. 5), originals
beside every method (Fig. 6), t-SNE of z, z̃ and G_e(x̃) (Fig. 4).

CPU scale (stated in the results): a seeded subset of the training set, conv width 16 instead of 128, a few
epochs. The paper trained on a Titan V.

Run: ``.venv/bin/python benchmarks/ppsgan.py [--datasets mnist,fashion-mnist] [--limit 12000]`` →
``benchmarks/results/ppsgan.{json,md}``, ``ppsgan_*.png``. Further seeds of the learned methods:
``--seeds 1,2`` (one process per dataset may run side by side; rows are merged under a lock). ``--render-only``
rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import time
from functools import partial
from pathlib import Path

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, rerender, table, write
from privpix.data import load_dataset
from privpix.evaluation.linkage import frechet_distance, reidentification_rate
from privpix.evaluation.quality import ssim
from privpix.mechanisms import get_mechanism
from privpix.mechanisms.neural.ppsgan import TrunkClassifier, anonymize, latent_noise_budget, train_ppsgan

OUT = Path(__file__).parent / "results"
JSON = OUT / "ppsgan.json"
SETTINGS = [(1.0, 0.0), (1.0, 1e-8), (0.1, 0.0), (0.1, 1e-8)]
PAPER = {  # Table 2, accuracy %
    "mnist": {"original": 99.60, "acgan": 98.15, "ppsgan-(1,0)": 98.23, "ppsgan-(1,1e-08)": 98.51,
              "ppsgan-(0.1,0)": 98.60, "ppsgan-(0.1,1e-08)": 98.24},
    "fashion-mnist": {"original": 96.61, "acgan": 87.35, "ppsgan-(1,0)": 95.01, "ppsgan-(1,1e-08)": 95.07,
                      "ppsgan-(0.1,0)": 94.53, "ppsgan-(0.1,1e-08)": 94.31},
}  # fmt: skip


def _label(kind: str, eps: float = 1.0, delta: float = 0.0) -> str:
    return {"ppsgan": f"ppsgan-({eps:g},{delta:g})", "ppapnet": "ppapnet-(1,0)"}.get(kind, kind)


# Rows a seed can hold (the original's classifier is reseeded too), in table order.
LEARNED = ["original", *(_label("ppsgan", e, d) for e, d in SETTINGS), _label("ppapnet"), _label("acgan")]
BASELINES = {  # conventional methods and the hyperparameters tried; the one nearest PPSGAN's utility is compared
    "gaussian-blur": [("sigma", v) for v in (1.0, 1.5, 2.0, 3.0)],
    "pixel-gaussian": [("sigma", v) for v in (0.2, 0.4, 0.6, 0.8)],
    "median-filter": [("size", v) for v in (3, 5, 7)],
    "uniform-filter": [("size", v) for v in (3, 5, 7)],
}


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def run_dataset(name: str, args) -> dict:
    train, test, rng = _subset(name, args.limit)
    x, y, xt, yt = train.as_float(), train.labels, test.as_float(), test.labels
    cls_kw = {"width": args.width, "epochs": args.cls_epochs, "seed": 0}
    t0 = time.perf_counter()
    res: dict = {"n_train": len(x), "n_test": len(xt), "width": args.width, "epochs": args.epochs,
                 "ae_epochs": args.ae_epochs, "n_critic": args.n_critic, "recipe": args.recipe,
                 "methods": {}}  # fmt: skip
    measure = Measure(name, x, y, xt, yt, rng, args)

    def keep(label: str, row: dict) -> None:
        res["methods"][label] = row

    keep("original", measure("original", x, seed=0))
    res["reference_classifier_seconds"] = round(time.perf_counter() - t0, 1)
    models = learned_methods(name, x, y, args, seed=0, measure=measure, keep=keep)
    pics = {label: rel for label, (_, rel) in models.items()}
    # Conventional baselines: pick, per method, the hyperparameter whose utility is nearest PPSGAN-(1,0)'s.
    target = res["methods"]["ppsgan-(1,0)"]["accuracy"]
    tried = {}
    for method, grid in BASELINES.items():
        best = None
        for key, val in grid:
            rel = get_mechanism(method, **{key: val}).release(train, 0).images.as_float()
            acc = TrunkClassifier(**cls_kw).fit(rel, y).score(xt, yt)
            tried[f"{method} {key}={val}"] = acc
            if best is None or abs(acc - target) < abs(best[2] - target):
                best = (key, val, acc, rel)
        key, val, _, rel = best
        pics[f"{method} {key}={val}"] = rel
        keep(f"{method} {key}={val}", measure(f"{method} {key}={val}", rel, seed=0,
                                               extra={"chosen_to_match": "ppsgan-(1,0)"}))  # fmt: skip
    res["baselines_tried"] = tried
    res["grids"] = pictures(name, x, y, pics)
    res["tsne"] = tsne_picture(name, models["ppsgan-(1,0)"][0], x, y)
    return res


class Measure:
    """Utility and measured privacy of one release of the training subset ``x``: the utility classifier is
    trained with the given seed; re-identification uses one fixed reference classifier (seed 0) as the
    attacker's feature extractor, so repeats differ only in the release and the utility classifier."""

    def __init__(self, name, x, y, xt, yt, rng, args):
        """``rng``: the generator that drew the training subset; it draws the re-identification probe next."""
        probe = np.sort(rng.choice(len(x), args.probe, replace=False))
        self.name, self.x, self.y, self.xt, self.yt, self.probe = name, x, y, xt, yt, probe
        self.width, self.cls_epochs = args.width, args.cls_epochs
        self.ref = TrunkClassifier(width=self.width, epochs=self.cls_epochs, seed=0).fit(x, y)
        self.feat_real, self.feat_test = self.ref.features(x[probe]), self.ref.features(xt[:2000])

    def __call__(self, label: str, released: np.ndarray, *, seed: int, extra: dict | None = None) -> dict:
        t = time.perf_counter()
        clf = TrunkClassifier(width=self.width, epochs=self.cls_epochs, seed=seed).fit(released, self.y)
        p = self.probe
        row = {
            "accuracy": clf.score(self.xt, self.yt),
            "reid_pixel": reidentification_rate(released[p], self.x[p]),
            "reid_feature": reidentification_rate(self.ref.features(released[p]), self.feat_real),
            "ssim": float(np.mean(ssim(self.x[p], released[p]))),
            "frechet": frechet_distance(self.ref.features(released[:2000]), self.feat_test),
            **(extra or {}),
        }
        log(f"{self.name} seed {seed} {label}: "
            + ", ".join(f"{k} {v:.4g}" for k, v in row.items() if isinstance(v, float))
            + f" ({time.perf_counter() - t:.0f} s)")  # fmt: skip
        return row


def learned_methods(name: str, x, y, args, *, seed: int, measure: Measure, keep, skip=frozenset()) -> dict:
    """Train and measure every learned release at one seed: PPSGAN at each (ε, δ) (all four on MNIST or with
    ``--all-settings``), PPAPNet-(1, 0) and ACGAN. ``keep(label, row)`` gets each measurement as soon as it is
    made; labels in ``skip`` are not trained. Returns {label: (generator, released images)}."""
    kw = {"d": 128, "width": args.width, "batch_size": 256, "n_critic": args.n_critic, "recipe": args.recipe,
          "ae_epochs": args.ae_epochs, "seed": seed}  # fmt: skip
    out: dict = {}
    pretrained = None
    settings = SETTINGS if name == "mnist" or args.all_settings else SETTINGS[:1]
    kinds = ("ppapnet", "acgan") if name == "mnist" or args.all_settings else ("acgan",)
    runs = [("ppsgan", eps, delta) for eps, delta in settings] + [(kind, 1.0, 0.0) for kind in kinds]
    for kind, eps, delta in runs:
        label = _label(kind, eps, delta)
        if label in skip:
            continue
        if pretrained is None and kind != "acgan":  # one autoencoder pretraining per seed, shared
            _, hist = train_ppsgan("ppsgan", x, y, epochs=0, **kw)
            pretrained = hist["autoencoder"]
        t = time.perf_counter()
        epochs = args.epochs if (eps, delta) == (1.0, 0.0) else args.epochs_other
        g, hist = train_ppsgan(kind, x, y, epsilon=eps, delta=delta, epochs=epochs,
                               pretrained=None if kind == "acgan" else pretrained, **kw)  # fmt: skip
        rel = anonymize(g, x, y, seed=1 + 1000 * seed)
        out[label] = (g, rel)
        extra = {**_timing(t, hist), "epochs": epochs, "seed": seed}
        if kind != "acgan":
            extra["s_e_mean"] = hist["s_e_mean"]
        if kind == "ppsgan":
            extra |= {"gen_loss": hist["gen"], "critic_loss": hist["critic"], "zero_loss": hist["zero"]}
        keep(label, measure(label, rel, seed=seed, extra=extra))
    return out


def run_repeats(name: str, args) -> None:
    """Further seeds of every learned method (``--seeds``), each row merged into ppsgan.json as soon as it is
    measured, so another process may write its own dataset meanwhile and an interrupted run resumes. Seed 0
    rows live in the main table; a seed's labels already measured are skipped."""
    train, test, rng = _subset(name, args.limit)
    x, y, xt, yt = train.as_float(), train.labels, test.as_float(), test.labels
    measure = Measure(name, x, y, xt, yt, rng, args)
    for seed in (int(s) for s in args.seeds.split(",")):
        data = json.loads(JSON.read_text())
        done = set(_seed_rows(data[name], seed))

        def keep(label: str, row: dict, seed=seed) -> None:
            _merge(partial(_put_row, name, seed, label, row))

        if "original" not in done:  # the utility classifier's own spread, for scale
            keep("original", measure("original", x, seed=seed))
        learned_methods(name, x, y, args, seed=seed, measure=measure, keep=keep, skip=done)


def _seed_rows(res: dict, seed: int) -> dict:
    if seed == 0:
        return {k: v for k, v in res["methods"].items() if k in LEARNED}
    return res.get("repeats", {}).get(str(seed), {})


def _merge(update) -> None:
    """Apply ``update(data)`` to ppsgan.json as it is on disk now, under a lock: several runs of this script
    (one per dataset, or a curve beside repeats) may each add their part meanwhile."""
    with open(JSON.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(JSON.read_text()) if JSON.exists() else {}
        update(data)
        _write(data)


def _put(name: str, res: dict, data: dict) -> None:
    data[name] = res  # a new main run replaces the dataset's entry, its older repeats included


def _put_row(name: str, seed: int, label: str, row: dict, data: dict) -> None:
    """Where ``_seed_rows`` reads it: seed 0 in the main table, other seeds under ``repeats``."""
    rows = data[name]["methods"] if seed == 0 else data[name].setdefault("repeats", {}).setdefault(str(seed), {})
    rows[label] = row


def _put_analysis(part: str, key: str, value, data: dict) -> None:
    data.setdefault("analysis", {"noise_budget": {}, "curves": {}}).setdefault(part, {})[key] = value


def _write(data: dict) -> None:
    write(RESULT, data, indent=1)  # each file whole, then renamed: a reader never sees half a file


def _subset(name: str, limit: int):
    """(seeded training subset, test set, the rng that drew the subset, for further seeded draws)."""
    train, test = load_dataset(f"{name}:train"), load_dataset(f"{name}:test")
    rng = np.random.default_rng(0)
    return train.subset(np.sort(rng.choice(len(train), limit, replace=False))), test, rng


def noise_budget(name: str, args) -> dict:
    """Signal and noise sizes in z̃ right after the autoencoder pretraining, for every (ε, δ): why short
    training cannot reach the paper's utility at the strong settings (see ``latent_noise_budget``)."""
    train, _, _ = _subset(name, args.limit)
    x, y = train.as_float(), train.labels
    kw = {"d": 128, "width": args.width, "epochs": 0, "seed": 0}
    _, hist = train_ppsgan("ppsgan", x, y, ae_epochs=args.ae_epochs, **kw)
    out = {}
    for eps, delta in SETTINGS:
        for kind in ("ppsgan", "ppapnet"):
            m, _ = train_ppsgan(kind, x, y, epsilon=eps, delta=delta, pretrained=hist["autoencoder"], **kw)
            label = f"{kind}-({eps:g},{delta:g})"
            out[label] = latent_noise_budget(m, x[:4000], seed=0)
            log(f"{name} {label}: {out[label]}")
    return out


def curve(name: str, args) -> list[dict]:
    """Utility of PPSGAN-(1, 0) along a longer training: accuracy on 5,000 real test images of a classifier
    trained on the released training set, every ``--curve-every`` adversarial epochs."""
    train, test, _ = _subset(name, args.limit)
    x, y, xt, yt = train.as_float(), train.labels, test.as_float(), test.labels
    t0, rows = time.perf_counter(), []

    def measure(ep, g):
        if ep % args.curve_every:
            return
        rel = anonymize(g, x, seed=1)
        acc = TrunkClassifier(width=args.width, epochs=args.cls_epochs, seed=0).fit(rel, y).score(xt[:5000], yt[:5000])
        rows.append({"epoch": ep, "accuracy": acc, "minutes": (time.perf_counter() - t0) / 60})
        log(f"{name} {args.recipe} epoch {ep}: accuracy {acc:.4f}")

    train_ppsgan("ppsgan", x, y, epsilon=1.0, delta=0.0, d=128, width=args.width, ae_epochs=args.ae_epochs,
                 epochs=args.curve_epochs, n_critic=args.n_critic, recipe=args.recipe, seed=0,
                 callback=measure)  # fmt: skip
    return rows


def _timing(t0: float, hist: dict) -> dict:
    return {"train_minutes": (time.perf_counter() - t0) / 60, "sec_per_epoch": float(np.mean(hist["sec"] or [0]))}


def pictures(name: str, x, y, pics: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ["original", *pics]
    idx = [int(np.flatnonzero(y == k)[0]) for k in range(6)]
    fig, axes = plt.subplots(len(rows), len(idx), figsize=(len(idx) * 0.9, len(rows) * 0.95))
    for r, label in enumerate(rows):
        imgs = x if label == "original" else pics[label]
        for j, i in enumerate(idx):
            axes[r, j].imshow(imgs[i, :, :, 0], cmap="gray", vmin=0, vmax=1)
            axes[r, j].set_xticks([])
            axes[r, j].set_yticks([])
        axes[r, 0].set_ylabel(label, fontsize=5, rotation=0, ha="right", va="center")
    fig.suptitle(f"{name}: originals and released images (Fig. 6 analogue)", fontsize=7)
    fig.savefig(OUT / f"ppsgan_{name}_methods.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    rel = pics["ppsgan-(1,0)"]
    fig, axes = plt.subplots(10, 5, figsize=(4, 8))
    for k in range(10):
        for j, i in enumerate(np.flatnonzero(y == k)[:5]):
            axes[k, j].imshow(rel[i, :, :, 0], cmap="gray", vmin=0, vmax=1)
            axes[k, j].set_xticks([])
            axes[k, j].set_yticks([])
    fig.suptitle(f"{name}: PPSGAN-(1, 0), five per class (Fig. 5 analogue)", fontsize=7)
    fig.savefig(OUT / f"ppsgan_{name}_classes.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [f"ppsgan_{name}_methods.png", f"ppsgan_{name}_classes.png"]


def tsne_picture(name: str, g, x, y) -> str:
    """Fig. 4 analogue: t-SNE of z, z̃ and G_e(x̃) for 1,000 training images."""
    import matplotlib
    import torch
    from sklearn.manifold import TSNE

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privpix.mechanisms.neural.ppsgan import as_tensor

    xs, ys = as_tensor(x[:1000]), y[:1000]
    with torch.no_grad():
        z = g.encode(xs)
        zt = g.amplify(z, torch.Generator().manual_seed(0))
        ze = g.encode(g.decode(zt))
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, v, title in zip(axes, (z, zt, ze), ("z", "z̃", "G_e(x̃)"), strict=True):
        emb = TSNE(init="pca", random_state=0, perplexity=30).fit_transform(v.numpy())
        ax.scatter(emb[:, 0], emb[:, 1], c=ys, cmap="tab10", s=3)
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{name}: t-SNE of PPSGAN-(1, 0) latents (Fig. 4 analogue)")
    fig.savefig(OUT / f"ppsgan_{name}_tsne.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return f"ppsgan_{name}_tsne.png"


def render(data: dict) -> str:
    lines = [
        "# Kim & Yang 2020 reproduction on a CPU: PPSGAN, PPAPNet, ACGAN and conventional baselines",
        "",
        "Utility: accuracy % of a C_c-shaped classifier trained on the released training set and tested on the "
        "real test set (Table 2). Privacy, measured: re-identification rate of released training images among "
        "all originals of the probe set by nearest neighbour in pixel space and in the feature space of a "
        "classifier trained on real data (chance = 1/probe size), and mean SSIM to the source. `Fréchet`: "
        "Fréchet distance between classifier features of 2,000 released images and 2,000 real test images "
        "(FID's formula on our own classifier, not comparable to published FIDs). ε and δ are noise knobs: no "
        "release here is differentially private. Produced by `benchmarks/ppsgan.py`.",
        "",
    ]
    for name, res in data.items():
        if name == "analysis":
            continue
        lines += [
            f"## {name}",
            "",
            f"Scale: {res['n_train']} training images (seeded subset), {res['n_test']} test images, conv width "
            f"{res['width']} (paper 128), {res['ae_epochs']} autoencoder epochs + the adversarial epochs listed, "
            f"n_critic {res['n_critic']}, batch 256, d = 128; re-identification probe {res.get('probe', 2000)} images.",
            "",
        ]
        body = []
        for label, r in sorted(res["methods"].items(), key=lambda kv: _order(kv[0])):
            paper = PAPER.get(name, {}).get(label, "")
            minutes = f"{r['train_minutes']:.1f}" if "train_minutes" in r else ""
            body.append([label, f"{100 * r['accuracy']:.2f}", paper, f"{r['reid_pixel']:.3f}",
                         f"{r['reid_feature']:.3f}", f"{r['ssim']:.3f}", f"{r['frechet']:.3g}", r.get("epochs", ""),
                         minutes])  # fmt: skip
        cols = ["method", "accuracy %", "paper %", "re-id pixel", "re-id feature", "SSIM", "Fréchet", "epochs",
                "train min"]  # fmt: skip
        lines.append(table(cols, body))
        lines += render_repeats(res)
        lines += ["", "Conventional hyperparameters tried (accuracy %): "
                  + ", ".join(f"{k}: {100 * v:.1f}" for k, v in res["baselines_tried"].items()), "",
                  "Pictures (MNIST / Fashion-MNIST, public datasets): " + ", ".join(f"`{p}`" for p in res["grids"])
                  + f", `{res['tsne']}`.", ""]  # fmt: skip
    lines += render_analysis(data.get("analysis", {}))
    return "\n".join(lines)


RESULT = Output(OUT / "ppsgan", render)
OUTPUTS = (RESULT,)


def _order(label: str) -> int:
    """Table order: the original, PPSGAN by setting, PPAPNet, ACGAN, then the conventional baselines."""
    return LEARNED.index(label) if label in LEARNED else len(LEARNED)


def render_repeats(res: dict) -> list[str]:
    """Mean ± sample std over the seeds measured (seed 0 is the row above; ``--seeds`` adds the others)."""
    if not res.get("repeats"):
        return []
    by_label: dict[str, list[dict]] = {}
    for seed in ["0", *sorted(res["repeats"], key=int)]:
        for label, row in _seed_rows(res, int(seed)).items():
            by_label.setdefault(label, []).append(row)
    lines = ["", "Over seeds (training, release noise and utility classifier reseeded; same training subset and "
             "attacker): mean ± sample std.", ""]  # fmt: skip

    def ms(rows, key, scale=1.0, fmt=".3f"):
        v = scale * np.array([r[key] for r in rows])
        sd = v.std(ddof=1) if len(v) > 1 else float("nan")
        return f"{v.mean():{fmt}} ± {sd:{fmt}}"

    body = [
        [label, len(rows), ms(rows, "accuracy", 100, ".2f"), ms(rows, "reid_pixel"), ms(rows, "reid_feature"),
         ms(rows, "ssim"), ms(rows, "frechet", fmt=".0f")]
        for label, rows in sorted(by_label.items(), key=lambda kv: _order(kv[0]))
    ]  # fmt: skip
    cols = ["method", "seeds", "accuracy %", "re-id pixel", "re-id feature", "SSIM", "Fréchet"]
    return [*lines, table(cols, body)]


def render_analysis(extra: dict) -> list[str]:
    lines: list[str] = []
    if extra.get("curves"):
        lines += ["## Utility against training length", "",
                  "PPSGAN-(1, 0): accuracy % on 5,000 real test images of a C_c-shaped classifier trained on the "
                  "released training set, along one longer adversarial training (`--curve-epochs`).", ""]  # fmt: skip
        body = []
        for key, rows in extra["curves"].items():
            pts = ", ".join(f"{r['epoch']}: {100 * r['accuracy']:.1f}" for r in rows)
            mins = f" ({rows[-1]['minutes']:.0f} min)" if rows else ""
            body.append([key, f"{pts}{mins}"])
        lines += [table(["run (dataset/recipe/width/train images/epochs)", "epoch: accuracy %"], body), ""]
    if extra.get("noise_budget"):
        lines += ["## Latent noise budget after pretraining", "",
                  "RMS sizes in z̃ right after the autoencoder pretraining (`latent_noise_budget`): `signal` is the "
                  "spread of the image-dependent signal (A z for PPSGAN, z for PPAPNet) across images, `noise "
                  "diff.` the noise left after removing its per-image common mode, `noise common` that common "
                  "mode (one offset per image, which the decoder must learn to cancel), `common %` its share of "
                  "the noise energy, `SNR` = signal / noise diff.", ""]  # fmt: skip
        for name, rows in extra["noise_budget"].items():
            body = [
                [label, f"{b['signal_spread']:.3g}", f"{b['noise_differential']:.3g}", f"{b['noise_common']:.3g}",
                 f"{100 * b['common_fraction']:.3g}", f"{b['snr']:.3g}"]
                for label, b in rows.items()
            ]  # fmt: skip
            cols = ["setting", "signal", "noise diff.", "noise common", "common %", "SNR"]
            lines += [f"### {name}", "", table(cols, body), ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="mnist,fashion-mnist")
    ap.add_argument("--limit", type=int, default=12000)
    ap.add_argument("--probe", type=int, default=2000)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--ae-epochs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=12, help="adversarial epochs: PPSGAN-(1,0), PPAPNet, ACGAN")
    ap.add_argument("--epochs-other", type=int, default=6, help="adversarial epochs: the other PPSGAN settings")
    ap.add_argument("--n-critic", type=int, default=5)
    ap.add_argument("--cls-epochs", type=int, default=3)
    ap.add_argument("--all-settings", action="store_true", help="all four (ε, δ) on every dataset, not only MNIST")
    ap.add_argument("--recipe", choices=("paper", "authors"), default="paper", help="see train_ppsgan")
    ap.add_argument("--budget", action="store_true", help="only the latent noise budget per (ε, δ)")
    ap.add_argument("--curve-epochs", type=int, default=0, help="only a utility-vs-epoch curve this long")
    ap.add_argument("--curve-every", type=int, default=6)
    ap.add_argument("--seeds", default="", help="only further seeds of the learned methods, e.g. 1,2 (see run_repeats)")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    if args.budget or args.curve_epochs:
        for name in args.datasets.split(","):
            if args.budget:
                part, key, value = "noise_budget", name, noise_budget(name, args)
            else:
                part, key = "curves", f"{name}/{args.recipe}/width{args.width}/{args.limit}/{args.curve_epochs} epochs"
                value = curve(name, args)
            _merge(partial(_put_analysis, part, key, value))
    elif args.seeds:
        for name in args.datasets.split(","):
            run_repeats(name, args)
    else:
        for name in args.datasets.split(","):
            res = run_dataset(name, args) | {"probe": args.probe}
            _merge(partial(_put, name, res))
    log(f"wrote {RESULT.md_path}")


if __name__ == "__main__":
    main()
