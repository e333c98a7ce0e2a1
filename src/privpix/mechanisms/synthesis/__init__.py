"""Differentially private synthetic images: mechanisms that fit on the private set once, under a stated (ε, δ),
and release new labelled images drawn from what they learned (``output == "synthetic-images"``): ``dp-merf``
(random Fourier features) and ``dp-hp`` (Hermite-polynomial features), both on the embed-once pipeline of
:mod:`~privpix.mechanisms.synthesis.embedding`, ``dp-teacher`` (dp-merf's images labelled by a DP-SGD
classifier, the two releases composed) and ``dp-eigenfaces`` (a Gaussian per class in a public set's principal
components, the private coefficient moments released once on the same pipeline)."""

from privpix.mechanisms.synthesis import dp_eigenfaces, dp_hp, dp_merf, dp_teacher, dp_transport  # noqa: F401  (registers; imports torch only when used)
