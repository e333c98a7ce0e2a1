"""Local differential privacy for images (Wang & Chang 2020): encoders, generalised randomized response, estimators,
the owner-side report format, and the encoders + randomized response as registered feature-release mechanisms
(:mod:`~privpix.mechanisms.ldp.mechanism`: ``ldp-pixel-report``, ``ldp-hog-bovw``, ``ldp-dcaconv``, ``ldp-bnn``).
The learners that read reports are in :mod:`privpix.mechanisms.ldp.learners`."""

from privpix.mechanisms.ldp.encoders import ENCODERS, Encoder, load_encoder, make_encoder
from privpix.mechanisms.ldp.estimators import (
    frequency_estimate,
    frequency_variance,
    mean_estimate,
    mean_estimate_rr,
    mean_variance,
    mean_variance_exact,
    value_counts,
)
from privpix.mechanisms.ldp.rr import grr_perturb, grr_probabilities

__all__ = [
    "ENCODERS",
    "Encoder",
    "frequency_estimate",
    "frequency_variance",
    "grr_perturb",
    "grr_probabilities",
    "load_encoder",
    "make_encoder",
    "mean_estimate",
    "mean_estimate_rr",
    "mean_variance",
    "mean_variance_exact",
    "value_counts",
]
