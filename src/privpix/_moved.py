"""Old import paths, kept working: modules that moved into their layer's package in issue 30 are importable
under their earlier names (``privpix.noise`` is ``privpix.privacy.noise``, the same module object, so a
monkeypatch through either name reaches the one the code uses).

A finder at the end of ``sys.meta_path`` answers only for the names below, and only after the normal import
system found no module of that name; it imports nothing until such a name is asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "privpix.accounting": "privpix.privacy.accounting",
    "privpix.composition": "privpix.privacy.composition",
    "privpix.gaussian_release": "privpix.privacy.gaussian_release",
    "privpix.guarantees": "privpix.privacy.guarantees",
    "privpix.neighbours": "privpix.privacy.neighbours",
    "privpix.noise": "privpix.privacy.noise",
    "privpix.noise_kernels": "privpix.privacy.noise_kernels",
    "privpix.publish": "privpix.publishing.release",
    "privpix.sharded": "privpix.publishing.shards",
    "privpix.release_folder": "privpix.publishing.staging",
    "privpix.conformance": "privpix.testing.conformance",
    "privpix.stattests": "privpix.testing.stattests",
    "privpix.bench": "privpix.evaluation.bench",
    "privpix.evaluation.curves": "privpix.evaluation.audit.curves",
    "privpix.evaluation.one_run": "privpix.evaluation.audit.one_run",
    "privpix.learners": "privpix.evaluation.ldp_learners",
    "privpix.mechanisms.dp_sgd": "privpix.mechanisms.neural.dp_sgd",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec) -> None:
        return None  # a placeholder module; exec_module swaps the real one in

    def exec_module(self, module: ModuleType) -> None:
        # The import system returns whatever sys.modules holds under the name once this returns, so the old name
        # and the new one are one module; the real module's own __spec__ and __name__ stay untouched.
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
