"""The OpenRLHF emitter writes the option names of the plan's release: v0.11.0's dotted names from v0.10.2 on, the
flat names before (``--actor_num_nodes``), each checked against the release's own ``argparse`` options.

The tables are ``tests/data/frameworks/openrlhf-<tag>.json``: every ``add_argument("--option")`` of
``openrlhf/cli/train_ppo_ray.py`` and ``train_dpo.py`` at the tag, switch or value, extracted with :mod:`ast` by
``benchmarks/frameworks/make_key_lists.py --openrlhf-releases v0.2.7 v0.5.8 v0.5.9 v0.6.0``
(github.com/OpenRLHF/OpenRLHF, tags v0.2.7 = 28207263b744 (``examples/train_ppo_ray.py`` and ``train_dpo.py``),
v0.5.8 = 869701968f5c, v0.5.9 = 0674030df4d1, v0.6.0 = bfa85f6fa8cd).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest

from packplace.placement import api
from packplace.placement.emit import emit
from packplace.placement.emit.common import PlanView
from packplace.placement.emit.openrlhf import FLAT_NAMES, FLAT_SINCE, emit_openrlhf
from packplace.placement.model.framework import parse_version
from packplace.placement.problem.config import build_instance, load_config
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan
from packplace.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "frameworks"
#: tag -> the commit the table was read at (``git rev-parse <tag>^{commit}``)
TAGS = {"v0.2.7": "28207263b74495502e40ce5ade648def7c1c5623",
        "v0.5.8": "869701968f5cee3216f62a7b4cea1c6da86154b9", "v0.5.9": "0674030df4d1cf7729a0a7962a4a76221c21bb2c",
        "v0.6.0": "bfa85f6fa8cd6214707f93883fac5d08334f4f06"}
TABLES = {tag: json.loads((DATA / f"openrlhf-{tag}.json").read_text()) for tag in TAGS}
GRPO = ROOT / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"   # 1 rack x 2 nodes x 8 GPUs
PPO = ROOT / "configs" / "placement" / "ppo_llama3.1-8b_4x8xh100.yaml"    # 4 nodes x 8 GPUs
DPO = ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"
OPENRLHF_7B = ROOT / "configs" / "placement" / "published" / "ppo_openrlhf_llama2-7b_1x8xa800.yaml"
NODE0, NODE1, BOTH = ((0, 0, 0), (1, 1, 8)), ((0, 1, 0), (1, 1, 8)), ((0, 0, 0), (1, 2, 8))
NODE2 = ((0, 2, 0), (1, 1, 8))


def vp(dp, pp, tp, mb, origin, extent) -> VertexPlan:
    return VertexPlan(Strategy(dp, pp, tp), mb, Allocation(origin, extent))


def test_the_tables_say_where_they_come_from() -> None:
    for tag, commit in TAGS.items():
        table = TABLES[tag]
        assert (table["framework"], table["version"], table["commit"]) == ("openrlhf", tag, commit)
        assert set(table["configs"]) == {"train_ppo_ray", "train_dpo"}
    # spot checks against the files: the flat names, and what v0.6.0 added
    assert TABLES["v0.5.8"]["configs"]["train_ppo_ray"]["--colocate_all_models"] == "switch"
    assert TABLES["v0.5.8"]["configs"]["train_ppo_ray"]["--vllm_gpu_memory_utilization"] == "value"
    assert "--ring_attn_size" not in TABLES["v0.5.9"]["configs"]["train_ppo_ray"]
    assert "--ring_attn_size" in TABLES["v0.6.0"]["configs"]["train_ppo_ray"]
    assert "--actor.num_nodes" not in TABLES["v0.6.0"]["configs"]["train_ppo_ray"]


@pytest.mark.parametrize("tag", TAGS)
def test_every_flat_name_is_the_release_s_or_arrives_later(tag) -> None:
    """Each name of FLAT_NAMES is an option of the release's train_ppo_ray.py or train_dpo.py exactly where
    FLAT_SINCE does not put it later."""
    release = parse_version(tag)
    known = set(TABLES[tag]["configs"]["train_ppo_ray"]) | set(TABLES[tag]["configs"]["train_dpo"])
    for flat in set(FLAT_NAMES.values()):
        assert (flat in known) == (release >= FLAT_SINCE.get(flat, ())), (tag, flat)


@functools.lru_cache(maxsize=1)
def _plans() -> list[tuple[Path, Plan]]:
    """Plans reaching every option the emitter writes: colocate-all with sleep, disjoint with a stale actor and TP 2
    trainer, PPO with the actor beside the reference and the critic beside the reward model, greedy's PPO and DPO
    plans."""
    colocated = Plan.build({"actor.generate": vp(4, 1, 4, 256, *BOTH), "reference.infer": vp(16, 1, 1, 32, *BOTH),
                            "reward.infer": vp(16, 1, 1, 64, *BOTH), "actor.train": vp(16, 1, 1, 8, *BOTH)})
    disjoint = Plan.build({"actor.generate": vp(2, 1, 4, 256, *NODE1), "reference.infer": vp(8, 1, 1, 32, *NODE0),
                           "reward.infer": vp(8, 1, 1, 64, *NODE0), "actor.train": vp(4, 1, 2, 8, *NODE0)},
                          staleness={"actor": 1})
    pairs = Plan.build({"actor.generate": vp(2, 1, 4, 256, *NODE0), "actor.train": vp(8, 1, 1, 4, *NODE1),
                        "reference.infer": vp(8, 1, 1, 8, *NODE1), "critic.train": vp(8, 1, 1, 2, *NODE2),
                        "critic.infer": vp(8, 1, 1, 16, *NODE2), "reward.infer": vp(8, 1, 1, 32, *NODE2)})
    solved = [(config, api.solve_placement(load_config(config), "greedy", seed=0).solution) for config in (PPO, DPO)]
    assert all(plan is not None for _, plan in solved)
    return [(GRPO, colocated), (GRPO, disjoint), (PPO, pairs), *solved]


def _views(config: Path, plan: Plan, tag: str) -> list[PlanView]:
    instance = load_config(config)
    # priced with the engine asleep where it shares GPUs (policy.engine_sleeps: true), so colocate-all emits
    # --vllm_enable_sleep too
    view = dataclasses.replace(PlanView.of(instance, plan, "openrlhf"), framework_version=tag.lstrip("v"),
                               engine_sleeps=True)
    base = view.training["actor"]
    heavy = dataclasses.replace(base, recompute="full", offload="optimizer", lora_rank=16)
    views = [view, dataclasses.replace(view, training={**view.training, "actor": heavy}, enforce_eager=True)]
    if view.algorithm == "grpo":   # DAPO: GRPO's advantage without the KL term
        views.append(dataclasses.replace(view, algorithm="dapo"))
    return views


@pytest.mark.parametrize("tag", TAGS)
def test_every_emitted_flag_is_an_option_of_its_release(tag) -> None:
    """Every option emitted for a plan at the release is one of the release's argparse options, switches given
    without a value and valued options with one; no dotted name survives."""
    emitted = 0
    for config, plan in _plans():
        for view in _views(config, plan, tag):
            out = emit_openrlhf(view)
            options = TABLES[tag]["configs"][out.config]
            for key, value in out.settings.items():
                assert key in options, (tag, key)
                assert (value is True) == (options[key] == "switch"), (tag, key, value)
                emitted += 1
            assert not any("." in key for key in out.settings)
            assert not any("--" + name in line for line in out.notes + out.refusals for name in
                           ("actor.", "algo.", "train.", "vllm.", "ds.", "rollout.", "ref.", "critic.", "reward."))
            assert "--actor.num_nodes" not in out.text() and "--train.batch_size" not in out.text()
    assert emitted > 60
    used = {FLAT_NAMES[k] for k in FLAT_NAMES}
    # the plans reach every flat name the release has
    reached = set()
    for config, plan in _plans():
        for view in _views(config, plan, tag):
            reached |= set(emit_openrlhf(view).settings)
    assert reached == {name for name in used if parse_version(tag) >= FLAT_SINCE.get(name, ())}


def test_release_limits_are_refusals_and_defaults_are_dropped() -> None:
    """v0.5.8: no group_norm advantage (GRPO refused), no async training, no DeepSpeed TP (TP 2 refused, TP 1 simply
    not written); v0.6.0 has group_norm; every refusal names the flat option."""
    config, colocated = _plans()[0]
    _, disjoint = _plans()[1]
    old = emit_openrlhf(_views(config, disjoint, "v0.5.8")[0])
    assert "--advantage_estimator" not in old.settings
    assert any(line.startswith("grpo: OpenRLHF 0.5.8's --advantage_estimator has no group_norm")
               for line in old.refusals)
    assert any(line.startswith("--async_train true: OpenRLHF 0.5.8 has no such option (it arrives in v0.8)")
               for line in old.refusals)
    assert any(line.startswith("--ds_tensor_parallel_size 2: OpenRLHF 0.5.8 has no such option (it arrives in "
                               "v0.7.4)") for line in old.refusals)
    v060 = emit_openrlhf(_views(config, colocated, "v0.6.0")[0])
    assert v060.settings["--advantage_estimator"] == "group_norm"
    assert "--ds_tensor_parallel_size" not in v060.settings
    assert not any("ds_tensor_parallel_size" in line for line in v060.refusals)   # TP 1: the release's own
    assert v060.settings["--colocate_all_models"] is True and v060.settings["--vllm_enable_sleep"] is True
    assert not any("--vllm." in line or "--train." in line for line in old.refusals + old.notes)


def test_without_a_release_or_from_v0_10_2_the_dotted_names_stay() -> None:
    config, plan = _plans()[0]
    view = PlanView.of(load_config(config), plan, "openrlhf")
    current = emit_openrlhf(view)
    assert "--actor.num_nodes" in current.settings
    assert emit_openrlhf(dataclasses.replace(view, framework_version="0.10.2")).settings == current.settings
    assert "--actor_num_nodes" in emit_openrlhf(dataclasses.replace(view, framework_version="0.10.1")).settings


def test_a_config_s_release_reaches_the_emitter() -> None:
    """The published OpenRLHF Llama-2-7B PPO config at framework_version 0.6.0 (8 x 40 GB A800s at 0.9): the plan
    colocates every model, emitted with v0.6.0's names, and the note says the release runs the engine at 0.4 there,
    as the plan was priced."""
    cfg = load_yaml(OPENRLHF_7B)
    cfg["policy"]["framework_version"] = "0.6.0"
    instance = build_instance(cfg)
    plan = api.solve_placement(instance, "greedy", seed=0).solution
    assert plan is not None
    out = emit(instance, plan, "openrlhf")
    options = TABLES["v0.6.0"]["configs"][out.config]
    assert out.settings and all(key in options for key in out.settings)
    assert out.settings["--colocate_all_models"] is True
    assert any("--vllm_gpu_memory_utilization 0.4 under --colocate_all_models" in line for line in out.notes)
    # emitted for another framework, the instance's OpenRLHF release is not that framework's
    assert PlanView.of(instance, plan, "verl").framework_version is None


def test_the_refusals_name_the_release_s_options() -> None:
    """A trained model's context parallelism is refused naming v0.6.0's --ring_attn_size / --packing_samples."""
    config, plan = _plans()[0]
    view = dataclasses.replace(_views(config, plan, "v0.6.0")[0], context_parallel={"actor": (2, False, 1024)})
    line = next(line for line in emit_openrlhf(view).refusals if line.startswith("actor context parallelism 2"))
    assert "(--ring_attn_size, with --packing_samples)" in line and "--ds." not in line
