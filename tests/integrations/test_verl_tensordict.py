"""The verl drop-in module on TensorDicts with dense and nested (jagged) tensors, as verl's engines call it.

Semantics checked (verl 0.9.1's): every micro-batch within ``max_token_len`` tokens, every index exactly once,
``restore_dynamic_batch`` inverting the rearrangement, TensorDicts and nested tensors (their ragged dimension,
``NonTensorStack`` rows, ``NonTensorData``) kept, the micro-batch count never above verl's
(``verl_oracle.verl_rearrange``). Skipped without torch and tensordict (the ``verl-test`` extra).
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pytest
from verl_oracle import verl_rearrange

import packplace.integrations.verl as pv
from packplace.errors import ConfigError

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

