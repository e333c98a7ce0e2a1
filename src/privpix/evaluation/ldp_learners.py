"""Learners on GRR reports, with the scikit-learn estimator API: what a data user does with released reports.

Every learner is told the reports' domain size ``d`` and per-feature ``epsilon`` (``inf`` for unperturbed
data) and fits on reports ``X`` (n, m) of integers in ``[0, d)`` (or floats holding such integers, as
``Release.values()`` gives them) with labels ``y`` (sent in the clear). The LDP feature mechanisms name the one
their data user trains (:meth:`privpix.mechanisms.ldp.mechanism.LDPFeatures.utility_learner`);
:func:`learner_for` builds it for bench utility. Prediction takes unperturbed encoded vectors (the data user's
own test images), as in the paper.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.neighbors import KNeighborsClassifier

from privpix.errors import ParameterError
from privpix.evaluation.ldp_estimators import frequency_estimate, value_counts
from privpix.mechanisms.kinds import LearnerSpec
from privpix.privacy.grr import check_domain, check_epsilon, grr_probabilities


def _check_reports(X: Any, d: int, name: str = "X") -> np.ndarray:
    """Reports (n, m) of integers in [0, d); a float array holding whole numbers (``Release.values()``, the
    float32 view generic code passes around) is read as the integers it holds."""
    x = np.asarray(X)
    if x.ndim != 2 or len(x) == 0:
        raise ParameterError(f"{name} must have shape (n, m) with n >= 1, got {x.shape}")
    if np.issubdtype(x.dtype, np.floating) and np.all(np.isfinite(x)) and np.array_equal(x, np.round(x)):
        if x.min() >= 0 and x.max() < d:
            x = x.astype(np.uint8 if d <= 256 else np.int64)
    if not np.issubdtype(x.dtype, np.integer) or x.min() < 0 or x.max() >= d:
        raise ParameterError(f"{name} must hold integers in [0, {d}) (d = {d}); got {x.dtype} [{x.min()}, {x.max()}]")
    return x


class _LDPBase(ClassifierMixin, BaseEstimator):
    def _setup(self, X, y):
        self.d_ = check_domain(self.d)
        self.epsilon_ = check_epsilon(self.epsilon)
        X = _check_reports(X, self.d_)
        y = np.asarray(y)
        if y.shape != (len(X),):
            raise ParameterError(f"y must have shape ({len(X)},), got {y.shape}")
        self.classes_, yi = np.unique(y, return_inverse=True)
        self.n_features_in_ = X.shape[1]
        return X, yi

    def _check_test(self, X):
        X = _check_reports(X, self.d_)
        if X.shape[1] != self.n_features_in_:
            raise ParameterError(f"X has {X.shape[1]} features, the model was fitted on {self.n_features_in_}")
        return X


class LDPNaiveBayes(_LDPBase):
    """Categorical Naive Bayes whose per-class value frequencies are estimated from GRR reports (eq. 13).

    Post-processing of the unbiased estimates (which can be negative): each class's estimated counts
    ĉ_j(v) are clipped at 0, ``alpha`` is added (Laplace smoothing) and they are normalised over v. Class
    priors come from the labels, which the owners send in the clear.
    """

    def __init__(self, d: int = 16, epsilon: float = 1.0, alpha: float = 1.0) -> None:
        self.d = d
        self.epsilon = epsilon
        self.alpha = alpha

    def fit(self, X, y):
        X, yi = self._setup(X, y)
        if not self.alpha >= 0:
            raise ParameterError(f"alpha must be >= 0, got {self.alpha!r}")
        k = len(self.classes_)
        logp = np.empty((k, X.shape[1], self.d_))
        self.class_count_ = np.bincount(yi, minlength=k)
        for c in range(k):
            rows = X[yi == c]
            est = frequency_estimate(value_counts(rows, self.d_), len(rows), self.d_, self.epsilon_)
            est = np.maximum(est, 0.0) + self.alpha
            total = est.sum(axis=1, keepdims=True)
            logp[c] = np.log(np.where(total > 0, est / np.where(total > 0, total, 1), 1.0 / self.d_))
        self.feature_log_prob_ = logp
        self.class_log_prior_ = np.log(self.class_count_ / self.class_count_.sum())
        return self

    def predict_log_joint(self, X) -> np.ndarray:
        X = self._check_test(X)
        m = X.shape[1]
        # Gather log P(x_j | class) for every class at once: flat index j·d + x_j.
        flat = self.feature_log_prob_.reshape(len(self.classes_), -1)
        idx = np.arange(m) * self.d_
        out = np.empty((len(X), len(self.classes_)))
        for s in range(0, len(X), 1000):
            sel = idx[None, :] + X[s : s + 1000].astype(np.int64)
            out[s : s + 1000] = flat[:, sel].sum(axis=2).T
        return out + self.class_log_prior_

    def predict(self, X):
        return self.classes_[self.predict_log_joint(X).argmax(1)]


class LDPNearestCentroid(_LDPBase):
    """Nearest centroid with the estimated class centroids μ̂_k = Σ_v v ĉ_j(v) / N_k (eq. 44), unbiased for
    the true class means; distance is the ℓ_p norm (``p``, default 2)."""

    def __init__(self, d: int = 16, epsilon: float = 1.0, p: float = 2.0) -> None:
        self.d = d
        self.epsilon = epsilon
        self.p = p

    def fit(self, X, y):
        X, yi = self._setup(X, y)
        if not self.p >= 1:
            raise ParameterError(f"p must be >= 1, got {self.p!r}")
        pp, q = grr_probabilities(self.d_, self.epsilon_)
        k = len(self.classes_)
        self.centroids_ = np.empty((k, X.shape[1]))
        s1 = self.d_ * (self.d_ - 1) / 2  # Σ_v v
        for c in range(k):
            rows = X[yi == c]
            n = len(rows)
            # Σ_v v ĉ(v) = (Σ_i x'_i − n q Σ_v v) / (p − q): eq. 44 without building the counts.
            self.centroids_[c] = (rows.sum(axis=0, dtype=np.float64) - n * q * s1) / (pp - q) / n
        return self

    def predict(self, X):
        X = self._check_test(X).astype(np.float64)
        if self.p == 2:
            d2 = (X**2).sum(1)[:, None] - 2 * X @ self.centroids_.T + (self.centroids_**2).sum(1)
            return self.classes_[d2.argmin(1)]
        dist = np.stack([np.linalg.norm(X - c, ord=self.p, axis=1) for c in self.centroids_], axis=1)
        return self.classes_[dist.argmin(1)]


class LDPKNN(_LDPBase):
    """k nearest neighbours (Euclidean) among the perturbed training reports (Wang & Chang 2020; k = 100 in its
    Table 2). No estimator is needed: the reports are used as they are."""

    def __init__(self, d: int = 16, epsilon: float = 1.0, n_neighbors: int = 100) -> None:
        self.d = d
        self.epsilon = epsilon
        self.n_neighbors = n_neighbors

    def fit(self, X, y):
        X, yi = self._setup(X, y)
        if not isinstance(self.n_neighbors, int | np.integer) or self.n_neighbors < 1:
            raise ParameterError(f"n_neighbors must be an integer >= 1, got {self.n_neighbors!r}")
        if self.n_neighbors > len(X):
            raise ParameterError(f"n_neighbors={self.n_neighbors} exceeds the {len(X)} training reports")
        # float32 holds these small integers exactly and halves the distance computation's cost.
        self.knn_ = KNeighborsClassifier(n_neighbors=self.n_neighbors, algorithm="brute", n_jobs=-1)
        self.knn_.fit(X.astype(np.float32), yi)
        return self

    def predict(self, X):
        X = self._check_test(X)
        return self.classes_[self.knn_.predict(X.astype(np.float32))]


CLASSIFIERS: dict[str, type[_LDPBase]] = {"nb": LDPNaiveBayes, "ncc": LDPNearestCentroid, "knn": LDPKNN}


def make_classifier(name: str, d: int, epsilon: float, **params: Any) -> _LDPBase:
    """``nb``, ``ncc`` or ``knn`` for reports of domain ``d`` and per-feature ``epsilon`` (``inf``: clean)."""
    if name not in CLASSIFIERS:
        raise ParameterError(f"classifier: unknown name {name!r}; known: {', '.join(CLASSIFIERS)}")
    eps = math.inf if epsilon is None else epsilon
    return CLASSIFIERS[name](d=d, epsilon=eps, **params)


def learner_for(spec: LearnerSpec) -> _LDPBase:
    """The unfitted learner a feature mechanism names (:meth:`~privpix.mechanisms.FeatureMechanism.utility_learner`):
    ``spec.name`` is one of :data:`CLASSIFIERS`, ``spec.params`` its keyword arguments with ``d`` and ``epsilon``."""
    return make_classifier(spec.name, **spec.params)
