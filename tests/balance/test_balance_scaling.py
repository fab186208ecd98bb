"""Scaling guards of the fast balance backends: the rounds fast path, repair with m > 1, time limits.

The guards check which path runs and the work counts, not wall times; the speed figures are
benchmarks/balance_speed.py's (e.g. ``--sizes 20000 --ranks 512 --per-rank 8 --objective rounds --group-size 8``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import packplace
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import make_instance
from packplace.solvers.balance import lpt as lpt_module


def _long_tailed(n, ranks, per_rank, *, integer_costs=False, seed=0, seq_len=32768, **kwargs):
    rng = np.random.default_rng(seed)
    median = min(1024.0, 0.8 * seq_len * ranks * per_rank / (n * math.exp(0.5)))
    tokens = np.clip(np.rint(rng.lognormal(math.log(median), 1.0, n)), 1, seq_len).astype(int)
    costs = tokens + tokens.astype(float) ** 2 / 4096
    if integer_costs:
        costs = np.rint(costs)
    return make_instance(tokens.tolist(), costs.tolist(), seq_len=seq_len, data_parallel_size=ranks,
                         local_batch_size=per_rank, **kwargs)


def test_rounds_fast_path_matches_general_path_mid_size():
    # 3000 samples on 64 ranks x 4 bins in rounds of 8, integer costs (no float rounding): the
    # leader-zone path must give exactly the bins of the per-bin numpy path.
    inst = _long_tailed(3000, 64, 4, integer_costs=True, objective="rounds", group_size=8)
    prepared = lpt_module.prepare(inst)
    assert lpt_module.lpt_bins(inst, prepared) == lpt_module._lpt_vectorized(inst, prepared, None)


def test_rounds_without_padding_takes_the_leader_zone_path(monkeypatch):
    # The rounds objective without padding or budgets never runs the per-bin numpy path (the slow one at
    # scale: benchmarks/balance_speed.py --objective rounds), at any size.
    def general_path(*args, **kwargs):
        raise AssertionError("the per-bin numpy path ran")

    monkeypatch.setattr(lpt_module, "_lpt_vectorized", general_path)
    inst = _long_tailed(5000, 128, 8, objective="rounds", group_size=8)
    result = packplace.balance(inst, solver="lpt", time_limit_s=60)
    assert result.status == "feasible" and not result.hit_time_limit
    assert result.objective == pytest.approx(BalanceEvaluator(inst).objective(result.solution))


def test_rounds_time_limit_is_unknown_not_partial():
    inst = _long_tailed(20000, 512, 8, objective="rounds", group_size=8)
    result = packplace.balance(inst, solver="lpt", time_limit_s=0.01)
    assert result.status == "unknown" and result.solution is None and result.hit_time_limit
    assert "time limit reached after" in result.message


def test_repair_improves_m4_at_scale():
    # 8192 samples on 512 ranks x 4 bins: LPT's first 2048 placements fill empty bins, leaving a
    # 4.4 % gap; the rank local search closes most of it within its default 64 rank-pair checks.
    inst = _long_tailed(8192, 512, 4)
    lpt = packplace.balance(inst, solver="lpt")
    repair = packplace.balance(inst, solver="repair")
    assert repair.ok and repair.iterations <= 64 and not repair.hit_time_limit
    assert repair.gap < 0.5 * lpt.gap
