"""The verl drop-in module as verl's trainer and engines call it: TensorDicts with dense and nested (jagged)
tensors, DataProto-like batches, the uid-grouped rank balancing, the metrics, and install()/uninstall().

The semantics checked are the ones verl 0.9.1 documents for ``verl.utils.seqlen_balancing``: every micro-batch
within ``max_token_len`` tokens, every index exactly once, ``restore_dynamic_batch`` inverting the rearrangement,
the batch's container types kept, the micro-batch count never above verl's (its count search is
``verl_oracle.verl_rearrange``). The torch tests skip without torch and tensordict (the ``verl-test`` extra).
"""

from __future__ import annotations

import sys
import types
from itertools import chain

import numpy as np
import pytest
from verl_oracle import verl_partitions, verl_rearrange

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


# ---------------------------------------------------------------- TensorDicts and nested tensors

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
from tensordict import TensorDict  # noqa: E402
from tensordict.tensorclass import NonTensorData, NonTensorStack  # noqa: E402


def _nested(rows):
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _no_padding_batch(seed, size, cap):
    """verl's no-padding layout: jagged input_ids / position_ids / loss_mask, a (B, j, 3) jagged field,
    per-sample NonTensorStack uids and batch-wide NonTensorData settings."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, cap // 2 + 1, (size,), generator=gen).tolist()
    hidden = torch.nested.nested_tensor_from_jagged(values=torch.randn(sum(lengths), 3, generator=gen),
                                                    offsets=torch.tensor([0, *np.cumsum(lengths).tolist()]))
    batch = TensorDict({
        "input_ids": _nested([torch.randint(0, 100, (n,), generator=gen) for n in lengths]),
        "position_ids": _nested([torch.arange(n) for n in lengths]),
        "loss_mask": _nested([torch.ones(n) for n in lengths]),
        "hidden": hidden,
        "reward": torch.randn(size, generator=gen),
    }, batch_size=[size])
    batch["uid"] = NonTensorStack(*[NonTensorData(f"u{i}") for i in range(size)])
    batch["max_token_len_per_gpu"] = NonTensorData(cap)
    return batch, lengths


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("size,cap", [(8, 256), (33, 512), (64, 1024)])
def test_no_padding_nested_tensordicts(seed, size, cap):
    batch, lengths = _no_padding_batch(seed, size, cap)
    micro, idx = pv.rearrange_micro_batches(batch, max_token_len=cap)
    assert sorted(chain.from_iterable(idx)) == list(range(size))
    assert len(micro) <= verl_rearrange(lengths, cap)[0]
    for part, index in zip(micro, idx):
        assert isinstance(part, TensorDict) and part.batch_size == torch.Size([len(index)])
        assert sum(lengths[i] for i in index) <= cap
        for key in ("input_ids", "position_ids", "loss_mask", "hidden"):
            assert part[key].is_nested and part[key].layout == torch.jagged
            assert all(torch.equal(a, batch[key][i]) for a, i in zip(part[key].unbind(), index))
        assert part["hidden"]._ragged_idx == 1 and part["hidden"].shape[-1] == 3
        assert torch.equal(part["reward"], batch["reward"][index])
        assert part.get("uid").tolist() == [f"u{i}" for i in index]
        assert part["max_token_len_per_gpu"] == cap
    # verl's engine concatenates the outputs row by row and restores them
    for key in ("input_ids", "hidden"):
        flat = _nested([row for part in micro for row in part[key].unbind()])
        back = pv.restore_dynamic_batch(flat, idx)
        assert back.is_nested and all(torch.equal(a, b) for a, b in zip(back.unbind(), batch[key].unbind()))
    dense = torch.cat([part["reward"] for part in micro])
    assert torch.equal(pv.restore_dynamic_batch(dense, idx), batch["reward"])


@pytest.mark.parametrize("seed", range(5))
def test_padded_tensordicts_concatenate_and_restore(seed):
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 10, (20, 100), generator=gen)
    valid = torch.randint(50, 91, (20,), generator=gen)
    mask = (torch.arange(100)[None, :] < valid[:, None]).long()
    batch = TensorDict({"input_ids": input_ids, "attention_mask": mask}, batch_size=[20])
    micro, idx = pv.rearrange_micro_batches(batch, max_token_len=300, use_dynamic_bsz_balance=True)
    assert all(isinstance(part, TensorDict) for part in micro)
    assert all(int(part["attention_mask"].sum()) <= 300 for part in micro)
    assert len(micro) <= verl_rearrange(valid.tolist(), 300)[0]
    merged = torch.cat(micro)
    reverse = torch.tensor(pv.get_reverse_idx(list(chain.from_iterable(idx))))
    assert (merged[reverse] == batch).all()
    assert torch.equal(pv.restore_dynamic_batch(merged["input_ids"], idx), input_ids)


def test_forced_groups_on_nested_tensordicts():
    batch, lengths = _no_padding_batch(1, 24, 512)
    micro, idx = pv.rearrange_micro_batches(batch, max_token_len=512, force_group_size=2)
    assert all(part[::2] == [i - 1 for i in part[1::2]] and part[0] % 2 == 0 for part in map(sorted, idx))
    assert all(sum(lengths[i] for i in part) <= 512 for part in idx)


def test_calculate_workload_on_tensors_is_int64_and_exact():
    out = pv.calculate_workload(torch.tensor([1, 46341, 100_000], dtype=torch.int32))
    assert out.dtype == torch.int64 and out.tolist() == [24576 * s + s * s for s in (1, 46341, 100_000)]
    # verl's trainer path: the tensor workloads go straight into the rank balancing
    loads = pv.calculate_workload(torch.tensor([512, 2048, 96, 700, 64, 1000]))
    parts = pv.get_seqlen_balanced_partitions(loads, 2, equal_size=True)
    assert sorted(chain.from_iterable(parts)) == list(range(6)) and all(len(p) == 3 for p in parts)
    with pytest.raises(ConfigError, match=r"^seqlen_list\[1\]: must be >= 0"):
        pv.calculate_workload(torch.tensor([1, -2]))


def test_real_verl_engine_path_with_packplace_installed():
    """Runs only where verl itself imports (its engine utils need transformers, peft, ray, ...)."""
    try:
        import verl.workers.engine.utils as engine_utils
        from verl.utils import tensordict_utils as tu
    except Exception as missing:  # noqa: BLE001 - any import failure of the optional framework
        pytest.skip(f"verl is not importable here ({type(missing).__name__})")
    pv.install()
    try:
        batch, lengths = _no_padding_batch(0, 40, 1024)
        tu.assign_non_tensor(batch, use_dynamic_bsz=True, sp_size=1)
        micro, idx = engine_utils.prepare_micro_batches(batch)
        assert all(isinstance(part, TensorDict) and part["input_ids"].is_nested for part in micro)
        assert sorted(chain.from_iterable(idx)) == list(range(40))
        assert all(sum(lengths[i] for i in part) <= 1024 for part in idx)
    finally:
        pv.uninstall()
