"""The one Gaussian release of a bounded-norm sum (privpix.privacy.gaussian_release): calibration by dp-accounting
(analytic and RDP), exact fixed-point sums, the rounding bound, and the exact discrete Gaussian noise actually added."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privpix.errors import ParameterError
from privpix.privacy import gaussian_release as gr
from privpix.privacy.noise import make_rng


@pytest.mark.parametrize("eps", [0.5, 1.0, 10.0])
def test_rdp_multiplier_is_tight_and_never_below_the_analytic_one(eps):
    delta = 1e-5
    z = gr.rdp_noise_multiplier(eps, delta)
    assert gr.rdp_epsilon(z, delta) <= eps
    assert gr.rdp_epsilon(z * (1 - 1e-6), delta) > eps  # the smallest such z, to the bisection's precision
    assert z >= gr.analytic_noise_multiplier(eps, delta)


def test_rdp_multiplier_known_value():
    # ε = 1, δ = 1e-5: the analytic curve needs z = 3.7306; RDP with dp-accounting's conversion a few % more.
    z = gr.rdp_noise_multiplier(1.0, 1e-5)
    assert 3.73 < z < 4.2


@pytest.mark.parametrize("eps,delta", [(0.0, 1e-5), (1.0, 0.0), (1.0, 1.0)])
def test_bad_budget_is_refused(eps, delta):
    with pytest.raises(ParameterError, match="epsilon > 0 and delta"):
        gr.rdp_noise_multiplier(eps, delta)


def _unit_rows(rng, m, w):
    x = rng.standard_normal((m, w))
    return x / np.linalg.norm(x, axis=1, keepdims=True) * rng.random((m, 1))


def test_fixed_point_sum_does_not_depend_on_order_or_batching():
    rng = np.random.default_rng(0)
    rows, groups = _unit_rows(rng, 300, 17), rng.integers(0, 4, 300)
    a = gr.FixedPointSum(4, 17)
    a.add(rows, groups)
    b = gr.FixedPointSum(4, 17)
    perm = rng.permutation(300)
    for chunk in np.array_split(perm, 7):
        b.add(rows[chunk], groups[chunk])
    assert np.array_equal(a.total, b.total) and a.rows == b.rows == 300
    np.testing.assert_allclose(a.total / a.scale, [rows[groups == k].sum(0) for k in range(4)], atol=300 / a.scale)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(1, 12), st.integers(0, 2**32))
def test_rounding_never_exceeds_the_stated_bound(width, bits, seed):
    # Worst cases for the rounding: rows of norm exactly 1 (and a hair above it, which is scaled down).
    rng = np.random.default_rng(seed)
    rows = _unit_rows(rng, 20, width)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows[0] *= 1 + 1e-7
    acc = gr.FixedPointSum(1, width, bits)
    for r in rows:
        one = gr.FixedPointSum(1, width, bits)
        one.add(r[None], np.zeros(1, np.int64))
        assert np.linalg.norm(one.total[0].astype(np.float64)) <= acc.bound


def test_replacing_one_row_moves_the_total_by_at_most_twice_the_bound():
    rng = np.random.default_rng(1)
    rows, groups = _unit_rows(rng, 50, 9), rng.integers(0, 3, 50)
    a, b = gr.FixedPointSum(3, 9, 4), gr.FixedPointSum(3, 9, 4)
    a.add(rows, groups)
    rows2, groups2 = rows.copy(), groups.copy()
    rows2[10], groups2[10] = -rows[10] / np.linalg.norm(rows[10]), (groups[10] + 1) % 3
    b.add(rows2, groups2)
    assert np.linalg.norm((a.total - b.total).astype(np.float64)) <= 2 * a.bound


def test_bad_rows_are_refused():
    acc = gr.FixedPointSum(2, 3)
    with pytest.raises(ValueError, match="rows must be"):
        acc.add(np.zeros((2, 4)), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="groups must lie"):
        acc.add(np.zeros((2, 3)), np.array([0, 2]))
    with pytest.raises(ValueError, match="finite"):
        acc.add(np.full((1, 3), np.nan), np.zeros(1, np.int64))
    with pytest.raises(ParameterError, match="bits"):
        gr.FixedPointSum(1, 3, bits=40)


def test_exact_release_adds_integer_noise_of_the_calibrated_scale():
    acc = gr.FixedPointSum(4, 2500, bits=8)
    acc.add(_unit_rows(np.random.default_rng(2), 40, 2500), np.arange(40) % 4)
    rel = gr.exact_gaussian_release(acc, 1.0, 1e-5, make_rng(3))
    noise = (rel.noisy_total - acc.total).astype(np.float64).ravel()
    assert rel.noisy_total.dtype == np.int64
    sigma_int = rel.sigma * rel.scale
    assert sigma_int >= rel.noise_multiplier * 2 * acc.bound
    # 10,000 draws: sample sd within 5 standard errors (false alarm < 1e-6; fixed seed).
    assert abs(noise.std() / sigma_int - 1) < 5 / math.sqrt(2 * noise.size)
    again = gr.exact_gaussian_release(acc, 1.0, 1e-5, make_rng(3))
    assert np.array_equal(again.noisy_total, rel.noisy_total)
    assert rel.info()["accountant"] == gr.RDP
