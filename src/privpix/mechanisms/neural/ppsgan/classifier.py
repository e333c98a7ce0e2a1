"""The small convolutional classifier of the PPSGAN benchmarks (the critic's trunk with a softmax head), used
to score released images; not part of the mechanism."""

from __future__ import annotations

import numpy as np

from privpix.mechanisms.neural.ppsgan.networks import (
    as_tensor,
    check_shape,
    conv_sizes,
    conv_trunk,
    ppsgan_torch,
)


class TrunkClassifier:
    """The C_c-shaped classifier Kim & Yang 2020 use for utility: the critic's conv trunk plus a dense softmax layer.

    ``fit(images, labels)`` (Adam, lr 1e-3, ``epochs``), ``predict``, ``score``, and ``features`` (the trunk's
    flattened output, for re-identification in feature space and the Fréchet distance).
    """

    def __init__(self, width: int = 32, epochs: int = 3, batch_size: int = 128, seed: int = 0):
        self.width, self.epochs, self.batch_size, self.seed = width, epochs, batch_size, seed

    def fit(self, images: np.ndarray, labels: np.ndarray) -> TrunkClassifier:
        torch = ppsgan_torch()
        from privpix import training

        x = as_tensor(images)
        self.classes_, yi = np.unique(np.asarray(labels), return_inverse=True)
        y = torch.from_numpy(yi.astype(np.int64))
        c, h, _ = x.shape[1:]
        check_shape((c, h, h))
        flat = 8 * self.width * conv_sizes(h)[-1] ** 2
        # Two streams seeded alike: the weights' (trunk, then head), and the minibatch order's.
        self.trunk_, self.head_ = training.build(
            lambda: (conv_trunk(c, self.width), torch.nn.Linear(flat, len(self.classes_))),
            training.generator(self.seed),
        )
        training.fit_classifier(
            lambda xb: self.head_(self.trunk_(xb)), [*self.trunk_.parameters(), *self.head_.parameters()], x, y,
            lr=1e-3, epochs=self.epochs, batch_size=self.batch_size, seed=self.seed, model=self.trunk_,
        )  # fmt: skip
        return self

    def features(self, images: np.ndarray) -> np.ndarray:
        torch = ppsgan_torch()
        x = as_tensor(images)
        with torch.no_grad():
            return torch.cat([self.trunk_(x[i : i + 1000]) for i in range(0, len(x), 1000)]).numpy()

    def predict(self, images: np.ndarray) -> np.ndarray:
        torch = ppsgan_torch()
        f = torch.from_numpy(self.features(images))
        with torch.no_grad():
            return self.classes_[self.head_(f).argmax(1).numpy()]

    def score(self, images: np.ndarray, labels: np.ndarray) -> float:
        return float(np.mean(self.predict(images) == np.asarray(labels)))
