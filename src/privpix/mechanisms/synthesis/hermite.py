"""Hermite-polynomial features of the Mehler (Gaussian) kernel, as DP-HP uses them (Vinaroz, Charusaie, Harder,
Bhatti & Park, ICML 2022, "Hermite polynomial features for private data generation", section 3).

**One dimension.** Mehler's formula, with the physicists' Hermite polynomials H_c and ρ ∈ (0, 1),
Σ_c ρ^c·H_c(x)·H_c(y) / (2^c·c!) = (1 − ρ²)^(−1/2)·exp(−(ρ²(x² + y²) − 2ρxy) / (1 − ρ²)),
gives, multiplied by sqrt(1 − ρ²)·exp(−ρ(x² + y²)/(1 + ρ)), the Gaussian kernel as an eigen-expansion:

    k(x, y) = exp(−ρ(x − y)² / (1 − ρ²)) = Σ_{c ≥ 0} ψ_c(x)·ψ_c(y),
    ψ_c(x) = ρ^(c/2)·(1 − ρ²)^(1/4)·exp(−ρx²/(1 + ρ))·H_c(x) / sqrt(2^c·c!),

i.e. ψ_c = sqrt(λ_c)·f_c with eigenvalues λ_c = (1 − ρ)ρ^c (the paper's eq. 4–5). The kernel length ℓ of
k(x, y) = exp(−(x − y)²/(2ℓ²)) fixes ρ by ρ/(1 − ρ²) = 1/(2ℓ²) (:func:`rho_of`). The features of order C are
ψ_0..ψ_C (C + 1 values), computed by the three-term recurrence of the normalised Hermite functions,
ψ_{c+1} = sqrt(2ρ/(c + 1))·x·ψ_c − ρ·sqrt(c/(c + 1))·ψ_{c−1} (never the raw polynomials, which overflow and
cancel), differentiably in torch.

**Norm bound (the sensitivity).** For every real x: Σ_{c ≤ C} ψ_c(x)² ≤ Σ_{c ≥ 0} ψ_c(x)² = k(x, x) = 1, a sum of
squares truncated. Hence for an image x of d values:

* the **sum kernel** k_sum(x, y) = (1/d)·Σ_j k(x_j, y_j) has features φ_sum(x) = d^(−1/2)·[ψ_{0..C}(x_j)]_j (d·(C+1)
  values) with ‖φ_sum(x)‖² = (1/d)·Σ_j Σ_c ψ_c(x_j)² ≤ 1;
* the **product kernel** on a set S of P pixels, k_S(x, y) = Π_{j∈S} k(x_j, y_j), has the tensor product
  φ_S(x) = ⊗_{j∈S} ψ_{0..C'}(x_j) ((C'+1)^P values) with ‖φ_S(x)‖ = Π_j ‖ψ(x_j)‖ ≤ 1, and an average over G sets,
  G^(−1/2)·[φ_S1, …, φ_SG], also has norm ≤ 1;
* random Fourier features (DP-MERF) have norm exactly 1;
* a weighted concatenation [sqrt(w_1)·φ_1, …] with Σ w = 1 of maps of norm ≤ 1 has norm ≤ 1 (the features of the
  kernel Σ w_i·k_i).

None of this depends on the pixel values, so it holds for any image, in [0, 1] or not. Floating point can leave a
row a hair above 1 (and underflows ψ_0 to 0 for huge |x|, which only lowers the norm), so :func:`project` also
divides every row by max(1, ‖row‖): a per-row map, data-independent as a rule, that makes ‖φ(x)‖ ≤ 1 up to one
rounding of the final division whatever the arithmetic did.

The paper draws a fresh pixel pair for the product kernel at every epoch (one more noisy release each time); the
embed-once pipeline here instead fixes the G pixel sets once, from the seed, before the data are read.
"""

from __future__ import annotations

import math

import numpy as np


def rho_of(length_scale: float) -> float:
    """ρ ∈ (0, 1) with ρ/(1 − ρ²) = 1/(2ℓ²): the Mehler parameter of the Gaussian kernel of length ℓ."""
    alpha = 1.0 / (2.0 * float(length_scale) ** 2)
    return 2.0 * alpha / (1.0 + math.sqrt(1.0 + 4.0 * alpha * alpha))  # the positive root, without cancellation


def recurrence(rho: float, order: int) -> tuple[np.ndarray, np.ndarray]:
    """The coefficients (a_c, b_c), c = 1..C−1, of ψ_{c+1} = a_c·x·ψ_c − b_c·ψ_{c−1}."""
    c = np.arange(1, max(order, 1), dtype=np.float64)
    return np.sqrt(2.0 * rho / (c + 1.0)), rho * np.sqrt(c / (c + 1.0))


def hermite_numpy(x: np.ndarray, rho: float, order: int) -> np.ndarray:
    """ψ_0..ψ_C at every value of ``x`` in float64: shape x.shape + (C + 1,) (the reference the tests use)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty((*x.shape, order + 1))
    out[..., 0] = (1.0 - rho * rho) ** 0.25 * np.exp(-rho * x * x / (1.0 + rho))
    if order >= 1:
        out[..., 1] = math.sqrt(2.0 * rho) * x * out[..., 0]
    a, b = recurrence(rho, order)
    for c in range(1, order):
        out[..., c + 1] = a[c - 1] * x * out[..., c] - b[c - 1] * out[..., c - 1]
    return out


def mehler_kernel(x: np.ndarray, y: np.ndarray, rho: float) -> np.ndarray:
    """The closed form Σ_{c ≥ 0} ψ_c(x)ψ_c(y) = exp(−ρ(x − y)²/(1 − ρ²)) (elementwise, broadcast)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return np.exp(-rho * (x - y) ** 2 / (1.0 - rho * rho))


def hermite_torch(x, rho: float, order: int):
    """ψ_0..ψ_C at every value of the torch tensor ``x`` (any shape, its dtype): shape x.shape + (C + 1,),
    differentiable in x."""
    from privpix.training import torch

    psi = [(1.0 - rho * rho) ** 0.25 * torch.exp(x * x * (-rho / (1.0 + rho)))]
    if order >= 1:
        psi.append(x * psi[0] * math.sqrt(2.0 * rho))
    a, b = recurrence(rho, order)
    for c in range(1, order):
        psi.append(x * psi[c] * float(a[c - 1]) - psi[c - 1] * float(b[c - 1]))
    return torch.stack(psi, dim=-1)


def sum_features(x, rho: float, order: int):
    """φ_sum for rows x (m, d) (torch): (m, d·(C+1)), pixel-major (pixel j's C + 1 values together); norm ≤ 1."""
    m, d = x.shape
    return hermite_torch(x, rho, order).reshape(m, d * (order + 1)) * (1.0 / math.sqrt(d))


def product_features(x, sets: np.ndarray, rho: float, order: int):
    """The average of G product kernels, one per row of ``sets`` (G, P) (pixel indices): (m, G·(C+1)^P); norm ≤ 1."""
    from privpix.training import torch

    idx = torch.from_numpy(np.asarray(sets, dtype=np.int64))
    psi = hermite_torch(x[:, idx], rho, order)  # (m, G, P, C+1)
    out = psi[:, :, 0, :]
    for p in range(1, idx.shape[1]):
        out = (out[..., :, None] * psi[:, :, p, None, :]).reshape(len(x), idx.shape[0], -1)
    return out.reshape(len(x), -1) * (1.0 / math.sqrt(idx.shape[0]))


def project(phi):
    """Each row divided by max(1, its L2 norm) (torch, differentiable): norm ≤ 1 whatever the rounding did."""
    return phi / phi.norm(dim=1, keepdim=True).clamp(min=1.0)
