"""Differentially private synthetic images: mechanisms that fit on the private set once, under a stated (ε, δ),
and release new labelled images drawn from what they learned (``output == "synthetic-images"``)."""

from privpix.mechanisms.synthesis import dp_merf  # noqa: F401  (registers; imports torch only when used)
