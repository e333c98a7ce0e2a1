"""Which noise a publication draws: exact samplers on the OS CSPRNG (the default without a seed, wherever the
mechanism has them), floating point, or a seeded research run. One rule for a release and a DP fit."""

from __future__ import annotations

from privpix.errors import ParameterError, arg
from privpix.mechanisms.base import Mechanism


def exact_noise(mechanism: Mechanism, *, seed: int | None, secure: bool) -> bool:
    """Whether a release draws exact noise from the OS CSPRNG, with ``mechanism`` set for it (its
    ``Capabilities.secure`` parameters). Asked for (``secure``): always, or refused, saying why the mechanism has no
    exact sampler. Not asked for and no ``seed``: whenever the mechanism has exact samplers, the publication
    default; otherwise its noise is drawn in floating point, and the guarantee it states says so. With a ``seed``
    (a research run): never."""
    if seed is not None and not secure:
        return False
    if mechanism.capabilities().fits_on == "model-file" and not mechanism.is_fitted:
        mechanism.fit(None)  # its noise was drawn when the file was fitted: the file says whether exactly
    caps = mechanism.capabilities()
    if caps.secure is None:
        if secure:
            raise ParameterError(
                f"{arg('--secure', 'rng=SecureRandom()')}: {mechanism.name} has no exact sampler: {caps.not_secure}"
            )
        return False
    if caps.fits_on == "private" and mechanism.is_fitted:
        # Its fit drew its noise already: the parameters it was fitted with say how, and changing them now would
        # state exact noise for a fit that drew floating-point noise.
        params = mechanism.get_params()
        exact = all(params.get(k) == v for k, v in caps.secure.items())
        if secure and not exact:
            raise ParameterError(
                f"{arg('--secure', 'rng=SecureRandom()')}: {mechanism.name} was fitted with floating-point noise; fit "
                f"it again with {', '.join(f'{k}={v}' for k, v in caps.secure.items())} for exact noise"
            )
        return exact
    mechanism.set_params(**caps.secure)
    return True
