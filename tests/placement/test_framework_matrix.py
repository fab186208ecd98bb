"""Every shipped placement config planned for each framework that has an emitter runs there as planned.

The matrix: each config of ``configs/placement/**`` with ``policy.framework`` set to ``verl``, ``openrlhf``
and ``nemo-rl`` (and verl with each trainer backend), planned by the ``greedy`` solver, emitted for that
framework: no refusal line except the single line of a step the framework has no trainer (or no
reward-model path) for, every key in that framework's own key list, and a config whose training options
the framework cannot express at all refused at load with the field named.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packplace.errors import ConfigError, InfeasibleError
from packplace.placement import api
from packplace.placement.emit import emit
from packplace.placement.emit.common import PlanView
from packplace.placement.emit.verl import choose_backend
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.layout_rules import Context, config_refusals, plan_refusals, unsupported
from packplace.placement.problem.config import build_instance, load_yaml

# Every greedy search here on the work clock (deadlines a count of evaluator calls, the memory hints' budgets
# included): at 20 s of wall clock a loaded machine had cut greedy's family before its first plan on the larger
# configs, where the message then names none of what these tests look for
pytestmark = pytest.mark.usefixtures("work_clock")

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs" / "placement").rglob("*.yaml"))
KEY_LISTS = {name: json.loads((ROOT / "tests" / "data" / "frameworks" / f"{name}.json").read_text())
             for name in ("verl", "openrlhf", "nemo-rl")}
MATRIX = [(config, fw, backend) for config in CONFIGS for fw in ("verl", "openrlhf", "nemo-rl")
          for backend in (("auto", "fsdp", "megatron") if fw == "verl" else ("auto",))]


def _policy(raw: dict, framework: str) -> dict:
    """The config's policy run by ``framework``: a release it names, and a verl-only setting, are its own
    framework's, dropped for another."""
    policy = dict(raw.get("policy") or {})
    if policy.get("framework") != framework:
        policy.pop("framework_version", None)
        if framework != "verl":
            policy.pop("use_remove_padding", None)
    return dict(policy, framework=framework)


def planned_for(config: Path, framework: str, backend: str = "auto", **training):
    raw = load_yaml(config)
    raw["policy"] = dict(_policy(raw, framework), trainer_backend=backend)
    if training:
        raw["training"] = training
    return build_instance(raw, source=str(config))


def config_lines(config: Path, framework: str, backend: str) -> list[str]:
    raw = load_yaml(config)
    raw["policy"] = _policy(raw, framework)
    plain = build_instance(dict(raw, policy=_policy(raw, "none")))
    ctx = Context.of(plain)
    return config_refusals(Context(framework, ctx.algorithm, ctx.training, ctx.reward_model, backend))


@pytest.mark.parametrize(("config", "framework", "backend"), MATRIX,
                         ids=lambda x: x.stem if isinstance(x, Path) else x)
def test_a_plan_searched_for_a_framework_emits_no_refusal_and_only_known_keys(config, framework, backend):
    expected_errors = config_lines(config, framework, backend)
    if expected_errors:  # options the framework cannot express (e.g. OpenRLHF's one --ds.lora.rank): load fails
        with pytest.raises(ConfigError, match=r"\[(training|policy|models)\]|^training\.(actor\.|critic\.)?sharding: "):
            planned_for(config, framework, backend)
        return
    instance = planned_for(config, framework, backend)
    try:
        result = api.solve_placement(instance, "greedy", time_limit_s=20, seed=0)
    except InfeasibleError as exc:   # the memory error names the settings that fit, or says it ran out of time to try
        assert any(s in str(exc) for s in ("fits with", "no memory-saving setting",
                                           "memory-saving settings were not all tried")), str(exc)
        return
    if result.solution is None:   # no plan fits in memory: the message names the settings that would, or says none
        # does or that its fixed hint budget (fit_hints.HINTS_BUDGET_S) ran out first (the OpenRLHF Llama-2-7B config
        # under verl at 0.9: the fp32 shard its optimizer_offload keeps beside the pool, 3.37 GB, outweighs the
        # 3.33 GB that host-held reference and reward weights free, so every setting is tried)
        assert any(s in result.message for s in ("fits with", "no memory-saving setting",
                                                 "memory-saving settings were not all tried")), result.message
        return
    emitted = emit(instance, result.solution, framework)
    allowed = unsupported(Context.of(instance))
    assert emitted.refusals == ([allowed] if allowed else []), emitted.refusals
    keys = KEY_LISTS[framework]["configs"][emitted.config]
    assert [key for key in emitted.settings if key not in keys] == []
    # the evaluator and the emitter read the same rules: a plan the evaluator accepts breaks none
    assert get_evaluator(instance).score(result.solution).feasible
    assert plan_refusals(instance, result.solution) == []
    if framework == "verl" and backend != "auto" and instance.algorithm != "dpo":
        assert emitted.config == backend


def test_the_70b_ppo_that_does_not_fit_for_openrlhf_0_7_3_names_zero3_and_fits_with_it():
    # OpenRLHF 0.7.3 runs every DeepSpeed model at tp 1 (no --ds_tensor_parallel_size): the 70B trainer under ZeRO-2
    # does not fit on 141 GB H200s, ZeRO-3 does. The current release shards the trainers and, with them, the
    # reference and reward models (_ds_init_eval_model at --ds.tensor_parallel_size): it fits as configured.
    config = ROOT / "configs" / "placement" / "ppo_llama3.1-70b_2x4x8xh200.yaml"

    def at_0_7_3(**training):
        raw = load_yaml(config)
        raw["policy"] = dict(_policy(raw, "openrlhf"), trainer_backend="auto", framework_version="0.7.3")
        if training:
            raw["training"] = training
        return build_instance(raw, source=str(config))

    with pytest.raises(InfeasibleError, match=r"actor\.train needs .*fits with training: \{sharding: zero3\}"):
        api.solve_placement(at_0_7_3(), "greedy", time_limit_s=20, seed=0)
    for instance in (at_0_7_3(sharding="zero3"), planned_for(config, "openrlhf")):
        result = api.solve_placement(instance, "greedy", time_limit_s=20, seed=0)
        assert emit(instance, result.solution, "openrlhf").refusals == []


def test_verl_picks_fsdp_for_a_plan_without_model_parallelism_and_megatron_otherwise():
    config = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"
    fsdp = planned_for(config, "verl", "fsdp", sharding="zero3")   # verl's FSDP shards as ZeRO-3 does
    plan = api.solve_placement(fsdp, "greedy", time_limit_s=20, seed=0).solution
    for name in ("actor.train", "critic.train", "reference.infer", "critic.infer"):
        s = plan[name].strategy
        assert (s.tp, s.pp, s.ep) == (1, 1, 1), name   # the search kept to FSDP's layouts
    assert choose_backend(PlanView.of(planned_for(config, "verl"), plan, "verl"))[0] == "fsdp"
    assert emit(fsdp, plan, "verl").config == "fsdp"
    auto = planned_for(config, "verl")
    megatron = planned_for(config, "verl", "megatron")
    mplan = api.solve_placement(megatron, "greedy", time_limit_s=20, seed=0).solution
    parallel = any(mplan[n].strategy.tp > 1 or mplan[n].strategy.pp > 1 for n in ("actor.train", "critic.train"))
    assert choose_backend(PlanView.of(auto, mplan, "verl"))[0] == ("megatron" if parallel else "fsdp")
    assert emit(megatron, mplan, "verl").config == "megatron"
    with pytest.raises(ConfigError, match="^training.sharding: 'zero3' is not a sharding verl's Megatron workers"):
        planned_for(config, "verl", "megatron", sharding="zero3")


def test_nemo_rl_runs_the_reference_in_the_policy_layout_and_the_evaluator_refuses_others():
    config = ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"
    instance = planned_for(config, "nemo-rl")
    plan = api.solve_placement(instance, "greedy", time_limit_s=20, seed=0).solution
    assert plan["reference.infer"].strategy == plan["actor.train"].strategy
    assert plan["reference.infer"].allocation == plan["actor.train"].allocation
    table = get_evaluator(instance).table
    other = next(c for c in table.feasible["reference.infer"] if c.strategy != plan["actor.train"].strategy)
    broken = plan.replace("reference.infer", other.at(plan["actor.train"].allocation)) \
        if other.extent == plan["actor.train"].allocation.extent else None
    if broken is not None:
        verdict = get_evaluator(instance).score(broken)
        assert not verdict.feasible and any("policy workers" in v for v in verdict.violations)


def test_place_emit_on_a_config_without_a_framework_plans_for_it(capsys):
    from packplace.cli import main
    config = str(ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml")
    for framework in ("verl", "openrlhf"):
        assert main(["place", "--config", config, "--solver", "greedy", "--time-limit", "20",
                     "--emit", framework]) == 0
        out = capsys.readouterr().out
        assert f"note: planned with policy.framework: {framework}" in out
        refusals = [line for line in out.splitlines() if line.startswith("# cannot run as planned")]
        assert refusals == []
    # NeMo RL's PPO keeps no GPUs for a reward model (layout_rules.NEMO_RL_PPO_REWARD_MODEL): refused at load
    assert main(["place", "--config", config, "--solver", "greedy", "--time-limit", "20", "--emit", "nemo-rl"]) == 2
    assert "(policy.framework: nemo-rl)" in capsys.readouterr().err
    assert main(["place", "--config", config, "--solver", "greedy", "--time-limit", "20", "--emit", "verl",
                 "--verl-backend", "megatron", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["report"]["emit"]["config"] == "megatron" and doc["report"]["emit"]["refusals"] == []


def test_the_evaluator_refuses_a_plan_that_breaks_a_rule_and_conform_repairs_it():
    from packplace.placement.evaluator import get_table
    from packplace.placement.model.layout_rules import conform
    from packplace.placement.problem.plan import Allocation, Plan
    config = ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"   # 1 rack x 2 nodes x 8 GPUs
    instance = planned_for(config, "verl")
    table, ev = get_table(instance), get_evaluator(instance)
    node0, node1 = Allocation((0, 0, 0), (1, 1, 8)), Allocation((0, 1, 0), (1, 1, 8))
    plan = Plan.build({name: table.fastest(name, (1, 1, 8)).at(node1 if name == "reference.infer" else node0)
                       for name in instance.graph.names})
    verdict = ev.score(plan)
    assert not verdict.feasible and ev.step_time(plan) == float("inf")
    assert any("verl runs the reference in the actor's worker group" in v for v in verdict.violations)
    fixed = conform(instance, table, plan)
    assert fixed["reference.infer"].allocation == node0 and plan_refusals(instance, fixed) == []
    # the same plan under framework none is scored as before (no rules)
    plain = build_instance(dict(load_yaml(config)))
    assert not any("layout" in v for v in get_evaluator(plain).score(plan).violations)


def test_verls_megatron_reference_keeps_the_actors_layout():
    # verl builds the reference and the actor in one worker with one Megatron-Core parallel state: on the
    # Megatron backend a reference with another tp than the actor's is refused, and conform gives it the actor's
    from packplace.placement.evaluator import get_table
    from packplace.placement.model.layout_rules import conform
    from packplace.placement.problem.plan import Allocation, Plan, Strategy
    config = ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"
    block = Allocation((0, 0, 0), (1, 2, 8))
    for backend, refused in (("megatron", True), ("fsdp", False)):
        instance = planned_for(config, "verl", backend)
        table = get_table(instance)
        tp = 2 if backend == "megatron" else 1      # verl's FSDP trainer runs tp 1 only
        plan = Plan.build({name: table.fastest(name, (1, 2, 8)).at(block) for name in instance.graph.names})
        plan = Plan.build({**plan.by_vertex(), "actor.train": next(
            c for c in table.feasible["actor.train"] if c.extent == (1, 2, 8) and c.strategy.tp == tp).at(block),
            "reference.infer": next(c for c in table.feasible["reference.infer"] if c.extent == (1, 2, 8)
                                    and c.strategy == Strategy(16, 1, 1)).at(block)})
        broken = plan_refusals(instance, plan)
        assert any("verl's Megatron reference and actor share one Megatron-Core parallel state" in line
                   for line in broken) is refused
        fixed = conform(instance, table, plan)
        assert fixed["reference.infer"].strategy == fixed["actor.train"].strategy or not refused
        assert plan_refusals(instance, fixed) == []
