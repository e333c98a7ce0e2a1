"""`privpix bench` on ORL and on MNIST: every image mechanism's utility, attacks and audited ε side by side.

For MNIST the bench trains Kim & Yang's (2020) generators (PPSGAN, PPAPNet, ACGAN) itself, at CPU scale, on its
own training split: their fit on the private set, declared by the mechanisms. The autoencoder obfuscator of
Jamshidi et al. (2023) is built for 64×64 RGB CelebA images and does not apply to either set; the LDP encoders of
Wang & Chang (2020) release report vectors, and their image form is ``ldp-pixel``.

Run: ``.venv/bin/python benchmarks/bench_reports.py [--datasets orl,mnist] [--workers 2]`` (about an hour on 2 cores)
→ ``benchmarks/results/bench_<dataset>/{results.csv,results.json,audits.md,screenshot.png}``; the full
``report.html`` is written beside them (not committed: it embeds the sample images). ``--render-only`` rewrites
``audits.md`` from ``results.json``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess  # the report screenshot
import time
from pathlib import Path

from _results import RENDER_HELP, RENDER_ONLY, Output, document, rerender, table
from privpix.data import load_pair
from privpix.evaluation.bench import BenchConfig, run_bench
from privpix.executor import make_executor
from privpix.mechanisms import mechanism_class
from privpix.report.summaries import cell_means, verdict_text

ROOT = Path(__file__).parent
OUT = ROOT / "results"
WORK = ROOT / "work"

IMAGE_METHODS = [
    "pixel-laplace",
    "pixel-laplace[sensitivity=bound,unit=pixel]",
    "dp-pix",
    "lra",
    "sra",
    "esra",
    "pca-inverse",
    "ldp-pixel",
    "pixel-gaussian[sigma=0.3]",
    "gaussian-blur",
    "median-filter",
    "uniform-filter",
]
RUNS = {
    "orl": {"limit": None, "methods": IMAGE_METHODS, "params": {"pca-inverse": {"batch": 200}}},
    "mnist": {
        "limit": 2000,
        # The public basis comes from another data set of 28x28 grey images, Fashion-MNIST's training split:
        # MNIST's own splits (and the built-in digits) hold some of the bench's private images, which a public set
        # may not (privpix.data.overlap), and the 8x8 digits have another shape. A basis from another domain: the
        # price of a public set that is truly public.
        "methods": [
            *IMAGE_METHODS,
            "pca-inverse[basis=public,public=fashion-mnist:train]",
            "ppsgan",
            "ppapnet",
            "acgan",
        ],
        "params": {},
    },
}
# CPU scale: narrow networks, 20 adversarial epochs. The bench fits them on its MNIST training split, so the
# query-loss membership attack measures membership of the networks' fit set.
GAN_TRAINING = {"width": 16, "epochs": 20, "ae_epochs": 3}


def screenshot(report: Path, png: Path) -> bool:
    browser = shutil.which("chromium")
    if browser is None:
        return False
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={WORK / 'chromium-profile'}"]  # fmt: skip
    subprocess.run(
        [browser, *flags, f"--screenshot={png}", "--window-size=1280,2200", report.resolve().as_uri()],
        capture_output=True,
        timeout=120,
    )
    return png.exists()


def audits_md(results: dict) -> str:
    """audits.md from the bench's results.json."""
    cfg = results["config"]
    preamble = (
        f"Command: `.venv/bin/python benchmarks/bench_reports.py --datasets {cfg['dataset']}` "
        f"(limit {cfg['limit']}, ε ∈ {cfg['epsilons']}, {cfg['repeats']} repeat(s), audit {cfg['audit_trials']} "
        f"trials per side). Environment: {results['environment']}."
    )
    audits = [
        [a["method"], a["claimed_epsilon_requested"], "yes" if a["sound"] else "NO", a["unit"], a["claimed_epsilon"],
         f"{a['audited_epsilon_lower']:.2f}", f"{a['max_auditable_epsilon']:.2f}", verdict_text(a)]
        for a in results["audits"]
    ]  # fmt: skip
    keys = ["accuracy", "ssim", "reid_best", "identity_reid", "attr_strong", "mia_dcr_auc", "mia_subspace_auc",
            "mia_loss_auc", "recon_ridge_psnr", "recon_cnn_psnr", "cell_seconds"]  # fmt: skip
    present = [k for k in keys if any(k in c for c in results["cells"])]
    cells = [
        [m, e, *("—" if v[k] is None else f"{v[k]:.3f}" for k in present)]
        for m, e, v in cell_means(results["cells"], present)
    ]
    c0 = results["cells"][0]
    return document(
        f"privpix bench: {cfg['dataset']}",
        "## Claimed versus audited ε",
        table(["method", "ε", "sound", "unit audited", "claimed", "audited ≥ (95 %)", "max auditable", "verdict"],
              audits),
        "## Utility and attacks (mean over repeats)",
        table(["method", "ε", *present], cells),
        preamble=preamble,
        notes=f"Chance: re-identification {c0['reid_chance']:.4f}, identity {c0.get('identity_chance', '—')}, "
        f"attribute majority {c0['attr_majority']:.3f}; inversion baseline (the mean training image, no release) "
        f"{c0.get('recon_baseline_psnr', float('nan')):.1f} dB PSNR. Run time of the last invocation "
        f"{results['run_seconds']:.0f} s (cells already done are skipped); per-cell seconds are in the table.",
    )  # fmt: skip


def output(ds: str) -> Output:
    """The bench's own results.json (written by privpix's bench) and the audits.md rendered from it."""
    folder = OUT / f"bench_{ds}"
    return Output(folder / "results", audits_md, markdown=folder / "audits.md")


OUTPUTS = tuple(output(ds) for ds in RUNS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default=",".join(RUNS))
    ap.add_argument("--epsilon", default="0.1,1,10")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="worker processes for the grid points (same results)")
    ap.add_argument(RENDER_ONLY, action="store_true", help=RENDER_HELP)
    args = ap.parse_args()
    if args.render_only:
        return rerender(*(output(ds) for ds in args.datasets.split(",")))

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    for ds in args.datasets.split(","):
        run = RUNS[ds]
        params = {m: dict(run["params"].get(m, {})) for m in run["methods"]}
        for m in ("ppsgan", "ppapnet", "acgan"):
            if m in params:
                params[m].update(GAN_TRAINING)
        cfg = BenchConfig(
            dataset=ds,
            methods=run["methods"],
            epsilons=[float(e) for e in args.epsilon.split(",")],
            repeats=args.repeats,
            params=params,
            limit=run["limit"],
        )
        for m in cfg.methods:
            mechanism_class(m)
        train, test = load_pair(ds, None, run["limit"], cfg.seed, None, False)
        out = OUT / f"bench_{ds}"
        t0 = time.perf_counter()
        with make_executor("local", args.workers) as ex:
            run_bench(train, test, cfg, WORK / f"bench_{ds}", progress=lambda m, ds=ds: log(f"{ds}: {m}"),
                      executor=ex)  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        for name in ("results.csv", "results.json"):
            shutil.copy(WORK / f"bench_{ds}" / name, out / name)
        rerender(output(ds))  # audits.md from the results.json just copied
        if screenshot(WORK / f"bench_{ds}" / "report.html", out / "screenshot.png"):
            log(f"{ds}: screenshot written")
        log(f"{ds}: done in {time.perf_counter() - t0:.0f} s → {out}")


if __name__ == "__main__":
    main()
