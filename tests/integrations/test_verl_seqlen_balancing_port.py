"""verl's own seqlen-balancing tests, ported torch-free, with packplace's drop-ins swapped in.

Source: https://github.com/volcengine/verl/blob/b178a3cd56f58b2d502255daba591e92833930a7/tests/utils/test_seqlen_balancing.py
(Apache-2.0, Copyright 2025 Bytedance Ltd. and/or its affiliates): ``test_seqlen_balancing``,
``test_dynamic_batch`` and the two runs of ``test_seqlen_balancing_distributed_params``
(``min_num_micro_batch`` only; ``same_micro_num_in_dp`` only). Those tests need torch, CUDA and
torch.distributed; this port keeps their inputs (batches of 20 + 5·rank rows of width 100, random
masks with at most 10% left padding and 50-90% valid tokens, ``max_token_len=300``) and their
assertions, with numpy arrays for tensors and, for the two ranks of the distributed test, the
count synchronised by passing the maximum over ranks as ``num_micro_batches`` (no
torch.distributed). verl 0.9.1 grows the count until every micro-batch fits the cap, so the counts
are also checked against that rule (``verl_oracle.verl_rearrange``): never more micro-batches than
verl. TensorDict / nested-tensor and torch-using checks, ``get_group_balanced_partitions`` included, are in
``test_verl_module.py`` and ``test_verl_tensordict.py``; ``test_dataproto_split_uneven`` tests verl's
DataProto: not ported.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from verl_oracle import verl_rearrange

from packplace.errors import ConfigError
from packplace.integrations.verl import (
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    rearrange_micro_batches,
    required_micro_batches,
)


def create_random_mask(rng, shape, max_ratio_of_valid_token, max_ratio_of_left_padding, min_ratio_of_valid_token=0):
    """verl.utils.model.create_random_mask: per row a random left padding, then a random number of valid tokens."""
    batch_size, width = shape
    max_valid = int(width * max_ratio_of_valid_token)
    min_valid = max(1, int(width * min_ratio_of_valid_token))
    max_left = int(width * max_ratio_of_left_padding)
    mask = np.ones(shape, dtype=np.int64)
    for i in range(batch_size):
        left = int(rng.integers(0, max_left + 1))
        valid = int(rng.integers(min_valid, max_valid + 1))
        mask[i, :left] = 0
        mask[i, left + valid:] = 0
    return mask


def _batch(seed, rows):
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(0, 10, size=(rows, 100))
    mask = create_random_mask(rng, input_ids.shape, max_ratio_of_valid_token=0.9, max_ratio_of_left_padding=0.1,
                              min_ratio_of_valid_token=0.5)
    return {"input_ids": input_ids, "attention_mask": mask}


@pytest.mark.parametrize("seed", range(5))
def test_seqlen_balancing(seed):
    batch = _batch(seed, 20)
    micro_batches, micro_bsz_idx_lst = rearrange_micro_batches(batch, max_token_len=300)
    merged = {key: np.concatenate([mb[key] for mb in micro_batches]) for key in batch}
    reverse = np.asarray(get_reverse_idx(list(chain.from_iterable(micro_bsz_idx_lst))))
    for key in batch:
        np.testing.assert_array_equal(merged[key][reverse], batch[key])
    assert all(mb["attention_mask"].sum() <= 300 for mb in micro_batches)


@pytest.mark.parametrize("seed", range(5))
def test_dynamic_batch(seed):
    # prepare_dynamic_batch then restore_dynamic_batch: concatenate, then index by the reverse of the chained lists
    batch = _batch(seed, 20)
    micro_batches, idx = rearrange_micro_batches(batch, max_token_len=300)
    input_ids = np.concatenate([mb["input_ids"] for mb in micro_batches])
    restored = input_ids[np.asarray(get_reverse_idx(list(chain.from_iterable(idx))), dtype=np.int64)]
    np.testing.assert_array_equal(restored, batch["input_ids"])


def _local_count(batch):
    lengths = batch["attention_mask"].sum(axis=1)
    return min(len(lengths), -(-int(lengths.sum()) // 300))


@pytest.mark.parametrize("seed", range(5))
def test_min_num_micro_batch_only(seed):
    for rank in range(2):
        batch = _batch(42 + rank + 100 * seed, 20 + rank * 5)
        micros, idx = rearrange_micro_batches(batch, max_token_len=300, same_micro_num_in_dp=False,
                                              min_num_micro_batch=4)
        lengths = batch["attention_mask"].sum(axis=1).tolist()
        verl_count, _ = verl_rearrange(lengths, 300, min_num_micro_batch=4)
        assert max(_local_count(batch), 4) <= len(micros) <= verl_count
        flat = np.concatenate([m["input_ids"] for m in micros])
        np.testing.assert_array_equal(flat[np.asarray(get_reverse_idx(list(chain.from_iterable(idx))))],
                                      batch["input_ids"])


@pytest.mark.parametrize("seed", range(5))
def test_same_micro_num_in_dp_only(seed):
    batches = [_batch(42 + rank + 100 * seed, 20 + rank * 5) for rank in range(2)]
    lengths = [b["attention_mask"].sum(axis=1).tolist() for b in batches]
    synced = max(required_micro_batches(values, 300) for values in lengths)  # the all-reduce, done by hand
    counts = []
    for batch in batches:
        micros, idx = rearrange_micro_batches(batch, max_token_len=300, num_micro_batches=synced)
        counts.append(len(micros))
        assert all(m["attention_mask"].sum() <= 300 for m in micros)
        flat = np.concatenate([m["input_ids"] for m in micros])
        np.testing.assert_array_equal(flat[np.asarray(get_reverse_idx(list(chain.from_iterable(idx))))],
                                      batch["input_ids"])
    verl_count, _ = verl_rearrange(lengths[0], 300, rank_counts=[lengths[1]])
    assert counts[0] == counts[1]
    assert max(_local_count(b) for b in batches) <= counts[0] <= verl_count


# ---------------------------------------------------------------------------------------------------------------


def test_count_grows_until_every_micro_batch_fits():
    # 20 sequences of 90 tokens, cap 300: ceil(1800 / 300) = 6 micro-batches hold 20 sequences only with a
    # 4-sequence one (360 > 300); 3 per micro-batch (270) needs ceil(20 / 3) = 7.
    micros, idx = rearrange_micro_batches([90] * 20, 300)
    assert len(idx) == 7 and all(len(p) * 90 <= 300 for p in idx)
    assert verl_rearrange([90] * 20, 300)[0] == 7
    assert required_micro_batches([90] * 20, 300) == 7
    # a multiple of 4 (virtual pipeline stages): 8
    assert len(rearrange_micro_batches([90] * 20, 300, num_batches_divided_by=4)[1]) == 8


def test_forced_groups_stay_together_and_bad_input_is_refused():
    _, idx = rearrange_micro_batches([100, 100, 50, 50, 120, 80], 200, force_group_size=2)
    assert sorted(sorted(p) for p in idx) == [[0, 1], [2, 3], [4, 5]]  # each pair is 200 tokens
    with pytest.raises(ConfigError, match="force_group_size: batch size 5 must be a positive multiple of 2"):
        rearrange_micro_batches([1, 2, 3, 4, 5], 10, force_group_size=2)
    with pytest.raises(ConfigError, match="max_token_len: must be at least the sequence length 100"):
        rearrange_micro_batches({"attention_mask": np.ones((3, 100), dtype=np.int64)}, 50)


def test_reverse_idx_keeps_the_container_type():
    assert get_reverse_idx([2, 0, 1]) == [1, 2, 0]  # out[2] = 0, out[0] = 1, out[1] = 2
    out = get_reverse_idx(np.array([1, 0]))
    assert isinstance(out, np.ndarray) and out.tolist() == [1, 0]
    with pytest.raises(ConfigError, match="idx_map: must be a permutation"):
        get_reverse_idx([0, 0])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), divided_by=st.sampled_from([None, 2]), minimum=st.sampled_from([None, 3]))
def test_never_more_micro_batches_than_verl(data, divided_by, minimum):
    n = data.draw(st.integers(6, 30))
    cap = 100
    lengths = data.draw(st.lists(st.integers(1, cap), min_size=n, max_size=n))
    try:
        theirs, _ = verl_rearrange(lengths, cap, min_num_micro_batch=minimum, num_batches_divided_by=divided_by)
    except AssertionError:
        return  # verl runs out of samples before every micro-batch fits: it raises too
    _, idx = rearrange_micro_batches(lengths, cap, num_batches_divided_by=divided_by, min_num_micro_batch=minimum)
    assert len(idx) <= theirs
    assert sorted(i for p in idx for i in p) == list(range(n))
    assert all(p and sum(lengths[i] for i in p) <= cap for p in idx)
    if divided_by:
        assert len(idx) % divided_by == 0


# ---------------------------------------------------------------------------------------------------------------


def test_exact_integer_sums_above_two_to_the_53():
    # float64 cannot tell 2^60 + 1 .. 2^60 + 4 apart (spacing 256 there). Exactly: {1, 4} | {2, 3} both 2·2^60 + 5.
    b = 2**60
    values = [b + 1, b + 2, b + 3, b + 4]
    parts = get_seqlen_balanced_partitions(values, 2, False)
    assert max(sum(values[i] for i in p) for p in parts) == 2 * b + 5
    parts = get_seqlen_balanced_partitions(values, 2, True)
    assert max(sum(values[i] for i in p) for p in parts) == 2 * b + 5


def test_any_iterable_and_truthy_equal_size():
    # 5, 4, 3, 2, 1 in 2 parts: 15 in all, an 8 | 7 split (5 + 3 | 4 + 2 + 1) is optimal
    parts = get_seqlen_balanced_partitions((v for v in [5, 4, 3, 2, 1]), 2, 0)
    assert max(sum([5, 4, 3, 2, 1][i] for i in p) for p in parts) == 8
    parts = get_seqlen_balanced_partitions(iter([4, 3, 2, 1]), 2, 1)  # equal sizes: {4, 1} | {3, 2}
    assert sorted(sorted(p) for p in parts) == [[0, 3], [1, 2]]


def test_an_unknown_solver_is_refused_on_the_equal_size_path_too():
    from packplace.errors import ConfigError
    from packplace.integrations.verl import get_seqlen_balanced_partitions
    for lengths in ([512, 2048, 3, 4], [512, 2048, 3]):   # k divides n (verl's path), and not
        with pytest.raises(ConfigError, match="solver: unknown balance solver 'nope'"):
            get_seqlen_balanced_partitions(lengths, 2, True, solver="nope")
