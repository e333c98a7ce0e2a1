"""Utility: what a classifier can still learn from a release (Zhang, Fu & Meng 2020's PCA + SVM)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.decomposition import PCA
from sklearn.metrics import accuracy_score, f1_score, recall_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError

PROTOCOLS = ("train-released-test-original", "release-all")


@dataclass(frozen=True)
class UtilityScores:
    accuracy: float
    recall: float  # macro
    f1: float  # macro


def pca_svm_scores(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    n_components: int = 50,
    seed: int = 0,
) -> UtilityScores:
    """Fit PCA (``n_components`` capped by the data) + RBF SVM on the training arrays (n, features); score
    accuracy, macro recall and macro F1 on the test arrays.

    PCA is not whitened: whitening would blow up near-zero-variance components (e.g. of pixelized releases)
    and make scores unstable. The components are standardised by the training projections' overall scale.
    """
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ParameterError("pca_svm_scores: images and labels differ in length")
    if len(np.unique(train_y)) < 2:
        raise ParameterError("pca_svm_scores: the training set needs at least two classes")
    k = int(min(n_components, train_x.shape[0] - 1, train_x.shape[1]))
    model = make_pipeline(
        PCA(n_components=k, random_state=seed), StandardScaler(with_std=False), SVC(kernel="rbf", C=10.0)
    )
    model.fit(train_x, train_y)
    pred = model.predict(test_x)
    return UtilityScores(
        accuracy=float(accuracy_score(test_y, pred)),
        recall=float(recall_score(test_y, pred, average="macro", zero_division=0)),
        f1=float(f1_score(test_y, pred, average="macro", zero_division=0)),
    )


def utility(
    train_original: ImageSet,
    train_released: ImageSet,
    test_original: ImageSet,
    test_released: ImageSet | None,
    protocol: str = "train-released-test-original",
    n_components: int = 50,
    seed: int = 0,
) -> UtilityScores:
    """PCA + SVM utility under one of two protocols:

    * ``train-released-test-original``: a model learnt from the release, used on real data.
    * ``release-all``: everything is released; train and test on released images (Zhang, Fu & Meng 2020's setting).
    """
    if protocol not in PROTOCOLS:
        raise ParameterError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if train_original.labels is None:
        raise ParameterError(f"{train_original.source}: utility needs labels")
    test = test_original if protocol == PROTOCOLS[0] else test_released
    if test is None:
        raise ParameterError("protocol release-all needs the released test images")
    # A release keeps its input's labels, but an unconditional synthesizer's images carry none.
    train_y, test_y = train_released.labels, test.labels
    if train_y is None or test_y is None:
        raise ParameterError(f"{(train_released if train_y is None else test).source}: utility needs labels")
    return pca_svm_scores(train_released.flat(), train_y, test.flat(), test_y, n_components=n_components, seed=seed)
