"""The compiled exact samplers (privpix.privacy.noise_kernels), checked three ways.

1. Exactness, without statistics: every kernel output equals a slow pure-Python transcription of the algorithm (exact
   rationals, one bit at a time) reading the same bit stream, also when the buffer is one word (every sample is
   replayed after an exhaustion) and when the fallback to exact arithmetic is forced (a table threshold or a wide
   Gaussian bracket). The exact-arithmetic pieces the transcription shares with the module (exp(-x) bounds, the
   geometric and exp(-x) bit comparisons) are checked against Python's correctly rounded ``decimal`` exp.
2. Distribution: pooled or binned χ² tests against the exact pmf at α = 1e-3 each (fixed seeds via ReplayedSecure or
   a seeded PCG64, so the outcome is deterministic; a correct sampler fails one seed in 1,000).
3. Economy: bits read per value.
"""

from __future__ import annotations

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from conftest import ReplayedSecure
from privpix.privacy import noise
from privpix.privacy import noise_kernels as nk
from privpix.testing.stattests import discrete_gaussian_pmf, discrete_laplace_pmf, pooled_chisquare_pvalue

ALPHA = 1e-3


def words(seed: int, prefix: tuple[int, ...] = ()):
    """A word source: ``prefix`` first, then a seeded PCG64 (the same seed gives the same stream)."""
    gen = np.random.Generator(np.random.PCG64(seed))
    pending = [np.uint64(w) for w in prefix]

    def draw(n: int) -> np.ndarray:
        head, pending[:] = pending[:n], pending[n:]
        rest = gen.integers(0, 2**64, size=n - len(head), dtype=np.uint64)
        return np.concatenate((np.array(head, dtype=np.uint64), rest))

    return draw


class Bits:
    """The same stream, one bit at a time."""

    def __init__(self, draw) -> None:
        self.draw, self.words, self.pos = draw, [], 0

    def __call__(self) -> int:
        if self.pos >= 64 * len(self.words):
            self.words.extend(int(w) for w in self.draw(1))
        bit = (self.words[self.pos >> 6] >> (63 - (self.pos & 63))) & 1
        self.pos += 1
        return bit


# ---------------------------------------------------------------------------------------------------------
# The algorithm in plain Python, exact rationals and one bit at a time (the documented rules, nothing shared with
# the kernels but the exact-arithmetic deciders, which are tested on their own below).


def ref_uniform(bit, m: int) -> int:
    k = (m - 1).bit_length()
    while True:
        u = 0
        for _ in range(k):
            u = 2 * u + bit()
        if u < m:
            return u


def ref_bernoulli(bit, x: Fraction) -> bool:
    """U < x, decided at the first bit where U and the expansion of x differ."""
    if x >= 1:
        return True
    if x <= 0:
        return False
    while True:
        x *= 2
        digit = int(x >= 1)
        x -= digit
        b = bit()
        if b != digit:
            return b < digit


def ref_bernoulli_exp(bit, x: Fraction) -> bool:
    while x > 1:
        if not ref_bernoulli_exp(bit, Fraction(1)):
            return False
        x -= 1
    k = 1
    while ref_bernoulli(bit, x / k):
        k += 1
    return k % 2 == 1


def ref_laplace(bit, p: int, q: int) -> int:
    m = 1
    while 16 * m * q <= p:  # the largest power of two <= p/(8q), or 1
        m *= 2
    c = Fraction(m * q, p)
    while True:
        b = ref_uniform(bit, m)
        if not ref_bernoulli_exp(bit, Fraction(b * q, p)):
            continue
        y = nk.geometric_decide(c, bit) * m + b
        if bit():
            if y:
                return -y
        else:
            return y


def ref_gaussian(bit, sigma: float) -> int:
    t = nk.gaussian_block(sigma)
    var = Fraction(sigma) ** 2
    while True:
        z = ref_laplace(bit, t, 1)
        if nk.exp_neg_decide((abs(z) - var / t) ** 2 / (2 * var), bit):
            return z


# ---------------------------------------------------------------------------------------------------------
# Exact arithmetic against decimal's correctly rounded exp.


def dec_exp_neg(x: Fraction, digits: int = 90) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = digits
        return (-(Decimal(x.numerator) / Decimal(x.denominator))).exp()


@pytest.mark.parametrize(
    "x", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(2**20, 16320 * 2**20 + 1)]
)
@pytest.mark.parametrize("prec", [64, 200])
def test_exp_neg_bounds_bracket_the_true_value(x, prec):
    lo, hi = nk.exp_neg_bounds(x.numerator, x.denominator, prec)
    with localcontext() as ctx:
        ctx.prec = 120
        true = dec_exp_neg(x) * (Decimal(2) ** prec)
        assert Decimal(lo) <= true <= Decimal(hi)
    assert hi - lo <= 4


@pytest.mark.parametrize(
    "c", [Fraction(1), Fraction(1, 3), Fraction(1, 8), Fraction(2**10 * 2**20, 171127917773), Fraction(50)]
)
def test_geometric_table_is_floor_of_exp_times_2_64(c):
    table, start = nk.geometric_table(c.numerator, c.denominator)
    vals = [int(t) for t in table[1:-1]]
    with localcontext() as ctx:
        ctx.prec = 90
        want = []
        v = 1
        while (e := int(dec_exp_neg(c * v) * (Decimal(2) ** 64))) > 0:
            want.append(e)
            v += 1
    assert vals == want and int(table[-1]) == 0
    for z in range(65):
        assert start[z] == sum(t >= 2 ** (64 - z) for t in vals)


def decided_geometric(bits: list[int], c: Fraction) -> tuple[int, int]:
    """(G, bits read) by the rule: read until the prefix interval lies strictly between two thresholds."""
    with localcontext() as ctx:
        ctx.prec = 120
        prefix = Decimal(0)
        for j, b in enumerate(bits, start=1):
            prefix += Decimal(b) / Decimal(2) ** j
            top = prefix + Decimal(1) / Decimal(2) ** j
            v = 0
            while dec_exp_neg(c * (v + 1)) >= top:  # the interval lies below exp(-c(v+1)): G >= v + 1
                v += 1
            if dec_exp_neg(c * (v + 1)) < prefix:  # and above it: decided
                return v, j
    raise AssertionError("not decided within the bits given")


@pytest.mark.parametrize("c", [Fraction(1), Fraction(1, 8), Fraction(3, 7)])
def test_geometric_decide_reads_exactly_until_decided(c):
    gen = np.random.default_rng(5)
    for trial in range(40):
        bits = [int(b) for b in gen.integers(0, 2, 300)]
        if trial < 3:  # long prefixes close to a threshold: the first 70 bits of exp(-c·(trial + 1))
            with localcontext() as ctx:
                ctx.prec = 60
                e = int(dec_exp_neg(c * (trial + 1)) * Decimal(2) ** 70)
            bits[:70] = [(e >> (69 - k)) & 1 for k in range(70)]
        it = iter(bits)
        got = nk.geometric_decide(c, lambda it=it: next(it))
        read = 300 - len(list(it))
        assert (got, read) == decided_geometric(bits, c)


@pytest.mark.parametrize("x", [Fraction(1, 3), Fraction(5, 2), Fraction(123456789, 2**60)])
def test_exp_neg_decide_stops_at_the_first_differing_bit(x):
    with localcontext() as ctx:
        ctx.prec = 90
        expansion = int(dec_exp_neg(x) * Decimal(2) ** 200)
    p_bits = [(expansion >> (199 - k)) & 1 for k in range(200)]
    gen = np.random.default_rng(9)
    for trial in range(30):
        bits = [int(b) for b in gen.integers(0, 2, 200)]
        bits[: trial * 3] = p_bits[: trial * 3]  # agree with exp(-x) on ever longer prefixes
        first = next(k for k in range(200) if bits[k] != p_bits[k])
        it = iter(bits)
        assert nk.exp_neg_decide(x, lambda it=it: next(it)) == (bits[first] < p_bits[first])
        assert 200 - len(list(it)) == first + 1


# ---------------------------------------------------------------------------------------------------------
# Kernels == the plain-Python algorithm on the same stream.

LAPLACE_SCALES = [
    (1, 1),
    (3, 1),
    (5, 2),  # 2.5
    *[noise._rational_at_least(s) for s in (0.7, 30.0, 163200.3, 16320 / 0.9)],
]


@pytest.mark.parametrize("p,q", LAPLACE_SCALES)
@pytest.mark.parametrize("max_words", [nk.MAX_WORDS, 1])
def test_laplace_kernel_equals_reference(p, q, max_words):
    n = 300
    got = nk.discrete_laplace(words(1), p, q, n, max_words=max_words)
    bit = Bits(words(1))
    assert got.tolist() == [ref_laplace(bit, p, q) for _ in range(n)]


# σ = 1 and 4: |z| = σ²/t happens (γ = 0, acceptance probability exactly 1).
@pytest.mark.parametrize("sigma", [0.8, 1.0, 2.5, 4.0, 10.0, 1000.0, 4.2e6])
@pytest.mark.parametrize(
    "margin,max_words", [(nk.GAUSSIAN_MARGIN, nk.MAX_WORDS), (nk.GAUSSIAN_MARGIN, 1), (2.0**-3, 1)]
)
def test_gaussian_kernel_equals_reference(sigma, margin, max_words):
    n = 150
    got = nk.discrete_gaussian(words(2), sigma, n, margin=margin, max_words=max_words)
    bit = Bits(words(2))
    assert got.tolist() == [ref_gaussian(bit, sigma) for _ in range(n)]


@pytest.mark.parametrize("p,q", [(1, 1), (3, 1), noise._rational_at_least(0.7)])
@pytest.mark.parametrize("lead", ["threshold", "zeros"])
def test_undecided_geometric_draw_is_settled_exactly(p, q, lead):
    # Scales below 16 have B = 0, so the first sample's geometric draw reads the stream from bit 0: start it with a
    # table threshold (or 2 zero words) and 64 bits cannot decide it; the driver's exact fallback must take over.
    c = Fraction(q, p)
    table, _ = nk.geometric_table(c.numerator, c.denominator)
    prefix = (int(table[2]),) if lead == "threshold" else (0, 0)
    got = nk.discrete_laplace(words(3, prefix), p, q, 50)
    bit = Bits(words(3, prefix))
    assert got.tolist() == [ref_laplace(bit, p, q) for _ in range(50)]
    if (p, q) == (1, 1):  # σ < 1: candidates of scale 1, the same table
        got = nk.discrete_gaussian(words(3, prefix), 0.6, 50)
        bit = Bits(words(3, prefix))
        assert got.tolist() == [ref_gaussian(bit, 0.6) for _ in range(50)]


@pytest.mark.parametrize("sampler", ["laplace", "gaussian"])
def test_one_word_buffer_gives_the_same_values_as_a_large_one(sampler):
    # One fresh word per refill: the kernel runs out of bits every few samples and replays from its checkpoint.
    n = 20_000
    if sampler == "laplace":
        p, q = noise._rational_at_least(16320 / 0.9)
        big, tiny = (nk.discrete_laplace(words(4), p, q, n, max_words=w) for w in (nk.MAX_WORDS, 1))
    else:
        big, tiny = (nk.discrete_gaussian(words(4), 1000.0, n, max_words=w) for w in (nk.MAX_WORDS, 1))
    assert np.array_equal(big, tiny)


def test_gaussian_fallback_gives_the_same_values_as_the_fast_path():
    # A bracket of half-width 2**-5 leaves about one acceptance test in 8 to the exact fallback; the decision rule
    # is the same, so the values are too.
    n = 20_000
    fast = nk.discrete_gaussian(words(6), 3.3, n)
    slow = nk.discrete_gaussian(words(6), 3.3, n, margin=2.0**-5)
    assert np.array_equal(fast, slow)
    assert pooled_chisquare_pvalue(slow, discrete_gaussian_pmf(3.3)) > ALPHA


# ---------------------------------------------------------------------------------------------------------
# Distribution.


def laplace_binned_pvalue(x: np.ndarray, p: int, q: int, width: int) -> float:
    """χ² over bins of ``width`` integers (|z| < 5·scale, the rest pooled), exact probabilities from
    P[Z >= k] = r^k/(1 + r), r = exp(-q/p), for k >= 1."""
    r = math.exp(-q / p)
    edges = np.arange(width // 2 + 1, 5 * p // q, width)  # bins [e_i, e_{i+1}) on each side of the centre bin
    upper = np.r_[edges, np.inf]
    tail = r ** edges[0] / (1 + r)
    probs = [1 - 2 * tail]
    counts = [np.sum(np.abs(x) < edges[0])]
    for lo, hi in itertools.pairwise(upper):
        mass = (r**lo - (r**hi if np.isfinite(hi) else 0.0)) / (1 + r)
        for sign in (1, -1):
            probs.append(mass)
            counts.append(np.sum((sign * x >= lo) & (sign * x < hi)))
    expected = np.array(probs) * len(x)
    return float(stats.chisquare(counts, expected * sum(counts) / expected.sum()).pvalue)


@pytest.mark.parametrize("scale", [1.0, 30.0, 1000 / 7, 16320 / 0.9, 163200.3])
def test_secure_discrete_laplace_distribution(scale):
    x = noise.discrete_laplace(ReplayedSecure(101), scale, 40_000)
    p, q = noise._rational_at_least(scale)
    if scale < 50:
        assert pooled_chisquare_pvalue(x, discrete_laplace_pmf(p / q)) > ALPHA
    else:
        assert laplace_binned_pvalue(x, p, q, max(1, int(scale / 8))) > ALPHA


def gaussian_binned_pvalue(x: np.ndarray, sigma: float) -> float:
    """χ² over 40 bins of width σ/4 in ±5σ (tails pooled), P[Z <= k] = Φ((k + 1/2)/σ) (for σ >= 100 the error of this
    approximation is below 1e-8)."""
    edges = np.round(np.arange(-20, 21) * sigma / 4)
    cdf = stats.norm.cdf((np.r_[-np.inf, edges, np.inf] - 0.5) / sigma)
    counts = np.bincount(np.searchsorted(edges, x, side="right"), minlength=len(edges) + 1)
    expected = np.diff(cdf) * len(x)
    return float(stats.chisquare(counts, expected * counts.sum() / expected.sum()).pvalue)


@pytest.mark.parametrize("sigma", [1.0, 10.0, 1000.0, 4.2e6])
def test_secure_discrete_gaussian_distribution(sigma):
    x = noise.discrete_gaussian(ReplayedSecure(202), sigma, 40_000)
    if sigma < 100:
        assert pooled_chisquare_pvalue(x, discrete_gaussian_pmf(sigma)) > ALPHA
    else:
        assert gaussian_binned_pvalue(x, sigma) > ALPHA


# ---------------------------------------------------------------------------------------------------------
# Economy.


@pytest.mark.parametrize(
    "sampler,arg,max_bits",
    [("laplace", 1.0, 8), ("laplace", 3.0, 9), ("laplace", 30.0, 13), ("laplace", 16320.0, 24), ("gaussian", 10.0, 17),
     ("gaussian", 4.2e6, 45)],
)  # fmt: skip
def test_bits_per_value(sampler, arg, max_bits):
    n, drawn = 100_000, []
    src = words(8)

    def draw(k):
        drawn.append(k)
        return src(k)

    if sampler == "laplace":
        nk.discrete_laplace(draw, *noise._rational_at_least(arg), n)
    else:
        nk.discrete_gaussian(draw, arg, n)
    assert 64 * sum(drawn) / n < max_bits


def test_portable_leading_zero_count_matches_python():
    """The stand-in for numba's non-public ``leading_zeros`` (used if a numba version moves it) is exact."""
    from numba import njit

    from privpix.privacy.noise_kernels import clz_portable

    @njit
    def many(xs):
        out = np.empty(xs.size, np.int64)
        for i in range(xs.size):
            out[i] = clz_portable(xs[i])
        return out

    rng = np.random.default_rng(0)
    xs = np.concatenate(
        [
            np.array([0, 1, 2, 3, 2**63, 2**64 - 1], dtype=np.uint64),
            (rng.integers(0, 2**64, 2000, dtype=np.uint64) >> rng.integers(0, 64, 2000).astype(np.uint64)),
        ]
    )
    assert many(xs).tolist() == [64 - int(x).bit_length() for x in xs]
