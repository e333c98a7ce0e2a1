"""Neural attribute inferrers: Jamshidi et al. 2023's adversary and utility provider (PyTorch, CPU).

Both have the same structure and differ only in what they are trained to infer:

* ``image``: Table 1, the obfuscator's encoder plus classifier head (64×64 RGB in, LogSoftmax out);
* ``tabular``: Table 2, 102 → 256 → 256 → 128 → classes with dropout 0.2 / 0.3 / 0.4 and ReLU.

Training uses Adam and the NLL loss with early stopping on a held-out validation fraction (the paper stops
"when the validation loss starts to increase"). The same class serves the weak adversary (trained on original
data), the strong adversary (trained on data obfuscated by the same model) and the utility provider.

They live with the mechanism, not in :mod:`privpix.evaluation`, because the obfuscator's fit runs them (its
``measure`` parameter keeps their accuracies in the model file); the fit does not train against them (Algorithm 1
has no adversarial term).
"""

from __future__ import annotations

import numpy as np

from privpix.errors import ParameterError, require_torch
from privpix.mechanisms.neural.obfuscator import as_tensor, image_classifier, image_encoder, init_weights

KINDS = ("image", "tabular")


def _torch():
    return require_torch("neural attribute inference")


def build_inferrer(kind: str, n_features: int = 102, n_classes: int = 2, *, generator=None):
    """Table 1 / Table 2 adversary and utility-provider network. With a torch ``generator`` its weights and
    dropout masks come from it (:func:`privpix.training.build`); without, from torch's global RNG."""
    torch = _torch()
    nn = torch.nn
    if kind not in KINDS:
        raise ParameterError(f"kind must be one of {KINDS}, got {kind!r}")

    def make():
        if kind == "image":
            return nn.Sequential(image_encoder(), image_classifier(n_classes))
        return nn.Sequential(
            nn.Linear(n_features, 256), nn.Dropout(0.2), nn.ReLU(),
            nn.Linear(256, 256), nn.Dropout(0.3), nn.ReLU(),
            nn.Linear(256, 128), nn.Dropout(0.4), nn.ReLU(),
            nn.Linear(128, n_classes), nn.LogSoftmax(dim=1),
        )  # fmt: skip

    if generator is None:
        net = make()
    else:
        from privpix import training

        net = training.build(make, generator)
    if kind == "image":
        init_weights(net, generator)
    return net


class NeuralInferrer:
    """Binary (or k-class) attribute classifier with the paper's adversary / utility-provider structure.

    ``fit(x, y)`` holds out ``val_fraction`` (seeded) for early stopping with ``patience`` epochs and keeps
    the weights of the lowest validation loss. Same ``seed``, same network. ``history_`` has per-epoch losses.
    """

    def __init__(
        self,
        kind: str,
        *,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 1e-3,
        patience: int = 2,
        val_fraction: float = 0.1,
        seed: int = 0,
    ):
        if kind not in KINDS:
            raise ParameterError(f"kind must be one of {KINDS}, got {kind!r}")
        if epochs < 1 or batch_size < 2 or not 0 < val_fraction < 1:
            raise ParameterError("epochs >= 1, batch_size >= 2 and 0 < val_fraction < 1 are required")
        self.kind, self.epochs, self.batch_size, self.lr = kind, epochs, batch_size, lr
        self.patience, self.val_fraction, self.seed = patience, val_fraction, seed

    def fit(self, x: np.ndarray, y: np.ndarray) -> NeuralInferrer:
        torch = _torch()
        from privpix import training

        xt = as_tensor(x, self.kind)
        y = np.asarray(y)
        if y.shape != (len(xt),):
            raise ParameterError(f"y must have one label per sample, shape ({len(xt)},), got {y.shape}")
        self.classes_, yi = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ParameterError("y holds a single class; nothing to learn")
        rng = np.random.default_rng(self.seed)
        perm = rng.permutation(len(xt))
        n_val = max(2, round(self.val_fraction * len(xt)))
        val, tr = torch.from_numpy(perm[:n_val]), torch.from_numpy(perm[n_val:])
        yt = torch.from_numpy(yi.astype(np.int64))
        # Two streams seeded alike: the weights' and dropout's, and the minibatch order's.
        n_features = xt.shape[1] if self.kind == "tabular" else 0
        net = build_inferrer(self.kind, n_features, len(self.classes_), generator=training.generator(self.seed))
        opt = torch.optim.Adam(net.parameters(), lr=self.lr, betas=(0.5, 0.999))

        def step(idx):
            loss = torch.nn.functional.nll_loss(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        def validate():
            logp = _log_proba(net, xt[val])
            return {
                "val_nll": float(torch.nn.functional.nll_loss(logp, yt[val])),
                "val_acc": float((logp.argmax(1) == yt[val]).float().mean()),
            }

        # min_batch 2: batch norm needs two samples; early stopping keeps the lowest validation loss.
        self.history_ = training.fit(
            step,
            tr,
            epochs=self.epochs,
            batch_size=self.batch_size,
            generator=training.generator(self.seed),
            losses=("train_nll",),
            min_batch=2,
            model=net,
            validate=validate,
            monitor="val_nll",
            patience=self.patience,
        )
        self.model_ = net
        return self

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """(n, classes) probabilities, columns in the order of ``classes_``."""
        return np.exp(_log_proba(self.model_, as_tensor(x, self.kind)).numpy())

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.classes_[self.predict_proba(x).argmax(1)]

    def score(self, x: np.ndarray, y: np.ndarray) -> float:
        """Accuracy on ``(x, y)``."""
        return float(np.mean(self.predict(x) == np.asarray(y)))


def _log_proba(net, x):
    torch = _torch()
    net.eval()
    with torch.no_grad():
        return torch.cat([net(x[i : i + 512]) for i in range(0, len(x), 512)])
