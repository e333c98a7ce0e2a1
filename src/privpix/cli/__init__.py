"""The ``privpix`` command.

``app`` holds the click group :data:`main` and the error handling; ``options`` the option parsing and checks
the commands share; ``publish`` what ``release`` and ``ldp perturb`` share (a sharded release under a ledger, and
its summary); each other module registers one family of commands on ``main`` when imported: ``evaluate``
(datasets, mechanisms, evaluate), ``release``, ``verify``, ``bench`` (audit, bench, demo), ``ldp`` (the
``privpix ldp`` group), ``ledger`` (the ``privpix ledger`` group) and ``fit`` (fit, with the aliases
train-obfuscator and train-ppsgan). They import ``app`` and ``options``, never the other way round.
"""

from privpix.cli import bench, evaluate, fit, ldp, ledger, release, verify  # noqa: F401  (registers the commands)
from privpix.cli.app import main

__all__ = ["main"]
