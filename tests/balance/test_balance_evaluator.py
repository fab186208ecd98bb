"""The evaluator's column-wise paths (flatten, canonical order, per-instance cache) against plain Python."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import BalanceEvaluator, make_instance
from packplace.balance.evaluator import FLAT_CACHE, SHARED_ATTR
from packplace.balance.schema import Assignment, key_order


def reference_flatten(keys, bins):
    """(members, bin_of) by one dictionary lookup per key, None for an unknown or unhashable key."""
    index = {k: i for i, k in enumerate(keys)}
    members, bin_of = [], []
    for b, keys_of_bin in enumerate(bins):
        for key in keys_of_bin:
            try:
                position = index.get(key)
            except TypeError:
                return None
            if position is None:
                return None
            members.append(position)
            bin_of.append(b)
    return members, bin_of


def reference_canonical(bins):
    """Keys of each bin sorted by key_order, one Python sort per bin."""
    return tuple(tuple(sorted(b, key=key_order)) for b in bins)


@st.composite
def assignments(draw):
    """An instance (int keys, str keys or both; few distinct costs, so ties) and a feasible assignment of
    it with every bin's keys in a random order."""
    ranks = draw(st.integers(1, 3))
    per_rank = draw(st.integers(1, 3))
    bins = ranks * per_rank
    n = draw(st.integers(bins, bins + 12))
    kind = draw(st.sampled_from(["identity", "ints", "strs", "mixed"]))
    if kind == "identity":
        keys = list(range(n))
    elif kind == "ints":
        keys = draw(st.lists(st.integers(-10**20, 10**20), min_size=n, max_size=n, unique=True))
    elif kind == "strs":
        keys = draw(st.lists(st.text("abc", min_size=1, max_size=4), min_size=n, max_size=n, unique=True))
    else:
        pool = [*range(-3, n), *(f"s{i}" for i in range(n))]
        keys = draw(st.permutations(pool))[:n]
    tokens = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    costs = [float(c) for c in draw(st.lists(st.sampled_from([1, 2, 3]), min_size=n, max_size=n))]
    instance = make_instance(tokens, costs, seq_len=4 * n, data_parallel_size=ranks, local_batch_size=per_rank,
                             keys=keys)
    order = draw(st.permutations(range(n)))
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), min_size=bins - 1, max_size=bins - 1, unique=True))) \
        if bins > 1 else []
    edges = [0, *cuts, n]
    grouped = tuple(tuple(keys[i] for i in order[a:b]) for a, b in zip(edges, edges[1:]))
    return instance, grouped


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(assignments())
def test_flatten_and_canonical_match_plain_python(case):
    instance, bins = case
    evaluator = BalanceEvaluator(instance)
    expected = reference_flatten(instance.keys, bins)
    members, bin_of = evaluator.flatten(bins)
    assert members.tolist() == expected[0] and bin_of.tolist() == expected[1]
    canonical = evaluator.canonical(Assignment(bins, instance.local_batch_size))
    assert canonical.bins == reference_canonical(bins) == Assignment(bins, instance.local_batch_size).canonical().bins
    assert all(type(key) is type(original) for b, c in zip(bins, canonical.bins) for key, original in
               zip(sorted(c, key=key_order), sorted(b, key=key_order)))
    # a second pass over its own answer changes nothing
    assert evaluator.canonical(canonical).bins == canonical.bins
    # the cached path scores exactly as an evaluator that never saw these bins (fresh lists, no cache)
    shared = evaluator.score(canonical)
    fresh_instance = make_instance(instance.tokens, instance.costs, seq_len=instance.constraints.seq_len,
                                   data_parallel_size=instance.data_parallel_size,
                                   local_batch_size=instance.local_batch_size, keys=list(instance.keys))
    plain = BalanceEvaluator(fresh_instance).score([list(b) for b in reversed(canonical.bins)][::-1])
    assert shared.feasible and plain.feasible
    for name in ("objective", "makespan", "balance", "rounds", "lockstep"):
        assert getattr(shared, name) == getattr(plain, name)
    for name in ("rank_loads", "rank_tokens", "bin_tokens", "bin_costs", "run_order"):
        assert getattr(shared, name).tobytes() == getattr(plain, name).tobytes()


@pytest.mark.parametrize("stranger", [5, -1, "0", 1.5, 2**70, None, (0,)])
def test_flatten_refuses_an_unknown_key(stranger):
    instance = make_instance([1, 1, 1, 1, 1], seq_len=8, data_parallel_size=2)
    evaluator = BalanceEvaluator(instance)
    assert evaluator.flatten(((0, 1, stranger), (2, 3, 4))) is None
    assert evaluator.flatten(((0, 1, [stranger]), (2, 3, 4))) is None  # unhashable


def test_flatten_takes_keys_that_equal_an_instance_key_as_a_dictionary_does():
    instance = make_instance([1, 1, 1, 1], seq_len=8, data_parallel_size=2)
    evaluator = BalanceEvaluator(instance)
    for bins in (((np.int64(0), True), (2, 3)), ((0.0, 1), (2, np.int32(3)))):
        members, bin_of = evaluator.flatten(bins)
        assert members.tolist() == reference_flatten(instance.keys, bins)[0] == [0, 1, 2, 3]
        assert bin_of.tolist() == [0, 0, 1, 1]


def test_the_cache_is_shared_by_evaluators_of_one_instance_and_never_stale():
    instance = make_instance([3, 2, 2, 1, 1, 1], seq_len=8, data_parallel_size=2, local_batch_size=1)
    first, second = BalanceEvaluator(instance), BalanceEvaluator(instance)
    bins = ((5, 0, 3), (4, 1, 2))
    arrays = first.flatten(bins)
    assert second.flatten(tuple(tuple(b) for b in bins)) is arrays  # the same bin tuples: one pass
    mutable = [list(b) for b in bins]
    assert second.flatten(mutable)[0].tolist() == [5, 0, 3, 4, 1, 2]
    mutable[0][0], mutable[1][0] = 4, 5  # lists are never cached: the change is seen
    assert second.flatten(mutable)[0].tolist() == [4, 0, 3, 5, 1, 2]
    for k in range(FLAT_CACHE + 2):  # older answers leave the cache; the reference stays
        first.flatten(((k % 2, 5, 3), (4, 1, 2 - 2 * (k % 2))))
    assert second.flatten(bins)[0].tolist() == [5, 0, 3, 4, 1, 2]


def test_the_cache_pickles_empty_and_a_fresh_one_scores_the_same():
    instance = make_instance([3, 2, 2, 1, 1, 1], seq_len=8, data_parallel_size=2, local_batch_size=1)
    bins = ((0, 3, 5), (1, 2, 4))
    before = BalanceEvaluator(instance).score(bins)
    assert BalanceEvaluator(instance).lower_bound() == 5.0
    shared = instance.__dict__[SHARED_ATTR]
    assert shared.flats and shared.bounds
    clone = pickle.loads(pickle.dumps(shared))
    assert clone.flats == [] and clone.bounds == {} and clone.keys is None
    object.__setattr__(instance, SHARED_ATTR, clone)
    after = BalanceEvaluator(instance).score(bins)
    assert after.objective == before.objective == 5.0
    assert after.rank_loads.tolist() == before.rank_loads.tolist() == [5.0, 5.0]


@pytest.mark.parametrize("solver", ["reference", "lpt", "repair"])
def test_result_json_is_the_text_of_its_dict(solver):
    instance = make_instance([5, 4, 3, 3, 2, 2, 1], seq_len=8, data_parallel_size=2, local_batch_size=2,
                             reference_bins="auto")
    result = packplace.balance(instance, solver=solver)
    assert result.to_json() == json.dumps(result.to_dict(), allow_nan=False)
    assert result.to_json(indent=2) == json.dumps(result.to_dict(), indent=2, allow_nan=False)
