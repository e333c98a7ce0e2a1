"""The adjustable-privacy autoencoder obfuscator (Jamshidi et al. 2023).

An encoder E maps x to a latent h; a classifier head C gives log-probabilities of the utility feature (two
classes, LogSoftmax) and a head R the "rest" of h; the decoder D rebuilds x from [C(h), R(h)]. Training
(Algorithm 1) alternates, per batch, the autoencoder MSE (eq. 9) on all networks and the NLL of C (eq. 10)
on E and C, with early stopping on the autoencoder's validation loss (the error of the paper's Fig. 4).
At release, each data provider chooses:

* f (``use_f``, ``K``): C's output is replaced by 0 for the image's true utility class and −K for the other;
* g (``sigma2``): R's output gets noise ``sigma2 · mean|R(h)| · N(0, 1)`` per coordinate (the authors'
  released code scales a standard normal by the coefficient and the mean activation magnitude),

without retraining. The guarantee is empirical only: privacy is what the adversaries measure.

Architectures: ``image`` is Table 1 (64×64 RGB; 4 stride-2 convolutions 3→64→64→64→128 with batch norm and
LeakyReLU, 2048 → 1024; heads 1024→1024→256→64→2 and 1024→1024→1024→1022; decoder 1024 → 2048 and
transposed convolutions 128→64→64→64→3 with sigmoid; channel counts from the authors' code).
``tabular`` is Table 2 (UCI Adult's 102 one-hot features scaled to [0, 1]; 102→128→128→64; heads 64→32→8→2
and 64→64→62; decoder 64→128→128→102 with sigmoid).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from privpix.errors import ParameterError, require_torch
from privpix.privacy.noise import torch_seed

FORMAT = "privpix-ae-obfuscator/1"
KINDS = ("image", "tabular")


def _torch():
    return require_torch("the autoencoder obfuscator")


def as_tensor(x: np.ndarray, kind: str):
    """(n, 64, 64, 3) images in [0, 1] or (n, features) records → a float32 torch tensor in the network's layout."""
    torch = _torch()
    x = np.asarray(x, dtype=np.float32)
    if kind == "image":
        if x.ndim != 4 or x.shape[1:] != (64, 64, 3):
            raise ParameterError(f"image networks take (n, 64, 64, 3) RGB images in [0, 1], got {x.shape}")
        x = np.moveaxis(x, 3, 1)
    elif x.ndim != 2:
        raise ParameterError(f"tabular networks take (n, features) records, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ParameterError("inputs contain NaN or infinite values")
    return torch.from_numpy(np.ascontiguousarray(x))


def _lrelu():
    return _torch().nn.LeakyReLU(0.2)


def image_encoder():
    """Table 1's encoder: four stride-2 4×4 convolutions 3→64→64→64→128 (batch norm after the last three),
    LeakyReLU(0.2), then 2048 → 1024. Input (n, 3, 64, 64). (Our copy of Table 1 lacks the channel counts;
    they are those of the authors' released code.)"""
    nn = _torch().nn
    lrelu = _lrelu
    return nn.Sequential(
        nn.Conv2d(3, 64, 4, 2, 1, bias=False), lrelu(),
        nn.Conv2d(64, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), lrelu(),
        nn.Conv2d(64, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), lrelu(),
        nn.Conv2d(64, 128, 4, 2, 1, bias=False), nn.BatchNorm2d(128), lrelu(),
        nn.Flatten(), nn.Linear(2048, 1024), lrelu(),
    )  # fmt: skip


def image_classifier(n_out: int = 2):
    """Table 1's classifier head 1024 → 1024 → 256 → 64 → n_out with LogSoftmax."""
    nn = _torch().nn
    lrelu = _lrelu
    return nn.Sequential(
        nn.Linear(1024, 1024), nn.Dropout(0.5), lrelu(),
        nn.Linear(1024, 256), nn.Dropout(0.5), lrelu(),
        nn.Linear(256, 64), lrelu(), nn.Linear(64, n_out), nn.LogSoftmax(dim=1),
    )  # fmt: skip


def build_obfuscator(kind: str, n_features: int = 102, *, generator=None):
    """The paper's networks as one ``torch.nn.Module`` with ``encode``, ``heads``, ``decode``. With a torch
    ``generator`` its weights and dropout masks come from it (:func:`privpix.training.build`); without, from
    torch's global RNG."""
    torch = _torch()
    # torch is loaded by now; imported by name so that type checkers take nn.Module as the class it is.
    from torch import nn

    if kind not in KINDS:
        raise ParameterError(f"kind must be one of {KINDS}, got {kind!r}")
    lrelu = _lrelu

    class Obfuscator(nn.Module):
        def __init__(self):
            super().__init__()
            self.kind = kind
            if kind == "image":
                self.encoder = image_encoder()
                self.classifier = image_classifier(2)
                self.rest = nn.Sequential(
                    nn.Linear(1024, 1024), nn.Dropout(0.5), lrelu(),
                    nn.Linear(1024, 1024), nn.Dropout(0.5), lrelu(), nn.Linear(1024, 1022), lrelu(),
                )  # fmt: skip
                self.dec_fc = nn.Sequential(nn.Linear(1024, 2048), lrelu())
                self.dec_conv = nn.Sequential(
                    nn.ConvTranspose2d(128, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                    nn.ConvTranspose2d(64, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                    nn.ConvTranspose2d(64, 64, 4, 2, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                    nn.ConvTranspose2d(64, 3, 4, 2, 1, bias=False), nn.Sigmoid(),
                )  # fmt: skip
            else:
                self.encoder = nn.Sequential(
                    nn.Linear(n_features, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU()
                )
                self.classifier = nn.Sequential(
                    nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 2), nn.LogSoftmax(dim=1)
                )
                self.rest = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 62), nn.ReLU())
                self.dec_fc = nn.Sequential(
                    nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                    nn.Linear(128, n_features), nn.Sigmoid(),
                )  # fmt: skip
                self.dec_conv = None

        def heads(self, x):
            h = self.encoder(x)
            return self.classifier(h), self.rest(h)

        def decode(self, c, r):
            z = self.dec_fc(torch.cat([c, r], dim=1))
            if self.dec_conv is None:
                return z
            return self.dec_conv(z.view(-1, 128, 4, 4))

        def forward(self, x):
            c, r = self.heads(x)
            return self.decode(c, r), c, r

    if generator is None:
        net = Obfuscator()
    else:
        from privpix import training

        net = training.build(Obfuscator, generator)
    init_weights(net, generator)
    return net


def init_weights(net, generator=None) -> None:
    """The paper's initialisation (after DCGAN): conv weights N(0, 0.02²); batch-norm weights N(1, 0.02²),
    biases 0, drawn from the torch ``generator`` (the global RNG when None). Linear layers keep PyTorch's
    default (the paper does not specify them)."""
    nn = _torch().nn
    for m in net.modules():
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d):
            nn.init.normal_(m.weight, 0.0, 0.02, generator=generator)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02, generator=generator)
            nn.init.zeros_(m.bias)


def train_obfuscator(
    kind: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    *,
    epochs: int = 20,
    batch_size: int = 64,
    lr: float = 1e-3,
    patience: int = 3,
    seed: int = 0,
    progress: bool = False,
) -> tuple[Any, dict]:
    """Algorithm 1 with early stopping. ``x`` in [0, 1] ((n, 64, 64, 3) images or (n, features) records),
    ``y`` the utility feature (0/1). Returns the network of the lowest validation autoencoder loss (eq. 9;
    the classifier's validation NLL on a small split is too noisy to stop on) and its history."""
    torch = _torch()
    from privpix import training

    for name, y in (("y_train", y_train), ("y_val", y_val)):
        if not set(np.unique(y)) <= {0, 1}:
            raise ParameterError(f"{name}: the utility feature must be binary 0/1")
    n_feat = 0 if kind == "image" else int(np.asarray(x_train).shape[1])
    # Two streams seeded alike: the weights' and dropout's, and the minibatch order's.
    net = build_obfuscator(kind, n_feat or 102, generator=training.generator(seed))
    xt, xv = as_tensor(x_train, kind), as_tensor(x_val, kind)
    yt, yv = (torch.from_numpy(np.asarray(y, dtype=np.int64)) for y in (y_train, y_val))
    # The paper's Adam (β1 = 0.5 as the authors' code); one optimiser per loss, as Algorithm 1 updates
    # different parameter sets with each.
    opt_ae = torch.optim.Adam(net.parameters(), lr=lr, betas=(0.5, 0.999))
    opt_c = torch.optim.Adam([*net.encoder.parameters(), *net.classifier.parameters()], lr=lr, betas=(0.5, 0.999))
    mse, nll = torch.nn.MSELoss(), torch.nn.NLLLoss()

    def step(idx):
        xb, yb = xt[idx], yt[idx]
        recon, _, _ = net(xb)
        loss_ae = mse(recon, xb)  # eq. 9, all networks
        opt_ae.zero_grad()
        loss_ae.backward()
        opt_ae.step()
        c, _ = net.heads(xb)
        loss_c = nll(c, yb)  # eq. 10, encoder and classifier only
        opt_c.zero_grad()
        loss_c.backward()
        opt_c.step()
        return loss_ae, loss_c

    def validate():
        v_ae, v_c, v_acc = evaluate_obfuscator(net, xv, yv)
        return {"val_ae": v_ae, "val_nll": v_c, "val_acc": v_acc}

    # min_batch 2: batch norm needs two samples; early stopping keeps the lowest validation autoencoder loss.
    # Per-epoch lists from training.fit, and the count of epochs run beside them.
    history: dict[str, Any] = training.fit(
        step,
        len(xt),
        epochs=epochs,
        batch_size=batch_size,
        generator=training.generator(seed),
        losses=("train_ae", "train_nll"),
        min_batch=2,
        model=net,
        validate=validate,
        monitor="val_ae",
        patience=patience,
        progress=progress,
    )
    history["epochs_run"] = len(history["val_ae"])
    return net, history


def evaluate_obfuscator(net, x, y) -> tuple[float, float, float]:
    """Validation (autoencoder MSE, classifier NLL, classifier accuracy) on tensors ``x``, ``y``."""
    torch = _torch()
    net.eval()
    ae = c_loss = correct = 0.0
    with torch.no_grad():
        for i in range(0, len(x), 512):
            recon, c, _ = net(x[i : i + 512])
            ae += float(torch.nn.functional.mse_loss(recon, x[i : i + 512], reduction="sum")) / recon[0].numel()
            c_loss += float(torch.nn.functional.nll_loss(c, y[i : i + 512], reduction="sum"))
            correct += float((c.argmax(1) == y[i : i + 512]).sum())
    return ae / len(x), c_loss / len(x), correct / len(x)


def obfuscate(
    net, x: np.ndarray, labels: np.ndarray | None, *, sigma2: float, K: float, use_f: bool, seed: int | None
) -> np.ndarray:
    """Release x through the trained network with f (if ``use_f``; needs the true utility ``labels``) and g.

    Returns an array of x's shape in [0, 1]. ``seed`` fixes g's noise (``None``: fresh OS entropy).
    """
    torch = _torch()
    if sigma2 < 0 or K < 0:
        raise ParameterError(f"sigma2 and K must be >= 0, got sigma2={sigma2}, K={K}")
    kind = net.kind
    xt = as_tensor(x, kind)
    if use_f:
        if labels is None:
            raise ParameterError("f needs each record's true utility label; give labels or set use_f=false")
        lab = np.asarray(labels)
        if lab.shape != (len(xt),) or not set(np.unique(lab)) <= {0, 1}:
            raise ParameterError(f"labels must be 0/1 with shape ({len(xt)},)")
    gen = torch.Generator()
    gen.manual_seed(int(seed) if seed is not None else torch_seed())
    out = []
    net.eval()
    with torch.no_grad():
        for i in range(0, len(xt), 512):
            xb = xt[i : i + 512]
            c, r = net.heads(xb)
            if use_f:
                yb = torch.from_numpy(lab[i : i + 512].astype(np.int64))
                c = torch.full_like(c, -float(K))
                c[torch.arange(len(yb)), yb] = 0.0  # f: 0 for the true class, −K for the other
            if sigma2 > 0:
                scale = sigma2 * r.abs().mean(dim=1, keepdim=True)
                r = r + scale * torch.randn(r.shape, generator=gen)  # g
            y = net.decode(c, r)
            out.append(y.numpy())
    res = np.concatenate(out)
    return np.moveaxis(res, 1, 3) if kind == "image" else res


def save_obfuscator(path: str | Path, net, meta: dict) -> Path:
    """One file a data provider loads: weights plus a JSON description (no pickled code)."""
    from privpix.mechanisms.modelfile import save_model_file

    return save_model_file(path, net.state_dict(), {"format": FORMAT, "kind": net.kind, **meta})


def load_obfuscator(path: str | Path):
    """(network, meta) from :func:`save_obfuscator`'s file; loads weights only (``weights_only=True``)."""
    from privpix.mechanisms.modelfile import build_from_file, load_model_file

    state, meta = load_model_file(path, FORMAT, "obfuscator")

    def build():
        from privpix import training

        # A throwaway generator for the weights the file replaces: loading leaves torch's global RNG alone.
        net = build_obfuscator(meta["kind"], meta.get("n_features", 102), generator=training.generator(0))
        net.load_state_dict(state)
        return net

    net = build_from_file(path, "obfuscator", build)
    net.eval()
    return net, meta
