"""Planted perfect packings (the ``planted`` generator, benchmarks/planted_packings.py): known optima."""

from __future__ import annotations

import pytest

import packplace
from packplace.harness.generators import planted_balance


@pytest.mark.parametrize(("ranks", "per_rank", "samples", "fill", "seed", "optimum"), [
    # every bin holds floor(fill · 8192) tokens and cost = tokens, so each rank carries m of those:
    (2, 2, 5, 0.97, 21, 2 * 7946),   # floor(0.97 · 8192) = floor(7946.24)
    (3, 2, 4, 0.99, 5, 2 * 8110),    # floor(0.99 · 8192) = floor(8110.08)
    (2, 1, 6, 0.95, 8, 7782),        # floor(0.95 · 8192) = floor(7782.4)
    (4, 2, 3, 0.98, 13, 2 * 8028),   # floor(0.98 · 8192) = floor(8028.16)
])
def test_cpsat_recovers_the_planted_optimum(ranks, per_rank, samples, fill, seed, optimum):
    made = planted_balance(ranks=ranks, bins_per_rank=per_rank, samples_per_rank=samples, seq_len=8192,
                           fill=fill, seed=seed)
    assert made.optimum == optimum
    result = packplace.balance(made.instance, solver="cpsat", time_limit_s=30)
    assert result.status == "optimal" and result.objective == optimum


@pytest.mark.parametrize("seed", range(3))
def test_lns_on_a_planted_packing_is_never_worse_than_repair(seed):
    made = planted_balance(ranks=6, bins_per_rank=2, samples_per_rank=7, seq_len=8192, fill=0.98, seed=seed)
    repair = packplace.balance(made.instance, solver="repair")
    lns = packplace.balance(made.instance, solver="lns", time_limit_s=5, max_neighbourhoods=10, seed=seed)
    assert made.optimum is not None and made.optimum <= lns.objective <= repair.objective
