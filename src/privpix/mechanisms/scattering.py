"""The 2-D scattering transform (Mallat 2012; Bruna & Mallat 2013) of kymatio's filter bank, applied in one batched
pass per scale.

kymatio's torch frontend applies its filters path by path: for J = 2, L = 8 that is 161 complex products, 161
Fourier-domain subsamplings and 161 FFTs, each a separate pass over the whole batch in its ``(..., 2)`` real
layout, which makes the products and the subsamplings (not the FFTs) three quarters of its time on a CPU. Here the
same filters (built by kymatio's own ``filter_bank``) are stacked per scale and applied as native complex64
broadcasts, so one pass covers all L orientations (and all L × L second-order paths of a scale pair). The
arithmetic is the same; the results agree with kymatio's to float32 rounding (within 1e-6: the test compares them),
about 2× faster on one CPU thread (``benchmarks/results/generation_speed.md``).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from privpix.errors import ParameterError


def _modulus(z: torch.Tensor) -> torch.Tensor:
    """|z| as kymatio computes it, sqrt(re² + im²) (torch's complex abs uses hypot, 2× slower here)."""
    return (z.real.square() + z.imag.square()).sqrt()


def _subsample(x: torch.Tensor, k: int) -> torch.Tensor:
    """Fourier-domain periodization: the spectrum of the spatial subsampling x[::k, ::k], on the last two axes."""
    if k == 1:
        return x
    *lead, p, q = x.shape
    h, w = p // k, q // k
    # Block sums by slices, rows then columns: torch's complex reductions over a reshaped axis are about twice as
    # slow. The mean's 1/k² is folded into the filters.
    rows = x.reshape(*lead, k, h, q)
    acc = rows[..., 0, :, :] + rows[..., 1, :, :]  # k ≥ 2 here: the first sum allocates, no copy before it
    for i in range(2, k):
        acc += rows[..., i, :, :]
    out = acc[..., :w] + acc[..., w : 2 * w]
    for j in range(2, k):
        out += acc[..., j * w : (j + 1) * w]
    return out


# Building kymatio's filters is 0.1 to 0.3 s; a process applies the transform at one or two sizes, many times (the
# Fréchet distance's features of each set, each DP-SGD model): built once per size and kept. Only read afterwards.
@functools.lru_cache(maxsize=8)
def _filters(ph: int, pw: int, J: int, L: int) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """The filters for padded images of ``ph`` × ``pw``: the low-pass per resolution and the L band-passes of each
    scale per resolution, each with the 1/k² of the periodization that follows it folded in."""
    from kymatio.scattering2d.filter_bank import filter_bank

    bank = filter_bank(ph, pw, J, L)

    def stack(arrays) -> torch.Tensor:
        return torch.from_numpy(np.stack([np.asarray(a, dtype=np.float32) for a in arrays]))

    # Each product with a filter is followed by a periodization whose mean divides by k²: the division is done
    # once here. phi[j] is the low-pass at resolution 2^j, followed by a subsampling by 2^(J-j).
    phi = [
        torch.from_numpy(np.asarray(a, dtype=np.float32) / 4 ** (J - j)) for j, a in enumerate(bank["phi"]["levels"])
    ]
    # psi[j][res]: the L filters of scale j at resolution 2^res, as one (L, P/2^res, Q/2^res) stack, followed by a
    # subsampling by 2^(j-res).
    psi = [
        [stack([p["levels"][res] for p in bank["psi"] if p["j"] == j]) / 4 ** (j - res)
         for res in range(min(j + 1, max(J - 1, 1)))]
        for j in range(J)
    ]  # fmt: skip
    return phi, psi


class Scattering2D:
    """Scattering coefficients up to order 2 of (..., H, W) real images, J scales and L orientations: output
    (..., 1 + J·L + L²·J(J−1)/2, H/2^J, W/2^J), channels in kymatio's order (order 0; order 1 by (j1, θ1); order 2
    by (j1, θ1, j2, θ2) with j2 > j1). Fixed wavelets: no parameter, no data, no gradient."""

    def __init__(self, J: int, shape: tuple[int, int], L: int = 8) -> None:
        try:
            from kymatio.scattering2d.utils import compute_padding
        except ImportError:  # pragma: no cover - exercised only without the extra
            raise ParameterError("the scattering transform needs kymatio: pip install 'privpix[neural]'") from None
        h, w = shape
        if 2**J > h or 2**J > w:
            raise ParameterError(f"the scattering transform with J = {J} needs images of at least {2**J}x{2**J}, "
                                 f"got {h}x{w}")  # fmt: skip
        self.J, self.L, self.shape = J, L, (h, w)
        ph, pw = compute_padding(h, w, J)
        self._pad = ((ph - h) // 2, (ph - h + 1) // 2, (pw - w) // 2, (pw - w + 1) // 2)
        self._phi, self._psi = _filters(ph, pw, J, L)

    @property
    def n_channels(self) -> int:
        J, L = self.J, self.L
        return 1 + J * L + L * L * J * (J - 1) // 2

    def _padded(self, x: torch.Tensor) -> torch.Tensor:
        """Reflection padding as kymatio's: (n, H, W) → (n, P, Q). Where a side's padding equals the image side,
        torch cannot reflect that far; pad one less and repeat the second and second-to-last lines, as kymatio."""
        top, bottom, left, right = self._pad
        h, w = self.shape
        th, tw = int(top == h), int(left == w)
        x = torch.nn.functional.pad(x[:, None], (left - tw, right - tw, top - th, bottom - th), mode="reflect")[:, 0]
        if th:
            x = torch.cat([x[:, 1:2], x, x[:, -2:-1]], dim=1)
        if tw:
            x = torch.cat([x[:, :, 1:2], x, x[:, :, -2:-1]], dim=2)
        return x

    def _low_pass(self, u_hat: torch.Tensor, j: int) -> torch.Tensor:
        """|…| at resolution 2^j, in Fourier → its average at 2^J, unpadded (the border line on each side)."""
        s = torch.fft.ifft2(_subsample(u_hat * self._phi[j], 2 ** (self.J - j))).real
        return s[..., 1:-1, 1:-1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H, W) real → (..., n_channels, H/2^J, W/2^J) float32, computed ``CHUNK`` single-channel images at a
        time: the L × L second-order products of a chunk then stay in the CPU's cache, which is where the speed
        comes from (1,000 images at once are slower than kymatio)."""
        if tuple(x.shape[-2:]) != self.shape:
            raise ParameterError(f"the scattering transform was built for {self.shape}, got {tuple(x.shape[-2:])}")
        lead = x.shape[:-2]
        flat = x.reshape(-1, *self.shape).to(torch.float32)
        h, w = self.shape[0] >> self.J, self.shape[1] >> self.J
        out = torch.empty(len(flat), self.n_channels, h, w)
        with torch.no_grad():
            for i in range(0, len(flat), CHUNK):
                out[i : i + CHUNK] = self._transform(flat[i : i + CHUNK])
        return out.reshape(*lead, self.n_channels, h, w)

    def _transform(self, x: torch.Tensor) -> torch.Tensor:
        x_hat = torch.fft.fft2(self._padded(x))
        n = len(x_hat)
        order0 = self._low_pass(x_hat, 0)[:, None]
        order1, order2 = [], []
        for j1 in range(self.J):
            # |x ⋆ ψ_{j1,θ1}| for the L orientations at once, kept at resolution 2^j1, in Fourier.
            u1 = torch.fft.fft2(_modulus(torch.fft.ifft2(_subsample(x_hat[:, None] * self._psi[j1][0], 2**j1))))
            order1.append(self._low_pass(u1, j1))
            paths = []
            for j2 in range(j1 + 1, self.J):
                u2 = _subsample(u1[:, :, None] * self._psi[j2][j1], 2 ** (j2 - j1))
                paths.append(self._low_pass(torch.fft.fft2(_modulus(torch.fft.ifft2(u2))), j2))
            if paths:
                order2.append(torch.cat(paths, dim=2).reshape(n, -1, *paths[0].shape[-2:]))
        return torch.cat([order0, *order1, *order2], dim=1)


CHUNK = 16  # single-channel images per batched pass (measured: 8 to 32 are alike, 256 is 2.5× slower)
