"""One cell of the grid (:mod:`privpix.evaluation.grid`): release, then utility and quality, one row."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError
from privpix.evaluation.quality import entropy, psnr, ssim
from privpix.evaluation.utility import PROTOCOLS, UtilityScores, utility
from privpix.mechanisms.base import Mechanism, Release
from privpix.mechanisms.kinds import FeatureMechanism, ModelMechanism, require_kind
from privpix.privacy.noise import make_rng

# Every row of :func:`privpix.evaluation.grid.evaluate` has at least these keys (`privpix evaluate --json`).
ROW_KEYS = frozenset(
    {"dataset", "method", "epsilon", "repeat", "accuracy", "recall", "f1", "psnr", "ssim", "entropy", "guarantee"}
)


def evaluate_cell(
    mech: Mechanism, train: ImageSet, test: ImageSet, cell_seed: int, src_entropy: float | None = None
) -> tuple[dict[str, Any], Release | None, Release | None]:
    """One cell of the grid: release ``train`` then ``test`` with one seeded rng, score utility under
    both protocols and the quality of the released test images. Returns the row (without ``dataset``,
    ``method``, ``repeat``) and the two releases, for callers that attack them.

    A mechanism whose output is ``"model"`` releases no images: its row scores the released model's own predictions
    on the original test images (``accuracy``/``recall``/``f1``; the release-all protocol and the image scores are
    NaN), and both releases are ``None``."""
    output = mech.capabilities().output
    nan = math.nan
    if src_entropy is None:
        src_entropy = float(np.mean(entropy(test.as_float())))
    if output == "model":
        return _model_row(mech, test, cell_seed, src_entropy), None, None
    rng = make_rng(cell_seed)
    rel_train = mech.release(train, rng)
    rel_test = mech.release(test, rng)
    if output == "features":
        u, ua = _feature_utility(mech, train, rel_train, test, rel_test)
        quality = {"psnr": nan, "ssim": nan, "entropy": nan}
    else:
        released_train, released_test = rel_train.image_set(), rel_test.image_set()
        u = utility(train, released_train, test, released_test, PROTOCOLS[0], seed=cell_seed)
        ua = utility(train, released_train, test, released_test, PROTOCOLS[1], seed=cell_seed)
        orig, out = test.as_float(), released_test.as_float()
        quality = {"psnr": nan, "ssim": nan, "entropy": float(np.mean(entropy(out)))}
        if output == "images":  # a synthetic image is no transform of the test image at its index
            p = psnr(orig, out)
            quality["psnr"] = float(np.mean(p[np.isfinite(p)])) if np.isfinite(p).any() else math.inf
            quality["ssim"] = float(np.mean(ssim(orig, out)))
    row = {
        "epsilon": mech.epsilon,
        "seed": cell_seed,
        "output": output,
        "accuracy": u.accuracy,
        "recall": u.recall,
        "f1": u.f1,
        "accuracy_release_all": ua.accuracy,
        "recall_release_all": ua.recall,
        "f1_release_all": ua.f1,
        **quality,
        "entropy_original": src_entropy,
        "seconds": rel_train.seconds + rel_test.seconds,
        "parameters": rel_test.parameters,
        "guarantee": rel_test.guarantee.to_dict(),
    }
    return row, rel_train, rel_test


def _model_row(mech: Mechanism, test: ImageSet, cell_seed: int, src_entropy: float) -> dict[str, Any]:
    """The row of a model release: its predictions on the original test images, scored like a utility protocol (the
    model was fitted once, as declared, before the cell; nothing in the cell draws randomness)."""
    if test.labels is None:
        raise ParameterError(f"{test.source}: utility needs labels")
    t0 = time.perf_counter()
    pred = np.asarray(require_kind(mech, ModelMechanism).predict(test))
    u = _scores(test.labels, pred)
    nan = math.nan
    return {
        "epsilon": mech.epsilon,
        "seed": cell_seed,
        "output": "model",
        "accuracy": u.accuracy,
        "recall": u.recall,
        "f1": u.f1,
        "accuracy_release_all": nan,
        "recall_release_all": nan,
        "f1_release_all": nan,
        "psnr": nan,
        "ssim": nan,
        "entropy": nan,
        "entropy_original": src_entropy,
        "seconds": time.perf_counter() - t0,
        "parameters": mech.get_params(),
        "guarantee": mech.privacy(test.shape).guarantee.to_dict(),
    }


def _scores(truth: np.ndarray, pred: np.ndarray) -> UtilityScores:
    """Accuracy, macro recall and macro F1 of predicted labels."""
    from sklearn.metrics import accuracy_score, f1_score, recall_score

    return UtilityScores(
        accuracy=float(accuracy_score(truth, pred)),
        recall=float(recall_score(truth, pred, average="macro", zero_division=0)),
        f1=float(f1_score(truth, pred, average="macro", zero_division=0)),
    )


def _feature_utility(mech, train, rel_train, test, rel_test) -> tuple[UtilityScores, UtilityScores]:
    """Utility of a feature release, the way its mechanism says its reports are learnt from: its
    :meth:`~privpix.mechanisms.FeatureMechanism.utility_learner` trained on the released training reports and their
    labels, tested on the data user's clean encodings of the test images (train-released-test-original) and on the
    released test reports (release-all)."""
    if train.labels is None or test.labels is None:
        raise ParameterError(f"{train.source}: utility needs labels")
    from privpix.evaluation.ldp_learners import learner_for

    reporter = require_kind(mech, FeatureMechanism)

    def scores(x_test) -> UtilityScores:
        clf = learner_for(reporter.utility_learner()).fit(rel_train.features, train.labels)
        return _scores(test.labels, clf.predict(x_test))

    return scores(reporter.encode(test)), scores(rel_test.features)


def cell_seed(seed: int, method: str, eps: float | None, rep: int) -> int:
    """The seed of one (method, ε, repeat) cell of a run seeded with ``seed``: a cell's result does not depend
    on which other cells run, or in what order."""
    import zlib

    tag = f"{seed}|{method}|{eps!r}|{rep}".encode()
    return zlib.crc32(tag) ^ (seed * 2654435761 % (1 << 31))
