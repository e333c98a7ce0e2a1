"""Jamshidi et al. 2023's experiments on obfuscated releases beyond what the obfuscator's fit measures: the "Noise"
baseline and the decorrelation check (§4.2.4). Both are scored with the protocol of
:mod:`privpix.mechanisms.neural.obfuscation` (:func:`~privpix.mechanisms.neural.obfuscation.measure_release`).
Everything random follows ``seed``.
"""

from __future__ import annotations

import numpy as np

from privpix.errors import ParameterError
from privpix.mechanisms.neural.inference import NeuralInferrer
from privpix.mechanisms.neural.obfuscation import AttributeData, ReleaseFn


def gaussian_noise_release(variance: float) -> ReleaseFn:
    """The "Noise" baseline: zero-mean Gaussian noise of this variance on every value, clipped to [0, 1]."""
    if variance < 0:
        raise ParameterError(f"variance must be >= 0, got {variance}")

    def release(x: np.ndarray, utility: np.ndarray, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        x = np.asarray(x, dtype=np.float32)
        return np.clip(x + rng.normal(0.0, np.sqrt(variance), x.shape).astype(np.float32), 0.0, 1.0)

    return release


def decorrelation(net, test: AttributeData, provider: NeuralInferrer, *, K: float, seed: int = 0) -> dict:
    """Jamshidi et al. 2023 §4.2.4: give the decoder a random utility class through f (0 for it, −K for the other) with
    R's own output and no noise, and ask a utility provider trained on original data what it sees.

    Returns the fraction of outputs whose predicted class equals the injected one (``agreement``; 1.0 means
    C alone controls the utility feature), the injected bits and the provider's P(class 1) per output, for
    the histogram of Fig. 13.
    """
    from privpix.mechanisms.neural.obfuscator import obfuscate

    bits = np.random.default_rng(seed).integers(0, 2, len(test.x))
    out = np.clip(obfuscate(net, test.x, bits, sigma2=0.0, K=K, use_f=True, seed=seed), 0.0, 1.0)
    p1 = provider.predict_proba(out)[:, list(provider.classes_).index(1)]
    return {"agreement": float(np.mean((p1 > 0.5) == bits)), "bits": bits, "p_class1": p1}
