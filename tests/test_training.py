"""privpix.training: local generators instead of torch's global RNG, the same weights as the seeded default
initialisation, a generator-driven dropout, one minibatch loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from privpix import training  # noqa: E402
from privpix.data.imageset import ImageSet  # noqa: E402

nn = torch.nn


def _equal_states(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _digits(n=96, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    x = rng.random((n, 28, 28, 1), dtype=np.float32) * 0.5
    for k in range(4):  # a bright quadrant per class, so there is something to learn
        x[y == k, (k // 2) * 14 : (k // 2) * 14 + 14, (k % 2) * 14 : (k % 2) * 14 + 14] += 0.5
    return x, y


def _fitters():
    """One small training per kind of model privpix trains; each returns something holding its weights."""
    from privpix.evaluation.attacks import reconstruction
    from privpix.evaluation.cnn import CNNClassifier
    from privpix.mechanisms.ldp.encoders import make_encoder
    from privpix.mechanisms.neural.inference import NeuralInferrer
    from privpix.mechanisms.neural.obfuscator import train_obfuscator
    from privpix.mechanisms.neural.ppsgan import TrunkClassifier, train_ppsgan

    x, y = _digits()
    images = ImageSet(x, y)
    rng = np.random.default_rng(1)
    tab = (rng.random((80, 102)) < 0.3).astype(np.float32)
    tab_y = (tab[:, :5].sum(1) > 1).astype(int)
    img = rng.random((12, 64, 64, 3), dtype=np.float32)
    gan = {"d": 8, "width": 2, "ae_epochs": 1, "epochs": 1, "batch_size": 32, "n_critic": 1}
    return {
        "ppsgan": lambda s: train_ppsgan("ppsgan", x, y, seed=s, **gan)[0],
        "acgan": lambda s: train_ppsgan("acgan", x, y, seed=s, **gan)[0],
        "trunk": lambda s: TrunkClassifier(width=2, epochs=1, batch_size=32, seed=s).fit(x, y).trunk_,
        "obfuscator-image": lambda s: train_obfuscator("image", img[:8], y[:8] % 2, img[8:], y[8:12] % 2,
                                                       epochs=1, batch_size=4, seed=s)[0],
        "obfuscator-tabular": lambda s: train_obfuscator("tabular", tab[:60], tab_y[:60], tab[60:], tab_y[60:],
                                                         epochs=2, batch_size=16, seed=s)[0],
        "inferrer-tabular": lambda s: NeuralInferrer("tabular", epochs=2, batch_size=16, seed=s).fit(tab, tab_y).model_,
        "cnn": lambda s: CNNClassifier("mnist-002", epochs=1, batch_size=32, seed=s).fit(images).model_,
        "bnn": lambda s: make_encoder("bnn", epochs=1, hidden=16, batch_size=32).fit(images, seed=s).net,
        "reconstruction": lambda s: reconstruction(images, images, images, images, cnn_epochs=1, n_components=5,
                                                   seed=s),
    }  # fmt: skip


def test_training_leaves_the_global_torch_rng_alone():
    for name, fit in _fitters().items():
        torch.manual_seed(123)
        before = torch.get_rng_state()
        fit(0)
        assert torch.equal(before, torch.get_rng_state()), f"{name} changed torch's global RNG state"


@pytest.mark.parametrize("name", ["inferrer-tabular", "acgan", "bnn"])
def test_same_seed_same_weights_different_seed_different(name):
    fit = _fitters()[name]
    a, b, c = fit(3), fit(3), fit(4)
    assert _equal_states(a, b)
    assert not _equal_states(a, c)


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.Linear(37, 11),
        lambda: nn.Linear(5, 3, bias=False),
        lambda: nn.Conv2d(3, 8, 5, 2, 2),
        lambda: nn.ConvTranspose2d(8, 4, 5, 2, 2, output_padding=1),
        lambda: nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 2)),
    ],
)
def test_init_parameters_draws_the_default_initialisation_bit_for_bit(make):
    with torch.random.fork_rng():  # the reference seeds the global RNG; fork_rng restores it afterwards
        torch.manual_seed(11)
        ref = make()
    net = make()
    training.init_parameters(net, training.generator(11))
    assert _equal_states(net, ref)
    built = training.build(make, training.generator(11))  # the same without constructing on the CPU first
    assert _equal_states(built, ref)
    for m in built.modules():  # the distribution: U(−1/√fan_in, 1/√fan_in) for weight (a = √5) and bias
        if isinstance(m, nn.Linear | nn.Conv2d | nn.ConvTranspose2d):
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(m.weight)
            assert m.weight.detach().abs().max().item() <= 1 / math.sqrt(fan_in)


def test_build_draws_nothing_globally_and_refuses_unknown_layers():
    torch.manual_seed(5)
    before = torch.get_rng_state()
    net = training.build(lambda: nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)), training.generator(0))
    assert torch.equal(before, torch.get_rng_state())
    assert isinstance(net[1], training.GenDropout) and net[1].p == 0.5
    assert list(net.state_dict()) == ["0.weight", "0.bias"]  # the dropout adds nothing to the state dict
    with pytest.raises(TypeError, match="Embedding"):
        training.build(lambda: nn.Embedding(10, 3), training.generator(0))


def test_gen_dropout_matches_nn_dropout_and_its_rate():
    p = 0.3
    x = torch.randn(200, 500, generator=training.generator(0))
    drop = training.GenDropout(p, training.generator(7))
    out = drop(x)
    with torch.random.fork_rng():
        torch.manual_seed(7)
        assert torch.equal(out, nn.Dropout(p)(x))  # bit for bit nn.Dropout on the same stream
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] / (1 - p))  # kept entries scaled by 1/(1 − p)
    # Dropped share of n = 100 000 entries ~ Binomial(n, p)/n, sd √(p(1 − p)/n) ≈ 0.00145. Five sd either
    # side: a correct mask fails with probability about 6e-7 (and the seed is fixed, so the test is stable).
    n = x.numel()
    rate = 1 - kept.float().mean().item()
    assert abs(rate - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert torch.equal(drop.eval()(x), x)  # eval mode: the identity
    drop.load_state_dict(nn.Dropout(p).state_dict())  # the same (empty) state dict as nn.Dropout


def test_fit_early_stopping_restores_the_best_epoch():
    net = nn.Linear(2, 1)
    values = iter([3.0, 1.0, 2.0, 2.5, 0.5])
    snapshots = []

    def step(idx):
        with torch.no_grad():
            net.weight.add_(1.0)  # a visible change per batch
        return float(len(idx))

    def validate():
        snapshots.append(net.weight.detach().clone())
        return {"val": next(values)}

    hist = training.fit(
        step, 10, epochs=5, batch_size=4, generator=training.generator(0), model=net, validate=validate,
        monitor="val", patience=2, min_batch=3,
    )  # fmt: skip
    assert hist["val"] == [3.0, 1.0, 2.0, 2.5]  # stopped after two epochs without improvement
    assert len(hist["sec"]) == 4 and hist["train_loss"][0] == pytest.approx((4 * 4 + 4 * 4) / 10)  # 2-batch skipped
    assert torch.equal(net.weight, snapshots[1]) and not net.training
