"""The rank packing of repair's rank-level LPT start reads the deadline while a group of ranks is packed
(_common.first_fit_ranks' ``stop``): the same bins where it never fires, no bins where it does."""

from __future__ import annotations

import numpy as np

import packplace
from packplace.balance import make_instance
from packplace.run import Run
from packplace.solvers.balance import _common
from packplace.solvers.balance.repair import start


def _instance(n=6000, ranks=8, per_rank=160, seed=0):
    rng = np.random.default_rng(seed)
    tokens = np.clip(rng.lognormal(6, 1.0, n).astype(int), 1, 4096)
    return make_instance(tokens, seq_len=4096, data_parallel_size=ranks, local_batch_size=per_rank,
                         objective="balance")


def test_a_stop_that_never_fires_leaves_the_bins_and_one_that_fires_returns_none():
    instance = _instance()
    prepared = _common.prepare(instance)
    members = start._rank_lpt_members(instance, prepared, None)
    reads = []

    def never() -> bool:
        reads.append(1)
        return False

    plain = _common.first_fit_ranks(members, instance, prepared)
    assert _common.first_fit_ranks(members, instance, prepared, never) == plain
    longest = max(len(m) for m in members)
    assert len(reads) == longest // _common.FIRST_FIT_STOP_STEPS > 0   # once every 128 steps
    calls = []

    def second() -> bool:   # fires at its second reading: step 255 of the group
        calls.append(1)
        return len(calls) == 2

    assert _common.first_fit_ranks(members, instance, prepared, second) is None and len(calls) == 2


def test_repair_plans_are_byte_identical_with_a_generous_limit(work_clock, monkeypatch):
    instance = _instance(n=4000, ranks=16, per_rank=50, seed=3)
    original = _common.first_fit_ranks
    reads = []

    def counted(members, inst, prepared, stop=None):
        return original(members, inst, prepared, None if stop is None else lambda: reads.append(1) or stop())

    monkeypatch.setattr(start, "first_fit_ranks", counted)
    checked = packplace.balance(instance, solver="repair", time_limit_s=1000.0, seed=0)
    assert reads   # the deadline was read inside the groups, and never fired
    monkeypatch.setattr(start, "first_fit_ranks", lambda members, inst, prepared, stop=None:
                        original(members, inst, prepared))   # the packing as before: no deadline inside a group
    unchecked = packplace.balance(instance, solver="repair", time_limit_s=1000.0, seed=0)
    assert checked.solution.bins == unchecked.solution.bins
    assert (checked.status, checked.objective, checked.message) == \
        (unchecked.status, unchecked.objective, unchecked.message)
    assert not checked.hit_time_limit


def test_repair_with_the_deadline_inside_the_rank_packing_returns_no_plan_of_its_own(work_clock):
    instance = _instance()
    prepared = _common.prepare(instance)
    run = Run("balance", instance, time_limit_s=1.0)
    fired = []

    def expired() -> bool:  # the deadline passes once the rank-level LPT is done, inside the first group
        fired.append(1)
        return len(fired) > 3

    run.expired = expired  # type: ignore[method-assign]
    assert start.rank_lpt_bins(instance, prepared, run) is None
    assert len(fired) == 4   # two in the LPT over ranks, one before the first group, the fourth at its step 127
