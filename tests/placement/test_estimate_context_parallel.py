"""``estimate --cp``: a context-parallel degree for a training or log-prob pass, checked like the other parallel
flags, each GPU holding its padded share of every sequence and paying the ring attention's exposed exchange;
NeMo RL's packs rounded to ``2·cp·tp``. Figures by hand."""

from __future__ import annotations

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.task_estimate import estimate
from packplace.shape import TransformerShape

# d = 256, q = 256 (4 heads of 64), k = 128 (2 KV heads), gated MLP of 512, vocabulary 1,000
SHAPE = TransformerShape(layers=2, hidden_dim=256, ffn_dim=512, vocab_size=1000, head_dim=64, num_kv_heads=2)
# 1e15 FLOP/s at half of it sustained; NVLink 1 ns per byte, no latency
SLOW_LINK = {"flops_per_gpu": 1e15, "gemm_peak_fraction": 0.5, "alpha_p2p_g": 0.0, "beta_p2p_g": 1e-9}


@pytest.mark.parametrize("kwargs, message", [
    ({"cp": 0}, "cp: must be an integer >= 1, got 0"),
    ({"cp": 1.5}, "cp: must be an integer >= 1, got 1.5"),
    ({"cp": True}, "cp: must be an integer >= 1, got True"),
    ({"cp": 2, "task": "decode"}, "cp: 2 splits the sequences of a training or log-prob pass (task train or infer), "
                                  "not task decode; drop it or set it to 1"),
    ({"cp": 2, "task": "prefill"}, "not task prefill"),
])
def test_a_bad_cp_is_refused_naming_it_and_its_value(kwargs, message):
    with pytest.raises(ConfigError) as info:
        estimate("qwen2.5-0.5b", **kwargs)
    assert message in str(info.value)


def test_the_command_line_refuses_a_bad_cp(capsys):
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--cp", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == ["packplace estimate: error: cp: must be an integer >= 1, got 0"]
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--task", "generate", "--cp", "2"]) == 2
    assert "cp: 2 splits the sequences" in capsys.readouterr().err
    assert main(["estimate", "--model", "qwen2.5-0.5b", "--cp", "2", "--json"]) == 0


def test_a_gpu_holds_its_padded_share_of_each_sequence():
    # a sequence of up to 262,144 tokens at CP 8: 32,768 per GPU plus up to 2·tp = 2 pad tokens (a sequence of any
    # length up to --seq-len pads to a multiple of 2·8·1 = 16, at most 15 tokens, at most 2 on a GPU: the bound
    # place's vertex charges), the loss's logits at 12 bytes per vocabulary entry; 262,145: 32,768.125 + 2
    share = estimate(SHAPE, "h200", "train", seq_len=262_144, optimizer="none", cp=8).memory
    assert share["logits"] == 12 * 1000 * 32_770
    assert estimate(SHAPE, "h200", "train", seq_len=262_145, optimizer="none", cp=8).memory["logits"] == \
        pytest.approx(12 * 1000 * 32_770.125, rel=1e-12)
    whole = estimate(SHAPE, "h200", "train", seq_len=262_144, optimizer="none").memory
    assert whole["logits"] == 12 * 1000 * 262_144 and whole["weights"] == share["weights"]


def test_the_ring_exchange_the_attention_does_not_hide_is_communication():
    # a log-prob pass of one 4,096-token sequence at CP 2, tp 1: each ring step sends the other GPU's K/V shard,
    # 2,048 tokens · (2 layers · 2 · 2 KV heads · 64 · 2 bytes = 1,024 bytes) at 1 ns per byte = 2.097152 ms,
    # overlapped with the other half of this GPU's attention: 2·L·q = 1,024 FLOPs per token², 4,096² / 2 / 2 of
    # them at 5e14 FLOP/s = 8.589934592 µs; no TP all-reduce, no gradients
    e = estimate(SHAPE, "h200", "infer", seq_len=4096, cp=2, hardware=SLOW_LINK)
    assert e.parts["communication"] == pytest.approx(2.097152e-3 - 8.589934592e-6, rel=1e-12)
    assert e.inputs["cp"] == 2
    assert estimate(SHAPE, "h200", "infer", seq_len=4096, hardware=SLOW_LINK).parts["communication"] == 0.0


def test_a_cp_share_costs_a_cp_share_of_the_compute():
    # the kernels of 2,048 tokens of 4,096-token context (a CP-2 share) take what they take for a CP-1 pass of
    # half the tokens at that context: the pass of two sequences at CP 2 costs one sequence at CP 1
    half = estimate("qwen2.5-0.5b", "h200", "infer", micro_batch=2, seq_len=4096, cp=2).parts["forward"]
    one = estimate("qwen2.5-0.5b", "h200", "infer", micro_batch=1, seq_len=4096).parts["forward"]
    assert half == pytest.approx(one, rel=1e-12)


def test_nemo_rl_packs_round_to_twice_cp_times_tp():
    # 1,003-token sequences: 1,004 at TP 2 (4 in a 4,020-token pack); 1,008 at CP 2, TP 2 (3 in it)
    assert estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", pack_tokens=4020, seq_len=1003,
                    tp=2).inputs["micro_batch"] == 4
    packed = estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", pack_tokens=4020, seq_len=1003, tp=2,
                      cp=2, pp=2)   # context parallelism with packs: the Megatron-Core workers (pp 2)
    assert (packed.inputs["micro_batch"], packed.inputs["seq_len"]) == (3, 1008)
    with pytest.raises(ConfigError, match=r"pack_tokens: 1004 tokens is below seq_len 1003 rounded up to a multiple "
                                          r"of 2·cp·tp = 2·2·2 = 1008"):
        estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", pack_tokens=1004, seq_len=1003, tp=2, cp=2,
                 pp=2)


def test_a_nemo_rl_pack_is_split_over_the_cp_group_on_the_megatron_workers_only():
    # NeMo RL's DTensor workers refuse context parallelism with sequence packing (dtensor_policy_worker.py);
    # on the Megatron-Core workers (pp 2) four 1,000-token sequences (a multiple of 2·2·1) of a 4,096-token pack
    # run their own 4,000 tokens: each GPU of a CP pair runs and holds 2,000
    with pytest.raises(ConfigError, match=r"cp: 2 with pack_tokens on NeMo RL's DTensor workers"):
        estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", pack_tokens=4096, seq_len=1000, cp=2)
    whole, split = (estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", pack_tokens=4096, seq_len=1000,
                             cp=cp, pp=2) for cp in (1, 2))
    assert (whole.inputs["pack_priced_tokens"], split.inputs["pack_priced_tokens"]) == (4000, 2000)
    assert split.inputs["micro_batch"] == whole.inputs["micro_batch"] == 4
    assert split.memory["logits"] == whole.memory["logits"] / 2


def test_the_pack_line_says_padded_and_each_gpus_share_under_cp():
    from packplace.placement.task_estimate import format_estimate
    def line(**kw):
        text = format_estimate(estimate("qwen2.5-0.5b", "h200", "train", framework="nemo-rl", pack_tokens=4096,
                                        seq_len=1000, **kw))
        return [row for row in text.splitlines() if row.startswith("pack:")]
    assert line() == ["pack: 4 sequences of 1000 tokens (4000) on NeMo RL's DTensor workers: padded to 4096 tokens"]
    assert line(pp=2, cp=2) == ["pack: 4 sequences of 1000 tokens (4000) on NeMo RL's Megatron-Core workers: its "
                                "own tokens, no pad, 2000 tokens on each of the 2 GPUs of the CP group; memory "
                                "sized at the whole 4096-token pack, as place sizes it"]
