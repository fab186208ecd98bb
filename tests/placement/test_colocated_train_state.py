"""What of a trained model's state stays on the GPUs its rollout engine generates on (verl, OpenRLHF, NeMo RL,
``FrameworkProfile.colocated_kept_state``): the per-candidate figure by trainer backend and ``training.offload``,
the evaluator's colocated peak (engine pool + kept state, not the larger of engine and trainer), and the CP-SAT
memory rows agreeing with the evaluator where the kept state decides feasibility."""

from __future__ import annotations

import copy

import pytest
from ortools.sat.python import cp_model

from packplace.placement import api
from packplace.placement.candidates import keeps_train_state
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator, get_table
from packplace.placement.model.framework import COLOCATED_KEPT_STATES, FRAMEWORKS, VERL_KEPT_STATE
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan
from packplace.solvers.placement import cpsat

#: Qwen3-8B (config.json of Qwen/Qwen3-8B), the reviewer's shape
QWEN3_8B = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
            "vocab_size": 151936, "num_attention_heads": 32, "head_dim": 128, "num_key_value_heads": 8}
#: Qwen2.5-0.5B (config.json of Qwen/Qwen2.5-0.5B)
QWEN25_05B = {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "intermediate_size": 4864,
              "vocab_size": 151936, "num_attention_heads": 14, "head_dim": 64, "num_key_value_heads": 2,
              "tie_word_embeddings": True}


def _config(shape: dict, *, gpus: int = 8, framework: str = "verl", gmu: float | None = 0.85, offload: str = "none",
            backend: str = "fsdp", sharding: str = "zero3", engine_sleeps: bool | None = None) -> dict:
    policy = {"algorithm": "grpo", "framework": framework, "trainer_backend": backend}
    if engine_sleeps is not None:
        policy["engine_sleeps"] = engine_sleeps
    if framework == "verl":
        policy["framework_version"] = "0.5.0"
    if gmu is not None:
        policy["gpu_memory_utilization"] = gmu
    return {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": gpus},
            "models": {"actor": copy.deepcopy(shape), "reward": "rule"},
            "workload": {"batch_size": 256, "samples_per_prompt": 8, "context_length": 1024,
                         "generation_length": 4096},
            "policy": policy, "training": {"sharding": sharding, "offload": offload}}


def _on_block(table, name: str, extent: tuple[int, int, int], **strategy):
    return next(c for c in table.feasible[name] if c.extent == extent
                and all(getattr(c.strategy, k) == v for k, v in strategy.items()))


def test_the_profiles_name_what_stays_beside_the_engine():
    assert {f: p.colocated_kept_state for f, p in FRAMEWORKS.items()} == {
        "none": "offloaded", "verl": "verl", "nemo-rl": "offloaded", "openrlhf": "resident",
        "deepspeed-chat": "resident"}
    assert all(p.colocated_kept_state in COLOCATED_KEPT_STATES for p in FRAMEWORKS.values())
    # verl's FSDP actor: fp32 parameter shard and fp32 Adam moments (gradients freed by zero_grad)
    assert VERL_KEPT_STATE == (4.0, 8.0)


@pytest.mark.parametrize("offload, per_param", [("none", 12.0), ("optimizer", 4.0), ("optimizer+params", 0.0)])
def test_verl_fsdp_colocated_peak_is_the_pool_plus_the_kept_shard(offload, per_param):
    inst = build_instance(_config(QWEN3_8B, offload=offload))
    table = get_table(inst)
    whole = (1, 1, 8)
    engine = _on_block(table, "actor.generate", whole, dp=8, tp=1)
    ref = _on_block(table, "reference.infer", whole, dp=8)
    train = min((c for c in table.all["actor.train"] if c.extent == whole and c.strategy.dp == 8),
                key=lambda c: c.memory_bytes)
    params = inst.models["actor"].params
    assert params == 8_190_735_360
    # by hand: 12 bytes (fp32 shard + two fp32 moments) x 8,190,735,360 / 8 = 12,286,103,040 (none);
    # 4 bytes = 4,095,367,680 (optimizer_offload); nothing with param_offload and optimizer_offload too
    assert train.rollout_kept_bytes == pytest.approx(per_param * params / 8)
    assert {c.rollout_kept_bytes for c in table.all["actor.train"] if c.extent == whole
            and c.strategy.dp == 8} == {train.rollout_kept_bytes}
    assert keeps_train_state(inst, "actor.generate")
    memory = inst.hardware.memory_per_gpu
    # the engine's whole pool (0.85 of the GPU) and its CUDA context beside it: 72.20 + 1.02 GB
    assert engine.memory_bytes == pytest.approx(0.85 * memory + inst.hardware.memory_workspace)
    assert ref.resident_bytes == pytest.approx(2.0 * params / 8)   # verl's FSDP reference shard (bf16)
    ev = PlacementEvaluator(inst, table)
    block = Allocation((0, 0, 0), whole)
    plan = Plan.build({"actor.generate": engine.at(block), "reference.infer": ref.at(block),
                       "actor.train": train.at(block)})
    peak = max(u for _, _, u in ev._memory_segments(ev._resolve(plan)))
    # generating: the pool, its context, the kept shard and the reference's shard; training (param_offload too):
    # the trainer's own peak, its state loaded back, beside the reference's shard and the sleeping engine's kept
    # bytes (none: TP 1 inside the trainer's process), its weights on the host (LLM.sleep(level=1))
    by_hand = 0.85 * memory + inst.hardware.memory_workspace + per_param * params / 8 + 2.0 * params / 8
    assert engine.kept_bytes == 0.0
    training = train.resident_bytes + train.transient_bytes + ref.resident_bytes
    assert training < by_hand
    assert peak == pytest.approx(by_hand)
    assert ev.fullest_gpus(plan).startswith(f"GPUs (0, 0, 0)..(0, 0, 7): {peak / 1e9:.3g} GB needed while "
                                            "actor.generate runs")
    # 87.56 GB without offload: over the H100's 84.94 GB, which the larger-of-the-two rule (75.7 GB) missed;
    # 79.37 GB with the optimizer state on the host
    assert (peak > memory) == (offload == "none")
    assert ev.step_time(plan) == pytest.approx(float("inf")) if offload == "none" else ev.step_time(plan) < 1e9
    assert ("12.3 GB of actor.train's state beside it" in ev.fullest_gpus(plan)) == (offload == "none")


def test_the_colocated_gpu_total_is_at_least_the_pool_plus_the_kept_trainer_state():
    for offload in ("none", "optimizer", "optimizer+params"):
        inst = build_instance(_config(QWEN25_05B, offload=offload, gmu=0.5))
        table = get_table(inst)
        ev = get_evaluator(inst)
        whole = (1, 1, 8)
        block = Allocation((0, 0, 0), whole)
        engines = [c for c in table.feasible["actor.generate"] if c.extent == whole][:6]
        trainers = sorted((c for c in table.all["actor.train"] if c.extent == whole),
                          key=lambda c: c.memory_bytes)[:6]
        refs = [c for c in table.feasible["reference.infer"] if c.extent == whole][:2]
        assert engines and trainers and refs
        for engine in engines:
            for train in trainers:
                for ref in refs:
                    plan = Plan.build({"actor.generate": engine.at(block), "reference.infer": ref.at(block),
                                       "actor.train": train.at(block)})
                    peak = max(u for _, _, u in ev._memory_segments(ev._resolve(plan)))
                    floor = 0.5 * inst.hardware.memory_per_gpu + train.rollout_kept_bytes
                    assert peak >= floor + ref.resident_bytes - 1e-3
                    # and never below either task's own peak (the training pass still counts whole)
                    assert peak >= train.memory_bytes + ref.resident_bytes - 1e-3


def test_verl_megatron_keeps_what_its_options_leave_resident_unless_param_offload():
    for offload, kept in (("none", True), ("optimizer", True), ("optimizer+params", False)):
        inst = build_instance(_config(QWEN25_05B, offload=offload, backend="megatron", sharding="zero1"))
        table = get_table(inst)
        trainers = [c for c in table.all["actor.train"] if c.strategy.tp > 1 or c.strategy.pp > 1]
        assert trainers
        for c in trainers:
            assert c.rollout_kept_bytes == (c.resident_bytes if kept else 0.0)


def test_openrlhf_keeps_the_deepspeed_state_and_nemo_rl_offloads_it():
    # an OpenRLHF engine that sleeps (--vllm_enable_sleep) has the DeepSpeed state beside it while it generates;
    # one that stays awake (the flag's default, off) has the trainer's whole resident bytes beside it in every phase
    config = _config(QWEN25_05B, framework="openrlhf", gmu=0.5, backend="auto", offload="optimizer")
    assert not keeps_train_state(build_instance(config), "actor.generate")
    inst = build_instance(_config(QWEN25_05B, framework="openrlhf", gmu=0.5, backend="auto", offload="optimizer",
                                  engine_sleeps=True))
    table = get_table(inst)
    assert keeps_train_state(inst, "actor.generate")
    assert all(c.rollout_kept_bytes == c.resident_bytes > 0 for c in table.all["actor.train"])
    inst = build_instance(_config(QWEN25_05B, framework="nemo-rl", gmu=0.5, backend="auto"))
    assert not keeps_train_state(inst, "actor.generate")
    assert all(c.rollout_kept_bytes == 0.0 for c in get_table(inst).all["actor.train"])


@pytest.mark.parametrize("offload, fits", [("none", False), ("optimizer", True)])
def test_cpsat_memory_rows_agree_with_the_evaluator_where_the_kept_state_decides(offload, fits):
    # the reviewer's plan: Qwen3-8B on 8 H100s, verl FSDP, every task on all 8 GPUs, the pool at 0.85
    inst = build_instance(_config(QWEN3_8B, offload=offload))
    ev = get_evaluator(inst)
    whole = (1, 1, 8)
    cands = {"actor.generate": _on_block(ev.table, "actor.generate", whole, dp=8, tp=1),
             "reference.infer": _on_block(ev.table, "reference.infer", whole, dp=8),
             "actor.train": min((c for c in ev.table.all["actor.train"] if c.extent == whole and c.strategy.dp == 8),
                                key=lambda c: c.memory_bytes)}
    plan = Plan.build({n: c.at(Allocation((0, 0, 0), whole)) for n, c in cands.items()})
    engine, train, ref = cands["actor.generate"], cands["actor.train"], cands["reference.infer"]
    memory = inst.hardware.memory_per_gpu
    # the larger-of-the-two rule fits either way (75.7 GB of 84.94 GB without offload)
    larger = engine.memory_bytes + ref.resident_bytes + max(0.0, train.resident_bytes - engine.resident_bytes)
    assert larger < memory
    # with the kept state (12.3 GB without offload, 4.1 GB with optimizer_offload) beside the pool: 87.6 / 79.4 GB
    assert (ev.step_time(plan) < float("inf")) == fits
    # CP-SAT's memory rows with these options fixed: the same verdict
    tables = cpsat.make_tables(ev, {n: [c] for n, c in cands.items()})
    built = cpsat.build_model(inst, tables, horizon=10 * sum(o.duration for opts in tables.options for o in opts))
    for v in range(len(tables.names)):
        for option, lit in zip(tables.options[v], built.x[v]):
            built.model.Add(lit == int(option.lo == 0))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    status = solver.Solve(built.model)
    assert status == (cp_model.OPTIMAL if fits else cp_model.INFEASIBLE)


def test_greedy_finds_the_plan_whose_engine_keeps_nothing_beside_the_trainer():
    # Qwen3-8B on 4 H100s at verl's 0.5: the fastest engine (TP 4) keeps 4.85 GB of NCCL buffers beside the
    # trainer's pass, which then overflows; the TP 1 engine (the same pool, nothing kept) fits beside the kept
    # 12 x 8.19e9 / 4 = 24.6 GB shard, and memory_first's least-memory plan now takes it on the tie. The pass's
    # activations are selective recompute's, set here: verl's FSDP workers' own default is now full recompute
    # (enable_gradient_checkpointing), whose smaller activations leave room for the TP 4 engine's buffers
    config = _config(QWEN3_8B, gpus=4, gmu=None)
    config["training"]["recompute"] = "selective"
    inst = build_instance(config)
    result = api.solve_placement(inst, "greedy", seed=0, time_limit_s=60)
    assert result.solution is not None, result.message
    engine = result.solution["actor.generate"]
    assert engine.strategy.tp == 1
    # under the default (full recompute) greedy keeps the faster TP 4 engine, and the plan scores feasible
    default = build_instance(_config(QWEN3_8B, gpus=4, gmu=None))
    plain = api.solve_placement(default, "greedy", seed=0, time_limit_s=60)
    assert plain.solution is not None and plain.solution["actor.generate"].strategy.tp == 4
    assert get_evaluator(default).score(plain.solution).feasible
    ev = get_evaluator(inst)
    assert ev.step_time(result.solution) == result.objective < float("inf")
    train = ev._resolve(result.solution)[ev.index["actor.train"]][0]
    assert train.rollout_kept_bytes == pytest.approx(12.0 * inst.models["actor"].params / 4)
