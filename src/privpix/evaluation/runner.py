"""One evaluation path for every mechanism: release, then utility and quality, one row per cell."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.evaluation.quality import entropy, psnr, ssim
from privpix.evaluation.utility import PROTOCOLS, utility
from privpix.mechanisms.base import Mechanism, Release, mechanism_class, ready_mechanism
from privpix.noise import make_rng

# Every row of :func:`evaluate` has at least these keys (the JSON contract of `privpix evaluate`).
ROW_KEYS = frozenset(
    {"dataset", "method", "epsilon", "repeat", "accuracy", "recall", "f1", "psnr", "ssim", "entropy", "guarantee"}
)


def evaluate(
    train: ImageSet,
    test: ImageSet,
    methods: Sequence[str],
    epsilons: Sequence[float],
    repeats: int = 1,
    seed: int = 0,
    params: dict[str, dict[str, Any]] | None = None,
    dataset: str = "",
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Evaluate each (method, ε, repeat): release train and test, score PCA+SVM utility under both protocols
    (``accuracy``/``recall``/``f1`` are train-on-released, test-on-original; ``*_release_all`` train and test
    on released) and image quality of the released test images (PSNR, SSIM vs source, entropy, and the
    source's entropy). Methods without ε (guarantee ``none``) run once per repeat with ``epsilon`` = None.

    Each cell uses its own seed derived from (seed, method, ε, repeat), so rows are reproducible one by one.
    """
    params = params or {}
    rows: list[dict[str, Any]] = []
    src_entropy = float(np.mean(entropy(test.as_float())))
    for method in methods:
        cls = mechanism_class(method)
        eps_list: list[float | None] = list(epsilons) if cls.uses_epsilon else [None]
        for eps in eps_list:
            mech = ready_mechanism(method, eps, params=params.get(method, {}), private=train)
            for rep in range(repeats):
                row, _, _ = evaluate_cell(mech, train, test, cell_seed(seed, method, eps, rep), src_entropy)
                row = {"dataset": dataset or train.source, "method": method, "repeat": rep, **row}
                rows.append(row)
                if progress is not None:
                    progress(f"{method} ε={eps} rep {rep}: accuracy {row['accuracy']:.3f}")
    return rows


def evaluate_cell(
    mech: Mechanism, train: ImageSet, test: ImageSet, cell_seed: int, src_entropy: float | None = None
) -> tuple[dict[str, Any], Release, Release]:
    """One cell of :func:`evaluate`: release ``train`` then ``test`` with one seeded rng, score utility under
    both protocols and the quality of the released test images. Returns the row (without ``dataset``,
    ``method``, ``repeat``) and the two releases, for callers that attack them."""
    rng = make_rng(cell_seed)
    rel_train = mech.release(train, rng)
    rel_test = mech.release(test, rng)
    u = utility(train, rel_train.images, test, rel_test.images, PROTOCOLS[0], seed=cell_seed)
    ua = utility(train, rel_train.images, test, rel_test.images, PROTOCOLS[1], seed=cell_seed)
    orig, out = test.as_float(), rel_test.images.as_float()
    p = psnr(orig, out)
    if src_entropy is None:
        src_entropy = float(np.mean(entropy(orig)))
    row = {
        "epsilon": mech.epsilon,
        "seed": cell_seed,
        "accuracy": u.accuracy,
        "recall": u.recall,
        "f1": u.f1,
        "accuracy_release_all": ua.accuracy,
        "recall_release_all": ua.recall,
        "f1_release_all": ua.f1,
        "psnr": float(np.mean(p[np.isfinite(p)])) if np.isfinite(p).any() else math.inf,
        "ssim": float(np.mean(ssim(orig, out))),
        "entropy": float(np.mean(entropy(out))),
        "entropy_original": src_entropy,
        "seconds": rel_train.seconds + rel_test.seconds,
        "parameters": rel_test.parameters,
        "guarantee": rel_test.guarantee.to_dict(),
    }
    return row, rel_train, rel_test


def cell_seed(seed: int, method: str, eps: float | None, rep: int) -> int:
    """The seed of one (method, ε, repeat) cell of a run seeded with ``seed``: a cell's result does not depend
    on which other cells run, or in what order."""
    import zlib

    tag = f"{seed}|{method}|{eps!r}|{rep}".encode()
    return zlib.crc32(tag) ^ (seed * 2654435761 % (1 << 31))
