"""Releasing with a trained PPSGAN / PPAPNet / ACGAN generator: anonymized images, and the latent noise budget."""

from __future__ import annotations

import numpy as np

from privpix.errors import ParameterError
from privpix.mechanisms.neural.ppsgan.networks import (
    as_tensor,
    ppsgan_torch,
)
from privpix.privacy.noise import torch_seed


def anonymize(gen, images: np.ndarray, labels: np.ndarray | None = None, *, seed: int | None = 0) -> np.ndarray:
    """Release (n, h, w, c) images in [0, 1]: PPSGAN/PPAPNet anonymize each image; ACGAN draws one synthetic
    image per input of the same class (``labels`` required). ``seed`` fixes the noise."""
    torch = ppsgan_torch()
    gen.eval()
    g = torch.Generator().manual_seed(int(seed) if seed is not None else torch_seed())
    out = []
    with torch.no_grad():
        if gen.kind == "acgan":
            if labels is None:
                raise ParameterError("ACGAN generates per class: give the images' labels")
            known = np.asarray(gen.classes_)
            idx = np.searchsorted(known, np.asarray(labels))
            if np.any(idx >= len(known)) or np.any(known[np.minimum(idx, len(known) - 1)] != labels):
                unknown = np.setdiff1d(np.asarray(labels), known).tolist()
                raise ParameterError(
                    f"labels {unknown} are outside the classes the model was trained on {[int(c) for c in known]}"
                )
            lab = torch.from_numpy(idx.astype(np.int64))
            for i in range(0, len(lab), 512):
                out.append(gen.sample(lab[i : i + 512], g).numpy())
        else:
            x = as_tensor(images)
            for i in range(0, len(x), 512):
                out.append(gen(x[i : i + 512], g).numpy())
    return np.moveaxis(np.concatenate(out), 1, 3)


def latent_noise_budget(gen, images: np.ndarray, *, seed: int = 0) -> dict[str, float]:
    """How much of the decoder's input z̃ is signal and how much is noise, for a PPSGAN or PPAPNet generator.

    z̃ splits into a signal part (``A z`` for PPSGAN, ``z`` for PPAPNet) and a noise part (``(J − A)(α ∘ σ*)``
    or ``α ∘ σ*``). Each part is split again into its per-image mean over the d coordinates (the common mode, a
    single number per image, which a decoder can learn to ignore) and the rest (the differential part). Returns
    root-mean-square sizes over images and coordinates:

    * ``signal_spread``: RMS deviation of the differential signal from its mean over images (what tells images
      apart), ``noise_differential`` and ``noise_common``: RMS of the two noise parts;
    * ``common_fraction``: share of the noise energy in the common mode;
    * ``snr``: ``signal_spread / noise_differential`` (below 1 the decoder sees more noise than image).
    """
    torch = ppsgan_torch()
    if gen.kind == "acgan":
        raise ParameterError("ACGAN has no encoder: its latent is pure noise")
    gen.eval()
    x = as_tensor(images)
    g = torch.Generator().manual_seed(int(seed))
    sig, noi = [], []
    with torch.no_grad():
        for i in range(0, len(x), 512):
            signal, noise = gen.parts(gen.encode(x[i : i + 512]), g)
            sig.append(signal)
            noi.append(noise)
    s, n = torch.cat(sig).double(), torch.cat(noi).double()
    s_diff = s - s.mean(1, keepdim=True)
    n_common = n.mean(1, keepdim=True).expand_as(n)
    n_diff = n - n_common
    spread = float((s_diff - s_diff.mean(0)).pow(2).mean().sqrt())
    nd, nc = float(n_diff.pow(2).mean().sqrt()), float(n_common.pow(2).mean().sqrt())
    return {
        "signal_spread": spread,
        "noise_differential": nd,
        "noise_common": nc,
        "common_fraction": nc**2 / max(nc**2 + nd**2, 1e-300),
        "snr": spread / max(nd, 1e-300),
    }
