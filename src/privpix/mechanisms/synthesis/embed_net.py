"""The PyTorch half shared by the mean-embedding synthesizers (``dp-merf``, ``dp-hp``): the private mean embedding
(floating point or exact fixed point), the label-conditional generator, its training on the noisy embedding and
sampling. The feature map is a differentiable torch callable φ: (m, d) float32 → (m, D) with ‖φ(x)‖₂ ≤ 1 for every
row; each mechanism brings its own. Imported only when a fit or a release needs it; no draw here uses torch's
global RNG (see :mod:`privpix.training`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from privpix import training
from privpix.privacy.gaussian_release import FixedPointSum

# Type checkers read torch's own types; at run time it is the one privpix.training loaded (require_torch).
if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = training.torch
    nn = torch.nn

Featurize = Callable[[torch.Tensor], torch.Tensor]

# Feature values held at once while embedding the private images: 1,024 rows of D = 10,000 (about 40 MB of
# float32), fewer rows for wider maps.
CHUNK_VALUES = 1024 * 10_000


def chunk_rows(width: int) -> int:
    """Rows of private images featurized at once for a feature map of ``width`` values (at most 1,024)."""
    return max(1, min(1024, CHUNK_VALUES // max(1, width)))


def _rows(x: np.ndarray, labels: np.ndarray, width: int):
    rows = chunk_rows(width)
    for i in range(0, len(x), rows):
        j = i + rows
        yield torch.from_numpy(np.ascontiguousarray(x[i:j], dtype=np.float32)), labels[i:j].astype(np.int64)


def mean_embedding(x: np.ndarray, labels: np.ndarray, featurize: Featurize, width: int, n_classes: int,
                   count_share: float, parts: list[np.ndarray] | None = None) -> np.ndarray:  # fmt: skip
    """The vector whose noisy copy a mean-embedding synthesizer releases: the mean over the n rows of x (n, d) of
    u_i = [sqrt(1 − a²)·φ(x_i) ⊗ onehot(y_i), a·onehot(y_i)] with a² = ``count_share``, as float64 (K·D + K,).

    ‖u_i‖₂ = sqrt((1 − a²)·‖φ(x_i)‖² + a²) ≤ 1 for every image and label when ‖φ‖ ≤ 1, so replacing one pair moves
    the mean by at most 2/n in L2. The first K·D values are the class-wise feature sums φ ⊗ y (row k: class k),
    the last K the class proportions (scaled by a): the label distribution is read from the same release.
    ``parts``: the :func:`chunk_sums` when they were computed elsewhere (by workers)."""
    n = len(x)
    acc = np.zeros((n_classes, width))
    for part in parts if parts is not None else chunk_sums(x, labels, featurize, width, n_classes, count_share):
        acc += part  # in chunk order: the float result does not depend on where the chunks were computed
    counts = np.bincount(labels, minlength=n_classes).astype(np.float64)
    a = math.sqrt(count_share)
    return np.concatenate([math.sqrt(1.0 - count_share) * acc.ravel(), a * counts]) / n


def fixed_point_sum(x: np.ndarray, labels: np.ndarray, featurize: Featurize, width: int, n_classes: int,
                    count_share: float, bits: int = 20,
                    parts: list[np.ndarray] | None = None) -> FixedPointSum:  # fmt: skip
    """The secure mode's exact sum: each row [sqrt(1 − a²)·φ(x_i), a] (width D + 1, L2 norm ≤ 1) rounded to the
    lattice Z^(D+1) / 2^bits and added, as integers, into the accumulator of its label (K groups). The integer
    total does not depend on the order or the chunking of the rows."""
    acc = FixedPointSum(n_classes, width + 1, bits)
    if parts is None:
        parts = chunk_sums(x, labels, featurize, width, n_classes, count_share, bits)
    for part in parts:
        acc.total += part
    acc.rows = len(x)
    return acc


def chunk_sums(x: np.ndarray, labels: np.ndarray, featurize: Featurize, width: int, n_classes: int,
               count_share: float, bits: int | None = None) -> list[np.ndarray]:  # fmt: skip
    """The partial sums of the private embedding, one per chunk of :func:`chunk_rows` rows, in row order: float64
    (K, D) class-wise feature sums φ ⊗ y, or with ``bits`` the exact int64 (K, D + 1) fixed-point totals of
    :func:`fixed_point_sum`. Chunk boundaries depend on D alone, so the chunks of a split of ``x`` at multiples of
    :func:`chunk_rows` are the chunks of ``x``: workers may compute them and the caller adds them in order."""
    out: list[np.ndarray] = []
    # One torch thread, as in a worker process: a float matmul's rounding depends on how many threads split it, and
    # the same seed must give the same embedding whether the chunks are computed here or on workers.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _sums(x, labels, featurize, width, n_classes, count_share, bits, out)
    finally:
        torch.set_num_threads(threads)
    return out


def _sums(x, labels, featurize, width, n_classes, count_share, bits, out) -> None:
    a = math.sqrt(count_share)
    with torch.no_grad():
        for xs, ys in _rows(x, labels, width):
            if bits is None:
                phi = featurize(xs)
                onehot = nn.functional.one_hot(torch.from_numpy(ys), n_classes)
                out.append((onehot.to(phi.dtype).T @ phi).double().numpy())
            else:
                part = FixedPointSum(n_classes, width + 1, bits)
                phi = featurize(xs).double().numpy() * math.sqrt(1.0 - count_share)
                part.add(np.concatenate([phi, np.full((len(phi), 1), a)], axis=1), ys)
                out.append(part.total)


def embedding_of_sum(total: np.ndarray, n: int, scale: int) -> np.ndarray:
    """The fixed-point (noisy) total (K, D + 1) in the float layout of :func:`mean_embedding` (the K·D class-wise
    feature sums, then the K count values), divided by n·scale: the mean embedding, float64 (K·D + K,)."""
    t = np.asarray(total, dtype=np.float64)
    return np.concatenate([t[:, :-1].ravel(), t[:, -1]]) / (n * scale)


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


class GaussianGenerator(nn.Module):
    """G(z, y) = clip(centre + scale·(m_y + L_y·z)·V, 0, 1): a Gaussian per class in the span of k components V
    (k, d) around ``centre`` (d,), coefficients in units of ``scale``. Nothing is trained: ``dp-eigenfaces`` sets
    the class means m (K, k) and factors L (K, k, k) from its noisy moments. Same call as :class:`CondGenerator`,
    so a model file and :func:`sample` serve both."""

    # The buffers registered below: nn.Module's __getattr__ is typed Tensor | Module, these are tensors.
    centre: torch.Tensor
    basis: torch.Tensor
    scale: torch.Tensor
    means: torch.Tensor
    factors: torch.Tensor

    def __init__(self, shape: tuple[int, int, int], components: int, n_classes: int) -> None:
        super().__init__()
        h, w, c = shape
        self.kind, self.shape, self.code_dim, self.n_classes = "gaussian", (h, w, c), components, n_classes
        self.register_buffer("centre", torch.zeros(h * w * c))
        self.register_buffer("basis", torch.zeros(components, h * w * c))
        self.register_buffer("scale", torch.ones(()))
        self.register_buffer("means", torch.zeros(n_classes, components))
        self.register_buffer("factors", torch.zeros(n_classes, components, components))

    def forward(self, code: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        y = onehot.argmax(dim=1)
        coeff = self.means[y] + torch.einsum("nij,nj->ni", self.factors[y], code)
        return (self.centre + self.scale * (coeff @ self.basis)).clamp(0.0, 1.0)


class TransportGenerator(nn.Module):
    """G(z, y): one of the stored images of class y, chosen by Φ(z₀) (Φ the standard normal CDF, so a uniform pick
    among the class's images) and mirrored left to right when z₁ > 0 and ``flip`` is set. Nothing is trained:
    ``dp-transport`` stores the public images it moved to the private set's noisy class moments. Same call as
    :class:`CondGenerator`, so a model file and :func:`sample` serve both."""

    images: torch.Tensor
    offsets: torch.Tensor
    flip: torch.Tensor

    def __init__(self, shape: tuple[int, int, int], n_images: int, n_classes: int) -> None:
        super().__init__()
        h, w, c = shape
        self.kind, self.shape, self.code_dim, self.n_classes = "transport", (h, w, c), 2, n_classes
        # uint8: the images are stored as they will be published (a 32×32 face is 3 KB, not 12 KB of floats).
        self.register_buffer("images", torch.zeros(n_images, h * w * c, dtype=torch.uint8))
        self.register_buffer("offsets", torch.zeros(n_classes + 1, dtype=torch.int64))  # class k: [o_k, o_k+1)
        self.register_buffer("flip", torch.ones((), dtype=torch.bool))

    def forward(self, code: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        y = onehot.argmax(dim=1)
        start, count = self.offsets[y], self.offsets[y + 1] - self.offsets[y]
        if bool((count == 0).any()):
            raise ValueError("asked for a class with no stored images")
        u = 0.5 * (1.0 + torch.erf(code[:, 0].double() / math.sqrt(2.0)))
        pick = start + torch.minimum((u * count).long(), count - 1)
        h, w, c = self.shape
        out = self.images[pick].float().div(255.0).reshape(-1, h, w, c)
        if bool(self.flip):
            mirror = code[:, 1] > 0
            out[mirror] = out[mirror].flip(2)
        return out.reshape(len(y), -1)


def build_generator(meta: dict, seed: int) -> CondGenerator | GaussianGenerator | TransportGenerator:
    """A generator as ``meta`` describes it (shape, generator, code_dim, n_classes, width, channels; or for
    ``generator="gaussian"`` shape, components, n_classes), its weights drawn from ``seed`` (no draw from torch's
    global RNG)."""
    h, w, c = meta["shape"]
    if meta["generator"] == "gaussian":
        return GaussianGenerator((h, w, c), int(meta["components"]), int(meta["n_classes"]))
    if meta["generator"] == "transport":
        return TransportGenerator((h, w, c), int(meta["public_n"]), int(meta["n_classes"]))
    args = (meta["generator"], (h, w, c), meta["code_dim"], meta["n_classes"], meta["width"], meta["channels"])
    return training.build(lambda: CondGenerator(*args), training.generator(seed))


def train_generator(gen: CondGenerator, featurize: Featurize, target: np.ndarray, label_probs: np.ndarray, *,
                    steps_per_epoch: int, epochs: int, batch_size: int, lr: float, lr_decay: float, seed: int,
                    reduce: str = "matmul", on_epoch: Callable[[int], None] | None = None) -> dict:  # fmt: skip
    """Fit ``gen`` so the mean embedding of its images matches ``target`` (K, D), the noisy class-wise mean
    embedding (post-processing of the release: the private images are not touched).

    Each step draws ``batch_size`` // K codes per class (a balanced batch: lower variance than sampling labels),
    and the loss is ‖target − Σ_k p̂_k · e_k ⊗ mean_{i: y_i = k} φ(G(z_i, k))‖² with p̂ the DP label distribution,
    whose expectation is the population loss of DP-MERF. Adam, learning rate × ``lr_decay`` after each epoch.
    ``reduce``: how the class means are taken, ``matmul`` (one-hot product: dp-merf's, kept so its seeded fits
    reproduce) or ``sum`` (a reshape of the balanced batch: the same means, cheaper for wide feature maps).
    ``on_epoch``: called with the number of epochs done after each (a measurement's checkpoint; it must leave
    ``gen`` as it found it). Returns the history: mean loss and seconds per epoch."""
    k = len(label_probs)
    per_class = max(1, batch_size // k)
    gen_draw = training.generator(seed)
    tgt = torch.from_numpy(np.ascontiguousarray(target, dtype=np.float32))
    probs = torch.from_numpy(np.asarray(label_probs, dtype=np.float32))[:, None]
    labels = torch.arange(k).repeat_interleave(per_class)
    onehot = nn.functional.one_hot(labels, k).float()
    opt = torch.optim.Adam(gen.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=lr_decay)
    history: dict[str, list[float]] = {"loss": [], "seconds": []}
    gen.train()
    for epoch in range(epochs):
        t0, total = time.perf_counter(), 0.0
        for _ in range(steps_per_epoch):
            code = torch.randn(len(labels), gen.code_dim, generator=gen_draw)
            phi = featurize(gen(code, onehot))
            if reduce == "matmul":
                class_means = (onehot.T @ phi) / per_class
            else:
                class_means = phi.reshape(k, per_class, -1).sum(dim=1) / per_class
            loss = ((tgt - probs * class_means) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        sched.step()
        history["loss"].append(total / steps_per_epoch)
        history["seconds"].append(round(time.perf_counter() - t0, 3))
        if on_epoch is not None:
            on_epoch(epoch + 1)
    gen.eval()
    return history


def sample(
    gen: CondGenerator | GaussianGenerator | TransportGenerator, labels: np.ndarray, seed: int, chunk: int = 2048
) -> np.ndarray:
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
