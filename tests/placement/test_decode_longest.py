"""The decode runs to the step's expected longest response (:attr:`Workload.max_response`): ``E[longest of n]``
rounded up, not ``Q(n/(n+1))``, which falls short of it where the quantile function is convex at the top; the
memory's :attr:`Workload.peak_response` still holds it, and the decoded tokens only gain the added tail."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.memory import peak_pass_tokens
from packplace.placement.problem.hardware import Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

FREE = {k: 0.0 for k in Hardware.__dataclass_fields__ if k.startswith(("alpha", "beta"))}
#: Free compute and memory: every decode iteration costs exactly the 10 ms per-step overhead.
OVERHEAD_ONLY = Hardware(flops_per_gpu=1e30, memory_per_gpu=80e9, memory_bandwidth=1e30, **FREE,
                         decode_step_overhead=0.01)
SMALL = ModelSpec(layers=2, hidden_dim=128, ffn_dim=256, vocab_size=100, head_dim=64)

#: Two segments, convex: Q(u) = 1 + 200·u on [0, 0.5], then 101 + 1,798·(u − 0.5) up to the 1,000-token cap.
CONVEX = Workload(batch_size=3, samples_per_prompt=1, context_length=8, generation_length=1000,
                  gen_quantiles=((0.5, 101.0),))


def _plug_in(w: Workload) -> int:
    """``Q(n/(n+1))`` rounded up with the model's guard against float noise (``ceil(x - 1e-9)``, as
    ``Workload.max_response`` rounds: a quantile of 24.000000000000004 is 24 iterations): the decode's former
    iteration count."""
    n = w.sequences
    return max(1, min(w.generation_length, math.ceil(w.quantile(n / (n + 1)) - 1e-9)))


@pytest.mark.parametrize("batch, samples", [(3, 1), (2, 2), (16, 4)])
def test_uniform_responses_keep_the_plug_in_maximum(batch, samples):
    # uniform on [100, 300]: E[longest of n] = 100 + 200·n/(n + 1) = Q(n/(n + 1)); n = 3: 250, n = 4: 260
    w = Workload(batch, samples, 16, 300, ((0.0, 100.0),))
    n = w.sequences
    assert w.expected_max_response(n) == pytest.approx(100 + 200 * n / (n + 1), rel=1e-12)
    assert w.max_response == _plug_in(w) == math.ceil(100 + 200 * n / (n + 1) - 1e-9)
    assert w.peak_response == w.max_response


def test_a_convex_table_decodes_to_the_expected_longest_by_hand():
    # n = 3: Q(3/4) = 101 + 1,798/4 = 550.5 -> 551 iterations before; E[longest of 3] = ∫Q(u)·3u² du:
    #   [0, 0.5]: 1·0.5³ + 200·(3/4)·0.5⁴ = 0.125 + 9.375 = 9.5
    #   [0.5, 1]: Q(u) = −798 + 1,798·u: −798·(1 − 0.125) + 1,798·(3/4)·(1 − 0.0625) = 565.96875
    #   E = 575.46875 -> 576 iterations
    assert _plug_in(CONVEX) == 551
    assert CONVEX.expected_max_response(3) == pytest.approx(575.46875, rel=1e-12)
    assert CONVEX.max_response == 576 and CONVEX.longest_response(3) == 576
    assert len(CONVEX.active_fraction) == 576 and CONVEX.peak_response == 576
    # one response: its expected length, the mean 0.5·(1 + 101)/2 + 0.5·(101 + 1,000)/2 = 300.75, not the
    # median Q(1/2) = 101
    assert CONVEX.mean_response == pytest.approx(300.75)
    assert CONVEX.longest_response(1) == 301


def test_the_added_iterations_decode_only_the_tail():
    # 1 − F(t − 1) = (1,001 − t)/1,798 on the second segment: the iterations 552..576 add
    # Σ (1,001 − t)/1,798 = 25·437/1,798 of a sequence each; the first 551 are as before
    frac = CONVEX.active_fraction
    assert frac[551:].sum() == pytest.approx(25 * 437 / 1798, rel=1e-12)
    assert frac[:551].sum() == pytest.approx(CONVEX._active_at(np.arange(1.0, 552.0)).sum(), rel=1e-15)
    # the sum is E[min(⌈X⌉, 576)]: 1 (t = 1) + Σ_{t=2..102} (1 − (t − 2)/200) = 75.75
    # + Σ_{t=103..576} (1,001 − t)/1,798 = 474·661.5/1,798
    assert frac.sum() == pytest.approx(1 + 75.75 + 474 * 661.5 / 1798, rel=1e-12)
    assert frac.sum() < CONVEX.mean_response + 1


def test_static_rounds_run_the_expected_longest_iterations():
    # one replica, one round of the 3 sequences; every iteration 10 ms, compute free: 576 iterations
    cost = CostModel(OVERHEAD_ONLY, Cluster(1, 1, 1), CONVEX, RolloutEngine("static", 3))
    assert cost.generate_time(SMALL, 1, 1, 1, 3, (1, 1, 1)) == pytest.approx(5.76, rel=1e-9)


def test_every_response_at_the_cap_decodes_the_cap():
    w = Workload(8, 2, 16, 512)
    assert w.max_response == w.peak_response == w.longest_response(1) == 512
    assert np.array_equal(w.active_fraction, np.ones(512))
    assert w.active_fraction.sum() == w.mean_response == 512


@st.composite
def convex_tables(draw):
    """A convex piecewise-linear quantile function from ``(0, 1)``: increasing slopes, the last segment to the
    cap (``T`` rounded up keeps its slope the steepest)."""
    k = draw(st.integers(1, 4))
    cuts = sorted(draw(st.lists(st.floats(0.05, 0.95), min_size=k, max_size=k, unique=True)))
    slopes = sorted(draw(st.lists(st.floats(1.0, 5_000.0), min_size=k + 1, max_size=k + 1)))
    points, t, q = [], 1.0, 0.0
    for cut, slope in zip(cuts, slopes, strict=False):
        t += slope * (cut - q)
        points.append((cut, t))
        q = cut
    cap = math.ceil(t + slopes[-1] * (1.0 - q))
    n = draw(st.integers(1, 512))
    return Workload(n, 1, 32, cap, tuple(points))


@given(convex_tables())
@example(Workload(1, 1, 32, 47, ((0.05, 3.3000000000000003),)))   # Q(1/2) = 24.000000000000004: 24 iterations
@settings(max_examples=60, deadline=None)
def test_a_convex_top_never_shortens_the_decode(w):
    # Jensen: E[Q(U)] ≥ Q(E[U]) for convex Q, so the decode is never shorter than before (but for the rounding
    # guard) and never beyond the cap; memory holds it; the decoded tokens only gain the added iterations' tail
    n = w.sequences
    assert w.expected_max_response(n) >= w.quantile(n / (n + 1)) - 1e-6 * w.generation_length
    assert _plug_in(w) - 1 <= w.max_response <= w.generation_length
    assert w.peak_response >= w.max_response
    before = w._active_at(np.arange(1.0, _plug_in(w) + 1.0)).sum()
    assert w.active_fraction.sum() >= before - 1e-9
    assert w.active_fraction.sum() <= w.mean_response + 1 + 1e-9


@given(st.lists(st.tuples(st.floats(0.01, 0.99), st.floats(1.0, 4_000.0)), min_size=1, max_size=4),
       st.integers(1, 256), st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_memory_holds_the_decodes_longest(points, n, m):
    # any table (monotone): 1 ≤ decode ≤ T; the memory's longest is at least the decode's and every
    # micro-batch's expected longest, and a pass's peak micro-batch holds the decode's longest sequences
    qs = sorted({round(q, 6) for q, _ in points})
    ts = sorted(t for _, t in points)[:len(qs)]
    w = Workload(n, 1, 32, 4_000, tuple(zip(qs, ts, strict=True)))
    assert 1 <= w.max_response <= w.generation_length
    assert w.peak_response >= w.max_response >= w.longest_response(min(m, n))
    assert peak_pass_tokens(w, m) >= m * (w.context_length + w.max_response)
    assert len(w.active_fraction) == w.max_response
    assert w.active_fraction.sum() <= w.mean_response + 1 + 1e-9
