"""Seeded PyTorch training without the process-global random number generator.

Every network privpix trains draws its randomness from local :class:`torch.Generator` objects, never from
torch's global RNG: seeding that would change the caller's random state (a user's own ``torch.rand`` after a
privpix call would depend on what privpix trained), and two threads training at once would interleave their
draws, so the same seed would no longer give the same network. What this module holds:

* :func:`generator`: a CPU generator seeded with ``seed``. Its stream is the one the global RNG gives once
  seeded with ``seed``, so code that used to seed the global RNG reproduces its old numbers when the same
  draws come from ``generator(seed)`` in the same order.
* :func:`build`: construct a network without any draw (on the ``meta`` device), then materialise it on the CPU
  and draw its parameters from a generator with :func:`init_parameters`, in construction order; its
  ``nn.Dropout`` modules become :class:`GenDropout` on the same generator (:func:`route_dropout`). The
  weights are bit for bit those of the plain construction right after seeding the global RNG with the same
  seed, and the dropout masks those the global RNG would have given next.
* :func:`init_parameters`: torch's default ``reset_parameters`` of ``nn.Linear`` and the convolutions, with a
  generator (custom initialisations pass the same generator to ``torch.nn.init``, e.g.
  ``nn.init.normal_(w, 0, 0.02, generator=gen)``).
* :class:`GenDropout`: ``nn.Dropout`` with its mask drawn from a given generator (the same CPU output as
  ``nn.Dropout``, and the same empty state dict, so saved models load either way).
* :func:`fit`: the one minibatch loop (epochs of shuffled minibatches from a generator, one optimiser step
  per batch in the caller's ``step``, optional validation with early stopping, per-epoch history with
  seconds, a tqdm bar, a per-epoch callback). The GAN trainers keep their own critic/generator loop and use
  the generator helpers only.

Use two generators seeded alike where the old code seeded the global RNG and a local generator alike:
one for the weights and dropout (what the global RNG used to give), one for the minibatch order::

    init, order = training.generator(seed), training.generator(seed)
    net = training.build(lambda: make_network(), init)
    history = training.fit(step, len(x), epochs=5, batch_size=64, generator=order, model=net)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from privpix.errors import require_torch

# Type checkers read torch's own types; at run time torch comes through require_torch (a clear error without the
# neural extra, and loaded with one thread).
if TYPE_CHECKING:
    import torch
    from torch import nn
else:
    torch = require_torch("privpix.training")
    nn = torch.nn

# A network, or a tuple of networks (what build's factory makes); the bound is for type checkers only.
T = TypeVar("T", bound="nn.Module | tuple[nn.Module, ...]")

_CONV = nn.modules.conv._ConvNd  # Conv1d/2d/3d and ConvTranspose1d/2d/3d share reset_parameters
# torch layers whose own reset_parameters draws nothing (ones, zeros, running statistics).
_DETERMINISTIC = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (the stream of the global RNG once seeded with ``seed``)."""
    return torch.Generator().manual_seed(int(seed))


def init_parameters(module: nn.Module, gen: torch.Generator) -> None:
    """Draw every parameter of ``module`` from ``gen`` as torch's default initialisation does, in
    ``module.modules()`` order (registration order, which is construction order when each submodule is
    built as it is assigned, as in every privpix network).

    ``nn.Linear`` and the (transposed) convolutions: weight ``kaiming_uniform_(a=√5)``, bias
    ``U(−1/√fan_in, 1/√fan_in)``, the calls of their ``reset_parameters``. Normalisation layers and modules
    defined outside torch call their own ``reset_parameters()``, which must draw nothing (privpix modules with
    buffers define one). Any other module with parameters or buffers of its own is refused (TypeError), so no
    tensor is left uninitialised after :func:`build`.
    """
    init = nn.init
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear | _CONV):
                w = m.weight
                if isinstance(m, _CONV) and not w.is_contiguous():  # as _ConvNd.reset_parameters does
                    tmp = torch.empty_like(w, memory_format=torch.contiguous_format)
                    init.kaiming_uniform_(tmp, a=math.sqrt(5), generator=gen)
                    w.copy_(tmp)
                else:
                    init.kaiming_uniform_(w, a=math.sqrt(5), generator=gen)
                if m.bias is not None:
                    fan_in, _ = init._calculate_fan_in_and_fan_out(w)
                    bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
                    init.uniform_(m.bias, -bound, bound, generator=gen)
            elif next(m.parameters(recurse=False), None) is None and next(m.buffers(recurse=False), None) is None:
                continue
            elif isinstance(m, _DETERMINISTIC) or (
                not type(m).__module__.startswith("torch.") and callable(getattr(m, "reset_parameters", None))
            ):
                # The condition checked it is callable; torch types a module's attributes as Tensor | Module.
                m.reset_parameters()  # type: ignore[operator]
            else:
                raise TypeError(f"init_parameters cannot initialise {type(m).__name__} from a generator")


class GenDropout(nn.Dropout):
    """``nn.Dropout(p)`` whose mask comes from ``generator`` (the global RNG when None).

    On the CPU the output is bit for bit that of ``nn.Dropout`` drawing from a generator in the same state
    (``input * empty_like(input).bernoulli_(1 − p).div_(1 − p)``, torch's CPU dropout). No parameters or
    buffers: its state dict is ``nn.Dropout``'s (empty).
    """

    def __init__(self, p: float = 0.5, generator: torch.Generator | None = None, inplace: bool = False):
        super().__init__(p, inplace)
        self.generator = generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or x.numel() == 0:
            return x
        if self.p == 1:
            noise = torch.zeros((), dtype=x.dtype, device=x.device)
        else:
            noise = torch.empty_like(x).bernoulli_(1 - self.p, generator=self.generator).div_(1 - self.p)
        return x.mul_(noise) if self.inplace else x * noise


def route_dropout(module: nn.Module, gen: torch.Generator) -> None:
    """Make every dropout in ``module`` draw from ``gen``: ``nn.Dropout`` modules are replaced in place by
    :class:`GenDropout` (same ``p``, same place, same state dict), existing ``GenDropout`` take ``gen``."""
    for parent in module.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, GenDropout):
                child.generator = gen
            elif type(child) is nn.Dropout:
                new = GenDropout(child.p, gen, child.inplace)
                new.train(child.training)
                setattr(parent, name, new)


def build(factory: Callable[[], T], gen: torch.Generator) -> T:
    """``factory()``'s network (a module, or a tuple of modules) with no draw from the global RNG: built on
    the ``meta`` device, materialised on the CPU, parameters drawn from ``gen`` by :func:`init_parameters` (the
    modules of a tuple in order), dropout routed through ``gen`` (:func:`route_dropout`).

    A constructor that runs a forward pass (e.g. to size a layer) runs it on meta tensors: any state such a
    pass would have changed (batch-norm running statistics) is left at its reset value.
    """
    with torch.device("meta"):
        built = factory()
    modules = built if isinstance(built, tuple) else (built,)
    for m in modules:
        m.to_empty(device="cpu")
        init_parameters(m, gen)
        route_dropout(m, gen)
    return built


def _mean_losses(out: Any, names: Sequence[str]) -> list[float]:
    vals = list(out) if isinstance(out, tuple | list) else [out]
    if len(vals) != len(names):
        raise ValueError(f"step returned {len(vals)} losses for the names {list(names)}")
    return [v.item() if isinstance(v, torch.Tensor) else float(v) for v in vals]


def fit(
    step: Callable[[torch.Tensor], Any],
    samples: int | torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
    losses: Sequence[str] = ("train_loss",),
    min_batch: int = 1,
    model: nn.Module | None = None,
    validate: Callable[[], Mapping[str, float]] | None = None,
    monitor: str | None = None,
    patience: int = 1,
    min_delta: float = 1e-6,
    callback: Callable[[int, dict[str, list]], None] | None = None,
    progress: bool = False,
    desc: str = "epoch",
) -> dict[str, list]:
    """The minibatch loop: ``epochs`` passes over ``samples`` (a count n, or a 1-D tensor of sample indices)
    in an order drawn from ``generator`` (``torch.randperm``), in batches of ``batch_size`` indices.

    ``step(idx)`` does one optimiser step on the samples ``idx`` and returns its loss (or a tuple of losses,
    named by ``losses``); batches shorter than ``min_batch`` are skipped (2 where batch norm trains). The
    history holds, per epoch, each loss averaged over the samples (``loss · len(idx)`` summed, over n),
    ``validate()``'s values when given, and ``sec`` (the epoch's seconds, validation included).

    ``model`` is put in train mode at the start of each epoch and in eval mode at the end. With ``monitor`` (a
    key of ``validate()``'s result), training stops after ``patience`` epochs without an improvement of more
    than ``min_delta``, and ``model`` gets back the weights of its best epoch. ``callback(epoch, history)``
    runs after each epoch (1-based).
    """
    from tqdm import tqdm

    if monitor is not None and (validate is None or model is None):
        raise ValueError("early stopping on a monitored value needs validate and model")
    idx_all = samples if isinstance(samples, torch.Tensor) else None
    n = len(idx_all) if idx_all is not None else int(samples)
    history: dict[str, list] = {name: [] for name in losses}
    best, best_state, stale = math.inf, None, 0
    for epoch in range(epochs):
        t0 = time.perf_counter()
        if model is not None:
            model.train()
        order = torch.randperm(n, generator=generator)
        if idx_all is not None:
            order = idx_all[order]
        totals = [0.0] * len(losses)
        batches = range(0, n, batch_size)
        for i in tqdm(batches, desc=f"{desc} {epoch + 1}", disable=not progress, leave=False):
            idx = order[i : i + batch_size]
            if len(idx) < min_batch:
                continue
            for k, v in enumerate(_mean_losses(step(idx), losses)):
                totals[k] += v * len(idx)
        for name, tot in zip(losses, totals, strict=True):
            history[name].append(tot / max(1, n))
        if validate is not None:
            for key, value in validate().items():
                history.setdefault(key, []).append(value)
        history.setdefault("sec", []).append(time.perf_counter() - t0)
        if callback is not None:
            callback(epoch + 1, history)
        if monitor is not None:
            value = history[monitor][-1]
            if value < best - min_delta:
                best, stale = value, 0
                assert model is not None  # refused above: monitor needs model
                best_state = {k: t.detach().clone() for k, t in model.state_dict().items()}
            else:
                stale += 1
                if stale >= patience:
                    break
    if model is not None:
        if best_state is not None:
            model.load_state_dict(best_state)
        model.eval()
    return history


def fit_classifier(
    forward: Callable[[torch.Tensor], torch.Tensor],
    parameters: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    seed: int,
    model: nn.Module,
    callback: Callable[[int, dict[str, list]], None] | None = None,
) -> dict[str, list]:
    """Train a classifier whose logits are ``forward(x[idx])`` with cross-entropy and Adam (``parameters``) through
    :func:`fit`, its minibatch order drawn from a generator seeded with ``seed``; batches of one sample are
    skipped (batch norm needs two). ``model`` is switched to train mode for the epochs and back to eval;
    ``callback`` is :func:`fit`'s."""
    opt = torch.optim.Adam(parameters, lr=lr)

    def step(idx):
        loss = torch.nn.functional.cross_entropy(forward(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return fit(step, len(x), epochs=epochs, batch_size=batch_size, generator=generator(seed), min_batch=2, model=model,
               callback=callback)  # fmt: skip
