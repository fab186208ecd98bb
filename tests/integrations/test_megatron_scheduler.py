"""packplace's scheduler for Megatron-Core's sequence-packing slot, against hand-computed schedules and
the benchmark's re-implementation of Megatron's ``dp_balanced``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.integrations.megatron import PackplacePackingScheduler, sequence_flops

_SPEC = importlib.util.spec_from_file_location(
    "megatron_dp_balanced", Path(__file__).resolve().parents[2] / "benchmarks" / "megatron_dp_balanced.py")
dp_balanced = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(dp_balanced)


def _rank_flops(groups, lengths, cp_size=1, hidden=1):
    flops = sequence_flops(lengths, hidden)
    costs = dp_balanced.micro_costs(groups, flops, cp_size)
    return [sum(rank) for rank in costs]


def test_dp_balanced_reimplementation_on_a_hand_case():
    # cap 9, dp 2: next fit gives [0, 1] (4 + 4; + 3 > 9), [2, 3, 4] (3 + 3 + 2; + 2 > 9), [5] -> 3 packs; to reach a
    # multiple of 2 the last pack holding two or more ([2, 3, 4]) gives its last sample a pack of its own.
    groups = dp_balanced.dp_balanced_groups(list(enumerate([4, 4, 3, 3, 2, 2])), 9, 1, 2)
    assert groups == [[[0, 1], [2, 3]], [[5], [4]]]


def test_packplace_balances_flops_where_next_fit_does_not():
    # FLOPs 6s + s^2 (h = 1): 4 -> 40, 3 -> 27, 2 -> 16; total 166. One pack per rank {4, 3, 2} (9 tokens) is
    # 83 | 83, the optimum. dp_balanced (above): rank 0 packs [0, 1] + [5] = 80 + 16 = 96, rank 1 54 + 16 = 70.
    lengths = [4, 4, 3, 3, 2, 2]
    scheduler = PackplacePackingScheduler(9, 1, 2, None, hidden_size=1)
    groups = scheduler.get_groups_and_subsamples(list(enumerate(lengths)))
    assert len(groups) == 1 and _rank_flops(groups, lengths) == [83.0, 83.0]
    theirs = dp_balanced.dp_balanced_groups(list(enumerate(lengths)), 9, 1, 2)
    assert max(_rank_flops(theirs, lengths)) == 96.0


def test_layout_matches_megatron_with_context_parallel_and_virtual_pipeline():
    # dp 2, cp 2, 4 ranks per micro-batch; CP ranks 2r and 2r+1 share DP rank r's pack. Cap 5 * 2 = 10 tokens
    # per pack; 8 sequences of 5 tokens need 4 packs; with a VPP group of 2 each rank holds 2 packs.
    scheduler = PackplacePackingScheduler(5, 2, 2, 2, hidden_size=1)
    groups = scheduler.get_groups_and_subsamples([(100 + i, 5) for i in range(8)])
    assert len(groups) == 2 and all(len(g) == 4 for g in groups)
    assert all(g[0] == g[1] and g[2] == g[3] for g in groups)
    packs = [g[j] for g in groups for j in (0, 2)]
    assert sorted(i for p in packs for i in p) == list(range(8)) and all(len(p) == 2 for p in packs)
    # each rank runs its heaviest pack first (all equal here: ties by member list)
    assert scheduler.get_required_sample_keys()[-2:] == ["original_seq_len", "padded_seq_len"]


def test_packs_per_rank_round_up_to_the_virtual_pipeline_group():
    # 6 sequences of 4 tokens, cap 10, dp 1: 3 packs of two suffice; a VPP group of 2 makes it 4.
    scheduler = PackplacePackingScheduler(10, 1, 1, 2, hidden_size=1)
    groups = scheduler.get_groups_and_subsamples(list(enumerate([4] * 6)))
    assert len(groups) == 4
    assert all(sum(4 for _ in g[0]) <= 10 for g in groups)


def test_bad_arguments_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="dp_size: must be an integer >= 1"):
        PackplacePackingScheduler(10, 1, 0, None)
    with pytest.raises(ConfigError, match="tokens"):
        PackplacePackingScheduler(10, 1, 1, None).get_groups_and_subsamples([(0, 11)])


def test_entries_that_are_not_id_length_pairs_or_bad_lengths_are_refused_in_one_line():
    scheduler = PackplacePackingScheduler(8, 1, 1, None)
    for entries, message in (([4, 3], r"sample_id_seqlens\[0\]: must be a \(sample id, sequence length\) pair, got 4"),
                             ([(0, "x"), (1, 3)], r"seqlens\[0\]: must be an integer >= 1, got 'x'"),
                             ([(0, 4.5), (1, 3)], r"seqlens\[0\]: must be an integer >= 1, got 4\.5")):
        with pytest.raises(ConfigError, match=message):
            scheduler.get_groups_and_subsamples(entries)
    assert scheduler.get_groups_and_subsamples([(7, 4), (9, 3)]) == [[[0, 1]]]
