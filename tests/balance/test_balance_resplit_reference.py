"""The pair re-split's cheaper split check gives the plans of the plain one.

:meth:`_Resplit.split` builds the cost table alone (the halves' sums by :func:`_half_sums`), keeps the masks in
the cost window first and tests tokens and counts on those masks only (:func:`_sums_at`). The slow reference
(the code as it read before: every table built by doubling, every test on the whole table) is kept here:
hand-checked small cases, then hypothesis properties "same floats", "same split" and "same ``repair`` plan".
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import make_instance
from packplace.harness.generators import cost_function, planted_balance
from packplace.solvers.balance._common import prepare
from packplace.solvers.balance.repair.acceptance import IMPROVEMENT_RTOL

resplit_module = importlib.import_module("packplace.solvers.balance.repair.resplit")
_Resplit = resplit_module._Resplit
_half_sums, _subset_sums, _sums_at = resplit_module._half_sums, resplit_module._subset_sums, resplit_module._sums_at
_window_empty = resplit_module._window_empty


# ------------------------------------------------------------------------------------- references
def _reference_subset_sums(values: np.ndarray) -> np.ndarray:
    """:func:`_subset_sums` as it read before: each half's table doubled one value at a time."""
    half = len(values) // 2
    low = np.zeros(1, dtype=values.dtype)
    for value in values[:half]:
        low = np.concatenate((low, low + value))
    high = np.zeros(1, dtype=values.dtype)
    for value in values[half:]:
        high = np.concatenate((high, high + value))
    return (high[:, None] + low[None, :]).ravel()


def _reference_split(self, heavy: int, light: int):
    """:meth:`_Resplit.split` as it read before: cost, token and count tables whole, every test on all masks."""
    members, loads, costs, tokens = self.members, self.loads, self.costs, self.tokens
    per_rank, capacity = self.per_rank, self.capacity
    pool = members[heavy] + members[light]
    if len(pool) > resplit_module.FREE_SAMPLES:
        free = sorted(self.rng.sample(range(len(pool)), resplit_module.FREE_SAMPLES))
    else:
        free = list(range(len(pool)))
    free_set = set(free)
    fixed_heavy = [pool[k] for k in range(len(members[heavy])) if k not in free_set]
    fixed_light = [pool[k] for k in range(len(members[heavy]), len(pool)) if k not in free_set]
    chosen = np.array([pool[k] for k in free], dtype=np.int64)
    cost_sums = _reference_subset_sums(costs[chosen])
    token_sums = _reference_subset_sums(tokens[chosen].astype(np.int64))
    total_cost = float(loads[heavy] + loads[light])
    ceiling = loads[heavy] - IMPROVEMENT_RTOL * abs(loads[heavy])
    base_cost = math.fsum(costs[fixed_heavy].tolist())
    base_tokens = int(tokens[fixed_heavy].sum())
    room = per_rank * capacity
    total_tokens = int(tokens[pool].sum())
    low_count, high_count = per_rank - len(fixed_heavy), len(pool) - per_rank - len(fixed_heavy)
    ok = (cost_sums < ceiling - base_cost) & (cost_sums > total_cost - ceiling - base_cost)
    ok &= (token_sums <= room - base_tokens) & (token_sums >= total_tokens - room - base_tokens)
    if low_count > 0 or high_count < len(free):
        counts = _reference_subset_sums(np.ones(len(free), dtype=np.int64))
        ok &= (counts >= low_count) & (counts <= high_count)
    masks = np.flatnonzero(ok)
    if masks.size == 0:
        return None
    heavy_cost = base_cost + cost_sums[masks]
    larger = np.maximum(heavy_cost, total_cost - heavy_cost)
    if masks.size > resplit_module.PACK_CANDIDATES:
        part = np.argpartition(larger, resplit_module.PACK_CANDIDATES - 1)[:resplit_module.PACK_CANDIDATES]
        masks, larger = masks[part], larger[part]
    masks = masks[np.lexsort((masks, larger))]
    for mask in masks.tolist():
        to_heavy = fixed_heavy + [int(chosen[j]) for j in range(len(free)) if (mask >> j) & 1]
        to_light = fixed_light + [int(chosen[j]) for j in range(len(free)) if not (mask >> j) & 1]
        heavy_bins = resplit_module.pack_bins(to_heavy, tokens, per_rank, capacity)
        if heavy_bins is None:
            continue
        light_bins = resplit_module.pack_bins(to_light, tokens, per_rank, capacity)
        if light_bins is None:
            continue
        return heavy_bins, light_bins
    return None


@contextlib.contextmanager
def _reference_resplit() -> Iterator[None]:
    """Every re-split (``repair``'s and ``lns``'s) with the reference split check."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Resplit, "split", _reference_split)
        yield


def _same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ------------------------------------------------------------------------------------- hand-checked
def test_half_sums_add_in_bit_order():
    # masks of 3 bits over (1, 10, 100): entry 5 = 0b101 holds 1 + 100, entry 6 = 0b110 holds 10 + 100
    assert _half_sums(np.array([1, 10, 100])).tolist() == [0, 1, 10, 11, 100, 101, 110, 111]
    assert _half_sums(np.zeros(0)).tolist() == [0.0]
    # 0.1 + 0.2 + 0.3 in this order is 0.6000000000000001; 0.1 + (0.2 + 0.3) would be 0.6
    assert _half_sums(np.array([0.1, 0.2, 0.3]))[7] == (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3)


def test_sums_at_reads_the_table_at_the_masks():
    values = np.array([3, 5, 7, 11, 13], dtype=np.int64)  # halves (3, 5) and (7, 11, 13)
    masks = np.array([0, 1, 6, 31, 20])  # 0b10100 = 7 + 13 (bits 2 and 4)
    assert _sums_at(values, masks).tolist() == [0, 3, 12, 39, 20]
    assert _sums_at(values, masks).tolist() == _subset_sums(values)[masks].tolist()


def test_split_matches_the_reference_on_a_hand_case():
    # m = 1, seq_len 100, cost = tokens: ranks [40, 33] (73) and [30, 21] (51); 40+21 | 33+30 is the best
    tokens = np.array([40, 33, 30, 21])
    for split in (_Resplit.split, _reference_split):
        search = _Resplit([[0, 1], [2, 3]], tokens, tokens.astype(float), 2, 1, 100, 0)
        heavy, light = split(search, 0, 1)
        assert sorted(sorted(int(tokens[i]) for i in b) for b in (*heavy, *light)) == [[21, 40], [30, 33]]


def test_window_empty_sees_an_entry_at_either_edge():
    values = np.array([0.1, 0.2, 0.3, 0.7])  # entry 0b0111 = 0.6000000000000001 (bit order 0.1, 0.2, 0.3)
    entry = float(_subset_sums(values)[7])
    assert entry == 0.6000000000000001
    assert not _window_empty(values, np.nextafter(entry, 0.0), 0.65)  # just above the lower edge
    assert not _window_empty(values, 0.55, np.nextafter(entry, 1.0))  # just below the upper edge
    # (0.6, 0.6000000000000001) is an open window of no float: nothing lies in it, but the margin sees 0.6's
    # neighbours, so the answer is "maybe" (False), never a wrong "empty"
    assert not _window_empty(values, 0.6, entry)
    assert _window_empty(values, 0.75, 0.79)  # 0.7 and 0.8 (0.1 + 0.7) are the nearest entries


# ------------------------------------------------------------------------------------- properties
@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 1e15, allow_nan=False, allow_infinity=False), min_size=1, max_size=14), st.data())
def test_window_empty_only_where_the_table_has_no_entry_inside(values, data):
    array = np.array(values, dtype=np.float64)
    table = _subset_sums(array)
    # edges at entries, at their float neighbours, or anywhere in the table's range
    edge = st.one_of(st.sampled_from(table.tolist()),
                     st.sampled_from(table.tolist()).map(lambda x: float(np.nextafter(x, np.inf))),
                     st.sampled_from(table.tolist()).map(lambda x: float(np.nextafter(x, -np.inf))),
                     st.floats(-1.0, float(table.max()) + 1.0))
    above, below = sorted((data.draw(edge), data.draw(edge)))
    inside = int(((table < below) & (table > above)).sum())
    if _window_empty(array, above, below):
        assert inside == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e15, allow_nan=False, allow_infinity=False), max_size=14))
def test_subset_sums_float_bits_equal_the_reference(values):
    array = np.array(values, dtype=np.float64)
    assert _same_floats(_subset_sums(array), _reference_subset_sums(array))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1 << 40), max_size=14), st.data())
def test_integer_sums_equal_the_reference(values, data):
    array = np.array(values, dtype=np.int64)
    table = _reference_subset_sums(array)
    assert _same_floats(_subset_sums(array), table)
    masks = np.array(data.draw(st.lists(st.integers(0, table.size - 1), max_size=30)), dtype=np.int64)
    assert _sums_at(array, masks).tolist() == table[masks].tolist()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 10), st.sampled_from([1, 2, 4]), st.integers(0, 8), st.floats(0.85, 0.99),
       st.integers(0, 10**6), st.booleans(), st.booleans())
def test_resplit_gives_the_reference_plan(ranks, per_rank, extra, fill, seed, flops, every_partner):
    made = planted_balance(ranks=ranks, bins_per_rank=per_rank, samples_per_rank=per_rank + extra, seq_len=4096,
                           fill=fill, seed=seed, cost="flops" if flops else "tokens")
    instance = made.instance
    prepared = prepare(instance)
    # lpt's packing as the start (the planted layout where lpt reaches a dead end), the planted optimum as
    # the target, and half of it as a target no pair reaches (the search runs to its checks or stalls)
    found = packplace.balance(instance, solver="lpt").solution
    where = {key: i for i, key in enumerate(prepared.keys)}
    bins = [[where[key] for key in b] for b in (found.bins if found is not None else made.bins)]
    target = float(made.optimum or 0.0) * (0.5 if seed % 2 else 1.0)
    args = (bins, prepared.tokens, prepared.costs, ranks, per_rank, 4096, target, 300)
    fast = resplit_module.resplit(*args, seed=seed, every_partner=every_partner)
    with _reference_resplit():
        slow = resplit_module.resplit(*args, seed=seed, every_partner=every_partner)
    assert fast == slow


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(64, 8, 4), (96, 16, 4), (48, 8, 2), (40, 4, 8), (24, 8, 1)]), st.integers(0, 10**6),
       st.floats(0.6, 0.95), st.booleans())
def test_repair_gives_the_reference_plan(shape, seed, fill, lockstep):
    n, ranks, per_rank = shape
    rng = np.random.default_rng(seed)
    tokens = np.maximum(1, np.rint(rng.lognormal(math.log(1024), 1.0, size=n))).astype(np.int64)
    seq_len = 1 << math.ceil(math.log2(max(int(tokens.max()), tokens.sum() / (fill * ranks * per_rank))))
    tokens = np.minimum(tokens, seq_len)
    price = cost_function("flops")
    instance = make_instance(tokens.tolist(), [price(t) for t in tokens.tolist()], seq_len=seq_len,
                             data_parallel_size=ranks, local_batch_size=per_rank)
    params = {"tie_break": "lockstep"} if lockstep else {}
    fast = packplace.balance(instance, solver="repair", **params)
    with _reference_resplit():
        slow = packplace.balance(instance, solver="repair", **params)
    assert fast.solution.to_lists() == slow.solution.to_lists()
    assert (fast.objective, fast.status, fast.message, fast.iterations) == (
        slow.objective, slow.status, slow.message, slow.iterations)
