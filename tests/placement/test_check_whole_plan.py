"""``check_instance`` and the solvers agree: each task fitting alone is not a whole plan.

The pre-launch check claims a whole plan only when a solver built one that the evaluator scores feasible;
it refuses (``InfeasibleError``) only with a proof that no plan fits, which no solver may contradict.
"""

from __future__ import annotations

import os

import pytest
from conftest import UNHURRIED_S
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packplace
from packplace.errors import InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.whole_plan import shared_gpu_shortfall
from packplace.run import solve_with

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HW = dict(racks=1, flops_per_gpu=1e15, memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12,
          alpha_coll_n=5e-6, beta_coll_n=2e-11, alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6,
          beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6, beta_p2p_n=2e-11, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-11,
          memory_workspace=0.0)
HEURISTICS = ("greedy", "concurrent", "anneal")


def unchecked(instance, solver: str, time_limit_s: float = UNHURRIED_S):
    """The evaluator's step time of ``solver``'s plan, run without the pre-launch check (None: no plan, or the
    solver's own table check refused the instance with a proof); by
    default unhurried, as the checks it is compared with (their searches end on their own, never at a limit)."""
    ev = get_evaluator(instance)
    try:
        result = solve_with(problem="placement", instance=instance, solver=solver, evaluator=ev,
                            time_limit_s=time_limit_s, seed=0, params={"e_max": 400} if solver == "anneal" else {},
                            analytic_bound=0.0)
    except InfeasibleError:   # the solver's own table check proves that no plan exists
        return None
    if result.solution is None:
        return None
    score = ev.score(result.solution)
    return score.step_time if score.feasible else None


def qwen7b_packed(train_mb_tokens: int, logprob_mb_tokens: int):
    """The shipped Qwen2.5-7B GRPO config on 16 H100 under NeMo RL 0.5.0 with sequence packs."""
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml"))
    cfg["models"]["actor"]["model_type"] = "qwen2"
    # NeMo RL's own gpu_memory_utilization (examples/configs/grpo_math_1B.yaml, v0.4.0-v0.6.0): the engine holds
    # that fraction of every GPU it runs on
    cfg["policy"].update(framework="nemo-rl", framework_version="0.5.0", train_mb_tokens=train_mb_tokens,
                         logprob_mb_tokens=logprob_mb_tokens, gpu_memory_utilization=0.6)
    # megatron_cfg.sequence_parallel: true (NeMo RL's default is false): the byte figures below are the split ones
    cfg.setdefault("training", {})["sequence_parallel"] = True
    return build_instance(cfg)


def test_packed_qwen7b_that_fits_each_task_alone_is_refused_by_check_and_greedy_alike(monkeypatch, unhurried):
    from packplace.placement import api
    monkeypatch.setattr(api, "with_hints", lambda message, instance, **_: message)  # the memory-setting hints aside
    inst = qwen7b_packed(82_422, 183_900)
    table = get_table(inst)
    assert all(table.feasible[name] for name in inst.graph.names)      # each task fits alone
    # the trainer fits only on all 16 GPUs (10.02 GB resident, of it Megatron's sequence-parallel gather buffer at
    # the 183,900-token log-prob pack, 2·3,584·183,900 B = 1.32 GB, + 71.3 GB transient = 81.3 GB of the H100's
    # CUDA total, 84.94 GB), beside the reward model's smallest share too; but the reward model runs on GPUs of
    # its own (NeMo RL's environment), and a 16-GPU trainer leaves it none: the group the proof names. The
    # sleeping engine beside the trainer is no proof: at TP 1 (15.2 GB of weights, on the host while it sleeps)
    # it keeps its CUDA graphs 2.28 GiB + its process's context 1.02 GB = 3.47 GB, and 81.3 + 3.47 = 84.79 GB fit
    # (with its weights counted through training too, 99.98 GB did not)
    train = min(table.feasible["actor.train"], key=lambda c: c.memory_bytes)
    reward = min(c.resident_bytes for c in table.feasible["reward.infer"])
    assert train.gpus == 16 and train.memory_bytes / 1e9 == pytest.approx(81.318, abs=0.001)
    assert train.resident_bytes - 2 * 3584 * 183_900 == pytest.approx(8.7057e9, rel=1e-3)
    assert train.memory_bytes + reward < inst.hardware.memory_per_gpu
    kept = min(c.kept_bytes for c in table.feasible["actor.generate"])
    assert kept == pytest.approx(2.28 * 2**30 + 1.02e9, abs=0.01e9)
    assert train.memory_bytes + kept < inst.hardware.memory_per_gpu
    proof = (r"no plan fits: reward\.infer \(at least 1 GPU\) and actor\.train \(at least 16 GPUs\) share a GPU in "
             r"any plan on 16 GPUs, and the framework runs reward\.infer on GPUs of its own")
    with pytest.raises(InfeasibleError, match=proof):
        check_instance(inst, time_limit_s=unhurried)
    with pytest.raises(InfeasibleError, match=proof):
        packplace.place(inst, "greedy")
    assert unchecked(inst, "greedy") is None and unchecked(inst, "concurrent") is None
    # the halved packs the refusal offers: check verifies a whole plan, and greedy plans it
    halved = qwen7b_packed(41_211, 91_950)
    check = check_instance(halved, time_limit_s=unhurried)
    assert check.whole_plan and check.solver == "greedy" and check.greedy == "plan"
    assert get_evaluator(halved).score(check.plan).feasible
    result = packplace.place(halved, "greedy")
    assert result.ok and result.objective == pytest.approx(check.step_time, rel=1e-12)


def test_check_without_the_search_says_what_it_checked():
    halved = qwen7b_packed(41_211, 91_950)
    check = check_instance(halved, whole_plan=False)
    assert check.verdict == "tasks only" and not check.whole_plan and check.plan is None
    assert check.message == ("each task fits alone on the 16-GPU cluster and no group of tasks that must share a "
                             "GPU is proven over memory; no whole plan searched for")


@st.composite
def small_instances(draw):
    """A tiny PPO / GRPO / DPO step on 2-16 GPUs, with or without a framework's rules, with memory between the
    neediest task's least and twice it."""
    shape = dict(layers=draw(st.integers(1, 2)), hidden_dim=draw(st.sampled_from([256, 512])),
                 ffn_dim=draw(st.sampled_from([512, 1024])), vocab_size=draw(st.sampled_from([1000, 32000, 128000])),
                 head_dim=128)
    algorithm = draw(st.sampled_from(["ppo", "grpo", "dpo"]))
    models = {"actor": shape} if algorithm == "dpo" else {"actor": shape, "reward": shape}
    if algorithm == "ppo":
        models["critic"] = shape
    hw = dict(HW, nodes_per_rack=draw(st.sampled_from([1, 2])), gpus_per_node=draw(st.sampled_from([2, 4, 8])))
    policy = {"algorithm": algorithm}
    framework = draw(st.sampled_from([None, "deepspeed-chat", "verl", "openrlhf", "nemo-rl"]))
    if framework is not None:   # layout rules; DeepSpeed-Chat's hybrid engine shares its trainer's weights
        policy["framework"] = framework
    if framework == "nemo-rl" and algorithm == "ppo":   # a reward model is refused at load: NeMo RL's PPO scores
        models["reward"] = "rule"                         # with a rule
    cfg = {"hardware": dict(hw, memory_per_gpu=1e12), "models": models, "policy": policy,
           "workload": dict(batch_size=draw(st.sampled_from([2, 4, 8])), samples_per_prompt=2,
                            context_length=draw(st.sampled_from([256, 2048, 8192])), generation_length=64)}
    roomy = get_table(build_instance(cfg))
    neediest = max(min(c.memory_bytes for c in cands) for cands in roomy.feasible.values())
    cfg["hardware"]["memory_per_gpu"] = neediest * draw(st.floats(1.0, 2.0))
    return build_instance(cfg)


@settings(max_examples=20, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(small_instances())
def test_check_claims_a_whole_plan_only_when_a_solver_builds_one_and_refuses_only_with_a_proof(inst):
    # unhurried: a table or search cut by a loaded machine's clock would make the check and the solvers disagree
    try:
        check = check_instance(inst, time_limit_s=UNHURRIED_S)
    except InfeasibleError as refused:       # a proof: no solver may find a plan
        found = {s: unchecked(inst, s) for s in HEURISTICS}
        assert all(t is None for t in found.values()), (str(refused), found)
        return
    found = {s: unchecked(inst, s) for s in HEURISTICS}
    if check.whole_plan:
        assert check.solver in ("greedy", "concurrent") and get_evaluator(inst).score(check.plan).feasible
        assert found[check.solver] == pytest.approx(check.step_time, rel=1e-12)
        assert (found["greedy"] is not None) == (check.greedy == "plan")
    else:   # nothing built: no claim of a plan, and the constructions it ran agree
        assert check.verdict == "no plan found" and check.plan is None and "not a proof" in check.message
        assert found["greedy"] is None and found["concurrent"] is None
    if all(t is None for t in found.values()):
        assert not check.whole_plan


def test_the_proof_counts_a_hybrid_engines_weights_as_its_trainers():
    # a rollout engine whose model's training state stays resident may hold no weights of its own on its
    # trainer's GPUs: the proof gives it no resident bytes (else it could refuse a plan that fits)
    cfg = load_yaml(os.path.join(ROOT, "benchmarks", "validation", "deepspeed_chat_ppo_opt-1.3b_8xa100.yaml"))
    cfg.pop("validation", None)
    inst = build_instance(cfg)
    from packplace.placement.whole_plan import _fronts
    fronts = _fronts(get_table(inst))
    assert all(res == 0.0 for _, res, _, _ in fronts["actor.generate"])
    assert any(res > 0 for _, res, _, _ in fronts["actor.train"])
    assert shared_gpu_shortfall(get_table(inst)) is None and packplace.place(inst, "greedy").ok


def test_place_check_prints_what_it_checked_and_exits_by_verdict(tmp_path, capsys, unhurried):
    import yaml

    from packplace.cli import main
    wide = dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=256000, head_dim=128)
    config = {"hardware": dict(HW, nodes_per_rack=1, gpus_per_node=8, memory_per_gpu=1e12),
              "models": {"actor": wide, "critic": wide, "reward": wide},
              "workload": dict(batch_size=8, samples_per_prompt=1, context_length=8192, generation_length=64),
              # the engine holds its whole fraction: a small one, no CUDA graphs, so that the trainers bind
              # asleep beside the trainers (engine_sleeps), whose pair is what the proof names
              "policy": {"algorithm": "ppo", "gpu_memory_utilization": 0.4, "enforce_eager": True,
                         "engine_sleeps": True},
              "training": {"sequence_parallel": True}}   # the TP trainers' activations split, as sized below
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    unhurried_cli = ["--time-limit", str(unhurried)]
    assert main(["place", "--config", str(path), "--check", *unhurried_cli, "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("check: whole plan: each task fits alone on the 8-GPU cluster and no "
                                              "group of tasks that must share a GPU is proven over memory; whole "
                                              "plan verified: the greedy solver's plan fits, step ")
    config["hardware"]["memory_per_gpu"] = 4.6e9    # each task fits alone; actor.train and critic.train do not
    path.write_text(yaml.safe_dump(config))
    assert main(["place", "--config", str(path), "--check", *unhurried_cli, "--quiet"]) == 1
    assert "infeasible: [hardware] memory_per_gpu: no plan fits in memory: actor.train" in capsys.readouterr().err
    assert main(["place", "--config", str(path), "--check", "--out", str(tmp_path / "o.json")]) == 2
    assert "--out: --check plans nothing to write or compare" in capsys.readouterr().err


def test_a_task_the_framework_runs_alone_cannot_share_the_gpus_a_trainer_needs_whole(unhurried):
    wide = dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=256000, head_dim=128)
    # the engine holds its whole fraction: a small one, no CUDA graphs, so that the trainer binds; large enough
    # for a TP-1 engine (at 0.1 only TP >= 2 fits its pool, and its NCCL buffers, kept through training, overflow
    # the trainer's GPUs: a memory proof, not the layout rule this test is about)
    cfg = {"hardware": dict(HW, nodes_per_rack=1, gpus_per_node=4, memory_per_gpu=1e12),
           "models": {"actor": wide, "reward": wide},
           "policy": {"algorithm": "grpo", "framework": "nemo-rl", "gpu_memory_utilization": 0.15,
                      "enforce_eager": True},
           "workload": dict(batch_size=4, samples_per_prompt=2, context_length=8192, generation_length=64)}
    table = get_table(build_instance(cfg))
    on = {n: min(c.memory_bytes for c in table.feasible["actor.train"] if c.gpus == n) for n in (2, 4)}
    cfg["hardware"]["memory_per_gpu"] = (on[2] + on[4]) / 2      # the trainer fits on all 4 GPUs only
    inst = build_instance(cfg)
    # NeMo RL runs the reward-model environment on GPUs of its own: none are left
    with pytest.raises(InfeasibleError, match=r"\[policy\] framework: no plan fits: reward\.infer \(at least 1 GPU\) "
                                              r"and actor\.train \(at least 4 GPUs\) share a GPU in any plan on 4 "
                                              r"GPUs, and the framework runs reward\.infer on GPUs of its own"):
        check_instance(inst, whole_plan=False)
    assert all(unchecked(inst, s) is None for s in HEURISTICS)
    # greedy alone says which rule its colocated plan breaks, not that the models overflow memory
    ev = get_evaluator(inst)
    from packplace.solvers.placement._common import colocated_plan
    with pytest.raises(Exception, match=r"fits in memory \([\d.]+ of [\d.]+ GB per GPU\) but breaks 1 rule\(s\): "
                                        r"nemo-rl layout: reward\.infer .* shares GPUs with other tasks"):
        colocated_plan(ev)
    cfg["policy"]["framework"] = "verl"                          # verl colocates the reward model
    assert check_instance(build_instance(cfg), time_limit_s=unhurried).whole_plan


def test_no_proof_where_a_legal_block_size_is_not_proposed(monkeypatch):
    # 11 nodes of one GPU, every count proposed only up to 8 nodes: the table proposes blocks of 1 to 8 and 11
    # nodes (block_counts), while a plan may hold the actor's tasks on 10 nodes and the reward on the 11th; a
    # proof from the proposed sizes alone ("share a GPU in any plan") would be false, so there is none
    from packplace.placement import candidates
    from packplace.placement.candidates import CandidateTable
    from packplace.placement.evaluator import PlacementEvaluator
    from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
    from packplace.placement.whole_plan import every_block_size_proposed
    monkeypatch.setattr(candidates, "EVERY_COUNT_UP_TO", 8)
    assert 10 not in candidates.block_counts(11)
    actor = dict(layers=40, hidden_dim=2048, ffn_dim=8192, vocab_size=32000, head_dim=128)
    reward = dict(layers=1, hidden_dim=12288, ffn_dim=49152, vocab_size=32000, head_dim=128)
    # the GPU holds the plan below with 0.01 % to spare (7,968,025,804.8 bytes on the actor's GPUs, with the first
    # layer's backward working set; 7.942867756154881e9 had been that GPU before it was priced)
    cfg = {"hardware": dict(HW, nodes_per_rack=11, gpus_per_node=1, memory_per_gpu=7.968822687068707e9),
           "models": {"actor": actor, "reward": reward},
           # the engine holds its whole fraction: 0.82 of the GPU holds its 6 GB need, no CUDA graphs beside it
           # (at 0.78, the value this test had, vLLM would refuse to start it: its pool leaves the KV cache nothing
           # after the weights and the profile run's peak; from 0.82 it holds one request of 320 tokens)
           # (asleep while the actor trains, engine_sleeps: the plan below is sized so)
           "policy": {"algorithm": "grpo", "gpu_memory_utilization": 0.82, "enforce_eager": True,
                      "engine_sleeps": True},
           "workload": dict(batch_size=10, samples_per_prompt=2, context_length=256, generation_length=64)}
    inst = build_instance(cfg)
    assert not every_block_size_proposed(inst.cluster)
    eight = dict(cfg, hardware=dict(cfg["hardware"], nodes_per_rack=8))
    assert every_block_size_proposed(build_instance(eight).cluster)
    spec = {"actor.generate": (10, 1, 1, 1, 0, 10), "reference.infer": (1, 10, 1, 1, 0, 10),  # dp pp tp mb
            "actor.train": (1, 10, 1, 1, 0, 10), "reward.infer": (1, 1, 1, 1, 10, 1)}           # first node, nodes
    plan = Plan(tuple(sorted((n, VertexPlan(Strategy(*spec[n][:3]), spec[n][3],
                                            Allocation((0, spec[n][4], 0), (1, spec[n][5], 1))))
                             for n in inst.graph.names)))
    assert PlacementEvaluator(inst, CandidateTable(inst, plan)).score(plan).feasible  # a plan exists
    assert shared_gpu_shortfall(get_table(inst)) is None
    # not a refusal, and no plan either when greedy and concurrent run their course
    assert check_instance(inst, time_limit_s=UNHURRIED_S).verdict == "no plan found"
    # every count proposed (the default up to 64 nodes): the search finds a plan (10 | 1 nodes)
    monkeypatch.undo()
    proposed = build_instance(cfg)
    assert every_block_size_proposed(proposed.cluster)
    assert check_instance(proposed, time_limit_s=UNHURRIED_S).whole_plan


def test_nemo_rl_reference_runs_with_the_policys_context_parallelism():
    # NeMo RL computes the reference log-probs in the policy workers (reference weights swapped into the
    # policy's model), so under the policy's context-parallel split: its memory holds 1/C of each sequence
    from packplace.placement.candidates import context_parallel_split, forward_context_parallel
    inst = qwen7b_packed(41_211, 91_950)
    assert not forward_context_parallel(inst, "reference.infer")
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml"))
    cfg["policy"].update(framework="nemo-rl", framework_version="0.5.0")
    cfg.setdefault("training", {}).setdefault("actor", {})["context_parallel"] = 2
    cp = build_instance(cfg)
    assert forward_context_parallel(cp, "reference.infer")
    assert context_parallel_split(cp, "reference.infer", 4).degree == 2
    assert context_parallel_split(cp, "reward.infer", 4).degree == 1


def test_nemo_rl_dtensor_takes_no_context_parallelism_with_packs():
    # NeMo RL's DTensor policy worker raises "Context parallel is not supported for sequence packing": an
    # explicit DTensor backend is refused at load, and under auto the packed CP trainer runs on Megatron-Core
    # (pipeline or expert parallelism) only
    from packplace.errors import ConfigError
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml"))
    cfg["policy"].update(framework="nemo-rl", framework_version="0.5.0", train_mb_tokens=41_211,
                         logprob_mb_tokens=91_950, trainer_backend="fsdp")
    cfg.setdefault("training", {}).setdefault("actor", {})["context_parallel"] = 2
    with pytest.raises(ConfigError, match=r"\[policy\] trainer_backend: 'fsdp' \(NeMo RL's DTensor workers\) with "
                                          r"sequence packing"):
        build_instance(cfg)
    cfg["policy"]["trainer_backend"] = "auto"
    table = get_table(build_instance(cfg))
    trainers = table.all["actor.train"]
    assert trainers and all(c.strategy.pp > 1 or c.strategy.ep > 1 for c in trainers)


def test_place_check_with_a_solver_checks_that_solvers_plan(tmp_path, capsys, work_clock):
    # work_clock: anneal runs to its 5 s limit, and the table's build counts against it; on the work clock both
    # end at the same point of the work on any machine
    import json

    import yaml

    from packplace.cli import main
    wide = dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=256000, head_dim=128)
    config = {"hardware": dict(HW, nodes_per_rack=1, gpus_per_node=8, memory_per_gpu=1e12),
              "models": {"actor": wide, "critic": wide, "reward": wide},
              "workload": dict(batch_size=8, samples_per_prompt=1, context_length=8192, generation_length=64),
              # the engine holds its whole fraction: a small one, no CUDA graphs, so that the trainers bind
              "policy": {"algorithm": "ppo", "gpu_memory_utilization": 0.4, "enforce_eager": True}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    # --solver anneal: the plan checked is anneal's (seed 0), the step its evaluator score, not greedy's
    assert main(["place", "--config", str(path), "--check", "--solver", "anneal", "--time-limit", "5", "--json",
                 "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "whole plan" and doc["solver"] == "anneal"
    assert "whole plan verified: the anneal solver's plan fits" in doc["message"]
    assert doc["step_time_s"] > 0
    inst = build_instance(config)
    check = check_instance(inst, time_limit_s=5, solver="anneal")
    assert check.solver == "anneal" and check.step_time == get_evaluator(inst).score(check.plan).step_time
    # an unknown solver is refused with --check too (it had been ignored)
    assert main(["place", "--config", str(path), "--check", "--solver", "bogus"]) == 2
    assert "solver: unknown placement solver 'bogus'" in capsys.readouterr().err
    # without --solver the check stays greedy, then concurrent
    assert check_instance(inst, time_limit_s=5).solver == "greedy"


def test_place_check_passes_its_seed_to_the_solvers(tmp_path, monkeypatch, work_clock):
    # work_clock: anneal runs to the check's default limit, and the table's build counts against it
    import yaml

    from packplace.cli import main
    from packplace.placement import api
    seeds = []

    def recording(**kwargs):
        seeds.append((kwargs["solver"], kwargs["seed"]))
        return solve_with(**kwargs)

    monkeypatch.setattr(api, "solve_with", recording)
    wide = dict(layers=2, hidden_dim=1024, ffn_dim=2048, vocab_size=256000, head_dim=128)
    config = {"hardware": dict(HW, nodes_per_rack=1, gpus_per_node=8, memory_per_gpu=1e12),
              "models": {"actor": wide, "reward": "rule"},
              "workload": dict(batch_size=8, samples_per_prompt=1, context_length=1024, generation_length=64),
              "policy": {"algorithm": "grpo"}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["place", "--config", str(path), "--check", "--solver", "anneal", "--seed", "7", "--quiet"]) == 0
    assert main(["place", "--config", str(path), "--check", "--seed", "5", "--quiet"]) == 0
    assert seeds == [("anneal", 7), ("greedy", 5)]   # it had run greedy at seed 0 whatever was given


def test_place_check_counts_the_table_build_against_its_time_limit(work_clock):
    # `place --check --time-limit S` is the whole check's limit: a table the limit cuts is no verdict of a plan
    # (it had built the whole table first, 5 s of a 16,384-GPU cluster's under --time-limit 1)
    inst = build_instance(load_yaml(os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")))
    start = work_clock.now
    check = check_instance(inst, time_limit_s=1e-4)
    assert work_clock.now - start < 1e-3   # stopped at its limit (a few readings past it)
    assert check.verdict == "no plan found" and check.plan is None
    assert check.message.startswith("candidate table not built within time_limit_s=0.0001: ")
    assert "not a proof" in check.message and "table" not in inst._cache
    # a limit the table fits in: the search gets the time left, and the check still finds greedy's plan
    check = check_instance(inst, time_limit_s=10.0)
    assert check.whole_plan and check.solver == "greedy" and check.step_time > 0


def test_place_check_cuts_the_search_for_the_gpus_a_task_needs_at_its_deadline():
    # `place --check --time-limit 0.3` on a cluster no block of which fits the trainer had searched grown clusters
    # for the GPUs each task needs with no deadline (2.4 s); a cut search names no size and claims no "never fits"
    from packplace.run import clock

    config = load_yaml(os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml"))
    config["hardware"].update(nodes_per_rack=1, memory_per_gpu=20e9)
    config["policy"]["gpu_memory_utilization"] = 0.5
    inst = build_instance(config)
    short = get_table(inst).shortfalls(deadline=clock() - 1.0)
    assert short and all(entry.cut and entry.needed is None for entry in short)
    assert {entry.vertex for entry in short} >= {"actor.train"}
    with pytest.raises(InfeasibleError) as exc:
        check_instance(inst, whole_plan=False, deadline=clock() - 1.0)
    message = str(exc.value)
    assert message.startswith("[hardware] cluster has 8 GPUs; no block of it fits ")
    assert "actor.train" in message and "cut by the time limit" in message
    assert "needs 224" not in message and "grown up to 64x" not in message
