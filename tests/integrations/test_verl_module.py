"""The verl drop-in module as verl's trainer calls it, torch-free: verl's twelve functions with verl's
signatures, DataProto-like batches, the uid-grouped rank balancing, the metrics, install()/uninstall() and the
docs' recipe. TensorDicts and nested tensors: ``test_verl_tensordict.py``.
"""

from __future__ import annotations

import sys
import types
from itertools import chain

import numpy as np
import pytest
from verl_oracle import verl_partitions

import packplace.integrations.verl as pv
from packplace.errors import ConfigError

# ---------------------------------------------------------------- torch-free functions


def test_calculate_workload_on_lists_and_arrays():
    assert pv.calculate_workload([0, 1, 100]) == [0, 24577, 2467600]
    arr = pv.calculate_workload(np.array([1, 100], dtype=np.int32))
    assert arr.dtype == np.int64 and arr.tolist() == [24577, 2467600]
    assert pv.calculate_workload(np.array([0.5])).tolist() == [24576 * 0.5 + 0.25]


def test_karmarkar_karp_and_greedy_are_verls_algorithms():
    values = [8, 7, 6, 5, 4]
    assert sorted(map(sorted, pv.karmarkar_karp(values, 2, False))) == sorted(verl_partitions(values, 2, False))
    # greedy, input order, smallest sum first: 8 -> 0, 7 -> 1, 6 -> 1 (7 < 8), 5 -> 0 (8 < 13), 4 -> 0 (13 = 13: lowest)
    assert pv.greedy_partition(values, 2, False) == [[0, 3, 4], [1, 2]]
    # equal_size: the bias makes parts fill in turn
    assert pv.greedy_partition([5, 1, 1, 1], 2, True) == [[0, 3], [1, 2]]
    with pytest.raises(ConfigError, match="equal_size"):
        pv.karmarkar_karp([1, 2, 3], 2, True)


def test_log_seqlen_unbalance_hand_computed():
    # chunks of 6 // 2 = 3 before: [1, 2, 3] = 6 and [10, 20, 30] = 60; after: {0, 5} = 31, {1, 2, 3, 4} = 35
    metrics = pv.log_seqlen_unbalance([1, 2, 3, 10, 20, 30], [[0, 5], [1, 2, 3, 4]], "g")
    assert metrics == {"g/min": 6, "g/max": 60, "g/minmax_diff": 54, "g/balanced_min": 31, "g/balanced_max": 35,
                       "g/mean": 33.0}


def test_ceildiv_and_roundup_divisible():
    assert [pv.ceildiv(7, 3), pv.ceildiv(6, 3), pv.ceildiv(0, 5)] == [3, 2, 0]
    assert [pv.roundup_divisible(7, 4), pv.roundup_divisible(8, 4)] == [8, 8]
    with pytest.raises(ConfigError, match="^b: must be non-zero"):
        pv.ceildiv(1, 0)


def test_group_balanced_partitions_keep_uids_together_and_never_lose_to_verl():
    rng = np.random.default_rng(3)
    for _ in range(30):
        groups, k = int(rng.integers(2, 12)), int(rng.integers(1, 4))
        groups = max(groups - groups % k, k)
        sizes = rng.integers(1, 5, size=groups)
        uid_list = list(chain.from_iterable([f"u{g}"] * int(s) for g, s in enumerate(sizes)))
        seqlens = rng.integers(1, 4000, size=len(uid_list)).tolist()
        parts = pv.get_group_balanced_partitions(seqlens, uid_list, k)
        assert sorted(chain.from_iterable(parts)) == list(range(len(seqlens)))
        assert all(part == sorted(part) for part in parts)
        where = {uid_list[i]: p for p, part in enumerate(parts) for i in part}
        assert all(where[uid_list[i]] == p for p, part in enumerate(parts) for i in part)
        loads = pv.workload(seqlens)
        group_loads = [sum(loads[i] for i in range(len(seqlens)) if uid_list[i] == f"u{g}") for g in range(groups)]
        theirs = max(sum(group_loads[g] for g in part) for part in verl_partitions(group_loads, k, True))
        assert max(sum(loads[i] for i in part) for part in parts) <= theirs


def test_group_counts_k_does_not_divide_are_refused_as_verl_refuses():
    # verl 0.9.1 balances the 3 uid groups with equal_size=True and asserts 3 % 2 == 0; its trainer's
    # _balance_batch needs parts of equal size, so the drop-in refuses too instead of returning [[0, 1], [2, 3, 4, 5]]
    with pytest.raises(AssertionError):
        verl_partitions([1, 2, 3], 2, True)
    with pytest.raises(ConfigError, match=r"^uid_list: 3 uid groups do not split into k_partitions=2 parts of equal "
                                          r"size \(3 % 2 = 1; verl refuses them too\)$"):
        pv.get_group_balanced_partitions([5, 3, 2, 2, 1, 1], list("aabbcc"), 2)
    # 4 groups: workloads 24576 s + s^2 per sample: a 196642, b 98312, c 49154, d 196640; two groups a part:
    # {a, c} | {b, d} = 245796 | 294952 is the least largest part ({a, b} | {c, d}: 294954, {a, d} | {b, c}: 393282)
    parts = pv.get_group_balanced_partitions([5, 3, 2, 2, 1, 1, 4, 4], list("aabbccdd"), 2)
    assert sorted(parts) == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_rearrange_accepts_min_num_micro_batch_zero_as_verl():
    # verl 0.9.1: max(0, count) leaves the count as it is; None likewise. 8 tokens, cap 4: two micro-batches
    for minimum in (0, None):
        assert pv.rearrange_micro_batches([3, 1, 2, 2], 4, min_num_micro_batch=minimum) == (
            [[3, 1], [2, 2]], [[0, 1], [2, 3]])
    with pytest.raises(ConfigError, match=r"^min_num_micro_batch: must be an integer >= 0 \(or None\), got -1$"):
        pv.rearrange_micro_batches([3, 1, 2, 2], 4, min_num_micro_batch=-1)


def test_group_balanced_partitions_join_uids_that_are_not_adjacent():
    parts = pv.get_group_balanced_partitions([10, 20, 10, 20], ["a", "b", "a", "b"], 2)
    assert sorted(parts) == [[0, 2], [1, 3]]


def test_restore_dynamic_batch_on_arrays_and_lists():
    idx = [[2, 0], [3], [1]]
    rows = np.array([20, 0, 30, 10])          # rows in micro-batch order: 2, 0, 3, 1
    np.testing.assert_array_equal(pv.restore_dynamic_batch(rows, idx), [0, 10, 20, 30])
    assert pv.restore_dynamic_batch(["c", "a", "d", "b"], idx) == ["a", "b", "c", "d"]
    with pytest.raises(ConfigError, match="^batch_idx_list: must hold each of the 4 rows"):
        pv.restore_dynamic_batch(rows, [[0, 1], [1, 2]])


class _Proto:
    """A stand-in for verl's DataProto: a batch, numpy non-tensor rows, meta_info, and from_dict."""

    def __init__(self, batch, non_tensor_batch, meta_info):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None):
        return cls(tensors, non_tensors or {}, meta_info or {})


def test_prepare_dynamic_batch_keeps_the_class_non_tensor_rows_and_meta_info():
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    meta = {"temperature": 1.0, "nested": {"a": [1]}}
    data = _Proto({"attention_mask": mask, "input_ids": np.arange(16).reshape(4, 4)},
                  {"uid": np.array(["a", "b", "c", "d"], dtype=object)}, meta)
    micro, idx = pv.prepare_dynamic_batch(data, 4)
    assert sorted(chain.from_iterable(idx)) == [0, 1, 2, 3]
    for part, index in zip(micro, idx):
        assert isinstance(part, _Proto)
        assert part.non_tensor_batch["uid"].tolist() == ["abcd"[i] for i in index]
        np.testing.assert_array_equal(part.batch["input_ids"], data.batch["input_ids"][index])
        assert part.batch["attention_mask"].sum() <= 4
        assert part.meta_info == meta and part.meta_info is not meta
    with pytest.raises(ConfigError, match="^data: must be a verl DataProto"):
        pv.prepare_dynamic_batch({"attention_mask": mask}, 4)


def _original(name):
    def verls(*args, **kwargs):
        return f"verl's {name}"

    return verls


def _stand_in_verl():
    """A fake ``verl.utils.seqlen_balancing`` (verl's names) and a module that imported two of them."""
    module = types.ModuleType("verl.utils.seqlen_balancing")
    for name in pv.VERL_FUNCTIONS:
        setattr(module, name, _original(name))
    user = types.ModuleType("verl.workers.engine.utils")
    user.rearrange_micro_batches = module.rearrange_micro_batches
    user.restore_dynamic_batch = module.restore_dynamic_batch
    return module, user


def test_install_points_verls_module_and_its_importers_at_packplace_and_uninstall_restores(monkeypatch):
    module, user = _stand_in_verl()
    originals = {name: getattr(module, name) for name in pv.VERL_FUNCTIONS}
    monkeypatch.setitem(sys.modules, "verl.workers.engine.utils", user)
    try:
        assert pv.install(module) == list(pv.VERL_FUNCTIONS)
        assert all(getattr(module, name) is getattr(pv, name) for name in pv.VERL_FUNCTIONS)
        assert user.rearrange_micro_batches is pv.rearrange_micro_batches
        assert user.restore_dynamic_batch is pv.restore_dynamic_batch
        assert pv.install(module) == []            # a second call changes nothing
    finally:
        restored = pv.uninstall()
    assert sorted(restored) == sorted(pv.VERL_FUNCTIONS)
    assert all(getattr(module, name) is originals[name] for name in pv.VERL_FUNCTIONS)
    assert user.rearrange_micro_batches is originals["rearrange_micro_batches"]
    assert pv.uninstall() == []


def test_the_docs_verl_recipe_runs_as_written(monkeypatch):
    from test_megatron_scheduler import _recipe

    if not _importable("verl"):
        # verl is not installed: the recipe runs on a stand-in of its module (verl's names)
        module, _ = _stand_in_verl()
        for name in ("verl", "verl.utils"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        monkeypatch.setitem(sys.modules, module.__name__, module)
    try:
        exec(compile(_recipe("verl-install"), "docs/integrations.md", "exec"), {})
    finally:
        pv.uninstall()


def test_install_without_verl_is_one_import_error_line():
    if "verl" in sys.modules or _importable("verl"):
        pytest.skip("verl is installed here")
    with pytest.raises(ImportError, match="^install: verl.utils.seqlen_balancing is not importable"):
        pv.install()


def _importable(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


#: verl 0.9.1's public functions of ``verl/utils/seqlen_balancing.py``: (parameter, default) in order, as its
#: source declares them (``...`` where there is no default).
VERL_0_9_1_SIGNATURES = {
    "calculate_workload": [("seqlen_list", ...)],
    "karmarkar_karp": [("seqlen_list", ...), ("k_partitions", ...), ("equal_size", ...)],
    "greedy_partition": [("seqlen_list", ...), ("k_partitions", ...), ("equal_size", ...)],
    "get_seqlen_balanced_partitions": [("seqlen_list", ...), ("k_partitions", ...), ("equal_size", ...)],
    "log_seqlen_unbalance": [("seqlen_list", ...), ("partitions", ...), ("prefix", ...)],
    "ceildiv": [("a", ...), ("b", ...)],
    "roundup_divisible": [("a", ...), ("b", ...)],
    "rearrange_micro_batches": [("batch", ...), ("max_token_len", ...), ("dp_group", None),
                                ("num_batches_divided_by", None), ("same_micro_num_in_dp", True),
                                ("min_num_micro_batch", None), ("use_dynamic_bsz_balance", True),
                                ("force_group_size", 1)],
    "get_reverse_idx": [("idx_map", ...)],
    "prepare_dynamic_batch": [("data", ...), ("max_token_len", ...), ("dp_group", None),
                              ("num_batches_divided_by", None), ("same_micro_num_in_dp", True),
                              ("min_num_micro_batch", None), ("use_dynamic_bsz_balance", True)],
    "restore_dynamic_batch": [("data", ...), ("batch_idx_list", ...)],
    "get_group_balanced_partitions": [("seqlen_list", ...), ("uid_list", ...), ("k_partitions", ...)],
}


def _positional(function):
    import inspect

    return [(p.name, ... if p.default is inspect.Parameter.empty else p.default)
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def test_every_verl_function_is_here_with_verls_positional_signature():
    assert set(pv.VERL_FUNCTIONS) == set(VERL_0_9_1_SIGNATURES)
    for name, parameters in VERL_0_9_1_SIGNATURES.items():
        assert _positional(getattr(pv, name)) == parameters, name


def test_signatures_match_the_installed_verl():
    """Runs only where verl imports: its module's public functions are all here, with its positional parameters."""
    try:
        import verl.utils.seqlen_balancing as theirs
    except Exception as missing:  # noqa: BLE001 - any import failure of the optional framework
        pytest.skip(f"verl is not importable here ({type(missing).__name__})")
    import inspect

    public = {name for name, value in vars(theirs).items() if inspect.isfunction(value) and not name.startswith("_")
              and value.__module__ == theirs.__name__}
    assert public <= set(pv.VERL_FUNCTIONS)
    for name in public:
        assert _positional(getattr(pv, name)) == _positional(getattr(theirs, name)), name


@pytest.mark.parametrize("lengths, group", [([0, 0, 0], 1), ([0, 0, 0, 0], 2), ([0], 1)])
def test_rearrange_micro_batches_keeps_every_row_of_a_batch_of_zero_length_rows(lengths, group):
    # verl's start count min(groups, ceil(0 / cap)) is 0; a count of 0 once returned [[2]] for three rows,
    # dropping rows 0 and 1. All rows fit one micro-batch of 0 tokens.
    micro, indices = pv.rearrange_micro_batches(lengths, 2, force_group_size=group)
    assert indices == [list(range(len(lengths)))]
    assert micro == [lengths]
    assert pv.required_micro_batches(lengths, 2, force_group_size=group) == 1
    mask = {"attention_mask": np.zeros((len(lengths), 2), dtype=np.int64)}
    assert pv.rearrange_micro_batches(mask, 2, force_group_size=group)[1] == [list(range(len(lengths)))]


def test_get_reverse_idx_keeps_each_container_type_a_tuple_included():
    # a tuple (immutable) had raised a bare TypeError from item assignment
    assert pv.get_reverse_idx((2, 0, 1)) == (1, 2, 0)
    assert pv.get_reverse_idx([2, 0, 1]) == [1, 2, 0]
    reverse = pv.get_reverse_idx(np.array([2, 0, 1]))
    assert isinstance(reverse, np.ndarray) and reverse.tolist() == [1, 2, 0]
    with pytest.raises(ConfigError, match=r"^idx_map: must be a permutation of 0\.\.2, got \[2, 2, 1\]$"):
        pv.get_reverse_idx((2, 2, 1))
