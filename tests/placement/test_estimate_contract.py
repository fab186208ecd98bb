"""The contract between ``packplace estimate`` and the placement evaluator: a trainer's pass that ``estimate``
prices (``--framework`` an RL trainer, or ``--trainer-backend megatron``) is the evaluator's vertex of the same
strategy in a tiny placement instance built here, whose step is one micro-batch per data-parallel rank of
equal sequences (``batch_size = dp · micro_batch`` prompts of ``seq_len − 1`` tokens, one generated token).

The evaluator prices a training vertex as ``(m + pp − 1)·stage + update`` (``m = 1`` here) plus
``memory_options`` (``pp ·`` the recompute stage) and ``overhead``; ``estimate`` gives the stage by part, the
recompute stage, the update (``optimizer`` + the gradient all-reduce in ``communication``) and the overhead. So
with ``pp = 1`` its total is the vertex's ``train + memory_options + overhead``, and with ``pp > 1`` the stage
times ``pp`` plus the update is the vertex's ``train``. No clock is read: every number is the model's."""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.placement.candidates import vertex_parts
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model.components import pass_times
from packplace.placement.model.cost import PYTORCH_TRAIN_FRACTION, CostModel
from packplace.placement.model.memory import DEFAULT_TRAINING, backend_sharding, stage_params, stage_split
from packplace.placement.model.nemo_rl_releases import megatron_fuses_swiglu, unfused_swiglu_factor
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.hardware import MEGATRON_PASS_FACTOR_H100
from packplace.placement.problem.plan import Strategy
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import MODEL_PRESETS, estimate, format_estimate, resolve_hardware

REL = 1e-9
MOE = {"model_type": "qwen2_moe", "layers": 8, "hidden_dim": 1024, "ffn_dim": 2048, "vocab_size": 32000,
       "head_dim": 64, "num_kv_heads": 4, "num_experts": 8, "experts_per_token": 2, "expert_ffn_dim": 512}


def _samples(framework: str) -> int:
    """Responses per prompt of the tests' GRPO steps: OpenRLHF's ``group_norm`` asserts more than one (the prompts
    are halved so the step's sequences stay the same)."""
    return 2 if framework == "openrlhf" else 1


def _instance(model, framework: str, gpus: int, sequences: int, seq_len: int, recompute: str,
              backend: str = "auto", preset: str = "h100-sxm", version: str | None = None,
              sharding: str | None = "zero1"):
    """A GRPO instance of one actor; ``sharding`` ``None`` leaves ``training.sharding`` unset (place's default)."""
    config = {"hardware": {"preset": preset, "nodes_per_rack": 1, "gpus_per_node": gpus},
              "models": {"actor": dict(model), "reward": "rule"},
              "workload": {"batch_size": sequences // _samples(framework), "samples_per_prompt": _samples(framework),
                           "context_length": seq_len - 1,
                           "generation_length": 1},
              "policy": {"algorithm": "grpo", "framework": framework, "trainer_backend": backend},
              "training": {"recompute": recompute, **({"sharding": sharding} if sharding is not None else {})}}
    if version is not None:
        config["policy"]["framework_version"] = version
    return build_instance(config)


def _pair(model, framework: str, *, tp=1, pp=1, dp=1, ep=1, mb=1, seq_len=2048, recompute="none",
          backend="auto", task="train", version=None, sharding="zero1"):
    """``(estimate, the evaluator's parts of the vertex, the evaluator's cost model, the actor's shape)``;
    ``sharding`` ``None``: unset on both sides (the config's ``training.sharding`` and ``estimate``'s)."""
    instance = _instance(model, framework, tp * pp * dp, dp * mb, seq_len, recompute, backend, version=version,
                         sharding=sharding)
    evaluator = get_evaluator(instance)
    name = "actor.train" if task == "train" else "reference.infer"
    vertex = vertex_parts(instance, evaluator.cost, name, Strategy(dp, pp, tp, ep), mb, (1, 1, tp * pp * dp))
    e = estimate(instance.models["actor"], "h100-sxm", task, micro_batch=mb, seq_len=seq_len, tp=tp, pp=pp, dp=dp,
                 ep=ep, framework=framework, recompute=recompute, sharding=sharding, trainer_backend=backend,
                 framework_version=version)
    return e, vertex, evaluator.cost, instance.models["actor"]


@pytest.fixture
def factor_one(monkeypatch):
    """The unfused-SwiGLU factor at 1, for the tests that rebuild a vertex's ``train`` from the stage's own
    parts (the factor's place / estimate parity: the other tests here, and test_megatron_router_and_fusion.py)."""
    from packplace.placement.model import nemo_rl_releases
    monkeypatch.setattr(nemo_rl_releases, "UNFUSED_SWIGLU_TRAINING_FACTOR", 1.0)


def _swiglu(e, shape) -> float:
    """The unfused-SwiGLU factor on a Megatron-Core pass's stage and update (``release_terms``): the fusion of
    ``megatron_fuses_swiglu`` for the estimate's framework and release, 1 off Megatron-Core."""
    if e.inputs["trainer_backend_resolved"] != "megatron":
        return 1.0
    return unfused_swiglu_factor(shape, megatron_fuses_swiglu(e.inputs["framework"], e.inputs["framework_version"],
                                                              shape), e.inputs["framework"])


DENSE = MODEL_PRESETS["qwen2.5-1.5b"]
# (framework, degrees, recompute, backend, the backend place resolves, the kernels that price the pass)
PP1 = [
    ("verl", {"dp": 4}, "none", "auto", "fsdp", "hf"),                       # verl FSDP
    ("verl", {"dp": 4, "mb": 2}, "full", "auto", "fsdp", "hf"),
    ("verl", {"tp": 2, "dp": 2}, "selective", "auto", "megatron", "megatron"),   # verl Megatron (TP)
    ("nemo-rl", {"tp": 2, "dp": 2}, "full", "auto", "fsdp", "hf"),           # NeMo RL DTensor with TP
    ("nemo-rl", {"dp": 2}, "full", "megatron", "megatron", "megatron"),      # NeMo RL Megatron, asked for
    ("openrlhf", {"dp": 4}, "full", "auto", "deepspeed", "hf"),             # OpenRLHF (DeepSpeed)
    ("deepspeed-chat", {"tp": 2, "dp": 2}, "none", "auto", "deepspeed", "hf"),
]


@pytest.mark.parametrize("framework, degrees, recompute, backend, resolved, kernels", PP1)
def test_a_training_pass_is_the_evaluators_vertex(framework, degrees, recompute, backend, resolved, kernels):
    e, vertex, cost, shape = _pair(DENSE, framework, recompute=recompute, backend=backend, **degrees)
    assert set(vertex) == {"train", "old_log_prob", "overhead", "memory_options"}
    assert (e.inputs["trainer_backend_resolved"], e.inputs["pass_kernels"]) == (resolved, kernels)
    assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=REL)
    assert e.parts["overhead"] == pytest.approx(vertex["overhead"], rel=REL)
    assert (vertex["overhead"] > 0) == (framework != "deepspeed-chat")   # Ray dispatch; DeepSpeed-Chat: none
    rate = PYTORCH_TRAIN_FRACTION if kernels == "hf" else 1.0
    recomputed = e.parts.get("recompute", 0.0) / (rate if recompute == "full" else 1.0)
    assert recomputed == pytest.approx(vertex["memory_options"], rel=REL)
    assert (recomputed > 0) == (recompute != "none")
    dp, tp = degrees.get("dp", 1), degrees.get("tp", 1)
    assert e.parts["optimizer"] == pytest.approx(_swiglu(e, shape) * cost.adam_seconds(shape, dp, 1, tp), rel=REL)
    if kernels == "hf":   # the PyTorch-native trainer's passes at the fraction: the part is what it adds
        assert e.parts["trainer_rate"] == pytest.approx(
            (e.parts["forward"] + e.parts["backward"] + e.parts.get("recompute", 0.0) * (recompute == "full"))
            * (1 / PYTORCH_TRAIN_FRACTION - 1), rel=REL)
    else:
        assert "trainer_rate" not in e.parts


@pytest.mark.parametrize("degrees, recompute", [
    ({"dp": 4}, "none"), ({"dp": 2, "mb": 2}, "full"), ({"dp": 1}, "selective"), ({"dp": 8, "mb": 2}, "none"),
])
def test_a_bare_pytorch_loop_is_the_evaluators_vertex(degrees, recompute):
    # framework none, sharding none, plain data parallelism: the bare loop the component tables are fitted to.
    # place had priced its passes at PYTORCH_TRAIN_FRACTION with bf16 weights and 32 bytes of Adam per parameter
    # (Qwen2.5-1.5B, dp 4, 2,048 tokens: 0.1790 s) where estimate priced the table's bare kernels (0.1387 s)
    e, vertex, cost, shape = _pair(DENSE, "none", recompute=recompute, sharding="none", **degrees)
    assert (e.inputs["trainer_backend_resolved"], e.inputs["pass_kernels"], e.inputs["sharding"]) == ("none", "hf",
                                                                                                      "none")
    assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=REL)
    assert e.parts.get("recompute", 0.0) == pytest.approx(vertex["memory_options"], rel=REL)
    assert "trainer_rate" not in e.parts and vertex["overhead"] == 0.0
    # the table's one-GPU kernels: fp32 master weights under autocast, the fused AdamW step over every parameter
    mb = degrees.get("mb", 1)
    t = pass_times(cost.components_for(shape), shape, tokens=mb * 2048, seq_len=2048, train=True, recompute=recompute,
                   master_fp32=True, optimizer=True, params=shape.params)
    for part in ("forward", "backward", "optimizer"):
        assert e.parts[part] == pytest.approx(getattr(t, part), rel=1e-12), part
    assert e.parts.get("recompute", 0.0) == pytest.approx(t.recompute, rel=1e-12)
    sync = cost.gradient_sync_seconds(shape, degrees["dp"], 1, 1, (1, 1, degrees["dp"]))
    assert vertex["train"] == pytest.approx(t.forward + t.backward + t.optimizer + sync, rel=REL)
    assert cost.bare_loop_table(shape, 1, 1) is not None and cost.train_rate_fraction(shape, 1, 1) == 1.0
    # a ZeRO layout is a trainer's (place: the Hugging Face kernels at the fraction, on bf16 weights)
    _, _, zero1, _ = _pair(DENSE, "none", recompute=recompute, sharding="zero1", **degrees)
    assert zero1.bare_loop_table(shape, 1, 1) is None
    assert zero1.train_rate_fraction(shape, 1, 1) == PYTORCH_TRAIN_FRACTION


@pytest.mark.parametrize("sharding, degrees, recompute", [
    ("zero1", {"dp": 4}, "none"), ("zero2", {"dp": 2, "mb": 2}, "full"), ("none", {"tp": 2, "dp": 2}, "selective"),
    ("zero1", {"pp": 2, "dp": 2}, "selective"), ("none", {"pp": 2, "tp": 2}, "none"),
])
def test_framework_none_on_a_trainers_layout_is_the_evaluators_vertex(sharding, degrees, recompute):
    # framework none on a ZeRO layout or with tensor / pipeline parallelism is a PyTorch trainer's (the layout rule
    # of its memory, pass_memory.bare_loop), whose passes place prices at PYTORCH_TRAIN_FRACTION of the table's
    # rates. estimate had kept the table's bare kernels there (Qwen2.5-1.5B, dp 4, zero1, 2,048 tokens on H100:
    # 0.1179 s against the vertex's 0.1679 s); now both price it through trainer_pass_parts
    e, vertex, cost, shape = _pair(DENSE, "none", recompute=recompute, sharding=sharding, **degrees)
    dp, pp, tp = (degrees.get(k, 1) for k in ("dp", "pp", "tp"))
    assert (e.inputs["trainer_backend_resolved"], e.inputs["pass_kernels"]) == ("none", "hf")
    assert cost.bare_loop_table(shape, pp, tp) is None and cost.train_rate_fraction(shape, pp, tp) == \
        PYTORCH_TRAIN_FRACTION
    assert e.parts["trainer_rate"] == pytest.approx(
        (e.parts["forward"] + e.parts["backward"] + e.parts.get("recompute", 0.0) * (recompute == "full"))
        * (1 / PYTORCH_TRAIN_FRACTION - 1), rel=REL)
    assert e.parts["optimizer"] == pytest.approx(_swiglu(e, shape) * cost.adam_seconds(shape, dp, pp, tp), rel=REL)
    if pp == 1:
        assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=REL)
    else:
        sync = cost.gradient_sync_seconds(shape, dp, pp, tp, (1, 1, dp * pp * tp))
        stage = e.time_s - e.parts["optimizer"] - sync - e.parts.get("recompute", 0.0) - e.parts["overhead"]
        assert vertex["train"] == pytest.approx(pp * stage + e.parts["optimizer"] + sync, rel=REL)
    if (sharding, degrees) == ("zero1", {"dp": 4}):   # the brief's figure, priced as place prices it
        assert e.time_s == pytest.approx(0.1679, abs=5e-5)
    assert e.inputs["trainer_rate_fraction"] == PYTORCH_TRAIN_FRACTION   # the trainer: line names it
    # a forward keeps the table's bare kernels (one GPU's passes; place has no rate on its log-prob forwards)
    # (per replica: dp only at pp > 1, where it sets the pipeline hand-offs' link)
    infer = estimate(shape, "h100-sxm", "infer", seq_len=2048, framework="none", tp=tp, pp=pp,
                     dp=dp if pp > 1 else 1)
    assert "trainer_rate" not in infer.parts and "trainer_rate_fraction" not in infer.inputs


def test_a_bare_loop_casts_its_weights_every_micro_batch_and_steps_adamw_once():
    # two micro-batches per rank: the vertex runs the autocast casts with each and the AdamW step once
    one = build_instance({"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": 2},
                          "models": {"actor": dict(DENSE), "reward": "rule"},
                          "workload": {"batch_size": 4, "samples_per_prompt": 1, "context_length": 2047,
                                       "generation_length": 1},
                          "policy": {"algorithm": "grpo"}, "training": {"recompute": "none", "sharding": "none"}})
    cost = get_evaluator(one).cost
    shape = one.models["actor"]
    vertex = vertex_parts(one, cost, "actor.train", Strategy(2, 1, 1, 1), 1, (1, 1, 2))
    table = cost.components_for(shape)
    t = pass_times(table, shape, tokens=2048, seq_len=2048, train=True, master_fp32=True, optimizer=False,
                   params=shape.params)
    adamw = pass_times(table, shape, tokens=2048, seq_len=2048, train=True, master_fp32=True, optimizer=True,
                       params=shape.params).optimizer - t.optimizer
    assert t.optimizer > 0 and adamw > 0   # the casts; the AdamW step
    assert cost.adam_seconds(shape, 2, 1, 1) == pytest.approx(adamw, rel=1e-12)
    sync = cost.gradient_sync_seconds(shape, 2, 1, 1, (1, 1, 2))
    assert vertex["train"] == pytest.approx(2 * (t.forward + t.backward + t.optimizer) + adamw + sync, rel=REL)


@pytest.mark.parametrize("model, framework, degrees, recompute", [
    (DENSE, "verl", {"dp": 4}, "full"),                  # verl FSDP, DDP-style: every rank steps all of Adam
    (DENSE, "nemo-rl", {"tp": 2, "dp": 4}, "selective"),
    (DENSE, "nemo-rl", {"pp": 2, "dp": 2}, "selective"),  # Megatron-Core without the distributed optimizer
    (MOE, "nemo-rl", {"ep": 2, "dp": 4}, "none"),       # the dense part and half the experts on each rank
    (DENSE, "nemo-rl", {"dp": 2, "version": "0.4.0"}, "selective"),   # v0.4's optimizer round trip: all the state
])
def test_sharding_none_is_the_evaluators_vertex(model, framework, degrees, recompute, factor_one):
    e, vertex, cost, shape = _pair(model, framework, recompute=recompute, sharding="none", **degrees)
    zero1, _, _, _ = _pair(model, framework, recompute=recompute, sharding="zero1", **degrees)
    dp, pp, tp, ep = (degrees.get(k, 1) for k in ("dp", "pp", "tp", "ep"))
    assert e.inputs["sharding"] == "none"
    assert cost.options(shape).sharding == "none"
    # Adam's 32 bytes per parameter of the rank's whole (tp/pp/ep-local) shard: dp times zero1's share
    shard = (max(d + x for d, x in stage_split(shape, pp, tp, ep)) if ep > 1
             else max(stage_params(shape, pp)) / tp)
    assert e.parts["optimizer"] == pytest.approx(_swiglu(e, shape) * 32.0 * shard / cost.hw.memory_bandwidth,
                                                 rel=REL)
    assert e.parts["optimizer"] == pytest.approx(_swiglu(e, shape) * cost.adam_seconds(shape, dp, pp, tp, ep=ep),
                                                 rel=REL)
    if ep == 1:
        assert e.parts["optimizer"] == pytest.approx(dp * zero1.parts["optimizer"], rel=REL)
    assert e.parts.get("optimizer_offload", 0.0) == pytest.approx(vertex.get("optimizer_offload", 0.0), rel=REL)
    if "version" in degrees:   # the round trip moves the rank's whole Adam state: dp times zero1's
        assert e.parts["optimizer_offload"] == pytest.approx(dp * zero1.parts["optimizer_offload"], rel=1e-6)
    extra = vertex["memory_options"] + vertex["overhead"] + vertex.get("optimizer_offload", 0.0)
    if pp == 1:
        assert e.time_s == pytest.approx(vertex["train"] + extra, rel=REL)
    else:
        sync = cost.gradient_sync_seconds(shape, dp, pp, tp, (1, 1, dp * pp * tp))
        stage = e.time_s - e.parts["optimizer"] - sync - e.parts["recompute"] - e.parts["overhead"]
        assert vertex["train"] == pytest.approx(pp * stage + e.parts["optimizer"] + sync, rel=REL)


@pytest.mark.parametrize("framework, degrees, backend", [
    ("nemo-rl", {"pp": 2, "dp": 2}, "auto"),            # NeMo RL on Megatron-Core for PP
    ("verl", {"pp": 2, "tp": 2}, "auto"),
    ("nemo-rl", {"pp": 4, "dp": 1}, "megatron"),
])
def test_a_pipelined_pass_is_the_evaluators_stage_times_pp_plus_the_update(framework, degrees, backend, factor_one):
    e, vertex, cost, shape = _pair(DENSE, framework, recompute="selective", backend=backend, **degrees)
    dp, pp, tp = degrees.get("dp", 1), degrees["pp"], degrees.get("tp", 1)
    sync = cost.gradient_sync_seconds(shape, dp, pp, tp, (1, 1, dp * pp * tp))
    assert e.parts["optimizer"] == pytest.approx(_swiglu(e, shape) * cost.adam_seconds(shape, dp, pp, tp), rel=REL)
    stage = e.time_s - e.parts["optimizer"] - sync - e.parts["recompute"] - e.parts["overhead"]
    assert vertex["train"] == pytest.approx(pp * stage + e.parts["optimizer"] + sync, rel=REL)
    assert vertex["memory_options"] == pytest.approx(pp * e.parts["recompute"], rel=REL)
    assert e.parts["overhead"] == pytest.approx(vertex["overhead"], rel=REL)
    assert e.inputs["pass_kernels"] == "megatron"


@pytest.mark.parametrize("framework, degrees, kernels", [
    ("verl", {"dp": 4}, "hf"), ("verl", {"tp": 2, "dp": 2}, "megatron"), ("nemo-rl", {"tp": 2, "dp": 2}, "hf"),
    ("openrlhf", {"dp": 4}, "hf"),
])
def test_a_log_prob_pass_is_the_evaluators_forward(framework, degrees, kernels):
    # the actor's old log-probs (and verl's / NeMo RL's reference, on the trainer's strategy) at the table's rates
    _, vertex, _, shape = _pair(DENSE, framework, **degrees)
    # one replica's pass (estimate refuses a dp that changes nothing): the vertex of dp replicas runs it on each
    infer = estimate(shape, "h100-sxm", "infer", seq_len=2048, framework=framework, **{**degrees, "dp": 1})
    assert infer.inputs["pass_kernels"] == kernels
    assert infer.time_s - infer.parts["overhead"] == pytest.approx(vertex["old_log_prob"], rel=REL)
    assert "trainer_rate" not in infer.parts


@pytest.mark.parametrize("framework, degrees, recompute", [
    ("nemo-rl", {"ep": 2, "dp": 4}, "none"),        # Megatron-Core for EP: the all-to-alls, the expert all-reduce
    ("nemo-rl", {"ep": 4, "dp": 4}, "full"),
    ("verl", {"ep": 2, "dp": 2}, "selective"),
    ("nemo-rl", {"dp": 4}, "full"),                 # a MoE on the DTensor workers (knobs: no rate fraction)
])
def test_a_mixture_of_experts_pass_is_the_evaluators_vertex(framework, degrees, recompute, factor_one):
    e, vertex, cost, shape = _pair(MOE, framework, recompute=recompute, **degrees)
    assert e.inputs["pass_kernels"] == "knobs"
    assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=REL)
    dp, ep = degrees["dp"], degrees.get("ep", 1)
    # the update part is the Adam step alone; the gradient all-reduce (dense over dp, experts over dp / ep) and
    # the all-to-alls are communication
    assert e.parts["optimizer"] == pytest.approx(_swiglu(e, shape) * cost.adam_seconds(shape, dp, 1, 1), rel=REL)
    sync = cost.gradient_sync_seconds(shape, dp, 1, 1, (1, 1, dp), ep)
    alltoall = 2 * shape.moe_layers * cost.moe_alltoall(shape, 2048.0, 1, ep, (1, 1, dp)) if ep > 1 else 0.0
    assert e.parts["communication"] == pytest.approx(sync + alltoall, rel=REL)
    assert e.parts["optimizer"] > 0 and e.parts["forward"] > 0 and e.parts["backward"] > 0


def test_the_megatron_factor_scales_the_kernels_and_the_line_names_them():
    fsdp = estimate("qwen2.5-1.5b", "h100-sxm", "train", framework="nemo-rl", dp=2, sharding="zero1")
    megatron = estimate("qwen2.5-1.5b", "h100-sxm", "train", framework="nemo-rl", dp=2, sharding="zero1",
                        trainer_backend="megatron")
    unit = estimate("qwen2.5-1.5b", "h100-sxm", "train", framework="nemo-rl", dp=2, sharding="zero1",
                    trainer_backend="megatron", hardware={"megatron_pass_factor": 1.0})
    for part in ("forward", "backward"):
        assert megatron.parts[part] == pytest.approx(MEGATRON_PASS_FACTOR_H100 * unit.parts[part], rel=1e-12)
    assert megatron.parts["forward"] != fsdp.parts["forward"]   # Transformer Engine's kernels, not the eager ones
    text = format_estimate(megatron)
    assert ("trainer: megatron (Megatron-Core; nemo-rl, --trainer-backend megatron); priced with Megatron-Core "
            "kernels x megatron_pass_factor 1.07") in text.splitlines()
    assert ("trainer: fsdp (FSDP / DTensor; nemo-rl, --trainer-backend auto, as place resolves it); priced with "
            "Hugging Face kernels") in format_estimate(fsdp).splitlines()


@pytest.mark.parametrize("kwargs, message", [
    ({"framework": "verl", "cp": 2, "dp": 2, "trainer_backend": "fsdp"},
     "cp: 2 with framework verl on its FSDP workers (trainer_backend fsdp): they split sequences with Ulysses"),
    ({"framework": "verl", "tp": 2, "trainer_backend": "fsdp"},
     "tp / pp / ep: 2 / 1 / 1 is a strategy verl's trainer does not run (trainer_backend fsdp: its fsdp workers)"),
    ({"framework": "nemo-rl", "pp": 2, "trainer_backend": "fsdp"},
     "tp / pp / ep: 1 / 2 / 1 is a strategy nemo-rl's trainer does not run"),
    ({"framework": "openrlhf", "trainer_backend": "megatron"},
     "trainer_backend: megatron: openrlhf trains with DeepSpeed (ZeRO)"),
    ({"framework": "none", "trainer_backend": "fsdp"}, "trainer_backend: fsdp names verl's FSDP"),
    ({"framework": "verl", "trainer_backend": "deepspeed"},
     "trainer_backend: must be one of auto, fsdp, megatron, got 'deepspeed'"),
])
def test_a_backend_that_cannot_run_the_strategy_is_refused(kwargs, message):
    with pytest.raises(ConfigError) as info:
        estimate("qwen2.5-1.5b", "h100-sxm", "train", **kwargs)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("backend", ["megatron", "auto"])
def test_verl_context_parallelism_runs_on_its_megatron_workers(backend):
    # under auto --cp resolves to Megatron as --tp does (verl's FSDP workers have Ulysses, not CP)
    e = estimate("qwen2.5-1.5b", "h100-sxm", "train", framework="verl", cp=2, dp=2, trainer_backend=backend)
    assert (e.inputs["trainer_backend_resolved"], e.inputs["pass_kernels"]) == ("megatron", "megatron")
    # NeMo RL's DTensor policy has context parallelism of its own: --cp keeps it there
    nemo = estimate("qwen2.5-1.5b", "h100-sxm", "train", framework="nemo-rl", cp=2, dp=2, trainer_backend=backend)
    assert nemo.inputs["trainer_backend_resolved"] == ("megatron" if backend == "megatron" else "fsdp")


def test_an_engine_task_takes_no_trainer_backend():
    with pytest.raises(ConfigError, match=r"^trainer_backend: megatron picks the trainer's workers"):
        estimate("qwen2.5-1.5b", "h100-sxm", "decode", trainer_backend="megatron")
    assert estimate("qwen2.5-1.5b", "h100-sxm", "decode").inputs["trainer_backend_resolved"] == "none"


def test_bare_kernels_of_a_mixture_of_experts_label_the_update_by_what_it_prices():
    # framework none with ep 8: the optimizer part was the update less the whole shard's all-reduce over dp (below
    # 0, shown as 0) and communication that all-reduce; now the Adam step, and the split all-reduce + all-to-alls
    shape = build_instance({"hardware": {"preset": "h100-sxm"}, "models": {"actor": dict(MOE), "reward": "rule"},
                            "workload": {"batch_size": 8, "samples_per_prompt": 1, "context_length": 4095,
                                         "generation_length": 1},
                            "policy": {"algorithm": "grpo"}}).models["actor"]
    ep1 = estimate(shape, "h100-sxm", "train", seq_len=4096, dp=8, sharding="zero1")
    ep8 = estimate(shape, "h100-sxm", "train", seq_len=4096, dp=8, ep=8, sharding="zero1")
    # Adam over the rank's eighth of the parameters: 32 bytes each at the H100's 3.35 TB/s
    adam = 32.0 * shape.params / 8 / 3.35e12
    assert ep1.parts["optimizer"] == pytest.approx(adam, rel=1e-12)
    assert ep8.parts["optimizer"] == pytest.approx(adam, rel=1e-12)
    cluster, hw = resolve_hardware("h100-sxm", None, 8)
    cost = CostModel(hw, cluster, Workload(batch_size=8, samples_per_prompt=1, context_length=4095,
                                           generation_length=1))
    extent = (1, 1, 8)
    for e, ep in ((ep1, 1), (ep8, 8)):
        alltoall = 2 * shape.moe_layers * cost.moe_alltoall(shape, 4096.0, 1, ep, extent) if ep > 1 else 0.0
        assert e.parts["communication"] == pytest.approx(
            cost.gradient_sync_seconds(shape, 8, 1, 1, extent, ep) + alltoall, rel=1e-12)


def test_the_cli_takes_the_backend_and_prints_it(capsys):
    from packplace.cli import main  # the command line, as a user runs it
    args = ["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h100-sxm", "--framework", "verl", "--tp", "2"]
    assert main(args) == 0
    assert ("trainer: megatron (Megatron-Core; verl, --trainer-backend auto, as place resolves it); priced with "
            "Megatron-Core kernels x megatron_pass_factor 1.07") in capsys.readouterr().out.splitlines()
    assert main([*args, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"pass_kernels": "megatron"' in out and '"trainer_backend_resolved": "megatron"' in out
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--task", "decode", "--trainer-backend", "fsdp"]) == 2
    assert "--trainer-backend: means nothing for --task decode (it sets infer, train)" in capsys.readouterr().err


@pytest.mark.parametrize("version, backend, degrees, swiglu, offloads", [
    ("0.4.0", "megatron", {"dp": 2}, True, True),     # Qwen's SwiGLU unfused on Megatron, the optimizer round trip
    ("0.4.0", "auto", {"dp": 2}, False, True),        # DTensor: the round trip only
    ("0.4.0", "auto", {"pp": 2, "dp": 2}, True, True),   # Megatron for PP under auto
    ("0.5.0", "megatron", {"dp": 2}, False, False),
    ("0.6.0", "megatron", {"dp": 2}, False, False),
    ("0.6.0", "auto", {"dp": 2}, False, False),
])
def test_a_nemo_rl_release_changes_the_pass_as_it_changes_the_vertex(version, backend, degrees, swiglu, offloads):
    e, vertex, cost, shape = _pair(DENSE, "nemo-rl", recompute="selective", backend=backend, version=version,
                                   **degrees)
    assert ("optimizer_offload" in vertex) == offloads == ("optimizer_offload" in e.parts)
    if offloads:   # 2 x the GPU's Adam state (12 bytes x P / dp) over its PCIe link, as place prices it
        dp = degrees["dp"]
        state = 12.0 * max(stage_params(shape, degrees.get("pp", 1))) / dp
        assert e.parts["optimizer_offload"] == pytest.approx(2 * state / cost.hw.host_bandwidth, rel=1e-3)
        assert e.parts["optimizer_offload"] == pytest.approx(vertex["optimizer_offload"], rel=REL)
    pp = degrees.get("pp", 1)
    # the same shape as a Llama (its Megatron-Bridge provider fuses the SwiGLU): the release without the factor
    plain, _, _, _ = _pair({**DENSE, "model_type": "llama"}, "nemo-rl", recompute="selective", backend=backend,
                           version=version, **degrees)
    train = e.time_s - e.parts["recompute"] - e.parts["overhead"] - e.parts.get("optimizer_offload", 0.0)
    plain_train = (plain.time_s - plain.parts["recompute"] - plain.parts["overhead"]
                   - plain.parts.get("optimizer_offload", 0.0))
    # (a Llama has no QKV bias: 1e-5 of the pass; the factor is 25 %)
    assert train == pytest.approx((1.25 if swiglu else 1.0) * plain_train, rel=1e-4)
    assert e.parts["recompute"] == pytest.approx(plain.parts["recompute"], rel=1e-4)   # not the factor's
    if pp == 1:
        assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"]
                                         + vertex.get("optimizer_offload", 0.0), rel=REL)
    else:
        sync = cost.gradient_sync_seconds(shape, degrees["dp"], pp, 1, (1, 1, 2 * pp)) * (1.25 if swiglu else 1.0)
        stage = train - e.parts["optimizer"] - sync
        assert vertex["train"] == pytest.approx(pp * stage + e.parts["optimizer"] + sync, rel=REL)


@pytest.mark.parametrize("framework, degrees", [("nemo-rl", {"pp": 2, "dp": 2}), ("verl", {"pp": 2, "tp": 2}),
                                                ("nemo-rl", {"pp": 4})])
def test_a_pipelined_log_prob_pass_is_the_slowest_stage_and_the_vertex_pp_times_it(framework, degrees):
    # docs/placement-model.md: one micro-batch through pp stages, (1 + pp - 1) x the slowest stage
    _, vertex, _, shape = _pair(DENSE, framework, **degrees)
    infer = estimate(shape, "h100-sxm", "infer", seq_len=2048, framework=framework, **degrees)
    assert infer.inputs["pass_kernels"] == "megatron"
    assert vertex["old_log_prob"] == pytest.approx(degrees["pp"] * (infer.time_s - infer.parts["overhead"]), rel=REL)


@pytest.mark.parametrize("framework, backend, degrees", [
    ("verl", "auto", {"dp": 2}),                 # verl's CP: its Megatron workers
    ("nemo-rl", "megatron", {"dp": 2}),
    ("verl", "auto", {"dp": 1, "tp": 2}),
])
def test_a_context_parallel_pass_is_the_vertex_of_dp_times_cp_ranks(framework, backend, degrees):
    # place's vertex on dp·cp DP×CP ranks of one 8,192-token sequence each (Strategy(dp·cp, ...), micro-batch 1):
    # a CP group of 2 runs 2 micro-batches of one sequence, each GPU holding half of each. estimate --cp 2
    # --micro-batch 1 is its memory to 1e-9 (the group's 2 micro-batches: gradients from the first, up to 2 in
    # flight per stage; up to 2·tp pad tokens per sequence on a GPU, as place charges sequences of any length);
    # its time is one of the 2 micro-batches, and --micro-batch 2 (both sequences in one micro-batch: each GPU the
    # same tokens) is the vertex's train + memory_options + overhead up to the ring's exposed exchange, which the
    # evaluator prices through its balance planner (3.8e-5 - 6.1e-5 relative here)
    dp, tp, cp, seq_len = degrees["dp"], degrees.get("tp", 1), 2, 8192
    instance = build_instance(_cp_config(framework, backend, dp, dp * tp * cp, seq_len))
    evaluator = get_evaluator(instance)
    strategy = Strategy(dp * cp, 1, tp, 1)
    cand = evaluator.table.lookup("actor.train", strategy, 1, (1, 1, strategy.gpus))
    vertex = vertex_parts(instance, evaluator.cost, "actor.train", strategy, 1, (1, 1, strategy.gpus))
    seconds = vertex["train"] + vertex["memory_options"] + vertex["overhead"]

    def priced(mb):
        return estimate(instance.models["actor"], "h100-sxm", "train", micro_batch=mb, seq_len=seq_len, tp=tp, dp=dp,
                        cp=cp, framework=framework, trainer_backend=backend, recompute="none")

    one, both = priced(1), priced(2)
    assert one.memory["peak_bytes"] == pytest.approx(cand.resident_bytes + cand.transient_bytes, rel=REL)
    assert both.time_s == pytest.approx(seconds, rel=1e-4)
    assert one.time_s < 0.7 * seconds   # one micro-batch of the group's two
    # the GPU's share: 8,192 / 2 tokens plus 2·tp pad tokens of the one sequence, at the framework's logit bytes
    logit_forward, logit_backward = (2.0, 4.0) if framework == "verl" else (10.0, 12.0)
    share = DENSE["vocab_size"] * (seq_len / cp + 2 * tp) / tp
    assert any(one.memory["logits"] == pytest.approx(b * share, rel=1e-12) for b in (logit_forward, logit_backward))


def _cp_config(framework, backend, dp, gpus, seq_len):
    """A GRPO config of one sequence of ``seq_len`` tokens per DP rank of a CP-2 group, on one node of ``gpus``
    H100s, no recompute (the CP contract tests' instance)."""
    return {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": gpus},
            "models": {"actor": dict(DENSE), "reward": "rule"},
            "workload": {"batch_size": dp * 2 // _samples(framework), "samples_per_prompt": _samples(framework),
                         "context_length": seq_len - 1,
                         "generation_length": 1},
            "policy": {"algorithm": "grpo", "framework": framework, "trainer_backend": backend},
            "training": {"recompute": "none", "context_parallel": 2}}


def _cp_pipeline_vertex(framework, backend, degrees, seq_len):
    """``(dp, tp, pp, cp, gpus, cost, shape, parts)`` of a GRPO actor at CP 2 with the given degrees on one node of
    ``dp·tp·pp·cp`` H100s (at most 8, as estimate's cluster holds them), no recompute; ``parts(task)`` the
    evaluator's vertex parts of a task on the whole node."""
    dp, tp, pp, cp = degrees["dp"], degrees.get("tp", 1), degrees["pp"], 2
    gpus = dp * tp * pp * cp
    instance = build_instance(_cp_config(framework, backend, dp, gpus, seq_len))
    cost, shape = get_evaluator(instance).cost, instance.models["actor"]

    def parts(task):
        return vertex_parts(instance, cost, task, Strategy(dp * cp, pp, tp, 1), 1, (1, 1, gpus))
    return dp, tp, pp, cp, gpus, cost, shape, parts


@pytest.mark.parametrize("framework, backend, degrees, seq_len", [
    ("nemo-rl", "megatron", {"dp": 1, "pp": 2}, 4096),
    ("nemo-rl", "megatron", {"dp": 1, "pp": 4}, 8192),
    ("nemo-rl", "auto", {"dp": 2, "pp": 2}, 4096),      # auto: Megatron-Core at pp 2
    ("verl", "auto", {"dp": 1, "pp": 2, "tp": 2}, 8192),
])
def test_a_context_parallel_pipeline_runs_the_groups_micro_batches(framework, backend, degrees, seq_len, factor_one):
    # CP 2 with pp > 1: a CP group runs 2 micro-batches of one sequence, each GPU holding half of each (the memory
    # model keeps them in flight), so the vertex's pipeline is m x the stage of the rank's tokens (estimate at
    # --micro-batch 2) plus a bubble of pp - 1 stages of one micro-batch's half (estimate at --micro-batch 1), and
    # the update. place had charged the bubble at the whole rank's tokens, (m + pp - 1) x the stage (Qwen2.5-1.5B,
    # dp 1, cp 2, pp 2, 4,096 tokens: 0.1382 s against estimate's stage of 0.0749 s; now 0.1099 s)
    dp, tp, pp, cp, gpus, cost, shape, parts = _cp_pipeline_vertex(framework, backend, degrees, seq_len)
    vertex = parts("actor.train")

    def stage(mb):   # the slowest stage of one micro-batch of mb sequences' CP share, without the update
        e = estimate(shape, "h100-sxm", "train", micro_batch=mb, seq_len=seq_len, tp=tp, pp=pp, dp=dp, cp=cp,
                     framework=framework, trainer_backend=backend, recompute="none")
        assert e.inputs["pass_kernels"] == "megatron"
        return e.time_s - e.parts["optimizer"] - e.parts["overhead"] - sync, e

    sync = cost.gradient_sync_seconds(shape, dp * cp, pp, tp, (1, 1, gpus))
    (whole, _), (half, one) = stage(cp), stage(1)
    update = one.parts["optimizer"] + sync
    assert one.parts["optimizer"] == pytest.approx(_swiglu(one, shape) * cost.adam_seconds(shape, dp * cp, pp, tp),
                                                   rel=REL)
    assert vertex["train"] == pytest.approx(whole + (pp - 1) * half + update, rel=REL)
    assert vertex["train"] < pp * whole + update   # the bubble of a half, not of the whole rank's tokens
    assert cost.context_parallel == {"actor": cp, "reference": cp}   # by role: the reference runs the actor's
    assert cost.context_parallel_degree(shape) == cp


@pytest.mark.parametrize("framework, backend, degrees, seq_len", [
    ("nemo-rl", "megatron", {"dp": 1, "pp": 2}, 4096),
    ("nemo-rl", "auto", {"dp": 2, "pp": 2}, 4096),
    ("verl", "auto", {"dp": 1, "pp": 2, "tp": 2}, 8192),
])
def test_a_context_parallel_pipeline_runs_the_groups_micro_batches_forward_too(framework, backend, degrees, seq_len):
    # the old log-prob forward (and the reference's, in the same workers with the actor's CP) runs the CP group's
    # 2·m micro-batches of one sequence's half through the same pipeline as the training pass: m x the stage of
    # the rank's tokens plus pp - 1 stages of one half (the bubble). place had charged the forward's bubble at the
    # whole rank's tokens, (m + pp - 1) x the stage
    dp, tp, pp, cp, gpus, cost, shape, parts = _cp_pipeline_vertex(framework, backend, degrees, seq_len)
    vertex = parts("actor.train")
    # hand-computed from the stage: m = 1 micro-batch per DP x CP rank of seq_len tokens, its half on each GPU
    whole = cost._stage_seconds(shape, False, dp * cp, pp, tp, seq_len, seq_len, (1, 1, gpus), 1, 0, False)
    half = cost._stage_seconds(shape, False, dp * cp, pp, tp, seq_len / cp, seq_len, (1, 1, gpus), 1, 0, False)
    assert half < whole
    assert vertex["old_log_prob"] == pytest.approx(whole + (pp - 1) * half, rel=REL)
    assert vertex["old_log_prob"] < pp * whole   # the bubble of a half, not of the whole rank's tokens
    # estimate's forward gives the slowest stage: at --micro-batch 2 the rank's tokens, at 1 one half

    def stage(mb):
        e = estimate(shape, "h100-sxm", "infer", micro_batch=mb, seq_len=seq_len, tp=tp, pp=pp, dp=dp, cp=cp,
                     framework=framework, trainer_backend=backend)
        assert e.inputs["pass_kernels"] == "megatron"
        return e.time_s - e.parts["overhead"]

    assert vertex["old_log_prob"] == pytest.approx(stage(cp) + (pp - 1) * stage(1), rel=REL)
    # the reference runs in the actor's workers with its CP: the same forward pipeline
    reference = parts("reference.infer")
    assert reference["forward"] == pytest.approx(vertex["old_log_prob"], rel=REL)


@pytest.mark.parametrize("recompute", ["full", "selective"])
@pytest.mark.parametrize("pp", [1, 2])
def test_a_context_parallel_recompute_is_the_vertex_of_the_groups_micro_batches(recompute, pp):
    # the recomputed forward (full) or attention (selective) is a forward of the micro-batches the pass runs: a CP
    # group of 2 runs 2 micro-batches of one sequence's half, so the vertex's memory_options is m x the recompute
    # stage of the rank's tokens (estimate at --micro-batch 2) plus pp - 1 of one half (estimate at
    # --micro-batch 1), at the trainer's rate (full). Before, estimate scaled the stage of both sequences by 1/2
    # (full, pp 1: 0.0248 s against the vertex's 0.0287 s) and place's selective bubble was of the whole tokens
    # (pp 2: 0.00265 s against 0.00199 s)
    dp, cp, seq_len = 1, 2, 4096
    gpus = dp * pp * cp
    config = {"hardware": {"preset": "h100-sxm", "nodes_per_rack": 1, "gpus_per_node": gpus},
              "models": {"actor": dict(DENSE), "reward": "rule"},
              "workload": {"batch_size": dp * cp, "samples_per_prompt": 1, "context_length": seq_len - 1,
                           "generation_length": 1},
              "policy": {"algorithm": "grpo", "framework": "nemo-rl", "trainer_backend": "megatron"},
              "training": {"recompute": recompute, "context_parallel": cp}}
    instance = build_instance(config)
    cost, shape = get_evaluator(instance).cost, instance.models["actor"]
    vertex = vertex_parts(instance, cost, "actor.train", Strategy(dp * cp, pp, 1, 1), 1, (1, 1, gpus))

    def stage(mb):
        e = estimate(shape, "h100-sxm", "train", micro_batch=mb, seq_len=seq_len, pp=pp, dp=dp, cp=cp,
                     framework="nemo-rl", trainer_backend="megatron", recompute=recompute)
        return e.parts["recompute"]

    rate = cost.train_rate_fraction(shape, pp, 1) if recompute == "full" else 1.0
    whole, half = stage(cp), stage(1)
    assert vertex["memory_options"] * rate == pytest.approx(whole + (pp - 1) * half, rel=REL)
    if recompute == "selective":   # linear in the tokens: hand-computed FLOPs of the stage's layers
        flops = 2.0 * shape.layers * seq_len * shape.attention_dim * seq_len / pp
        per_gpu = cost.hw.flops_per_gpu * cost.hw.gemm_peak_fraction
        assert whole == pytest.approx(flops / per_gpu, rel=1e-9)
        assert half == pytest.approx(whole / cp, rel=1e-9)
    else:   # a forward of 2,048 tokens runs at a lower GEMM efficiency than one of 4,096
        assert half > whole / cp


@pytest.mark.parametrize("framework, degrees, backend", [
    ("none", {"dp": 4}, "auto"), ("none", {"tp": 2, "dp": 2}, "auto"), ("verl", {"dp": 4}, "fsdp"),
    ("nemo-rl", {"dp": 2}, "fsdp"), ("openrlhf", {"dp": 4}, "auto"), ("deepspeed-chat", {"dp": 2}, "auto"),
    # under auto the strategy picks the workers: verl's and NeMo RL's FSDP / DTensor ones run zero3, their
    # Megatron-Core ones zero1 (verl tp 2, NeMo RL pp 2)
    ("verl", {"dp": 4}, "auto"), ("nemo-rl", {"dp": 2}, "auto"), ("nemo-rl", {"tp": 2, "dp": 2}, "auto"),
    ("verl", {"tp": 2, "dp": 2}, "auto"), ("nemo-rl", {"pp": 2, "dp": 2}, "auto"),
])
def test_an_unset_sharding_is_places_default_in_estimate_too(framework, degrees, backend, factor_one):
    # estimate and place price the same setup when neither is told a sharding: the trainer's own
    # (stages.trainer_sharding: OpenRLHF --zero_stage 2, DeepSpeed-Chat --actor_zero_stage 0, verl's FSDP and NeMo
    # RL's DTensor workers zero3, framework none zero1) is both's. estimate had defaulted framework none to sharding
    # none, the bare loop (Qwen2.5-1.5B, dp 4, 2,048 tokens on H100: 0.1387 s against place's vertex of 0.1679 s),
    # and verl / NeMo RL on those workers to zero1, a layout they do not run. place's config resolves an unset
    # sharding on them to zero3 under trainer_backend fsdp, and under auto prices each strategy with the layout of
    # the workers it resolves to (candidates.role_training: zero3 on FSDP / DTensor, zero1 on Megatron-Core), as
    # estimate's check_trainer_sharding does; place had priced every strategy under auto at zero1
    on_workers = backend == "auto" and framework in ("verl", "nemo-rl")
    fsdp = (framework == "verl" and degrees.get("tp", 1) == 1) or (framework == "nemo-rl" and "pp" not in degrees)
    own = "zero1" if on_workers and not fsdp else {"openrlhf": "zero2", "deepspeed-chat": "none", "verl": "zero3",
                                                   "nemo-rl": "zero3"}.get(framework, "zero1")
    e, vertex, cost, shape = _pair(DENSE, framework, sharding=None, backend=backend, **degrees)
    if own == "zero3" and not on_workers:   # estimate's auto resolves the strategy to those workers: the same layout
        auto = estimate(shape, "h100-sxm", "train", seq_len=2048, framework=framework, recompute="none", **degrees)
        assert (auto.inputs["trainer_backend_resolved"], auto.inputs["sharding"], auto.time_s) == (
            "fsdp", "zero3", e.time_s)
    held = cost.for_role("actor").options(shape)
    # under auto the config holds zero1 and follows the backend; a forced backend or another trainer resolves it
    assert (held.sharding, held.sharding_follows_backend) == (("zero1", True) if on_workers else (own, False))
    assert e.inputs["sharding"] == backend_sharding(held, fsdp).sharding == own
    assert DEFAULT_TRAINING.sharding == "zero1"
    pp = degrees.get("pp", 1)
    if pp == 1:
        assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=REL)
    dp, tp = degrees.get("dp", 1), degrees.get("tp", 1)
    if pp > 1:   # the stage times pp plus the update is the vertex's train (module docstring)
        sync = cost.gradient_sync_seconds(shape, dp, pp, tp, (1, 1, dp * pp * tp))
        stage = e.time_s - e.parts["optimizer"] - sync - e.parts["overhead"]
        assert vertex["train"] == pytest.approx(pp * stage + e.parts["optimizer"] + sync, rel=REL)
    assert e.parts["optimizer"] == pytest.approx(_swiglu(e, shape) * cost.adam_seconds(shape, dp, pp, tp), rel=REL)
    if (framework, degrees) == ("none", {"dp": 4}):
        assert e.time_s == pytest.approx(0.1679, abs=5e-5)
    # estimate's default is the one place reads: the explicit value is the same estimate
    assert estimate(shape, "h100-sxm", "train", seq_len=2048, framework=framework, sharding=own,
                    recompute="none", trainer_backend=backend, **degrees).time_s == e.time_s


# ZeRO-3 / FSDP full shard (sharding zero3): (framework, degrees, recompute, backend, the backend place resolves)
ZERO3 = [
    ("verl", {"dp": 4}, "none", "auto", "fsdp"),                  # verl's FSDP workers
    ("verl", {"dp": 4, "mb": 2}, "full", "fsdp", "fsdp"),
    ("nemo-rl", {"dp": 8}, "selective", "fsdp", "fsdp"),          # NeMo RL's DTensor policy (FSDP2)
    ("nemo-rl", {"tp": 2, "dp": 2}, "full", "auto", "fsdp"),      # with tensor parallelism
    ("openrlhf", {"dp": 4}, "full", "auto", "deepspeed"),        # DeepSpeed ZeRO-3, its per-module gathers
    ("deepspeed-chat", {"dp": 4}, "none", "auto", "deepspeed"),
    ("none", {"dp": 4}, "selective", "auto", "none"),            # a PyTorch trainer's FSDP
]


@pytest.mark.parametrize("framework, degrees, recompute, backend, resolved", ZERO3)
def test_a_zero3_training_pass_is_the_evaluators_vertex(framework, degrees, recompute, backend, resolved):
    # estimate had refused zero3 ("zero3 gathers every layer's weights per micro-batch, which estimate does not
    # price") and priced verl's FSDP / NeMo RL's DTensor workers at zero1 when unset; now it prices the vertex
    # place prices for training.sharding zero3: no step-end gradient all-reduce (the reduce-scatter runs every
    # micro-batch), and the per-micro-batch collectives' exposed part, which the vertex holds in memory_options
    e, vertex, cost, shape = _pair(DENSE, framework, recompute=recompute, backend=backend, sharding="zero3",
                                   **degrees)
    assert (e.inputs["sharding"], e.inputs["trainer_backend_resolved"]) == ("zero3", resolved)
    assert cost.for_role("actor").options(shape).sharding == "zero3"
    assert e.time_s == pytest.approx(vertex["train"] + vertex["memory_options"] + vertex["overhead"], rel=REL)
    rate = PYTORCH_TRAIN_FRACTION if e.inputs["pass_kernels"] == "hf" else 1.0
    recomputed = e.parts.get("recompute", 0.0) / (rate if recompute == "full" else 1.0)
    assert vertex["memory_options"] == pytest.approx(recomputed + e.parts["zero3_collectives"], rel=REL)
    dp, tp = degrees["dp"], degrees.get("tp", 1)
    # the update: Adam on the rank's 1/dp share; of the step-end sync only a tied head's all-reduce at pp > 1
    # (none here), not the data-parallel gradient all-reduce
    assert e.parts["optimizer"] == pytest.approx(cost.adam_seconds(shape, dp, 1, tp), rel=REL)
    assert cost.gradient_sync_seconds(shape, dp, 1, tp, (1, 1, dp * tp), gradient_allreduce=False) == 0.0
    zero1, _, _, _ = _pair(DENSE, framework, recompute=recompute, sharding="zero1",
                           backend="auto" if backend == "fsdp" else backend, **degrees)
    assert zero1.parts["communication"] - e.parts["communication"] == pytest.approx(
        cost.gradient_sync_seconds(shape, dp, 1, tp, (1, 1, dp * tp)), rel=1e-9)


def test_the_zero3_collectives_are_the_edges_the_layers_do_not_hide():
    # hand check, Qwen2.5-1.5B (P = 1,543,714,304, 28 layers) on 4 H100s of one node, verl FSDP: per micro-batch an
    # all-gather of the bf16 weights a = 3·(1 µs + 2P/4 / 360 GB/s) and a reduce-scatter of the fp32 gradients
    # r = 3·(1 µs + 4P/4 / 360 GB/s), 19.3 ms in all, well under the passes' 0.15 s: all but the first layer's
    # gather and the last one's reduce-scatter hide behind the compute, (a + r)/28 = 0.689 ms
    e, _, _, shape = _pair(DENSE, "verl", sharding="zero3", dp=4)
    assert shape.params == 1_543_714_304 and shape.layers == 28
    a = 3 * (1e-6 + 2 * shape.params / 4 / 360e9)
    r = 3 * (1e-6 + 4 * shape.params / 4 / 360e9)
    assert e.parts["zero3_collectives"] == pytest.approx((a + r) / 28, rel=1e-9)
    assert e.parts["zero3_collectives"] == pytest.approx(0.000689, abs=5e-7)
    # one data-parallel rank shards nothing: no collectives
    assert "zero3_collectives" not in estimate(shape, "h100-sxm", "train", seq_len=2048, framework="verl",
                                               sharding="zero3").parts


@pytest.mark.parametrize("framework, degrees", [
    ("verl", {"dp": 4}), ("nemo-rl", {"dp": 8}), ("nemo-rl", {"tp": 2, "dp": 2}), ("openrlhf", {"dp": 4}),
    ("deepspeed-chat", {"dp": 4}),
])
def test_a_zero3_log_prob_pass_is_the_evaluators_forward_and_gather(framework, degrees):
    # the actor's old log-probs on its ZeRO-3 / FSDP-partitioned weights: the forward, and the all-gather of the
    # weights once per micro-batch less what the framework's prefetch hides behind it (verl, NeMo RL: FSDP's;
    # DeepSpeed's per-module prefetch where its fetch settings keep ahead), the vertex's gather; dp counts here
    _, vertex, cost, shape = _pair(DENSE, framework, sharding="zero3", **degrees)
    assert "gather" in vertex and vertex["gather"] > 0
    infer = estimate(shape, "h100-sxm", "infer", seq_len=2048, framework=framework, sharding="zero3", **degrees)
    assert infer.inputs["sharding"] == "zero3"
    assert infer.parts["gather"] == pytest.approx(vertex["gather"], rel=REL)
    assert infer.time_s - infer.parts["overhead"] == pytest.approx(vertex["old_log_prob"] + vertex["gather"],
                                                                   rel=REL)
    if framework in ("verl", "nemo-rl"):   # unset on the FSDP / DTensor workers: their zero3
        unset = estimate(shape, "h100-sxm", "infer", seq_len=2048, framework=framework, **degrees)
        assert unset.inputs["sharding"] == "zero3" and unset.time_s == infer.time_s


def test_a_zero3_log_prob_pass_gathers_what_the_compute_does_not_hide():
    # hand check, verl FSDP on 4 H100s: the gather of the bf16 weights a = 3·(1 µs + 2P/4 / 360 GB/s) = 6.44 ms
    # under a forward of 33.9 ms; FSDP's prefetch hides all but the first layer's, a/28 = 0.230 ms
    params = estimate("qwen2.5-1.5b", "h100-sxm", "infer").inputs["params"]
    infer = estimate(DENSE, "h100-sxm", "infer", seq_len=2048, framework="verl", dp=4)   # unset: zero3
    assert infer.parts["gather"] == pytest.approx(3 * (1e-6 + 2 * params / 4 / 360e9) / 28, rel=1e-9)
    # the memory: a quarter of the fp32 shard (verl's FSDP workers' fp32 parameters) and the gathered bf16 units
    assert 4.0 * params / 4 < infer.memory["weights"] < 2.0 * params


@pytest.mark.parametrize("kwargs, message", [
    ({"framework": "verl", "dp": 4, "trainer_backend": "fsdp", "sharding": "zero1"},
     "sharding: 'zero1' is not a sharding verl's FSDP workers run: they run zero3"),
    ({"framework": "nemo-rl", "dp": 4, "trainer_backend": "fsdp", "sharding": "none"},
     "sharding: 'none' is not a sharding nemo-rl's DTensor policy (FSDP2) run: they run zero3"),
    ({"framework": "verl", "dp": 2, "tp": 2, "sharding": "zero3"},   # zero3 keeps verl on FSDP, which has no TP
     "tp / pp / ep: 2 / 1 / 1 is a strategy verl's trainer does not run (trainer_backend auto: its fsdp workers)"),
    ({"framework": "nemo-rl", "dp": 2, "trainer_backend": "megatron", "sharding": "zero3"},
     "sharding: 'zero3' is not a sharding nemo-rl's Megatron workers run"),
    ({"framework": "openrlhf", "dp": 2, "tp": 2, "sharding": "zero3"},
     "tp / pp / ep: 2 / 1 / 1 is a strategy openrlhf's trainer does not run: DeepSpeed's tensor parallelism"),
    ({"framework": "verl", "dp": 4, "sharding": "zero3", "optimizer": "none"},
     "sharding: zero3 with optimizer none: ZeRO-1/2 partition the optimizer's state (ZeRO-2 also its gradients, "
     "ZeRO-3 its weights too)"),
])
def test_a_zero3_layout_the_trainer_does_not_run_is_refused(kwargs, message):
    with pytest.raises(ConfigError) as info:
        estimate("qwen2.5-1.5b", "h100-sxm", "train", **kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_a_zero3_forward_where_place_runs_none_is_refused():
    with pytest.raises(ConfigError, match=r"^sharding: zero3 for task infer prices a forward on a ZeRO-3 trainer's "
                                          r"partitioned weights, which framework none's forwards never run on"):
        estimate("qwen2.5-1.5b", "h100-sxm", "infer", dp=4, sharding="zero3")
    with pytest.raises(ConfigError, match=r"^sharding: 'zero3' is not a sharding verl's Megatron workers run"):
        estimate("qwen2.5-1.5b", "h100-sxm", "infer", dp=2, framework="verl", trainer_backend="megatron",
                 sharding="zero3")
    # an unsharded forward keeps its per-replica rule (dp counts only where it changes a figure)
    with pytest.raises(ConfigError, match=r"^dp: 4 changes nothing for task infer at pp 1"):
        estimate("qwen2.5-1.5b", "h100-sxm", "infer", dp=4, framework="openrlhf")


def test_a_pipelined_zero3_pass_is_the_evaluators_stage_times_pp_plus_the_collectives():
    # framework none's PyTorch trainer at pp 2, zero3: the vertex's train is pp stages plus the update (no
    # data-parallel all-reduce; the tied head's embedding all-reduce between the first and last stage stays), its
    # memory_options pp recompute stages plus the step's exposed collectives
    e, vertex, cost, shape = _pair(DENSE, "none", recompute="selective", sharding="zero3", pp=2, dp=2)
    assert e.parts["zero3_collectives"] > 0 and shape.tie_word_embeddings
    tied = cost.gradient_sync_seconds(shape, 2, 2, 1, (1, 1, 4), gradient_allreduce=False)
    assert tied > 0
    stage = (e.time_s - e.parts["optimizer"] - tied - e.parts["recompute"] - e.parts["zero3_collectives"]
             - e.parts["overhead"])
    assert vertex["train"] == pytest.approx(2 * stage + e.parts["optimizer"] + tied, rel=REL)
    assert vertex["memory_options"] == pytest.approx(2 * e.parts["recompute"] + e.parts["zero3_collectives"],
                                                     rel=REL)
