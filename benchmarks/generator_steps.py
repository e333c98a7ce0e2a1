"""How many generator steps a mean-embedding synthesizer needs on a small private set: the measurement behind
``MIN_GENERATOR_STEPS`` and the ``epochs=0`` schedule (:mod:`privpix.mechanisms.synthesis.embedding`).

``dp-merf`` at its defaults (D = 10,000, batch 500) on the CelebA subset's 3,662 training faces (labels: Male;
centre-cropped and resized to 32×32, as ``benchmarks/dp_synthesis.py``), ε = 10, δ = 1e-5. DP-MERF's schedule,
``epochs`` of ceil(n / batch_size) = 8 steps, is 40 steps at its 5 epochs. Two ways to train longer, both
post-processing of the one noisy embedding (the same embedding for a seed, whatever the schedule):

* ``epochs`` (more epochs of 8 steps, the learning rate × 0.9 after each): one fit of the largest count, the
  generator's images sampled after each epoch listed (a prefix of a longer schedule is the shorter schedule);
* ``auto`` (``epochs=0``: 5 epochs, each of max(8, ceil(m / 5)) steps, so 5 learning-rate decays whatever m): one
  fit per minimum m.

Each sample: 10,000 images (labels drawn from the DP class proportions) train the small CNN of
``benchmarks/dp_synthesis.py`` (2 convolutions, 2 fully connected layers; Adam 1e-3, batch 128, 5 epochs, no
epoch selection), scored on the 897 real test faces (majority class: 0.570). Seeds 0, 1, 2 (the fit's seed; the
sample and the CNN use fixed seeds derived from it).

Run: ``.venv/bin/python benchmarks/generator_steps.py`` → ``benchmarks/results/generator_steps/runs.jsonl`` (each
finished fit at once; a rerun skips those there) and ``benchmarks/results/generator_steps.{json,md}``; one torch
thread, about 17 CPU-minutes per seed. ``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _results import RENDER_HELP, RENDER_ONLY, Output, document, rerender, table, write

OUT = Path(__file__).parent / "results" / "generator_steps"
RUNS = OUT / "runs.jsonl"
EPSILON, DELTA = 10.0, 1e-5
SEEDS = (0, 1, 2)
EPOCH_CHECKPOINTS = (5, 10, 15, 25, 40, 60)  # the "epochs" schedule: 8 steps each on the 3,662 faces
AUTO_MINIMUMS = (100, 200, 400)  # the "auto" schedule's minimum steps
N_SYNTHETIC = 10_000
CNN_EPOCHS = 5


def cnn_accuracy(images, test, seed: int) -> float:
    """Test accuracy of the small CNN trained on ``images`` (last epoch, no selection)."""
    from dp_synthesis import _tensor, accuracy, make_cnn
    from privpix import training

    h, w, c = images.shape
    net = training.build(lambda: make_cnn(c, h, w, 2), training.generator(seed))
    y = training.torch.from_numpy(images.labels.astype(np.int64))
    training.fit_classifier(net, net.parameters(), _tensor(images), y, lr=1e-3, epochs=CNN_EPOCHS, batch_size=128,
                            seed=seed + 1, model=net)  # fmt: skip
    return accuracy(net, _tensor(test), test.labels)


def sample(mech, gen, seed: int):
    """``N_SYNTHETIC`` labelled images from ``gen`` (a copy of the generator at a checkpoint) with ``mech``'s DP
    class proportions, drawn as a release draws them."""
    from privpix.data import ImageSet
    from privpix.mechanisms.synthesis import embed_net
    from privpix.mechanisms.synthesis.embedding import sample_labels

    labels = sample_labels(mech.label_probs_, N_SYNTHETIC, np.random.default_rng([seed, 3]))
    images = embed_net.sample(gen, labels, seed + 5).reshape(N_SYNTHETIC, *gen.shape)
    return ImageSet(images, labels=labels)


def fit_with_checkpoints(train, test, seed: int, schedule: str, value: int) -> list[dict[str, Any]]:
    """One fit; a row per checkpoint (``epochs``: each of :data:`EPOCH_CHECKPOINTS` up to ``value``; ``auto``: the
    end of the fit with minimum ``value``)."""
    from privpix.mechanisms import get_mechanism
    from privpix.mechanisms.synthesis import embed_net, embedding

    snapshots: dict[int, Any] = {}
    train_generator = embed_net.train_generator

    def checkpointed(gen, *args, **kwargs):
        if schedule == "epochs":
            kwargs["on_epoch"] = lambda e: snapshots.__setitem__(e, copy.deepcopy(gen)) if e in EPOCH_CHECKPOINTS else 0
        return train_generator(gen, *args, **kwargs)

    params: dict[str, Any] = {"n_classes": 2, "epochs": value if schedule == "epochs" else 0}
    minimum = embedding.MIN_GENERATOR_STEPS
    embed_net.train_generator = checkpointed
    embedding.MIN_GENERATOR_STEPS = value if schedule == "auto" else minimum
    try:
        c0 = time.process_time()
        mech = get_mechanism("dp-merf", epsilon=EPSILON, delta=DELTA, **params).fit(train, seed=seed)
        fit_cpu = time.process_time() - c0
    finally:
        embed_net.train_generator, embedding.MIN_GENERATOR_STEPS = train_generator, minimum
    gen, meta = mech.model_, mech.meta_
    per_epoch = meta["generator_steps"] // meta["generator_epochs"]
    points = snapshots if schedule == "epochs" else {meta["generator_epochs"]: gen}
    rows = []
    for epochs, g in sorted(points.items()):
        acc = cnn_accuracy(sample(mech, g, seed), test, seed)
        rows.append({"schedule": schedule, "value": value, "seed": seed, "epochs": epochs, "steps": epochs * per_epoch,
                     "accuracy": round(acc, 4), "fit_cpu_seconds": round(fit_cpu, 1),
                     "train_seconds": meta["train_seconds"]})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def read_runs() -> list[dict[str, Any]]:
    if not RUNS.exists():
        return []
    return [json.loads(line) for line in RUNS.read_text().splitlines() if line.strip()]


def main(seeds: tuple[int, ...]) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from dp_synthesis import load_private
    from privpix import training

    training.torch.set_num_threads(1)
    train, test = load_private("celeba")
    done = {(r["schedule"], r["value"], r["seed"]) for r in read_runs()}
    plan = [("epochs", max(EPOCH_CHECKPOINTS))] + [("auto", m) for m in AUTO_MINIMUMS]
    OUT.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for schedule, value in plan:
            if (schedule, value, seed) in done:
                continue
            rows = fit_with_checkpoints(train, test, seed, schedule, value)
            with RUNS.open("a") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows)
    write(RESULT, {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "n_fit": len(train),
                   "n_test": len(test), "majority": round(float(np.bincount(test.labels).max() / len(test)), 4),
                   "rows": read_runs()})  # fmt: skip


def render(res: dict) -> str:
    rows = res["rows"]
    preamble = (
        f"`python benchmarks/generator_steps.py` ({res['machine']}, one torch thread). `dp-merf` defaults (D = "
        f"10,000, batch 500) fitted on {res['n_fit']:,} CelebA training faces (Male, 32×32) at ε = {EPSILON:g}, "
        f"δ = 1e-5; {N_SYNTHETIC:,} synthetic images train a small CNN ({CNN_EPOCHS} epochs, last epoch) scored "
        f"on {res['n_test']} real test faces (majority class {res['majority']:.3f}). Mean ± sample std over the seeds "
        "listed. `epochs`: DP-MERF's schedule, epochs of ceil(n / 500) = 8 steps, the learning rate × 0.9 after "
        "each; `auto`: `epochs=0`, 5 epochs of max(8, ceil(m / 5)) steps, m the minimum (`MIN_GENERATOR_STEPS`). "
        "Fit CPU s: the embedding and the generator's training, one process (the `epochs` rows are one fit to 60 "
        "epochs, sampled along the way)."
    )
    keys = sorted({(r["schedule"], r["steps"]) for r in rows}, key=lambda k: (k[0] != "epochs", k[1]))
    body = []
    for schedule, steps in keys:
        sel = [r for r in rows if r["schedule"] == schedule and r["steps"] == steps]
        accs = [r["accuracy"] for r in sel]
        spread = f" ± {np.std(accs, ddof=1):.3f}" if len(accs) > 1 else ""
        what = f"epochs={sel[0]['epochs']}" if schedule == "epochs" else f"epochs=0, minimum {sel[0]['value']}"
        cpu = [r["fit_cpu_seconds"] for r in sel if schedule == "auto"]
        body.append([schedule, what, steps, f"{np.mean(accs):.3f}{spread}", ", ".join(f"{a:.3f}" for a in accs),
                     f"{np.mean(cpu):.0f}" if cpu else "–", ",".join(str(r["seed"]) for r in sel)])  # fmt: skip
    cols = ["schedule", "setting", "generator steps", "CNN accuracy", "per seed", "fit CPU s", "seeds"]
    return document("Generator steps on a small private set", table(cols, body), preamble=preamble)


RESULT = Output(OUT, render)
OUTPUTS = (RESULT,)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        rerender(RESULT)
    else:
        main(tuple(int(s) for s in args.seeds.split(",")))
