"""Compiled kernels of the exact samplers of :mod:`privpix.privacy.noise`, and the driver that feeds them random bits.

**Bit stream.** Every kernel is a deterministic function of one stream of uniform random bits: 64-bit words (from
``SecureRandom.bits64`` or a seeded Generator) read most significant bit first. Each decision reads only the bits it
needs, so the OS CSPRNG's output goes a long way (6 to 25 bits per discrete Laplace value at scales 1 to 163,200,
11 to 43 per discrete Gaussian value at σ = 1 to 8.5e6):

* a uniform integer in ``[0, m)`` reads ``ceil(log2 m)`` bits and rejects values >= m;
* a Bernoulli(x) trial compares the stream, read as a binary fraction U, with the binary expansion of x and stops at
  the first bit where they differ: U < x is then decided, after 2 bits on average. For a rational x = a/b the
  expansion comes from exact integer long division;
* Bernoulli(exp(-a/b)) is Canonne, Kamath & Steinke's (2020) Algorithm 1: Bernoulli(a/(b·k)) trials for
  k = 1, 2, ... until one fails, true when the failing k is odd (and exp(-1) once per whole unit of a/b first);
* a geometric count G with P[G >= v] = exp(-c·v), c rational, is read off one uniform U by inverse transform,
  G = #{v >= 1 : U < exp(-c·v)}, against a table of floor(exp(-c·v)·2⁶⁴) computed once per c in exact integer
  arithmetic (:func:`geometric_table`): the stream is read until its prefix pins U between two consecutive
  thresholds.

**Exhaustion.** A kernel that would read past the end of its buffer stops and reports the last *checkpoint* it
passed: the sample it was on, the stage of that sample and the values drawn so far (which fully describe the state),
and the bit position where that stage began. The driver hands it a buffer that starts with the unread bits from that
position followed by fresh words, and the stage is replayed. The output is therefore exactly what one long buffer
would give; no partly drawn sample is thrown away (which would favour samples that need few bits).

**Exact fallback.** Two decisions compare the stream with an irrational number whose leading bits the kernel knows
only to a point: the geometric table (64 bits of each threshold) and the discrete Gaussian's acceptance probability
exp(-γ) (a floating-point bracket, see :func:`gaussian_kernel`). When the stream agrees with every known bit, the
kernel returns UNDECIDED and the driver finishes that one comparison in exact rational arithmetic
(:func:`geometric_decide`, :func:`exp_neg_decide`), reading the following bits of the same stream, then resumes the
kernel after it. Kernel and fallback follow the same rule (read until decided), so the output is the same whichever
of them decides.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from numba import njit

try:  # LLVM's ctlz intrinsic; numba keeps it outside its public API, so a portable count stands in if it moves.
    from numba.cpython.unsafe.numbers import leading_zeros
except ImportError:  # pragma: no cover - depends on the numba version
    leading_zeros = None  # type: ignore[assignment]  # None: the portable count below stands in

# Kernel return codes.
DONE, EXHAUSTED, UNDECIDED = 0, 1, 2

# Denominators of rational Bernoulli trials stay below 2**62, so that remainder << chunk never overflows int64.
_DEN_LIMIT = (1 << 62) - 1
_TWO64 = 18446744073709551616.0
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U63 = np.uint64(63)

# Half-width of the discrete Gaussian's float bracket around exp(-γ) (see gaussian_kernel).
GAUSSIAN_MARGIN = 2.0**-32

WordSource = Callable[[int], np.ndarray]
NextBit = Callable[[], int]


# ---------------------------------------------------------------------------------------------------------
# Exact real arithmetic for exp(-x), x >= 0 rational: the geometric tables and the rare undecided comparisons.


def _exp_neg_unit_bounds(a: int, b: int, prec: int) -> tuple[int, int]:
    """Integers lo <= exp(-a/b)·2**prec <= hi for integers 0 <= a <= b: the alternating Taylor series, whose terms
    (a/b)^k/k! do not grow, so the limit lies within the last term of any partial sum; each term is rounded down
    and up in integer arithmetic and the bounds carry both roundings."""
    one = 1 << prec
    t_lo = t_hi = s_lo = s_hi = one
    k = 0
    while t_hi > 1:
        k += 1
        t_lo = t_lo * a // (b * k)
        t_hi = -(-t_hi * a // (b * k))
        if k & 1:
            s_lo, s_hi = s_lo - t_hi, s_hi - t_lo
        else:
            s_lo, s_hi = s_lo + t_lo, s_hi + t_hi
    return max(s_lo - 1, 0), s_hi + 1


def exp_neg_bounds(a: int, b: int, prec: int) -> tuple[int, int]:
    """Integers lo <= exp(-a/b)·2**prec <= hi for integers a >= 0, b >= 1 (hi - lo is a few units): exp(-a/(n·b))
    to the power n = ceil(a/b), at extra precision for the n roundings."""
    n = max(1, -(-a // b))
    extra = prec + 2 * n.bit_length() + 8
    lo1, hi1 = _exp_neg_unit_bounds(a, b * n, extra)
    lo, hi = 1 << extra, 1 << extra
    for _ in range(n):
        lo, hi = (lo * lo1) >> extra, -((-hi * hi1) >> extra)  # rounded down and up
    shift = extra - prec
    return lo >> shift, -((-hi) >> shift)


def exp_neg_decide(x: Fraction, next_bit: NextBit) -> bool:
    """Bernoulli(exp(-x)) for rational x >= 0, exactly: compares the stream's bits (``next_bit``) with the binary
    expansion of exp(-x) and stops at the first difference, true iff the stream's bit is 0 there. The expansion is
    known through rigorous bounds, refined by 64 bits whenever the stream has matched all bits known so far;
    exp(-x) is irrational for x > 0, so the comparison ends with probability 1."""
    if x == 0:
        # exp(0) = 1 = 0.111...: the rule still reads the stream up to its first 0 (where U < 1 shows), as the
        # kernel's fast path does; returning at once would leave the next draw a stream that began with 1s.
        while next_bit():
            pass
        return True
    prec, j = 64, 0
    while True:
        lo, hi = exp_neg_bounds(x.numerator, x.denominator, prec)
        hi = min(hi, (1 << prec) - 1)  # exp(-x) < 1
        known = prec - (lo ^ hi).bit_length()  # leading bits shared by every value between the bounds
        while j < known:
            p_bit = (lo >> (prec - 1 - j)) & 1
            s_bit = next_bit()
            j += 1
            if s_bit != p_bit:
                return s_bit < p_bit
        prec += 64


def geometric_decide(c: Fraction, next_bit: NextBit) -> int:
    """G = #{v >= 1 : U < exp(-c·v)} for the uniform U that the stream's bits spell out, reading bits until the
    prefix read so far decides G: the kernels' rule (their table decides whenever 64 bits do), exactly."""
    bounds: dict[tuple[int, int], tuple[int, int]] = {}

    def theta(v: int, prec: int) -> tuple[int, int]:
        if (v, prec) not in bounds:
            bounds[v, prec] = exp_neg_bounds(c.numerator * v, c.denominator, prec)
        return bounds[v, prec]

    prefix, j, v, prec = 0, 0, 1, 128  # thresholds exp(-c·a) for a < v lie above the prefix interval
    while True:
        prefix = 2 * prefix + next_bit()
        j += 1
        if prec < j + 32:
            prec += 64
        while True:
            lo, hi = theta(v, prec)
            top, bottom = (prefix + 1) << (prec - j), prefix << (prec - j)  # the interval [bottom, top) · 2**-prec
            if top <= lo:  # the whole interval lies below exp(-c·v)
                v += 1
            elif bottom >= hi:  # the whole interval lies above exp(-c·v): G = v - 1
                return v - 1
            elif bottom < lo and hi < top:  # exp(-c·v) lies inside the interval: read another bit
                break
            else:
                prec += 64


@functools.lru_cache(maxsize=512)
def geometric_table(cn: int, cd: int) -> tuple[np.ndarray, np.ndarray]:
    """The inverse-transform table of G with P[G >= v] = exp(-v·cn/cd): floor(exp(-v·cn/cd)·2**64) at index v for
    v = 1, 2, ... while positive (index 0 unused, a trailing 0 ends it), and, for each count z of leading zero bits
    of a 64-bit word W < 2**(64 - z), the number of entries >= 2**(64 - z), hence above W: where a search starts."""
    vals: list[int] = []
    if cn < 45 * cd:  # exp(-45) < 2**-64: for larger rates every entry is 0
        prec = 128  # doubled in the (rare) event that the bounds straddle an integer at 64 bits
        while True:
            b_lo, b_hi = exp_neg_bounds(cn, cd, prec)
            vals, lo, hi = [], 1 << prec, 1 << prec
            while True:
                lo, hi = (lo * b_lo) >> prec, -((-hi * b_hi) >> prec)
                t_lo, t_hi = lo >> (prec - 64), hi >> (prec - 64)
                if t_lo != t_hi or t_lo == 0:
                    break
                vals.append(t_lo)
            if t_lo == t_hi:
                break
            prec *= 2
    table = np.array([(1 << 64) - 1, *vals, 0], dtype=np.uint64)
    ascending = table[-2:0:-1]
    powers = np.array([1 << (64 - z) for z in range(1, 65)], dtype=np.uint64)
    counts = np.r_[0, ascending.size - np.searchsorted(ascending, powers)].astype(np.int64)
    return table, counts


# ---------------------------------------------------------------------------------------------------------
# Bit-level building blocks. Each takes the buffer (uint64 words plus two zero pad words), the number of real bits
# in it, and the read position, and returns its result with the new position. A position past ``nbits`` means the
# result was computed from pad bits: the caller must stop and report its checkpoint.


@njit(inline="always")
def clz_portable(x):
    """Leading zero bits of a uint64 (64 for 0) by binary search: what ``leading_zeros`` computes in one
    instruction, for a numba that no longer exposes it."""
    if x == 0:
        return np.int64(64)
    n = np.int64(0)
    for shift in (32, 16, 8, 4, 2, 1):
        if x >> np.uint64(64 - shift) == 0:
            n += shift
            x = x << np.uint64(shift)
    return n


if leading_zeros is not None:

    @njit(inline="always")
    def _clz(x):
        return np.int64(leading_zeros(x))

else:  # pragma: no cover - depends on the numba version
    _clz = clz_portable


@njit(inline="always")
def _bitlen(x):
    """Number of significant bits of an int64 >= 0."""
    return 64 - _clz(np.uint64(x))


@njit(inline="always")
def _peek(buf, pos):
    """The 64 bits of the stream starting at ``pos`` (``pos`` <= real bits, so at most the pad words are read)."""
    i = pos >> 6
    off = np.uint64(pos & 63)
    # (x >> 1) >> (63 - off) is x >> (64 - off) without the undefined shift by 64 when off == 0.
    return (buf[i] << off) | ((buf[i + 1] >> _U1) >> (_U63 - off))


@njit
def _uniform(buf, nbits, pos, m):
    """Uniform integer in [0, m), 1 <= m < 2**62: ceil(log2 m) bits per try, values >= m rejected."""
    if m == 1:
        return 0, pos
    k = _bitlen(m - 1)
    sh = np.uint64(64 - k)
    while True:
        u = np.int64(_peek(buf, pos) >> sh)
        pos += k
        if u < m or pos > nbits:
            return u, pos


@njit
def _bern_rat(buf, nbits, pos, a, b):
    """Bernoulli(a/b) for integers a >= 0, 1 <= b <= 2**62 - 1: true iff the stream, read as a binary fraction U, is
    below a/b, decided at the first bit where U and the expansion of a/b differ."""
    if a <= 0:
        return False, pos
    if a >= b:
        return True, pos
    w = _peek(buf, pos)
    zeros = _bitlen(b) - _bitlen(a) - 1  # a/b < 2**-zeros: its expansion starts with that many 0 bits
    lead = _clz(w)
    if lead < zeros:  # U has a 1 where a/b has a 0: U > a/b, decided without dividing
        return False, pos + lead + 1
    c = 63 - _bitlen(b)  # chunk of c bits per division step: remainder < b, so remainder << c < 2**63
    sh = np.uint64(64 - c)
    r = a
    while True:
        num = r << c
        d = num // b
        r = num - d * b
        x = np.int64(_peek(buf, pos) >> sh)
        if x != d:
            return x < d, pos + c - _bitlen(x ^ d) + 1
        pos += c
        if pos > nbits:
            return False, pos


@njit
def _bern_exp_unit(buf, nbits, pos, a, b):
    """Bernoulli(exp(-a/b)) for 0 <= a <= b <= 2**62 - 1 (CKS 2020, Algorithm 1)."""
    kmax = 1  # Bernoulli(a/(b·k)) in one comparison while b·k fits (the division only if k reaches 2)
    k = 1
    while True:
        if k == 2:
            kmax = _DEN_LIMIT // b
        if k <= kmax:
            acc, pos = _bern_rat(buf, nbits, pos, a, b * k)
        else:  # a/(b·k) = (a/b)·(1/k): two independent trials, never an overflow
            acc, pos = _bern_rat(buf, nbits, pos, a, b)
            if acc and pos <= nbits:
                acc, pos = _bern_rat(buf, nbits, pos, 1, k)
        if not acc or pos > nbits:
            return (k & 1) == 1, pos
        k += 1


@njit
def _bern_exp(buf, nbits, pos, a, b):
    """Bernoulli(exp(-a/b)) for any a >= 0, 1 <= b <= 2**62 - 1: exp(-1) once per whole unit, stopping early."""
    while a > b:
        acc, pos = _bern_exp_unit(buf, nbits, pos, 1, 1)
        if not acc or pos > nbits:
            return False, pos
        a -= b
    return _bern_exp_unit(buf, nbits, pos, a, b)


@njit
def _geometric(buf, pos, table, start):
    """G = #{v >= 1 : U < exp(-c·v)} from the table of floor(exp(-c·v)·2**64) (see geometric_table). Returns
    (G, new position, decided); undecided (64 bits do not decide) leaves the position where G's bits start."""
    w = _peek(buf, pos)
    v = start[_clz(w)]
    while table[v + 1] > w:
        v += 1
    # table[v + 1] <= w < table[v]: U is decided once its prefix differs from both (above the lower, below the upper).
    first = max(_clz(w ^ table[v + 1]), _clz(w ^ table[v]) * (v > 0))  # no upper threshold for v = 0
    if first >= 64:
        return 0, pos, False
    return v, pos + first + 1, True


# ---------------------------------------------------------------------------------------------------------
# Kernels. Arguments: buffer, real bits, position, output, next output index, the checkpoint to resume from (stage
# and its values s1, s2), then the sampler's parameters. They return (code, next output index, stage, s1, s2,
# position): where to resume after EXHAUSTED (replay from the checkpoint) or UNDECIDED (settle the decision that
# starts at the position, then resume).
#
# A discrete Laplace magnitude Y >= 0 with P[Y = y] ∝ exp(-y·q/p) is Y = m·G + B for a block size m (CKS 2020,
# Algorithm 2, takes m = p with q = 1): the pmf factors over the pair (G, B), so the two are independent, with
#   stage 0: B on [0, m) with P[B = b] ∝ exp(-b·q/p): a uniform b accepted with Bernoulli(exp(-b·q/p));
#   stage 1: G with P[G >= v] = exp(-v·c), c = m·q/p, by inverse transform on the table of exp(-v·c);
#   stage 2: a sign bit, (negative, 0) rejected so that 0 is not counted twice.
# m is a power of two (B needs no rejection) with c in (1/16, 1/8] (B is accepted with probability >= 0.94, mostly
# decided without a division), or m = 1 and B = 0 for scales below 16.


@njit(cache=True)
def laplace_kernel(buf, nbits, pos, out, i, stage, s1, s2, p, q, m, table, start):
    """Discrete Laplace with rational scale p/q: P[z] ∝ exp(-|z|·q/p). Checkpoint values: s1 = B, s2 = G."""
    n = out.shape[0]
    while i < n:
        cp = pos
        if stage == 0:
            s1, pos = _uniform(buf, nbits, pos, m)
            if pos > nbits:
                return EXHAUSTED, i, 0, 0, 0, cp
            acc, pos = _bern_exp_unit(buf, nbits, pos, s1 * q, p)
            if pos > nbits:
                return EXHAUSTED, i, 0, 0, 0, cp
            if not acc:
                continue
            stage, cp = 1, pos
        if stage == 1:
            s2, pos, ok = _geometric(buf, pos, table, start)
            if not ok:  # 64 bits do not decide G; if some were pad bits, real ones may
                if pos + 64 > nbits:
                    return EXHAUSTED, i, 1, s1, 0, cp
                return UNDECIDED, i, 1, s1, 0, pos
            if pos > nbits:
                return EXHAUSTED, i, 1, s1, 0, cp
            stage, cp = 2, pos
        y = s2 * m + s1
        neg = np.int64(_peek(buf, pos) >> _U63)
        pos += 1
        if pos > nbits:
            return EXHAUSTED, i, 2, s1, s2, cp
        stage = 0
        # Branch-free (the sign is a coin flip): write ±y, keep it unless it is (negative, 0).
        out[i] = (y ^ -neg) + neg
        i += 1 - (neg & (y == 0))
    return DONE, i, 0, 0, 0, pos


@njit(cache=True)
def gaussian_kernel(buf, nbits, pos, out, i, stage, s1, s2, sigma, t, m, table, start, margin):
    """Discrete Gaussian, P[z] ∝ exp(-z²/(2σ²)) (CKS 2020, Algorithm 3): discrete Laplace candidates z of integer
    scale t (stages 0-2 of laplace_kernel with p = t, q = 1), each kept with probability exp(-γ),
    γ = (|z| - σ²/t)²/(2σ²) (stage 3, s1 = z). The proof holds for any t > 0; t is a power of two near σ.

    Stage 3 compares the stream with the binary expansion of exp(-γ) and stops at the first differing bit. The
    leading bits of the expansion come from a float bracket: with p̂ = exp(-γ̂) evaluated in double precision, the
    bits shared by floor((p̂ - margin)·2⁶⁴) and floor((p̂ + margin)·2⁶⁴) are taken as those of exp(-γ). This assumes
    |p̂ - exp(-γ)| <= margin/2 (margin = 2⁻³² by default; IEEE arithmetic and a faithfully rounded libm exp err by
    less than 2⁻⁴⁹ here: the error of γ̂ is a few units of 2⁻⁵³ relative to max(γ, sqrt(2γ)), and exp(-γ)·γ and
    exp(-γ)·sqrt(2γ) are below 1). If the stream agrees with every bit known this way (about once in 10⁸
    candidates), the kernel returns UNDECIDED and the driver finishes the comparison exactly
    (:func:`exp_neg_decide`)."""
    n = out.shape[0]
    sigma2 = sigma * sigma
    mu = sigma2 / t
    inv_two_s2 = 0.5 / sigma2
    while i < n:
        cp = pos
        if stage == 0:
            s1, pos = _uniform(buf, nbits, pos, m)
            if pos > nbits:
                return EXHAUSTED, i, 0, 0, 0, cp
            acc, pos = _bern_exp_unit(buf, nbits, pos, s1, t)
            if pos > nbits:
                return EXHAUSTED, i, 0, 0, 0, cp
            if not acc:
                continue
            stage, cp = 1, pos
        if stage == 1:
            s2, pos, ok = _geometric(buf, pos, table, start)
            if not ok:  # 64 bits do not decide G; if some were pad bits, real ones may
                if pos + 64 > nbits:
                    return EXHAUSTED, i, 1, s1, 0, cp
                return UNDECIDED, i, 1, s1, 0, pos
            if pos > nbits:
                return EXHAUSTED, i, 1, s1, 0, cp
            stage, cp = 2, pos
        if stage == 2:
            y = s2 * m + s1
            neg = _peek(buf, pos) >> _U63
            pos += 1
            if pos > nbits:
                return EXHAUSTED, i, 2, s1, s2, cp
            if neg != _U0 and y == 0:
                stage = 0
                continue
            s1 = -y if neg != _U0 else y
            stage, cp = 3, pos
        d = abs(s1) - mu
        pr = math.exp(-(d * d) * inv_two_s2)
        lo_f = (pr - margin) * _TWO64
        hi_f = (pr + margin) * _TWO64
        lo = np.uint64(lo_f) if lo_f > 0.0 else _U0
        hi = np.uint64(hi_f) if hi_f < _TWO64 else _ALL_ONES
        known = _clz(lo ^ hi)  # leading bits shared by every value in [lo, hi], so by floor(exp(-γ)·2**64)
        w = _peek(buf, pos)
        first = _clz(w ^ lo)
        if first >= known:
            if pos + 64 > nbits:
                return EXHAUSTED, i, 3, s1, 0, cp
            return UNDECIDED, i, 3, s1, 0, pos
        pos += first + 1
        if pos > nbits:
            return EXHAUSTED, i, 3, s1, 0, cp
        stage = 0
        if (w >> np.uint64(63 - first)) & _U1 == _U0:  # U has a 0 where exp(-γ) has a 1: U < exp(-γ), accept
            out[i] = s1
            i += 1
    return DONE, i, 0, 0, 0, pos


@njit(cache=True)
def randomized_response_kernel(buf, nbits, pos, out, i, stage, s1, s2, values, d, p, q):
    """Generalised randomized response: a uniform proposal in [0, d), kept if it is the true value, otherwise kept
    with probability exp(-p/q); P[out = v] ∝ e^(p/q) for the true v and 1 for each other value."""
    n = out.shape[0]
    while i < n:
        cp = pos
        c, pos = _uniform(buf, nbits, pos, d)
        if pos > nbits:
            return EXHAUSTED, i, 0, 0, 0, cp
        if c != values[i]:
            acc, pos = _bern_exp(buf, nbits, pos, p, q)
            if pos > nbits:
                return EXHAUSTED, i, 0, 0, 0, cp
            if not acc:
                continue
        out[i] = c
        i += 1
    return DONE, i, 0, 0, 0, pos


@njit(cache=True)
def exponential_kernel(buf, nbits, pos, out, i, stage, s1, s2, g_num, den):
    """Index j with probability ∝ exp(-g_num[j]/den): a uniform proposal kept with probability exp(-g_num[j]/den)."""
    n = out.shape[0]
    k = g_num.shape[0]
    while i < n:
        cp = pos
        c, pos = _uniform(buf, nbits, pos, k)
        if pos > nbits:
            return EXHAUSTED, i, 0, 0, 0, cp
        acc, pos = _bern_exp(buf, nbits, pos, g_num[c], den)
        if pos > nbits:
            return EXHAUSTED, i, 0, 0, 0, cp
        if acc:
            out[i] = c
            i += 1
    return DONE, i, 0, 0, 0, pos


# ---------------------------------------------------------------------------------------------------------
# Driver.

# Fresh words per refill at most: 512 KiB, which stays in a core's L2 cache.
MAX_WORDS = 1 << 16

Resolver = Callable[[np.ndarray, int, int, int, int, NextBit], tuple[int, int, int, int]]


class BitStream:
    """The bit stream of one sampling call: a uint64 buffer (real words, then two zero pad words) and a position."""

    def __init__(self, draw: WordSource, max_words: int = MAX_WORDS) -> None:
        self.draw = draw
        self.max_words = max(1, int(max_words))
        self.buf = np.zeros(2, dtype=np.uint64)
        self.nbits = 0
        self.pos = 0

    def refill(self, words: int) -> None:
        """Keep the unread words (from the one holding ``pos``) and append fresh ones (1 to max_words)."""
        keep = self.pos >> 6
        tail = self.buf[keep : self.nbits >> 6]
        fresh = np.asarray(self.draw(min(max(1, int(words)), self.max_words)), dtype=np.uint64)
        self.buf = np.concatenate((tail, fresh, np.zeros(2, dtype=np.uint64)))
        self.pos -= keep << 6
        self.nbits = (tail.size + fresh.size) << 6

    def next_bit(self) -> int:
        if self.pos >= self.nbits:
            self.refill(1)
        bit = (int(self.buf[self.pos >> 6]) >> (63 - (self.pos & 63))) & 1
        self.pos += 1
        return bit


def run(kernel, n: int, params: tuple, draw: WordSource, bits_per_value: float, *, max_words: int = MAX_WORDS,
        resolve: Resolver | None = None) -> np.ndarray:  # fmt: skip
    """``n`` int64 values from ``kernel``. Refills the buffer whenever the kernel runs out of bits; after UNDECIDED,
    ``resolve(out, i, stage, s1, s2, next_bit)`` settles the decision from the stream and returns where to resume."""
    out = np.empty(int(n), dtype=np.int64)
    stream = BitStream(draw, max_words)
    i, stage, s1, s2 = 0, 0, 0, 0
    rate, used, done, need = float(bits_per_value), 0, 0, True
    while i < out.size:
        if need:
            # Enough words for the rest at the rate seen so far, plus 3 %: an underestimate costs one more round.
            stream.refill(math.ceil((out.size - i) * rate * 1.03 / 64) + 1)
        pos0, i0 = stream.pos, i
        code, i, stage, s1, s2, stream.pos = kernel(stream.buf, stream.nbits, stream.pos, out, i, stage, s1, s2,
                                                    *params)  # fmt: skip
        used, done = used + stream.pos - pos0, done + i - i0
        if done:
            rate = max(used / done, 1.0)
        need = code == EXHAUSTED
        if code == UNDECIDED:
            assert resolve is not None
            i, stage, s1, s2 = resolve(out, i, stage, s1, s2, stream.next_bit)
    return out


def _settle_geometric(c: Fraction, m: int, next_bit: NextBit) -> int:
    """The geometric draw the kernel left undecided, exactly; refuses a value whose magnitude would leave int64."""
    g = geometric_decide(c, next_bit)
    if g > (1 << 62) // m:
        raise OverflowError("a noise value exceeds 2**62 in magnitude")
    return g


def _block(p: int, q: int) -> tuple[int, Fraction]:
    """Block size m and rate c = m·q/p of the magnitude of scale p/q (see the kernels' comment)."""
    m = 1 << max(0, (p // (8 * q)).bit_length() - 1)  # the largest power of two <= p/(8q), or 1
    return m, Fraction(m * q, p)


def _bits(m: int, c: Fraction) -> float:
    """Expected stream bits per magnitude: B's log2(m), G's entropy and a few bits for the decisions."""
    return (m.bit_length() - 1) + math.log2(1 + 1 / c) + 4


def discrete_laplace(draw: WordSource, p: int, q: int, n: int, *, max_words: int = MAX_WORDS) -> np.ndarray:
    """``n`` exact discrete Laplace values with P[z] ∝ exp(-|z|·q/p), for integers p, q >= 1, p/q <= 2**36."""
    m, c = _block(p, q)
    table, start = geometric_table(c.numerator, c.denominator)

    def resolve(out, i, stage, s1, s2, next_bit):
        return i, 2, s1, _settle_geometric(c, m, next_bit)

    bits = _bits(m, c) * (1.5 if p < 2 * q else 1.05)  # small scales: (negative, 0) is often rejected
    return run(laplace_kernel, n, (p, q, m, table, start), draw, bits, max_words=max_words, resolve=resolve)


def gaussian_block(sigma: float) -> int:
    """The candidates' discrete Laplace scale t: the power of two (or 1) nearest σ in the acceptance rate
    sqrt(π/2)·(σ/t)·exp(-σ²/(2t²)) (CKS 2020 take t = floor(σ) + 1; a power of two needs no rejection for B)."""
    if sigma < 1:
        return 1
    lo = 1 << (math.frexp(sigma)[1] - 1)  # lo <= σ < 2·lo

    def rate(t: int) -> float:
        return math.exp(-(sigma**2) / (2 * t * t)) / t

    return lo if rate(lo) >= rate(2 * lo) else 2 * lo


def discrete_gaussian(draw: WordSource, sigma: float, n: int, *, margin: float = GAUSSIAN_MARGIN,
                      max_words: int = MAX_WORDS) -> np.ndarray:  # fmt: skip
    """``n`` exact discrete Gaussian values with P[z] ∝ exp(-z²/(2σ²)) for the float σ exactly, 0 < σ < 2**40.
    ``margin`` is the half-width of the kernel's float bracket (tests widen it to exercise the exact path)."""
    t = gaussian_block(sigma)
    m, c = _block(t, 1)
    table, start = geometric_table(c.numerator, c.denominator)
    var = Fraction(sigma) ** 2
    mu = var / t

    def resolve(out, i, stage, s1, s2, next_bit):
        if stage == 1:
            return i, 2, s1, _settle_geometric(c, m, next_bit)
        if exp_neg_decide((abs(s1) - mu) ** 2 / (2 * var), next_bit):
            out[i] = s1
            i += 1
        return i, 0, 0, 0

    params = (float(sigma), t, m, table, start, float(margin))
    return run(gaussian_kernel, n, params, draw, 1.4 * _bits(m, c) + 3, max_words=max_words, resolve=resolve)


def randomized_response(draw: WordSource, values: np.ndarray, d: int, p: int, q: int) -> np.ndarray:
    """Generalised randomized response over [0, d) keeping the true value with weight e^(p/q) (see the kernel)."""
    v = np.ascontiguousarray(values, dtype=np.int64).ravel()
    bits = 1.5 * ((d - 1).bit_length() + 4)
    return run(randomized_response_kernel, v.size, (v, int(d), int(p), int(q)), draw, bits)


def exponential(draw: WordSource, g_num: np.ndarray, den: int, n: int) -> np.ndarray:
    """``n`` indices j with probability ∝ exp(-g_num[j]/den), g_num >= 0 with at least one 0."""
    g = np.ascontiguousarray(g_num, dtype=np.int64)
    bits = 2.0 * ((g.size - 1).bit_length() + 4)
    return run(exponential_kernel, n, (g, int(den)), draw, bits)
