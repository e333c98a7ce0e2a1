"""PPSGAN's networks (§3.1) and the pieces of its noise amplifier N_a (§3.2): the attention, σ* and the
approximate sensitivity s_e."""

from __future__ import annotations

import math

import numpy as np

from privpix.errors import ParameterError, require_torch

FORMAT = "privpix-ppsgan/1"
KINDS = ("ppsgan", "ppapnet", "acgan")
RECIPES = ("paper", "authors")


def ppsgan_torch():
    """torch, or the error that says PPSGAN needs it installed."""
    return require_torch("PPSGAN")


def conv_sizes(h: int) -> list[int]:
    """Spatial sizes through four 5×5 stride-2 'same' convolutions: 28 → 14 → 7 → 4 → 2."""
    out = [h]
    for _ in range(4):
        out.append((out[-1] + 1) // 2)
    return out


def check_shape(shape: tuple[int, int, int]) -> None:
    """Refuse a (c, h, w) shape the PPSGAN networks do not take: 28×28 or 32×32, one or three channels."""
    c, h, w = shape
    if h != w or h not in (28, 32) or c not in (1, 3):
        raise ParameterError(f"PPSGAN networks take 28×28 or 32×32 images with 1 or 3 channels, got {shape}")


def conv_trunk(c: int, width: int):
    """Four 5×5 stride-2 convolutions (``width`` doubling each time) with batch norm and leaky ReLU, flattened:
    the trunk the discriminator and the classifier share."""
    nn = ppsgan_torch().nn
    layers, ch = [], c
    for k in range(4):
        out = width * 2**k
        layers += [nn.Conv2d(ch, out, 5, 2, 2), nn.BatchNorm2d(out), nn.LeakyReLU(0.2)]
        ch = out
    return nn.Sequential(*layers, nn.Flatten())


def build_networks(
    kind: str, shape: tuple[int, int, int], d: int = 128, width: int = 128, n_classes: int = 10, *, generator=None
):
    """``(generator, critic)`` modules. The generator has ``encode``, ``decode``, ``amplify``; the critic
    returns ``(real_logit, class_logits)``. With a torch ``generator`` the weights come from it, generator's
    first (:func:`privpix.training.build`); without, from torch's global RNG."""
    if kind not in KINDS:
        raise ParameterError(f"kind must be one of {KINDS}, got {kind!r}")
    check_shape(shape)
    c, h, _ = shape
    sizes = conv_sizes(h)
    generator_cls, critic_cls = _network_classes()

    def make():
        return generator_cls(kind, c, width, sizes, d, n_classes), critic_cls(c, width, sizes, n_classes)

    if generator is None:
        return make()
    from privpix import training

    return training.build(make, generator)


_CLASSES: tuple[type, type] | None = None


def _network_classes() -> tuple[type, type]:
    """The generator and critic classes, defined on first use (torch is imported only then) at module level, so
    a fitted network pickles (a bench point fitted in a worker process comes back to the coordinator)."""
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    torch = ppsgan_torch()
    # torch is loaded by now; imported by name so that type checkers take nn.Module as the class it is.
    from torch import nn

    class Generator(nn.Module):
        def __init__(self, kind: str, c: int, width: int, sizes: list[int], d: int, n_classes: int):
            super().__init__()
            self.kind, self.d, self.n_classes = kind, d, n_classes
            self.width, self.sizes = width, list(sizes)
            flat = 8 * width * sizes[-1] ** 2
            self.encoder = nn.Sequential(conv_trunk(c, width), nn.Linear(flat, d))
            self.fc = nn.Linear(d + (n_classes if kind == "acgan" else 0), flat)
            layers: list[nn.Module] = []
            ch = 8 * width
            for k in range(4):
                size_in, size_out = sizes[4 - k], sizes[3 - k]
                out = c if k == 3 else width * 2 ** (2 - k)
                layers.append(nn.ConvTranspose2d(ch, out, 5, 2, 2, output_padding=size_out - (2 * size_in - 1)))
                layers += [nn.Sigmoid()] if k == 3 else [nn.BatchNorm2d(out), nn.LeakyReLU(0.2)]
                ch = out
            self.deconv = nn.Sequential(*layers)
            self.register_buffer("sigma_star", torch.zeros(d))
            self.register_buffer("gaussian", torch.zeros((), dtype=torch.bool))

        def reset_parameters(self):
            """The noise buffers as constructed: σ* = 0, Laplace (what :func:`privpix.training.build` calls)."""
            with torch.no_grad():
                self.sigma_star.zero_()
                self.gaussian.fill_(False)

        def encode(self, x):
            return self.encoder(x)

        def decode(self, z):
            side = self.sizes[-1]
            return self.deconv(self.fc(z).view(len(z), 8 * self.width, side, side))

        def noise(self, n: int, generator=None):
            """α ∘ σ*: Gaussian when δ > 0, Laplace when δ = 0."""
            if bool(self.gaussian):
                alpha = torch.randn((n, self.d), generator=generator)
            else:
                u = torch.rand((n, self.d), generator=generator).clamp(1e-7, 1 - 1e-7) - 0.5
                alpha = -torch.sign(u) * torch.log1p(-2 * u.abs())  # inverse CDF of Lap(0, 1)
            return alpha * self.sigma_star

        def parts(self, z, generator=None):
            """z̃'s two summands: (signal, noise) = (A z, (J − A)(α ∘ σ*)) for PPSGAN, (z, α ∘ σ*) for PPAPNet."""
            noise = self.noise(len(z), generator)
            if self.kind == "ppapnet":
                return z, noise
            att = attention(z)
            return (att @ z[:, :, None])[:, :, 0], ((1.0 - att) @ noise[:, :, None])[:, :, 0]

        def amplify(self, z, generator=None):
            signal, noise = self.parts(z, generator)
            return signal + noise

        def forward(self, x, generator=None):
            return self.decode(self.amplify(self.encode(x), generator))

        def sample(self, labels, generator=None):
            """ACGAN: images for these class labels from U[−1, 1]^d noise."""
            z = torch.rand((len(labels), self.d), generator=generator) * 2 - 1
            onehot = torch.nn.functional.one_hot(labels, self.n_classes).float()
            return self.decode(torch.cat([z, onehot], dim=1))

    class Critic(nn.Module):
        def __init__(self, c: int, width: int, sizes: list[int], n_classes: int):
            super().__init__()
            flat = 8 * width * sizes[-1] ** 2
            self.trunk = conv_trunk(c, width)
            self.real = nn.Linear(flat, 1)
            self.cls = nn.Linear(flat, n_classes)

        def forward(self, x):
            f = self.trunk(x)
            return self.real(f)[:, 0], self.cls(f)

    for cls in (Generator, Critic):
        cls.__qualname__ = cls.__name__
        cls.__module__ = __name__
    _CLASSES = (Generator, Critic)
    return _CLASSES


def __getattr__(name: str):
    # Unpickling a network looks its class up here before anything in this process has built one.
    if name in ("Generator", "Critic"):
        generator_cls, critic_cls = _network_classes()
        return generator_cls if name == "Generator" else critic_cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def attention(z):
    """Scaled-dot-product self-attention over the features of each z: (n, d) → (n, d, d), rows sum to 1."""
    torch = ppsgan_torch()
    d = z.shape[1]
    return torch.softmax(z[:, :, None] * z[:, None, :] / math.sqrt(d), dim=2)


def sigma_star(s_e: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """σ* of §3.2: √(2 log(1.25/δ))·s_e/ε for δ > 0, s_e/ε for δ = 0."""
    if epsilon <= 0 or not 0 <= delta < 1:
        raise ParameterError(f"need epsilon > 0 and 0 <= delta < 1, got epsilon={epsilon}, delta={delta}")
    s_e = np.asarray(s_e, dtype=np.float64)
    return s_e * (math.sqrt(2 * math.log(1.25 / delta)) if delta > 0 else 1.0) / epsilon


def as_tensor(x: np.ndarray):
    """(n, h, w, c) images in [0, 1] → a float32 torch tensor (n, c, h, w), the layout the networks take."""
    torch = ppsgan_torch()
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 4:
        raise ParameterError(f"images must be (n, h, w, c), got {x.shape}")
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(x, 3, 1)))


def approximate_sensitivity(gen, x) -> np.ndarray:
    """s_e = elementwise max over pairs |G_e(x_i) − G_e(x_j)| = max_i z_i − min_i z_i, in one pass."""
    torch = ppsgan_torch()
    gen.eval()
    lo = hi = None
    with torch.no_grad():
        for i in range(0, len(x), 512):
            z = gen.encode(x[i : i + 512])
            lo = z.min(0).values if lo is None else torch.minimum(lo, z.min(0).values)
            hi = z.max(0).values if hi is None else torch.maximum(hi, z.max(0).values)
    if lo is None or hi is None:
        raise ValueError("approximate_sensitivity needs at least one image")
    return (hi - lo).numpy().astype(np.float64)
