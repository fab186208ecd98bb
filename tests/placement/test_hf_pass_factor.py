"""``hf_pass_factor``: the per-GPU-type factor on the component table's Hugging Face eager pass kernels, its
Blackwell value reproduced from the figures it is derived from (NVIDIA cudnn-frontend's Llama-3.2-1B training
benchmark, one script on one B200 and one H200), and where it applies: the trainer's and the bare loop's
train / log-prob passes on the Hugging Face kernels, not Megatron-Core's passes, not vLLM's prefill."""

import os
import statistics
from dataclasses import replace

import pytest

from packplace.errors import ConfigError
from packplace.placement.model.components import load_table, pass_times
from packplace.placement.model.cost import CostModel
from packplace.placement.model.layout_rules import Context
from packplace.placement.problem.hardware import HF_PASS_FACTOR_BLACKWELL, MEGATRON_PASS_FACTOR_GB200
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, format_estimate, resolve_hardware
from packplace.shape import TransformerShape, from_hf_config

LLAMA_8B = TransformerShape(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
LLAMA_1B = os.path.join(os.path.dirname(__file__), "..", "data", "hf_configs", "llama-3.2-1b.json")
#: cudnn-frontend @ 9793df5, benchmark/Llama-3.2-1B-Training/README.md: seconds per training iteration with
#: PyTorch SDPA's cuDNN backend, (batch, sequence) -> (B200, H200); the shapes of at most 2,048 tokens.
PUBLISHED = {(24, 768): (0.200, 0.329), (12, 1024): (0.139, 0.222), (6, 2048): (0.144, 0.229)}


def preset(name: str):
    return resolve_hardware(name, None, 8)[1]


def _cost(gpu: str, backend: str, factor: float | None = None) -> CostModel:
    cluster, hw = resolve_hardware(gpu, None, 8)
    if factor is not None:
        hw = replace(hw, hf_pass_factor=factor)
    workload = Workload(batch_size=16, samples_per_prompt=1, context_length=4095, generation_length=1)
    return CostModel(hw, cluster, workload, layout=Context("none", "grpo", {}, False, backend=backend))


def test_the_blackwell_presets_set_the_factor_and_the_others_keep_one():
    assert preset("b200").hf_pass_factor == HF_PASS_FACTOR_BLACKWELL == 1.114
    assert preset("gb200").hf_pass_factor == preset("gb200-nvl72").hf_pass_factor == 1.114   # by the same die
    for name in ("h100-sxm", "h200", "a100-80gb-sxm", "a800", "h20", "l40s"):
        assert preset(name).hf_pass_factor == 1.0


def test_the_published_gains_by_hand():
    # B200 / H200 seconds per iteration: 0.329 / 0.200, 0.222 / 0.139, 0.229 / 0.144
    gains = [h / b for b, h in PUBLISHED.values()]
    assert gains == pytest.approx([1.645, 1.5971, 1.5903], abs=1e-4)


def test_the_factor_reproduces_from_the_published_iterations():
    """The tables' gain on the same passes (bf16 weights, no optimizer: the benchmark's SGD step is under 1.3%
    of an iteration) is 1.842, 1.761, 1.772; published over priced 0.8932, 0.9068, 0.8974, whose median
    0.8974 gives the factor 1 / 0.8974 = 1.1143."""
    shape = from_hf_config(LLAMA_1B)
    b200, h200 = load_table("b200"), load_table("h200")
    ratios = []
    for (batch, seq), (t_b200, t_h200) in PUBLISHED.items():
        priced = [pass_times(t, shape, tokens=batch * seq, seq_len=seq, train=True).total for t in (b200, h200)]
        ratios.append((t_h200 / t_b200) / (priced[1] / priced[0]))
    assert ratios == pytest.approx([0.8932, 0.9068, 0.8974], abs=1e-4)
    median = statistics.median(ratios)
    assert 1 / median == pytest.approx(1.1143, abs=1e-4)
    assert round(1 / median, 3) == HF_PASS_FACTOR_BLACKWELL


def test_the_factor_scales_the_eager_kernels_only():
    """A PyTorch-native training and log-prob pass on one B200 (16 micro-batches of 4,096 tokens): the kernels'
    part scales by the factor exactly, the step-end update (Adam) does not; a Megatron-Core pass is unchanged."""
    extent = (1, 1, 8)
    update = _cost("b200", "auto", 1.0).update_time(LLAMA_8B, 1, 1, 1, extent)
    base = _cost("b200", "auto", 1.0).pass_time(LLAMA_8B, True, 1, 1, 1, 1, extent)
    slowed = _cost("b200", "auto").pass_time(LLAMA_8B, True, 1, 1, 1, 1, extent)
    assert slowed - update == pytest.approx(1.114 * (base - update), rel=1e-12)
    forward = _cost("b200", "auto", 1.0).pass_time(LLAMA_8B, False, 1, 1, 1, 1, extent)
    assert _cost("b200", "auto").pass_time(LLAMA_8B, False, 1, 1, 1, 1, extent) == pytest.approx(1.114 * forward)
    megatron = _cost("b200", "megatron", 1.0).pass_time(LLAMA_8B, True, 1, 1, 1, 1, extent)
    assert _cost("b200", "megatron", 1.5).pass_time(LLAMA_8B, True, 1, 1, 1, 1, extent) == megatron


def test_pass_kernel_factor_names_each_kernel_sets_factor():
    cm = _cost("gb200", "auto")
    assert cm.pass_kernel_factor("hf") == HF_PASS_FACTOR_BLACKWELL
    assert cm.pass_kernel_factor("megatron") == MEGATRON_PASS_FACTOR_GB200
    assert cm.pass_kernel_factor("knobs") == 1.0


def test_vllm_prefill_keeps_the_tables_rate():
    extent = (1, 1, 8)
    base = _cost("b200", "auto", 1.0).prefill_time(LLAMA_8B, 1, 16, 16, 1, extent)
    assert _cost("b200", "auto").prefill_time(LLAMA_8B, 1, 16, 16, 1, extent) == base


def test_estimate_prices_the_bare_pass_with_it_and_says_so():
    bare = estimate("llama3.1-8b", "b200", "train", micro_batch=2, seq_len=2048, framework="none")
    plain = estimate("llama3.1-8b", "b200", "train", micro_batch=2, seq_len=2048, framework="none",
                     hardware={"hf_pass_factor": 1.0})
    assert bare.parts["forward"] == pytest.approx(1.114 * plain.parts["forward"], rel=1e-12)
    assert bare.parts["backward"] == pytest.approx(1.114 * plain.parts["backward"], rel=1e-12)
    assert bare.parts.get("optimizer") == plain.parts.get("optimizer")   # the AdamW step: not the HF kernels
    trainer = estimate("llama3.1-8b", "b200", "train", micro_batch=2, seq_len=2048, framework="nemo-rl", dp=8)
    assert trainer.inputs["hf_pass_factor"] == 1.114
    assert "Hugging Face kernels x hf_pass_factor 1.114" in format_estimate(trainer)
    hopper = estimate("llama3.1-8b", "h100", "train", micro_batch=2, seq_len=2048, framework="nemo-rl", dp=8)
    assert hopper.inputs["hf_pass_factor"] == 1.0 and "hf_pass_factor" not in format_estimate(hopper)


def test_the_config_refuses_a_factor_outside_its_bounds():
    with pytest.raises(ConfigError, match="hf_pass_factor"):
        estimate("llama3.1-8b", "b200", "train", micro_batch=2, seq_len=2048, framework="none",
                 hardware={"hf_pass_factor": 3.0})
