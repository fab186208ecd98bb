"""A padded pass's memory holds at least the expected longest of any micro-batch its time pays for
(:attr:`~packplace.placement.problem.workload.Workload.peak_response`): where the response lengths have a long
tail, the expected longest of the step's responses exceeds ``Q(n/(n+1))`` (Jensen: ``Q`` convex there)."""

from __future__ import annotations

import numpy as np
import pytest

from packplace.placement.model.memory import dynamic_peak_tokens, peak_pass_tokens
from packplace.placement.problem.workload import Workload

# 99% of the responses within 100 tokens, the last 1% reaching the 10,000-token cap: Q(u) = 1 + 100·u on
# [0, 0.99], then 100 + 990,000·(u − 0.99)
TAIL = Workload(batch_size=16, samples_per_prompt=1, context_length=64, generation_length=10_000,
                gen_quantiles=((0.99, 100.0),))


def _numeric_longest(m: int) -> float:
    # E[Q(U)] with U the largest of m uniforms (density m·u^(m−1)), by the trapezoid rule on a fine grid
    u = np.linspace(0.0, 1.0, 2_000_001)
    q = np.where(u <= 0.99, 1.0 + 100.0 * u, 100.0 + 990_000.0 * (u - 0.99))
    f = q * m * u ** (m - 1)
    return float(np.sum((f[1:] + f[:-1]) * 0.5 * np.diff(u)))


def test_the_long_tail_puts_the_expected_longest_above_the_plug_in_maximum():
    n = TAIL.sequences
    # Q(16/17) = 1 + 100·16/17 = 95.1 -> 96 tokens; E[longest of 16]: about 849 tokens (numerically), the
    # tail reached with probability 1 − 0.99^16 = 0.149
    assert int(np.ceil(TAIL.quantile(n / (n + 1)))) == 96
    expected = _numeric_longest(n)
    assert 800.0 < expected < 950.0
    assert TAIL.expected_max_response(n) == pytest.approx(expected, rel=1e-6)
    # the decode runs to the expected longest, and memory holds it
    assert TAIL.max_response == TAIL.peak_response == int(np.ceil(expected))


@pytest.mark.parametrize("m", [1, 2, 4, 8, 16])
def test_memory_holds_every_micro_batch_a_padded_pass_pays_for(m):
    # the pass's time pays m x (S + E[longest of m]) tokens a micro-batch; the memory's largest micro-batch
    # holds m x (S + peak_response): never fewer
    padded = m * TAIL.padded_seq_len(m)
    assert peak_pass_tokens(TAIL, m) >= padded
    assert peak_pass_tokens(TAIL, m) == m * (64 + TAIL.peak_response)
    # verl's dynamic batch size: one sequence of the step's longest above the budget
    assert dynamic_peak_tokens(TAIL, 16, 4_096) == 4_096 + 64 + TAIL.peak_response


@pytest.mark.parametrize("workload", [
    Workload(batch_size=8, samples_per_prompt=4, context_length=16, generation_length=300,
             gen_quantiles=((0.0, 100.0),)),                  # uniform on [100, 300]: E = Q(n/(n+1))
    Workload(batch_size=8, samples_per_prompt=1, context_length=16, generation_length=512),   # all at the cap
])
def test_where_the_top_of_the_quantile_function_is_linear_nothing_moves(workload):
    assert workload.peak_response == workload.max_response
