"""The lockstep tie-break's cheaper evaluation gives the plans of the plain one.

The levelling skips sources known to have no move (:func:`_find_move`'s memo) and prices a rank's exchanges
from one grouped array (:func:`_group_offers`); the fine-tuning builds a rank's pair units in one sort
(:func:`_add_pairs`); the tie-break sums bin costs by length (:func:`bin_sums`). Slow references (the code as
it read before, per source, per bin, per pair) are kept here: hand-checked small cases, then hypothesis
properties "same plan as the reference" on the levelling, the fine-tuning and ``repair``'s tie-break.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace.solvers.balance.lockstep as lockstep_module
import packplace.solvers.balance.repair.fine_tune as fine_tune_module
import packplace.solvers.balance.repair.solver as repair_module
from packplace.balance import make_instance
from packplace.balance.api import solve_balance
from packplace.balance.evaluator import BalanceEvaluator
from packplace.integrations.megatron import PackplacePackingScheduler, sequence_flops
from packplace.solvers.balance._common import bin_sums
from packplace.solvers.balance.lockstep import (
    _find_move,
    _group_offers,
    _levelling_state,
    level_layers,
    source_move,
)
from packplace.solvers.balance.repair.fine_tune import PAIR_SAMPLES, _add_pairs, _triangle, _tune_state, fine_tune


# ------------------------------------------------------------------------------------- references
def _reference_find_move(state, sources, room):
    """:func:`_find_move` without its memo: every source checked."""
    per_rank = state.per_rank
    for source in sources:
        if state.sizes[source] < 2:
            continue
        lo = 0 if per_rank is None else source - source % per_rank
        hi = len(room) if per_rank is None else lo + per_rank
        move = source_move(state, source, room, lo, hi)
        if move is not None:
            return move
    return None


def _reference_exchange_once(state, sources, ceiling, peers_of, no_swap):
    """:func:`_exchange_once` keyed by every peer's version, its offers built bin by bin on every call."""
    version = state.version
    for source in sources:
        peers = peers_of(source)
        memo = (source, *peers.tolist(), *(version[b] for b in peers.tolist()))
        if memo in no_swap:
            continue
        swap = _reference_best_swap(source, peers[peers != source], state.contents, state.costs, state.tokens,
                                    state.load, state.used, state.seq_len, ceiling)
        if swap is None:
            no_swap.add(memo)
        else:
            i, target, given_set = swap
            lockstep_module._transfer(state, i, source, target)
            for u in given_set:
                lockstep_module._transfer(state, u, target, source)
            return True
    return False


def _reference_best_swap(source, peers, contents, costs, tokens, load, used, seq_len, ceiling):
    """:func:`_best_swap` over the peers' sets listed one by one (a sample, then each pair, bin by bin)."""
    top = float(load[source])
    parts_cost, parts_tokens, parts_peer, given_sets = [], [], [], []
    for peer in peers.tolist():
        items = contents[peer]
        sets = [(u,) for u in items] + [(u, v) for a, u in enumerate(items) for v in items[a + 1:]]
        first, second = np.triu_indices(len(items), 1)
        item_costs = costs[items].astype(float)
        item_tokens = tokens[items].astype(np.int64)
        parts_cost.append(np.concatenate((item_costs, item_costs[first] + item_costs[second])))
        parts_tokens.append(np.concatenate((item_tokens, item_tokens[first] + item_tokens[second])))
        parts_peer.append(np.full(len(sets), peer, dtype=np.int64))
        given_sets.extend(sets)
    if not given_sets:
        return None
    given_cost, given_tokens = np.concatenate(parts_cost), np.concatenate(parts_tokens)
    peer_of = np.concatenate(parts_peer)
    items = contents[source]
    delta = costs[items].astype(float)[:, None] - given_cost[None, :]
    new_peer = load[peer_of][None, :] + delta
    item_tokens = tokens[items].astype(np.int64)[:, None]
    fits = ((delta > 0) & (new_peer < top) & (new_peer <= ceiling[peer_of][None, :])
            & (used[source] - item_tokens + given_tokens[None, :] <= seq_len)
            & (used[peer_of][None, :] + item_tokens - given_tokens[None, :] <= seq_len))
    if not fits.any():
        return None
    worst = np.where(fits, np.maximum(top - delta, new_peer), np.inf)
    row, k = divmod(int(np.argmin(worst)), worst.shape[1])
    return items[row], int(peer_of[k]), given_sets[k]


def _reference_add_pairs(singles, sizes, open_bins, tokens, firsts, seconds, wheres):
    """:func:`_add_pairs` bin by bin: each bin's samples sorted alone, its pairs from the triangle."""
    start = 0
    for b, size in zip(open_bins, sizes):
        members = singles[start:start + size]
        start += size
        if size < 2:
            continue
        chosen = members[np.lexsort((members, tokens[members]))]
        if chosen.size > PAIR_SAMPLES:
            chosen = chosen[np.linspace(0, chosen.size - 1, PAIR_SAMPLES).round().astype(np.int64)]
        x, y = _triangle(chosen.size)
        firsts.append(chosen[x])
        seconds.append(chosen[y])
        wheres.append(np.full(x.size, b, dtype=np.int64))


def _reference_bin_sums(values, bins):
    return np.array([float(values[b].sum()) for b in bins])


@contextlib.contextmanager
def _reference() -> Iterator[None]:
    """Every cheaper step swapped for its reference, for the duration."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lockstep_module, "_find_move", _reference_find_move)
        patch.setattr(lockstep_module, "_exchange_once", _reference_exchange_once)
        patch.setattr(fine_tune_module, "_add_pairs", _reference_add_pairs)
        patch.setattr(repair_module, "bin_sums", _reference_bin_sums)
        yield


def _both(compute: Callable[[], object]) -> tuple[object, object]:
    """(the reference's answer, the current one's)."""
    with _reference():
        reference = compute()
    return reference, compute()


# ---------------------------------------------------------------------------------------- by hand
def test_group_offers_by_hand() -> None:
    # bins 0: samples (0, 1, 2) cost 1, 2, 4; bin 1: sample 3 cost 8; bin 2 empty. Sets bin after bin, each
    # bin's samples then its pairs x < y: 0, 1, 2, (0, 1), (0, 2), (1, 2) | 3
    costs, tokens = np.array([1.0, 2.0, 4.0, 8.0]), np.array([10, 20, 40, 80])
    cost, token, bins, first, second = _group_offers([0, 1, 2], [[0, 1, 2], [3], []], costs, tokens)
    assert cost.tolist() == [1.0, 2.0, 4.0, 3.0, 5.0, 6.0, 8.0]
    assert token.tolist() == [10, 20, 40, 30, 50, 60, 80]
    assert bins.tolist() == [0, 0, 0, 0, 0, 0, 1]
    assert first.tolist() == [0, 1, 2, 0, 0, 1, 3]
    assert second.tolist() == [-1, -1, -1, 1, 2, 2, -1]


def test_add_pairs_by_hand() -> None:
    # bin 7 holds samples 2, 0, 1 with tokens 3, 5, 3: by (tokens, index) 1, 2, 0, pairs (1, 2), (1, 0), (2, 0);
    # bin 9 holds 3, 4 (tokens 1, 2): the pair (3, 4)
    tokens = np.array([5, 3, 3, 1, 2])
    firsts, seconds, wheres = [], [], []
    _add_pairs(np.array([2, 0, 1, 3, 4]), [3, 2], [7, 9], tokens, firsts, seconds, wheres)
    assert np.concatenate(firsts).tolist() == [1, 1, 2, 3]
    assert np.concatenate(seconds).tolist() == [2, 0, 0, 4]
    assert np.concatenate(wheres).tolist() == [7, 7, 7, 9]


def test_bin_sums_are_numpys_own() -> None:
    # 0.1 + 0.2 + ... + 1.0 is 5.5 by numpy's pairwise sum, 5.500000000000001 summed left to right: the
    # grouped sums give numpy's (the tie-break compares them with the per-bin sums it always used)
    values = np.arange(1, 11) * 0.1
    assert bin_sums(values, [list(range(10)), [], [3]]).tolist() == [5.5, 0.0, values[3]]
    assert sum(values.tolist()) == 5.500000000000001


def test_find_move_rechecks_a_source_once_room_grows() -> None:
    # one rank of bins (5, 4) = 9 and (1) = 1: with the other bin's room at 3 neither sample fits; the memo
    # skips the source while the room stays at 3 (the answer is the same None) and checks it again at 4,
    # where the 4 fits (1 + 4 = 5 < 9)
    inst = make_instance([5, 4, 1], seq_len=20, data_parallel_size=1, local_batch_size=2)
    state = _levelling_state(BalanceEvaluator(inst), ((0, 1), (2,)), 2)
    assert _find_move(state, [0], np.array([0.0, 3.0])) is None
    assert state.no_move == {0: (0, 0)}
    assert _find_move(state, [0], np.array([0.0, 3.0])) is None
    assert _find_move(state, [0], np.array([0.0, 4.0])) == (1, 0, 1)


def test_tune_state_token_sums_by_hand() -> None:
    tokens, costs = np.array([3, 4, 5, 6]), np.ones(4)
    state = _tune_state([[0, 1], [], [2, 3], [1]], tokens, costs, ranks=2, per_rank=2, capacity=10)
    assert state.bin_tokens.tolist() == [7, 0, 11, 4]
    assert state.locked.tolist() == [False, False, True, False]


# ----------------------------------------------------------------------------- same as the reference
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 400), min_size=1, max_size=300), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_bin_sums_match_the_per_bin_sums(sizes: list[int], count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.random(len(sizes)) * 10.0 ** rng.uniform(-3, 12, len(sizes)) * np.array(sizes)
    where = rng.integers(0, count, len(sizes))
    bins = [np.flatnonzero(where == b).tolist() for b in range(count)]
    assert bin_sums(values, bins).tolist() == _reference_bin_sums(values, bins).tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=2, max_size=130), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_pair_units_match_the_reference(sizes: list[int], bins: int, seed: int) -> None:
    # bins of up to 130 samples: more than PAIR_SAMPLES takes the spread subset (the per-bin branch)
    rng = np.random.default_rng(seed)
    tokens = np.append(np.array(sizes), 0)
    where = rng.integers(0, bins, len(sizes))
    contents = [np.flatnonzero(where == b).tolist() for b in range(bins)]
    singles = np.array([i for b in contents for i in b], dtype=np.int64)
    found, expected = ([], [], []), ([], [], [])
    _add_pairs(singles, [len(b) for b in contents], list(range(bins)), tokens, *found)
    _reference_add_pairs(singles, [len(b) for b in contents], list(range(bins)), tokens, *expected)
    for ours, theirs in zip(found, expected):
        assert (np.concatenate(ours).tolist() if ours else []) == (np.concatenate(theirs).tolist() if theirs else [])


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4), st.lists(st.integers(1, 40), min_size=6, max_size=40),
       st.integers(0, 2**32 - 1), st.booleans())
def test_fine_tune_matches_the_reference(ranks: int, per_rank: int, sizes: list[int], seed: int,
                                         squared: bool) -> None:
    rng = np.random.default_rng(seed)
    tokens = np.array(sizes, dtype=np.int64)
    costs = tokens.astype(float) ** 2 if squared else tokens * rng.uniform(0.5, 1.5, len(sizes))
    where = rng.integers(0, ranks * per_rank, len(sizes))
    start = [np.flatnonzero(where == b).tolist() for b in range(ranks * per_rank)]
    loads = np.array([costs[[i for b in start[r * per_rank:(r + 1) * per_rank] for i in b]].sum()
                      for r in range(ranks)])
    target = float(loads.mean() + 0.25 * (loads.max() - loads.mean()))
    capacity = max(sizes) + int(rng.integers(0, 3 * max(sizes)))
    reference, current = _both(lambda: fine_tune(start, tokens, costs, ranks, per_rank, capacity, target, 64))
    assert current == reference


def _random_plan(inst, rng):
    """A feasible assignment of ``inst`` (rank-major bins of keys): one sample in each bin, the rest dealt
    at random among the bins with room (``seq_len`` leaves one with room for the longest)."""
    bins: list[list] = [[] for _ in range(inst.num_bins)]
    room = [inst.constraints.seq_len] * inst.num_bins
    for k, i in enumerate(rng.permutation(len(inst.samples)).tolist()):
        fits = [k] if k < inst.num_bins else [b for b in range(inst.num_bins) if room[b] >= inst.tokens[i]]
        b = fits[int(rng.integers(0, len(fits)))]
        bins[b].append(inst.keys[i])
        room[b] -= int(inst.tokens[i])
    return tuple(tuple(b) for b in bins)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 4), st.integers(2, 4), st.lists(st.integers(1, 30), min_size=16, max_size=48),
       st.integers(0, 2**32 - 1), st.booleans())
def test_levelling_matches_the_reference(ranks: int, per_rank: int, sizes: list[int], seed: int,
                                         within: bool) -> None:
    rng = np.random.default_rng(seed)
    seq_len = max(sizes) + -(-2 * sum(sizes) // (ranks * per_rank))
    costs = [float(t) ** 1.5 * float(rng.uniform(0.8, 1.2)) for t in sizes]
    if within:
        inst = make_instance(sizes, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank)
    else:
        inst = make_instance(sizes, costs, seq_len=seq_len, data_parallel_size=ranks * per_rank,
                             objective="rounds", group_size=ranks)
    ev = BalanceEvaluator(inst)
    start = _random_plan(inst, rng)
    reference, current = _both(lambda: level_layers(ev, start, None, within_ranks=within))
    assert current == reference


def _rl_lengths(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(n) < 0.6, rng.lognormal(np.log(1024), 0.7, n), rng.lognormal(np.log(6000), 0.5, n))
    return np.clip(lengths, 64, 16384).astype(np.int64)


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.integers(40, 200), st.integers(2, 8))
def test_tie_break_plan_matches_the_reference(seed: int, n: int, ranks: int) -> None:
    lengths = _rl_lengths(seed, n)
    instance = make_instance(lengths, sequence_flops(lengths, 4096), seq_len=16384, data_parallel_size=ranks,
                             local_batch_size="auto")
    reference, current = _both(lambda: solve_balance(instance, "repair", tie_break="lockstep"))
    assert current.solution.bins == reference.solution.bins
    assert current.message == reference.message


@pytest.mark.parametrize("seed", [0, 1])
def test_megatron_scheduler_plan_matches_the_reference(seed: int) -> None:
    # the benchmark's RL mix at a quarter of its size: 256 sequences on 8 ranks
    pairs = list(enumerate(_rl_lengths(seed, 256).tolist()))
    scheduler = PackplacePackingScheduler(16384, 1, 8, None, hidden_size=4096)
    reference, current = _both(lambda: scheduler.get_groups_and_subsamples(pairs))
    assert current == reference
