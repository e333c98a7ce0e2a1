"""Differentially private synthetic images: mechanisms that fit on the private set once, under a stated (ε, δ),
and release new labelled images drawn from what they learned (``output == "synthetic-images"``): ``dp-merf``
(random Fourier features) and ``dp-hp`` (Hermite-polynomial features), both on the embed-once pipeline of
:mod:`~privpix.mechanisms.synthesis.embedding`."""

from privpix.mechanisms.synthesis import dp_hp, dp_merf  # noqa: F401  (registers; imports torch only when used)
