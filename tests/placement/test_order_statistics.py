"""The response lengths a continuously batched decode runs on: the expected order statistics of the batch's draws
from the workload's piecewise-linear quantile function (exact, by the Beta densities of uniform order
statistics), rounded so that the total keeps ``n`` times the mean and the longest is the batch's expected
longest rounded up."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from scipy.special import betainc
from scipy.stats import beta

from packplace.placement.model.engine import ordered_lengths, response_lengths
from packplace.placement.problem.workload import Workload, _rank_tails, expected_longest, expected_order_statistics

#: 99% of the responses at most 100 tokens (Q = 1 + 100·u up to 0.99), then a thin tail to the 849-token cap.
THIN_TAIL = Workload(16, 1, 8, 849, ((0.99, 100.0),))


@pytest.mark.parametrize("n", [1, 2, 3, 10, 257])
@pytest.mark.parametrize("a, b", [(100.0, 300.0), (1.0, 8192.0)])
def test_uniform_order_statistics_are_evenly_spaced(n, a, b):
    # uniform on [a, b]: U_(i) has mean i/(n + 1), so E[X_(i)] = a + (b − a)·i/(n + 1)
    i = np.arange(1, n + 1)
    assert np.allclose(expected_order_statistics([0.0, 1.0], [a, b], n), a + (b - a) * i / (n + 1), rtol=1e-12)


def test_one_draw_is_the_mean():
    # Q = 1 + 200·u to the median 101, then 101 + 1,798·(u − ½) to the 1,000 cap: mean ½·51 + ½·550.5 = 300.75
    w = Workload(3, 1, 8, 1000, ((0.5, 101.0),))
    assert expected_order_statistics(*w._quantile_points, 1).tolist() == pytest.approx([300.75], rel=1e-12)
    assert ordered_lengths(w, 1).tolist() == [301.0] == [float(w.longest_response(1))]


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_a_two_point_atom_by_hand(n):
    # half the draws 100, half 300, the jump at ½ a zero-width segment: the i-th smallest is 300 when fewer
    # than i of the n draws are short, E = 100 + 200·P(Bin(n, ½) < i); n = 2: 150, 250
    got = expected_order_statistics([0.0, 0.5, 0.5, 1.0], [100.0, 100.0, 300.0, 300.0], n)
    hand = [100 + 200 * sum(math.comb(n, k) for k in range(i)) / 2**n for i in range(1, n + 1)]
    assert got.tolist() == pytest.approx(hand, rel=1e-12)
    if n == 2:
        assert got.tolist() == pytest.approx([150.0, 250.0], rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 31, 1000, 65_536])
@pytest.mark.parametrize("u", [1e-9, 0.01, 0.5, 0.99, 1 - 1e-7])
def test_rank_tails_are_the_regularised_incomplete_beta(n, u):
    # I_u(i + e, n − i + 1) for e = 0 and 1, against scipy's betainc
    i = np.arange(1, n + 1, dtype=float)
    for extra in (0, 1):
        assert np.allclose(_rank_tails(n, u, extra), betainc(i + extra, n - i + 1, u), rtol=0, atol=1e-12)


def test_the_integrals_against_quadrature():
    # E[X_(i:n)] = ∫ Q(u)·Beta(u; i, n − i + 1) du, numerically, on a three-segment table
    qs, ts = np.array([0.0, 0.3, 0.9, 1.0]), np.array([5.0, 40.0, 700.0, 2000.0])
    n = 40
    got = expected_order_statistics(qs, ts, n)
    for i in (1, 7, 20, 36, 40):
        value, _ = quad(lambda u, i=i: float(np.interp(u, qs, ts)) * beta.pdf(u, i, n - i + 1), 0.0, 1.0,
                        points=[0.3, 0.9], limit=200, epsabs=1e-10, epsrel=1e-12)
        assert got[i - 1] == pytest.approx(value, rel=1e-9)


def test_the_thin_tail_decodes_to_its_expected_longest():
    # the stratified sample's longest of 16, Q(31/32) = 1 + 100·0.96875 = 97.875 -> 98, missed the tail; the
    # expected longest of 16 = ∫ Q·16u^15 du: 1·0.99^16 + 100·(16/17)·0.99^17 on the body; the tail
    # Q = −74,051 + 74,900·u gives −74,051·(1 − 0.99^16) + 74,900·(16/17)·(1 − 0.99^17)
    by_hand = (0.99**16 + 100 * 16 / 17 * 0.99**17 - 74051 * (1 - 0.99**16) + 74900 * 16 / 17 * (1 - 0.99**17))
    assert by_hand == pytest.approx(152.0677, abs=1e-3)
    assert THIN_TAIL.expected_max_response(16) == pytest.approx(by_hand, rel=1e-12)
    assert THIN_TAIL.quantile(31 / 32) == pytest.approx(97.875)
    lengths = ordered_lengths(THIN_TAIL, 16)
    assert lengths[-1] == THIN_TAIL.max_response == 153
    assert abs(lengths.sum() - 16 * THIN_TAIL.mean_response) <= 1.5


def test_the_arrival_order_is_fixed_and_a_permutation():
    w = Workload(64, 4, 16, 4096, ((0.5, 300.0), (0.95, 2000.0)))
    first = response_lengths(w, 256)
    assert np.array_equal(first, response_lengths(w, 256))
    assert np.array_equal(np.sort(first), ordered_lengths(w, 256))
    assert not np.array_equal(first, ordered_lengths(w, 256))   # shuffled


def test_bad_counts_are_one_line_errors():
    with pytest.raises(ValueError, match="count must be an integer of at least 1, got 0"):
        ordered_lengths(THIN_TAIL, 0)
    with pytest.raises(ValueError, match="n \\(draws\\) must be an integer of at least 1, got 2.5"):
        expected_order_statistics([0.0, 1.0], [1.0, 2.0], 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="qs and ts must be 1-D of one length"):
        expected_order_statistics([0.0, 1.0], [1.0, 2.0, 3.0], 2)


@st.composite
def tables(draw):
    """Quantile tables as a config gives them (quantiles on a 1/1000 grid, increasing; tokens non-decreasing in
    [1, T]) and, half the time, one atom (a repeated quantile)."""
    cap = draw(st.integers(1, 50_000))
    k = draw(st.integers(0, 6))
    qs = sorted(draw(st.sets(st.integers(1, 999), min_size=k, max_size=k)))
    ts = sorted(draw(st.lists(st.floats(1.0, float(cap)), min_size=k, max_size=k)))
    points = [(q / 1000, t) for q, t in zip(qs, ts, strict=True)]
    if points and draw(st.booleans()):
        j = draw(st.integers(0, len(points) - 1))
        q, t = points[j]
        points.insert(j + 1, (q, draw(st.floats(t, float(cap)))))
        points[j + 2:] = [(q2, max(t2, points[j + 1][1])) for q2, t2 in points[j + 2:]]
    return Workload(1, 1, 8, cap, tuple(points) or None)


@settings(max_examples=60, deadline=None)
@given(tables(), st.integers(1, 3000))
def test_order_statistics_properties(w, n):
    qs, ts = w._quantile_points
    e = expected_order_statistics(qs, ts, n)
    assert e.sum() == pytest.approx(n * w.mean_response, rel=1e-9)            # Σ_i Beta(i, n − i + 1) = n
    assert e[-1] == pytest.approx(expected_longest(qs, ts, n), rel=1e-9)
    assert np.all(np.diff(e) >= -1e-9 * w.generation_length)
    assert ts[0] <= e.min() and e.max() <= ts[-1]
    lengths = ordered_lengths(w, n)
    assert np.all(lengths == np.round(lengths)) and 1 <= lengths.min() and lengths.max() <= w.generation_length
    assert np.all(np.diff(lengths) >= 0)
    assert lengths[-1] == w.longest_response(n)
    assert abs(lengths.sum() - n * w.mean_response) < 1.5
    assert np.all(np.abs(lengths - e) <= 1.0 + 1e-6)


@pytest.mark.parametrize("n", [4096, 65_536])
def test_large_batches_keep_the_sum_and_the_top(n):
    w = Workload(n, 1, 16, 8192, ((0.9, 500.0), (0.99, 4000.0)))
    qs, ts = w._quantile_points
    e = expected_order_statistics(qs, ts, n)
    assert e.sum() == pytest.approx(n * w.mean_response, rel=1e-9)
    assert e[-1] == pytest.approx(expected_longest(qs, ts, n), rel=1e-9)
    assert np.all(np.diff(e) >= -1e-6)
    # the uniform order statistics inside the first segment: U_(i) ≈ i/(n + 1), Q linear there
    i = n // 2
    assert e[i - 1] == pytest.approx(w.quantile(i / (n + 1)), rel=1e-3)
