"""Classifiers that a data user fits on locally perturbed reports (paper 000)."""

from privpix.learners.ldp import CLASSIFIERS, LDPKNN, LDPNaiveBayes, LDPNearestCentroid, make_classifier

__all__ = ["CLASSIFIERS", "LDPKNN", "LDPNaiveBayes", "LDPNearestCentroid", "make_classifier"]
