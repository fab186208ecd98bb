"""Which rollout engines sleep between their calls, per framework (``FrameworkProfile.engine_sleeps``, the config's
``policy.engine_sleeps``): verl and NeMo RL put a vLLM engine that shares GPUs to sleep, OpenRLHF only under
``--vllm_enable_sleep`` (off by default), a bare engine (``none``) never unless the config says so. An engine that
stays awake holds its weights and its whole pool beside every other task on its GPUs, its weights apart from its
trainer's (a copy of its own): hand-computed figures, the CP-SAT optimum against the brute force, the whole-plan
bound and greedy's screen against the evaluator, and the OpenRLHF emitter's sleep switch."""

from __future__ import annotations

import dataclasses
import itertools
import math
import os

import pytest
from test_phase_memory import LLAMA_70B_PARAMS, _llama70b_nemo_rl
from test_placement_cpsat import instance, proven_optimal
from test_placement_cpsat_chunk import every_plan

import packplace
from packplace.errors import ConfigError
from packplace.placement.candidates import (
    engine_sleeps,
    keeps_train_state,
    sleeps_between_calls,
    stays_awake,
    weight_group,
)
from packplace.placement.checking.validate import plan_evaluator
from packplace.placement.emit.common import PlanView
from packplace.placement.emit.openrlhf import emit_openrlhf
from packplace.placement.evaluator import PlacementEvaluator, get_evaluator
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.placement.whole_plan import _shared_bytes
from packplace.solvers.placement._fitting import _over, _segments, _terms

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPENRLHF_7B = os.path.join(ROOT, "configs", "placement", "published", "ppo_openrlhf_llama2-7b_1x8xa800.yaml")
A800 = 79.25 * 2**30   # the a800 preset's CUDA total, bytes


def _grpo(framework: str, **policy) -> dict:
    """A small GRPO config (Qwen2.5-0.5B, rule reward, one node of 8 H100) for ``framework``."""
    shape = {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "intermediate_size": 4864,
             "vocab_size": 151936, "num_attention_heads": 14, "head_dim": 64, "num_key_value_heads": 2,
             "tie_word_embeddings": True}
    return {"hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
            "models": {"actor": shape, "reward": "rule"},
            "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 512, "generation_length": 512},
            "policy": {"algorithm": "grpo", "framework": framework, **policy}}


def test_the_profiles_say_which_engines_sleep():
    assert {name: p.engine_sleeps for name, p in FRAMEWORKS.items()} == {
        "none": False, "verl": True, "nemo-rl": True, "openrlhf": False, "deepspeed-chat": False}


@pytest.mark.parametrize("framework, default", [("none", False), ("verl", True), ("nemo-rl", True),
                                                ("openrlhf", False)])
def test_the_config_key_overrides_the_framework(framework, default):
    # NeMo RL's engine cannot be kept awake: false is refused (test_nemo_rl_refuses_an_awake_engine)
    for given, sleeps in ((None, default), (True, True)) + (((False, False),) if framework != "nemo-rl" else ()):
        inst = build_instance(_grpo(framework, **({} if given is None else {"engine_sleeps": given})))
        assert engine_sleeps(inst) is sleeps
        assert sleeps_between_calls(inst, "actor.generate") is sleeps
        assert stays_awake(inst, "actor.generate") is not sleeps
        assert weight_group(inst, "actor.generate") == ("actor" if sleeps else "actor@actor.generate")
        # training vertices never sleep nor count apart
        assert not sleeps_between_calls(inst, "actor.train") and not stays_awake(inst, "actor.train")
        assert weight_group(inst, "actor.train") == "actor"
        if framework in ("verl", "openrlhf"):   # the trainer's state kept beside a sleeping engine only
            assert keeps_train_state(inst, "actor.generate") is sleeps


def test_deepspeed_chat_has_no_engine_to_sleep_and_the_key_is_checked():
    cfg = _grpo("deepspeed-chat")
    inst = build_instance(cfg)
    assert not engine_sleeps(inst) and not stays_awake(inst, "actor.generate")
    cfg["policy"]["engine_sleeps"] = True
    with pytest.raises(ConfigError, match=r"\[policy\] engine_sleeps: true is a vLLM setting; the deepspeed-chat "
                                          r"framework generates with its trainer's own weights"):
        build_instance(cfg)
    with pytest.raises(ConfigError, match="engine_sleeps"):
        build_instance(_grpo("none", engine_sleeps="yes"))


def test_nemo_rl_refuses_an_awake_engine():
    """NeMo RL builds its vLLM engine with ``enable_sleep_mode=True`` and ``VllmGeneration.finish_generation`` puts a
    colocated one to sleep after every generation (``nemo_rl/models/generation/vllm/vllm_worker.py``,
    ``vllm_generation.py`` at v0.4.0-v0.7.0; ``nemo_reinforcer/models/generation/vllm.py`` at v0.1.0): no switch
    keeps it awake, so ``engine_sleeps: false`` is refused at load, naming the field and its value, with or without
    a release; ``true`` (what it runs) is accepted."""
    for version in (None, "0.1.0", "0.7.0"):
        cfg = _grpo("nemo-rl", engine_sleeps=False, **({} if version is None else {"framework_version": version}))
        with pytest.raises(ConfigError, match=r"\[policy\] engine_sleeps: false: NeMo RL has no switch to keep its "
                                              r"vLLM engine awake .*enable_sleep_mode=True.*colocated.enabled: "
                                              r"false"):
            build_instance(cfg)
        cfg["policy"]["engine_sleeps"] = True
        assert engine_sleeps(build_instance(cfg))


@pytest.mark.parametrize("version, refused", [("0.5.7", True), ("0.4.4", True), ("0.5.8", False), ("0.6.0", False),
                                              (None, False)])
def test_openrlhf_refuses_a_sleeping_engine_before_0_5_8(version, refused):
    """OpenRLHF's ``--vllm_enable_sleep`` arrives in v0.5.8 (``openrlhf/cli/train_ppo_ray.py``: absent at v0.5.7), so
    ``engine_sleeps: true`` with an earlier ``framework_version`` is refused, naming both fields and the values;
    without a version it is kept, as every release-gated option is (the emitter writes the current names), and
    ``false`` (what such a release runs) is accepted at every release."""
    cfg = _grpo("openrlhf", engine_sleeps=True, **({} if version is None else {"framework_version": version}))
    if refused:
        with pytest.raises(ConfigError, match=rf"\[policy\] engine_sleeps: true with framework_version "
                                              rf"'{version}': OpenRLHF has vLLM's sleep mode from 0\.5\.8 "
                                              r"\(--vllm_enable_sleep"):
            build_instance(cfg)
    else:
        assert engine_sleeps(build_instance(cfg))
    cfg["policy"]["engine_sleeps"] = False
    assert not engine_sleeps(build_instance(cfg))


@pytest.mark.parametrize("version, refused", [("0.1", True), ("0.2", True), ("0.3.0.post1", True), ("0.4.1", True),
                                              ("0.5.0", False), ("0.7.0", False), (None, False)])
def test_verl_refuses_an_awake_engine_before_0_5_0(version, refused):
    """verl's sharding managers call ``sleep(level=1)`` under ``rollout.free_cache_engine`` only from v0.5.0
    (``verl/workers/sharding_manager/fsdp_vllm.py`` ``__exit__``); at v0.1-v0.4.1 ``__exit__`` offloads the engine's
    weights after every rollout whatever the key says. So ``engine_sleeps: false`` with an earlier
    ``framework_version`` is refused, naming the field, its value, the release and why; from 0.5.0, and without a
    version, it is kept (the emitter writes ``free_cache_engine=False``), and ``true`` is accepted at every
    release."""
    cfg = _grpo("verl", engine_sleeps=False, **({} if version is None else {"framework_version": version}))
    if refused:
        with pytest.raises(ConfigError) as err:
            build_instance(cfg)
        assert str(err.value) == (
            f"[policy] engine_sleeps: false with framework_version '{version}': verl keeps its vLLM engine awake "
            "only from 0.5.0 (rollout.free_cache_engine=False); before it the sharding manager offloads the "
            "engine's weights after every rollout whatever free_cache_engine says (the sharding manager's __exit__, "
            "fsdp_vllm.py / megatron_vllm.py, v0.1-v0.4.1); drop engine_sleeps or set framework_version 0.5.0 or "
            "later")
    else:
        assert not engine_sleeps(build_instance(cfg))
    cfg["policy"]["engine_sleeps"] = True
    assert engine_sleeps(build_instance(cfg))


def _nemo_70b_awake():
    """The NeMo RL Llama-3.1-70B plan of test_phase_memory with its engine forced awake (the instance's
    ``engine.sleeps`` false). A config cannot ask it (``policy.engine_sleeps: false`` is refused for NeMo RL, whose
    colocated engine always sleeps); the evaluator's charge of an awake engine is the same for every framework
    that runs one (verl's ``free_cache_engine: false``, OpenRLHF without ``--vllm_enable_sleep``)."""
    inst, plan = _llama70b_nemo_rl()
    return dataclasses.replace(inst, engine=dataclasses.replace(inst.engine, sleeps=False), _cache={}), plan


def test_an_awake_engine_is_charged_its_weights_and_pool_in_the_trainers_phase():
    inst, plan = _nemo_70b_awake()
    assert stays_awake(inst, "actor.generate") and not sleeps_between_calls(inst, "actor.generate")
    ev = plan_evaluator(inst, plan)
    res = ev._resolve(plan)
    cand = {n: r[0] for n, r in zip(ev.names, res)}
    engine, train, ref = cand["actor.generate"], cand["actor.train"], cand["reference.infer"]
    # by hand: the engine's bf16 weights at TP 4, 2 x 70,553,706,496 / 4 = 35.28 GB, and its KV cache and what
    # it holds outside the pool, 19.16 GB, all kept (its transient bytes); the trainer's 31.79 GB resident (its
    # largest pipeline stage) + 41.75 GB while it trains
    assert engine.resident_bytes == pytest.approx(2 * LLAMA_70B_PARAMS / 4)
    assert engine.kept_bytes == engine.transient_bytes
    assert (engine.transient_bytes / 1e9, train.resident_bytes / 1e9, train.transient_bytes / 1e9) == (
        pytest.approx(19.16, abs=0.005), pytest.approx(31.79, abs=0.005), pytest.approx(41.75, abs=0.005))
    training = train.resident_bytes + train.transient_bytes + engine.resident_bytes + engine.transient_bytes
    generation = engine.resident_bytes + engine.transient_bytes + train.resident_bytes
    reference = train.resident_bytes + ref.transient_bytes + engine.resident_bytes + engine.transient_bytes
    ((lo, hi, used),) = ev._memory_segments(res)
    assert (lo, hi) == (0, 64)
    assert used == pytest.approx(max(training, generation, reference), rel=1e-12)
    # 31.79 + 41.75 + 35.28 + 19.16 = 127.97 GB of the H100's 84.94 GB: over; asleep the same plan needs 81.86
    assert used / 1e9 == pytest.approx(127.97, abs=0.01)
    assert not ev.score(plan).feasible and used > ev.capacity
    asleep, asleep_plan = _llama70b_nemo_rl()
    ((_, _, asleep_used),) = PlacementEvaluator(asleep)._memory_segments(
        plan_evaluator(asleep, asleep_plan)._resolve(asleep_plan))
    assert asleep_used / 1e9 == pytest.approx(81.86, abs=0.01)
    assert ev.fullest_gpus(plan).startswith("GPUs (0, 0, 0)..(0, 7, 7): 128 GB needed while actor.train runs, "
                                            "84.9 GB available (actor.generate 35.3 GB resident + 19.2 GB kept "
                                            "while others run, actor.train 31.8 GB resident")


def _openrlhf_colocate_all(**policy):
    cfg = load_yaml(OPENRLHF_7B)
    cfg["policy"].update(framework_version="0.6.0", **policy)
    inst = build_instance(cfg)
    whole, dp8 = Allocation((0, 0, 0), (1, 1, 8)), Strategy(8, 1, 1, 1)
    plan = Plan.build({"actor.generate": VertexPlan(dp8, 128, whole), "reference.infer": VertexPlan(dp8, 64, whole),
                       "reward.infer": VertexPlan(dp8, 128, whole), "critic.infer": VertexPlan(dp8, 128, whole),
                       "actor.train": VertexPlan(dp8, 16, whole), "critic.train": VertexPlan(dp8, 16, whole)})
    return inst, plan


def test_openrlhf_colocate_all_fits_only_with_vllm_enable_sleep():
    # every task on the 8 A800s at OpenRLHF 0.6.0 (the engine at 0.4 under --colocate_all_models): asleep the
    # reference's phase peaks at 62.10 GB (test_openrlhf_colocate_all_plans); awake (the flag's default, off) the
    # engine's 0.4 x 85.09 = 34.04 GB pool and the 4.61 GB it holds outside it stay beside that phase in place of
    # the 4.61 GB it keeps asleep: 62.10 + 34.04 = 96.14 GB, over the 85.09 GB GPU
    asleep_inst, plan = _openrlhf_colocate_all(engine_sleeps=True)
    awake_inst, _ = _openrlhf_colocate_all()
    asleep, awake = PlacementEvaluator(asleep_inst), PlacementEvaluator(awake_inst)
    ((_, _, low),) = asleep._memory_segments(asleep._resolve(plan))
    ((_, _, high),) = awake._memory_segments(awake._resolve(plan))
    engine = awake._resolve(plan)[0][0]
    assert engine.kept_bytes == engine.transient_bytes
    assert engine.resident_bytes + engine.transient_bytes == pytest.approx(0.4 * A800 + 4.6063e9, abs=1e5)
    assert low / 1e9 == pytest.approx(62.10, abs=0.005)
    assert high - low == pytest.approx(0.4 * A800, abs=1e5)
    assert high / 1e9 == pytest.approx(96.14, abs=0.005)
    assert asleep.step_time(plan) < math.inf and awake.step_time(plan) == math.inf
    # the emitter turns --vllm.enable_sleep on only for the plan priced asleep
    # (0.6.0's own flat names)
    assert emit_openrlhf(PlanView.of(asleep_inst, plan)).settings["--vllm_enable_sleep"] is True
    out = emit_openrlhf(PlanView.of(awake_inst, plan))
    assert "--vllm_enable_sleep" not in out.settings and out.settings["--colocate_all_models"] is True
    assert any("stay awake" in line for line in out.notes)


def test_the_whole_plan_bound_and_greedys_screen_stay_below_the_evaluator_with_an_awake_engine():
    inst = instance("grpo", gpus_per_node=2, batch_size=4, memory_per_gpu=8e9, gpu_memory_utilization=0.11,
                    engine_sleeps=False)
    ev = get_evaluator(inst)
    names = ev.names
    assert stays_awake(inst, "actor.generate")
    pools = [[c for c in ev.table.feasible[n] if c.extent == (1, 1, 2)][:4] for n in names]
    assert all(pools)
    models = tuple((weight_group(inst, n), sleeps_between_calls(inst, n)) for n in names)
    segments = _segments(ev, [(0, 2)] * len(names))
    engine = names.index("actor.generate")
    for combo in itertools.product(*pools):
        res = [(c, 0, 2) for c in combo]
        ((_, _, used),) = ev._memory_segments(res)
        # every resident and every kept byte of the engine and the trainer counted, beside the largest run
        resident = sum(c.resident_bytes for c in combo)
        assert used >= resident + combo[engine].transient_bytes - 1e-3
        bound = _shared_bytes(models, tuple((c.gpus, c.resident_bytes, c.transient_bytes, c.kept_bytes)
                                            for c in combo))
        assert bound == pytest.approx(used, rel=1e-12)
        over = _over(ev, segments, list(combo), [_terms(c) for c in combo])
        assert over == (used > ev.capacity * (1 + 1e-9))


def test_cpsat_optimum_is_the_brute_force_with_an_awake_engine():
    # two GPUs, the engine's pool fixed at 0.88 GB: at a capacity where the awake engine's bytes rule out the fastest
    # plans, CP-SAT's memory rows (the engine's weights in a term of their own, its pool kept) give the brute force's
    # optimum over every candidate and origin
    def grpo(memory_per_gpu):
        return instance("grpo", gpus_per_node=2, batch_size=4, memory_per_gpu=memory_per_gpu,
                        gpu_memory_utilization=0.88e9 / memory_per_gpu, engine_sleeps=False)

    roomy = get_evaluator(grpo(8e9))
    names = roomy.names
    rows = []
    for plan in every_plan(roomy, {n: roomy.table.feasible[n] for n in names}):
        res = roomy._resolve(plan)
        rows.append((max(u for _, _, u in roomy._memory_segments(res)), roomy._objective(res, plan)))
    fastest = min(t for _, t in rows)

    def best(capacity):
        return min((t for used, t in rows if used <= capacity), default=math.inf)

    binding = [u * (1 + 1e-6) for u in sorted({u for u, _ in rows}) if fastest < best(u * (1 + 1e-6)) < math.inf]
    capacity = max(binding)
    tight = grpo(capacity)
    brute = best(capacity)
    result = packplace.place(tight, "cpsat", time_limit_s=20)
    assert proven_optimal(result), result.message
    assert brute - 1e-9 <= result.objective <= brute + result.info["rounding_s"]
    assert get_evaluator(tight).score(result.solution).feasible


def test_the_verl_emitter_keeps_an_engine_priced_awake_awake():
    from packplace.placement.emit.verl import emit_verl
    from packplace.placement.evaluator import get_table

    for sleeps in (None, False):
        inst = build_instance(_grpo("verl", trainer_backend="fsdp", **({} if sleeps is None else
                                                                       {"engine_sleeps": sleeps})))
        table = get_table(inst)
        whole = Allocation((0, 0, 0), (1, 1, 8))
        plan = Plan.build({n: next(c for c in table.feasible[n] if c.extent == (1, 1, 8) and c.strategy.dp == 8)
                           .at(whole) for n in inst.graph.names})
        out = emit_verl(PlanView.of(inst, plan))
        if sleeps is None:   # verl's default, free_cache_engine: True, left as it is
            assert "actor_rollout_ref.rollout.free_cache_engine" not in out.settings
        else:
            assert out.settings["actor_rollout_ref.rollout.free_cache_engine"] is False
            assert any(line.startswith("free_cache_engine=False: the engine stays awake") for line in out.notes)
