"""``estimate --task generate`` is the evaluator's generation vertex of the same engine: a GRPO instance built here
whose step is ``batch`` prompts of ``seq_len`` tokens on one engine replica (``dp = 1``), every response
``context − seq_len`` tokens long (no ``gen_quantiles``), all of them running at once. The vertex's
``generation + overhead`` (its rule reward aside) is the estimate's total.

The prefill had been priced as one pipeline stage without the tensor-parallel all-reduces the evaluator charges
(``CostModel.prefill_time``: the whole model, ``2·L`` all-reduces of the prompt's activations): Qwen2.5-1.5B, 64
prompts of 2,048 tokens and 64 new tokens on H100 SXM was 0.497 s at ``tp 4`` against the vertex's 0.591 s, and
0.801 s at ``pp 2`` against 1.251 s. No clock is read."""

from __future__ import annotations

import pytest

from packplace.placement.candidates import vertex_parts
from packplace.placement.evaluator import get_evaluator
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import MODEL_PRESETS, estimate

MODEL = MODEL_PRESETS["qwen2.5-1.5b"]
MOE = {"model_type": "qwen2_moe", "layers": 8, "hidden_dim": 1024, "ffn_dim": 2048, "vocab_size": 32000,
       "head_dim": 64, "num_kv_heads": 4, "num_experts": 8, "experts_per_token": 2, "expert_ffn_dim": 512}


def _vertex_and_estimate(model, preset, framework, pp, tp, ep, batch, prompt, new, dp=1):
    """``(the vertex's generation + overhead, the estimate)`` of ``dp`` replicas of ``batch`` sequences each (the
    estimate's per replica: ``dp`` only where it counts, ``pp > 1`` or ``ep``'s expert group)."""
    samples = 2 if framework == "openrlhf" else 1   # OpenRLHF's group_norm (GRPO) asserts more than one
    instance = build_instance({
        "hardware": {"preset": preset, "nodes_per_rack": 1, "gpus_per_node": dp * pp * tp},
        "models": {"actor": dict(model), "reward": "rule"},
        "workload": {"batch_size": dp * batch // samples, "samples_per_prompt": samples, "context_length": prompt,
                     "generation_length": new},
        "policy": {"algorithm": "grpo", "framework": framework}})
    cost = get_evaluator(instance).cost
    vertex = vertex_parts(instance, cost, "actor.generate", Strategy(dp, pp, tp, ep), batch, (1, 1, dp * pp * tp))
    e = estimate(instance.models["actor"], preset, "generate", batch=batch, seq_len=prompt, context=prompt + new,
                 tp=tp, pp=pp, ep=ep, dp=dp if pp > 1 else ep,
                 framework="vllm" if framework == "none" else framework)
    return vertex["generation"] + vertex["overhead"], e


@pytest.mark.parametrize("preset", ["h100-sxm", "h200", "a100"])   # table derived, measured, and the knob model
@pytest.mark.parametrize("pp, tp", [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2)])
@pytest.mark.parametrize("prompt, new", [(2048, 64), (512, 1024)])
def test_a_generation_is_the_evaluators_generation_vertex(preset, pp, tp, prompt, new):
    vertex, e = _vertex_and_estimate(MODEL, preset, "verl", pp, tp, 1, 64, prompt, new)
    assert e.time_s == pytest.approx(vertex, rel=1e-6), (preset, pp, tp, prompt, new)
    assert sum(e.parts.values()) == pytest.approx(e.time_s, rel=1e-12)
    assert (e.parts["communication"] > 0) == (tp > 1 or pp > 1)


@pytest.mark.parametrize("framework", ["none", "nemo-rl", "openrlhf", "deepspeed-chat"])
def test_every_engine_is_the_vertex(framework):
    vertex, e = _vertex_and_estimate(MODEL, "h100-sxm", framework, 1, 2, 1, 32, 1024, 256)
    assert e.time_s == pytest.approx(vertex, rel=1e-6), framework


@pytest.mark.parametrize("dp, ep", [(1, 1), (2, 1), (2, 2)])
def test_a_mixture_of_experts_generation_is_the_vertex(dp, ep):
    # every response of one length: each of the dp replicas decodes the same share, the vertex's time is one's
    vertex, e = _vertex_and_estimate(MOE, "h100-sxm", "verl", 1, 2, ep, 32, 1024, 128, dp=dp)
    assert e.time_s == pytest.approx(vertex, rel=1e-6), ep


def test_the_prefill_holds_the_whole_model_and_its_all_reduces():
    # pp 2: one batch of prompts passes both stages (the whole model), as the decode iterations do; tp 2: the
    # communication part holds the prefill's 2 all-reduces per layer on top of the decode iterations'
    one = estimate(MODEL, "h100-sxm", "generate", batch=64, seq_len=2048, context=2112)
    piped = estimate(MODEL, "h100-sxm", "generate", batch=64, seq_len=2048, context=2112, pp=2)
    assert piped.parts["prefill"] == pytest.approx(one.parts["prefill"], rel=1e-12)
    split = estimate(MODEL, "h100-sxm", "generate", batch=64, seq_len=2048, context=2112, tp=2)
    decode_only = estimate(MODEL, "h100-sxm", "decode", batch=64, context=2080, tp=2)
    assert split.parts["communication"] > 64 * decode_only.parts["communication"]
