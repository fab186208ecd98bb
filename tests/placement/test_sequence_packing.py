"""NeMo RL's sequence packing (:mod:`packplace.placement.model.sequence_packing`): the modified first-fit
decreasing packer of v0.4/v0.5 and v0.6, the bin count raised to a multiple of the data-parallel ranks, the
round robin over ranks, the slowest path's tokens under each backend's padding, and the passes a config with
``policy.train_mb_tokens`` / ``logprob_mb_tokens`` prices from its packs — all hand-computed."""

from __future__ import annotations

from bisect import bisect, bisect_right

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import build_vertex_candidates, cost_model
from packplace.placement.model.framework import trainer_logit_bytes
from packplace.placement.model.memory import ContextParallelSplit, TrainingOptions, vertex_memory
from packplace.placement.model.sequence_packing import (
    PackedChunk,
    PackedPasses,
    SequencePacking,
    adjust_bin_count,
    critical_path,
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
              quantiles=None, cp=1):
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
        "training": {"actor": {"sharding": sharding, "optimizer_steps": steps,
                               **({"context_parallel": cp} if cp > 1 else {})}}})


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


# -- the packer, fast and as NeMo RL writes it ----------------------------------------------------------------
def _literal_mffd(lengths, capacity, worst_fit_leftovers=False):
    """NeMo RL's ModifiedFirstFitDecreasingPacker, phase for phase as its code runs (v0.4.0/v0.5.0 first-fit
    leftovers, v0.6.0 least-filled ones), in O(n * bins): the oracle of the vectorised packer."""
    c = capacity
    items = list(enumerate(int(x) for x in lengths))
    large = sorted((it for it in items if it[1] > c / 2), key=lambda x: x[1], reverse=True)
    medium = sorted((it for it in items if c / 3 < it[1] <= c / 2), key=lambda x: x[1], reverse=True)
    small = sorted((it for it in items if c / 6 < it[1] <= c / 3), key=lambda x: x[1])
    tiny = sorted((it for it in items if it[1] <= c / 6), key=lambda x: x[1])
    bins = [[item] for item in large]
    loads = [item[1] for item in large]
    for b, load in enumerate(loads):                      # phase 2: one medium item per large bin
        for i, (_, size) in enumerate(medium):
            if size <= c - load:
                bins[b].append(medium.pop(i))
                loads[b] += size
                break
    for b in range(len(bins) - 1, -1, -1):                # phase 3: two small items, backward
        if any(c / 3 < size <= c / 2 for _, size in bins[b]) or len(small) < 2:
            continue
        rest = c - loads[b]
        if small[0][1] + small[1][1] > rest:
            continue
        first = small.pop(0)
        for j in range(len(small) - 1, -1, -1):
            if small[j][1] <= rest - first[1]:
                second = small.pop(j)
                bins[b] += [first, second]
                loads[b] += first[1] + second[1]
                break
    remaining = sorted(medium + small + tiny, key=lambda x: x[1], reverse=True)
    keys = [-size for _, size in remaining]               # ascending: bisect finds the largest that fits
    for b in range(len(bins)):                            # phase 4: greedy fill, largest that fits
        while remaining:
            rest = c - loads[b]
            i = bisect_right(keys, -rest - 1)             # first item with size <= rest
            if i >= len(remaining):
                break
            keys.pop(i)
            item = remaining.pop(i)
            bins[b].append(item)
            loads[b] += item[1]
    if worst_fit_leftovers:                               # phase 5, v0.6.0+: least-filled bin first
        new_bins: list[list[tuple[int, int]]] = [[]]
        new_loads = [0]
        for item in remaining:
            if item[1] <= c - new_loads[0]:
                target, load = new_bins.pop(0), new_loads.pop(0)
            else:
                target, load = [], 0
            target.append(item)
            load += item[1]
            at = bisect(new_loads, load)
            new_bins.insert(at, target)
            new_loads.insert(at, load)
    else:                                                 # phase 5, v0.4.0 / v0.5.0: first-fit decreasing
        new_bins, new_loads = [], []
        for item in remaining:
            for k, load in enumerate(new_loads):
                if item[1] <= c - load:
                    new_bins[k].append(item)
                    new_loads[k] += item[1]
                    break
            else:
                new_bins.append([item])
                new_loads.append(item[1])
    bins.extend(new_bins)
    return [[idx for idx, _ in b] for b in bins if b]


def _random_batches(count, seed=0):
    rng = np.random.default_rng(seed)
    for t in range(count):
        n, c = int(rng.integers(1, 300)), int(rng.integers(4, 200))
        if t % 3 == 0:
            lengths = rng.integers(1, c + 1, n)
        elif t % 3 == 1:      # many small items: long first-fit runs of equal sizes
            lengths = rng.integers(1, max(2, c // 4), n)
        else:                 # the class boundaries C/2, C/3, C/6 and their neighbours
            lengths = rng.choice([c // 2, c // 3, c // 6, c // 2 + 1, c // 3 + 1, c // 6 + 1, 1, c], n)
        yield np.clip(lengths, 1, c), c


def test_fast_packer_matches_the_literal_one_bin_for_bin():
    for lengths, c in _random_batches(600):
        for worst_fit in (False, True):
            expected = _literal_mffd(lengths.tolist(), c, worst_fit)
            assert mffd_bins(lengths.tolist(), c, worst_fit) == expected
            chunk = PackedChunk(lengths, c, worst_fit)
            for dp in (1, 2, 3, 8):
                target = -(-max(len(expected), dp) // dp) * dp
                if len(lengths) < target:     # both refuse: fewer sequences than packs
                    with pytest.raises(ConfigError, match="cannot fill"):
                        chunk.rank_loads(dp)
                    continue
                bins = adjust_bin_count(expected, dp)
                tokens, squares = chunk.rank_loads(dp)
                assert tokens.tolist() == np.array([sum(lengths[b]) for b in bins]).reshape(-1, dp).T.tolist()
                assert squares.tolist() == np.array([sum(lengths[b] ** 2) for b in bins]).reshape(-1, dp).T.tolist()


def test_one_packing_serves_every_data_parallel_degree():
    draws = [np.array([3, 1, 2, 2, 4, 1, 1, 2])]
    passes = PackedPasses(SequencePacking(4, 4), draws, 8, frozenset())
    for dp in (1, 2, 4):
        passes.shape("train", dp, 1, 1, True, False, 1)
    assert len(passes._chunks) == 1          # packed once at (capacity 4, pad 1, one chunk)
    passes.shape("train", 2, 1, 2, True, False, 1)
    assert len(passes._chunks) == 2          # TP 2 rounds the lengths: another packing


def test_packing_stops_at_the_table_deadline(monkeypatch):
    import time

    from packplace.placement.candidates import CandidateTable, TableBuildTimeout
    from packplace.placement.model import sequence_packing
    inst = _instance(640, 640, quantiles=[[0.5, 20], [0.99, 64]])
    # the builder's own clock never expires, the packer's does: only the packing can stop the build
    monkeypatch.setattr(sequence_packing, "clock", lambda: float("inf"))
    with pytest.raises(TableBuildTimeout) as cut:
        CandidateTable(inst, deadline=time.perf_counter() + 1e6)
    assert cut.value.vertex in ("actor.train", "reference.infer")
    monkeypatch.undo()
    assert CandidateTable(inst, deadline=time.perf_counter() + 1e6).feasible["actor.train"]


# -- NeMo RL's rounding to the trainer's pad multiple -----------------------------------------------------------
def test_tp_rounding_refuses_packs_the_rounded_sequence_overflows():
    from packplace.placement.candidates import CandidateTable
    from packplace.placement.model.layout_rules import Context, strategy_refusal
    from packplace.placement.problem.plan import Strategy
    # 65 + 64 = 129 tokens: one 129-token pack holds it at TP 1, but TP 2 rounds it to 130 (lm_policy.py)
    inst = build_instance({
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                             "vocab_size": 32000, "num_attention_heads": 8, "num_key_value_heads": 8,
                             "model_type": "llama"}, "reward": "rule"},
        "workload": {"batch_size": 16, "samples_per_prompt": 2, "context_length": 65, "generation_length": 64},
        "policy": {"algorithm": "grpo", "framework": "nemo-rl", "trainer_backend": "megatron",
                   "framework_version": "0.5.0", "train_mb_tokens": 129, "logprob_mb_tokens": 129}})
    ctx = Context.of(inst)
    assert strategy_refusal(ctx, "actor.train", "train", Strategy(2, 1, 1)) is None
    why = strategy_refusal(ctx, "actor.train", "train", Strategy(1, 1, 2))
    assert why is not None and "policy.train_mb_tokens: 129 tokens" in why and "size 2 = 130" in why
    assert strategy_refusal(ctx, "reference.infer", "infer", Strategy(1, 1, 2)) is not None
    table = CandidateTable(inst)
    for name in ("actor.train", "reference.infer"):
        assert {c.strategy.tp for c in table.all[name]} == {1}     # never priced unpacked at TP 2
    # a plan at TP 2 is refused with the rule's reason (validate's message)
    from packplace.placement.evaluator import get_evaluator
    from packplace.placement.problem.plan import Allocation, Plan, VertexPlan
    block = Allocation((0, 0, 0), (1, 1, 8))
    plan = Plan.build({"actor.generate": VertexPlan(Strategy(8, 1, 1), 4, block),
                       "reference.infer": VertexPlan(Strategy(4, 1, 2), 8, block),
                       "actor.train": VertexPlan(Strategy(4, 1, 2), 8, block)})
    score = get_evaluator(inst).score(plan)
    assert not score.feasible and "policy.train_mb_tokens: 129 tokens" in score.violations[0]
    # a TP-2 pack of the 130-token rounding is refused where NeMo RL would refuse it, not priced unpacked
    with pytest.raises(ConfigError, match="exceeds the 129-token pack"):
        cost_model(inst).pass_shape(inst.models["actor"], "train", 1, 1, 2, 1)


def test_context_parallel_rounds_to_twice_cp_times_tp():
    with pytest.raises(ConfigError, match=r"\[policy\] train_mb_tokens: 129 tokens .* 2·context_parallel·tp = "
                                          r"2·2·1 = 132"):
        build_instance({
            "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
            "models": {"actor": {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 4096,
                                 "vocab_size": 32000, "num_attention_heads": 8, "model_type": "llama"},
                       "reward": "rule"},
            "workload": {"batch_size": 16, "samples_per_prompt": 2, "context_length": 65, "generation_length": 64},
            "policy": {"algorithm": "grpo", "framework": "nemo-rl", "trainer_backend": "megatron",
                       "framework_version": "0.5.0", "train_mb_tokens": 129, "logprob_mb_tokens": 132},
            "training": {"actor": {"context_parallel": 2}}})


# -- a pack's attention is the sum over its sequences ---------------------------------------------------------
def test_pack_attention_is_the_sum_of_squared_lengths():
    # capacity 4, lengths 3, 1, 2, 2: bins [3, 1] and [2, 2] (4 tokens each; sum of squares 10 and 8). One rank
    # runs both: 8 tokens, attention 3² + 1² + 2² + 2² = 18 -> 2.25 tokens of context per token, not the mean 2
    chunk = PackedChunk(np.array([3, 1, 2, 2]), 4)
    tokens, squares = chunk.rank_loads(1)
    assert tokens.tolist() == [[4.0, 4.0]] and squares.tolist() == [[10.0, 8.0]]
    assert critical_path([tokens], [squares], 0, rank_max=False, lockstep=False) == (2, 8.0, 18.0)
    passes = PackedPasses(SequencePacking(4, 4), [np.array([3, 1, 2, 2])], 4, frozenset())
    assert passes.shape("train", 1, 1, 1, True, False, 1) == (2.0, 4.0, 2.25)
    # two ranks: [3, 1] on rank 0, [2, 2] on rank 1; lockstep takes each pack's slower rank: equal tokens,
    # the larger attention (10)
    tokens, squares = chunk.rank_loads(2)
    assert critical_path([tokens], [squares], 0, rank_max=False, lockstep=True) == (1, 4.0, 10.0)


def test_packed_pass_prices_the_packs_attention():
    # lengths vary (quantiles): the packs' attention length is sum(l^2)/sum(l) on the slowest path, above the
    # mean length that prices an unpacked pass; the pass time grows with it
    inst = _instance(640, 640, quantiles=[[0.5, 20], [0.99, 64]])
    cost, actor = cost_model(inst), inst.models["actor"]
    m, tokens, s = cost.packing.shape("train", 2, 1, 1, True, False, 1)
    assert cost.attention_length(actor, "train", 2, 1, 1) == s > inst.workload.train_seq_len
    assert cost.attention_length(inst.models["actor"], "logprob", 2, 1, 1) == cost.packing.shape(
        "logprob", 2, 1, 1, True, False, 1)[2]


# -- a packed plan over memory: the largest packs that fit -----------------------------------------------------
def test_over_memory_packs_get_the_largest_packs_that_fit(unhurried):
    from dataclasses import replace

    from packplace.errors import InfeasibleError
    from packplace.placement.api import check_instance
    from packplace.placement.candidates import fits_alone
    from packplace.placement.fit_hints import largest_fitting_packs
    # 2M- and 4M-token packs: a pack's logits alone (32,000 vocabulary) outgrow an 80 GB GPU
    inst = _instance(2_000_000, 4_000_000)

    def fits(train, logprob):
        variant = replace(inst, sequence_packing=(train, logprob), _cache={})
        return all(fits_alone(variant, cost_model(variant), name) for name in ("actor.train", "reference.infer"))

    train, logprob = largest_fitting_packs(inst)
    assert 128 <= train < 2_000_000 and 128 <= logprob < 4_000_000
    assert fits(train, logprob) and not fits(train + 1, logprob) and not fits(train, logprob + 1)
    # the largest packs under which each task fits alone leave the trainer's GPUs no room for the bytes the
    # sleeping engine keeps beside it (its CUDA graphs and context): the hint halves them once
    with pytest.raises(InfeasibleError, match=rf"fits with policy: {{train_mb_tokens: {train // 2}, logprob_mb_tokens: "
                                              rf"{logprob // 2}}} \(halved 1x from the largest under which each "
                                              rf"task fits alone\)"):
        check_instance(inst, time_limit_s=unhurried)
    assert largest_fitting_packs(_instance(512, 1024)) is None        # fits already: no smaller pack offered
    assert largest_fitting_packs(_instance(None)) is None             # no packing


def _qwen7b_packed(train_mb_tokens: int, logprob_mb_tokens: int):
    """The shipped Qwen2.5-7B GRPO config on 16 H100 under NeMo RL 0.5.0 with the given packs."""
    import os

    from packplace.placement.problem.config import build_instance, load_yaml
    path = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
    cfg = load_yaml(path)
    cfg["models"]["actor"]["model_type"] = "qwen2"
    cfg["policy"].update(framework="nemo-rl", framework_version="0.5.0", train_mb_tokens=train_mb_tokens,
                         logprob_mb_tokens=logprob_mb_tokens)
    return build_instance(cfg)


def test_packs_that_fit_each_task_alone_but_plan_nothing_are_halved_until_a_plan_fits(unhurried):
    from packplace.errors import InfeasibleError
    from packplace.placement.api import check_instance
    from packplace.placement.fit_hints import largest_fitting_packs
    # the hints' search stops at a wall-clock budget and at the check's time limit; a budget and a limit no loaded
    # machine reaches (``unhurried``) keep the verdict independent of the machine's speed and load (the greedy
    # solves it runs end on their own)
    # Qwen2.5-7B GRPO on 16 H100 with 400,000-token packs: each task fits alone at the largest packs, but the
    # colocated plan does not, so the hint halves both packs (never offering packs that plan nothing)
    inst = _qwen7b_packed(400_000, 400_000)
    train, logprob = largest_fitting_packs(inst)
    with pytest.raises(InfeasibleError) as refused:
        check_instance(inst, time_limit_s=unhurried)
    message = str(refused.value)
    assert f"train_mb_tokens: {train // 2}, logprob_mb_tokens: {logprob // 2}}} (halved 1x" in message


def test_the_configs_own_packs_that_fit_each_task_alone_but_plan_nothing_are_halved(unhurried):
    # unhurried: the hints stop at a wall-clock budget (fit_hints.HINTS_BUDGET_S), which a loaded machine had reached
    from packplace.placement.fit_hints import fit_hints, largest_fitting_packs
    # the packs of the test above, given by the config: each task fits alone, the plan does not
    inst = _qwen7b_packed(82_422, 183_900)
    assert largest_fitting_packs(inst) is None        # each task fits alone at the config's packs
    assert any("train_mb_tokens: 41211, logprob_mb_tokens: 91950} (halved 1x from the config's)" in line
               for line in fit_hints(inst))


# -- estimate and packing ---------------------------------------------------------------------------------------
def test_estimate_prices_a_pack_of_equal_sequences_as_its_micro_batch():
    from packplace.placement.task_estimate import estimate
    # 1,025-token sequences rounded to TP 2's multiple, 1,026: an 8,192-token pack holds 7 of them; on the
    # Megatron workers (pipeline parallelism) the pack runs at its own 7 x 1,026 tokens; its memory is sized at
    # the whole 8,192-token pack, as place sizes it (a pack of sequences of many lengths fills it)
    packed = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=1025, tp=2, pp=2, framework="nemo-rl",
                      pack_tokens=8192)
    plain = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=1026, tp=2, pp=2, framework="nemo-rl", micro_batch=7)
    full = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=8192, tp=2, pp=2, framework="nemo-rl")
    assert packed.time_s == plain.time_s and packed.memory == full.memory
    assert packed.memory["peak_bytes"] > plain.memory["peak_bytes"]
    assert (packed.inputs["micro_batch"], packed.inputs["seq_len"], packed.inputs["pack_tokens"]) == (7, 1026, 8192)
    assert (packed.inputs["pack_backend"], packed.inputs["pack_priced_tokens"]) == ("megatron", 7 * 1026)
    with pytest.raises(ConfigError, match="pack_tokens: 1025 tokens is below seq_len 1025 rounded up to a multiple "
                                          "of the tensor-parallel size 2 = 1026"):
        estimate("llama3.1-8b", "h100-sxm", "infer", seq_len=1025, tp=2, framework="nemo-rl", pack_tokens=1025)
    with pytest.raises(ConfigError, match="NeMo RL's sequence packing"):
        estimate("llama3.1-8b", "h100-sxm", "train", framework="verl", pack_tokens=8192)
    with pytest.raises(ConfigError, match="micro_batch: 2 with pack_tokens 8192"):
        estimate("llama3.1-8b", "h100-sxm", "train", framework="nemo-rl", micro_batch=2, pack_tokens=8192)
    with pytest.raises(ConfigError, match="task train or infer"):
        estimate("llama3.1-8b", "h100-sxm", "prefill", framework="nemo-rl", pack_tokens=8192)


# -- context parallelism: packs dealt to the data-parallel ranks, each split over its CP group ------------------
def test_packs_go_to_the_data_parallel_ranks_under_context_parallelism():
    # eight 4-token sequences (3, 1, 2, 2, 4, 1, 1, 2 rounded up to 2·CP·TP = 4) in 8-token packs: 4 packs.
    # dp 4 at CP 2 is 2 data ranks (NeMo RL shards over its data_parallel axis only): 2 packs each, every
    # pack split over its CP group's 2 GPUs: 2 micro-batches of 4 tokens per GPU, attention length 4
    draws = [np.array([3, 1, 2, 2, 4, 1, 1, 2])]
    passes = PackedPasses(SequencePacking(8, 8), draws, 8, frozenset(), context_parallel=2)
    assert passes.shape("train", 4, 1, 1, True, False, 1) == (2.0, 4.0, 4.0)
    assert PackedPasses(SequencePacking(8, 8), draws, 8, frozenset()).shape(
        "train", 4, 1, 1, True, False, 1)[:2] == (1.0, 8.0)                   # no CP: one pack per rank
    # a dp the CP degree does not divide is priced without it (such a trainer is refused elsewhere)
    assert passes.shape("train", 1, 1, 1, True, False, 1) == (4.0, 8.0, 4.0)


def test_a_packed_cp_trainer_prices_and_holds_its_data_ranks_packs():
    # 32 sequences of 128 tokens, 4 per 512-token pack: 8 packs. dp 2 at CP 2 is one data rank holding all 8,
    # each split over 2 GPUs: 8 micro-batches of 256 tokens per GPU (it had dealt 4 packs to each of 2 ranks)
    inst = _instance(cp=2)
    actor = inst.models["actor"]
    cost = cost_model(inst)
    assert cost.pass_shape(actor, "train", 2, 1, 1, 1) == (8.0, 256.0)
    assert cost.pass_shape(actor, "logprob", 2, 1, 1, 1) == (4.0, 512.0)      # 1,024-token packs
    cand = next(c for c in build_vertex_candidates("actor.train", "train", actor, inst, cost, [(1, 1, 2)])
                if (c.strategy.dp, c.strategy.pp, c.strategy.tp) == (2, 1, 1))
    # the packs' sequences are already rounded to 2·CP·TP: a GPU holds 512 / 2 tokens of a pack, padded once
    res, tra = vertex_memory(actor, "train", dp=2, pp=1, tp=1, micro_batch=cand.micro_batch,
                             micro_batches=32 // (2 * cand.micro_batch), seq_len=inst.workload.train_seq_len,
                             prompt_len=64, live_len=0, options=inst.training["actor"], framework="nemo-rl",
                             workspace_bytes=inst.hardware.memory_workspace, pass_tokens=512.0,
                             logprob_tokens=1024.0, logit_bytes=trainer_logit_bytes("nemo-rl", "0.5.0", False),
                             context_parallel=ContextParallelSplit(2, None, 2, rounded=True))
    assert (cand.resident_bytes, cand.transient_bytes) == (res, tra)
    assert ContextParallelSplit(2, None, 2, rounded=True).rank_tokens(1024.0, cand.micro_batch, 1) == 512.0
