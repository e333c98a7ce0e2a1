"""PPSGAN selective feature anonymization (paper 004), with PPAPNet and ACGAN baselines (PyTorch, CPU).

Networks (§3.1), for (c, h, w) images with h, w ∈ {28, 32}:

* encoder G_e: four 5×5 stride-2 convolutions (``width``, 2·, 4·, 8·``width`` channels), each with batch norm
  and LeakyReLU(0.2), then a dense layer to z ∈ R^d. The paper's ``width = 128`` gives its 4096 × d dense layer;
  a smaller width trains on a CPU.
* decoder G_d: dense d → 8·width × 2 × 2, four 5×5 stride-2 transposed convolutions back to (c, h, w), batch norm
  and LeakyReLU after the first three, sigmoid after the last.
* critic C_d and classifier C_c: one shared trunk of four 5×5 stride-2 convolutions with batch norm and LeakyReLU,
  then a dense layer to 1 (real/fake, sigmoid) and one to the classes (softmax).

Noise amplifier N_a (§3.2): approximate sensitivity ``s_e = max_{i,j} |G_e(x_i) − G_e(x_j)|`` elementwise over the
training set, which equals ``max_i z_i − min_i z_i`` per coordinate (one pass, no pair loop); σ* =
√(2 log(1.25/δ))·s_e/ε (α ~ N(0, 1)) or s_e/ε when δ = 0 (α ~ Lap(0, 1)); the attention matrix
``A = softmax(z zᵀ/√d)`` (d × d per image, rows sum to 1) and ``z̃ = A z + (J − A)(α ∘ σ*)``. PPAPNet (Kim and
Yang 2019) adds ``α ∘ σ*`` to the whole of z, without attention.

Training (Algorithm 1): a pretrained autoencoder initialises G_e and G_d; then per generator step ``n_critic``
critic steps on ``L_d + L_c`` (sigmoid and softmax cross-entropy on a real batch x′ and an anonymized batch x̃),
and one generator step on ``L_c(x̃) − L_d(x̃) + ‖x − G_d(G_e(x))‖²`` (the zero-noise penalty through the skip
connection G_e → G_d), AdamW (lr 1e-4, weight decay 1e-4, β = (0.5, 0.9)).

ACGAN (§4.1): G_d fed with U[−1, 1]^d noise and a one-hot class, trained against the same critic–classifier.

Guarantee: none. ε and δ only scale the noise; s_e is computed from the training images and the attention
reweights the noise per image, so no (ε, δ)-DP statement follows. privpix marks every release ``empirical``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from privpix.errors import ParameterError, require_torch
from privpix.privacy.noise import torch_seed

FORMAT = "privpix-ppsgan/1"
KINDS = ("ppsgan", "ppapnet", "acgan")
RECIPES = ("paper", "authors")


def _torch():
    return require_torch("PPSGAN")


def _sizes(h: int) -> list[int]:
    """Spatial sizes through four 5×5 stride-2 'same' convolutions: 28 → 14 → 7 → 4 → 2."""
    out = [h]
    for _ in range(4):
        out.append((out[-1] + 1) // 2)
    return out


def _check_shape(shape: tuple[int, int, int]) -> None:
    c, h, w = shape
    if h != w or h not in (28, 32) or c not in (1, 3):
        raise ParameterError(f"PPSGAN networks take 28×28 or 32×32 images with 1 or 3 channels, got {shape}")


def _conv_trunk(c: int, width: int):
    nn = _torch().nn
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
    torch = _torch()
    nn = torch.nn
    if kind not in KINDS:
        raise ParameterError(f"kind must be one of {KINDS}, got {kind!r}")
    _check_shape(shape)
    c, h, _ = shape
    sizes = _sizes(h)
    flat = 8 * width * sizes[-1] ** 2

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.kind, self.d, self.n_classes = kind, d, n_classes
            self.encoder = nn.Sequential(_conv_trunk(c, width), nn.Linear(flat, d))
            self.fc = nn.Linear(d + (n_classes if kind == "acgan" else 0), flat)
            layers, ch = [], 8 * width
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
            return self.deconv(self.fc(z).view(len(z), 8 * width, sizes[-1], sizes[-1]))

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
        def __init__(self):
            super().__init__()
            self.trunk = _conv_trunk(c, width)
            self.real = nn.Linear(flat, 1)
            self.cls = nn.Linear(flat, n_classes)

        def forward(self, x):
            f = self.trunk(x)
            return self.real(f)[:, 0], self.cls(f)

    if generator is None:
        return Generator(), Critic()
    from privpix import training

    return training.build(lambda: (Generator(), Critic()), generator)


def attention(z):
    """Scaled-dot-product self-attention over the features of each z: (n, d) → (n, d, d), rows sum to 1."""
    torch = _torch()
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
    torch = _torch()
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 4:
        raise ParameterError(f"images must be (n, h, w, c), got {x.shape}")
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(x, 3, 1)))


def approximate_sensitivity(gen, x) -> np.ndarray:
    """s_e = elementwise max over pairs |G_e(x_i) − G_e(x_j)| = max_i z_i − min_i z_i, in one pass."""
    torch = _torch()
    gen.eval()
    lo = hi = None
    with torch.no_grad():
        for i in range(0, len(x), 512):
            z = gen.encode(x[i : i + 512])
            lo = z.min(0).values if lo is None else torch.minimum(lo, z.min(0).values)
            hi = z.max(0).values if hi is None else torch.maximum(hi, z.max(0).values)
    return (hi - lo).numpy().astype(np.float64)


def train_ppsgan(
    kind: str,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    epsilon: float = 1.0,
    delta: float = 0.0,
    d: int = 128,
    width: int = 128,
    ae_epochs: int = 5,
    epochs: int = 5,
    batch_size: int = 256,
    n_critic: int = 5,
    lr: float = 1e-4,
    seed: int = 0,
    pretrained: dict | None = None,
    recipe: str = "paper",
    resensitize_every: int = 1000,
    callback: Callable[[int, Any], None] | None = None,
    progress: bool = False,
) -> tuple[Any, dict]:
    """Train PPSGAN, PPAPNet (pretrained autoencoder + Algorithm 1) or ACGAN on ``images`` (n, h, w, c) in
    [0, 1] with integer ``labels``. Returns the generator (eval mode) and a history dict (its ``autoencoder``
    entry is the pretrained state, to pass as ``pretrained`` to a later run on the same data and architecture,
    which then skips the pretraining).

    One epoch is ``len(images) / batch_size`` generator steps, each after ``n_critic`` critic steps.

    ``recipe`` chooses between the paper's text and the authors' released TensorFlow code, which differ in
    three places (PPAPNet follows the same choice; ACGAN's generator term is non-saturating under both, and
    its C_c follows the choice):

    * ``"paper"`` (§3.4 as written): the generator minimises ``L_c(x̃) − L_d(x̃) + L_zero`` (the saturating
      minimax term), the classifier C_c learns from real and anonymized images, s_e is computed once after the
      autoencoder pretraining.
    * ``"authors"`` (MIMICLab/PPSGAN ``train.py``): the generator's adversarial term is the non-saturating
      ``−log D(x̃)``, C_c learns from real images only (so the generator cannot agree a private code with it),
      and s_e and σ* are recomputed from the current encoder every ``resensitize_every`` generator steps.

    ``callback(epoch, generator)`` runs after each adversarial epoch (1-based) with the generator in eval mode,
    e.g. to measure utility along the training; the training resumes in train mode afterwards.
    """
    if kind not in KINDS:
        raise ParameterError(f"kind must be one of {KINDS}, got {kind!r}")
    if recipe not in RECIPES:
        raise ParameterError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    if resensitize_every < 1:
        raise ParameterError(f"resensitize_every must be >= 1, got {resensitize_every}")
    return _TRAINERS[kind](
        kind,
        images,
        labels,
        epsilon=epsilon,
        delta=delta,
        d=d,
        width=width,
        ae_epochs=ae_epochs,
        epochs=epochs,
        batch_size=batch_size,
        n_critic=n_critic,
        lr=lr,
        seed=seed,
        pretrained=pretrained,
        recipe=recipe,
        resensitize_every=resensitize_every,
        callback=callback,
        progress=progress,
    ).run()


class _AdversarialTrainer:
    """Algorithm 1's adversarial loop, shared by the three kinds: per generator step ``n_critic`` critic steps
    on ``L_d + L_c`` (a real batch and a fake one), then one generator step. Minibatches are drawn with
    replacement. Two local generators seeded with ``seed``: one for the initial weights, one for the
    minibatches and the noise (the global RNG is not touched). Subclasses say how a fake batch is made, what
    the generator minimises, and what runs before the adversarial epochs."""

    def __init__(self, kind: str, images: np.ndarray, labels: np.ndarray, **kw: Any):
        torch = _torch()
        from privpix import training

        self.kind = kind
        self.epsilon, self.delta, self.lr = kw["epsilon"], kw["delta"], kw["lr"]
        self.batch_size, self.n_critic, self.epochs = kw["batch_size"], kw["n_critic"], kw["epochs"]
        self.ae_epochs, self.pretrained = kw["ae_epochs"], kw["pretrained"]
        self.authors, self.resensitize_every = kw["recipe"] == "authors", kw["resensitize_every"]
        self.callback, self.progress = kw["callback"], kw["progress"]
        self.x = as_tensor(images)
        y_np = np.asarray(labels)
        if y_np.shape != (len(self.x),):
            raise ParameterError(f"labels must have shape ({len(self.x)},), got {y_np.shape}")
        self.classes, yi = np.unique(y_np, return_inverse=True)
        self.y = torch.from_numpy(yi.astype(np.int64))
        self.rng = training.generator(kw["seed"])  # minibatches and noise
        self.g, self.c = build_networks(
            kind,
            tuple(self.x.shape[1:]),
            d=kw["d"],
            width=kw["width"],
            n_classes=len(self.classes),
            generator=training.generator(kw["seed"]),
        )
        self.hist: dict[str, Any] = {"ae_mse": [], "critic": [], "gen": [], "zero": [], "sec": []}
        self.steps = max(1, len(self.x) // self.batch_size)

    def batch(self):
        n = len(self.x)
        return _torch().randint(0, n, (min(self.batch_size, n),), generator=self.rng)

    def prepare(self) -> None:
        """What runs before the adversarial epochs."""

    def fake(self, idx):
        """The generator's batch standing for the samples ``idx``."""
        raise NotImplementedError

    def generator_loss(self, idx, r_fake, c_fake):
        """(the generator's loss, its zero-noise term) on the fake batch for ``idx``."""
        raise NotImplementedError

    def before_generator_step(self, gen_steps: int) -> None:
        """Runs before the critic steps of each generator step (``gen_steps`` done so far)."""

    def run(self) -> tuple[Any, dict]:
        torch = _torch()
        from tqdm import tqdm

        g, c, x, y, hist = self.g, self.c, self.x, self.y, self.hist
        self.prepare()
        opt_g = torch.optim.AdamW(g.parameters(), lr=self.lr, weight_decay=1e-4, betas=(0.5, 0.9))
        opt_c = torch.optim.AdamW(c.parameters(), lr=self.lr, weight_decay=1e-4, betas=(0.5, 0.9))
        bce, ce = torch.nn.functional.binary_cross_entropy_with_logits, torch.nn.functional.cross_entropy
        gen_steps = 0
        for ep in range(self.epochs):
            t0 = time.perf_counter()
            tot_c = tot_g = tot_z = 0.0
            g.train()  # the callback of the previous epoch left it in eval mode
            c.train()
            for _ in tqdm(range(self.steps), desc=f"adversarial {ep + 1}", disable=not self.progress, leave=False):
                self.before_generator_step(gen_steps)
                for _ in range(self.n_critic):
                    i, j = self.batch(), self.batch()
                    with torch.no_grad():
                        xt = self.fake(i)
                    r_real, c_real = c(x[j])
                    r_fake, c_fake = c(xt)
                    loss_c = bce(r_real, torch.ones_like(r_real)) + bce(r_fake, torch.zeros_like(r_fake))
                    loss_c = loss_c + ce(c_real, y[j])
                    if not self.authors:  # the paper's C_c learns from the fakes too
                        loss_c = loss_c + ce(c_fake, y[i])
                    opt_c.zero_grad()
                    loss_c.backward()
                    opt_c.step()
                i = self.batch()
                r_fake, c_fake = c(self.fake(i))
                loss_g, zero = self.generator_loss(i, r_fake, c_fake)
                opt_g.zero_grad()
                loss_g.backward()
                opt_g.step()
                gen_steps += 1
                tot_c += loss_c.item()
                tot_g += loss_g.item()
                tot_z += zero.item()
            hist["critic"].append(tot_c / self.steps)
            hist["gen"].append(tot_g / self.steps)
            hist["zero"].append(tot_z / self.steps)
            hist["sec"].append(time.perf_counter() - t0)
            if self.callback is not None:
                g.eval()
                g.classes_ = self.classes
                self.callback(ep + 1, g)
        g.eval()
        g.classes_ = self.classes
        return g, hist


class _EncoderGANTrainer(_AdversarialTrainer):
    """PPSGAN and PPAPNet: a pretrained autoencoder initialises G_e and G_d, s_e is measured on the training
    images, and the fake is the decoded amplified latent; the generator also minimises the zero-noise
    reconstruction ``‖x − G_d(G_e(x))‖²``."""

    def prepare(self) -> None:
        torch = _torch()
        from tqdm import tqdm

        g, x, hist = self.g, self.x, self.hist
        opt = torch.optim.Adam([*g.encoder.parameters(), *g.fc.parameters(), *g.deconv.parameters()], lr=1e-3)
        if self.pretrained is not None:
            g.load_state_dict(self.pretrained)
        for ep in range(0 if self.pretrained is not None else self.ae_epochs):
            g.train()
            tot = 0.0
            for _ in tqdm(range(self.steps), desc=f"autoencoder {ep + 1}", disable=not self.progress, leave=False):
                xb = x[self.batch()]
                loss = torch.nn.functional.mse_loss(g.decode(g.encode(xb)), xb)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot += loss.item()
            hist["ae_mse"].append(tot / self.steps)
        hist["autoencoder"] = {k: v.detach().clone() for k, v in g.state_dict().items()}
        g.gaussian.fill_(self.delta > 0)
        hist["s_e_mean"] = self.resensitize()

    def resensitize(self) -> float:
        """s_e and σ* from the current encoder; returns mean s_e."""
        torch = _torch()
        s_e = approximate_sensitivity(self.g, self.x)
        self.g.sigma_star.copy_(torch.from_numpy(sigma_star(s_e, self.epsilon, self.delta).astype(np.float32)))
        return float(s_e.mean())

    def before_generator_step(self, gen_steps: int) -> None:
        # The authors' code re-measures s_e every ``resensitize_every`` generator steps.
        if self.authors and gen_steps and gen_steps % self.resensitize_every == 0:
            self.hist.setdefault("s_e_means", []).append(self.resensitize())
            self.g.train()  # approximate_sensitivity measures in eval mode

    def fake(self, idx):
        return self.g(self.x[idx], self.rng)

    def generator_loss(self, idx, r_fake, c_fake):
        # Paper: minimise L_c − L_d + L_zero, L_d the critic's cross-entropy on x̃ labelled fake; the authors'
        # code swaps −L_d for the non-saturating −log D(x̃).
        torch = _torch()
        bce, ce = torch.nn.functional.binary_cross_entropy_with_logits, torch.nn.functional.cross_entropy
        xb = self.x[idx]
        zero = torch.nn.functional.mse_loss(self.g.decode(self.g.encode(xb)), xb)
        adv = bce(r_fake, torch.ones_like(r_fake)) if self.authors else -bce(r_fake, torch.zeros_like(r_fake))
        return ce(c_fake, self.y[idx]) + adv + zero, zero


class _ACGANTrainer(_AdversarialTrainer):
    """ACGAN: G_d fed with U[−1, 1]^d noise and a one-hot class; no autoencoder, no zero-noise term, and the
    non-saturating generator loss under both recipes."""

    def fake(self, idx):
        return self.g.sample(self.y[idx], self.rng)

    def generator_loss(self, idx, r_fake, c_fake):
        torch = _torch()
        bce, ce = torch.nn.functional.binary_cross_entropy_with_logits, torch.nn.functional.cross_entropy
        return bce(r_fake, torch.ones_like(r_fake)) + ce(c_fake, self.y[idx]), torch.zeros(())


_TRAINERS: dict[str, type[_AdversarialTrainer]] = {
    "ppsgan": _EncoderGANTrainer,
    "ppapnet": _EncoderGANTrainer,
    "acgan": _ACGANTrainer,
}


class TrunkClassifier:
    """The C_c-shaped classifier paper 004 uses for utility: the critic's conv trunk plus a dense softmax layer.

    ``fit(images, labels)`` (Adam, lr 1e-3, ``epochs``), ``predict``, ``score``, and ``features`` (the trunk's
    flattened output, for re-identification in feature space and the Fréchet distance).
    """

    def __init__(self, width: int = 32, epochs: int = 3, batch_size: int = 128, seed: int = 0):
        self.width, self.epochs, self.batch_size, self.seed = width, epochs, batch_size, seed

    def fit(self, images: np.ndarray, labels: np.ndarray) -> TrunkClassifier:
        torch = _torch()
        from privpix import training

        x = as_tensor(images)
        self.classes_, yi = np.unique(np.asarray(labels), return_inverse=True)
        y = torch.from_numpy(yi.astype(np.int64))
        c, h, _ = x.shape[1:]
        _check_shape((c, h, h))
        flat = 8 * self.width * _sizes(h)[-1] ** 2
        # Two streams seeded alike: the weights' (trunk, then head), and the minibatch order's.
        self.trunk_, self.head_ = training.build(
            lambda: (_conv_trunk(c, self.width), torch.nn.Linear(flat, len(self.classes_))),
            training.generator(self.seed),
        )
        training.fit_classifier(
            lambda xb: self.head_(self.trunk_(xb)), [*self.trunk_.parameters(), *self.head_.parameters()], x, y,
            lr=1e-3, epochs=self.epochs, batch_size=self.batch_size, seed=self.seed, model=self.trunk_,
        )  # fmt: skip
        return self

    def features(self, images: np.ndarray) -> np.ndarray:
        torch = _torch()
        x = as_tensor(images)
        with torch.no_grad():
            return torch.cat([self.trunk_(x[i : i + 1000]) for i in range(0, len(x), 1000)]).numpy()

    def predict(self, images: np.ndarray) -> np.ndarray:
        torch = _torch()
        f = torch.from_numpy(self.features(images))
        with torch.no_grad():
            return self.classes_[self.head_(f).argmax(1).numpy()]

    def score(self, images: np.ndarray, labels: np.ndarray) -> float:
        return float(np.mean(self.predict(images) == np.asarray(labels)))


def anonymize(gen, images: np.ndarray, labels: np.ndarray | None = None, *, seed: int | None = 0) -> np.ndarray:
    """Release (n, h, w, c) images in [0, 1]: PPSGAN/PPAPNet anonymize each image; ACGAN draws one synthetic
    image per input of the same class (``labels`` required). ``seed`` fixes the noise."""
    torch = _torch()
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
                raise ParameterError(f"labels outside the model's classes {list(gen.classes_)}")
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
    torch = _torch()
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


def save_model(path: str | Path, gen, meta: dict) -> Path:
    """One file: generator weights + JSON meta (shape, d, width, classes, ε, δ, training record)."""
    from privpix.mechanisms.neural.modelfile import save_model_file

    full = {"format": FORMAT, "kind": gen.kind, "classes": [int(c) for c in gen.classes_], **meta}
    return save_model_file(path, gen.state_dict(), full)


def load_model(path: str | Path):
    """(generator, meta) from :func:`save_model`; weights only (``weights_only=True``)."""
    from privpix.mechanisms.neural.modelfile import build_from_file, load_model_file

    state, meta = load_model_file(path, FORMAT, "PPSGAN")

    def build():
        from privpix import training

        # A throwaway generator for the weights the file replaces: loading leaves torch's global RNG alone.
        shape, n_classes = tuple(meta["shape"]), len(meta["classes"])
        gen, _ = build_networks(
            meta["kind"], shape, meta["d"], meta["width"], n_classes, generator=training.generator(0)
        )
        gen.load_state_dict(state)
        gen.classes_ = np.asarray(meta["classes"])
        return gen

    gen = build_from_file(path, "PPSGAN", build)
    gen.eval()
    return gen, meta
