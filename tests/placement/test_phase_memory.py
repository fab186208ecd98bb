"""Per-phase residency in the plan's memory check: a vLLM engine that sleeps between its calls
(``LLM.sleep(level=1)``: its weights on the host, its KV cache discarded) holds only its kept bytes while the other
tasks on its GPUs run, so a GPU range's peak is the largest over the tasks that run there of what the range holds
while each runs. Hand-computed figures (a NeMo RL 70B plan, verl's offload settings), properties against the rule
with every engine's weights resident in every phase, and CP-SAT / the whole-plan proof / greedy's screen agreeing
with the evaluator."""

from __future__ import annotations

import copy
import itertools
import math
import os

import pytest
from test_placement_cpsat import instance, proven_optimal
from test_placement_cpsat_chunk import every_plan

import packplace
from packplace.placement.candidates import sleeps_between_calls
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator, get_table
from packplace.placement.model.memory import VLLM_CUDA_GRAPH_BYTES, VLLM_NCCL_BYTES
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan
from packplace.placement.whole_plan import _shared_bytes
from packplace.solvers.placement._fitting import _over, _segments, _terms

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN3_32B = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_grpo_qwen3-32b_4x8xh100.yaml")
NEMO_8B = os.path.join(ROOT, "configs", "placement", "published", "grpo_nemo-rl_llama3.1-8b_2x8xh100.yaml")
LLAMA_70B_PARAMS = 70_553_706_496   # Llama-3.1-70B: 80 layers, hidden 8,192, FFN 28,672, 128,256 vocabulary


def _old_peaks(ev: PlacementEvaluator, res: list) -> list[float]:
    """Each GPU range's bytes under the rule before phases: every engine's weights resident in every phase."""
    points = sorted({x for _, lo, hi in res for x in (lo, hi)})
    out = []
    for a, b in zip(points, points[1:]):
        here = [i for i, (_, lo, hi) in enumerate(res) if lo <= a and b <= hi]
        if not here:
            continue
        hybrid = {i: ev._hybrid_weights(res, i, a, b) for i in here}
        resident: dict[int, float] = {}
        for i in here:
            if hybrid[i] is None:
                resident[ev.vertex_model[i]] = max(resident.get(ev.vertex_model[i], 0.0), res[i][0].resident_bytes)
        own = max(res[i][0].transient_excess + (hybrid[i] or 0.0)
                  + ev._state_excess(res, i, a, b, resident.get(ev.vertex_model[i], 0.0)) for i in here)
        out.append(sum(resident.values()) + sum(res[i][0].kept_bytes for i in here) + own)
    return out


def _llama70b_nemo_rl() -> tuple:
    """NeMo RL GRPO on 8 x 8 H100, every task colocated on the 64 GPUs: Llama-3.1-70B, vLLM TP 4 at
    gpu_memory_utilization 0.6, Megatron TP 4 x PP 4 with the distributed optimizer, no activation recomputation,
    no sequence parallelism (the Qwen3-32B performance row's run settings otherwise)."""
    cfg = copy.deepcopy(load_yaml(QWEN3_32B))
    cfg["hardware"]["nodes_per_rack"] = 8
    cfg["models"]["actor"] = dict(model_type="llama", num_hidden_layers=80, hidden_size=8192,
                                  intermediate_size=28672, vocab_size=128256, num_attention_heads=64,
                                  num_key_value_heads=8)
    cfg["training"]["actor"] = {"sharding": "zero1", "recompute": "none", "optimizer_steps": 4,
                                "sequence_parallel": False}
    whole = {"origin": [0, 0, 0], "extent": [1, 8, 8]}
    cfg["validation"]["plan"] = {
        "actor.generate": {"dp": 16, "pp": 1, "tp": 4, "micro_batch": 128, **whole},
        "reference.infer": {"dp": 4, "pp": 4, "tp": 4, "micro_batch": 4, **whole},
        "actor.train": {"dp": 4, "pp": 4, "tp": 4, "micro_batch": 1, **whole}}
    inst, plan, _ = load_setup_mapping(cfg)
    return inst, plan


def test_nemo_rl_70b_training_phase_holds_the_sleeping_engines_kept_bytes_not_its_weights():
    inst, plan = _llama70b_nemo_rl()
    ev = plan_evaluator(inst, plan)
    res = ev._resolve(plan)
    cand = {n: r[0] for n, r in zip(ev.names, res)}
    engine, train, ref = cand["actor.generate"], cand["actor.train"], cand["reference.infer"]
    assert inst.models["actor"].params == LLAMA_70B_PARAMS
    assert sleeps_between_calls(inst, "actor.generate") and not sleeps_between_calls(inst, "actor.train")
    # by hand: the engine's bf16 weights at TP 4, 2 x 70,553,706,496 / 4 = 35.28 GB; asleep it keeps NCCL's
    # 4.52 GiB (TP 4), its CUDA graphs 2.28 GiB and its Ray actor's CUDA context (the preset's 1.02 GB)
    assert engine.resident_bytes == pytest.approx(2 * LLAMA_70B_PARAMS / 4)
    assert engine.kept_bytes == pytest.approx(VLLM_NCCL_BYTES + VLLM_CUDA_GRAPH_BYTES + 1.02e9)
    assert train.resident_bytes < engine.resident_bytes and ref.resident_bytes == 0.0   # reference: swapped in
    assert train.rollout_kept_bytes == 0.0   # NeMo RL offloads the policy before its colocated engine generates
    training = train.resident_bytes + train.transient_bytes + engine.kept_bytes
    generation = engine.resident_bytes + engine.transient_bytes + train.rollout_kept_bytes
    reference = train.resident_bytes + ref.transient_bytes + engine.kept_bytes
    ((lo, hi, used),) = ev._memory_segments(res)
    assert (lo, hi) == (0, 64)
    assert used == pytest.approx(max(training, generation, reference), rel=1e-12)
    assert used == pytest.approx(training, rel=1e-12)
    # 81.86 GB of the H100's 84.94 GB; counting the engine's weights through training it was 85.35 GB, over
    assert used / 1e9 == pytest.approx(81.86, abs=0.01)
    (old,) = _old_peaks(ev, res)
    assert old - used == pytest.approx(engine.resident_bytes - train.resident_bytes, rel=1e-9)
    assert old > ev.capacity >= used
    assert ev.score(plan).feasible
    assert ev.fullest_gpus(plan).startswith(f"GPUs (0, 0, 0)..(0, 7, 7): {used / 1e9:.3g} GB needed while "
                                            "actor.train runs, 84.9 GB available (actor.generate 8.32 GB kept "
                                            "while it sleeps, actor.train")


def _verl_qwen3_8b(offload: str):
    """verl GRPO Qwen3-8B on one node of 8 H100, FSDP, vLLM at gpu_memory_utilization 0.85."""
    return build_instance({
        "hardware": {"preset": "h100-sxm"},
        "models": {"actor": dict(model_type="qwen3", num_hidden_layers=36, hidden_size=4096, intermediate_size=12288,
                                 vocab_size=151936, num_attention_heads=32, head_dim=128, num_key_value_heads=8),
                   "reward": "rule"},
        "workload": dict(batch_size=256, samples_per_prompt=8, context_length=1024, generation_length=4096),
        "policy": dict(algorithm="grpo", framework="verl", framework_version="0.5.0", trainer_backend="fsdp",
                       gpu_memory_utilization=0.85),
        "training": {"sharding": "zero3", "offload": offload}})


def _verl_plan(inst) -> tuple[Plan, dict]:
    table = get_table(inst)
    whole = (1, 1, 8)

    def pick(name, **strategy):
        return min((c for c in table.feasible[name] if c.extent == whole
                    and all(getattr(c.strategy, k) == v for k, v in strategy.items())), key=lambda c: c.time)

    cands = {"actor.generate": pick("actor.generate", dp=8, tp=1), "reference.infer": pick("reference.infer", dp=8),
             "actor.train": pick("actor.train", dp=8)}
    return Plan.build({n: c.at(Allocation((0, 0, 0), whole)) for n, c in cands.items()}), cands


def test_verl_offloading_the_parameters_too_never_needs_more_than_the_optimizer_alone():
    peaks = {}
    for offload in ("optimizer", "optimizer+params"):
        inst = _verl_qwen3_8b(offload)
        ev = get_evaluator(inst)
        plan, c = _verl_plan(inst)
        engine, train, ref = c["actor.generate"], c["actor.train"], c["reference.infer"]
        ((_, _, used),) = ev._memory_segments(ev._resolve(plan))
        # generating: the pool (0.85 of the GPU) and the CUDA context beside it, the trainer's fp32 parameter
        # shard that stays unless param_offload (4 B x 8,190,735,360 / 8), the reference's bf16 shard; training:
        # the trainer's own peak beside the reference's shard, the engine asleep (TP 1 in the trainer's process,
        # eager or not: no bytes of its own but its graphs)
        kept_state = (4.0 * inst.models["actor"].params / 8) if offload == "optimizer" else 0.0
        assert train.rollout_kept_bytes == pytest.approx(kept_state)
        generation = 0.85 * inst.hardware.memory_per_gpu + inst.hardware.memory_workspace + kept_state \
            + ref.resident_bytes
        training = train.resident_bytes + train.transient_bytes + ref.resident_bytes + engine.kept_bytes
        assert used == pytest.approx(max(generation, training), rel=1e-9)
        assert used == pytest.approx(generation, rel=1e-9)
        peaks[offload] = used
        (old,) = _old_peaks(ev, ev._resolve(plan))
        assert used <= old + 1e-3
    # 75.27 GB with the parameters on the host too, 79.37 GB with the optimizer state alone (the training
    # phase with the engine's 16.4 GB of weights counted had put the former at 80.30 GB)
    assert peaks["optimizer+params"] <= peaks["optimizer"]
    assert peaks["optimizer+params"] / 1e9 == pytest.approx(75.27, abs=0.01)
    assert peaks["optimizer"] / 1e9 == pytest.approx(79.37, abs=0.01)


def _phase_floor(ev: PlacementEvaluator, res: list, i: int, a: int, b: int, here: list[int]) -> float:
    """What vertex ``i`` needs on ``[a, b)`` while it runs, at least: its own resident and transient bytes
    (a hybrid engine's weights as the evaluator counts them) beside every other vertex's kept bytes."""
    hybrid = ev._hybrid_weights(res, i, a, b)
    cand = res[i][0]
    own = cand.transient_bytes + (cand.resident_bytes if hybrid is None else hybrid)
    return own + sum(res[j][0].kept_bytes for j in here if j != i)


@pytest.mark.parametrize("which", ["nemo-8b", "verl", "openrlhf", "openrlhf-awake", "grpo-small",
                                   "grpo-small-awake"])
def test_the_phase_peak_is_at_most_the_old_count_and_at_least_each_phases_own_need(which):
    # an engine that sleeps: at most the old count (its weights in every phase); one that stays awake (OpenRLHF
    # without --vllm_enable_sleep, a bare engine by default): at least it (its weights beside its trainer's, not
    # the larger of the two, and its whole pool in every phase)
    awake = which.endswith("-awake")
    if which == "nemo-8b":
        inst = build_instance(load_yaml(NEMO_8B))
    elif which.startswith("grpo-small"):
        inst = instance("grpo", gpus_per_node=2, batch_size=4, memory_per_gpu=8e9, gpu_memory_utilization=0.11,
                        engine_sleeps=not awake)
    else:
        cfg = load_yaml(NEMO_8B)
        cfg["policy"] = {**cfg["policy"], "framework": which.removesuffix("-awake")}
        cfg["policy"].pop("framework_version", None)
        if which == "openrlhf":
            cfg["policy"]["engine_sleeps"] = True   # --vllm_enable_sleep
        inst = build_instance(cfg)
    assert sleeps_between_calls(inst, "actor.generate") != awake
    ev = get_evaluator(inst)
    table = ev.table
    rng = __import__("random").Random(7)
    checked = 0
    for _ in range(300):
        cands = {n: rng.choice(table.feasible[n]) for n in ev.names}
        plan = Plan.build({n: c.at(rng.choice(table.origins(c.extent))) for n, c in cands.items()})
        res = ev._resolve(plan)
        if res.__class__ is str:
            continue
        new = ev._memory_segments(res)
        old = _old_peaks(ev, res)
        assert len(new) == len(old)
        for (a, b, used), before in zip(new, old):
            if awake:
                assert used >= before * (1 - 1e-12) - 1e-6
            else:
                assert used <= before * (1 + 1e-12) + 1e-6
            here = [i for i, (_, lo, hi) in enumerate(res) if lo <= a and b <= hi]
            for i in here:
                assert used >= _phase_floor(ev, res, i, a, b, here) * (1 - 1e-12) - 1e-6
            checked += 1
    assert checked > 100


def test_the_whole_plan_bound_and_greedys_screen_stay_below_the_evaluator():
    # every choice of candidates on one shared block: _shared_bytes (the proof's bound) and _over's cut (greedy's
    # screen, at the chosen terms) never exceed the evaluator's figure, and the screen cuts exactly the plans over
    inst = instance("grpo", gpus_per_node=2, batch_size=4, memory_per_gpu=8e9, gpu_memory_utilization=0.11)
    ev = get_evaluator(inst)
    names = ev.names
    whole = (1, 1, 2)
    pools = [[c for c in ev.table.feasible[n] if c.extent == whole][:4] for n in names]
    assert all(pools) and sleeps_between_calls(inst, "actor.generate")
    models = tuple((inst.graph.vertex(n).model, sleeps_between_calls(inst, n)) for n in names)
    segments = _segments(ev, [(0, 2)] * len(names))
    for combo in itertools.product(*pools):
        res = [(c, 0, 2) for c in combo]
        ((_, _, used),) = ev._memory_segments(res)
        bound = _shared_bytes(models, tuple((c.gpus, c.resident_bytes, c.transient_bytes, c.kept_bytes)
                                            for c in combo))
        assert bound <= used * (1 + 1e-12)
        over = _over(ev, segments, list(combo), [_terms(c) for c in combo])
        assert over == (used > ev.capacity * (1 + 1e-9))


def _grpo(memory_per_gpu: float):
    """Two GPUs, GRPO, the engine's pool fixed at 0.88 GB whatever the GPU's memory: the candidates' bytes stay
    the same, only the capacity moves (test_sleep_kept_memory's instance)."""
    return instance("grpo", gpus_per_node=2, batch_size=4, memory_per_gpu=memory_per_gpu,
                    gpu_memory_utilization=0.88e9 / memory_per_gpu)


def test_cpsat_optimum_is_the_brute_force_where_the_engines_weights_decide():
    # a capacity where the fastest plan that fits does so only because the sleeping engine's weights leave while
    # the others run: CP-SAT's per-phase rows accept it, and its optimum is the brute force's over every candidate
    # and origin (the rule with the engine's weights in every phase had a slower optimum there)
    roomy = get_evaluator(_grpo(8e9))
    names = roomy.names
    rows = []
    for plan in every_plan(roomy, {n: roomy.table.feasible[n] for n in names}):
        res = roomy._resolve(plan)
        rows.append((max(u for _, _, u in roomy._memory_segments(res)), max(_old_peaks(roomy, res)),
                     roomy._objective(res, plan)))
    assert all(new <= old * (1 + 1e-12) for new, old, _ in rows)

    def best(capacity: float, column: int) -> float:
        return min((row[2] for row in rows if row[column] <= capacity), default=math.inf)

    decided = [c * (1 + 1e-6) for c in sorted({new for new, old, _ in rows if new < old})]
    capacity = max(c for c in decided if best(c, 0) < best(c, 1))
    tight = _grpo(capacity)
    ev = get_evaluator(tight)
    brute = best(capacity, 0)
    assert brute < best(capacity, 1) < math.inf
    result = packplace.place(tight, "cpsat", time_limit_s=20)
    assert proven_optimal(result), result.message
    assert brute - 1e-9 <= result.objective <= brute + result.info["rounding_s"]
    assert ev.score(result.solution).feasible
