"""Fréchet distance between two image sets in a fixed, data-independent feature space: how far synthetic images
are from real ones, as a distribution (lower is closer; 0 for the same distribution, up to sampling).

The feature space (no learned weights, so nothing to download and nothing fitted on any data set): the 2-D
scattering transform (J = 2, L = 8; kymatio's Morlet filter bank, applied by
:class:`privpix.mechanisms.scattering.Scattering2D`) of each image channel, its order-0 map (the blurred image)
and its 16 order-1 maps (edge energy at 2 scales and 8 orientations), each averaged over the four quadrants of the
image: 17 × 4 values per channel (204 for RGB), in pixel units. The quadrants keep the layout: a face has its eyes'
edges in the upper half and its mouth's in the lower one, and a colour blob of the same average edge energy does
not (with the maps averaged over the whole image, DP-MERF's blobs scored closer to real faces than recognisable
faces did). An image set is summarised by the mean and covariance of these vectors, and two sets are compared by
the Fréchet (2-Wasserstein) distance between the Gaussians with those moments, as FID does with Inception features
(Heusel et al. 2017):

    d² = ‖μ_a − μ_b‖² + Tr(Σ_a + Σ_b − 2 (Σ_a Σ_b)^½)

Numbers are comparable only for the same image shape and the same set sizes (the estimate is biased upward for
few images); :func:`frechet_distance` reports d², as FID does.
"""

from __future__ import annotations

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError

J, L = 2, 8
BATCH = 256


def scattering_features(images: ImageSet) -> np.ndarray:
    """(n, 68·c) float64: each channel's order-0 and order-1 scattering maps (J = 2, L = 8: 17 maps) averaged over
    the image's four quadrants, in pixel units (images scaled to 0–255, so distances read like FID's). Needs h and w
    of at least 8; any number of channels. Runs on one thread: the transform's small batched products lose more to
    thread contention than they gain (7× slower with two threads on a busy two-core machine)."""
    from privpix.mechanisms.scattering import Scattering2D
    from privpix.threads import one_thread
    from privpix.training import torch

    n = len(images)
    h, w, c = images.shape
    if h < 8 or w < 8:
        raise ParameterError(f"the Fréchet features need images of at least 8x8, got {h}x{w}")
    transform = Scattering2D(J, (h, w), L)
    first = 1 + J * L  # order 0, then order 1
    out = np.empty((n, first * 4 * c))
    with one_thread():
        for a in range(0, n, BATCH):
            x = images.as_float()[a : a + BATCH].transpose(0, 3, 1, 2)
            s = transform(torch.from_numpy(np.ascontiguousarray(x)))[:, :, :first]  # (m, c, 17, h/4, w/4)
            mh, mw = s.shape[-2] // 2, s.shape[-1] // 2
            quads = [s[..., :mh, :mw], s[..., :mh, mw:], s[..., mh:, :mw], s[..., mh:, mw:]]
            pooled = torch.stack([q.mean(dim=(-2, -1)) for q in quads], dim=-1)  # (m, c, 17, 4)
            out[a : a + BATCH] = 255.0 * pooled.reshape(len(x), -1).double().numpy()
    return out


def frechet_from_features(a: np.ndarray, b: np.ndarray) -> float:
    """d² between Gaussians fitted to feature rows ``a`` (n, f) and ``b`` (m, f) (sample means and covariances):
    :func:`privpix.evaluation.linkage.frechet_distance`, the formula Kim & Yang 2020's evaluation uses too."""
    from privpix.evaluation.linkage import frechet_distance as between_features

    return between_features(a, b)


def frechet_distance(a: ImageSet, b: ImageSet) -> float:
    """d² between image sets ``a`` and ``b`` of the same (h, w, c) in the scattering feature space (module
    docstring)."""
    if a.shape != b.shape:
        raise ParameterError(f"image sets of the same shape needed, got {a.shape} and {b.shape}")
    return frechet_from_features(scattering_features(a), scattering_features(b))
