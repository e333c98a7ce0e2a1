"""What Wang & Chang 2020's data user does with a folder of owners' reports (``privpix ldp train``): fit one of the
learners of :mod:`privpix.evaluation.ldp_learners` on the reports and their labels, and score it on clean test
images, encoded by the encoder the reports were made with."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError, arg
from privpix.evaluation.ldp_learners import CLASSIFIERS, make_classifier
from privpix.mechanisms.base import Param
from privpix.mechanisms.ldp import Encoder, load_encoder
from privpix.mechanisms.ldp.reports import MANIFEST, Reports, read_reports

# The classifier parameters a data user may set, and their types.
_KINDS: dict[str, type] = {"n_neighbors": int, "alpha": float, "p": float}


def fit_on_reports(
    reports_dir: str | Path, classifier: str, params: dict[str, str] | None = None
) -> tuple[Any, Reports, dict[str, Any]]:
    """The ``classifier`` (``nb``, ``ncc``, ``knn``, with ``params`` as text: ``n_neighbors``, ``alpha``, ``p``)
    fitted on the labelled reports in ``reports_dir``; the reports; and what a result records of it (the classifier,
    the reports' size, d, m, ε per feature and per image, their guarantee, the fitting time)."""
    reports = read_reports(reports_dir)
    if reports.labels is None:
        raise ParameterError(
            f"{arg('--reports', 'reports_dir')} {reports_dir}: the reports carry no labels, so no classifier can be "
            "fitted"
        )
    kw = {}
    for k, v in (params or {}).items():
        if k not in _KINDS or k not in CLASSIFIERS[classifier]().get_params():
            raise ParameterError(f"{arg(f'--param {k}', f'params[{k!r}]')}: not a parameter of classifier {classifier}")
        kw[k] = Param(k, _KINDS[k], None, "").parse(v)
    t0 = time.perf_counter()
    clf = make_classifier(classifier, reports.d, reports.epsilon, **kw).fit(reports.values, reports.labels)
    clean = math.isinf(reports.epsilon)
    result = {
        "classifier": classifier,
        "params": clf.get_params(),
        "reports": str(reports_dir),
        "n_train": len(reports),
        "m": reports.n_features,
        "d": reports.d,
        "epsilon_per_feature": None if clean else reports.epsilon,
        "epsilon_per_image": None if clean else reports.epsilon * reports.n_features,
        "guarantee": reports.guarantee.to_dict(),
        "fit_seconds": round(time.perf_counter() - t0, 3),
    }
    return clf, reports, result


def reports_encoder(reports_dir: str | Path, reports: Reports, encoder_file: str | Path | None = None) -> Encoder:
    """The encoder ``reports`` (read from ``reports_dir``) were made with, from ``encoder_file`` or else the file
    their manifest names; refused when it is not that encoder (same name, configuration, d, image size and m)."""
    if encoder_file is None:
        named = json.loads((Path(reports_dir) / MANIFEST).read_text()).get("encoder_file")
        if not named or not isinstance(named, str):
            raise ParameterError(
                f"give {arg('--encoder', 'encoder_file')}: the reports' manifest names no encoder file (`ldp perturb` "
                "records its path only with --record-source)"
            )
        encoder_file = named
    enc = load_encoder(encoder_file)
    # Same name and config is not enough: a pixel encoder for 8x8 images has the config of one for 28x28.
    keys = ("encoder", "config", "d", "image_shape", "n_features")
    if any(enc.describe()[k] != reports.encoder.get(k) for k in keys):
        raise ParameterError(
            f"{arg('--encoder', 'encoder_file')} {encoder_file}: is not the encoder these reports were made with"
        )
    return enc


def score(clf: Any, enc: Encoder, test: ImageSet) -> dict[str, Any]:
    """``clf``'s accuracy on the labelled clean ``test`` images (at the encoder's size), encoded by ``enc`` as a data
    user encodes their own: ``n_test``, ``accuracy``, ``predict_seconds``."""
    if test.labels is None:
        raise ParameterError("the test images carry no labels (use a dataset split or one sub-folder per class)")
    t0 = time.perf_counter()
    pred = clf.predict(enc.encode(test))
    return {
        "n_test": len(test),
        "accuracy": float(np.mean(pred == test.labels)),
        "predict_seconds": round(time.perf_counter() - t0, 3),
    }
