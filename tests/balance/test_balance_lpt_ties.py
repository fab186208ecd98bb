"""LPT's heap path with tied loads: the same bins as the general path, and it stops at the deadline."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance.instance import make_instance
from packplace.solvers.balance import lpt


@st.composite
def tied_instances(draw):
    ranks = draw(st.integers(1, 5))
    per_rank = draw(st.integers(1, 3))
    seq_len = draw(st.integers(15, 30))
    n = draw(st.integers(ranks * per_rank, ranks * per_rank + 14))
    tokens = draw(st.lists(st.integers(1, seq_len), min_size=n, max_size=n))
    if sum(tokens) > ranks * per_rank * seq_len:
        tokens = [1] * n
    # Few distinct costs, so that many rank loads tie.
    costs = draw(st.one_of(st.just([float(t) for t in tokens]),
                           st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=n, max_size=n)))
    return make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank)


def _bins_or_dead_end(path, inst, prepared):
    try:
        return path(inst, prepared, None)
    except lpt.DeadEnd:
        return None


@settings(max_examples=150, deadline=None)
@given(tied_instances())
def test_heap_path_breaks_ties_like_the_general_path(inst):
    prepared = lpt.prepare(inst)
    assert _bins_or_dead_end(lpt._lpt_heap, inst, prepared) == _bins_or_dead_end(lpt._lpt_vectorized, inst, prepared)


def test_all_equal_lengths_spread_one_per_rank_in_rank_order():
    # 8 samples of 4 tokens, cost = tokens, 4 ranks of 2 bins of 10: every load ties at each step.
    inst = make_instance([4] * 8, seq_len=10, data_parallel_size=4, local_batch_size=2)
    result = packplace.balance(inst, solver="lpt")
    assert result.objective == 8.0
    assert [len(b) for b in result.solution.bins] == [1] * 8


def test_heap_path_honours_the_deadline():
    inst = make_instance([3] * 5000, seq_len=10_000, data_parallel_size=4)
    result = packplace.balance(inst, solver="lpt", time_limit_s=1e-6)
    assert result.hit_time_limit and result.status == "unknown" and "time limit" in result.message


@st.composite
def many_bins_instances(draw):
    """Few ranks, many bins per rank, few distinct lengths and costs: groups of tied ranks with many bins."""
    ranks = draw(st.integers(1, 6))
    per_rank = draw(st.integers(4, 12))
    seq_len = draw(st.integers(8, 20))
    n = draw(st.integers(ranks * per_rank, ranks * per_rank * 3))
    tokens = draw(st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=n, max_size=n))
    if sum(tokens) > ranks * per_rank * seq_len:
        tokens = [1] * n
    costs = draw(st.one_of(st.just([float(t) for t in tokens]),
                           st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.5]), min_size=n, max_size=n)))
    return make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank)


@settings(max_examples=100, deadline=None)
@given(many_bins_instances())
def test_heap_path_with_many_bins_per_rank_matches_the_general_path_scanned_or_merged(inst):
    # MERGE_FACTOR 0: every group of tied ranks keeps a merged list of its bins; 1000 (or m above
    # MERGE_MAX_BINS): none does, each group answers from its heap of best fits.
    prepared = lpt.prepare(inst)
    reference = _bins_or_dead_end(lpt._lpt_vectorized, inst, prepared)
    default = lpt.MERGE_FACTOR, lpt.MERGE_MAX_BINS
    try:
        for factor, max_bins in ((0, 100), (2, 100), default, (1000, 100)):
            lpt.MERGE_FACTOR, lpt.MERGE_MAX_BINS = factor, max_bins
            assert _bins_or_dead_end(lpt._lpt_heap, inst, prepared) == reference
    finally:
        lpt.MERGE_FACTOR, lpt.MERGE_MAX_BINS = default


def test_many_bins_best_fit_inside_the_least_loaded_rank_by_hand():
    # 2 ranks x 3 bins of 10 tokens; lengths 9, 8, 7, 6, 5, 4 open the bins (LPT order, least-loaded
    # rank first): rank 0 gets 9, 6, 5 (load 20), rank 1 gets 8, 7, 4 (load 19); free 1, 4, 5 and 2, 3, 6.
    # Then 3 goes to rank 1 (load 19) into its tightest bin with room (free 3 -> 0, bin 4): load 22.
    # Then 2 goes to rank 0 (load 20), free 4 is the tightest >= 2 (bin 1): load 22. Then two samples of
    # 1 token: loads and rank tokens tie at 22, so the tightest fit decides: rank 0's bin 0 (free 1)
    # beats rank 1's bin 3 (free 2); the last one goes to rank 1 (load 22 < 23), bin 3.
    inst = make_instance([9, 8, 7, 6, 5, 4, 3, 2, 1, 1], seq_len=10, data_parallel_size=2, local_batch_size=3)
    prepared = lpt.prepare(inst)
    assert lpt._lpt_heap(inst, prepared) == [[0, 8], [3, 7], [4], [1, 9], [2, 6], [5]]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 2), st.integers(3, 10), st.data())
def test_rounds_path_with_many_bins_per_rank_matches_the_general_path(rounds, group, per_rank, data):
    ranks = rounds * group
    seq_len = data.draw(st.integers(8, 20))
    n = data.draw(st.integers(ranks * per_rank, ranks * per_rank * 3))
    tokens = data.draw(st.lists(st.sampled_from([1, 2, 3, 5, 8]), min_size=n, max_size=n))
    if sum(tokens) > ranks * per_rank * seq_len:
        tokens = [1] * n
    costs = data.draw(st.lists(st.sampled_from([1.0, 2.0, 4.0]), min_size=n, max_size=n))  # exact sums
    inst = make_instance(tokens, costs, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=per_rank,
                         objective="rounds", group_size=group)
    prepared = lpt.prepare(inst)
    assert _bins_or_dead_end(lpt._lpt_rounds, inst, prepared) == _bins_or_dead_end(lpt._lpt_vectorized, inst,
                                                                                    prepared)


def _lpt_with_padding_by_hand(inst, prepared, pad):
    """The documented rule, one bin at a time: the first D·m samples open empty bins, then the feasible
    bin minimising (rank load after placing incl. the bin's padding change, remaining tokens, rank
    tokens, rank, bin)."""
    ranks, per_rank, seq_len = inst.data_parallel_size, inst.local_batch_size, inst.constraints.seq_len
    bins = [[] for _ in range(ranks * per_rank)]
    used = [0] * len(bins)
    load = [per_rank * pad(seq_len)] * ranks
    held = [0] * ranks
    for pos, i in enumerate(prepared.order.tolist()):
        t, c = int(prepared.tokens[i]), float(prepared.costs[i])
        best = None
        for b in range(len(bins)):
            if (pos < len(bins) and bins[b]) or (pos >= len(bins) and used[b] + t > seq_len):
                continue
            r = b // per_rank
            after = load[r] + c + (pad(max(0, seq_len - used[b] - t)) - pad(max(0, seq_len - used[b])))
            key = (after, max(0, seq_len - used[b] - t), held[r], r, b)
            best = key if best is None or key < best else best
        if best is None:
            return None
        after, _, _, r, b = best
        bins[b].append(i)
        used[b] += t
        held[r] += t
        load[r] = after
    return bins


@settings(max_examples=40, deadline=None)
@given(many_bins_instances(), st.sampled_from([0.5, 1.0, 3.0]))
def test_padding_path_with_many_bins_per_rank_follows_the_rule(inst, rate):
    # cost.llm of p padding tokens = rate·p + p²/64 (exact in binary for these sizes).
    from packplace.balance.schema import WorkloadCost

    def padding(pad_tokens):
        return WorkloadCost(llm=rate * pad_tokens + pad_tokens * pad_tokens / 64)

    padded = make_instance([s.tokens for s in inst.samples], inst.costs.tolist(), seq_len=inst.constraints.seq_len,
                           data_parallel_size=inst.data_parallel_size, local_batch_size=inst.local_batch_size,
                           padding_cost=padding)
    prepared = lpt.prepare(padded)
    by_hand = _lpt_with_padding_by_hand(padded, prepared, lambda k: float(padding(k).llm))
    assert _bins_or_dead_end(lpt._lpt_vectorized, padded, prepared) == by_hand
