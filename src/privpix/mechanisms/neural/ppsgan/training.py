"""PPSGAN's training (Algorithm 1), with PPAPNet's and ACGAN's."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from privpix.errors import ParameterError
from privpix.mechanisms.neural.ppsgan.networks import (
    KINDS,
    RECIPES,
    approximate_sensitivity,
    as_tensor,
    build_networks,
    ppsgan_torch,
    sigma_star,
)


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
        torch = ppsgan_torch()
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
        return ppsgan_torch().randint(0, n, (min(self.batch_size, n),), generator=self.rng)

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
        torch = ppsgan_torch()
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
        torch = ppsgan_torch()
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
        torch = ppsgan_torch()
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
        torch = ppsgan_torch()
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
        torch = ppsgan_torch()
        bce, ce = torch.nn.functional.binary_cross_entropy_with_logits, torch.nn.functional.cross_entropy
        return bce(r_fake, torch.ones_like(r_fake)) + ce(c_fake, self.y[idx]), torch.zeros(())


_TRAINERS: dict[str, type[_AdversarialTrainer]] = {
    "ppsgan": _EncoderGANTrainer,
    "ppapnet": _EncoderGANTrainer,
    "acgan": _ACGANTrainer,
}
