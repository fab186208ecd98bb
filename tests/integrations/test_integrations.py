"""The framework adapters: verl drop-ins against an oracle of verl's own behaviour, hyper_parallel's
protocol with duck-typed objects, and plain multiway partitioning."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from verl_oracle import verl_micro_batches, verl_partitions

from packplace.balance import reference
from packplace.errors import ConfigError, InfeasibleError, TimeLimitError
from packplace.integrations import partition
from packplace.integrations.hyper_parallel import PackplaceBalancingAlgorithm
from packplace.integrations.partition import largest_part, snake_deal
from packplace.integrations.verl import (
    differencing_partitions,
    get_seqlen_balanced_partitions,
    micro_batch_partitions,
    workload,
)


def test_oracle_reproduces_a_hand_checked_differencing_answer():
    # 8, 7, 6, 5, 4 into 2: differencing gives {8, 6} vs {7, 5, 4}... checked by hand: sums 14 and 16.
    parts = verl_partitions([8, 7, 6, 5, 4], 2, False)
    assert sorted(sum([8, 7, 6, 5, 4][i] for i in p) for p in parts) == [14, 16]


# ---------------------------------------------------------------------------------------------------------------


def _check_shape(parts, n, k):
    assert isinstance(parts, list) and len(parts) == k
    assert all(isinstance(p, list) and p and p == sorted(p) for p in parts)
    assert all(type(i) is int for p in parts for i in p)
    assert sorted(i for p in parts for i in p) == list(range(n))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), k=st.integers(1, 6), equal_size=st.booleans())
def test_get_seqlen_balanced_partitions_is_never_worse_than_verl(data, k, equal_size):
    per_part = data.draw(st.integers(1, 8))
    n = k * per_part if equal_size else data.draw(st.integers(k, 6 * k))
    top = data.draw(st.sampled_from([3, 50, 5000]))  # small ranges: many ties between sums
    values = data.draw(st.lists(st.integers(0, top), min_size=n, max_size=n))
    ours = get_seqlen_balanced_partitions(values, k, equal_size)
    theirs = verl_partitions(values, k, equal_size)
    _check_shape(ours, n, k)
    _check_shape(theirs, n, k)
    assert largest_part(values, ours) <= largest_part(values, theirs)
    if equal_size:
        assert {len(p) for p in ours} == {n // k}


@settings(max_examples=60, deadline=None)
@given(data=st.data(), k=st.integers(1, 6), equal_size=st.booleans())
def test_packaged_differencing_reproduces_the_oracle_exactly(data, k, equal_size):
    n = k * data.draw(st.integers(1, 8)) if equal_size else data.draw(st.integers(k, 6 * k))
    values = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))  # small values: many ties
    assert differencing_partitions(values, k, equal_size) == verl_partitions(values, k, equal_size)


def test_equal_size_not_dividing_is_refused_where_verl_refuses():
    # verl 0.9.1's karmarkar_karp asserts n % k == 0 under equal_size (the oracle ports it): so does the drop-in
    with pytest.raises(AssertionError):
        verl_partitions(list(range(1, 12)), 3, True)
    with pytest.raises(ConfigError, match=r"^seqlen_list: 11 items do not split into k_partitions=3 parts of equal "
                                          r"size \(equal_size; 11 % 3 = 2; verl refuses them too\)$"):
        get_seqlen_balanced_partitions(list(range(1, 12)), 3, True)
    # k dividing n, or no equal_size: answers as before
    _check_shape(get_seqlen_balanced_partitions(list(range(1, 13)), 3, True), 12, 3)
    _check_shape(get_seqlen_balanced_partitions(list(range(1, 12)), 3, False), 11, 3)


def test_bad_input_is_a_value_error_with_one_line():
    with pytest.raises(ValueError, match="2 samples cannot fill 3 non-empty bins"):
        get_seqlen_balanced_partitions([1, 2], 3, False)
    with pytest.raises(ConfigError, match="equal_size: must be a bool"):
        get_seqlen_balanced_partitions([1, 2], 1, "no")


def test_numpy_input_and_exact_solver():
    values = np.array([4, 5, 6, 7, 8], dtype=np.int32)
    parts = get_seqlen_balanced_partitions(values, 2, False, solver="cpsat")
    assert largest_part(values, parts) == 15.0  # {7, 8} | {4, 5, 6}


def test_partition_of_plain_weights():
    parts = partition([1.0, 1.5, 2.0, 2.5, 3.0], 2)
    assert largest_part([1.0, 1.5, 2.0, 2.5, 3.0], parts) == 5.0  # {2, 3} | {1, 1.5, 2.5}
    assert partition([3, 1], 1) == [[0, 1]]


def test_snake_deal_by_hand():
    # weights descending: 9 (3), 7 (0), 5 (4), 4 (1), 2 (2), 1 (5) dealt to parts 0, 1, 1, 0, 0, 1
    assert snake_deal(np.array([7.0, 4.0, 2.0, 9.0, 5.0, 1.0]), 2) == [[1, 2, 3], [0, 4, 5]]
    assert snake_deal(np.array([1.0, 1.0, 1.0]), 3) == [[0], [1], [2]]


@pytest.mark.parametrize("equal", [False, True])
def test_partition_answers_when_the_time_limit_cuts_every_backend(monkeypatch, equal):
    # a time limit that cut both repair and karmarkar_karp before they had an answer (200,000 weights at 1 ms)
    # raised RuntimeError, documented "cannot happen", and so did verl's get_seqlen_balanced_partitions
    import importlib

    from packplace.result import SolveResult

    module = importlib.import_module("packplace.integrations.partition")   # the package's name is the function

    def cut(instance, solver, **kwargs):
        return SolveResult("balance", solver, None, math.inf, 0.0, "unknown", hit_time_limit=True)

    monkeypatch.setattr(module, "solve_balance", cut)
    weights = [7, 4, 2, 9, 5, 1, 3]
    parts, proven = partition(weights, 3, equal_count=equal, time_limit_s=0.001, with_proof=True)
    # the snake deal: 9 7 5 | 4 3 2 | 1 to parts 0 1 2 | 2 1 0 | 0: {9, 2, 1} {7, 3} {5, 4}, sizes within one
    assert parts == [[2, 3, 5], [0, 6], [1, 4]] and not proven
    assert largest_part(weights, parts) == 12.0
    # verl's drop-in then keeps verl's own answer where it is better: never worse than verl
    ours = get_seqlen_balanced_partitions(weights, 3, False, time_limit_s=0.001)
    assert largest_part(weights, ours) <= largest_part(weights, verl_partitions(weights, 3, False))


@settings(max_examples=15, deadline=None)
@given(data=st.data(), dp_size=st.integers(1, 4))
def test_micro_batches_keep_the_cap_the_same_count_and_equal_sizes(data, dp_size):
    # Sequences of at most half the cap: any two share a micro-batch, so a rank of q sequences packs
    # into ceil(q/2) micro-batches and the same count on every rank always exists.
    n = data.draw(st.integers(dp_size, 8 * dp_size))
    seqlens = data.draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    cap = 1000
    ranks = micro_batch_partitions(seqlens, cap, dp_size)
    assert len(ranks) == dp_size
    assert len({len(r) for r in ranks}) == 1
    assert sorted(i for r in ranks for micro in r for i in micro) == list(range(n))
    assert all(micro and sum(seqlens[i] for i in micro) <= cap for r in ranks for micro in r)
    sizes = [sum(len(micro) for micro in r) for r in ranks]
    assert max(sizes) - min(sizes) <= 1
    bound = max(math.ceil(sum(seqlens) / (dp_size * cap)), 1)
    assert len(ranks[0]) >= bound


def test_micro_batches_with_no_common_count_are_refused_with_the_reason():
    # Equal sizes put 2 sequences on one rank and 1 on the other; 369 + 632 > 1000 forces 2 micro-batches on
    # the first rank while the second can hold only 1 non-empty micro-batch: no common count exists.
    with pytest.raises(InfeasibleError, match=r"^seqlens: no number of micro-batches per rank in \[1, 1\] holds all 3 "
                                              r"sequences on dp_size=2 ranks within the cap max_token_len 1000 "
                                              r"\(equal_size=True\); proven$"):
        micro_batch_partitions([369, 632, 632], 1000, 2)
    # A fourth sequence gives both ranks 2: two micro-batches each exist (no pair of 632 and 369 shares one).
    ranks = micro_batch_partitions([369, 632, 632, 10], 1000, 2)
    assert [len(r) for r in ranks] == [2, 2]


def test_micro_batches_whose_count_is_not_decided_are_refused_as_not_proven(monkeypatch):
    # With the exact check's model limit at 1 Boolean no count past the counting proof is decided: the balance
    # problem's TimeLimitError names the undecided counts, and the drop-in says so in its own terms (not
    # "proven", not the balance problem's local_batch_size / bins)
    monkeypatch.setattr(reference, "EXACT_MAX_BOOLEANS", 1)
    with pytest.raises(TimeLimitError) as info:
        micro_batch_partitions([5, 6, 10, 5, 8], 10, 2)
    assert str(info.value) == (
        "seqlens: no number of micro-batches per rank in [2, 2] holds all 5 sequences on dp_size=2 ranks within the "
        "cap max_token_len 10 (equal_size=True); not proven: the exact check could not decide 2 micro-batches per "
        "rank (model over 1 Booleans or its work limit reached)")


def test_micro_batches_on_a_skewed_batch_match_verl_on_the_cap_and_beat_it_on_the_heaviest_rank():
    rng = np.random.default_rng(7)
    seqlens = np.minimum(rng.lognormal(np.log(900), 1.0, size=256).astype(int) + 1, 4096).tolist()
    ours = micro_batch_partitions(seqlens, 4096, 8)
    theirs = verl_micro_batches(seqlens, 4096, 8)
    assert all(sum(seqlens[i] for i in micro) <= 4096 for r in ours for micro in r)
    # verl 0.9.1 grows its micro-batch count until every one fits: both keep the cap
    assert all(sum(seqlens[i] for i in micro) <= 4096 for r in theirs for micro in r)
    assert len(ours[0]) <= len(theirs[0])
    costs = workload(seqlens)
    ours_makespan = max(sum(costs[i] for micro in r for i in micro) for r in ours)
    theirs_makespan = max(sum(costs[i] for micro in r for i in micro) for r in theirs)
    assert ours_makespan <= theirs_makespan


# ---------------------------------------------------------------------------------------------------------------
# hyper_parallel's objects, duck-typed (the package need not be installed).


@dataclass(frozen=True, order=True)
class Key:
    reader_rank: int
    dataset_index: int


@dataclass(frozen=True)
class Cost:
    llm: float = 0.0
    encoder: float = 0.0


@dataclass(frozen=True)
class Metadata:
    pack_tokens: int
    cost: Cost = Cost()
    packing_costs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Buffered:
    key: Key
    metadata: Metadata
    global_sample_position: int = 0


@dataclass(frozen=True)
class Constraints:
    seq_len: int
    oversized_policy: str = "error"
    packing_budgets: dict | None = None


def _samples(tokens, vision=None):
    return [
        Buffered(Key(0, i), Metadata(t, Cost(llm=float(t * t)), {"vision": vision[i]} if vision else {}), i)
        for i, t in enumerate(tokens)
    ]


def test_hyper_parallel_algorithm_returns_keys_rank_major_and_balances():
    samples = _samples([8, 7, 6, 5, 4, 3, 2, 1])
    reference = [[s.key for s in samples[:4]], [s.key for s in samples[4:]]]
    algorithm = PackplaceBalancingAlgorithm(solver="cpsat", time_limit_s=5)
    bins = algorithm.assign(samples, reference_bins=reference, constraints=Constraints(seq_len=40),
                            data_parallel_size=2, local_batch_size=1)
    assert len(bins) == 2 and sorted(k for b in bins for k in b) == sorted(s.key for s in samples)
    by_key = {s.key: s.metadata.cost.llm for s in samples}
    loads = [Cost(llm=sum(by_key[k] for k in b)) for b in bins]
    assert algorithm.objective(loads) == 102.0  # 204 in all, split evenly: 64+36+1+1... proven by cpsat
    assert algorithm.last_result.status == "optimal"
    assert PackplaceBalancingAlgorithm(objective="balance").objective([Cost(llm=1.0), Cost(llm=1.0)]) == 0.0


def test_hyper_parallel_budgets_are_kept_and_a_dead_end_returns_the_reference():
    samples = _samples([3, 3, 3, 3], vision=[5.0, 5.0, 1.0, 1.0])
    constraints = Constraints(seq_len=6, packing_budgets={"vision": 6.0})
    reference = [[samples[0].key, samples[2].key], [samples[1].key, samples[3].key]]
    bins = PackplaceBalancingAlgorithm().assign(samples, reference_bins=reference, constraints=constraints,
                                                data_parallel_size=2, local_batch_size=1)
    vision = {s.key: s.metadata.packing_costs["vision"] for s in samples}
    assert all(sum(vision[k] for k in b) <= 6.0 for b in bins)


def test_hyper_parallel_backend_dead_end_falls_back_to_the_default_rules():
    from packplace.registry import register, unregister
    from packplace.result import UNKNOWN, Proposal

    @register("balance", "test-dead-end")
    def dead_end(instance, *, time_limit_s=None, seed=0):
        """Always gives up."""
        return Proposal(None, UNKNOWN, message="gave up")

    try:
        samples = _samples([3, 3, 3, 3])
        reference = [[samples[0].key, samples[1].key], [samples[2].key, samples[3].key]]
        algorithm = PackplaceBalancingAlgorithm(solver="test-dead-end")
        out = algorithm.assign(samples, reference_bins=reference, constraints=Constraints(seq_len=6),
                               data_parallel_size=2, local_batch_size=1)
        # the backend gave up; hyper_parallel's own rules still answer: 3 + 3 tokens per bin, two bins
        assert algorithm.last_result.status == "unknown"
        assert sorted(len(b) for b in out) == [2, 2]
        assert sorted(k for b in out for k in b) == sorted(s.key for s in samples)
    finally:
        unregister("balance", "test-dead-end")


def test_rearrange_micro_batches_names_what_was_passed():
    import numpy as np

    from packplace.errors import ConfigError
    from packplace.integrations.verl import rearrange_micro_batches
    # had blamed max_token_len ("max_token_len: 5 non-empty micro-batches needed, but the batch has only 4 groups")
    with pytest.raises(ConfigError) as caught:
        rearrange_micro_batches([0, 0, 0, 0], 8, num_micro_batches=5)
    assert str(caught.value) == ("num_micro_batches: 5 non-empty micro-batches asked for, but the batch has only 4 "
                                 "groups of force_group_size=1")
    with pytest.raises(ConfigError) as caught:
        rearrange_micro_batches([1, 1, 1, 1, 1], 8, num_batches_divided_by=2, num_micro_batches=5)
    assert str(caught.value) == ("num_micro_batches: 5 non-empty micro-batches asked for (rounded up to 6: "
                                 "num_batches_divided_by=2), but the batch has only 5 groups of force_group_size=1")
    assert rearrange_micro_batches([0, 0, 0, 0], 8, num_micro_batches=4)[1] == [[1], [3], [2], [0]]
    # a plain list had been called an attention_mask
    for empty, kind in (([], "list"), ((), "tuple"), (np.array([], dtype=np.int64), "ndarray")):
        with pytest.raises(ConfigError) as caught:
            rearrange_micro_batches(empty, 8)
        assert str(caught.value) == f"batch: the {kind} of lengths is empty (an empty batch has no micro-batches)"
    with pytest.raises(ConfigError) as caught:
        rearrange_micro_batches({"attention_mask": np.zeros((0, 4))}, 8)
    assert str(caught.value) == "batch: attention_mask has no rows (an empty batch has no micro-batches)"


def test_planner_protocol_name_is_deprecated_alias():
    from packplace.balance import planner

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert planner.BalancingAlgorithm is planner.AssignmentAlgorithm
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)


def test_drop_in_errors_name_the_argument_at_fault():
    import numpy as np

    from packplace.errors import ConfigError
    from packplace.integrations.micro_batches import micro_batch_partitions
    from packplace.integrations.verl import rearrange_micro_batches
    with pytest.raises(ConfigError, match=r"^batch: attention_mask has no rows"):
        rearrange_micro_batches({"attention_mask": []}, 4)
    with pytest.raises(ConfigError, match=r"^min_num_micro_batch: 5 non-empty micro-batches asked for, but the "
                                          r"batch has only 2 groups"):
        rearrange_micro_batches({"attention_mask": np.ones((2, 3))}, 4, min_num_micro_batch=5)
    with pytest.raises(ConfigError, match=r"^seqlens: 1 sequences cannot give each of dp_size=2 ranks"):
        micro_batch_partitions([100], 2048, 2)
