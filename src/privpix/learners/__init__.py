"""The learners that read LDP reports (scikit-learn estimators): kept importable here, as the README and
docs/ldp.md show. They live beside the mechanisms whose reports they read, :mod:`privpix.mechanisms.ldp.learners`."""

from privpix.mechanisms.ldp.learners import CLASSIFIERS, LDPKNN, LDPNaiveBayes, LDPNearestCentroid, make_classifier

__all__ = ["CLASSIFIERS", "LDPKNN", "LDPNaiveBayes", "LDPNearestCentroid", "make_classifier"]
