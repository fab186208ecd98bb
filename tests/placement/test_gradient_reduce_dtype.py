"""The data-parallel gradient reduction's dtype in the step-time model (``CostModel.gradient_reduce_bytes``,
``framework.trainer_reduce_bytes``): Megatron-Core reduces its gradient buffer, fp32 under
``grad_reduce_in_fp32``; PyTorch FSDP / DTensor in the policy's fp32 ``reduce_dtype``; DeepSpeed in bf16. Seconds
by hand on the H100 preset's NVLink ring: 8 ranks of one node, ``α = 1 µs``, ``β = 1/360 GB/s``."""

import pytest

from packplace.placement.model.cost import CostModel
from packplace.placement.model.framework import FRAMEWORKS, trainer_reduce_bytes
from packplace.placement.model.layout_rules import Context
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, resolve_hardware
from packplace.shape import TransformerShape

LLAMA_8B = TransformerShape(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
P = LLAMA_8B.params
ONE_NODE = (1, 1, 8)
ALPHA, BETA = 1e-6, 1 / 360e9


def _cost(framework: str, backend: str, options: TrainingOptions, shape=LLAMA_8B) -> CostModel:
    cluster, hw = resolve_hardware("h100-sxm", None, 8)
    workload = Workload(batch_size=64, samples_per_prompt=1, context_length=1023, generation_length=1)
    return CostModel(hw, cluster, workload, framework=FRAMEWORKS[framework],
                     training={"actor": options}, models={"actor": shape},
                     layout=Context(framework, "grpo", {"actor": options}, False, backend=backend))


def _ring(nbytes: float, ranks: int = 8) -> float:
    return 2 * (ranks - 1) * (ALPHA + nbytes / ranks * BETA)


def test_the_preset_link_is_the_one_the_hand_figures_use():
    hw = resolve_hardware("h100-sxm", None, 8)[1]
    assert hw.coll(0) == pytest.approx((ALPHA, BETA), rel=1e-12)


def test_megatron_ddp_all_reduces_its_fp32_buffer():
    """``sharding: none`` (Megatron-Core DDP): a ring all-reduce of the gradient buffer, 4 bytes an element with
    ``grad_reduce_in_fp32`` (2·7·(α + 4P/8·β) = 0.156 s for the 8.03 B parameters), 2 without (0.078 s)."""
    fp32 = _cost("none", "megatron", TrainingOptions(sharding="none", fp32_grad_buffer=True))
    bf16 = _cost("none", "megatron", TrainingOptions(sharding="none", fp32_grad_buffer=False))
    assert fp32.gradient_reduce_bytes(LLAMA_8B, 1, 1) == 4.0
    assert bf16.gradient_reduce_bytes(LLAMA_8B, 1, 1) == 2.0
    assert fp32.gradient_sync_seconds(LLAMA_8B, 8, 1, 1, ONE_NODE) == pytest.approx(_ring(4 * P), rel=1e-12)
    assert bf16.gradient_sync_seconds(LLAMA_8B, 8, 1, 1, ONE_NODE) == pytest.approx(_ring(2 * P), rel=1e-12)
    assert _ring(4 * P) == pytest.approx(0.1562, abs=1e-4) and _ring(2 * P) == pytest.approx(0.0781, abs=1e-4)


def test_megatron_s_distributed_optimizer_reduce_scatters_fp32_and_gathers_bf16():
    """``zero1`` (the distributed optimizer): a reduce-scatter of the 4-byte gradients and an all-gather of the
    2-byte parameters, 2·7·α + 7·(4 + 2)·P/8·β = 0.117 s; with bf16 gradients the all-reduce of 2·P."""
    fp32 = _cost("none", "megatron", TrainingOptions(sharding="zero1", fp32_grad_buffer=True))
    bf16 = _cost("none", "megatron", TrainingOptions(sharding="zero1", fp32_grad_buffer=False))
    by_hand = 2 * 7 * ALPHA + 7 * (4 + 2) * P / 8 * BETA
    assert by_hand == pytest.approx(0.1171, abs=1e-4)
    assert fp32.gradient_sync_seconds(LLAMA_8B, 8, 1, 1, ONE_NODE) == pytest.approx(by_hand, rel=1e-12)
    assert bf16.gradient_sync_seconds(LLAMA_8B, 8, 1, 1, ONE_NODE) == pytest.approx(_ring(2 * P), rel=1e-12)


def test_the_trainers_own_defaults_decide_where_the_config_is_silent():
    """Unset ``fp32_grad_buffer``: the memory model's resolution (``stages.trainer_defaults``): verl's and
    Megatron-LM's Megatron-Core trainers reduce in fp32, NeMo RL's in bf16; their FSDP / DTensor workers in the
    fp32 ``reduce_dtype``; OpenRLHF and DeepSpeed-Chat (DeepSpeed's bf16 ``communication_data_type``) in bf16."""
    unset = TrainingOptions()
    assert _cost("verl", "megatron", unset).gradient_reduce_bytes(LLAMA_8B, 1, 2) == 4.0
    assert _cost("none", "megatron", unset).gradient_reduce_bytes(LLAMA_8B, 1, 2) == 4.0
    assert _cost("nemo-rl", "megatron", unset).gradient_reduce_bytes(LLAMA_8B, 2, 1) == 2.0
    assert _cost("verl", "fsdp", unset).gradient_reduce_bytes(LLAMA_8B, 1, 1) == 4.0
    assert _cost("nemo-rl", "fsdp", unset).gradient_reduce_bytes(LLAMA_8B, 1, 1) == 4.0
    for framework in ("openrlhf", "deepspeed-chat"):
        assert _cost(framework, "auto", unset).gradient_reduce_bytes(LLAMA_8B, 1, 1) == 2.0
    # the rule itself: Megatron-Core follows its buffer, whatever the framework's FSDP reduce_dtype
    assert trainer_reduce_bytes(FRAMEWORKS["nemo-rl"], False, True) == 2.0
    assert trainer_reduce_bytes(FRAMEWORKS["nemo-rl"], False, False) == 4.0
    assert trainer_reduce_bytes(FRAMEWORKS["openrlhf"], True, False) == 4.0


def test_fsdp_reduces_in_fp32():
    """verl's FSDP workers (``mixed_precision.reduce_dtype`` fp32), a ``zero1`` trainer's step-end reduction:
    reduce-scatter of 4-byte gradients, all-gather of 2-byte parameters."""
    cost = _cost("verl", "fsdp", TrainingOptions(sharding="zero1"))
    assert cost.pass_kernels(1, 1) == "hf"
    by_hand = 2 * 7 * ALPHA + 7 * (4 + 2) * P / 8 * BETA
    assert cost.gradient_sync_seconds(LLAMA_8B, 8, 1, 1, ONE_NODE) == pytest.approx(by_hand, rel=1e-12)


def test_a_bf16_trainer_is_priced_as_before():
    """OpenRLHF's DeepSpeed ZeRO-2 and NeMo RL's Megatron-Core trainer (``grad_reduce_in_fp32: false``): the ring
    all-reduce of the 2-byte gradients, 2·7·(α + 2P/8·β), under every sharding."""
    for sharding in ("none", "zero1", "zero2"):
        ds = _cost("openrlhf", "auto", TrainingOptions(sharding=sharding))
        assert ds.gradient_sync_seconds(LLAMA_8B, 8, 1, 1, ONE_NODE) == pytest.approx(_ring(2 * P), rel=1e-12)
    nemo = _cost("nemo-rl", "megatron", TrainingOptions(sharding="zero1"))
    stage = nemo.update_shard(LLAMA_8B, 2, 1)   # the larger of two stages' parameters
    assert 0.5 * P < stage < 0.6 * P
    assert nemo.gradient_sync_seconds(LLAMA_8B, 8, 2, 1, ONE_NODE) == pytest.approx(_ring(2 * stage), rel=1e-12)


def test_a_tied_embedding_reduces_in_the_buffer_s_dtype():
    """A tied LM head at pp 2 all-reduces its word-embedding gradient between the two stages' ranks (Megatron's
    ``_allreduce_word_embedding_grads`` on ``main_grad``): 4·V·d bytes with the fp32 buffer, twice the bf16."""
    tied = TransformerShape(layers=28, hidden_dim=3072, ffn_dim=8192, vocab_size=128256, num_kv_heads=8,
                            tie_word_embeddings=True)
    fp32 = _cost("none", "megatron", TrainingOptions(fp32_grad_buffer=True), tied)
    bf16 = _cost("none", "megatron", TrainingOptions(fp32_grad_buffer=False), tied)
    embedding = tied.vocab_size * tied.hidden_dim
    # dp 1: only the tied all-reduce, two ranks on one node
    assert fp32.gradient_sync_seconds(tied, 1, 2, 1, (1, 1, 8)) == pytest.approx(
        2 * (ALPHA + 4 * embedding / 2 * BETA), rel=1e-12)
    assert bf16.gradient_sync_seconds(tied, 1, 2, 1, (1, 1, 8)) == pytest.approx(
        2 * (ALPHA + 2 * embedding / 2 * BETA), rel=1e-12)


def test_estimate_and_place_price_the_same_reduction():
    """``packplace estimate`` of a verl Megatron-Core training pass on 8 GPUs: its ``communication`` part moves by
    the fp32 buffer exactly as ``place``'s cost model's :meth:`gradient_sync_seconds` does, 7·2·P/8·β."""
    args = dict(micro_batch=1, seq_len=1024, dp=8, framework="verl", trainer_backend="megatron")
    fp32 = estimate(LLAMA_8B, "h100-sxm", "train", **args)
    bf16 = estimate(LLAMA_8B, "h100-sxm", "train", **args, fp32_grad_buffer=False)
    place = {flag: _cost("verl", "megatron", TrainingOptions(fp32_grad_buffer=flag)).gradient_sync_seconds(
        LLAMA_8B, 8, 1, 1, ONE_NODE) for flag in (True, False)}
    assert place[True] - place[False] == pytest.approx(7 * 2 * P / 8 * BETA, rel=1e-9)
    assert fp32.parts["communication"] - bf16.parts["communication"] == pytest.approx(
        place[True] - place[False], rel=1e-9)
