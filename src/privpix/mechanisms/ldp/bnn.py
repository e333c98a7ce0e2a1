"""The binarized-network baseline of Wang & Chang 2020 (Courbariaux et al. 2016), in PyTorch.

Same convolution settings as DCAConv with d = 2: conv(1 → L1, k×k) and conv(L1 → L1, k×k), 'same' padding,
binary (sign) weights and sign activations trained with the straight-through estimator, then max pooling;
these binary activations are the features an owner perturbs (m = L1 · pooled h · pooled w, d = 2). A binary
hidden layer and a linear output layer on top are used for training only. Needs ``pip install privpix[neural]``.
"""

from __future__ import annotations

import numpy as np

from privpix.errors import require_torch
from privpix.mechanisms.base import Param
from privpix.mechanisms.ldp.encoder_base import Encoder


def _torch():
    return require_torch("encoder bnn")


def _build(torch, n_filters: int, kernel: int, pool: int, pool_stride: int, hidden: int, n_classes: int, hw):
    # torch is loaded by now; imported by name so that type checkers take nn.Module as the class it is.
    from torch import nn

    class SignSTE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * (x.abs() <= 1).to(g.dtype)  # hard-tanh straight-through gradient

    class BinConv(nn.Conv2d):
        def forward(self, x):
            return self._conv_forward(x, SignSTE.apply(self.weight), None)

    class BinLinear(nn.Linear):
        def forward(self, x):
            return nn.functional.linear(x, SignSTE.apply(self.weight), self.bias)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            pad = "same"
            # The first layer sees real pixels (as in Courbariaux et al.); its weights are binary.
            self.conv1 = BinConv(1, n_filters, kernel, padding=pad, bias=False)
            self.bn1 = nn.BatchNorm2d(n_filters)
            self.conv2 = BinConv(n_filters, n_filters, kernel, padding=pad, bias=False)
            self.bn2 = nn.BatchNorm2d(n_filters)
            self.pool = nn.MaxPool2d(pool, pool_stride) if pool > 1 else nn.Identity()
            with torch.no_grad():
                m = self.features(torch.zeros(1, 1, *hw)).shape[1]
            self.n_features = m
            self.fc1 = BinLinear(m, hidden)
            self.bn3 = nn.BatchNorm1d(hidden)
            self.fc2 = nn.Linear(hidden, n_classes)

        def features(self, x):
            x = SignSTE.apply(self.bn1(self.conv1(x)))
            x = SignSTE.apply(self.bn2(self.conv2(x)))
            return self.pool(x).flatten(1)

        def forward(self, x):
            return self.fc2(SignSTE.apply(self.bn3(self.fc1(self.features(x)))))

    return Net()


class BNNEncoder(Encoder):
    """Binarized CNN features (d = 2), Wang & Chang 2020's baseline to DCAConv with L2 = 1."""

    name = "bnn"
    summary = "binarized CNN activations before the dense layer (Wang & Chang 2020's BNN baseline, d = 2)"
    needs_labels = True
    params = (
        Param("filters", int, 5, "filters per conv layer (L1 of the DCAConv it is compared with)", minimum=1),
        Param("kernel", int, 7, "filter size", minimum=1),
        Param("pool", int, 2, "max-pooling window", minimum=1),
        Param("pool_stride", int, 1, "max-pooling stride", minimum=1),
        Param("hidden", int, 512, "binary hidden units of the training head", minimum=1),
        Param("epochs", int, 5, "training epochs", minimum=1),
        Param("batch_size", int, 128, "training batch size", minimum=1),
        Param("lr", float, 1e-3, "Adam learning rate", minimum=1e-8),
    )

    def _net(self, n_classes: int):
        torch = _torch()
        c = self.config
        return _build(
            torch, c["filters"], c["kernel"], c["pool"], c["pool_stride"], c["hidden"], n_classes, self.image_shape
        )

    def _fit(self, x, labels, *, seed, progress):
        torch = _torch()
        from privpix import training

        classes, y = np.unique(labels, return_inverse=True)
        self.n_classes = len(classes)
        # Two streams seeded alike: the weights', and the minibatch order's.
        net = training.build(lambda: self._net(self.n_classes), training.generator(seed))
        with torch.no_grad():  # the sizing pass the constructor ran (on meta tensors) moved the batch-norm
            net.features(torch.zeros(1, 1, *self.image_shape))  # statistics; run it for real, as before
        opt = torch.optim.Adam(net.parameters(), lr=self.config["lr"])
        xt = torch.from_numpy(x[:, None])
        yt = torch.from_numpy(y.astype(np.int64))

        def step(idx):
            loss = torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        cfg, order = self.config, training.generator(seed)
        kw = {"epochs": cfg["epochs"], "batch_size": cfg["batch_size"], "progress": progress, "desc": "BNN epoch"}
        training.fit(step, len(xt), generator=order, model=net, **kw)
        self.net = net
        self.d = 2

    def _encode(self, x):
        torch = _torch()
        with torch.no_grad():
            f = self.net.features(torch.from_numpy(np.ascontiguousarray(x[:, None])))
        return (f.numpy() > 0).astype(np.uint8)

    def _state(self):
        out = {k: v.detach().cpu().numpy() for k, v in self.net.state_dict().items()}
        out["n_classes"] = np.array(self.n_classes)
        return out

    def _load_state(self, state):
        torch = _torch()
        self.n_classes = int(state.pop("n_classes"))
        self.net = self._net(self.n_classes)
        self.net.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        self.net.eval()
