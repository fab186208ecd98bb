"""An unset ``training.sharding`` under verl's or NeMo RL's ``trainer_backend: auto`` is the layout of the workers
each strategy runs on: ``zero3`` on the FSDP / DTensor workers (their one layout, ``stages.trainer_sharding`` of
``fsdp``), ``zero1`` on Megatron-Core's distributed optimizer. The candidate table (which the evaluator, the
CP-SAT rows, the whole-plan proof and the screen all read), ``vertex_parts`` and the emitters agree, and so does
``packplace estimate`` (``check_trainer_sharding``). No clock is read: every number is the model's.

Hand check (Qwen2.5-1.5B: ``P`` = 1,543,714,304 parameters, 28 layers of ``p_L`` = 1,310,339,072 / 28 =
46,797,824; verl at dp 4 on its FSDP workers): ``zero3`` with verl's fp32 parameters (``fsdp_config.model_dtype``
fp32: 4 + 4 + 8 bytes a parameter) holds ``16·P/4 + 2·p_L`` = 6,174,857,216 + 93,595,648 = 6,268,452,864 bytes of
state; the ``zero1`` it had been priced with (bf16 weights and gradients whole, the 12-byte Adam state over 4)
``2P + 2P + 12P/4 = 7P`` = 10,806,000,128 bytes."""

from __future__ import annotations

import pytest

from packplace.placement.candidates import on_fsdp_workers, role_training, vertex_parts
from packplace.placement.emit import emit
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.fit_hints import _variant
from packplace.placement.model.memory import TrainingOptions, backend_sharding
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation, Plan, Strategy
from packplace.placement.task_estimate import MODEL_PRESETS, estimate

DENSE = MODEL_PRESETS["qwen2.5-1.5b"]
P = 1_543_714_304
P_LAYER = 1_310_339_072 // 28
EXTENT = (1, 1, 4)


def _instance(framework: str, backend: str = "auto", sharding: str | None = None, sequences: int = 8):
    """A GRPO step of one Qwen2.5-1.5B actor on 4 H100s, ``sequences`` of 2,048 tokens; ``sharding`` ``None``:
    ``training.sharding`` unset."""
    return build_instance({
        "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 4},
        "models": {"actor": dict(DENSE), "reward": "rule"},
        "workload": {"batch_size": sequences, "samples_per_prompt": 1, "context_length": 2047,
                     "generation_length": 1},
        "policy": {"algorithm": "grpo", "framework": framework, "trainer_backend": backend},
        "training": {"recompute": "none", **({"sharding": sharding} if sharding is not None else {})}})


def _train(instance, strategy: Strategy, mb: int = 2):
    cand = get_evaluator(instance).table.lookup("actor.train", strategy, mb, EXTENT)
    assert cand is not None, strategy
    return cand


@pytest.mark.parametrize("framework, backend, sharding, resolved, follows", [
    ("verl", "auto", None, "zero1", True),          # follows each strategy's backend (zero1 held for Megatron)
    ("nemo-rl", "auto", None, "zero1", True),
    ("verl", "auto", "zero1", "zero1", False),      # given: as given
    ("verl", "auto", "zero3", "zero3", False),      # given zero3 keeps the trainer on FSDP
    ("verl", "fsdp", None, "zero3", False),         # a forced backend resolves it once
    ("nemo-rl", "megatron", None, "zero1", False),
    ("deepspeed-chat", "auto", None, "none", False),   # DeepSpeed's --actor_zero_stage 0: no backend to follow
    ("none", "auto", None, "zero1", False),
])
def test_an_unset_sharding_follows_the_backend_only_under_auto(framework, backend, sharding, resolved, follows):
    options = _instance(framework, backend, sharding).training["actor"]
    assert (options.sharding, options.sharding_follows_backend) == (resolved, follows)


def test_backend_sharding_resolves_only_what_follows_the_backend():
    follows = TrainingOptions(sharding_follows_backend=True)
    assert backend_sharding(follows, True).sharding == "zero3"
    assert backend_sharding(follows, False) is follows and follows.sharding == "zero1"
    given = TrainingOptions(sharding="zero1")
    assert backend_sharding(given, True) is given


# (framework, strategy, on the FSDP / DTensor workers): verl's FSDP workers run no tp, pp or ep; NeMo RL's
# DTensor policy runs tp but no pp or ep (layout_rules.trainer_backend)
STRATEGIES = [
    ("verl", Strategy(4, 1, 1, 1), True),
    ("verl", Strategy(2, 1, 2, 1), False),
    ("nemo-rl", Strategy(2, 1, 2, 1), True),
    ("nemo-rl", Strategy(2, 2, 1, 1), False),
]


@pytest.mark.parametrize("framework, strategy, fsdp", STRATEGIES)
def test_each_candidate_is_priced_with_its_workers_sharding(framework, strategy, fsdp):
    unset = _instance(framework)
    assert on_fsdp_workers(unset, "train", strategy) is fsdp
    assert not on_fsdp_workers(unset, "generate", strategy)
    assert role_training(unset, "actor", fsdp).sharding == ("zero3" if fsdp else "zero1")
    # the candidate is the one of the backend's own layout: trainer_backend fsdp (zero3) on those workers, an
    # explicit zero1 on Megatron-Core; time, resident and transient bytes to the last bit
    own = _instance(framework, "fsdp") if fsdp else _instance(framework, sharding="zero1")
    cand, ref = _train(unset, strategy), _train(own, strategy)
    assert (cand.time, cand.resident_bytes, cand.transient_bytes) == (ref.time, ref.resident_bytes,
                                                                       ref.transient_bytes)
    # vertex_parts (the evaluator's phases, validate's parts) adds up to the table's time
    parts = vertex_parts(unset, get_evaluator(unset).cost, "actor.train", strategy, 2, EXTENT)
    assert sum(parts.values()) == pytest.approx(cand.time, rel=1e-12)


def test_verls_fsdp_candidate_holds_the_zero3_state_and_its_gathers():
    unset, zero1 = _instance("verl"), _instance("verl", sharding="zero1")
    cand, old = _train(unset, Strategy(4, 1, 1, 1)), _train(zero1, Strategy(4, 1, 1, 1))
    # the state: 16 bytes a parameter over 4 ranks plus one gathered bf16 layer (fp32 parameters), not 7P
    assert cand.resident_bytes == pytest.approx(16 * P / 4 + 2 * P_LAYER, rel=1e-12)
    assert cand.resident_bytes == pytest.approx(6_268_452_864, rel=1e-12)
    assert old.resident_bytes == pytest.approx(7 * P, rel=1e-12) == pytest.approx(10_806_000_128, rel=1e-12)
    # the transient adds FSDP's root unit, its tied embedding / head gathered through the pass (2·V·d bf16 bytes,
    # pass_memory.fsdp_root_bytes) at least: never less memory than the zero1 it replaced on the transient side
    assert cand.transient_bytes - old.transient_bytes >= 2 * 151_936 * 1536
    # no step-end gradient all-reduce (the reduce-scatter runs every micro-batch): a different time
    assert cand.time != old.time


@pytest.mark.parametrize("framework, strategy, fsdp", STRATEGIES)
def test_estimate_prices_the_unset_sharding_place_prices(framework, strategy, fsdp):
    # estimate and place agree under auto: check_trainer_sharding resolves an unset sharding to the workers' own
    # layout for the strategy, and place's candidate of that strategy now holds it too
    unset = _instance(framework)
    e = estimate(unset.models["actor"], "h100-sxm", "train", micro_batch=2, seq_len=2048, dp=strategy.dp,
                 pp=strategy.pp, tp=strategy.tp, ep=strategy.ep, framework=framework, recompute="none",
                 trainer_backend="auto")
    assert e.inputs["sharding"] == ("zero3" if fsdp else "zero1")
    assert e.inputs["trainer_backend_resolved"] == ("fsdp" if fsdp else "megatron")
    if strategy.pp == 1:   # one micro-batch per rank at pp 1: the estimate is the vertex (test_estimate_contract)
        one = _instance(framework, sequences=strategy.dp * 2)
        cand = get_evaluator(one).table.lookup("actor.train", strategy, 2, EXTENT)
        assert e.memory["peak_bytes"] == pytest.approx(cand.resident_bytes + cand.transient_bytes, rel=1e-9)
        vertex = vertex_parts(one, get_evaluator(one).cost, "actor.train", strategy, 2, EXTENT)
        assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=1e-9)


@pytest.mark.parametrize("framework", ["verl", "nemo-rl"])
def test_the_emitter_writes_the_fsdp_layout_without_a_zero1_note(framework):
    def notes(instance):
        table = get_table(instance)
        block = Allocation((0, 0, 0), EXTENT)
        plan = Plan.build({name: next(c for c in table.feasible[name] if c.extent == EXTENT and (
            c.strategy.tp, c.strategy.pp, c.strategy.ep) == (1, 1, 1)).at(block) for name in instance.graph.names})
        emitted = emit(instance, plan, framework)
        assert emitted.refusals == []
        return [n for n in emitted.notes if "sharding zero1" in n]
    assert notes(_instance(framework)) == []   # priced zero3, the layout the FSDP / DTensor workers run
    assert len(notes(_instance(framework, sharding="zero1"))) == 1   # given zero1: priced so, the note stays


def test_a_fit_hint_that_sets_the_sharding_or_the_backend_stops_following_it():
    unset = _instance("verl")
    zero3 = _variant(unset, {"sharding": "zero3"}, {})
    assert (zero3.training["actor"].sharding, zero3.training["actor"].sharding_follows_backend) == ("zero3", False)
    megatron = _variant(unset, {}, {"trainer_backend": "megatron"})
    assert (megatron.training["actor"].sharding, megatron.training["actor"].sharding_follows_backend) == (
        "zero1", False)
    offload = _variant(unset, {"offload": "optimizer"}, {})
    assert offload.training["actor"].sharding_follows_backend


@pytest.mark.parametrize("framework, strategy, fsdp", STRATEGIES)
def test_the_trainer_backend_help_states_the_rule_per_framework(framework, strategy, fsdp):
    """``--trainer-backend``'s help had said auto picks FSDP for ``tp = pp = ep = 1`` for both frameworks; NeMo
    RL's DTensor policy runs tp 2 on FSDP (layout_rules.trainer_backend), which the help now says."""
    from packplace.placement.model.layout_rules import Context, trainer_backend
    from packplace.placement.screen.cli import TRAINER_BACKEND_HELP

    chosen = trainer_backend(Context.of(_instance(framework)), {"actor.train": strategy})
    assert chosen == ("fsdp" if fsdp else "megatron")
    assert "verl FSDP when its trainers and forwards run tp = pp = ep = 1" in TRAINER_BACKEND_HELP
    assert "NeMo RL FSDP (DTensor, which has tensor parallelism) when its trainers run pp = ep = 1 at any tp" in \
        TRAINER_BACKEND_HELP
    assert "picks FSDP for plans with tp = pp = ep = 1" not in TRAINER_BACKEND_HELP
