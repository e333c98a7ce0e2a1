"""Local-DP image release: every pixel value quantised to d levels and sent through GRR (Wang & Chang 2020's pixel
baseline, published as an image instead of a report vector)."""

from __future__ import annotations

import numpy as np

from privpix.data.imageset import ImageSet, blockwise
from privpix.mechanisms.base import About, Claim, shape_of
from privpix.mechanisms.kinds import ImageMechanism
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import register
from privpix.privacy.composition import PureDP
from privpix.privacy.grr import grr_perturb
from privpix.privacy.guarantees import Guarantee
from privpix.privacy.neighbours import Neighbours, Pixels
from privpix.privacy.noise import RNG


@register
class LDPPixel(ImageMechanism):
    """Each owner quantises their image to ``levels`` equal-width bins of [0, 1] (fixed, so no data is used)
    and perturbs every pixel value with generalised randomized response at ε; the release shows each
    reported level at its bin centre.

    Sound ε-LDP per pixel value; a pixel of c channels is c values and costs c·ε, and one whole image of h·w·c
    values costs h·w·c·ε, by sequential composition.
    """

    name = "ldp-pixel"
    summary = "pixels quantised to d levels, each through randomized response (Wang & Chang 2020's pixel baseline)"
    about = About(
        paper="Wang & Chang 2020 (pixel baseline)",
        guarantee_model="local-dp",
        soundness="sound ε-LDP per pixel value; c·ε per pixel of c channels, h·w·c·ε per image",
        use="local",
    )
    levels: int = param(16, "domain size d of each pixel value", minimum=2)
    # Takes ε (uses_epsilon): construction refuses None and set_params puts back what it had, so it is a float.
    epsilon: float

    def privacy(self, data: tuple[int, int, int] | ImageSet, n: int | None = None, *, secure: bool = False) -> Claim:
        """Charged as the bare per-image ε. The unit, one pixel with all its channels, is c randomized responses of
        ε each (one per channel value), declared as c bare ε-DP events: c·ε-DP for the unit, the curve its audit
        reads (one response meets the curve of ε-DP exactly)."""
        shape = shape_of(data)
        return Claim.of(self._guarantee(shape), self.neighbours(), (PureDP(self.epsilon, count=shape[2]),))

    def _guarantee(self, shape: tuple[int, int, int]) -> Guarantee:
        h, w, c = shape
        per_image = self.epsilon * h * w * c
        return Guarantee(
            model="local-dp",
            epsilon=self.epsilon * c,
            unit=self.neighbours().wording(),
            per_feature_epsilon=self.epsilon,
            per_image_epsilon=per_image,
            sound=True,
            caveats=(f"a whole image of {h * w * c} values is protected only at ε = {per_image:.4g}",),
        )

    def neighbours(self) -> Neighbours:
        return Pixels(1)

    def _privatize(self, x: np.ndarray, rng: RNG) -> np.ndarray:
        d = self.levels
        levels = np.minimum((np.clip(x, 0.0, 1.0) * d).astype(np.int64), d - 1)
        out = grr_perturb(levels, d, self.epsilon, rng)
        return (out.astype(np.float64) + 0.5) / d

    def _privatize_set(self, images: ImageSet, rng: RNG) -> np.ndarray:
        # Per value, one uniform each in array order: block by block equals the whole set, in bounded memory.
        return blockwise(images, lambda v, b: self._privatize(v, rng))
