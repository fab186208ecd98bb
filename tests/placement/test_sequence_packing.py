"""NeMo RL's sequence packing (:mod:`packplace.placement.model.sequence_packing`): the modified first-fit
decreasing packer of v0.4/v0.5 and v0.6, the bin count raised to a multiple of the data-parallel ranks, the
round robin over ranks, the slowest path's tokens under each backend's padding, and the passes a config with
``policy.train_mb_tokens`` / ``logprob_mb_tokens`` prices from its packs — all hand-computed."""

from __future__ import annotations

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import cost_model
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.sequence_packing import (
    adjust_bin_count,
    critical_tokens,
    mffd_bins,
    rank_packs,
)
from packplace.placement.problem.config import build_instance


def test_mffd_follows_the_five_phases():
    # capacity 10: large (5, 10]: 7 (item 6), 6 (item 0); medium (3.33, 5]: 4 (item 1); small (1.67, 3.33]:
    # 2, 3, 3 (items 4, 2, 3); tiny: 1 (item 5). Phase 2: the 7-bin has 3 left (no medium fits), the 6-bin
    # takes the 4. Phase 3 (bins without a medium, backward): the 7-bin has 3 left < 2 + 3. Phase 4: the
    # 7-bin takes the largest that fits, 3 (item 2). Phase 5: first-fit decreasing of 3, 2, 1 into a new bin.
    assert mffd_bins([6, 4, 3, 3, 2, 1, 7], 10) == [[6, 2], [0, 1], [3, 4, 5]]
    # phase 3: a bin without a medium item takes the smallest small item (2) and the largest small one that
    # fits with it in the 4 left (2, not 3); the 3 opens a bin in phase 5
    assert mffd_bins([6, 2, 2, 3], 10) == [[0, 1, 2], [3]]
    # with 2 left, phase 3 skips (2 + 2 > 2) and phase 4 fills the bin with the largest item that fits, a 2
    assert mffd_bins([8, 2, 2, 3], 10) == [[0, 1], [3, 2]]


def test_v06_leftovers_go_to_the_least_filled_bin():
    # no item over C/2: every item is a leftover. First-fit decreasing: 3, 3, 3 fill bin A to 9, the 4th and
    # 5th 3 open bin B, the 1 goes back to A (9 + 1 = 10).
    assert mffd_bins([3, 3, 3, 3, 3, 1], 10) == [[0, 1, 2, 5], [3, 4]]
    # v0.6.0: each item to the least-filled bin when it fits: A = 3, 3, 3 (9); the 4th 3 does not fit A's 1
    # left and opens B; the 5th 3 and the 1 go to B, now the least filled (3, then 6); B sorts first (7 < 9)
    assert mffd_bins([3, 3, 3, 3, 3, 1], 10, worst_fit_leftovers=True) == [[3, 4, 5], [0, 1, 2]]
    # ... and its list of new bins starts with an empty one, dropped when nothing is left over
    assert mffd_bins([6], 10, worst_fit_leftovers=True) == [[0]]
    assert mffd_bins([6], 10) == [[0]]
    with pytest.raises(ConfigError, match="exceeds the 10-token pack"):
        mffd_bins([11], 10)


def test_bin_count_rises_to_a_multiple_of_the_ranks():
    bins = [[0, 1, 2], [3, 4], [5]]
    assert adjust_bin_count(bins, 3) == bins
    # 3 -> 4 bins: the new one takes the last item of the bin with the most items
    assert adjust_bin_count(bins, 4) == [[0, 1], [3, 4], [5], [2]]
    assert adjust_bin_count(bins, 2) == [[0, 1], [3, 4], [5], [2]]
    # 3 -> 5: the first source keeps giving while it holds more than one item
    assert adjust_bin_count(bins, 5) == [[0], [3, 4], [5], [2], [1]]
    with pytest.raises(ConfigError, match="6 sequences cannot fill 8 packs"):
        adjust_bin_count(bins, 8)


def test_packs_go_round_robin_with_sequences_rounded_to_the_pad_multiple():
    lengths = np.array([6, 4, 3, 3, 2, 1, 7])
    # bins [[6, 2], [0, 1], [3, 4, 5]] -> 4 for 2 ranks: item 5 moves out -> tokens 10, 10, 5, 1;
    # bin i to rank i mod 2
    (packs,) = rank_packs(lengths, 10, 2, 1, 1)
    assert packs.tolist() == [[10, 5], [10, 1]]
    # pad multiple 2: lengths 6, 4, 4, 4, 2, 2, 8 -> bins [[6, 4], [0, 1], [2, 3, 5]] -> item 5 out:
    # tokens 10, 10, 8, 2
    (packs,) = rank_packs(lengths, 10, 2, 1, 2)
    assert packs.tolist() == [[10, 8], [10, 2]]
    # two global batches of 4 sequences packed apart: 5 + 5 twice; 2 + 2 + 2 + 2 in one bin, whose last
    # sequence moves to a second bin for the second rank (6 and 2 tokens)
    chunks = rank_packs(np.array([5, 5, 5, 5, 2, 2, 2, 2]), 10, 2, 2, 1)
    assert [c.tolist() for c in chunks] == [[[10], [10]], [[6], [2]]]
    with pytest.raises(ConfigError, match="3 global batches do not divide 8"):
        rank_packs(np.ones(8, dtype=np.int64), 10, 2, 3, 1)


def test_slowest_path_under_each_backend():
    packs = [np.array([[10, 2], [8, 8]])]
    assert critical_tokens(packs, 0, rank_max=False, lockstep=True) == (2, 18.0)     # 10 + 8
    assert critical_tokens(packs, 0, rank_max=False, lockstep=False) == (2, 16.0)    # max(12, 16)
    assert critical_tokens(packs, 0, rank_max=True, lockstep=False) == (2, 20.0)     # 2 packs at 10
    assert critical_tokens(packs, 9, rank_max=False, lockstep=True) == (2, 19.0)     # DTensor pad to 9: 10 + 9
    assert critical_tokens(packs + packs, 0, rank_max=False, lockstep=False) == (4, 32.0)


# -- a config's passes priced from its packs -----------------------------------------------------------------
# 16 prompts x 2 samples = 32 sequences of 64 + 64 = 128 tokens (no gen_quantiles: every response 64).
def _instance(train_tokens=512, logprob_tokens=1024, backend="megatron", version="0.5.0", steps=1, sharding="zero1",
              quantiles=None):
    policy = {"algorithm": "grpo", "framework": "nemo-rl", "trainer_backend": backend, "framework_version": version}
    if train_tokens is not None:
        policy.update(train_mb_tokens=train_tokens, logprob_mb_tokens=logprob_tokens)
    return build_instance({
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                             "vocab_size": 32000, "num_attention_heads": 8, "num_key_value_heads": 8,
                             "model_type": "llama"},
                   "reward": "rule"},
        "workload": {"batch_size": 16, "samples_per_prompt": 2, "context_length": 64, "generation_length": 64,
                     **({"gen_quantiles": quantiles} if quantiles else {})},
        "policy": policy,
        "training": {"actor": {"sharding": sharding, "optimizer_steps": steps}}})


def test_equal_sequences_pack_like_a_fixed_micro_batch():
    # 128-token sequences are small items of a 512-token pack (C/6 < 128 <= C/3): first-fit decreasing puts
    # 4 in each of 8 packs, 4 per rank on 2 ranks: the plan's micro-batch of 4 sequences, whatever the plan says
    packed, plain = _instance(), _instance(train_tokens=None)
    actor = packed.models["actor"]
    cost, base = cost_model(packed), cost_model(plain)
    assert cost.pass_shape(actor, "train", 2, 1, 1, 1) == (4.0, 512.0)
    assert cost.pass_shape(actor, "logprob", 2, 1, 1, 1) == (2.0, 1024.0)     # 8 per 1,024-token pack
    extent = (1, 1, 2)
    assert cost.pass_time(actor, True, 2, 1, 1, 1, extent) == pytest.approx(
        base.pass_time(plain.models["actor"], True, 2, 1, 1, 4, extent), rel=1e-12)
    assert cost.pass_time(actor, False, 2, 1, 1, 1, extent) == pytest.approx(
        base.pass_time(plain.models["actor"], False, 2, 1, 1, 8, extent), rel=1e-12)


def test_dtensor_pads_training_packs_and_v06_every_pack():
    # 600-token packs hold 4 sequences (512 tokens; 5 would be 640): 8 packs, 4 per rank on 2 ranks
    inst = _instance(600, 600)
    megatron, actor = cost_model(inst), inst.models["actor"]
    assert megatron.pass_shape(actor, "train", 2, 1, 1, 1) == (4.0, 512.0)
    fsdp = _instance(600, 600, backend="fsdp", sharding="zero3")
    cost = cost_model(fsdp)
    actor = fsdp.models["actor"]
    assert cost.pass_shape(actor, "train", 2, 1, 1, 1) == (4.0, 600.0)          # min_seq_len = train_mb_tokens
    assert cost.pass_shape(actor, "logprob", 2, 1, 1, 1) == (4.0, 512.0)        # v0.5.0: log-prob unpadded
    v06 = _instance(600, 1024, backend="fsdp", sharding="zero3", version="0.6.0")
    assert cost_model(v06).pass_shape(v06.models["actor"], "logprob", 2, 1, 1, 1) == (2.0, 1024.0)
    v06 = _instance(600, 600, backend="fsdp", sharding="zero3", version="0.6.0")
    assert cost_model(v06).pass_shape(v06.models["actor"], "logprob", 2, 1, 1, 1) == (4.0, 600.0)


def test_megatron_pipeline_pads_every_pack_to_the_longest_and_steps_pack_apart():
    # 32 sequences, 4 global batches of 8: each packs into 2 bins of 4 (512 tokens), one per rank
    inst = _instance(train_tokens=512, steps=4)
    cost, actor = cost_model(inst), inst.models["actor"]
    assert cost.pass_shape(actor, "train", 2, 2, 1, 1) == (4.0, 512.0)
    # 640-token packs: 5 sequences per pack, 8 per global batch -> bins of 5 and 3 (640, 384), one per rank;
    # with PP 2 both run at the longest (640), without PP the ranks meet after their own: max(640, 384)
    inst = _instance(train_tokens=640, logprob_tokens=640, steps=4)
    cost, actor = cost_model(inst), inst.models["actor"]
    assert cost.pass_shape(actor, "train", 2, 2, 1, 1) == (4.0, 640.0)
    assert cost.pass_shape(actor, "train", 2, 1, 1, 1) == (4.0, 640.0)
    # the log-prob passes pack the whole batch: 6 bins of 5 and 1 of 2 -> 8 bins (bin 5, the last of the
    # fullest, gives one sequence to bin 7): 640 x 5, 512, 256, 128; rank 0 gets bins 0, 2, 4, 6 (2,176
    # tokens), rank 1 bins 1, 3, 5, 7 (1,920). PP 2: 4 packs at 640; PP 1: the slower rank, 2,176 / 4 = 544
    assert cost.pass_shape(actor, "logprob", 2, 2, 1, 1) == (4.0, 640.0)
    assert cost.pass_shape(actor, "logprob", 2, 1, 1, 1) == (4.0, 544.0)


def test_no_imbalance_charge_on_packed_passes():
    from packplace.placement.candidates import vertex_balance
    quantiles = [[0.5, 20], [0.99, 64]]
    charged = []
    for tokens in (640, None):
        inst = _instance(tokens, tokens, quantiles=quantiles)
        balance = vertex_balance(inst, "actor.train")
        assert balance is not None
        charged.append(balance.seconds(cost_model(inst), inst.models["actor"], "train", 2, 1, 1, 1, (1, 1, 2), 1,
                                       {"old_log_prob": 1.0}))
    assert charged[0] == 0.0 < charged[1]     # packed: the packs' slowest path is the pass; unpacked: LPT's factor


def test_pack_sizes_are_nemo_rl_only_and_set_together():
    with pytest.raises(ConfigError, match=r"\[policy\] logprob_mb_tokens: NeMo RL's sequence packing sets both"):
        _instance(512, None)
    with pytest.raises(ConfigError, match="train_mb_tokens"):
        build_instance({
            "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
            "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                                 "vocab_size": 32000, "num_attention_heads": 8}, "reward": "rule"},
            "workload": {"batch_size": 16, "samples_per_prompt": 2, "context_length": 64, "generation_length": 64},
            "policy": {"algorithm": "grpo", "framework": "verl", "train_mb_tokens": 512,
                       "logprob_mb_tokens": 512}})
    assert TrainingOptions().optimizer_steps == 1


def test_packs_refused_where_nemo_rl_would_not_run_them():
    # the longest sequence is 64 + 64 = 128 tokens: a 127-token pack cannot hold it (NeMo RL's packer raises)
    with pytest.raises(ConfigError, match=r"train_mb_tokens: 127 tokens is below the longest sequence.* = 128"):
        _instance(127, 1024)
    with pytest.raises(ConfigError, match=r"logprob_mb_tokens: 100 tokens is below the longest sequence"):
        _instance(512, 100)
    assert _instance(128, 128).sequence_packing == (128, 128)   # exactly one longest sequence per pack: accepted
    with pytest.raises(ConfigError, match=r"NeMo RL 0\.2\.1 has no sequence packing"):
        _instance(version="0.2.1")
    with pytest.raises(ConfigError, match="DPO does not run sequence packing"):
        build_instance({
            "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
            "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                                 "vocab_size": 32000, "num_attention_heads": 8}},
            "workload": {"batch_size": 16, "samples_per_prompt": 2, "context_length": 64, "generation_length": 64},
            "policy": {"algorithm": "dpo", "framework": "nemo-rl", "train_mb_tokens": 512,
                       "logprob_mb_tokens": 512}})
