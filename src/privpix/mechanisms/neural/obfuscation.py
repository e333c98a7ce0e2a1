"""Jamshidi et al. 2023's measurement protocol for obfuscated releases: adversaries and utility provider.

The obfuscator's fit runs it (its ``measure`` parameter) and keeps the accuracies in the model file, which is why
it lives with the mechanism; the experiments that only analyse releases (the noise baseline, decorrelation) are in
:mod:`privpix.evaluation.obfuscator_experiments`.

* **Weak adversary**: trained on *original* data to infer the private attribute, applied to released data.
* **Strong adversary**: has the obfuscation model; trained on a disjoint split released by the same
  mechanism and settings (fresh noise), applied to released data.
* **Utility provider**: trained on released data; scored on the *original* test data (the paper's protocol)
  and, as earlier works did, on released test data.

Privacy is reported as the adversaries' accuracy, the "leakage" axis of the paper's trade-off figures (lower
is better; guessing the majority class is the floor for an unbalanced attribute). Everything random follows
``seed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privpix.errors import ParameterError
from privpix.mechanisms.neural.inference import NeuralInferrer

#: ``release(x, utility_labels, seed) -> released x`` (same shape, values in [0, 1]).
ReleaseFn = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


@dataclass
class AttributeData:
    """Samples with the utility and private attributes (0/1 each).

    ``x``: (n, 64, 64, 3) images or (n, features) records, float in [0, 1]."""

    x: np.ndarray
    utility: np.ndarray
    private: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.x)
        for name in ("utility", "private"):
            v = np.asarray(getattr(self, name))
            if v.shape != (n,) or not set(np.unique(v)) <= {0, 1}:
                raise ParameterError(f"AttributeData.{name}: expected {n} values in {{0, 1}}")
            setattr(self, name, v.astype(np.int64))

    @property
    def kind(self) -> str:
        return "image" if np.asarray(self.x).ndim == 4 else "tabular"


def obfuscator_release(net, *, sigma2: float, K: float, use_f: bool) -> ReleaseFn:
    """The trained obfuscator with the provider's settings, as a :data:`ReleaseFn`."""
    from privpix.mechanisms.neural.obfuscator import obfuscate

    def release(x: np.ndarray, utility: np.ndarray, seed: int) -> np.ndarray:
        out = obfuscate(net, x, utility if use_f else None, sigma2=sigma2, K=K, use_f=use_f, seed=seed)
        return np.clip(out, 0.0, 1.0)

    return release


def train_inferrer(data: AttributeData, target: str, x: np.ndarray | None = None, **kw) -> NeuralInferrer:
    """A Table 1 / 2 network trained on ``x`` (default ``data.x``) to infer ``data.<target>``."""
    return NeuralInferrer(data.kind, **kw).fit(data.x if x is None else x, getattr(data, target))


def measure_release(
    release: ReleaseFn,
    train: AttributeData,
    test: AttributeData,
    *,
    weak_adversary: NeuralInferrer | None = None,
    strong: bool = True,
    seed: int = 0,
    inferrer: dict | None = None,
) -> dict[str, float]:
    """Privacy and utility of one release setting.

    ``train`` is the pool the strong adversary and the utility provider learn from (released with ``seed``);
    ``test`` is released with ``seed + 1`` and scored. ``weak_adversary`` must have been trained on original
    ``train`` data for the private attribute. ``inferrer`` holds :class:`NeuralInferrer` keyword arguments.
    Returns accuracies in [0, 1]: ``weak``, ``strong`` (private attribute), ``utility`` (provider trained on
    released, scored on original test), ``utility_on_released``.
    """
    kw = {"seed": seed, **(inferrer or {})}
    rel_train = release(train.x, train.utility, seed)
    rel_test = release(test.x, test.utility, seed + 1)
    out: dict[str, float] = {}
    if weak_adversary is not None:
        out["weak"] = weak_adversary.score(rel_test, test.private)
    if strong:
        out["strong"] = train_inferrer(train, "private", rel_train, **kw).score(rel_test, test.private)
    provider = train_inferrer(train, "utility", rel_train, **kw)
    out["utility"] = provider.score(test.x, test.utility)
    out["utility_on_released"] = provider.score(rel_test, test.utility)
    return out
