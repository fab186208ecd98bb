"""``packplace estimate`` prices NeMo RL's packed DTensor passes on a Blackwell table as ``place`` does: through the
cost model's :meth:`~packplace.placement.model.cost.CostModel.component_pass_times`, flash-attn 2's attention at
:data:`~packplace.placement.model.cost.FLASH_ATTN2_ATTENTION_FRACTION` of the table's rate (forward and backward
each at its own fraction); an unpacked pass, another framework's and a Megatron-Core pack as before."""

import os
from dataclasses import replace

import pytest

from packplace.placement.candidates import cost_model
from packplace.placement.checking.validate import load_setup
from packplace.placement.model import cost as cost_module
from packplace.placement.model.components import ATTENTION_BACKWARD_FLOPS, pass_times
from packplace.placement.task_estimate import estimate, format_estimate

GKE = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation",
                   "gke_blog_nemo_rl_grpo_llama3.1-8b_2x8xb200.yaml")
#: The repro: two 4,096-token sequences per 8,192-token pack on each of 8 B200s (NeMo RL's DTensor workers).
PACKED = {"seq_len": 4096, "framework": "nemo-rl", "dp": 8, "pack_tokens": 8192}
#: Llama-3.1-8B (P = 8,030,261,248) on 8 B200s, 8,192 tokens per GPU, NeMo RL's DTensor workers at their own zero3:
#: zero1's 0.6217 s (0.60215 s plus the 4-byte gradients' reduce-scatter, a = 7·2·P/8 bytes at NVLink's 720 GB/s)
#: less zero1's whole step-end sync, the 4-byte reduce-scatter and 2-byte all-gather, 3a, which zero3 does not run,
#: plus the edges of zero3's per-micro-batch collectives (the first layer's all-gather a/L and the last one's
#: reduce-scatter 2a/L over L = 32 layers; the rest hide behind the passes' 0.56 s)
_A = 7 * 2 * 8_030_261_248 / 8 / 720e9
ZERO3_SECONDS = 0.60215 + _A - 3 * _A + 3 * _A / 32
#: The same pack's log-prob pass (priced per replica: no ``dp``).
PACKED_INFER = {"seq_len": 4096, "framework": "nemo-rl", "pack_tokens": 8192}
REL = 1e-9


def _stage(e) -> float:
    """The stage's compute: forward, backward and the PyTorch trainer's rate share."""
    return e.parts["forward"] + e.parts["backward"] + e.parts["trainer_rate"]


@pytest.fixture(scope="module")
def gke():
    """``(the llama3.1-8b actor, place's cost model, its b200 table)`` of a NeMo RL packed DTensor run on B200s."""
    instance, _, _ = load_setup(GKE)
    model = instance.models["actor"]
    cm = cost_model(instance)
    assert cm.runs_flash_attn2(model)
    return model, cm, cm.components_for(model)


def test_the_packed_training_pass_is_places_pass(gke):
    model, cm, table = gke
    e = estimate("llama3.1-8b", "b200", "train", **PACKED)
    assert e.inputs["pass_kernels"] == "hf" and e.inputs["pack_priced_tokens"] == 8192
    # place's stage on the same pass: 32 layers and the head of one 8,192-token pack, attention over 4,096 tokens
    layer, head = cm._component_pass(table, model, 8192.0, 4096.0, True, 1, 1, 1)
    assert _stage(e) == pytest.approx(32 * layer + head, rel=REL)
    base = pass_times(table, model, tokens=8192, seq_len=4096, train=True, kernels="hf")
    # hand check: each layer's causal attention is 2·T·s·q = 2 x 8,192 x 4,096 x 4,096 = 2.749e11 FLOPs forward,
    # ATTENTION_BACKWARD_FLOPS times that backward; at 0.285 / 0.227 of the table's rate it takes 1/f - 1 longer
    attention = 2.0 * 8192 * 4096 * 4096 / table.attention_flops
    assert e.parts["forward"] - base.forward == pytest.approx(32 * attention * (1 / 0.285 - 1), rel=1e-9)
    assert e.parts["backward"] - base.backward == pytest.approx(
        32 * ATTENTION_BACKWARD_FLOPS * attention * (1 / 0.227 - 1), rel=1e-9)
    assert e.parts["trainer_rate"] == pytest.approx((e.parts["forward"] + e.parts["backward"]) * (1 / 0.67 - 1),
                                                    rel=REL)


def test_the_packed_log_prob_pass_is_places_pass(gke):
    model, cm, table = gke
    e = estimate("llama3.1-8b", "b200", "infer", **PACKED_INFER)
    layer, head = cm._component_pass(table, model, 8192.0, 4096.0, False, 1, 1, 1)
    assert e.parts["forward"] == pytest.approx(32 * layer + head, rel=REL)
    slow = pass_times(replace(table, attention_flops=table.attention_flops * 0.285), model, tokens=8192,
                      seq_len=4096, train=False, kernels="hf")
    assert e.parts["forward"] == pytest.approx(slow.forward, rel=REL)
    assert e.parts.get("backward", 0.0) == 0.0 and "trainer_rate" not in e.parts


def test_the_repro_is_slower_packed_than_as_two_unpacked_sequences():
    packed = estimate("llama3.1-8b", "b200", "train", **PACKED)
    unpacked = estimate("llama3.1-8b", "b200", "train", micro_batch=2, seq_len=4096, framework="nemo-rl", dp=8)
    # the unpacked pass's time, which flash-attn 2 does not move (0.6022 s before DTensor's fp32 reduce_dtype priced
    # its reduce-scatter of 4-byte gradients: 7·2·P/8 bytes more at the B200's 720 GB/s NVLink, 0.0195 s, under
    # zero1), now on the DTensor workers' own zero3 (ZERO3_SECONDS)
    assert unpacked.inputs["sharding"] == "zero3"
    assert unpacked.time_s == pytest.approx(ZERO3_SECONDS, abs=5e-5)
    assert packed.time_s > unpacked.time_s


@pytest.mark.parametrize("case", [
    {"micro_batch": 2, "framework": "nemo-rl"},                      # NeMo RL without packing: SDPA
    {"micro_batch": 2, "framework": "verl"},                         # verl's FSDP flash-attn: not priced so
    {"pack_tokens": 8192, "framework": "nemo-rl", "pp": 2},          # a Megatron-Core pack: its own attention
    {"micro_batch": 2, "framework": "none"},                         # bare kernels
])
@pytest.mark.parametrize("task", ["train", "infer"])
def test_other_passes_do_not_move(monkeypatch, case, task):
    def run():
        dp = 8 // case.get("pp", 1) if task == "train" or "pp" in case else None   # infer: per replica at pp 1
        return estimate("llama3.1-8b", "b200", task, seq_len=4096, dp=dp, **case)

    before = run()
    monkeypatch.setattr(cost_module, "FLASH_ATTN2_ATTENTION_FRACTION", {})
    assert run().parts == before.parts


def test_without_the_fraction_the_packed_pass_is_the_tables(monkeypatch):
    slow = estimate("llama3.1-8b", "b200", "train", **PACKED)
    monkeypatch.setattr(cost_module, "FLASH_ATTN2_ATTENTION_FRACTION", {})
    fast = estimate("llama3.1-8b", "b200", "train", **PACKED)
    assert fast.parts["forward"] < slow.parts["forward"] and fast.parts["backward"] < slow.parts["backward"]
    assert fast.parts["communication"] == slow.parts["communication"]
    assert fast.parts["optimizer"] == slow.parts["optimizer"]


def test_the_output_says_the_packed_pass_runs_flash_attn2():
    train = estimate("llama3.1-8b", "b200", "train", **PACKED)
    assert train.inputs["flash_attn2"] == {"gpu": "b200", "forward": 0.285, "backward": 0.227}
    assert "priced at 0.285 of the b200 table's attention rate forward, 0.227 backward)" in format_estimate(train)
    infer = estimate("llama3.1-8b", "b200", "infer", **PACKED_INFER)
    assert infer.inputs["flash_attn2"]["forward"] == 0.285
    assert "priced at 0.285 of the b200 table's attention rate forward)" in format_estimate(infer)
    # off Blackwell the rule holds (NeMo RL loads flash-attn 2) at the table's own rate, and the note says so
    hopper = estimate("llama3.1-8b", "h100", "infer", **PACKED_INFER)
    assert hopper.inputs["flash_attn2"] == {"gpu": "h100-sxm", "forward": 1.0, "backward": 1.0}
    assert "priced at the h100-sxm table's own attention rate" in format_estimate(hopper)


@pytest.mark.parametrize("case", [
    {"micro_batch": 2, "framework": "nemo-rl"}, {"micro_batch": 2, "framework": "verl"},
    {"pack_tokens": 8192, "framework": "nemo-rl", "pp": 2, "dp": 4}, {"micro_batch": 2, "framework": "none"},
])
def test_no_flash_attn2_note_where_the_table_prices_its_own_attention(case):
    e = estimate("llama3.1-8b", "b200", "train", seq_len=4096, **{"dp": 8, **case})
    assert "flash_attn2" not in e.inputs and "flash-attn 2" not in format_estimate(e)


def test_the_note_follows_the_cost_models_rule(monkeypatch):
    """The note comes from ``CostModel.runs_flash_attn2`` itself: with the rule off, neither price nor note."""
    monkeypatch.setattr(cost_module.CostModel, "runs_flash_attn2", lambda self, model: False)
    e = estimate("llama3.1-8b", "b200", "train", **PACKED)
    assert "flash_attn2" not in e.inputs and "flash-attn 2" not in format_estimate(e)
    # the table's own attention (the unpacked pass's time above): 0.8007 s with the rule
    assert e.time_s == pytest.approx(ZERO3_SECONDS, abs=5e-5)
