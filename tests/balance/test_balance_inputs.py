"""make_instance on numpy columns and scalars, its column-wise errors, and the auto reference packing."""

from __future__ import annotations

import dataclasses
import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import BalanceEvaluator, Sample, make_instance
from packplace.balance.config import build_instance
from packplace.balance.reference import token_packing_reference
from packplace.balance.schema import BalanceInstance, PackingConstraints, SampleTable, key_order
from packplace.errors import ConfigError


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint16, np.uint64, np.float32, np.float64])
def test_numpy_token_columns_of_any_numeric_dtype_give_the_list_instance(dtype):
    tokens = [5, 3, 7, 2, 9, 4]
    costs = [1.5, 2.0, 0.25, 3.0, 1.0, 0.5]
    expected = make_instance(tokens, costs, seq_len=16, data_parallel_size=2, local_batch_size=1)
    built = make_instance(
        np.array(tokens, dtype=dtype), np.array(costs, dtype=np.float32),
        seq_len=np.int64(16), data_parallel_size=np.int32(2), local_batch_size=np.uint8(1),
    )
    assert built.keys == expected.keys == (0, 1, 2, 3, 4, 5)
    assert built.tokens.dtype == np.int64 and built.tokens.tolist() == tokens
    assert built.costs.tolist() == expected.costs.tolist()
    assert type(built.constraints.seq_len) is int and type(built.data_parallel_size) is int
    assert built.samples[2] == Sample(2, 7, 0.25)


def test_numpy_keys_and_scalars_become_python_values():
    inst = make_instance(np.array([4, 4]), seq_len=8, data_parallel_size=1, keys=np.array(["a", "b"]))
    assert inst.keys == ("a", "b") and all(type(k) is str for k in inst.keys)
    inst = make_instance([4, 4], seq_len=8, data_parallel_size=1, keys=[np.int64(7), np.int32(3)])
    assert inst.keys == (7, 3) and all(type(k) is int for k in inst.keys)


def test_rows_are_built_on_demand_and_compare_equal_to_objects():
    inst = make_instance([3, 4, 5], [1.0, 2.0, 3.0], seq_len=12, data_parallel_size=1)
    assert isinstance(inst.samples, SampleTable) and len(inst.samples) == 3
    assert inst.samples == (Sample(0, 3, 1.0), Sample(1, 4, 2.0), Sample(2, 5, 3.0))
    again = BalanceInstance(tuple(inst.samples), inst.constraints, 1)
    assert again.samples == inst.samples and again.tokens.tolist() == [3, 4, 5]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tokens": [3, 4, 5, 6], "keys": ["a", "b", "c"]}, r"keys: 3 keys for 4 samples"),
        ({"tokens": [3, 4, 5], "costs": [1.0, 2.0]}, r"costs: 2 costs for 3 samples"),
        ({"tokens": [3, True, 5]}, r"tokens\[1\]: must be a number, got True"),
        ({"tokens": np.array([True, False])}, r"tokens\[0\]: must be a number, got True"),
        ({"tokens": [3, 4.5, 5]}, r"sample 1: tokens must be an integer >= 1, got 4.5"),
        ({"tokens": [3, 0, 5]}, r"sample 1: tokens must be an integer >= 1, got 0"),
        ({"tokens": [3, float("nan"), 5]}, r"sample 1: tokens must be an integer >= 1, got nan"),
        ({"tokens": [3, 2**63 - 5, 5]}, r"sample 1: tokens must be at most 2\^53, got 9223372036854775803"),
        ({"tokens": [3, 2**70, 5]}, r"sample 1: tokens must be at most 2\^53"),
        ({"tokens": np.array([3, 2**62, 5])}, r"sample 1: tokens must be at most 2\^53"),
        ({"tokens": [3, "4", 5]}, r"tokens\[1\]: must be a number, got '4'"),
        ({"tokens": np.ones((2, 3))}, r"tokens: must be one-dimensional, got an array of shape \(2, 3\)"),
        ({"tokens": [3, 4, 5], "costs": [1.0, float("inf"), 1.0]}, r"sample 1: cost must be finite and >= 0, got inf"),
        ({"tokens": [3, 4, 5], "costs": np.array([1.0, -2.0, 1.0])}, r"sample 1: cost must be finite and >= 0"),
        ({"tokens": [3, 4, 5], "costs": [1e308, 1e308, 1.0]},
         r"samples: the costs sum to more than float64 holds, above the supported 2\^1022"),
        ({"tokens": [3, 4, 5], "costs": [1, 10**400, 1]}, r"costs\[1\]: .* is beyond the float64 range"),
        ({"tokens": [3, 4, 5], "keys": [b"a", b"b", b"c"]}, r"keys\[0\]: must be an int or a str, got b'a'"),
        ({"tokens": [3, 4, 5], "keys": [1.0, 2.0, 3.0]}, r"keys\[0\]: must be an int or a str, got 1.0"),
        ({"tokens": [3, 4], "keys": [datetime.date(2024, 1, 1), 2]}, r"keys\[0\]: must be an int or a str"),
        ({"tokens": [3, 4], "keys": [True, 2]}, r"keys\[0\]: must be an int or a str, got True"),
        ({"tokens": [3, 4, 5], "keys": [1, 1, 2]}, r"duplicate key 1"),
        ({"tokens": "345"}, r"tokens: must be a list or 1-D array of numbers, got '345'"),
    ],
)
def test_bad_columns_are_one_line_errors_naming_field_and_value(kwargs, match):
    with pytest.raises(ConfigError, match=match) as info:
        make_instance(**{"seq_len": 2**53, "data_parallel_size": 1, **kwargs})
    assert "\n" not in str(info.value)


def test_huge_values_in_messages_are_truncated():
    with pytest.raises(ConfigError) as info:
        make_instance([3, 4], seq_len=8, data_parallel_size=1, keys=[list(range(10**5)), 2])
    assert len(str(info.value)) < 300


def test_total_tokens_beyond_two_to_the_53_are_refused_before_any_solver():
    with pytest.raises(ConfigError, match=r"more than the supported 2\^53"):
        make_instance([2**52, 2**52, 2**52], seq_len=2**53, data_parallel_size=3)
    with pytest.raises(ConfigError, match=r"seq_len: must be at most 9007199254740992"):
        make_instance([3], seq_len=2**60, data_parallel_size=1)


def test_scalar_arguments_reject_booleans_and_floats():
    with pytest.raises(ConfigError, match="data_parallel_size: must be an integer >= 1, got True"):
        make_instance([3, 4], seq_len=8, data_parallel_size=True)
    with pytest.raises(ConfigError, match="seq_len: must be an integer >= 1, got 8.0"):
        make_instance([3, 4], seq_len=8.0, data_parallel_size=1)


def _worst_fit_oracle(samples, constraints, num_bins):
    """Worst-fit decreasing by scanning every bin (the quadratic definition)."""
    bins = [[] for _ in range(num_bins)]
    used = [0] * num_bins
    usage = [{} for _ in range(num_bins)]
    for item in sorted(samples, key=lambda s: (-s.tokens, key_order(s.key))):
        best = None
        for b in range(num_bins):
            if used[b] + item.tokens > constraints.seq_len and not (
                constraints.oversized_policy == "single" and not bins[b]
            ):
                continue
            if any(usage[b].get(n, 0.0) + v > constraints.budgets[n] for n, v in item.budgets.items()):
                continue
            if best is None or used[b] < used[best]:
                best = b
        if best is None:
            return None
        bins[best].append(item.key)
        used[best] += item.tokens
        for n, v in item.budgets.items():
            usage[best][n] = usage[best].get(n, 0.0) + v
    if any(not b for b in bins):
        return None
    return tuple(tuple(b) for b in bins)


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    seq_len=st.integers(8, 40),
    num_bins=st.integers(1, 8),
    single=st.booleans(),
    with_budget=st.booleans(),
    data=st.data(),
)
def test_heap_worst_fit_equals_the_quadratic_definition(tokens, seq_len, num_bins, single, with_budget, data):
    usages = data.draw(st.lists(st.integers(0, 5), min_size=len(tokens), max_size=len(tokens)))
    budgets = {"v": 8.0} if with_budget else {}
    samples = [
        Sample(f"k{i}" if i % 3 == 0 else i, t, float(t), {"v": float(u)} if with_budget else {})
        for i, (t, u) in enumerate(zip(tokens, usages))
    ]
    constraints = PackingConstraints(seq_len, budgets, "single" if single else "error")
    assert token_packing_reference(samples, constraints, num_bins) == _worst_fit_oracle(samples, constraints, num_bins)


def test_auto_reference_is_feasible_on_a_large_instance():
    rng = np.random.default_rng(0)
    tokens = rng.integers(64, 4096, size=20_000)
    inst = make_instance(tokens, seq_len=8192, data_parallel_size=64, local_batch_size=100, reference_bins="auto")
    assert inst.reference_bins is not None and len(inst.reference_bins) == 6400
    assert BalanceEvaluator(inst).violations(inst.reference_bins) == []


def test_directly_built_instance_with_infeasible_reference_bins_is_refused_by_the_solve():
    """A reference grouping whose bin 0 holds 2 + 6 + 3 = 11 tokens > seq_len 10 is refused before any
    backend runs (a backend would return it on a dead end); the builder-checked instance solves."""
    good = make_instance(tokens=[2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3)
    bad = dataclasses.replace(good, reference_bins=((0, 1, 2), (3,), (4, 5, 6)))
    with pytest.raises(ConfigError, match="reference_bins: not a feasible assignment: bin 0 holds 11 tokens"):
        packplace.balance(bad, "lpt")
    assert packplace.balance(good, "lpt").objective == 10.0


@pytest.mark.parametrize(
    "column, match",
    [
        ({"tokens": np.ma.masked_array([3, 4, 5], mask=[0, 1, 0])}, r"tokens\[1\]: masked \(1 masked entries\)"),
        ({"costs": np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 0, 1])}, r"costs\[2\]: masked"),
        ({"keys": np.ma.masked_array(["a", "b", "c"], mask=[1, 1, 0])}, r"keys\[0\]: masked \(2 masked entries\)"),
    ],
)
def test_masked_arrays_with_masked_entries_are_refused(column, match):
    # the masked 4 was packed as a sample: a masked entry is not read as missing, so it is refused
    columns = {"tokens": [3, 4, 5], **column}
    with pytest.raises(ConfigError, match=match):
        make_instance(**columns, seq_len=10, data_parallel_size=1, local_batch_size=2)


def test_mask_free_masked_arrays_are_read_as_their_data():
    inst = make_instance(np.ma.masked_array([3, 4, 5], mask=[0, 0, 0]), np.ma.masked_array([1.0, 2.0, 4.0]),
                         keys=np.ma.masked_array(["a", "b", "c"], mask=False), seq_len=10, data_parallel_size=1,
                         local_batch_size=2)
    assert inst.tokens.tolist() == [3, 4, 5] and inst.costs.tolist() == [1.0, 2.0, 4.0]
    assert inst.keys == ("a", "b", "c") and type(inst.tokens) is np.ndarray


@pytest.mark.parametrize("objective", ["makespan", "balance", "lockstep", None])
def test_group_size_without_rounds_is_refused_as_in_a_config(objective):
    kwargs = {} if objective is None else {"objective": objective}
    shown = objective or "makespan"
    match = rf"group_size: sets the ranks per round of objective 'rounds' only; objective is '{shown}'"
    with pytest.raises(ConfigError, match=match):
        make_instance([1, 3, 4, 4], seq_len=10, data_parallel_size=4, group_size=2, **kwargs)
    config = {"seq_len": 10, "data_parallel_size": 4, "samples": {"lengths": [1, 3, 4, 4]}, "group_size": 2,
              **kwargs}
    with pytest.raises(ConfigError, match=match):
        build_instance(config)
    inst = make_instance([1, 3, 4, 4], seq_len=10, data_parallel_size=4, group_size=2, objective="rounds")
    assert inst.group_size == 2 and inst.resolved_group_size == 2
