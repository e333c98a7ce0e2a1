"""privpix's batched scattering transform against kymatio's own (the reference it replaces for speed): the same
coefficients, in the same channel order, for the sizes, scales and channel counts privpix meets."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("kymatio")

from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D  # noqa: E402

from privpix.errors import ParameterError  # noqa: E402
from privpix.mechanisms.scattering import CHUNK, Scattering2D  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize(
    ("shape", "J", "channels", "n"),
    [
        ((28, 28), 2, 1, 2 * CHUNK + 3),  # MNIST, over several chunks with a ragged end
        ((32, 32), 2, 3, 5),  # CelebA's 32×32 RGB: channels are transformed one by one
        ((16, 24), 3, 1, 4),  # three scales: second-order paths from two first-order scales
        ((30, 18), 2, 1, 3),  # sides not divisible by 2^J
        ((4, 4), 2, 1, 3),  # the padding equals the side: kymatio's special case
        ((36, 20), 1, 2, 3),  # one scale: no second order
    ],
)
def test_matches_kymatio(shape, J, channels, n):
    x = torch.rand(n, channels, *shape, generator=torch.Generator().manual_seed(0))
    want = ScatteringTorch2D(J=J, shape=shape, L=8)(x)
    got = Scattering2D(J, shape, 8)(x)
    assert got.shape == want.shape
    assert got.shape[2] == Scattering2D(J, shape, 8).n_channels
    # float32 rounding of a different summation order; the coefficients are O(1).
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_a_chunk_does_not_see_its_neighbours():
    x = torch.rand(CHUNK + 1, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    s = Scattering2D(2, (28, 28))
    torch.testing.assert_close(s(x)[-1], s(x[-1:])[0], rtol=0, atol=0)


def test_refuses_other_sizes():
    with pytest.raises(ParameterError, match=r"built for \(28, 28\), got \(32, 32\)"):
        Scattering2D(2, (28, 28))(torch.zeros(1, 32, 32))
    with pytest.raises(ParameterError, match="at least 4x4"):
        Scattering2D(2, (3, 8))
