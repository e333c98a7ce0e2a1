"""privpix: publish image data privately, and measure what the publication protects.

The user API, importable from here::

    from privpix import load_dataset, get_mechanism, release, fit, evaluate, audit, PrivacyLedger, Guarantee

``release`` is :func:`privpix.publishing.release.release_to_dir` (a mechanism's release of every batch into a folder,
with its manifest, charged to a ledger when given one); ``fit`` is :func:`privpix.publishing.fit.fit` (a mechanism
fitted and its model file written, the fit charged to a ledger when it is a DP release); ``evaluate`` is
:func:`privpix.evaluation.grid.evaluate` (utility and image quality of releases over a grid of methods and ε);
``audit`` is :func:`privpix.evaluation.audit.audit` (an empirical lower bound on ε). They load on first use, so
``import privpix`` stays light (no torch, no scikit-learn).
"""

from typing import TYPE_CHECKING

from privpix.errors import BudgetExceededError, DataError, ParameterError, PrivpixError
from privpix.lazy import lazy_exports
from privpix.privacy.guarantees import Guarantee
from privpix.version import __version__

_LAZY = {
    "load_dataset": ("privpix.data", "load_dataset"),
    "get_mechanism": ("privpix.mechanisms", "get_mechanism"),
    "PrivacyLedger": ("privpix.privacy.accounting", "PrivacyLedger"),
    "release": ("privpix.publishing.release", "release_to_dir"),
    "fit": ("privpix.publishing.fit", "fit"),
    "audit": ("privpix.evaluation.audit", "audit"),
    "evaluate": ("privpix.evaluation.grid", "evaluate"),
}

__all__ = [
    "BudgetExceededError",
    "DataError",
    "Guarantee",
    "ParameterError",
    "PrivacyLedger",
    "PrivpixError",
    "__version__",
    "audit",
    "evaluate",
    "fit",
    "get_mechanism",
    "load_dataset",
    "release",
]

if TYPE_CHECKING:  # type checkers and IDEs see the real objects
    from privpix.data import load_dataset
    from privpix.evaluation.audit import audit
    from privpix.evaluation.grid import evaluate
    from privpix.mechanisms import get_mechanism
    from privpix.privacy.accounting import PrivacyLedger
    from privpix.publishing.fit import fit
    from privpix.publishing.release import release_to_dir as release


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
