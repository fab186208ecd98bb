"""vLLM refuses to start an engine whose KV cache cannot hold one request of ``max_model_len`` (V0
``raise_if_cache_size_invalid``, V1 ``check_enough_kv_cache_memory``): the memory model prices that check
(:func:`~packplace.placement.model.memory.one_sequence_kv_bytes`,
:func:`~packplace.placement.model.memory.vllm_refuses_to_start`), the candidate table marks such an engine unfit
(:attr:`~packplace.placement.candidates.Candidate.refused`), the evaluator refuses a plan holding it, ``place``
says why, and ``estimate --task generate`` prints the evaluator's KV budget and the refusal."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from packplace.errors import ConfigError, InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.candidates import CandidateTable, cost_model, engine_refusal_line
from packplace.placement.estimate_engine import engine_lines
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import kv_capacity_tokens
from packplace.placement.model.memory import (
    VLLM_BLOCK_SIZE,
    one_sequence_kv_bytes,
    stage_kv_bytes_per_token,
    vllm_refuses_to_start,
)
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan
from packplace.placement.task_estimate import MODEL_PRESETS, estimate, format_estimate
from packplace.shape import TransformerShape

#: Llama-3.1-8B: 32 layers, 8 KV heads of 128: 2 x 32 x 8 x 128 x 2 = 131,072 KV bytes a token on one GPU
LLAMA8 = TransformerShape(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
PER_TOKEN = 131_072
#: the toy GRPO of test_placement_candidates.py: Llama-3.1-8B on 8 GB GPUs, an eager bare engine
HW = dict(racks=1, nodes_per_rack=1, gpus_per_node=8, flops_per_gpu=1e15, memory_per_gpu=8e9,
          memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11,
          alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6,
          beta_p2p_n=2e-11, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-11, decode_step_overhead=0.0,
          memory_workspace=0.0)


def _toy(gmu: float) -> dict:
    actor = dict(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
    reward = dict(layers=4, hidden_dim=512, ffn_dim=1024, vocab_size=1000, head_dim=64)
    return {"hardware": dict(HW), "models": {"actor": actor, "reward": reward},
            "workload": dict(batch_size=16, samples_per_prompt=2, context_length=128, generation_length=128),
            "policy": {"algorithm": "grpo", "gpu_memory_utilization": gmu, "enforce_eager": True}}


def test_one_sequence_kv_bytes_by_hand():
    assert stage_kv_bytes_per_token(LLAMA8, 1, 1) == PER_TOKEN
    # V0: ceil(L/16) blocks; 256 tokens are 16 blocks, 257 are 17
    assert one_sequence_kv_bytes(LLAMA8, tp=1, pp=1, max_model_len=256, engine_generation="v0") == 16 * 16 * PER_TOKEN
    assert one_sequence_kv_bytes(LLAMA8, tp=1, pp=1, max_model_len=257, engine_generation="v0") == 17 * 16 * PER_TOKEN
    # V1: one block more, the BlockPool's null block: 17 blocks of 2,097,152 B = 35,651,584 B
    assert one_sequence_kv_bytes(LLAMA8, tp=1, pp=1, max_model_len=256, engine_generation="v1") == 35_651_584
    # TP 8: one KV head a rank, 16,384 B a token: 17 x 16 x 16,384 = 4,456,448 B
    assert one_sequence_kv_bytes(LLAMA8, tp=8, pp=1, max_model_len=256, engine_generation="v1") == 4_456_448
    # V0 with 2 stages: 16 layers a stage (65,536 B a token), and each of the 2 virtual engines needs its 16
    # blocks (num_gpu_blocks // pipeline_parallel_size): 32 x 16 x 65,536 = 33,554,432 B
    assert one_sequence_kv_bytes(LLAMA8, tp=1, pp=2, max_model_len=256, engine_generation="v0") == 33_554_432
    with pytest.raises(ValueError, match="max_model_len"):
        one_sequence_kv_bytes(LLAMA8, tp=1, pp=1, max_model_len=0, engine_generation="v1")
    with pytest.raises(ValueError, match="engine_generation"):
        one_sequence_kv_bytes(LLAMA8, tp=1, pp=1, max_model_len=16, engine_generation=None)


def test_refusal_at_the_block_boundary():
    block = VLLM_BLOCK_SIZE * PER_TOKEN                   # 2,097,152 B
    v0 = one_sequence_kv_bytes(LLAMA8, tp=1, pp=1, max_model_len=4096, engine_generation="v0")
    assert v0 == 256 * block
    assert not vllm_refuses_to_start(256 * block, v0)     # exactly 256 blocks: max_seq_len 4096 = max_model_len
    assert vllm_refuses_to_start(256 * block - 1, v0)     # 255 whole blocks: 4080 tokens < 4096
    v1 = one_sequence_kv_bytes(LLAMA8, tp=1, pp=1, max_model_len=4096, engine_generation="v1")
    assert vllm_refuses_to_start(256 * block, v1)         # V1: the null block leaves 255 usable
    assert not vllm_refuses_to_start(257 * block, v1)
    # no memory for the cache at all: refused whatever the request needs
    assert vllm_refuses_to_start(0.0, 0.0) and vllm_refuses_to_start(-1.0, 0.0)


@pytest.mark.parametrize("delta_blocks, refused", [(-1, True), (0, False), (1, False)])
def test_candidate_at_one_block_either_side_of_the_boundary(monkeypatch, delta_blocks, refused):
    """The candidate table's engine with its KV budget set one block under, at and one block over what one request
    of max_model_len 256 needs at TP 8 (17 blocks of 16 x 16,384 B: 4,456,448 B)."""
    needed = 4_456_448
    block = 16 * 16_384

    def budget(self, model, tp, pp, ep=1):
        per_token = stage_kv_bytes_per_token(model, tp, pp)
        return needed / 16_384 * per_token + delta_blocks * block * per_token / 16_384

    monkeypatch.setattr(CostModel, "engine_kv_budget", budget)
    table = CandidateTable(build_instance(_toy(0.35)))
    tp8 = [c for c in table.all["actor.generate"] if c.strategy.tp == 8 and c.strategy.pp == 1]
    assert tp8
    for c in tp8:
        assert (c.refused is not None) == refused
        if refused:
            assert c.refused == (needed - block, needed) and not c.fits


def test_toy_grpo_on_8gb_is_refused_with_a_message_naming_the_bytes(unhurried):
    """At 0.3 x 8 GB no candidate's pool holds the weights and the profile run's peak: vLLM would refuse every one
    (the engine had been priced at one sequence at a time, a 32.92 s step on 32 GPUs); 0.32 is the least two-decimal
    value at which a candidate starts (TP 8)."""
    inst = build_instance(_toy(0.3))
    table = CandidateTable(inst)
    assert not table.feasible["actor.generate"]
    assert all(c.refused is not None for c in table.all["actor.generate"])
    with pytest.raises(InfeasibleError) as info:
        check_instance(inst, time_limit_s=unhurried)
    text = str(info.value)
    assert text.startswith("[policy] gpu_memory_utilization 0.3: actor.generate (TP 8, PP 1) would not start: vLLM "
                           "(v1) refuses an engine whose KV cache cannot hold one request of max_model_len 256 tokens")
    assert "needed" in text and "set policy.gpu_memory_utilization to at least 0.32" in text
    started = CandidateTable(build_instance(_toy(0.32)))
    assert {c.strategy.tp for c in started.feasible["actor.generate"]} == {8}


def test_evaluator_refuses_a_plan_holding_a_refused_engine():
    """Every task on the node's 8 GPUs, the engine at TP 8: the evaluator's verdict names the refusal and its bytes
    (the pool leaves the cache nothing; one request of 256 tokens needs 17 blocks of 16 x 16,384 B)."""
    inst = build_instance(_toy(0.3))
    ev = get_evaluator(inst)
    whole = (1, 1, 8)

    def pick(name):
        cands = [c for c in ev.table.all[name] if c.extent == whole]
        if name == "actor.generate":
            cands = [c for c in cands if c.strategy.tp == 8 and c.strategy.pp == 1]
        return cands[0]

    chosen = {v.name: pick(v.name) for v in inst.graph.vertices}
    plan = Plan.build({name: c.at(Allocation((0, 0, 0), whole)) for name, c in chosen.items()})
    score = ev.score(plan)
    assert not score.feasible and math.isinf(ev.step_time(plan))
    line = next(v for v in score.violations if "would not start" in v)
    available, needed = chosen["actor.generate"].refused
    assert available <= 0 < needed == 4_456_448
    assert "actor.generate (TP 8, PP 1) would not start" in line and "4.5 MB needed" in line


@pytest.mark.parametrize("framework, version, tp", [
    ("vllm", None, 1),            # a bare engine, no release: V1
    ("nemo-rl", "0.4.0", 2),      # vLLM 0.10: NCCL's buffers inside the pool
    ("nemo-rl", "0.5.0", 2),      # vLLM 0.11.2: NCCL outside
    ("openrlhf", "0.5.5", 2),     # vLLM 0.6.5 V0: NCCL and the non-torch bytes inside
    ("verl", "0.3.0", 1),         # vLLM 0.6.3 V0, verl's 8,192 profile tokens
])
def test_estimate_kv_budget_is_the_evaluators(framework, version, tp):
    """``estimate --task generate``'s ``kv_budget`` is the budget the evaluator's engine runs on: the same
    model, GPU, release, pool and prompt priced through the placement instance's cost model."""
    prompt, final, gmu = 512, 2048, 0.85
    est = estimate("llama3.1-8b", "h100-sxm", "generate", framework=framework, framework_version=version, tp=tp,
                   seq_len=prompt, context=final, batch=8, gpu_memory_utilization=gmu)
    policy = {"algorithm": "grpo", "framework": "none" if framework == "vllm" else framework,
              "gpu_memory_utilization": gmu}
    if version is not None:
        policy["framework_version"] = version
    inst = build_instance({
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": {"actor": dict(MODEL_PRESETS["llama3.1-8b"]), "reward": "rule"},
        # OpenRLHF's group_norm (GRPO) asserts more than one response per prompt: 4 x 2, still 8 sequences
        "workload": {"batch_size": 4 if framework == "openrlhf" else 8,
                     "samples_per_prompt": 2 if framework == "openrlhf" else 1, "context_length": prompt,
                     "generation_length": final - prompt}, "policy": policy})
    cost = cost_model(inst).for_role("actor")
    model = inst.models["actor"]
    evaluator_budget = cost.engine_kv_budget(model, tp, 1)
    assert est.engine["kv_budget"] == pytest.approx(evaluator_budget, rel=1e-12)
    # the cache the evaluator's generation runs on is that budget in tokens
    tokens = kv_capacity_tokens(model, inst.hardware.memory_per_gpu, inst.workload, tp, 1, gmu, 1,
                                inst.hardware.memory_workspace, cost.engine_reservation(tp, 1).in_pool,
                                cost.engine_profile_bytes(model, tp))
    assert tokens == int(est.engine["kv_budget"] // stage_kv_bytes_per_token(model, tp, 1))
    assert est.engine["starts"] and est.fits


def test_estimate_says_vllm_would_refuse():
    """Llama-3.1-8B at TP 1 in a 0.215 x 79.11 GiB pool (18.26 GB): one sequence's live KV fits the pool, but the
    16 GB of weights, the working set, workspace and the profile run's peak (906 MB at 8,192 tokens) leave the
    cache 53 MB, under the 271 MB one request of 2,048 tokens needs; vLLM refuses to start it. At 0.22 it starts."""
    est = estimate("llama3.1-8b", "h100-sxm", "generate", framework="vllm", tp=1, seq_len=512, context=2048,
                   batch=1, gpu_memory_utilization=0.215)
    engine = est.engine
    assert engine["need_bytes"] <= engine["pool_bytes"]     # the live KV of one sequence fits the pool...
    assert not engine["starts"] and not est.fits            # ...but vLLM's start-up check does not pass
    # V1: ceil(2048 / 16) + 1 = 129 blocks of 16 x 131,072 B
    assert engine["kv_needed"] == 129 * 16 * PER_TOKEN
    assert engine["kv_budget"] == engine["kv_available"] < engine["kv_needed"]
    assert any("vLLM would refuse to start this engine" in line for line in engine_lines(engine))
    peak = est.memory["peak_bytes"] / 1e9
    assert f"{peak:.2f}" == "21.73" and engine["peak_bytes"] <= 84.94e9     # the memory fits the GPU
    assert ("peak memory per GPU: 21.73 GB  (fits in 84.94 GB, but vLLM would refuse to start the engine: its KV "
            "cache cannot hold one request of max_model_len)") in format_estimate(est).splitlines()
    roomier = estimate("llama3.1-8b", "h100-sxm", "generate", framework="vllm", tp=1, seq_len=512, context=2048,
                       batch=1, gpu_memory_utilization=0.22)
    assert roomier.engine["kv_budget"] >= roomier.engine["kv_needed"] and roomier.engine["starts"] and roomier.fits


def _verl_toy(gmu: float) -> dict:
    """The toy on verl 0.3.0 (vLLM V0, CUDA graphs): at 0.53-0.63 TP 8 and TP 4 / PP 2 fit their pool but vLLM
    would refuse to start them, while TP 4 and below need more than the pool."""
    config = _toy(gmu)
    config["policy"].update(framework="verl", framework_version="0.3.0")
    config["policy"].pop("enforce_eager")
    return config


@pytest.mark.parametrize("gmu", [0.53, 0.59, 0.6, 0.63])
def test_refused_within_the_pool_is_named_before_too_small_a_pool(gmu, unhurried):
    """Some candidates over their pool, the others within it but refused at start-up: the message names the
    start-up refusal (the pool is not what stops those) and the smallest value that starts an engine, 0.64, not
    the smallest value at which an over-pool candidate fits (0.76 from 0.60) nor the over-pool candidates' need."""
    table = CandidateTable(build_instance(_verl_toy(gmu)))
    cands = table.all["actor.generate"]
    within = [c for c in cands if c.pool_bytes <= gmu * 8e9]
    assert within and all(c.refused is not None for c in within)
    assert any(c.pool_bytes > gmu * 8e9 for c in cands)
    with pytest.raises(InfeasibleError) as info:
        check_instance(build_instance(_verl_toy(gmu)), time_limit_s=unhurried)
    text = str(info.value)
    assert text.startswith(f"[policy] gpu_memory_utilization {gmu:g}: actor.generate (TP 4, PP 2) would not start")
    assert text.endswith("; set policy.gpu_memory_utilization to at least 0.64 (vLLM starts it there at TP 4, PP 2), "
                         "or shorten workload.context_length + generation_length")
    assert "too small a pool" not in text and "needs at least" not in text


def test_the_suggested_0_64_starts_the_engine_and_0_63_does_not(work_clock):
    assert not CandidateTable(build_instance(_verl_toy(0.63))).feasible["actor.generate"]
    started = CandidateTable(build_instance(_verl_toy(0.64))).feasible["actor.generate"]
    assert {(c.strategy.tp, c.strategy.pp) for c in started} >= {(4, 2)}
    # the check at 0.64 passes the engine; the trainer is next. On the work clock with a short limit: the verdict
    # comes from the table (actor.train's smallest block); unhurried, the search for a cluster on which a whole
    # plan fits rules 32 to 128 GPUs out from their tables (verl keeps the engine on the trainer's GPUs) and runs
    # concurrent on 256, which fits a plan there (test_check_verl_colocation.py: the check names 256 GPUs)
    with pytest.raises(InfeasibleError) as info:
        check_instance(build_instance(_verl_toy(0.64)), time_limit_s=5.0)
    text = str(info.value)
    assert "gpu_memory_utilization" not in text
    # 32, not 24: 24 GPUs would be TP 8 x PP 3, whose 32 layers do not divide over 3 stages, and verl 0.3.0's
    # Megatron models build L // pp layers a stage (no uneven split before verl 0.4.0: layout_rules)
    assert text.startswith("[hardware] cluster has 8 GPUs; the smallest feasible plan for actor.train needs 32 ")


def test_every_candidate_over_its_pool_keeps_too_small_a_pool(unhurried):
    """At 0.50 (4 GB pool) every candidate needs more than its pool (the least, TP 8, 4.02 GB): the pool message,
    its need the least of all candidates', and the same 0.64."""
    table = CandidateTable(build_instance(_verl_toy(0.5)))
    cands = table.all["actor.generate"]
    assert all(c.pool_bytes > 4e9 for c in cands)
    assert round(min(c.pool_bytes for c in cands) / 1e9, 2) == 4.02
    with pytest.raises(InfeasibleError) as info:
        check_instance(build_instance(_verl_toy(0.5)), time_limit_s=unhurried)
    text = str(info.value)
    assert text.startswith("[policy] gpu_memory_utilization 0.5 leaves actor.generate too small a pool: vLLM "
                           "reserves 4 GB of each 8 GB GPU (gpu_memory_utilization x memory_per_gpu) and "
                           "actor.generate needs at least 4.02 GB inside it")
    assert "set policy.gpu_memory_utilization to at least 0.64 (5.12 GB pool" in text


def _openrlhf(version: str | None, max_position_embeddings: int | None) -> dict:
    """The toy on OpenRLHF ``version`` (no framework_version: None), its actor's context length given or not."""
    config = _toy(0.45)
    config["policy"].update(framework="openrlhf")
    if version is not None:
        config["policy"]["framework_version"] = version
    config["policy"].pop("enforce_eager")
    if max_position_embeddings is not None:
        config["models"]["actor"]["max_position_embeddings"] = max_position_embeddings
    return config


@pytest.mark.parametrize("version, mpe, length", [
    ("0.2.7", 4096, 4096),       # create_vllm_engines passes no max_model_len: vLLM takes config.json's
    ("0.3.1", 131072, 131072),
    ("0.3.2", 4096, 256),        # from v0.3.2 it passes max_len or prompt + response
    ("0.6.0", 4096, 256),
    (None, 4096, 256),           # no release: the current releases, which pass it
    ("0.2.7", None, 256),        # no context length given: prompt + response, a lower bound
])
def test_openrlhf_before_0_3_2_takes_the_model_context_length(version, mpe, length):
    inst = build_instance(_openrlhf(version, mpe))
    assert inst.engine.model_context == (version in ("0.2.7", "0.3.1"))
    cost = cost_model(inst).for_role("actor")
    assert cost.engine_max_model_len(inst.models["actor"]) == length
    assert cost.engine_max_model_len() == 256      # no model: prompt + response


def test_llama_3_1_context_on_openrlhf_0_2_7_refuses_tp_4_naming_the_source():
    """Llama-3.1-8B's 131,072-token context at TP 4 (V0): 32,768 B a token on each GPU, 8,192 blocks of 16 tokens,
    4,294,967,296 B, above the 4,091,218,903 B a 0.7 x 16 GB pool leaves its KV cache, so vLLM would refuse TP 4
    (and TP 2), which start at prompt + response (256 tokens); TP 8 needs half as much and starts."""
    needed = one_sequence_kv_bytes(LLAMA8, tp=4, pp=1, max_model_len=131072, engine_generation="v0")
    assert needed == 8192 * 16 * 32_768 == 4_294_967_296

    def table(mpe):
        config = _openrlhf("0.2.7", mpe)
        config["policy"]["gpu_memory_utilization"] = 0.7
        config["hardware"]["memory_per_gpu"] = 16e9
        inst = build_instance(config)
        return inst, CandidateTable(inst)

    def started(t):
        return {c.strategy.tp for c in t.feasible["actor.generate"]}

    # TP 2's cache holds 49,244,733 B: one request of 256 tokens (16 blocks of 16 x 65,536 B) but not of 4,096
    assert started(table(None)[1]) == {2, 4, 8} and started(table(4096)[1]) == {4, 8}
    inst, long = table(131072)
    assert started(long) == {8}
    tp4 = [c for c in long.all["actor.generate"] if (c.strategy.tp, c.strategy.pp) == (4, 1)]
    assert tp4 and all(c.refused is not None and c.refused[1] == needed for c in tp4)
    assert all(round(c.refused[0]) == 4_091_218_903 for c in tp4)
    line = engine_refusal_line("actor.generate", tp4[0], 0.7, inst)
    assert ("refuses an engine whose KV cache cannot hold one request of max_model_len 131072 tokens (the model's "
            "max_position_embeddings: this OpenRLHF release passes vLLM no max_model_len)") in line


@pytest.mark.parametrize("value", [0, -4096, 2.5, "4k", True])
def test_bad_max_position_embeddings_is_refused_naming_the_field(value):
    config = _openrlhf("0.2.7", None)
    config["models"]["actor"]["max_position_embeddings"] = value
    with pytest.raises(ValueError, match=r"max_position_embeddings: must be an integer >= 1, got|"
                                         r"max_position_embeddings: must be an integer in \[0"):
        build_instance(config)


def test_hf_config_gives_max_position_embeddings():
    from packplace.shape import from_hf_config
    llama2 = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
              "num_attention_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}
    assert from_hf_config(llama2).max_position_embeddings == 4096
    assert from_hf_config({k: v for k, v in llama2.items() if k != "max_position_embeddings"}
                          ).max_position_embeddings is None


def test_estimate_line_when_the_pool_is_too_small_and_vllm_would_refuse():
    """At 0.1 x 84.94 GB the 8.49 GB pool is below the 16 GB of weights: the need exceeds the pool (no fit) and
    the pool leaves the cache nothing (refused): both are said."""
    est = estimate("llama3.1-8b", "h100-sxm", "generate", framework="vllm", tp=1, seq_len=512, context=2048,
                   batch=1, gpu_memory_utilization=0.1)
    assert est.engine["need_bytes"] > est.engine["pool_bytes"] and not est.engine["starts"] and not est.fits
    line = next(x for x in format_estimate(est).splitlines() if x.startswith("peak memory per GPU"))
    assert line.endswith("GB  (does NOT fit in 84.94 GB, and vLLM would refuse to start the engine: its KV cache "
                         "cannot hold one request of max_model_len)")


def test_estimate_line_when_the_engine_fits_and_starts():
    est = estimate("llama3.1-8b", "h100-sxm", "generate", framework="vllm", tp=1, seq_len=512, context=2048,
                   batch=1, gpu_memory_utilization=0.22)
    line = next(x for x in format_estimate(est).splitlines() if x.startswith("peak memory per GPU"))
    assert est.fits and line.endswith("GB  (fits in 84.94 GB)")


OPENRLHF_027 = "benchmarks/validation/openrlhf_ppo_llama2-7b_16xa800.yaml"


def test_estimate_checks_the_model_context_length_where_openrlhf_passes_no_max_model_len():
    """OpenRLHF 0.2.7 (the file's release) starts vLLM without a max_model_len, so vLLM checks the model's 4,096
    tokens (config.json max_position_embeddings), not --context 512: Llama-2-7B at TP 1 in a 0.19 x 80 GiB pool
    leaves its cache 1.17 GB, under the 256 blocks of 16 x 524,288 B one such request needs (V0), so vLLM refuses,
    as the evaluator refuses the same engine; estimate had checked 512 tokens (33 blocks) and said it fits."""
    from packplace.placement.problem.config import load_yaml
    from packplace.placement.task_estimate import estimate_hardware

    root = Path(__file__).resolve().parents[2]
    model = f"{root / OPENRLHF_027}:actor"
    gpu, hardware = estimate_hardware(model, None, {})   # the config's A800 section, as the command line takes it

    def run(version):
        return estimate(model, gpu, "generate", tp=1, seq_len=256, context=512, batch=1, framework="openrlhf",
                        framework_version=version, hardware=hardware, gpu_memory_utilization=0.19)

    est = run("0.2.7")
    engine = est.engine
    assert est.inputs["framework_version"] == "0.2.7"
    assert engine["max_model_len"] == 4096 and engine["kv_needed"] == 256 * 16 * 524_288 == 2_147_483_648
    assert not engine["starts"] and not est.fits
    assert engine["kv_available"] == pytest.approx(1.17e9, abs=0.01e9)
    lines = format_estimate(est).splitlines()
    assert ("  max_model_len  4096 tokens  (vLLM's start-up check holds one request of it in the KV cache; from the "
            "model's max_position_embeddings: OpenRLHF 0.2.7 passes vLLM no max_model_len; --context 512 is not "
            "what vLLM checks)") in lines
    assert any("cannot hold one request of max_model_len 4096 tokens (1.172 GB available" in line for line in lines)
    # the evaluator refuses the same engine, needing the same bytes
    config = load_yaml(root / OPENRLHF_027)
    config.pop("validation", None)   # the published figures, which validate reads
    config["policy"]["gpu_memory_utilization"] = 0.19
    table = CandidateTable(build_instance(config, source=str(root / OPENRLHF_027)))
    tp1 = [c for c in table.all["actor.generate"] if (c.strategy.tp, c.strategy.pp) == (1, 1)]
    assert tp1 and all(c.refused is not None and c.refused[1] == engine["kv_needed"] for c in tp1)
    # v0.3.2 passes prompt + response: --context 512 is what vLLM checks, and the engine starts
    later = run("0.3.2")
    assert later.engine["max_model_len"] == 512 and later.engine["max_model_len_source"] == "--context"
    assert later.engine["starts"] and later.fits


@pytest.mark.parametrize("task, context, what", [("generate", 8192, "final"), ("decode", 4097, "cached")])
def test_estimate_refuses_a_context_longer_than_the_engines_max_model_len(task, context, what):
    """OpenRLHF 0.2.7 starts vLLM at the model's 4,096 tokens; estimate had printed that max_model_len and priced
    --context 8192 without comment, though vLLM stops a sequence at max_model_len tokens (check_stop) and refuses
    a prompt that reaches it: no request of 8,192 tokens runs on that engine."""
    from packplace.placement.task_estimate import estimate_hardware

    root = Path(__file__).resolve().parents[2]
    model = f"{root / OPENRLHF_027}:actor"
    gpu, hardware = estimate_hardware(model, None, {})
    kwargs = dict(tp=1, batch=1, framework="openrlhf", hardware=hardware)
    if task == "generate":
        kwargs["seq_len"] = 256
    with pytest.raises(ConfigError) as refused:
        estimate(model, gpu, task, context=context, framework_version="0.2.7", **kwargs)
    assert str(refused.value) == (
        f"context: {context} {what} tokens per sequence (--context) exceed vLLM's max_model_len 4096 (the model's "
        "max_position_embeddings: OpenRLHF 0.2.7 passes vLLM no max_model_len): vLLM stops a sequence at "
        "max_model_len tokens and refuses a prompt that reaches it; give --context <= 4096")
    assert estimate(model, gpu, task, context=4096, framework_version="0.2.7", **kwargs).engine["max_model_len"] == 4096
    # v0.3.2 passes prompt + response (--context itself): nothing to refuse
    assert estimate(model, gpu, task, context=context, framework_version="0.3.2",
                    **kwargs).engine["max_model_len"] == context


def test_place_refuses_a_workload_longer_than_the_model_context_openrlhf_leaves_vllm():
    # OpenRLHF before v0.3.2 starts vLLM at the model's max_position_embeddings; a workload of more tokens per
    # sequence (the toy's 256) had been priced as if every response ran to its end
    with pytest.raises(ConfigError) as refused:
        build_instance(_openrlhf("0.2.7", 255))
    assert str(refused.value) == (
        "[workload] context_length + generation_length: 256 tokens per sequence exceed vLLM's max_model_len 255 (the "
        "actor's max_position_embeddings: this OpenRLHF release passes vLLM no max_model_len): vLLM stops a sequence "
        "at max_model_len tokens and refuses a prompt that reaches it; give at most 255 tokens in all")
    assert build_instance(_openrlhf("0.2.7", 256)).engine.model_context   # exactly the length: runs
    assert not build_instance(_openrlhf("0.3.2", 255)).engine.model_context   # the release passes 256 itself
