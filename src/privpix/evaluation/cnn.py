"""Small CNN classifiers for utility measurements (PyTorch, CPU; needs ``privpix[neural]``).

The two networks of Zhang et al. 2022 (the PCA-inverse paper):

* ``mnist-002``: its MNIST network, two convolutions of five 5×5 filters, each followed by batch
  norm, ReLU and 2×2 max pooling, then a linear layer.
* ``faces-002``: its gender network, seven convolutions of twenty 5×5 filters with batch norm and
  ReLU, 2×2 average pooling after the 2nd, 4th and 6th, global average pooling, then a linear layer.
"""

from __future__ import annotations

import numpy as np

from privpix.data.imageset import ImageSet
from privpix.errors import ParameterError, require_torch

ARCHITECTURES = ("mnist-002", "faces-002")


def _torch():
    return require_torch("CNN evaluation")


def build_cnn(arch: str, channels: int, n_classes: int, hw: tuple[int, int]):
    torch = _torch()
    nn = torch.nn
    if arch == "mnist-002":
        layers = [
            nn.Conv2d(channels, 5, 5, padding=2),
            nn.BatchNorm2d(5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(5, 5, 5, padding=2),
            nn.BatchNorm2d(5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        ]
        feat = 5 * (hw[0] // 4) * (hw[1] // 4)
        return nn.Sequential(*layers, nn.Linear(feat, n_classes))
    if arch == "faces-002":
        layers, c = [], channels
        for i in range(7):
            layers += [nn.Conv2d(c, 20, 5, padding=2), nn.BatchNorm2d(20), nn.ReLU()]
            c = 20
            if i in (1, 3, 5):
                layers.append(nn.AvgPool2d(2))
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(20, n_classes))
    raise ParameterError(f"arch must be one of {ARCHITECTURES}, got {arch!r}")


class CNNClassifier:
    """Train a small CNN on an ImageSet and predict labels; every random step follows ``seed``."""

    def __init__(
        self, arch: str = "mnist-002", epochs: int = 3, batch_size: int = 128, lr: float = 1e-3, seed: int = 0
    ):
        if arch not in ARCHITECTURES:
            raise ParameterError(f"arch must be one of {ARCHITECTURES}, got {arch!r}")
        self.arch, self.epochs, self.batch_size, self.lr, self.seed = arch, epochs, batch_size, lr, seed

    def fit(self, data: ImageSet, labels: np.ndarray | None = None) -> CNNClassifier:
        torch = _torch()
        from privpix import training

        y = np.asarray(data.labels if labels is None else labels)
        if y is None or y.shape != (len(data),):
            raise ParameterError("CNNClassifier.fit needs one label per image")
        self.classes_, yi = np.unique(y, return_inverse=True)
        x = torch.from_numpy(np.ascontiguousarray(np.moveaxis(data.as_float(), 3, 1)))
        t = torch.from_numpy(yi.astype(np.int64))
        # Two streams seeded alike: the weights', and the minibatch order's.
        shape = (x.shape[1], len(self.classes_), tuple(x.shape[2:]))
        self.model_ = training.build(lambda: build_cnn(self.arch, *shape), training.generator(self.seed))
        training.fit_classifier(
            self.model_, self.model_.parameters(), x, t, lr=self.lr, epochs=self.epochs, batch_size=self.batch_size,
            seed=self.seed, model=self.model_,
        )  # fmt: skip
        return self

    def predict(self, data: ImageSet) -> np.ndarray:
        torch = _torch()
        x = torch.from_numpy(np.ascontiguousarray(np.moveaxis(data.as_float(), 3, 1)))
        out = []
        with torch.no_grad():
            for i in range(0, len(x), 1000):
                out.append(self.model_(x[i : i + 1000]).argmax(1).numpy())
        return self.classes_[np.concatenate(out)]

    def score(self, data: ImageSet, labels: np.ndarray | None = None) -> float:
        y = np.asarray(data.labels if labels is None else labels)
        return float(np.mean(self.predict(data) == y))
