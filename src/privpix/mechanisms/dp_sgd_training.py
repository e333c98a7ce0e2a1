"""The PyTorch half of ``dp-sgd`` and of ``dp-teacher``'s teacher: the classifier, its DP-SGD training with Opacus's
per-sample gradients, clipping, Poisson sampling and Gaussian noise, and prediction. Imported only when a fit or a
prediction needs it; no draw here uses torch's global RNG (see :mod:`privpix.training`)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from privpix import training
from privpix.errors import ParameterError

# Type checkers read torch's own types; at run time it is the one privpix.training loaded (require_torch).
if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = training.torch
    nn = torch.nn

# Images scored at once when predicting: (chunk, 16, h/2, w/2) float32 activations stay near 25 MB for 28x28.
CHUNK = 2048


def _opacus():
    try:
        import opacus  # noqa: F401
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
        from opacus.utils.uniform_sampler import UniformWithReplacementSampler
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ParameterError("dp-sgd needs Opacus: pip install 'privpix[neural]'") from None
    return GradSampleModule, DPOptimizer, UniformWithReplacementSampler


def conv_sides(h: int, w: int) -> tuple[int, int]:
    """(h', w') of the feature maps that reach the first dense layer for h x w inputs (0 when too small)."""

    def side(s: int) -> int:
        s = (s + 2 * 3 - 8) // 2 + 1 - 1  # conv 8x8 stride 2 padding 3, then max-pool 2 stride 1
        return max(0, (s - 4) // 2 + 1 - 1)  # conv 4x4 stride 2, then max-pool 2 stride 1

    return side(h), side(w)


class TanhCNN(nn.Module):
    """Tramèr & Boneh (2021, "Differentially private learning needs better features (or much more data)", ICLR),
    Table 9's end-to-end MNIST CNN, with Papernot et al.'s (2021, "Tempered sigmoid activations for deep learning
    with differential privacy", AAAI) tanh activations: conv 16 8x8 stride 2 (padding 3), max-pool 2x2 stride 1,
    conv 32 4x4 stride 2, max-pool 2x2 stride 1, dense 32, dense K. Input (m, c, h, w) in [0, 1], mapped to [−1, 1]
    by the fixed affine map 2x − 1 (no statistic of the private images); output (m, K) logits. No normalisation layer
    (batch norm mixes the examples of a batch, which per-example clipping forbids), so Opacus computes every
    per-example gradient exactly."""

    def __init__(self, shape: tuple[int, int, int], n_classes: int) -> None:
        super().__init__()
        h, w, c = shape
        hh, ww = conv_sides(h, w)
        self.conv1 = nn.Conv2d(c, 16, 8, stride=2, padding=3)
        self.conv2 = nn.Conv2d(16, 32, 4, stride=2)
        self.fc1 = nn.Linear(32 * hh * ww, 32)
        self.fc2 = nn.Linear(32, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pool = nn.functional.max_pool2d
        # Centred inputs keep the first tanh layer out of saturation.
        x = pool(torch.tanh(self.conv1(2.0 * x - 1.0)), 2, 1)
        x = pool(torch.tanh(self.conv2(x)), 2, 1)
        return self.fc2(torch.tanh(self.fc1(x.flatten(1))))


def scattering(shape: tuple[int, int, int]):
    """The 2-D scattering transform (J = 2, L = 8: 81 channels per image channel at a quarter of the size):
    Tramèr & Boneh's (2021) handcrafted features, kymatio's fixed wavelets, no parameter and no data. Applied by
    :class:`privpix.mechanisms.scattering.Scattering2D`: kymatio's arithmetic in batched passes, about 2× faster."""
    from privpix.mechanisms.scattering import Scattering2D

    h, w, _ = shape
    return Scattering2D(SCATTER_J, (h, w), SCATTER_L)


SCATTER_J, SCATTER_L = 2, 8
SCATTER_GROUPS = 27  # GroupNorm groups over the 81 channels per image channel (Tramèr & Boneh)


class ScatterNetLinear(nn.Module):
    """Tramèr & Boneh's (2021) ScatterNet + linear: the fixed scattering transform (:func:`scattering`), a per-example
    GroupNorm of its 81·c channels in 27 groups (no affine parameters, no statistic across examples), and one dense
    layer to K logits. Only the dense layer is trained; DP-SGD trains it on the features, computed once (the
    transform reads no data but the image it is applied to, so the features of the private set are exactly what
    the network sees). The transform is kept out of ``state_dict``: the model file holds the dense layer alone."""

    # Set with object.__setattr__ (not a submodule); declared so that type checkers know it is a function.
    _scatter: Callable[[torch.Tensor], torch.Tensor]

    def __init__(self, shape: tuple[int, int, int], n_classes: int) -> None:
        super().__init__()
        h, w, c = shape
        if h % 4 or w % 4:
            raise ParameterError(f"dp-sgd features=scatternet needs h and w divisible by 4, got {h}x{w}")
        self.n_classes = n_classes
        object.__setattr__(self, "_scatter", scattering(shape))  # not a submodule: no state, no gradient
        self.head = nn.Sequential(
            nn.GroupNorm(SCATTER_GROUPS, 81 * c, affine=False),
            nn.Flatten(),
            nn.Linear(81 * c * (h // 4) * (w // 4), n_classes),
        )

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """(m, c, h, w) in [0, 1] → (m, 81·c, h/4, w/4) scattering coefficients, without gradients."""
        s = self._scatter(x)  # (m, c, 81, h/4, w/4), without gradients
        return s.reshape(len(s), s.shape[1] * s.shape[2], s.shape[-2], s.shape[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


FEATURES = ("pixels", "scatternet")


def build_network(shape: tuple[int, int, int], n_classes: int, seed: int, features: str = "pixels") -> nn.Module:
    """The classifier for (h, w, c) images and ``n_classes`` classes, weights drawn from ``seed`` (torch's default
    initialisation, no draw from the global RNG): the Tanh CNN on the pixels, or ScatterNet + linear."""
    h, w, c = shape  # a model file's meta gives it as a list
    if features == "scatternet":
        return training.build(lambda: ScatterNetLinear((h, w, c), n_classes), training.generator(seed))
    return training.build(lambda: TanhCNN((h, w, c), n_classes), training.generator(seed))


def trained_part(net: nn.Module) -> nn.Module:
    """The part of the classifier DP-SGD trains: the whole Tanh CNN, or ScatterNet's dense head (on features)."""
    return net.head if isinstance(net, ScatterNetLinear) else net


def training_inputs(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What :func:`trained_part` is trained on: the images, or their scattering features (computed once)."""
    return net.features(x) if isinstance(net, ScatterNetLinear) else x


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """(n, h, w, c) float in [0, 1] → (n, c, h, w) float32 contiguous."""
    return torch.from_numpy(np.ascontiguousarray(np.asarray(images, dtype=np.float32).transpose(0, 3, 1, 2)))


class FittedClassifier(NamedTuple):
    net: nn.Module  # in eval mode
    history: dict[str, list[float]]  # per-epoch loss and seconds: noise-free statistics, never written to a file
    accountant: Any  # the Opacus RDP accountant that recorded every noisy step


def fit_classifier(
    images: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    features: str,
    *,
    steps: int,
    epochs: int,
    seeds: tuple[int, int, int],
    on_epoch: Callable[[int, nn.Module], None] | None = None,
    **dp_sgd: Any,
) -> FittedClassifier:
    """Build the classifier of ``features`` for (n, h, w, c) float ``images`` in [0, 1], compute its training inputs
    once, and train it with :func:`train_dp_sgd` (``dp_sgd``: noise_multiplier, max_grad_norm, batch_size, lr,
    lr_decay, momentum) for ``epochs`` x ``steps / epochs`` Poisson-sampled noisy steps. ``seeds``: (weights,
    sampling, noise). Refuses to return a network that took any other number of noisy steps than ``steps``: the
    guarantee is computed from that count. ``on_epoch(epoch, whole network)`` runs after each epoch."""
    init_seed, sample_seed, noise_seed = seeds
    from opacus.accountants import RDPAccountant

    net = build_network(images.shape[1:], n_classes, init_seed, features)
    inputs = training_inputs(net, to_tensor(images))
    accountant = RDPAccountant()
    history = train_dp_sgd(
        trained_part(net),
        inputs,
        torch.from_numpy(np.asarray(labels, dtype=np.int64)),
        steps_per_epoch=steps // epochs,
        epochs=epochs,
        sample_seed=sample_seed,
        noise_seed=noise_seed,
        accountant=accountant,
        on_epoch=None if on_epoch is None else (lambda epoch, _part: on_epoch(epoch, net)),
        **dp_sgd,
    )
    taken = sum(k for _, _, k in accountant.history)
    if taken != steps:  # pragma: no cover - guards the step hook
        raise AssertionError(f"DP-SGD: {taken} noisy steps of {steps} planned")
    net.eval()
    return FittedClassifier(net, history, accountant)


def train_dp_sgd(
    net: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    batch_size: float,
    steps_per_epoch: int,
    epochs: int,
    lr: float,
    momentum: float,
    sample_seed: int,
    lr_decay: float = 1.0,
    noise_seed: int,
    accountant: Any,
    on_epoch: Callable[[int, nn.Module], None] | None = None,
    on_step: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """DP-SGD (Abadi et al. 2016) on ``net`` in place: ``epochs`` x ``steps_per_epoch`` steps, each on a batch drawn
    by Poisson sampling (every example independently with probability q = batch_size / n; Opacus's
    ``UniformWithReplacementSampler``), per-example gradients (Opacus's ``GradSampleModule``) clipped to L2 norm
    ``max_grad_norm``, summed, plus N(0, (noise_multiplier · max_grad_norm)² I) noise (Opacus's ``DPOptimizer``
    with its floating-point-robust ``secure_mode`` sampler, on a seeded generator), divided by the expected batch
    size; then SGD with ``momentum``, its learning rate multiplied by ``lr_decay`` after each epoch (post-processing
    of the noisy gradients, like the momentum). An empty batch still takes its noise-only step, as the analysis
    assumes.

    ``accountant`` (an Opacus accountant) records every noisy step. ``on_epoch(epoch, net)`` runs after each epoch
    (1-based) on the network in eval mode. ``on_step()`` runs after each noisy step, while every parameter's
    ``.grad`` still holds the noisy mean gradient the step used (what a white-box observer of the iterates
    recovers). Returns the history: mean clipped-batch loss and seconds per epoch."""
    grad_sample_module, dp_optimizer, sampler_class = _opacus()
    n = len(x)
    q = batch_size / n
    model = grad_sample_module(net, loss_reduction="sum")
    opt = dp_optimizer(
        torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum),
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        expected_batch_size=batch_size,
        loss_reduction="mean",
        generator=training.generator(noise_seed),
        secure_mode=True,
    )
    opt.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=q))
    sampler = sampler_class(
        num_samples=n, sample_rate=q, generator=training.generator(sample_seed), steps=steps_per_epoch
    )
    history: dict[str, list[float]] = {"loss": [], "seconds": []}
    try:
        for epoch in range(epochs):
            t0, total, seen = time.perf_counter(), 0.0, 0
            model.train()
            with warnings.catch_warnings():
                # Opacus's backward hook on the first layer fires while the input images need no gradient: torch
                # warns, and nothing is wrong (the per-example gradients are those of the weights).
                warnings.filterwarnings("ignore", "Full backward hook is firing", UserWarning)
                for batch in sampler:
                    idx = torch.as_tensor(batch, dtype=torch.long)
                    # Summed, not averaged: the per-example gradients are then the examples' own, and an empty
                    # batch gives a zero sum (the optimizer divides by the expected batch size, a public constant).
                    loss = nn.functional.cross_entropy(model(x[idx]), y[idx], reduction="sum")
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    if on_step is not None:
                        on_step()
                    total, seen = total + loss.item(), seen + len(idx)
            model.eval()
            for group in opt.param_groups:
                group["lr"] *= lr_decay
            history["loss"].append(total / max(1, seen))
            history["seconds"].append(round(time.perf_counter() - t0, 3))
            if on_epoch is not None:
                on_epoch(epoch + 1, net)
    finally:
        opt.zero_grad(set_to_none=True)
        model.remove_hooks()
        for p in net.parameters():
            for attr in ("grad_sample", "summed_grad"):
                if hasattr(p, attr):
                    delattr(p, attr)
    net.eval()
    return history


# Canaries per training run of the white-box audit (its inputs are canaries × 2·canaries floats: 128 MB here).
CANARY_CHUNK = 4096


class DiracScores(NamedTuple):
    """Per-coordinate white-box scores of :func:`dirac_canary_scores`: log-likelihood ratios without (``s0``) and
    with (``s1``) the canary, and the plain gradient sums of the same coordinates."""

    s0: np.ndarray
    s1: np.ndarray
    sum0: np.ndarray
    sum1: np.ndarray


class DiracCanaries(nn.Module):
    """The white-box audit's crafted model: logits (w · x, 0) with w ∈ R^p starting at 0. Trained with learning
    rate 0, a row A·e_k labelled 1 has the per-example gradient (A/2)·e_k at every step (labelled 0: −(A/2)·e_k),
    which clipping to C turns into exactly ±C·e_k when A/2 ≥ C: a Dirac gradient canary on coordinate k (Nasr et al.
    2023, "Tight auditing of differentially private machine learning"), and no other example touches that
    coordinate."""

    def __init__(self, p: int) -> None:
        super().__init__()
        self.w = nn.Linear(p, 1, bias=False)
        nn.init.zeros_(self.w.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.w(x)
        return torch.cat([a, torch.zeros_like(a)], dim=1)


def dirac_canary_scores(
    trials: int,
    *,
    noise_multiplier: float,
    max_grad_norm: float,
    sample_rate: float,
    steps_per_epoch: int,
    epochs: int,
    sample_seed: int,
    noise_seed: int,
    relation: str = "add-remove",
) -> DiracScores:
    """``trials`` scores per side (:class:`DiracScores`) of one run of :func:`train_dp_sgd` (the Poisson sampler,
    clipping, noise and step count of a fit) on :class:`DiracCanaries` with 2·``trials`` coordinates and a training
    set of Dirac canaries, one per coordinate it touches.

    ``relation="add-remove"`` (DP-SGD's own): coordinates 0..trials−1 hold a canary (s1, the training set with
    it); trials..2·trials−1 hold none (s0, the training set without it). A coordinate's noisy gradients g_t, in
    units of C / expected batch, are 1 in the steps that sampled its canary plus N(0, z²) each. Its score is their
    log-likelihood ratio, canary in against out, Σ_t log(1 − q + q·exp((g_t − 1/2) / z²)).

    ``relation="replace-one"``: every coordinate holds a canary, of label 1 on coordinates 0..trials−1 (s1: its
    clipped gradient is +C) and of label 0 on the others (s0: −C), the record replaced by another whose gradient
    points the other way, the pair dp-accounting's REPLACE_ONE sampled Gaussian describes. The score is
    Σ_t [log(1 − q + q·exp((g_t − 1/2) / z²)) − log(1 − q + q·exp((−g_t − 1/2) / z²))].

    Either score is the log-likelihood ratio of the pair, the most powerful test of it (Neyman–Pearson). ``sum0``
    and ``sum1`` are the plain sums Σ_t g_t, for checks. Each coordinate's noise and each canary's sampling are
    independent of the others', so the 2·``trials`` scores are independent trials of the pair."""
    if trials < 1:
        raise ParameterError(f"trials must be >= 1, got {trials}")
    if relation not in ("add-remove", "replace-one"):
        raise ParameterError(f"relation must be 'add-remove' or 'replace-one', got {relation!r}")
    replace = relation == "replace-one"
    # Replace-one trains on 2·trials canaries (trials × 2·trials inputs for add/remove): half the chunk, same memory.
    chunk = CANARY_CHUNK // 2 if replace else CANARY_CHUNK
    if trials > chunk:
        # Runs of at most CANARY_CHUNK canaries (the inputs are trials × 2·trials), each with its own seeds: the
        # runs are independent, and only (q, z, T) make a trial, so the scores are as from one run.
        runs = []
        for i, start in enumerate(range(0, trials, chunk)):
            seeds = np.random.SeedSequence([sample_seed, noise_seed, i]).generate_state(2)
            runs.append(dirac_canary_scores(
                min(chunk, trials - start), noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                sample_rate=sample_rate, steps_per_epoch=steps_per_epoch, epochs=epochs,
                sample_seed=int(seeds[0]), noise_seed=int(seeds[1]), relation=relation,
            ))  # fmt: skip
        return DiracScores(*(np.concatenate(parts) for parts in zip(*runs, strict=True)))
    from opacus.accountants import RDPAccountant

    p = 2 * trials
    # Gradient norm A/2 ≥ 2C and ≥ 1, so Opacus's clip factor C / (‖g‖ + 1e-6) leaves the canary C to 1e-6.
    amplitude = 2.0 * max(2.0 * max_grad_norm, 1.0)
    rows = p if replace else trials
    x = torch.zeros(rows, p)
    x[torch.arange(rows), torch.arange(rows)] = amplitude
    y = torch.ones(rows, dtype=torch.long)
    if replace:
        y[trials:] = 0  # label 0: the gradient of the logit w·x changes sign, so it clips to −C·e_k
    net = DiracCanaries(p)
    expected = sample_rate * rows
    # Each step's noisy gradient in units of C / expected batch: 1 where the canary was sampled, plus N(0, z²).
    unit = expected / max_grad_norm
    log_keep, log_q, z2 = (
        np.log1p(-sample_rate) if sample_rate < 1 else -np.inf,
        np.log(sample_rate),
        noise_multiplier**2,
    )
    llr, sums = np.zeros(p), np.zeros(p)

    def observe() -> None:
        grad = net.w.weight.grad
        assert grad is not None  # on_step runs while .grad holds the step's noisy gradient
        g = grad[0].to(torch.float64).numpy() * unit
        sums[:] += g
        # The step's log-likelihood ratio, canary in against out: log(1 − q + q·exp((g − 1/2) / z²)); for
        # replace-one, less that of the canary pointing the other way.
        llr[:] += np.logaddexp(log_keep, log_q + (g - 0.5) / z2)
        if replace:
            llr[:] -= np.logaddexp(log_keep, log_q + (-g - 0.5) / z2)

    accountant = RDPAccountant()
    train_dp_sgd(
        net,
        x,
        y,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        batch_size=expected,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        lr=0.0,
        momentum=0.0,
        sample_seed=sample_seed,
        noise_seed=noise_seed,
        accountant=accountant,
        on_step=observe,
    )
    taken = sum(k for _, _, k in accountant.history)
    if taken != steps_per_epoch * epochs:  # pragma: no cover - guards the step hook
        raise AssertionError(f"white-box audit: {taken} noisy steps of {steps_per_epoch * epochs}")
    return DiracScores(llr[trials:].copy(), llr[:trials].copy(), sums[trials:].copy(), sums[:trials].copy())


def logits(net: TanhCNN, images: np.ndarray) -> np.ndarray:
    """(n, K) float32 logits of (n, h, w, c) images in [0, 1], in chunks, eval mode."""
    net.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(images), CHUNK):
            out.append(net(to_tensor(images[i : i + CHUNK])).numpy())
    k = net.n_classes if isinstance(net, ScatterNetLinear) else net.fc2.out_features
    return np.concatenate(out) if out else np.empty((0, k), np.float32)


def predict(net: TanhCNN, images: np.ndarray) -> np.ndarray:
    """(n,) int64 predicted labels of (n, h, w, c) images in [0, 1]."""
    return logits(net, images).argmax(axis=1).astype(np.int64)
