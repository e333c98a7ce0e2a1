"""The DP-SGD reference on MNIST: a classifier trained directly on the private images with DP-SGD
(``dp-sgd``: Opacus, Tramèr & Boneh's tanh CNN), the choice of publishing no images, under DPImageBench's protocol.

Protocol: MNIST's 60,000 training images are split 55,000 / 5,000 with the fixed seed of
``benchmarks/dp_synthesis.py`` (1805, one image in 12 to validation), so both benchmarks see the same split. DP-SGD
trains on the 55,000 for the planned epochs, its ε accounting for all of them; after each epoch the network is
scored on the 5,000 sensitive validation images, and the epoch with the best validation accuracy (the first, on
ties) is the one tested on the 10,000 MNIST test images (DPImageBench's rule: that selection reads private data and
is not covered by ε). The last epoch's test accuracy, which involves no selection, is reported beside it.
Hyperparameters were tuned with ``--tune`` (validation accuracy only: the test images are not even loaded).

Run: ``.venv/bin/python benchmarks/dp_sgd.py --epsilons 1,10 --seeds 0,1,2 --threads 1`` →
``benchmarks/results/dp_sgd/runs.jsonl`` (one line per (ε, seed), resumable) and
``benchmarks/results/dp_sgd.{json,md}``. ``--tune --epsilons 1 --seeds 0 --param lr=4 ...`` appends validation
curves to ``benchmarks/results/dp_sgd/tuning.jsonl``.

ScatterNet rows: ``--features scatternet --datasets mnist,fashion-mnist --epsilons 1,3 --seeds
0,1,2 --threads 2`` → ``dp_sgd/scatternet.jsonl``: ``dp-sgd features=scatternet`` (Tramèr & Boneh's ScatterNet +
linear, Poisson sampling) on the same 55,000 images, tested at its last epoch (no selection on private data, so
the whole result is covered by ε). Settings are fixed a priori (``SCATTER_SETTINGS``), not tuned.

``--render-only`` rewrites ``dp_sgd.md`` from ``dp_sgd.json`` (which holds the runs, the tuning runs and the
ScatterNet rows).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _results import RENDER_HELP, RENDER_ONLY, Output, rerender, table, write
from privpix.data import ImageSet, load_dataset
from privpix.mechanisms import get_mechanism

OUT = Path(__file__).parent / "results"
SPLIT_SEED = 18_05  # benchmarks/dp_synthesis.py's: the same 55,000 / 5,000 split for every method and seed
VAL_RATIO = 12
DELTA = 1e-5
# Chosen on the validation split (tuning.jsonl; the md lists what was tried), never on the test set.
SETTINGS: dict[float, dict[str, Any]] = {
    1.0: {"epochs": 10, "batch_size": 512, "lr": 1.0, "lr_decay": 1.0, "momentum": 0.9, "max_grad_norm": 0.1},
    10.0: {"epochs": 15, "batch_size": 512, "lr": 4.0, "lr_decay": 0.85, "momentum": 0.9, "max_grad_norm": 0.1},
}
TARGETS = {1.0: 0.88, 10.0: 0.96}
# ScatterNet + linear: Tramèr & Boneh's large-batch recipe (batch 4096, SGD with momentum 0.9, C = 0.1), fixed before
# any run; more epochs where the budget allows more steps. Not tuned on validation or test data.
SCATTER_SETTINGS: dict[float, dict[str, Any]] = {
    1.0: {"features": "scatternet", "epochs": 15, "batch_size": 4096, "lr": 4.0, "lr_decay": 1.0, "momentum": 0.9,
          "max_grad_norm": 0.1},
    3.0: {"features": "scatternet", "epochs": 30, "batch_size": 4096, "lr": 4.0, "lr_decay": 1.0, "momentum": 0.9,
          "max_grad_norm": 0.1},
}  # fmt: skip
# The targets: MNIST >= 97.5 at ε = 1 and >= 98.5 at ε = 3; Fashion-MNIST >= 89 at ε = 3.
SCATTER_TARGETS = {("mnist", 1.0): 0.975, ("mnist", 3.0): 0.985, ("fashion-mnist", 3.0): 0.89}
NOTES = [
    "Reading the table. At ε = 10 the target is met by the mean over seeds and no more: 0.9600 with the epoch "
    "chosen on validation, 0.9597 at the last epoch, and one seed of three (seed 1: 0.9569) is below 0.96. At ε = 1 "
    "the target (0.88) is met with a wide margin by every seed. The final settings were fixed from the tuning runs "
    "below before any test accuracy was computed: ε = 10 extends the best tuning run (batch 512, lr 4, decay 0.8, "
    "10 epochs) to 15 epochs with decay 0.85; ε = 1 is the best ε = 1 tuning run (batch 512, lr 1) with 10 epochs "
    "and the centred input adopted after it. Validation curves are in `dp_sgd/runs.jsonl`.",
    "",
    "Seconds are wall clock on a shared 2-core machine with other jobs running (load average 6 to 8, the two ε "
    "run as two parallel processes), so they vary by a factor of two between seeds; one epoch (107 steps of about "
    "512 images) took 15 to 72 s on one torch thread (15 to 20 s when the machine was quiet).",
]
# Tuning runs stopped before their planned end (no tuning.jsonl line): ε, settings, validation accuracy per epoch.
STOPPED = [
    (1.0, "input [0, 1], 15 epochs planned (z = 1.304), batch 256, lr 2, momentum 0.9, C 0.1; stopped after 8",
     [0.8744, 0.8836, 0.8828, 0.8764, 0.8802, 0.8824, 0.8638, 0.8616]),
    (10.0, "input [0, 1], 15 epochs planned (z = 0.5417), batch 256, lr 2, momentum 0.9, C 0.1; stopped after 8",
     [0.8938, 0.9208, 0.9274, 0.9362, 0.9402, 0.9468, 0.9446, 0.9438]),
]  # fmt: skip


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def split_private(n: int, seed: int = SPLIT_SEED, ratio: int = VAL_RATIO) -> tuple[np.ndarray, np.ndarray]:
    """(training indices, validation indices), sorted and disjoint: n // ratio validation images drawn with ``seed``
    (5,000 of MNIST's 60,000); the same rule and seed as benchmarks/dp_synthesis.py."""
    perm = np.random.default_rng(seed).permutation(n)
    n_val = n // ratio
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def accuracy(pred: np.ndarray, labels: np.ndarray) -> float:
    return round(float(np.mean(pred == labels)), 4)


def run_one(
    epsilon: float, seed: int, settings: dict[str, Any], train: ImageSet, val: ImageSet, test: ImageSet | None
) -> dict[str, Any]:
    """One DP-SGD fit on ``train``; the validation curve, and (unless ``test`` is None) the test accuracy at the
    epoch chosen on validation and at the last epoch."""
    from privpix.mechanisms import dp_sgd_training

    curve: list[float] = []
    states: list[dict] = []
    xval = val.as_float()

    def on_epoch(epoch: int, net) -> None:
        curve.append(accuracy(dp_sgd_training.predict(net, xval), val.labels))
        states.append({k: v.detach().clone() for k, v in net.state_dict().items()})
        log(f"  ε={epsilon:g} seed {seed} epoch {epoch}: validation {curve[-1]:.4f}")

    t0 = time.perf_counter()
    mech = get_mechanism("dp-sgd", epsilon=epsilon, delta=DELTA, **settings).fit(train, seed=seed, on_epoch=on_epoch)
    seconds = time.perf_counter() - t0
    meta = mech.meta_
    row: dict[str, Any] = {
        "epsilon": epsilon,
        "delta": DELTA,
        "seed": seed,
        **settings,
        "inputs": "[-1, 1]",  # the network maps pixels in [0, 1] to 2x − 1 (the first tuning runs did not)
        "n_train": len(train),
        "n_val": len(val),
        "noise_multiplier": meta["noise_multiplier"],
        "sample_rate": meta["sample_rate"],
        "steps": meta["steps"],
        "epsilon_spent": meta["epsilon_spent"],
        "accountant": meta["accountant"],
        "val_curve": curve,
        "chosen_epoch": int(np.argmax(curve)) + 1,
        "seconds": round(seconds, 1),
        "epoch_seconds": mech.history_["seconds"],
    }
    if test is not None:
        net = mech.network()
        row["test_last"] = accuracy(mech.predict(test), test.labels)
        net.load_state_dict(states[row["chosen_epoch"] - 1])
        row["test_chosen"] = accuracy(dp_sgd_training.predict(net, test.as_float()), test.labels)
    return row


def run_scatter(dataset: str, epsilon: float, seed: int, train: ImageSet, test: ImageSet) -> dict[str, Any]:
    """One ``dp-sgd features=scatternet`` fit on ``train`` and its test accuracy at the last epoch (no selection)."""
    settings = SCATTER_SETTINGS[epsilon]
    t0 = time.perf_counter()
    mech = get_mechanism("dp-sgd", epsilon=epsilon, delta=DELTA, **settings).fit(train, seed=seed)
    seconds = time.perf_counter() - t0
    meta = mech.meta_
    t1 = time.perf_counter()
    acc = accuracy(mech.predict(test), test.labels)
    return {
        "dataset": dataset,
        "epsilon": epsilon,
        "delta": DELTA,
        "seed": seed,
        **settings,
        "n_train": len(train),
        "noise_multiplier": meta["noise_multiplier"],
        "sample_rate": meta["sample_rate"],
        "steps": meta["steps"],
        "epsilon_spent": meta["epsilon_spent"],
        "accountant": meta["accountant"],
        "test_last": acc,
        "seconds": round(seconds, 1),
        "predict_seconds": round(time.perf_counter() - t1, 1),
    }


def scatter_section(rows: list[dict]) -> list[str]:
    """The ScatterNet rows of dp_sgd.md: mean ± std over seeds per (dataset, ε), then every run."""
    if not rows:
        return []
    lines = [
        "",
        "## ScatterNet + linear",
        "",
        "`python benchmarks/dp_sgd.py --features scatternet --datasets mnist,fashion-mnist --epsilons 1,3 --seeds "
        "0,1,2 --threads 2`. `dp-sgd features=scatternet`: Tramèr & Boneh's (2021) ScatterNet (kymatio, J = 2, "
        "L = 8: 81 × 7 × 7 features, fixed and data-independent), GroupNorm in 27 groups, one dense layer trained "
        "with DP-SGD (Opacus, Poisson sampling, the sampling the RDP accountant assumes). Same 55,000 training "
        "images; **tested at the last epoch, no selection**: the whole result is covered by (ε, δ = 1e-5). Settings "
        "fixed a priori from Tramèr & Boneh's large-batch recipe, not tuned: batch 4096, lr 4, momentum 0.9, C 0.1, "
        "15 epochs at ε = 1 and 30 at ε = 3 (a prototype of each watched its test curve; nothing was chosen by it).",
        "",
    ]
    body = []
    groups: dict[tuple[str, float], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["dataset"], float(r["epsilon"])), []).append(r)
    for (ds, eps), rs in sorted(groups.items()):
        m, s = mean_std([r["test_last"] for r in rs])
        target = SCATTER_TARGETS.get((ds, eps))
        met = "" if target is None else (" (met)" if m >= target else f" (missed by {target - m:.4f})")
        body.append([
            ds, f"{eps:g}", f"{m:.4f} ± {s:.4f}", f"{'—' if target is None else f'≥ {target:.3f}'}{met}",
            ", ".join(str(r["seed"]) for r in rs), rs[0]["epochs"], f"{rs[0]['noise_multiplier']:.4f}",
            f"{rs[0]['sample_rate']:.5f}", rs[0]["steps"], f"{max(r['epsilon_spent'] for r in rs):.4f}",
            f"{mean_std([r['seconds'] for r in rs])[0]:.0f}",
        ])  # fmt: skip
    cols = ["data", "ε", "test accuracy (last epoch)", "target", "seeds", "epochs", "z", "q", "steps",
            "accountant's ε", "fit seconds (features + training)"]  # fmt: skip
    runs = [
        [r["dataset"], f"{r['epsilon']:g}", r["seed"], f"{r['test_last']:.4f}", f"{r['seconds']:.0f}"]
        for r in sorted(rows, key=lambda r: (r["dataset"], r["epsilon"], r["seed"]))
    ]
    return [*lines, table(cols, body), "", table(["data", "ε", "seed", "test accuracy", "fit seconds"], runs)]


def read_rows(path: Path) -> list[dict]:
    """The runs of a JSONL file; a torn last line (a run killed mid-write) is skipped."""
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def append(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(json.dumps(row) + "\n")


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def summarize(rows: list[dict], command: str, threads: int) -> dict[str, Any]:
    by_eps: dict[float, list[dict]] = {}
    for r in rows:
        by_eps.setdefault(float(r["epsilon"]), []).append(r)
    rows_by_eps = []
    for eps, rs in sorted(by_eps.items()):
        rs = sorted(rs, key=lambda r: r["seed"])
        chosen, last = mean_std([r["test_chosen"] for r in rs]), mean_std([r["test_last"] for r in rs])
        rows_by_eps.append(
            {
                "epsilon": eps,
                "delta": rs[0]["delta"],
                "seeds": [r["seed"] for r in rs],
                "test_chosen_mean": round(chosen[0], 4),
                "test_chosen_std": round(chosen[1], 4),
                "test_last_mean": round(last[0], 4),
                "test_last_std": round(last[1], 4),
                "target": TARGETS.get(eps),
                "epochs": rs[0]["epochs"],
                "chosen_epochs": [r["chosen_epoch"] for r in rs],
                "batch_size": rs[0]["batch_size"],
                "lr": rs[0]["lr"],
                "lr_decay": rs[0]["lr_decay"],
                "momentum": rs[0]["momentum"],
                "max_grad_norm": rs[0]["max_grad_norm"],
                "noise_multiplier": rs[0]["noise_multiplier"],
                "sample_rate": rs[0]["sample_rate"],
                "steps": rs[0]["steps"],
                "epsilon_spent": max(r["epsilon_spent"] for r in rs),
                "seconds_mean": round(mean_std([r["seconds"] for r in rs])[0], 1),
            }
        )
    return {
        "benchmark": "DP-SGD reference classifier on MNIST, DPImageBench's protocol",
        "command": command,
        "machine": f"{platform.machine()}, {platform.python_version()}, torch threads {threads}",
        "accountant": rows[0]["accountant"] if rows else "",
        "split": {"seed": SPLIT_SEED, "train": 55_000, "validation": 5_000, "test": 10_000},
        "table": rows_by_eps,
        "runs": rows,
    }


def render(summary: dict[str, Any]) -> str:
    """dp_sgd.md from dp_sgd.json: the CNN's runs, the tuning runs, and the ScatterNet rows when there are any."""
    tuning, scatter = summary.get("tuning", []), summary.get("scatternet", [])
    lines = [
        "# DP-SGD reference on MNIST",
        "",
        f"`{summary['command']}` ({summary['machine']}). `dp-sgd`: Tramèr & Boneh's tanh CNN trained with DP-SGD "
        "(Opacus: Poisson sampling, per-example clipping, Gaussian noise); it releases the model, no images. "
        f"δ = {DELTA:g}; the noise multiplier from the {summary['accountant']}, for all planned epochs.",
        "",
        "Protocol (DPImageBench's): the 60,000 MNIST training images split 55,000 (DP-SGD) / 5,000 (sensitive "
        f"validation) with seed {SPLIT_SEED}, the split of `benchmarks/dp_synthesis.py`; the epoch is chosen on the "
        "5,000 validation images; test accuracy on the 10,000 MNIST test images. **The epoch choice reads private "
        "validation data and is not covered by ε** (as in DPImageBench); the last-epoch column involves no selection "
        "and is covered by ε. Mean ± sample std over the seeds.",
        "",
    ]
    body = [
        [f"{t['epsilon']:g}", f"{t['test_chosen_mean']:.4f} ± {t['test_chosen_std']:.4f}",
         f"{t['test_last_mean']:.4f} ± {t['test_last_std']:.4f}",
         "—" if t["target"] is None else f"≥ {t['target']:.2f}", ", ".join(map(str, t["seeds"])),
         f"{t['epochs']} ({', '.join(map(str, t['chosen_epochs']))})", t["batch_size"], f"{t['lr']:g}",
         f"{t['lr_decay']:g}", f"{t['momentum']:g}", f"{t['max_grad_norm']:g}", f"{t['noise_multiplier']:.4f}",
         f"{t['sample_rate']:.5f}", t["steps"], f"{t['epsilon_spent']:.4f}", f"{t['seconds_mean']:.0f}"]
        for t in summary["table"]
    ]  # fmt: skip
    cols = ["ε", "test acc. (chosen epoch)", "test acc. (last epoch)", "target", "seeds", "epochs (chosen)", "batch",
            "lr", "lr decay", "momentum", "C", "noise multiplier z", "q", "steps", "accountant's ε",
            "seconds per run"]  # fmt: skip
    runs = [
        [f"{r['epsilon']:g}", r["seed"], f"{max(r['val_curve']):.4f} ({r['chosen_epoch']})", f"{r['test_chosen']:.4f}",
         f"{r['test_last']:.4f}", f"{r['seconds']:.0f}"]
        for r in sorted(summary["runs"], key=lambda r: (r["epsilon"], r["seed"]))
    ]  # fmt: skip
    lines += [
        table(cols, body),
        "",
        table(["ε", "seed", "best validation (epoch)", "test (chosen epoch)", "test (last epoch)", "seconds"], runs),
    ]
    lines += ["", *NOTES, "", "## Tuning (validation accuracy only; the test set was not loaded)", ""]
    if tuning:
        body = []
        for r in tuning:
            best = int(np.argmax(r["val_curve"]))
            body.append([
                f"{r['epsilon']:g}", r["seed"], r["inputs"], r["epochs"], r["batch_size"], f"{r['lr']:g}",
                f"{r.get('lr_decay', 1.0):g}", f"{r['momentum']:g}", f"{r['max_grad_norm']:g}",
                f"{r['noise_multiplier']:.3f}", f"{r['val_curve'][best]:.4f} ({best + 1})", f"{r['val_curve'][-1]:.4f}",
            ])  # fmt: skip
        cols = ["ε", "seed", "network input", "epochs", "batch", "lr", "lr decay", "momentum", "C", "z",
                "best validation (epoch)", "last validation"]  # fmt: skip
        lines.append(table(cols, body))
    else:
        lines.append("No tuning runs recorded.")
    if STOPPED:
        lines += ["", "Stopped early (validation accuracy per epoch):", ""]
        lines += [f"- ε = {e:g}, {what}: {', '.join(f'{v:.4f}' for v in curve)}" for e, what, curve in STOPPED]
    lines += scatter_section(scatter)
    return "\n".join(lines) + "\n"


RESULT = Output(OUT / "dp_sgd", render)
OUTPUTS = (RESULT,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilons", default="1,10")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--param", action="append", default=[], help="key=value overriding SETTINGS (tuning)")
    ap.add_argument("--tune", action="store_true", help="validation curves only, to tuning.jsonl; no test set")
    ap.add_argument("--output", default=str(OUT / "dp_sgd"), help="folder of runs.jsonl / tuning.jsonl")
    ap.add_argument("--features", default="pixels", choices=("pixels", "scatternet"))
    ap.add_argument("--datasets", default="mnist", help="with --features scatternet: mnist,fashion-mnist")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*OUTPUTS)
    import torch

    torch.set_num_threads(args.threads)
    command = "python benchmarks/dp_sgd.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    folder = Path(args.output)
    if args.features == "scatternet":
        scatter_runs(args, folder)
        return
    overrides: dict[str, Any] = {}
    for item in args.param:
        key, _, value = item.partition("=")
        overrides[key] = float(value) if "." in value or "e" in value else int(value)
    full = load_dataset("mnist:train", args.data_dir)
    fit_idx, val_idx = split_private(len(full))
    train, val = full.subset(fit_idx), full.subset(val_idx)
    test = None if args.tune else load_dataset("mnist:test", args.data_dir)
    runs = folder / ("tuning.jsonl" if args.tune else "runs.jsonl")
    done = {(float(r["epsilon"]), int(r["seed"])) for r in read_rows(runs)} if not args.tune else set()
    for eps in (float(e) for e in args.epsilons.split(",")):
        settings = {**SETTINGS[eps], **overrides} if eps in SETTINGS else {**SETTINGS[1.0], **overrides}
        for seed in (int(s) for s in args.seeds.split(",")):
            if (eps, seed) in done:
                continue
            log(f"ε={eps:g} seed {seed}: {settings}")
            row = run_one(eps, seed, settings, train, val, test)
            append(runs, row)
            shown = "" if test is None else f", test {row['test_chosen']:.4f} (last {row['test_last']:.4f})"
            log(f"ε={eps:g} seed {seed}: best validation {max(row['val_curve']):.4f}{shown}, {row['seconds']:.0f} s")
    if args.tune:
        return
    write_results(folder, command, args.threads)


def write_results(folder: Path, command: str, threads: int) -> None:
    """dp_sgd.json and dp_sgd.md from every recorded run (the CNN's, the tuning runs, and the ScatterNet rows when
    there are any)."""
    summary = summarize(read_rows(folder / "runs.jsonl"), command, threads)
    summary["scatternet"] = read_rows(folder / "scatternet.jsonl")
    summary["tuning"] = read_rows(folder / "tuning.jsonl")
    write(RESULT, summary, indent=1)
    log(f"wrote {RESULT.json_path} and {RESULT.md_path}")


def scatter_runs(args, folder: Path) -> None:
    """``--features scatternet``: the ScatterNet rows, resumable, then the results files rewritten."""
    runs = folder / "scatternet.jsonl"
    done = {(r["dataset"], float(r["epsilon"]), int(r["seed"])) for r in read_rows(runs)}
    for dataset in args.datasets.split(","):
        full = load_dataset(f"{dataset}:train", args.data_dir)
        fit_idx, _ = split_private(len(full))
        train, test = full.subset(fit_idx), load_dataset(f"{dataset}:test", args.data_dir)
        for eps in (float(e) for e in args.epsilons.split(",")):
            if (dataset, eps) not in SCATTER_TARGETS:
                continue
            for seed in (int(s) for s in args.seeds.split(",")):
                if (dataset, eps, seed) in done:
                    continue
                log(f"{dataset} ε={eps:g} seed {seed}: {SCATTER_SETTINGS[eps]}")
                row = run_scatter(dataset, eps, seed, train, test)
                append(runs, row)
                log(f"{dataset} ε={eps:g} seed {seed}: test {row['test_last']:.4f}, {row['seconds']:.0f} s")
    # The CNN's rows keep the command (and the one torch thread) that produced them.
    earlier = OUT / "dp_sgd.json"
    previous = json.loads(earlier.read_text()).get("command", "") if earlier.exists() else ""
    write_results(folder, previous, 1)


if __name__ == "__main__":
    main()
