"""Statistical tests of every sampler, in reproducible (fixed seeds) and secure (OS CSPRNG) modes. The compiled exact
samplers' own tests (equality with a plain-Python transcription, buffer replay, exact fallbacks, more scales) are in
tests/test_noise_kernels.py.

Every statistical test here is deterministic. The secure samplers run their own exact code path (rejection on raw
64-bit words, integer arithmetic) fed by :class:`ReplayedSecure`, a fixed-seed stand-in for the OS bit source: an
unseeded χ² test at level α fails one CI run in 1/α (one did, at α = 1e-4, with ~15 such tests per run). That the
real :class:`noise.SecureRandom` draws its bits from ``os.urandom`` is checked separately, without statistics.
"""

import math

import numpy as np
import pytest
from scipy import stats

from conftest import ReplayedSecure
from privpix.errors import ParameterError
from privpix.privacy import noise
from privpix.testing.stattests import discrete_gaussian_pmf, discrete_laplace_pmf, pooled_chisquare_pvalue

N = 40_000
ALPHA_SEEDED = 1e-3


def _rngs():
    return [("seeded", noise.make_rng(12345), ALPHA_SEEDED), ("secure", ReplayedSecure(54321), ALPHA_SEEDED)]


@pytest.mark.parametrize("mode,rng,alpha", _rngs())
@pytest.mark.parametrize("scale", [0.3, 2.0])
def test_laplace_matches_distribution(mode, rng, alpha, scale):
    x = noise.laplace(rng, scale, N)
    assert stats.kstest(x, stats.laplace(scale=scale).cdf).pvalue > alpha


@pytest.mark.parametrize("mode,rng,alpha", _rngs())
def test_gaussian_matches_distribution(mode, rng, alpha):
    x = noise.gaussian(rng, 1.7, N)
    assert stats.kstest(x, stats.norm(scale=1.7).cdf).pvalue > alpha


@pytest.mark.parametrize("mode", ["seeded", "secure"])
@pytest.mark.parametrize(
    "draw,tail",
    [
        # (noise, P(|X| > t)) at thresholds where a sampler that cuts or thins its tails is seen: a KS test cannot,
        # the CDFs then differ by at most the tail mass.
        (lambda rng, n: noise.gaussian(rng, 1.0, n) / 3.0, 2 * stats.norm.sf(3.0)),
        (lambda rng, n: noise.gaussian(rng, 1.0, n) / 4.0, 2 * stats.norm.sf(4.0)),
        (lambda rng, n: noise.laplace(rng, 1.0, n) / 5.0, float(np.exp(-5.0))),
        (lambda rng, n: noise.laplace(rng, 1.0, n) / 8.0, float(np.exp(-8.0))),
    ],
    ids=["gaussian-3sd", "gaussian-4sd", "laplace-5b", "laplace-8b"],
)
def test_the_tails_are_not_cut(mode, draw, tail):
    """The share of 400,000 draws beyond the threshold (scaled to 1) is binomial(n, p): two-sided exact test at the
    module's α, its own seeded stream per case (a clipped or truncated sampler gives none, expected 25 to 2,700
    here)."""
    rng, alpha = (noise.make_rng(2029), ALPHA_SEEDED) if mode == "seeded" else (ReplayedSecure(2030), ALPHA_SEEDED)
    n = 400_000
    beyond = int(np.sum(np.abs(draw(rng, n)) > 1.0))
    assert stats.binomtest(beyond, n, tail).pvalue > alpha, (beyond, n * tail)


def _chi2_discrete_laplace(x, scale):
    # Tails pooled so every bin expects >= 5 counts; the false-alarm rate over 2,000 seeds is measured by
    # benchmarks/noise_false_alarms.py (results/noise_false_alarms.json), not here.
    return pooled_chisquare_pvalue(x, discrete_laplace_pmf(scale))


@pytest.mark.parametrize("mode,rng,alpha", _rngs())
@pytest.mark.parametrize("scale", [0.7, 3.0, 2.5])
def test_discrete_laplace_pmf(mode, rng, alpha, scale):
    x = noise.discrete_laplace(rng, scale, N)
    assert x.dtype == np.int64
    assert _chi2_discrete_laplace(x, scale) > alpha


@pytest.mark.parametrize("mode,rng,alpha", _rngs())
@pytest.mark.parametrize("sigma", [0.8, 2.5, 7.0])
def test_discrete_gaussian_pmf(mode, rng, alpha, sigma):
    # Same pooled χ² as the discrete Laplace (false alarms at the stated level; σ = 0.8 and 2.5 exercise a
    # non-integer σ² and a candidate scale t = floor(σ) + 1 that is not σ).
    x = noise.discrete_gaussian(rng, sigma, 20_000)
    assert x.dtype == np.int64
    assert pooled_chisquare_pvalue(x, discrete_gaussian_pmf(sigma)) > alpha


def test_discrete_gaussian_large_sigma_moments():
    # The exact acceptance step runs on unbounded integers: at σ = 8.4e6 (the secure dp-merf release's scale)
    # the products exceed int64. Mean and variance of 20,000 draws: |mean|/σ < 4.5/sqrt(n) and the sample
    # variance within 5 standard errors (each a < 1e-5 false-alarm rate; the seed is fixed anyway).
    sigma, n = 8.4e6, 20_000
    x = noise.discrete_gaussian(noise.make_rng(7), sigma, n).astype(np.float64)
    assert abs(x.mean()) / sigma < 4.5 / math.sqrt(n)
    assert abs(x.var() / sigma**2 - 1) < 5 * math.sqrt(2 / n)


def test_discrete_gaussian_same_seed_same_noise():
    a = noise.discrete_gaussian(noise.make_rng(3), 5.0, 50)
    b = noise.discrete_gaussian(noise.make_rng(3), 5.0, 50)
    c = noise.discrete_gaussian(noise.make_rng(4), 5.0, 50)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_seeded_discrete_gaussian_runs_the_exact_sampler_on_the_generators_words():
    # Reproducible mode is the secure sampler fed the seeded Generator's 64-bit words instead of the OS's.
    words = noise.make_rng(11).integers(0, 2**64, size=4096, dtype=np.uint64)
    it = iter(words)
    replay = ReplayedSecure(0)
    replay.bits64 = lambda n: np.array([next(it) for _ in range(int(n))], dtype=np.uint64)
    assert np.array_equal(
        noise.discrete_gaussian(noise.make_rng(11), 2.5, 300), noise.discrete_gaussian(replay, 2.5, 300)
    )


@pytest.mark.parametrize("mode,rng,alpha", _rngs())
@pytest.mark.parametrize("d,eps", [(2, 0.5), (16, 1.0), (5, 3.0)])
def test_randomized_response_frequencies(mode, rng, alpha, d, eps):
    true = np.full(N, 1)
    out = noise.randomized_response(rng, true, d, eps)
    keep = math.exp(eps) / (math.exp(eps) + d - 1)
    expected = np.full(d, (1 - keep) / (d - 1) * N)
    expected[1] = keep * N
    assert stats.chisquare(np.bincount(out, minlength=d), expected).pvalue > alpha


@pytest.mark.parametrize("mode,rng,alpha", _rngs())
def test_exponential_mechanism_frequencies(mode, rng, alpha):
    scores = np.array([0.0, 1.0, 3.0, 2.5, -1.0])
    eps, sens = 1.2, 1.0
    p = np.exp(eps * scores / (2 * sens))
    p /= p.sum()
    out = noise.exponential_mechanism(rng, scores, eps, sens, size=N)
    assert stats.chisquare(np.bincount(out, minlength=5), p * N).pvalue > alpha
    assert isinstance(noise.exponential_mechanism(rng, scores, eps, sens), int)


def test_same_seed_same_noise():
    a = noise.laplace(noise.make_rng(7), 1.0, 100)
    b = noise.laplace(noise.make_rng(7), 1.0, 100)
    c = noise.laplace(noise.make_rng(8), 1.0, 100)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_secure_mode_refuses_seed():
    with pytest.raises(ParameterError, match="seed"):
        noise.make_rng(3, secure=True)


def test_secure_uniform_integers_are_uniform():
    # 7 is not a power of two: a masked draw without rejection would favour 0..6 unevenly over 8 slots.
    x = ReplayedSecure(11).integers(np.full(N, 7))
    assert x.min() == 0 and x.max() == 6
    assert stats.chisquare(np.bincount(x, minlength=7)).pvalue > ALPHA_SEEDED


def test_secure_random_takes_its_bits_from_the_os_csprng(monkeypatch):
    calls = []

    def counting_urandom(n, real=noise.os.urandom):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(noise.os, "urandom", counting_urandom)
    rng = noise.SecureRandom()
    x = rng.integers(np.full(1000, 7))
    u = rng.random(500)
    assert calls and sum(calls) >= 8 * 1500
    assert 0 <= x.min() and x.max() <= 6 and len(np.unique(x)) == 7
    assert 0 <= u.min() and u.max() < 1
    # The compiled exact samplers read their bits through the same call: 20,000 values need >= 10 bits each.
    for sample in (
        lambda: noise.discrete_laplace(rng, 2.0, 20_000),
        lambda: noise.discrete_gaussian(rng, 3.0, 20_000),
        lambda: noise.randomized_response(rng, np.zeros(20_000, dtype=int), 16, 1.0),
        lambda: noise.exponential_mechanism(rng, np.arange(16.0), 1.0, 1.0, size=20_000),
    ):
        calls.clear()
        out = sample()
        assert out.dtype == np.int64 and len(np.unique(out)) > 5 and 8 * sum(calls) >= 20_000 * 10 / 8
    assert not isinstance(ReplayedSecure(0), np.random.Generator) and noise.is_secure(ReplayedSecure(0))


def test_secure_add_laplace_lands_on_grid():
    rng = noise.SecureRandom()
    grid = 1 / (255 * 64)
    x = np.arange(256) / 255.0
    y = noise.add_laplace(x, 0.5, rng, grid=grid)
    k = y / grid
    assert np.allclose(k, np.round(k), atol=1e-6)


def test_secure_add_laplace_output_depends_on_the_noisy_value_only(monkeypatch):
    """Two values k·g and k'·g whose exact noises land them on the same lattice point give the same float64 bits,
    whatever k: the low-order bits must not tell which value it was (Mironov 2012). 20,000 random pairs of lattice
    points of [0, 1] with noise chosen to meet at one point; scaling value and noise apart, fl(k·g) + fl(z·g),
    fails on many of them."""
    g = noise.PIXEL_GRID
    gen = np.random.default_rng(5)
    k = gen.integers(0, 255 * 64, 20_000)
    target = gen.integers(-(10**6), 10**6, 20_000)
    monkeypatch.setattr(noise, "discrete_laplace", lambda rng, s, n: draws.pop(0))
    draws = [target - k, target - (255 * 64 - 1 - k)]
    a = noise.add_laplace(k * g, 1.0, noise.SecureRandom())
    b = noise.add_laplace((255 * 64 - 1 - k) * g, 1.0, noise.SecureRandom())
    assert np.array_equal(a, b) and np.array_equal(a, target * g)


def test_add_laplace_array_scale_is_elementwise():
    rng = noise.make_rng(0)
    x = np.zeros((2, N))
    y = noise.add_laplace(x, np.array([[0.0], [2.0]]), rng)
    assert np.all(y[0] == 0)
    assert stats.kstest(y[1], stats.laplace(scale=2.0).cdf).pvalue > ALPHA_SEEDED


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda r: noise.laplace(r, -1.0, 3), "scale"),
        (lambda r: noise.discrete_laplace(r, 0.0, 3), "scale"),
        (lambda r: noise.randomized_response(r, np.array([0, 3]), 3, 1.0), "values"),
        (lambda r: noise.randomized_response(r, np.array([0]), 1, 1.0), "d must"),
        (lambda r: noise.randomized_response(r, np.array([0]), 2, float("nan")), "epsilon"),
        (lambda r: noise.exponential_mechanism(r, np.array([]), 1.0, 1.0), "scores"),
        (lambda r: noise.discrete_gaussian(r, 2.0**40, 3), "sigma must be < 2\\*\\*40"),
        (lambda r: noise.discrete_gaussian(r, -1.0, 3), "sigma"),
    ],
)
def test_bad_arguments_name_the_parameter(call, match):
    with pytest.raises(ParameterError, match=match):
        call(noise.make_rng(0))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda r: noise.discrete_laplace(r, 2.0**37, 3), "scale must be <= 2\\*\\*36"),
        (lambda r: noise.laplace(r, 2.0**30, 3), "scale must be <= 2\\*\\*36"),  # 2**30 / grid units
        (lambda r: noise.discrete_gaussian(r, 2.0**41, 3), "sigma must be < 2\\*\\*40"),
        (lambda r: noise.randomized_response(r, np.array([0, 1]), 2, 1e12), "epsilon"),
        (lambda r: noise.exponential_mechanism(r, np.array([0.0, 1e12]), 1.0, 1e-3), "scores"),
    ],
)
def test_secure_limits_name_the_parameter(call, match):
    with pytest.raises(ParameterError, match=match):
        call(ReplayedSecure(0))


def test_rng_type_is_checked():
    with pytest.raises(ParameterError, match="rng"):
        noise.laplace(42, 1.0, 3)


@pytest.mark.parametrize("mode,rng,alpha", _rngs())
def test_add_laplace_adds_laplace_noise_of_the_scale(mode, rng, alpha):
    """The path the pixel mechanisms take (values + noise, in place); a clipped or rescaled draw fails. The secure
    path's lattice (grid 1/16320) is far finer than the scale, so the continuous law is the reference."""
    values = np.full(N, 0.25)
    x = noise.add_laplace(values, 0.4, rng) - 0.25
    assert stats.kstest(x, stats.laplace(scale=0.4).cdf).pvalue > alpha
