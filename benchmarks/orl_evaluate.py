"""Utility of the pixel and singular-value mechanisms on ORL at ε = 0.1, 1, 10 (Zhang, Fu & Meng's 2020 protocol).

Equivalent CLI: ``privpix evaluate --dataset orl --method <each method below> --epsilon 0.1,1,10 --repeats 3``.
Run: ``.venv/bin/python benchmarks/orl_evaluate.py`` → ``benchmarks/results/orl_evaluate.{json,md}``;
``--render-only`` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import time
from pathlib import Path

from _results import Col, Output, document, render_only, table, write
from privpix.data import load_dataset
from privpix.evaluation import evaluate
from privpix.report.summaries import summary_rows

METHODS = [
    "pixel-laplace",  # Zhang, Fu & Meng's LAP: data-derived column sensitivity (not DP)
    "pixel-laplace[sensitivity=bound,unit=column]",
    "pixel-laplace[sensitivity=bound,unit=pixel]",
    "dp-pix[b=4,m=1]",
    "sra",  # Zhang, Fu & Meng, r = 100 capped at rank (not DP: singular vectors in clear)
    "esra",  # Zhang, Fu & Meng, ε split half/half (not DP)
]
EPSILONS = [0.1, 1.0, 10.0]
REPEATS = 3


def main() -> None:
    train, test = load_dataset("orl:train"), load_dataset("orl:test")
    t0 = time.perf_counter()
    rows = evaluate(train, test, METHODS, EPSILONS, repeats=REPEATS, seed=0, dataset="orl")
    write(RESULT, {"seconds": time.perf_counter() - t0, "rows": rows})
    print(RESULT.md_path.read_text(encoding="utf-8"))


def render(res: dict) -> str:
    rows = res["rows"]
    title = (
        f"ORL (40 subjects; per subject images 1-5 train, 6-10 test), PCA+SVM, {REPEATS} repeats, "
        f"{res['seconds']:.0f} s in all"
    )
    preamble = (
        "accuracy / macro F1: trained on released, tested on original. release-all: trained and tested on "
        "released. Chance = 0.025."
    )
    cols = [
        Col("method"), Col("ε", "g"), Col("accuracy", ".3f"), Col("macro recall", ".3f"), Col("macro F1", ".3f"),
        Col("acc. release-all", ".3f"), Col("PSNR dB", ".1f"), Col("SSIM", ".3f"),
        Col(f"entropy (orig {rows[0]['entropy_original']:.2f})", ".2f"), Col("guarantee"),
    ]  # fmt: skip
    body = []
    for s in summary_rows(rows):
        rec = [r["recall"] for r in rows if r["method"] == s["method"] and r["epsilon"] == s["epsilon"]]
        body.append([s["method"], s["epsilon"], s["accuracy"], sum(rec) / len(rec), s["f1"], s["accuracy_release_all"],
                     s["psnr"], s["ssim"], s["entropy"], s["guarantee_compact"]])  # fmt: skip
    return document(title, table(cols, body), preamble=preamble)


RESULT = Output(Path(__file__).parent / "results" / "orl_evaluate", render)
OUTPUTS = (RESULT,)

if __name__ == "__main__":
    if not render_only(None, *OUTPUTS):
        main()
