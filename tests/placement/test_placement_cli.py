"""``packplace place`` on every shipped config, in-process through the subcommand's ``run``."""

from __future__ import annotations

import argparse
import glob
import json
import os

import pytest

from packplace.errors import ConfigError
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.cost import PYTORCH_TRAIN_FRACTION
from packplace.placement.problem.config import load_config
from packplace.placement.problem.plan import plan_from_json
from packplace.placement.screen import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = sorted(glob.glob(os.path.join(ROOT, "configs", "placement", "*.yaml")))


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="packplace")
    cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["place", *argv])


def test_shipped_configs_exist():
    names = {os.path.basename(p) for p in SHIPPED}
    assert len(names) >= 4 and any("grpo" in n for n in names) and any("dpo" in n for n in names)


@pytest.mark.parametrize("path", SHIPPED, ids=os.path.basename)
def test_place_concurrent_on_every_shipped_config(path, tmp_path, capsys):
    out = tmp_path / "plan.json"
    args = parse("--config", path, "--solver", "concurrent", "--out", str(out))
    assert args.func is cli.run
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "vertex" in text and "step time:" in text and "status:" in text and "gap:" in text
    data = json.loads(out.read_text())
    inst = load_config(path)
    assert set(data["report"]["vertices"]) == set(inst.graph.names)
    for entry in data["report"]["vertices"].values():
        assert entry["gpus"] and all(len(g) == 3 for g in entry["gpus"])
        assert len(entry["gpus"]) == entry["strategy"]["dp"] * entry["strategy"]["pp"] * entry["strategy"]["tp"]
    plan = plan_from_json(data["solution"])
    assert get_evaluator(inst).score(plan).step_time == pytest.approx(data["objective"])
    for name in inst.graph.names:  # every vertex appears in the table
        assert name in text
    # the JSON carries the text table's "fullest GPUs" line, the evaluator's, and its peak is the plan's
    fullest = data["report"]["fullest_gpus"]
    assert f"fullest GPUs: {fullest}" in text and fullest == get_evaluator(inst).fullest_gpus(plan)
    assert f"{data['info']['peak_memory_bytes'] / 1e9:.3g} GB needed while" in fullest


def test_gantt_picture(tmp_path):
    pytest.importorskip("matplotlib")
    path = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")
    png = tmp_path / "plan.png"
    args = parse("--config", path, "--solver", "greedy", "--gantt", str(png))
    assert args.func(args) == 0
    assert png.stat().st_size > 1000


def test_bad_config_is_a_config_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hardware: {racks: 1}\nmodels: {}\nworkload: {}\n")
    args = parse("--config", str(bad))
    with pytest.raises(ConfigError, match=r"^\[hardware\] Missing required field: 'nodes_per_rack'$"):
        args.func(args)


def test_gpu_ranges_format():
    assert cli.gpu_ranges([(0, n, g) for n in range(2) for g in range(8)]) == "r0/n0-1/g0-7"
    assert cli.gpu_ranges([(1, 2, 4), (1, 2, 5)]) == "r1/n2/g4-5"


DPO = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")
GRPO = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")


def test_unknown_gantt_format_is_a_one_line_config_error(tmp_path):
    pytest.importorskip("matplotlib")
    args = parse("--config", DPO, "--solver", "greedy", "--gantt", str(tmp_path / "x.xyz"))
    with pytest.raises(ConfigError, match=r"^--gantt: unknown image format 'xyz' of .*x\.xyz'; supported: .*png") \
            as info:
        args.func(args)
    assert "\n" not in str(info.value) and not (tmp_path / "x.xyz").exists()


def test_gantt_rows_use_the_table_gpu_labels():
    import packplace
    from packplace.placement.screen.gantt import gantt_rows
    inst = load_config(DPO)
    result = packplace.place(inst, "greedy")
    rows = gantt_rows(inst, result.solution, get_evaluator(inst).score(result.solution))
    assert {r["block"] for r in rows} == {"r0/n0/g0-7"}  # greedy colocates both vertices on the node
    assert [r["vertex"] for r in rows] == sorted(inst.graph.names)


def test_table_memory_columns_are_own_footprint_and_gpu_peak(capsys):
    import packplace
    inst = load_config(DPO)
    result = packplace.place(inst, "greedy")
    text = cli.format_table(inst, result)
    assert "own GB" in text and "GPU peak GB" in text and "own GB: the vertex's peak per GPU" in text
    # the fullest GPUs, and the task whose phase peaks there
    fullest = next(x for x in text.splitlines() if x.startswith("fullest GPUs: GPUs "))
    assert " GB needed while " in fullest and " runs, " in fullest
    table = get_evaluator(inst).table
    peak = max(get_evaluator(inst).score(result.solution).gpu_memory_peak)
    for name, vp in result.solution.vertices:
        cand = table.lookup(name, vp.strategy, vp.micro_batch, vp.allocation.extent)
        line = next(x for x in text.splitlines() if x.startswith(name))
        own, block = (float(x) for x in line.split()[-2:])
        assert own == pytest.approx((cand.resident_bytes + cand.transient_bytes) / 1e9, abs=0.05)
        assert block == pytest.approx(peak / 1e9, abs=0.05)
    ref_own = float(next(x for x in text.splitlines() if x.startswith("reference.infer")).split()[-2])
    assert ref_own < peak / 1e9 - 1  # the reference's own footprint excludes the actor's training state


def test_out_file_is_the_json_document(tmp_path, capsys):
    # --out writes the document --json prints, emit and all (OpenRLHF: it has a DPO trainer, verl is refused)
    from packplace.cli import main  # the top-level entry point, as a user runs it

    out = tmp_path / "plan.json"
    assert main(["place", "--config", DPO, "--solver", "greedy", "--emit", "openrlhf", "--json", "--out",
                 str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed and "emit" in printed["report"]
    assert printed["params"]["policy"] == {"framework": "openrlhf"}


@pytest.mark.parametrize("framework, backend, resolved", [
    ("verl", "auto", None),           # resolved by the plan's strategies: what --emit verl runs
    ("verl", "fsdp", "fsdp"),
    ("nemo-rl", "megatron", "megatron"),
    ("openrlhf", "auto", "deepspeed"),
    ("none", "auto", "none"),         # no trainer framework: the bare PyTorch loop's kernels
])
def test_the_json_records_each_trained_vertex_s_trainer_backend(framework, backend, resolved, tmp_path, capsys):
    # place --json had recorded no trainer backend: trainer_backend auto resolves per plan, and only --emit said it
    from packplace.cli import main
    from packplace.placement.emit import PlanView
    from packplace.placement.emit.verl import choose_backend
    from packplace.placement.problem.config import load_yaml

    raw = load_yaml(GRPO)
    raw.setdefault("policy", {}).update(framework=framework, trainer_backend=backend)
    if framework == "verl":   # at verl's 0.5 the FSDP colocated plan is 0.4 GB over: the engine's pool and the
        raw["policy"]["gpu_memory_utilization"] = 0.48    # 8.32 GB it holds beside it (NCCL, graphs, context)
        if backend == "fsdp":   # verl's FSDP workers shard all of their fp32 state (zero3, what they run); zero1's
            raw["training"] = {"sharding": "zero3"}   # whole fp32 weights and gradients need 93.7 GB of 84.9 here
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(raw))
    assert main(["place", "--config", str(path), "--solver", "greedy", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    inst = load_config(str(path))
    trained = [n for n in inst.graph.names if inst.graph.vertex(n).kind == "train"]
    assert trained and all("trainer_backend" in doc["report"]["vertices"][n] for n in trained)
    assert all("trainer_backend" not in v for n, v in doc["report"]["vertices"].items() if n not in trained)
    plan = plan_from_json(doc["solution"])
    if resolved is None:   # auto: the backend --emit verl chooses for the same plan
        resolved = choose_backend(PlanView.of(inst, plan, "verl"))[0]
    cost = get_evaluator(inst).cost
    for name in trained:
        entry, s = doc["report"]["vertices"][name], plan[name].strategy
        assert entry["trainer_backend"] == resolved
        assert entry["pass_kernels"] == cost.pass_kernels(s.pp, s.tp, s.ep)
    import packplace
    text = cli.format_table(inst, packplace.place(inst, "greedy"))
    # framework none also says which PyTorch trainer priced it (the bare loop or a trainer on its layout)
    how = ({"bare_pytorch_loop": ": a bare PyTorch loop", "pytorch_trainer": ": a PyTorch trainer on a ZeRO or "
            "parallel layout"}[doc["report"]["vertices"]["actor.train"]["trainer"]] if framework == "none" else "")
    assert f"trainer actor.train: {resolved} ({framework}, policy.trainer_backend {backend}{how}" in text


PPO = os.path.join(ROOT, "configs", "placement", "ppo_llama3.1-8b_4x8xh100.yaml")


@pytest.mark.parametrize("framework", ["verl", "nemo-rl"])
def test_a_mixed_plan_reports_each_worker_groups_backend_as_it_is_priced(framework):
    # verl picks the actor's workers by actor_rollout_ref.actor.strategy and the critic's by critic.strategy, NeMo
    # RL the policy's by policy.megatron_cfg.enabled and the value model's by its own: one backend per trained
    # model's worker group. Here the critic pipelines (pp 4: Megatron-Core) and the actor and its reference run
    # plain data parallelism (FSDP / DTensor). place had reported megatron for the actor too (resolved over the
    # whole plan) while pricing it with the Hugging Face kernels of its own strategy
    from dataclasses import replace

    import packplace
    from packplace.placement.emit import emit
    from packplace.placement.problem.config import build_instance, load_yaml
    from packplace.placement.problem.plan import Strategy

    raw = load_yaml(PPO)
    raw.setdefault("policy", {}).update(framework=framework, trainer_backend="auto")
    if framework == "nemo-rl":   # NeMo RL's PPO scores with a rule (a reward model is refused at load)
        raw["models"]["reward"] = "rule"
    inst = build_instance(raw)
    plan = packplace.place(inst, "greedy").solution
    for name in ("actor.train", "reference.infer"):
        vp = plan[name]
        plan = plan.replace(name, replace(vp, strategy=Strategy(vp.strategy.gpus, 1, 1, 1)))
    for name in ("critic.train", "critic.infer"):
        vp = plan[name]
        plan = plan.replace(name, replace(vp, strategy=Strategy(vp.strategy.gpus // 4, 4, 1, 1)))
    trainers = cli.trainer_backends(inst, plan)
    names = {"verl": "fsdp", "nemo-rl": "fsdp"}
    assert trainers["actor.train"] == {"trainer_backend": names[framework], "pass_kernels": "hf",
                                       "trainer_rate_fraction": PYTORCH_TRAIN_FRACTION}
    assert trainers["critic.train"] == {"trainer_backend": "megatron", "pass_kernels": "megatron",
                                        "trainer_rate_fraction": 1.0}
    for entry in trainers.values():   # the reported backend is the one whose kernels priced the vertex
        assert entry["pass_kernels"] == ("megatron" if entry["trainer_backend"] == "megatron" else "hf")
    # the emitted config runs one backend for both (one --config-name / base config): it cannot run this plan
    emitted = emit(inst, plan, framework)
    assert any("actor.train runs fsdp" in line and "critic.train runs megatron" in line for line in emitted.refusals)


@pytest.mark.parametrize("degrees, sharding, trainer, fraction", [
    ((2, 1, 1), "none", "pytorch_trainer", PYTORCH_TRAIN_FRACTION),   # pp 2: a user's PyTorch trainer, not Megatron
    ((1, 4, 1), "none", "pytorch_trainer", PYTORCH_TRAIN_FRACTION),   # tp 4
    ((1, 1, 1), "zero1", "pytorch_trainer", PYTORCH_TRAIN_FRACTION),  # a ZeRO layout
    ((1, 1, 1), "none", "bare_pytorch_loop", 1.0),                    # the bare loop: the table's rates
])
def test_framework_none_reports_the_trainer_that_priced_it(degrees, sharding, trainer, fraction):
    # framework none under trainer_backend auto is a user's own PyTorch trainer at every strategy
    # (docs/placement-model.md): memory, time and the report resolve it alike. The layout rule had said megatron
    # at pp 2 while the vertex was priced with the Hugging Face kernels at 0.67 and the report said "none"
    from dataclasses import replace

    import packplace
    from packplace.placement.model.layout_rules import TRAIN, Context, trainer_backend
    from packplace.placement.problem.config import build_instance
    from packplace.placement.problem.plan import Strategy
    from packplace.placement.task_estimate import MODEL_PRESETS

    pp, tp, _ = degrees
    config = {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 8},
              "models": {"actor": dict(MODEL_PRESETS["qwen2.5-1.5b"]), "reward": "rule"},
              "workload": {"batch_size": 16, "samples_per_prompt": 1, "context_length": 512,
                           "generation_length": 256},
              "policy": {"algorithm": "grpo", "framework": "none", "trainer_backend": "auto"},
              "training": {"sharding": sharding}}
    inst = build_instance(config)
    plan = packplace.place(inst, "greedy").solution
    vp = plan["actor.train"]
    strategy = Strategy(vp.strategy.gpus // (pp * tp), pp, tp, 1)
    plan = plan.replace("actor.train", replace(vp, strategy=strategy))
    assert trainer_backend(Context.of(inst), {TRAIN: strategy}) == "none"
    entry = cli.trainer_backends(inst, plan)["actor.train"]
    assert entry == {"trainer_backend": "none", "pass_kernels": "hf", "trainer_rate_fraction": fraction,
                     "trainer": trainer}
    cost = get_evaluator(inst).cost
    assert cost.train_rate_fraction(inst.models["actor"], pp, tp) == fraction   # what priced the vertex
    line = cli.trainer_line(inst, "actor.train", entry)
    if trainer == "pytorch_trainer":
        assert line.endswith(": a PyTorch trainer on a ZeRO or parallel layout); priced with Hugging Face kernels "
                             f"at {PYTORCH_TRAIN_FRACTION:g} of the table's rates")
    else:
        assert line.endswith(": a bare PyTorch loop); priced with Hugging Face kernels")


def test_a_moe_trainer_says_the_knobs_priced_it_as_estimate_does():
    """Qwen3-30B-A3B on NeMo RL's Megatron workers (EP 8): the component table prices dense layers only, so the
    knob model prices the vertex; place named Megatron-Core's kernels while estimate said ``knobs``."""
    from packplace.placement.checking.validate import load_setup
    from packplace.placement.task_estimate import estimate

    path = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml")
    inst, plan, _ = load_setup(path)
    s = plan["actor.train"].strategy
    cost = get_evaluator(inst).cost
    assert cost.pass_kernels(s.pp, s.tp, s.ep) == "megatron"   # the trainer's fused kernels (memory, packing)
    entry = cli.trainer_backends(inst, plan)["actor.train"]
    assert entry["trainer_backend"] == "megatron" and entry["pass_kernels"] == "knobs"
    e = estimate(inst.models["actor"], "h100-sxm", "train", framework="nemo-rl", seq_len=4096, dp=s.dp, tp=s.tp,
                 pp=s.pp, ep=s.ep)
    assert e.inputs["pass_kernels"] == entry["pass_kernels"]
    line = cli.trainer_line(inst, "actor.train", entry)
    assert line.endswith("priced with the efficiency knobs (no component table for a mixture of experts, "
                         "multi-head latent attention, LoRA or this GPU)") and "Megatron-Core" not in line


def test_zero_bound_gap_is_na_in_the_text_as_null_in_the_json():
    import dataclasses

    import packplace
    inst = load_config(DPO)
    result = packplace.place(inst, "greedy")
    assert result.bound > 0
    line = cli.format_table(inst, result).splitlines()[-1 if not result.message else -2]
    assert f"gap: {100 * (result.objective - result.bound) / result.objective:.1f}%" in line
    # a bound of 0 (OpenRLHF's micro-rollout loop before v0.5.0 claims none) proves nothing: the text had read
    # "gap: 100.0%" where the JSON's gap is null
    trivial = dataclasses.replace(result, bound=0.0, message="")
    line = cli.format_table(inst, trivial).splitlines()[-1]
    assert "bound: 0.0000 s   gap: n/a (no positive bound proven)   solver: greedy" in line and "100.0%" not in line
    assert cli.result_json(inst, trivial)["gap"] is None
    unsolved = dataclasses.replace(result, solution=None, objective=float("inf"), status="unknown", message="")
    assert "   gap: -   " in cli.format_table(inst, unsolved).splitlines()[-1]


def test_an_emitted_plan_file_records_the_framework_it_was_priced_with(tmp_path, capsys):
    from packplace.cli import main
    from packplace.result import SolveResult
    grpo = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
    out = tmp_path / "p.json"
    assert main(["place", "--config", grpo, "--solver", "greedy", "--emit", "verl", "--out", str(out)]) == 0
    result = SolveResult.from_json(out.read_text())
    # the config sets no policy.framework: the plan was priced for verl, and the file says so where re-scoring reads
    assert result.params["policy"] == {"framework": "verl"}
    score = get_evaluator(load_config(grpo, policy=result.params["policy"])).score(result.solution)
    assert score.step_time == pytest.approx(result.objective, rel=1e-9)
    with pytest.raises(ConfigError, match=r"\[policy\] policy: must be a mapping"):
        load_config(grpo, policy="verl")
    # a DPO config planned for verl, which has no DPO trainer: refused before pricing (exit 2), nothing written
    dpo = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")
    refused = tmp_path / "dpo.json"
    assert main(["place", "--config", dpo, "--solver", "greedy", "--emit", "verl", "--out", str(refused)]) == 2
    assert "--emit verl: algorithm dpo: verl.trainer.main_ppo runs PPO-family" in capsys.readouterr().err
    assert not refused.exists()
