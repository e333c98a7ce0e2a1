"""The PyTorch half of ``dp-merf``: random Fourier features of the Gaussian kernel and the mean embedding they
give (Harder et al. 2021). The generator, its training and sampling are shared with ``dp-hp`` and live in
:mod:`~privpix.mechanisms.synthesis.embed_net`. Imported only when a fit or a release needs it."""

from __future__ import annotations

import math

import numpy as np

from privpix.mechanisms.synthesis.embed_net import mean_embedding as _mean_embedding
from privpix.mechanisms.synthesis.embed_net import torch


def features(x: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """φ(x) = sqrt(2/D)·[cos(xΩ), sin(xΩ)] for rows x (m, d) and frequencies Ω (d, D/2): (m, D), and
    ‖φ(x)‖₂ = 1 for every x (cos² + sin² = 1 on each of the D/2 frequencies), whatever its pixels."""
    return _CosSin.apply(x @ omega, math.sqrt(1.0 / omega.shape[1]))


class _CosSin(torch.autograd.Function):
    """[cos(p), sin(p)] · scale with the gradient autograd would compute, bit for bit, from the cosines and sines
    of the forward pass: autograd's own backward computes both again from p (a generator step's features of 500
    images are 2.5 million of each; keeping them made a dp-merf training step 7 % faster)."""

    @staticmethod
    def forward(ctx, proj: torch.Tensor, scale: float) -> torch.Tensor:  # type: ignore[override]
        cos, sin = torch.cos(proj), torch.sin(proj)
        if proj.requires_grad:
            ctx.save_for_backward(cos, sin)
        ctx.scale = scale
        return torch.cat([cos, sin], dim=1) * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        cos, sin = ctx.saved_tensors
        grad = grad * ctx.scale
        half = cos.shape[1]
        # Autograd's terms: d sin = grad · cos, d cos = grad · (−sin); their sum does not depend on the order.
        return grad[:, half:] * cos + grad[:, :half] * -sin, None


def featurizer(omega: np.ndarray):
    """φ as a torch callable for the frequencies ``omega`` (d, D/2) (what the shared embedding and training take)."""
    om = torch.from_numpy(np.ascontiguousarray(omega, dtype=np.float32))
    return lambda x: features(x, om)


def mean_embedding(x: np.ndarray, labels: np.ndarray, omega: np.ndarray, n_classes: int, count_share: float):
    """The vector whose noisy copy dp-merf releases: the mean over the n rows of x (n, d) of
    u_i = [sqrt(1 − a²)·φ(x_i) ⊗ onehot(y_i), a·onehot(y_i)] with a² = ``count_share``, as float64 (K·D + K,).

    ‖u_i‖₂ = sqrt((1 − a²)·‖φ(x_i)‖² + a²) = 1 for every image and label, so replacing one pair moves the mean by at
    most 2/n in L2. The first K·D values are the class-wise feature sums φ ⊗ y (row k: class k), the last K the class
    proportions (scaled by a): the label distribution is read from the same release."""
    return _mean_embedding(x, labels, featurizer(omega), omega.shape[1] * 2, n_classes, count_share)
