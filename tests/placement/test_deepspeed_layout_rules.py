"""DeepSpeed's trainers have no pipeline or expert parallelism: DeepSpeed-Chat runs every model in a DeepSpeed ZeRO
engine (its step-3 scripts), OpenRLHF's DeepSpeed strategy has ZeRO, ring attention and a tensor-parallel size
only. ``layout_rules.strategy_refusal`` says so, and ``estimate`` and ``place``'s candidates follow it."""

from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import framework_layout_allows
from packplace.placement.model.layout_rules import Context, strategy_refusal
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import estimate

MOE = {"model_type": "qwen2_moe", "layers": 8, "hidden_dim": 1024, "ffn_dim": 2048, "vocab_size": 32000,
       "head_dim": 64, "num_kv_heads": 4, "num_experts": 8, "experts_per_token": 2, "expert_ffn_dim": 512}


def _ctx(framework):
    return Context(framework, "ppo", {}, False, "auto")


@pytest.mark.parametrize("name, kind", [("actor.train", "train"), ("critic.infer", "infer"),
                                        ("actor.generate", "generate")])
@pytest.mark.parametrize("strategy", [Strategy(2, 2, 1), Strategy(2, 1, 1, 2)])
def test_deepspeed_chat_runs_no_pipeline_or_expert_parallelism(name, kind, strategy):
    why = strategy_refusal(_ctx("deepspeed-chat"), name, kind, strategy)
    assert why is not None and why.startswith("DeepSpeed-Chat runs every model in a DeepSpeed ZeRO engine")
    assert strategy_refusal(_ctx("deepspeed-chat"), name, kind, Strategy(2, 1, 2)) is None   # tp stays


def test_openrlhf_trains_without_expert_parallelism():
    why = strategy_refusal(_ctx("openrlhf"), "actor.train", "train", Strategy(2, 1, 1, 2))
    assert why is not None and "has no expert parallelism" in why
    assert strategy_refusal(_ctx("openrlhf"), "actor.train", "train", Strategy(2, 1, 2)) is None
    assert strategy_refusal(_ctx("none"), "actor.train", "train", Strategy(2, 2, 1, 2)) is None   # no rules


@pytest.mark.parametrize("framework, degrees", [("deepspeed-chat", {"pp": 2}), ("deepspeed-chat", {"ep": 2, "dp": 2}),
                                                ("openrlhf", {"ep": 2, "dp": 2})])
def test_estimate_refuses_them(framework, degrees):
    with pytest.raises(ConfigError, match=rf"^tp / pp / ep: .* is a strategy {framework}'s trainer does not run"):
        estimate(MOE, "h100-sxm", "train", framework=framework, **degrees)
    assert estimate(MOE, "h100-sxm", "train", framework=framework, dp=2).time_s > 0


def test_place_proposes_no_pipelined_deepspeed_chat_candidate():
    path = Path(__file__).parents[2] / "configs/placement/published/ppo_deepspeed-chat_opt13b_1x8xa100.yaml"
    instance = build_instance(load_yaml(path))
    assert instance.framework == "deepspeed-chat"
    assert not framework_layout_allows(instance, "train", Strategy(4, 2, 1), "actor.train")
    assert framework_layout_allows(instance, "train", Strategy(4, 1, 2), "actor.train")
