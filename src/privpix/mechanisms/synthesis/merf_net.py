"""The PyTorch half of ``dp-merf``: random Fourier features, the private mean embedding, the label-conditional
generator and its training on the noisy embedding (Harder et al. 2021). Imported only when a fit or a release
needs it; no draw here uses torch's global RNG (see :mod:`privpix.training`)."""

from __future__ import annotations

import math
import time

import numpy as np

from privpix import training

torch = training.torch
nn = torch.nn

# Rows of private images featurized at once: (rows, D) float32 temporaries stay near 40 MB for D = 10,000.
CHUNK = 1024


def features(x: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """φ(x) = sqrt(2/D)·[cos(xΩ), sin(xΩ)] for rows x (m, d) and frequencies Ω (d, D/2): (m, D), and
    ‖φ(x)‖₂ = 1 for every x (cos² + sin² = 1 on each of the D/2 frequencies), whatever its pixels."""
    proj = x @ omega
    return torch.cat([torch.cos(proj), torch.sin(proj)], dim=1) * math.sqrt(1.0 / omega.shape[1])


def mean_embedding(x: np.ndarray, labels: np.ndarray, omega: np.ndarray, n_classes: int, count_share: float):
    """The vector whose noisy copy dp-merf releases: the mean over the n rows of x (n, d) of
    u_i = [sqrt(1 − a²)·φ(x_i) ⊗ onehot(y_i), a·onehot(y_i)] with a² = ``count_share``, as float64 (K·D + K,).

    ‖u_i‖₂ = sqrt((1 − a²)·‖φ(x_i)‖² + a²) = 1 for every image and label, so replacing one pair moves the mean by at
    most 2/n in L2. The first K·D values are the class-wise feature sums φ ⊗ y (row k: class k), the last K the class
    proportions (scaled by a): the label distribution is read from the same release."""
    n, dim = len(x), omega.shape[1] * 2
    om = torch.from_numpy(np.ascontiguousarray(omega, dtype=np.float32))
    acc = np.zeros((n_classes, dim))
    with torch.no_grad():
        for i in range(0, n, CHUNK):
            phi = features(torch.from_numpy(np.ascontiguousarray(x[i : i + CHUNK], dtype=np.float32)), om)
            onehot = nn.functional.one_hot(torch.from_numpy(labels[i : i + CHUNK].astype(np.int64)), n_classes)
            acc += (onehot.to(phi.dtype).T @ phi).double().numpy()
    counts = np.bincount(labels, minlength=n_classes).astype(np.float64)
    a = math.sqrt(count_share)
    return np.concatenate([math.sqrt(1.0 - count_share) * acc.ravel(), a * counts]) / n


class CondGenerator(nn.Module):
    """Label-conditional generator G(z, onehot(y)) → (m, c·h·w) in [0, 1] (sigmoid).

    ``conv`` (DP-MERF's ConvCondGen, code_balanced/models_gen.py, with its MNIST settings: code 5, width 200,
    channels 16, 8): two fully connected layers with batch norm, to ``channels`` maps of (h/4)×(w/4), then twice
    (bilinear ×2 upsampling, 5×5 convolution), the first to channels/2 maps with ReLU, the last to c maps.
    ``mlp`` (its FCCondGen): three fully connected layers (width, 2·width, c·h·w), batch norm and ReLU between."""

    def __init__(self, kind: str, shape: tuple[int, int, int], code_dim: int, n_classes: int, width: int,
                 channels: int) -> None:  # fmt: skip
        super().__init__()
        h, w, c = shape
        self.kind, self.shape, self.code_dim, self.n_classes = kind, (h, w, c), code_dim, n_classes
        inp = code_dim + n_classes
        if kind == "conv":
            half = max(1, channels // 2)
            self.fc1, self.bn1 = nn.Linear(inp, width), nn.BatchNorm1d(width)
            cells = channels * (h // 4) * (w // 4)
            self.fc2, self.bn2 = nn.Linear(width, cells), nn.BatchNorm1d(cells)
            self.conv1 = nn.Conv2d(channels, half, 5, padding=2)
            self.conv2 = nn.Conv2d(half, c, 5, padding=2)
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.channels = channels
        else:
            self.fc1, self.bn1 = nn.Linear(inp, width), nn.BatchNorm1d(width)
            self.fc2, self.bn2 = nn.Linear(width, 2 * width), nn.BatchNorm1d(2 * width)
            self.fc3 = nn.Linear(2 * width, h * w * c)

    def forward(self, code: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        relu = nn.functional.relu
        v = self.bn2(self.fc2(relu(self.bn1(self.fc1(torch.cat([code, onehot], dim=1))))))
        if self.kind == "conv":
            h, w, _ = self.shape
            v = v.reshape(len(v), self.channels, h // 4, w // 4)  # no ReLU here, as in ConvCondGen
            v = relu(self.conv1(self.up(v)))
            v = self.conv2(self.up(v))  # (m, c, h, w)
            v = v.permute(0, 2, 3, 1)  # pixel order of (h, w, c) images
        else:
            v = self.fc3(relu(v))
        return torch.sigmoid(v.reshape(len(v), -1))


def build_generator(meta: dict, seed: int) -> CondGenerator:
    """A generator as ``meta`` describes it (shape, generator, code_dim, n_classes, width, channels), its weights
    drawn from ``seed`` (no draw from torch's global RNG)."""
    h, w, c = meta["shape"]
    args = (meta["generator"], (h, w, c), meta["code_dim"], meta["n_classes"], meta["width"], meta["channels"])
    return training.build(lambda: CondGenerator(*args), training.generator(seed))


def train_generator(gen: CondGenerator, omega: np.ndarray, target: np.ndarray, label_probs: np.ndarray, *,
                    steps_per_epoch: int, epochs: int, batch_size: int, lr: float, lr_decay: float,
                    seed: int) -> dict:  # fmt: skip
    """Fit ``gen`` so the mean embedding of its images matches ``target`` (K, D), the noisy class-wise mean
    embedding (post-processing of the release: the private images are not touched).

    Each step draws ``batch_size`` // K codes per class (a balanced batch: lower variance than sampling labels),
    and the loss is ‖target − Σ_k p̂_k · e_k ⊗ mean_{i: y_i = k} φ(G(z_i, k))‖² with p̂ the DP label distribution,
    whose expectation is the population loss of DP-MERF. Adam, learning rate × ``lr_decay`` after each epoch.
    Returns the history: mean loss and seconds per epoch."""
    k = len(label_probs)
    per_class = max(1, batch_size // k)
    gen_draw = training.generator(seed)
    om = torch.from_numpy(np.ascontiguousarray(omega, dtype=np.float32))
    tgt = torch.from_numpy(np.ascontiguousarray(target, dtype=np.float32))
    probs = torch.from_numpy(np.asarray(label_probs, dtype=np.float32))[:, None]
    labels = torch.arange(k).repeat_interleave(per_class)
    onehot = nn.functional.one_hot(labels, k).float()
    opt = torch.optim.Adam(gen.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=lr_decay)
    history: dict[str, list[float]] = {"loss": [], "seconds": []}
    gen.train()
    for _ in range(epochs):
        t0, total = time.perf_counter(), 0.0
        for _ in range(steps_per_epoch):
            code = torch.randn(len(labels), gen.code_dim, generator=gen_draw)
            phi = features(gen(code, onehot), om)
            class_means = (onehot.T @ phi) / per_class
            loss = ((tgt - probs * class_means) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        sched.step()
        history["loss"].append(total / steps_per_epoch)
        history["seconds"].append(round(time.perf_counter() - t0, 3))
    gen.eval()
    return history


def sample(gen: CondGenerator, labels: np.ndarray, seed: int, chunk: int = 2048) -> np.ndarray:
    """Images (m, c·h·w) float32 in [0, 1] for the given labels, codes drawn from ``seed``; eval mode (batch norm
    with its running statistics), so each image depends on its own code and label only."""
    draw = training.generator(seed)
    gen.eval()
    out = np.empty((len(labels), int(np.prod(gen.shape))), np.float32)
    with torch.no_grad():
        for i in range(0, len(labels), chunk):
            y = torch.from_numpy(labels[i : i + chunk].astype(np.int64))
            code = torch.randn(len(y), gen.code_dim, generator=draw)
            out[i : i + chunk] = gen(code, nn.functional.one_hot(y, gen.n_classes).float()).numpy()
    return out
