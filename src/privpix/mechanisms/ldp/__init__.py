"""Local differential privacy for images (Wang & Chang 2020): encoders, the owner-side report format, and the
encoders + randomized response as registered feature-release mechanisms (:mod:`~privpix.mechanisms.ldp.mechanism`:
``ldp-pixel-report``, ``ldp-hog-bovw``, ``ldp-dcaconv``, ``ldp-bnn``).
Generalised randomized response itself is a privacy primitive (:mod:`privpix.privacy.grr`); what a data user
computes from the reports, the estimators and the learners, is analysis:
:mod:`privpix.evaluation.ldp_estimators` and :mod:`privpix.evaluation.ldp_learners`."""

from privpix.mechanisms.ldp.encoders import ENCODERS, Encoder, load_encoder, make_encoder
from privpix.mechanisms.ldp.mechanism import reports_mechanism

__all__ = [
    "ENCODERS",
    "Encoder",
    "load_encoder",
    "make_encoder",
    "reports_mechanism",
]
