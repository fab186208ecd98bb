"""Load and validate a placement config (YAML sections ``hardware``, ``models``, ``workload``,
``policy``, ``optimizer``) into a :class:`PlacementInstance`.

Every problem is a :class:`~packplace.errors.ConfigError` with a one-line message that starts with
``[section] field``. Bare scientific notation such as ``989e12`` loads as a float (plain PyYAML would
read it as a string).

Every field has a range contract (:class:`packplace.contract.Field`: type, unit, minimum, maximum or
allowed values) in one table per section: :data:`CLUSTER_FIELDS` and :data:`HARDWARE_FIELDS`
(``[hardware]``), :data:`WORKLOAD_FIELDS`,
:data:`POLICY_FIELDS` and :data:`OPTIMIZER_KNOBS`. To add a field, add its row to the table of its
section; the loader checks it, fills its default and docs/config-reference.md lists it. Checked at load, before
any work: unknown fields are errors in every section, booleans are ``true``/``false`` only, and sizes
are bounded up front with the estimate (:data:`MAX_GPUS` GPUs, :data:`MAX_SEQUENCES` sequences per
step, :data:`MAX_STALENESS` steps of staleness). Model shapes are checked by
:func:`packplace.shape.shape_from_mapping`. Cross-field rules: ``gen_quantiles`` within ``generation_length``,
``t_min <= t_init``, staleness only for models the algorithm trains, every model role the algorithm
needs and no other (both from :data:`packplace.placement.problem.graph.RL_ALGORITHMS`).
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packplace.contract import Field, check_count, check_section, key_shown
from packplace.errors import ConfigError, FrameworkVersionWarning, KnobAboveBoundWarning, show, show_setting
from packplace.placement.checking.knob_bounds import above_bound_messages
from packplace.placement.model.cp_balance import ContextParallelSetting
from packplace.placement.model.dp_balance import BALANCE_CHOICES, BALANCE_OBJECTIVES, BalanceSetting
from packplace.placement.model.engine import (
    BATCHING,
    DEFAULT_MAX_NUM_SEQS,
    DISPATCH,
    RolloutEngine,
)
from packplace.placement.model.framework import (
    DEFAULT_FRAMEWORK,
    FRAMEWORK_NAMES,
    INFERENCE_OFFLOAD,
    VERL_ENGINE_AWAKE_SINCE,
    VERL_REMOVE_PADDING_SINCE,
    VERL_REWARD_ENGINE_SINCE,
    VersionDefaults,
    default_gpu_memory_utilization,
    engine_takes_model_context,
    engine_vllm_release,
    host_seconds_per_sequence,
    newer_than_known,
    parse_version,
    profile,
    table_release,
    trainer_recompute,
    version_defaults,
)
from packplace.placement.model.layout_rules import (
    MEGATRON_FIELDS,
    OPENRLHF_VLLM_SLEEP,
    TRAINER_BACKENDS,
    Context,
    check_config,
    fp32_params_refusal,
    megatron_field_refusal,
    release_staleness,
    release_staleness_note,
    sequence_parallel_refusal,
)
from packplace.placement.model.memory import OFFLOAD, RECOMPUTE, ROUTER_DTYPES, SHARDING, TrainingOptions, lora_params
from packplace.placement.model.nemo_rl_releases import release_for
from packplace.placement.model.sequence_packing import packing_refusal
from packplace.placement.model.stages import resolved_sharding
from packplace.placement.problem.graph import (
    RL_ALGORITHMS,
    StepGraph,
    algorithm_spec,
    all_roles,
    all_staleness_keys,
    build_graph,
)
from packplace.placement.problem.hardware import (
    CLUSTER_DEFAULTS,
    COMPONENT_TABLES,
    HARDWARE_DEFAULTS,
    Cluster,
    Hardware,
    resolve_preset,
)
from packplace.placement.problem.models import LM_ROLES, ModelSpec
from packplace.placement.problem.workload import RULE_VERIFIER_SECONDS, RuleReward, Workload, rule_verifier_for
from packplace.shape import from_hf_config, shape_from_mapping, warn_past_position_limit
from packplace.yamlio import load_yaml as _shared_load_yaml

WORKLOAD_REQUIRED = ("batch_size", "samples_per_prompt", "context_length", "generation_length")
WORKLOAD_OPTIONAL = ("gen_quantiles",)
#: Most GPUs a cluster may have (racks · nodes_per_rack · gpus_per_node).
MAX_GPUS = 65_536
#: Upper limit of ``batch_size · samples_per_prompt`` (sequences per step).
MAX_SEQUENCES = 10**12
#: Largest staleness (steps) the optimizer may choose; the asynchronous period unrolls ``1 + staleness``
#: steps of the graph.
MAX_STALENESS = 16
#: Fields of ``[hardware]`` that shape the device grid.
CLUSTER_FIELDS: dict[str, Field] = {
    "racks": Field("int", "racks", 1, 4096, meaning="racks"),
    "nodes_per_rack": Field("int", "nodes", 1, 4096, meaning="nodes per rack"),
    "gpus_per_node": Field("int", "GPUs", 1, 72, meaning="GPUs per node (one NVLink domain: 72 on a GB200 NVL72)"),
    "gpus_per_host": Field("int", "GPUs", 1, 72, default=CLUSTER_DEFAULTS["gpus_per_host"],
                           meaning="GPUs of one host, what a job launcher calls a node (a GB200 tray: 4); divides "
                                   "gpus_per_node (default: gpus_per_node)"),
}
_ALPHA = "latency of one step of a {what} {level}"
_BETA = "inverse bandwidth of a {what} {level}"
_LEVELS = {"g": "inside a node", "n": "across nodes of a rack", "r": "across racks"}
#: Least ``memory_bandwidth`` (bytes/s) accepted: 100 GB/s, under a third of the slowest data-center GPU memory a
#: training framework runs on (NVIDIA T4 datasheet: 320 GB/s GDDR6), so that a figure in MB/s or GB/s (3.35e6,
#: 3350 for an H100's 3.35e12) is refused naming the field instead of pricing every step at months.
MIN_MEMORY_BANDWIDTH = 1e11
#: Per-GPU figures, α–β link model and efficiency knobs of ``[hardware]`` (every :class:`Hardware` field;
#: defaults from :data:`HARDWARE_DEFAULTS`; a ``preset`` fills fields before they are checked). Minimum
#: 1e6 of the figures (``memory_bandwidth``: :data:`MIN_MEMORY_BANDWIDTH`): smaller values are not a GPU and
#: only make every predicted time astronomically large. A new hardware field needs a row here (a test checks
#: that every field has one).
HARDWARE_FIELDS: dict[str, Field] = {
    "flops_per_gpu": Field("float", "FLOP/s", 1e6, 1e18, meaning="peak dense bf16 throughput"),
    "memory_per_gpu": Field("float", "bytes", 1e6, 1e15,
                            meaning="the GPU's memory as CUDA reports it (torch.cuda.mem_get_info total)"),
    "memory_bandwidth": Field("float", "bytes/s", MIN_MEMORY_BANDWIDTH, 1e16, meaning="HBM bandwidth"),
    **{f"{kind}_{what}_{level}": Field("float", "s" if kind == "alpha" else "s/byte", 0, 1,
                                       meaning=(_ALPHA if kind == "alpha" else _BETA).format(
                                           what="collective" if what == "coll" else "point-to-point transfer",
                                           level=where))
       for what in ("coll", "p2p") for level, where in _LEVELS.items() for kind in ("alpha", "beta")},
    "gemm_m_half": Field("float", "64 rows", 0, 1e6, default=HARDWARE_DEFAULTS["gemm_m_half"],
                         meaning="GEMM rows at which a GEMM reaches half its ceiling"),
    "gemm_k_half": Field("float", "64 columns", 0, 1e6, default=HARDWARE_DEFAULTS["gemm_k_half"],
                         meaning="inner dimension at which a GEMM reaches half its ceiling"),
    "gemm_peak_fraction": Field("float", "", 1e-3, 1,
                                default=HARDWARE_DEFAULTS["gemm_peak_fraction"],
                                meaning="fraction of flops_per_gpu a large GEMM sustains"),
    "decode_bw_eff": Field("float", "", 1e-3, 1, default=HARDWARE_DEFAULTS["decode_bw_eff"],
                           meaning="fraction of memory_bandwidth a decode step achieves"),
    "non_gemm_constant": Field("float", "s", 0, 10, default=HARDWARE_DEFAULTS["non_gemm_constant"],
                               meaning="seconds per layer per micro-batch outside GEMMs"),
    "non_gemm_scaling": Field("float", "s", 0, 10, default=HARDWARE_DEFAULTS["non_gemm_scaling"],
                              meaning="seconds per layer per non_gemm_batch_cal tokens outside GEMMs"),
    "non_gemm_batch_cal": Field("float", "tokens", 1, 1e9,
                                default=HARDWARE_DEFAULTS["non_gemm_batch_cal"],
                                meaning="token count at which non_gemm_scaling was calibrated"),
    "host_bandwidth": Field("float", "bytes/s", 1e6, 1e13,
                            default=HARDWARE_DEFAULTS["host_bandwidth"],
                            meaning="host-GPU (PCIe) bandwidth per GPU, one direction (sleep/wake, offload)"),
    "decode_step_overhead": Field("float", "s", 0, 10, default=HARDWARE_DEFAULTS["decode_step_overhead"],
                                  meaning="seconds added to every decode step of a generation engine "
                                          "(unset: the framework engine's)"),
    "phase_overhead": Field("float", "s", 0, 3600, default=HARDWARE_DEFAULTS["phase_overhead"],
                            meaning="seconds added once to every task of the step"),
    "weight_sync_overhead": Field("float", "s", 0, 3600, default=HARDWARE_DEFAULTS["weight_sync_overhead"],
                                  meaning="seconds added to every trainer-to-engine weight synchronisation"),
    "inprocess_host_per_sequence": Field("float", "s", 0, 1, default=HARDWARE_DEFAULTS["inprocess_host_per_sequence"],
                                         meaning="host seconds per running sequence an in-process engine adds to "
                                                 "every synchronous decode iteration (NeMo RL)"),
    "moe_decode_bw_eff": Field("float", "", 0, 1, default=HARDWARE_DEFAULTS["moe_decode_bw_eff"],
                               meaning="fraction of memory_bandwidth a decode step streams routed experts at "
                                       "(0: decode_bw_eff)"),
    "moe_gemm_peak_fraction": Field("float", "", 0, 1, default=HARDWARE_DEFAULTS["moe_gemm_peak_fraction"],
                                    meaning="ceiling of the routed experts' GEMM efficiency in training and "
                                            "log-prob passes (0: gemm_peak_fraction)"),
    "megatron_pass_factor": Field("float", "", 0.5, 2, default=HARDWARE_DEFAULTS["megatron_pass_factor"],
                                  meaning="time factor on the component table's Megatron-Core pass kernels "
                                          "(published pre-training step over the model's; 1: the table)"),
    "vllm_kv_bandwidth_fraction": Field("float", "", 0.01, 1, default=HARDWARE_DEFAULTS["vllm_kv_bandwidth_fraction"],
                                        meaning="fraction of its kernels' KV-read rate (the component table's "
                                                "kv_bandwidth, or the knob model's memory_bandwidth x "
                                                "decode_bw_eff for a mixture of experts) at which a vLLM "
                                                "engine's decode iteration reads the KV cache"),
    "component_table": Field("enum", "", choices=COMPONENT_TABLES, default=HARDWARE_DEFAULTS["component_table"],
                             meaning="kernel-by-kernel table (measured h200; h100-sxm, b200, gb200 derived from "
                                     "it) pricing dense passes and decode steps (none: the efficiency knobs)"),
    "memory_workspace": Field("float", "bytes", 0, 1e11, default=HARDWARE_DEFAULTS["memory_workspace"],
                              meaning="bytes per GPU a process holds beyond its tensors (cuBLAS workspaces)"),
}
#: Fields of ``[workload]`` (``gen_quantiles`` is structured, checked by the loader). The length limits:
#: beyond them the model is meaningless (no GPU holds such a sequence) and they keep the candidate
#: enumeration and the decode sums bounded.
WORKLOAD_FIELDS: dict[str, Field] = {
    "batch_size": Field("int", "prompts", 1, MAX_SEQUENCES, meaning="prompts per step"),
    "samples_per_prompt": Field("int", "responses", 1, MAX_SEQUENCES,
                                meaning="responses per prompt (dpo: 2, the chosen and the rejected one)"),
    "context_length": Field("int", "tokens", 1, 10_000_000, meaning="prompt tokens"),
    "generation_length": Field("int", "tokens", 1, 10_000_000, meaning="longest response, tokens"),
}
#: Fields of ``[policy]``.
POLICY_FIELDS: dict[str, Field] = {
    "algorithm": Field("enum", choices=tuple(RL_ALGORITHMS), default=next(iter(RL_ALGORITHMS)),
                       meaning="RL algorithm of the step"),
    "batching": Field("enum", choices=BATCHING, default="continuous", meaning="rollout engine batching"),
    "dispatch": Field("enum", choices=DISPATCH, default="rounds",
                      meaning="with batching: static, static batches per replica in rounds, or a work queue "
                              "handing each to the first free replica"),
    "max_num_seqs": Field("int", "sequences", 1, 1_000_000, default=DEFAULT_MAX_NUM_SEQS,
                          meaning="sequences a continuous-batching engine decodes at once (not with batching: static)"),
    "gpu_memory_utilization": Field("float", "", 0, 1, exclusive_minimum=True, default=None,
                                    meaning="fraction of a GPU the rollout engine reserves (unset: the framework's "
                                            "default at its framework_version: verl 0.5, rollout.yaml / "
                                            "ppo_trainer.yaml v0.1-v0.7; nemo-rl 0.6, grpo_math_1B.yaml "
                                            "v0.1-v0.7; openrlhf 0.95 from v0.6.4, 0.9 before, train_ppo_ray.py "
                                            "--vllm_gpu_memory_utilization; none and deepspeed-chat vLLM's "
                                            "EngineArgs 0.9)"),
    "enforce_eager": Field("bool", default=None,
                           meaning="vLLM's enforce_eager: no CUDA graphs, every decode iteration issues each "
                                   "kernel from the host (unset: the framework's default)"),
    "engine_sleeps": Field("bool", default=None,
                           meaning="the vLLM rollout engine sleeps between its generate calls where it shares GPUs "
                                   "(LLM.sleep: weights to the host, KV cache freed), so other tasks there are not "
                                   "charged its weights and pool; false: it stays awake, holding both beside every "
                                   "task on its GPUs (unset: the framework's: verl true, rollout.free_cache_engine, "
                                   "false refused at a framework_version before 0.5.0: no switch keeps it awake; "
                                   "nemo-rl true, colocated generation, false refused: NeMo RL has no switch; "
                                   "openrlhf false unless the run passes --vllm_enable_sleep, true refused at a "
                                   "framework_version before 0.5.8; none false; refused for deepspeed-chat, no vLLM "
                                   "engine)"),
    "framework": Field("enum", choices=FRAMEWORK_NAMES, default=DEFAULT_FRAMEWORK,
                       meaning="RL framework whose execution profile runs the step (none: the model's own mechanics)"),
    "framework_version": Field("str", default=None,
                               meaning="release of the framework that ran (e.g. 0.5.0, v0.5, 0.5.2-post1; PEP "
                                       "440 spellings, a pre-release read as its release): its own "
                                       "defaults for enforce_eager and the vLLM engine generation, and for nemo-rl "
                                       "v0.4+ the release's per-step settings (unset: the profile's current "
                                       "enforce_eager and engine generation, and no release's per-step settings: "
                                       "none of the nemo-rl release table is applied, and force_on_policy_ratio "
                                       "is refused)"),
    "force_on_policy_ratio": Field("bool", default=False,
                                   meaning="nemo-rl loss_fn.force_on_policy_ratio: the policy ratio is forced to 1 "
                                           "and, from framework_version 0.7.0, the previous-policy log-prob pass "
                                           "is skipped, while 0.6.0 still runs it (needs one optimizer step per "
                                           "step and a framework_version)"),
    "inference_offload": Field("enum", choices=tuple(INFERENCE_OFFLOAD), default="none",
                               meaning="inference-only models whose weights stay in host memory between forwards"),
    "train_mb_tokens": Field("int", "tokens", 1, 10_000_000, default=None,
                             meaning="nemo-rl sequence packing: tokens per training pack "
                                     "(policy.sequence_packing.train_mb_tokens; unset: micro-batches of the plan's "
                                     "sequences)"),
    "logprob_mb_tokens": Field("int", "tokens", 1, 10_000_000, default=None,
                               meaning="nemo-rl sequence packing: tokens per log-prob pack (old policy, reference; "
                                       "policy.sequence_packing.logprob_mb_tokens); set with train_mb_tokens"),
    "ppo_max_token_len_per_gpu": Field("int", "tokens", 1, 10_000_000, default=None,
                                       meaning="verl dynamic batch size (actor.use_dynamic_bsz): tokens per "
                                               "training micro-batch per GPU (actor.ppo_max_token_len_per_gpu; "
                                               "unset: micro-batches of the plan's sequences)"),
    "log_prob_max_token_len_per_gpu": Field("int", "tokens", 1, 10_000_000, default=None,
                                            meaning="verl dynamic batch size: tokens per log-prob micro-batch per "
                                                    "GPU (rollout / ref log_prob_max_token_len_per_gpu); set with "
                                                    "ppo_max_token_len_per_gpu"),
    "entropy_coeff": Field("float", "", 0, 1e6, default=0.0,
                           meaning="the entropy bonus's coefficient in the actor's loss (verl actor.entropy_coeff): "
                                   "above 0 the loss's backward also carries the entropy's gradient over the "
                                   "vocabulary, so the logits take the model's default bytes"),
    "ulysses_sequence_parallel_size": Field("int", "ranks", 1, 1024, default=None,
                                            meaning="verl Ulysses sequence parallelism of the actor's passes: with "
                                                    "the dynamic batch size, a micro-batch's tokens are sliced "
                                                    "over this many GPUs, each attention layer adding its "
                                                    "all-to-alls (set with ppo_max_token_len_per_gpu)"),
    "use_remove_padding": Field("bool", default=None,
                                meaning="verl actor_rollout_ref.model.use_remove_padding (and critic.model.): true, "
                                        "each FSDP pass holds its micro-batch's real tokens; false, every sequence "
                                        "padded to context_length + generation_length; unset: verl's default at "
                                        "framework_version (false before 0.7.0 and without a version; true from "
                                        "0.7.0 for the actor and reference, false for the critic; true with "
                                        "ulysses_sequence_parallel_size above 1, which verl requires); verl only"),
    "reward_use_remove_padding": Field("bool", default=None,
                                       meaning="verl reward_model.model.use_remove_padding: true, the reward model's "
                                               "FSDP forward holds its micro-batch's real tokens; false or unset "
                                               "(verl's default at every release), every sequence padded to "
                                               "context_length + generation_length; verl only, true with a reward "
                                               "model and a framework_version from 0.2 before 0.7.0 (from 0.7.0 the "
                                               "model prices the reward model as the reward loop's vLLM engine, "
                                               "verl's default use_reward_loop: true, which does not read the key; "
                                               "the legacy worker of use_reward_loop: false is not modelled)"),
    "trainer_backend": Field("enum", choices=TRAINER_BACKENDS, default="auto",
                             meaning="verl / NeMo RL trainer workers (or framework none): fsdp (NeMo RL DTensor), "
                                     "megatron, or auto (chosen by the plan; verl with context_parallel: megatron); "
                                     "refused for OpenRLHF / DeepSpeed-Chat"),
}
#: Options of ``[training]`` (for every trained model, or per model under ``actor:`` / ``critic:``);
#: formulas and sources in :mod:`packplace.placement.model.memory` and :mod:`packplace.placement.model.training_time`.
TRAINING_FIELDS: dict[str, Field] = {
    "sharding": Field("enum", choices=SHARDING, default=None,
                      meaning="training state sharding over data parallel ranks (zero3 = FSDP full shard); unset: the "
                              "trainer's own (verl / NeMo RL FSDP zero3, Megatron zero1, under auto each strategy "
                              "its workers' own: zero3 on FSDP / DTensor, zero1 on Megatron; OpenRLHF zero2, "
                              "DeepSpeed-Chat none, else zero1)"),
    "recompute": Field("enum", choices=RECOMPUTE, default=None,
                       meaning="activation recomputation (selective: the attention core; full: every layer); unset: "
                               "the trainer's own (verl's FSDP workers full from v0.2, model."
                               "enable_gradient_checkpointing: true; selective elsewhere, verl under trainer_backend "
                               "auto included; framework.trainer_recompute)"),
    "offload": Field("enum", choices=OFFLOAD, default="none",
                     meaning="training state kept in host memory, moved at host_bandwidth"),
    "fp32_grad_buffer": Field("bool", default=None,
                              meaning="fp32 gradient accumulation buffer (4 bytes/param); unset: the trainer's "
                                      "(Megatron-Core: verl and Megatron-LM fp32, NeMo RL bf16; "
                                      "stages.trainer_defaults)"),
    "fp32_params": Field("bool", default=None,
                         meaning="fp32 parameters and gradients beside the two fp32 Adam moments (4 + 4 + 8 "
                                 "bytes/param) instead of bf16 ones beside a 12-byte master and moments (verl FSDP "
                                 "fsdp_config.model_dtype); unset: the trainer's (verl FSDP and NeMo RL DTensor "
                                 "fp32 at zero3, their one sharding; a zero1 / none layout and every other "
                                 "trainer priced bf16; stages.trainer_fp32_params); verl FSDP only (NeMo RL "
                                 "DTensor: true only)"),
    "sequence_parallel": Field("bool", default=None,
                               meaning="Megatron sequence parallelism of a tensor-parallel trainer (false: the norms "
                                       "and linear inputs whole on every TP rank); unset: the trainer's (verl "
                                       "Megatron true; NeMo RL, Megatron-LM and the rest false)"),
    "lora_rank": Field("int", "rank", 0, 65536, default=0,
                       meaning="LoRA adapters of this rank on every linear of the blocks, base matrices frozen "
                               "(0 = full-parameter training)"),
    "optimizer_steps": Field("int", "steps", 1, 65536, default=1,
                             meaning="optimizer steps per RL step: the sequences split into that many global batches "
                                     "(NeMo RL step sequences / train_global_batch_size; verl mini-batches)"),
    "fsdp_size": Field("int", "ranks", 1, 65536, default=None,
                       meaning="ranks the training state shards over (verl actor.fsdp_config.fsdp_size: hybrid "
                               "shard, replicated across groups: weights gathered and gradients reduce-scattered "
                               "inside a group, all-reduced across them; unset: every data-parallel rank)"),
    "balance": Field("enum", choices=BALANCE_CHOICES, default="framework",
                     meaning="data-parallel split of every pass over the rollouts (framework: verl kk, nemo-rl lpt, "
                             "else none = contiguous; lpt/kk/repair: that balance solver)"),
    "balance_objective": Field("enum", choices=BALANCE_OBJECTIVES, default="makespan",
                               meaning="what the balance solver evens out: rank totals or per-micro-batch maxima"),
    "context_parallel": Field("int", "ranks", 1, 65536, default=1,
                              meaning="CP degree C: each sequence split over C of the trainer's dp ranks (C divides "
                                      "dp; Megatron-Core context_parallel_size), costed by the context_parallel "
                                      "planner; 1 = none"),
    "dynamic_context_parallel": Field("bool", default=False,
                                      meaning="CP groups sized per micro-batch from the pooled dp ranks "
                                              "(Megatron-Core dynamic CP), planned by packplace"),
    "max_tokens_per_rank": Field("int", "tokens", 1, 2**40, default=None,
                                 meaning="CP token cap per rank (Megatron's max_seqlen_per_dp_cp_rank); default the "
                                         "longest sequence / context_parallel"),
    "bias_activation_fusion": Field("bool", default=None,
                                    meaning="a Megatron-Core trainer's bias_activation_fusion (NeMo RL "
                                            "policy.megatron_cfg): true, the fused SwiGLU keeps 6f saved bytes per "
                                            "token and expert; false, 8f (10f per routed expert); unset: the "
                                            "release's (nemo_rl_releases.megatron_fuses_swiglu)"),
    "moe_router_dtype": Field("enum", choices=ROUTER_DTYPES, default=None,
                              meaning="a Megatron-Core trainer's moe_router_dtype (NeMo RL policy.megatron_cfg; bf16: "
                                      "unset in Megatron, the model's dtype): the bytes of the router's saved "
                                      "probabilities; unset: the release's (nemo-rl fp64, "
                                      "nemo_rl_releases.megatron_router_dtype)"),
}
#: ``[training]`` fields that set the data-parallel split (:mod:`packplace.placement.model.dp_balance`) and the
#: context parallelism (:mod:`packplace.placement.model.cp_balance`), not memory.
BALANCE_FIELDS = ("balance", "balance_objective", "context_parallel", "dynamic_context_parallel",
                  "max_tokens_per_rank")
#: Fields of a rule-based reward ``models.reward: {kind: rule, ...}`` (``models.reward: rule`` = defaults).
RULE_REWARD_FIELDS: dict[str, Field] = {
    "kind": Field("enum", choices=("rule",), meaning="a rule-based reward scored on CPU (no GPU model)"),
    "verifier": Field("enum", choices=tuple(RULE_VERIFIER_SECONDS), default=None,
                      meaning="the answer check (default: the framework's, workload.FRAMEWORK_RULE_VERIFIER)"),
    "seconds_per_sample": Field("float", "s", 0, 3600, default=None,
                                meaning="CPU seconds to score one response (default: the verifier's measured "
                                        "mean, workload.RULE_VERIFIER_SECONDS)"),
    "workers": Field("int", "processes", 1, 1_000_000, default=1, meaning="CPU processes scoring in parallel"),
}
#: Top-level sections of a placement config.
SECTIONS = ("hardware", "models", "workload", "policy", "optimizer", "training")
#: Knobs of the ``[optimizer]`` section other than ``staleness_candidates``. Ints accept an integral float
#: (YAML reads ``5e4`` as a float). Cross-field rule: ``t_min <= t_init``. Every knob is checked at config
#: load (:func:`validate_optimizer_knobs`) and the instance's ``optimizer`` holds all of them with
#: defaults filled, so backends read validated values; keyword overrides of ``packplace.place`` go
#: through the same function (:func:`resolve_optimizer_knobs`). The annealing knobs are used by
#: ``solvers/placement/anneal.py`` (its docstring explains them); ``k_eval`` by the candidate table, the
#: search pools and cpsat; ``progress_s`` by anneal and cpsat.
OPTIMIZER_KNOBS: dict[str, Field] = {
    "k_eval": Field("int", "candidates", 1, 1000, default=8,
                    meaning="candidates per vertex and block shape kept for search"),
    "t_init": Field("float", "", 1e-6, 100, default=0.30,
                    meaning="anneal: starting temperature (fraction of the current step time)"),
    "t_min": Field("float", "", 1e-6, 100, default=0.03,
                   meaning="anneal: final temperature (<= t_init)"),
    "t_warm": Field("float", "", 1e-6, 100, default=0.10,
                    meaning="anneal: reheat temperature of a restart from the best plan"),
    "e_max": Field("int", "plans", 1, 10**9, default=50_000,
                   meaning="anneal: evaluation budget (distinct plans scored)"),
    "e_struct": Field("int", "proposals", 1, 10**7, default=400, meaning="anneal: proposals per temperature level"),
    "stag_window": Field("int", "plateaus", 1, 10**6, default=20,
                         meaning="anneal: plateaus without a new best before a restart"),
    "hard_oom": Field("bool", default=True, meaning="anneal: out-of-memory plans are rejected (false: penalised)"),
    "oom_penalty": Field("float", "", 1e-6, 1e6, default=4.0,
                         meaning="anneal: penalty weight when hard_oom is false"),
    "polish": Field("bool", default=True, meaning="anneal: final greedy descent (at most e_max distinct plans)"),
    "progress_s": Field("float", "s", 1e-3, 1e6, default=3.0,
                        meaning="anneal, cpsat: seconds between progress lines on stderr"),
}
#: Default ``optimizer`` values (every knob of :data:`OPTIMIZER_KNOBS`).
OPTIMIZER_DEFAULTS = {name: spec.default for name, spec in OPTIMIZER_KNOBS.items()}
#: Every key the ``[optimizer]`` section may hold: the knobs and ``staleness_candidates``.
OPTIMIZER_KEYS = ("k_eval", "staleness_candidates") + tuple(k for k in OPTIMIZER_KNOBS if k != "k_eval")
#: Most points of ``[workload] gen_quantiles``.
MAX_QUANTILES = 1000
#: One staleness value.
STALENESS_FIELD = Field("int", "steps", 0, MAX_STALENESS)


@dataclass(frozen=True, eq=False)
class PlacementInstance:
    """A validated placement problem.

    Attributes:
        cluster: The device grid.
        hardware: Per-GPU figures and the α–β link model.
        models: Role → shape; always contains ``reference`` (= the actor's architecture).
        workload: Batch and response-length distribution.
        algorithm: ``ppo``, ``grpo``, ``dapo`` or ``dpo``.
        graph: The step graph of ``algorithm``.
        optimizer: The ``[optimizer]`` section, validated, every knob of :data:`OPTIMIZER_KNOBS` present
            (defaults filled), ``staleness_candidates`` as ``{model: (0, 1, ...)}``.
        source: Where it came from (a path or ``"<dict>"``).
        engine: The rollout engine's batching and memory budget (``policy.batching``,
            ``policy.max_num_seqs``, ``policy.gpu_memory_utilization``, unset: the framework's default at its
            release, :func:`~packplace.placement.model.framework.default_gpu_memory_utilization`).
        training: ``{model: TrainingOptions}`` of the trained models (``[training]``; defaults when absent).
        rule_reward: The rule-based reward (``models.reward: rule``), or ``None`` for a reward model.
        framework: ``policy.framework``, the execution profile
            (:data:`packplace.placement.model.framework.FRAMEWORKS`; default ``none``).
        inference_offload: ``policy.inference_offload``: ``none`` (default), ``reference`` or
            ``reference+reward`` keep those models' weights in host memory between forwards.
        balance: ``{model: BalanceSetting}`` of the trained models' data-parallel passes (``training.balance``,
            :mod:`packplace.placement.model.dp_balance`; key ``""``: the common setting; empty: the framework's).
        trainer_backend: ``policy.trainer_backend``: ``auto`` (default), ``fsdp`` or ``megatron``, the
            trainer workers of verl and NeMo RL (:mod:`packplace.placement.model.layout_rules`).
        framework_version: ``policy.framework_version``: the framework release that ran (its defaults for
            ``enforce_eager`` and the vLLM engine generation, already applied to ``engine``), or ``None``.
        sequence_packing: ``(policy.train_mb_tokens, policy.logprob_mb_tokens)``: NeMo RL's sequence packing of
            the policy workers' passes (:mod:`packplace.placement.model.sequence_packing`), or ``None``.
        dynamic_bsz: ``(policy.ppo_max_token_len_per_gpu, policy.log_prob_max_token_len_per_gpu,
            policy.ulysses_sequence_parallel_size)``: verl's dynamic batch size of the actor's passes
            (micro-batches by tokens, :meth:`~packplace.placement.model.cost.CostModel.pass_shape`), or ``None``.
        entropy_coeff: ``policy.entropy_coeff``: the actor's loss carries an entropy bonus when above 0
            (:func:`~packplace.placement.model.framework.trainer_logit_bytes`).
        use_remove_padding: ``policy.use_remove_padding`` (verl only), ``None`` where unset (verl's default at
            ``framework_version``: :func:`~packplace.placement.model.framework.verl_padded_roles`); true where
            unset with Ulysses sequence parallelism, which verl runs only with it.
        reward_use_remove_padding: ``policy.reward_use_remove_padding`` (verl only), ``None`` where unset: the
            reward model's forward unpads its micro-batches where true, else it runs them padded
            (:func:`~packplace.placement.model.framework.verl_padded_roles`).
        force_on_policy_ratio: ``policy.force_on_policy_ratio``: NeMo RL's ``loss_fn.force_on_policy_ratio``,
            which from v0.7.0 drops the previous-policy log-prob pass
            (:func:`~packplace.placement.model.nemo_rl_releases.skips_old_log_prob`).
        notes: One line per setting the loader narrowed to what the framework release runs (the config's
            ``staleness_candidates`` at an OpenRLHF release before ``--async_train`` or ``--async_queue_size``:
            :func:`~packplace.placement.model.layout_rules.release_staleness_note`); ``place`` adds them to its
            result's message and ``info["config_notes"]``.
    """

    cluster: Cluster
    hardware: Hardware
    models: Mapping[str, ModelSpec]
    workload: Workload
    algorithm: str
    graph: StepGraph
    optimizer: Mapping[str, Any]
    source: str = "<dict>"
    engine: RolloutEngine = field(default_factory=RolloutEngine)
    training: Mapping[str, TrainingOptions] = field(default_factory=dict)
    rule_reward: RuleReward | None = None
    framework: str = DEFAULT_FRAMEWORK
    inference_offload: str = "none"
    balance: Mapping[str, BalanceSetting] = field(default_factory=dict)
    trainer_backend: str = "auto"
    framework_version: str | None = None
    sequence_packing: tuple[int, int] | None = None
    dynamic_bsz: tuple[int, int, int] | None = None
    entropy_coeff: float = 0.0
    force_on_policy_ratio: bool = False
    use_remove_padding: bool | None = None
    reward_use_remove_padding: bool | None = None
    notes: tuple[str, ...] = ()
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_gpus(self) -> int:
        """GPUs in the cluster."""
        return self.cluster.num_gpus

    @property
    def k_eval(self) -> int:
        """Candidates per vertex kept for search."""
        return int(self.optimizer["k_eval"])


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML file with bare scientific notation as floats (:func:`packplace.yamlio.load_yaml`).

    Raises:
        ConfigError: ``path`` not a file path (``None``, a mapping, ...: named with its type), missing file, YAML
            syntax error, or a top level that is not a mapping.
    """
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise ConfigError(f"config path: expected a file path (str or os.PathLike), got {type(path).__name__} "
                          f"{path!r}" + ("; a parsed config mapping goes to build_instance"
                                         if isinstance(path, Mapping) else ""))
    data = _shared_load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"config: {str(path)!r} must be a mapping of sections, got {type(data).__name__}")
    return data


def load_config(path: str | Path, *, policy: Mapping[str, Any] | None = None) -> PlacementInstance:
    """Load and validate a placement YAML config.

    ``policy``: fields set in the config's ``[policy]`` before it is checked (``{"framework": "verl",
    "trainer_backend": "megatron"}``): what a plan file written by ``place --out`` records under
    ``params.policy`` (the framework and backend it was priced with, ``--emit`` / ``--trainer-backend``
    included), so ``load_config(config, policy=SolveResult.from_json(text).params.get("policy"))`` re-scores
    the plan as it was priced.

    Raises:
        ConfigError: ``config path: ...`` when ``path`` is not a file path (e.g. ``None``), else
            ``[section] field ...`` for the first missing or invalid field; ``[policy] ...`` for a ``policy``
            that is not a mapping.
    """
    raw = load_yaml(path)
    if policy is not None:
        if not isinstance(policy, Mapping):
            raise ConfigError(f"[policy] policy: must be a mapping of [policy] fields, got {show(policy)}")
        own = raw.get("policy")
        raw["policy"] = {**(dict(own) if isinstance(own, Mapping) else {}), **policy}
    return build_instance(raw, source=str(path))


def _section(cfg: Mapping[str, Any], name: str, required: bool = True) -> dict[str, Any]:
    if name not in cfg or cfg[name] is None:
        if required:
            raise ConfigError(f"[{name}] Missing required section: '{name}'")
        return {}
    value = cfg[name]
    if not isinstance(value, Mapping):
        raise ConfigError(f"[{name}] must be a mapping, got {type(value).__name__} {show(value)}")
    return dict(value)


def _defaulted_algorithm(policy_cfg: Mapping[str, Any], algorithm: str) -> str:
    """A note for a ``[models]`` error when the algorithm was not given: ``policy`` null or absent, or without
    ``algorithm``, defaults to ``algorithm`` (``ppo``), whose roles the error names; ``""`` when it was given."""
    if "algorithm" in policy_cfg:
        return ""
    unset = "[policy] is null or absent" if not policy_cfg else "[policy] algorithm is unset"
    return (f" ({unset}, so the algorithm defaulted to {algorithm}, which needs "
            f"{', '.join(algorithm_spec(algorithm).required_roles)}; set policy.algorithm, e.g. grpo)")


def _require(section: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if key not in section:
            raise ConfigError(f"[{where}] Missing required field: '{key}'")


def _no_unknown(section: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    for key in section:
        if key not in valid:
            raise ConfigError(f"[{where}] Unknown field: {show(key)}; valid fields: {', '.join(valid)}")


def _label(where: str) -> Callable[[str], str]:
    return lambda name: f"[{where}] {name}"


#: Other names of the frameworks with an execution profile, as publications write them: verl is the
#: open-source release of the HybridFlow paper (verl's README); ``dschat`` is DeepSpeed-Chat's Python
#: package (DeepSpeedExamples ``applications/DeepSpeed-Chat/dschat``).
FRAMEWORK_ALIASES = {"hybridflow": "verl", "dschat": "deepspeed-chat"}
#: A release at the end of a framework's name once case and punctuation are dropped: ``0.2.7`` -> ``027``,
#: ``v0.5`` -> ``v05``, ``0.5.0rc1`` -> ``050rc1``, ``2`` (``"openrlhf2"``, ``"OpenRLHF-v2"`` alike).
_TRAILING_RELEASE = re.compile(r"v?\d+(?:rc|a|b|alpha|beta|post|dev)?\d*$")
#: Edits (insertions, deletions, substitutions, swaps of two neighbours) within which a name is a near miss of
#: a known framework's canonical form: 1, or 2 for a form of :data:`NEAR_MISS_LONG` characters or more.
NEAR_MISS_EDITS = 1
NEAR_MISS_LONG = 10


def framework_canonical(name: str) -> tuple[str, bool]:
    """``(canonical form, release dropped)`` of a framework written as free text: lowercased, without
    spaces, dashes, underscores, dots or other punctuation, without a trailing release
    (``"NeMo RL v0.5"`` -> ``nemorl``; ``"OpenRLHF-v2"``, ``"openrlhf2"``, ``"OpenRLHF 0.2.7"`` -> ``openrlhf``;
    ``"Some_Other system"`` -> ``someothersystem``): the one form every spelling of one framework shares, for
    the frameworks with an execution profile (:func:`known_framework`) and for every other system alike
    (:func:`framework_key`). A name that is all release keeps its digits."""
    squashed = re.sub(r"[^a-z0-9]", "", name.strip().lower())
    bare = _TRAILING_RELEASE.sub("", squashed) or squashed
    return bare, bare != squashed


def framework_key(name: str) -> str:
    """The group name of a framework written as free text: :func:`framework_canonical`'s form (``"SkyRL
    v0.2"``, ``"Sky-RL"``, ``"skyrl"`` -> ``skyrl``), the raw text lowercased when nothing is left."""
    return framework_canonical(name)[0] or name.strip().lower()


def _edits(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two neighbours
    (Damerau 1964) turning ``a`` into ``b``."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def near_framework(name: Any) -> str | None:
    """The framework with an execution profile (or alias, :data:`FRAMEWORK_ALIASES`) whose canonical form
    (:func:`framework_canonical`) ``name``'s is a near miss of: within :data:`NEAR_MISS_EDITS` edits (2 for a
    form of :data:`NEAR_MISS_LONG` characters or more), not equal (that is :func:`known_framework`), and never
    ``none`` (the bare engine is no system a publication names). ``"OpenRLFH"``, ``"verll"``,
    ``"deepspeedchta"`` -> their framework; ``"verl-agent"``, ``"ROLL"``, ``"OpenRL"`` -> ``None``."""
    if not isinstance(name, str):
        return None
    form = framework_canonical(name)[0]
    known = {framework_canonical(c)[0]: c for c in FRAMEWORK_NAMES if c != "none"}
    known.update(FRAMEWORK_ALIASES)
    if form in known:
        return None
    for key, canonical in known.items():
        if _edits(form, key) <= (2 if len(key) >= NEAR_MISS_LONG else NEAR_MISS_EDITS):
            return canonical
    return None


def known_framework(name: Any) -> tuple[str | None, bool]:
    """``(canonical name, release stripped)`` of a framework written as free text: the name of
    :data:`~packplace.placement.model.framework.FRAMEWORKS` (or of :data:`FRAMEWORK_ALIASES`) whose
    :func:`framework_canonical` form ``name``'s equals (``"NeMo RL v0.5"``, ``"nemo_rl"``, ``"NeMoRL"`` ->
    ``nemo-rl``; ``"OpenRLHF 0.2.7"``, ``"OpenRLHF-v2"``, ``"openrlhf2"`` -> ``openrlhf``; ``"deepspeed chat"``
    -> ``deepspeed-chat``), ``None`` for a name that spells none of them (another system, or a near miss:
    :func:`near_framework`); the flag says whether a release was dropped."""
    if not isinstance(name, str):
        return None, False
    form, release = framework_canonical(name)
    known = {framework_canonical(canonical)[0]: canonical for canonical in FRAMEWORK_NAMES}
    known.update(FRAMEWORK_ALIASES)
    canonical = known.get(form)
    return canonical, canonical is not None and release


def _check_framework_spelling(value: Any) -> None:
    """Refuse a ``policy.framework`` that spells a known framework another way, naming the canonical one
    (and ``framework_version`` for a release written into the name).

    Raises:
        ConfigError: ``[policy] framework: 'NeMo RL' names the nemo-rl framework; write it 'nemo-rl'``.
    """
    if not isinstance(value, str) or value in FRAMEWORK_NAMES:
        return
    canonical, release = known_framework(value)
    if canonical is not None:
        raise ConfigError(f"[policy] framework: {show(value)} names the {canonical} framework; write it "
                          f"{show(canonical)}" + (" and give the release as policy.framework_version" if release
                                                   else ""))
    near = near_framework(value)
    if near is not None:
        raise ConfigError(f"[policy] framework: {show(value)} is a near miss of the {near} framework; write it "
                          f"{show(near)}")


def _policy_fields() -> dict[str, Field]:
    """:data:`POLICY_FIELDS` with the algorithm choices read from the algorithm table at load time."""
    return {**POLICY_FIELDS, "algorithm": replace(POLICY_FIELDS["algorithm"], choices=tuple(RL_ALGORITHMS))}


#: Structural error formats of the placement loader (``[section] Missing required field: 'x'``).
_FORMATS: dict[str, Any] = {"missing": "{where} Missing required field: '{name}'",
            "unknown": "{where} Unknown field: '{name}'; valid fields: {valid}"}


def _hardware(hw: dict[str, Any]) -> tuple[Cluster, Hardware]:
    """``(cluster, hardware)`` of a ``[hardware]`` section: every key a field name (checked before a ``null``
    field is dropped, :func:`~packplace.placement.problem.hardware.resolve_preset`, so a misspelt one set to
    ``null`` is refused too), the preset expanded, the fields checked.

    Raises:
        ConfigError: ``[hardware] Unknown field: 'x'; valid fields: ...``; the preset's and the fields' errors.
    """
    if isinstance(hw, Mapping):
        valid = (*CLUSTER_FIELDS, *HARDWARE_FIELDS)
        for key in hw:
            if key not in valid and key != "preset":
                raise ConfigError(_FORMATS["unknown"].format(where="[hardware]", name=key_shown(key),
                                                             valid=", ".join(valid)))
    given = set(hw) if isinstance(hw, Mapping) else set()
    preset = hw.get("preset") if isinstance(hw, Mapping) else None
    if "preset" in hw:
        hw = resolve_preset(hw)
    values = check_section(hw, {**CLUSTER_FIELDS, **HARDWARE_FIELDS}, "[hardware]", label=_label("hardware"),
                           **_FORMATS)
    _warn_above_bounds({k: v for k, v in values.items() if k in given}, preset)
    cluster = Cluster(*(values.pop(name, None) for name in CLUSTER_FIELDS))
    if cluster.gpus_per_node % cluster.host_gpus:
        raise ConfigError(f"[hardware] gpus_per_node: {cluster.gpus_per_node} is not a whole number of hosts of "
                          f"gpus_per_host {cluster.host_gpus}")
    check_count(cluster.num_gpus, MAX_GPUS, "[hardware] racks",
                f"GPUs (racks {cluster.racks} x nodes_per_rack {cluster.nodes_per_rack} x gpus_per_node "
                f"{cluster.gpus_per_node})")
    return cluster, Hardware(**values)


def _warn_above_bounds(given: dict[str, Any], preset: Any) -> None:
    """A :class:`~packplace.errors.KnobAboveBoundWarning` per efficiency knob the config sets above its GPU
    type's physical bound (:func:`~packplace.placement.checking.knob_bounds.above_bound_messages`); the
    preset's own values are not the user's and are not checked here."""
    for message in above_bound_messages(given, preset if isinstance(preset, str) else None):
        warnings.warn(message, KnobAboveBoundWarning, stacklevel=2)


def _model(role: str, spec: Any, source: str) -> ModelSpec:
    """The shape of ``models.<role>``: Hugging Face ``config.json`` field names or the older packplace
    names (:func:`packplace.shape.shape_from_mapping`), or ``{hf_config: path}`` to read a
    ``config.json`` (a relative path is taken from the YAML file's directory). A critic or reward model
    gets a scalar value head instead of the LM head."""
    where = f"models.{role}"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"[{where}] must be a mapping of shape fields, got {show(spec)}")
    if "hf_config" in spec:
        if len(spec) != 1:
            raise ConfigError(f"[{where}] hf_config: give either hf_config or shape fields, got "
                              f"{show(sorted(spec, key=str))}")
        path = Path(str(spec["hf_config"]))
        if not path.is_absolute() and source != "<dict>":
            path = Path(source).parent / path
        try:
            shape = from_hf_config(path)
        except ConfigError as exc:
            raise ConfigError(f"[{where}] hf_config: {exc}") from None
    else:
        shape = shape_from_mapping(spec, f"[{where}] ")
    return shape if role in LM_ROLES else shape.value_head()


def _workload(w: dict[str, Any]) -> Workload:
    values = check_section(w, WORKLOAD_FIELDS, "[workload]", extra=WORKLOAD_OPTIONAL, label=_label("workload"),
                           **_FORMATS)
    b, k, s, t = (values[key] for key in WORKLOAD_REQUIRED)
    check_count(b * k, MAX_SEQUENCES, "[workload] batch_size",
                f"sequences per step (batch_size {b} x samples_per_prompt {k})")
    quantiles = None
    raw = w.get("gen_quantiles")
    if raw is not None:
        if not isinstance(raw, list) or not raw or len(raw) > MAX_QUANTILES:
            raise ConfigError(f"[workload] gen_quantiles: must be a list of 1 to {MAX_QUANTILES} [q, tokens] pairs, "
                              f"got {show(raw)}")
        points = []
        last_q, last_t = 0.0, 0.0
        share = Field("float", "", 0, 1, exclusive_minimum=True)
        length = Field("float", "tokens", 1, t)
        for item in raw:
            if not isinstance(item, list) or len(item) != 2:
                raise ConfigError(f"[workload] gen_quantiles: each entry must be [q, tokens], got {show(item)}")
            q = share.check(item[0], "[workload] gen_quantiles: quantile")
            tokens = length.check(item[1], "[workload] gen_quantiles: tokens (at most generation_length)")
            if not last_q < q:
                raise ConfigError(f"[workload] gen_quantiles: quantiles must increase within (0, 1], got {show(item)}")
            if not last_t <= tokens:
                raise ConfigError(f"[workload] gen_quantiles: tokens must be non-decreasing in [1, "
                                  f"generation_length={t}], got {show(item)}")
            points.append((q, tokens))
            last_q, last_t = q, tokens
        quantiles = tuple(points)
    return Workload(b, k, s, t, quantiles)


def validate_optimizer_knobs(values: Mapping[str, Any], base: Mapping[str, Any] | None = None, *,
                             where: str = "optimizer") -> dict[str, Any]:
    """Check knob values against :data:`OPTIMIZER_KNOBS` and merge them over ``base``.

    Args:
        values: ``{knob: value}`` to check (keys outside :data:`OPTIMIZER_KNOBS` are errors).
        base: Already validated knobs the values override (default :data:`OPTIMIZER_DEFAULTS`).
        where: Section name used in messages.

    Returns:
        Every knob, validated and normalised (integral floats → int, numbers → float), ``values`` winning.

    Raises:
        ConfigError: ``[optimizer] e_max: must be an integer >= 1, got -5`` and the like; an unknown knob
            (lists the valid ones); ``t_min`` above ``t_init`` after merging.
    """
    for name in values:
        if name not in OPTIMIZER_KNOBS:
            raise ConfigError(f"[{where}] {name}: unknown optimizer knob; valid: {', '.join(OPTIMIZER_KNOBS)}")
    out = {name: (base or OPTIMIZER_DEFAULTS).get(name, default) for name, default in OPTIMIZER_DEFAULTS.items()}
    for name, value in values.items():
        out[name] = OPTIMIZER_KNOBS[name].check(value, f"[{where}] {name}")
    if out["t_min"] > out["t_init"]:
        raise ConfigError(f"[{where}] t_min: must be <= t_init ({out['t_init']}), got {show(out['t_min'])}")
    return out


def resolve_optimizer_knobs(optimizer: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs of an instance's validated ``optimizer`` section with keyword ``overrides`` applied (each
    override validated by :func:`validate_optimizer_knobs`; the section's values are not re-checked).

    Raises:
        ConfigError: as :func:`validate_optimizer_knobs`.
    """
    return validate_optimizer_knobs(overrides, base=optimizer)


def _optimizer(o: dict[str, Any], algorithm: str) -> dict[str, Any]:
    _no_unknown(o, OPTIMIZER_KEYS, "optimizer")
    out = validate_optimizer_knobs({k: v for k, v in o.items() if k != "staleness_candidates"})
    spec = algorithm_spec(algorithm)
    trainable = spec.staleness_keys
    # the keys a step-late publication can make stale: a trained model that feeds a task of the next step (the
    # actor's rollout, the critic's values) and the fused keys (PPO's ac_share); DPO's actor feeds none
    published = {trainer.split(".")[0] for trainer, _ in spec.publication_edges} | set(spec.extra_staleness_keys)
    stale: dict[str, tuple[int, ...]] = {name: (0,) for name in trainable}
    raw = o.get("staleness_candidates")
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"[optimizer] staleness_candidates: must be a mapping, got {show(raw)}")
        for name, values in raw.items():
            if name not in all_staleness_keys():
                raise ConfigError(f"[optimizer.staleness_candidates] Unknown model {show(name)}; valid names for "
                                  f"{algorithm}: {', '.join(trainable)}")
            if not isinstance(values, list) or not values or len(values) > 4 * (MAX_STALENESS + 1):
                raise ConfigError(f"[optimizer.staleness_candidates] {name}: must be a non-empty list of "
                                  f"integers in [0, {MAX_STALENESS}], got {show(values)}")
            values = [STALENESS_FIELD.check(x, f"[optimizer.staleness_candidates] {name}") for x in values]
            if name not in trainable:
                raise ConfigError(f"[optimizer.staleness_candidates] {name}: {algorithm} has no {name} to make "
                                  f"stale; valid for {algorithm}: {', '.join(trainable)}")
            if max(values) > 0 and name not in published:
                raise ConfigError(f"[optimizer.staleness_candidates] {name}: {show(raw[name])}: {algorithm} has no "
                                  f"rollout to be stale (its {name} publishes no weights to a task of the next step, "
                                  f"the only staleness is 0); give [0] or drop the entry")
            stale[name] = tuple(sorted(set(values)))
    out["staleness_candidates"] = stale
    return out


def _enforce_eager(value: bool | None, framework: str, version: VersionDefaults | None = None) -> bool:
    """``policy.enforce_eager`` when set, else the framework's default: that of its release ``version``
    (``policy.framework_version``, :func:`~packplace.placement.model.framework.version_defaults`) when given,
    else the profile's (:attr:`~packplace.placement.model.framework.FrameworkProfile.enforce_eager`).

    Raises:
        ConfigError: set for a framework whose generation engine is not vLLM.
    """
    default = profile(framework).enforce_eager
    if default is not None and version is not None:
        default = version.enforce_eager
    if default is None:
        if value is not None:
            raise ConfigError(f"[policy] enforce_eager: {_yaml(value)} is a vLLM setting; the {framework} framework "
                              "generates with its own engine, whose eager kernel launches are inside its "
                              "decode_step_overhead (remove enforce_eager)")
        return False
    return default if value is None else value


def _rollout_engine(policy: Mapping[str, Any], policy_cfg: Mapping[str, Any],
                    version: VersionDefaults | None) -> RolloutEngine:
    """The rollout engine of a checked ``[policy]`` section ``policy`` (``policy_cfg``: the section as given;
    ``version``: :func:`version_defaults` of its release, or ``None``): its batching, ``max_num_seqs`` and
    ``gpu_memory_utilization`` (unset: the framework's, :func:`default_gpu_memory_utilization`), the engine
    generation, vLLM release, ``enforce_eager`` and host seconds the framework release implies, and whether that
    release passes vLLM no ``max_model_len`` (:func:`engine_takes_model_context`)."""
    framework, release = policy["framework"], policy.get("framework_version")
    generation = profile(framework).engine_generation if version is None else version.engine_generation
    gmu = policy.get("gpu_memory_utilization") or default_gpu_memory_utilization(framework, release)
    return RolloutEngine(policy["batching"], policy["max_num_seqs"], gmu,
                         max_num_seqs_set="max_num_seqs" in policy_cfg, dispatch=policy["dispatch"],
                         enforce_eager=_enforce_eager(policy.get("enforce_eager"), framework, version),
                         host_seconds_per_sequence=host_seconds_per_sequence(generation),
                         engine_generation=generation, vllm_release=engine_vllm_release(framework, release),
                         model_context=engine_takes_model_context(framework, release),
                         sleeps=_engine_sleeps(policy.get("engine_sleeps"), framework, generation, release))


#: NeMo RL's first release with PPO (``examples/run_ppo.py``, ``nemo_rl/algorithms/ppo.py``: absent from v0.6.x).
NEMO_RL_PPO_SINCE = (0, 7)


def _release_defaults(framework: str, algorithm: str, release: str | None) -> VersionDefaults | None:
    """:func:`version_defaults` of ``framework`` at ``release``, refusing ``algorithm: ppo`` on a NeMo RL release
    before :data:`NEMO_RL_PPO_SINCE`, which has no PPO loop.

    Raises:
        ConfigError: naming ``policy.framework_version`` and the first release with PPO.
    """
    if framework == "nemo-rl" and algorithm == "ppo" and release is not None \
            and parse_version(release) < NEMO_RL_PPO_SINCE:
        raise ConfigError(f"[policy] framework_version: {release!r} with algorithm ppo: NeMo RL has PPO from v0.7.0 "
                          "(examples/run_ppo.py, nemo_rl/algorithms/ppo.py); use a release from 0.7.0, or algorithm "
                          "grpo")
    return version_defaults(framework, release)


def _engine_sleeps(value: bool | None, framework: str, generation: str | None,
                   release: str | None = None) -> bool | None:
    """``policy.engine_sleeps`` as given (``None``: the framework's,
    :attr:`~packplace.placement.model.framework.FrameworkProfile.engine_sleeps`), where the framework ``framework``
    at ``release`` (``policy.framework_version``, ``None``: unset) can run it.

    NeMo RL has no switch for its engine's sleep: ``vllm_worker.py`` builds ``vllm.LLM(..., enable_sleep_mode=True)``
    (``nemo_reinforcer/models/generation/vllm.py`` at v0.1.0-v0.2.1, ``nemo_rl/models/generation/vllm.py`` at
    v0.3.x, ``vllm/vllm_worker.py`` v0.4.0-v0.7.0; ``vllm_kwargs`` cannot turn it off: a second
    ``enable_sleep_mode`` keyword is a ``TypeError``) and ``VllmGeneration.finish_generation`` calls ``sleep``
    after every generation when ``policy.generation.colocated.enabled`` (only resetting the prefix cache on GPUs
    of its own, where no other task runs beside it and sleeping changes nothing). So ``false`` could only describe
    a colocated engine NeMo RL puts to sleep, and is refused; ``true`` is its own behaviour. OpenRLHF's engines
    sleep only under ``--vllm_enable_sleep``, from
    :data:`~packplace.placement.model.layout_rules.OPENRLHF_VLLM_SLEEP` (v0.5.8): ``true`` with an earlier
    ``framework_version`` is refused; without a version it is kept, as every release-gated option is (the
    emitter writes the current release's option names). verl keeps its engine awake under
    ``rollout.free_cache_engine=False`` only from
    :data:`~packplace.placement.model.framework.VERL_ENGINE_AWAKE_SINCE` (v0.5.0; before it the sharding manager
    offloads the engine's weights after every rollout whatever the key says): ``false`` with an earlier
    ``framework_version`` is refused; without one it is kept (the emitter writes ``free_cache_engine=False``).

    Raises:
        ConfigError: set where the framework's engine is not vLLM (``generation`` ``None``: DeepSpeed-Chat's
            hybrid engine, which generates with its trainer's own weights); ``false`` for NeMo RL; ``true`` for
            OpenRLHF at a ``framework_version`` before 0.5.8; ``false`` for verl at a ``framework_version`` before
            0.5.0. Each names ``policy.engine_sleeps`` and its value (and the release).
    """
    if value is not None and generation is None:
        raise ConfigError(f"[policy] engine_sleeps: {_yaml(value)} is a vLLM setting; the {framework} framework "
                          "generates with its trainer's own weights (hybrid engine), which hold no engine copy "
                          "to put to sleep (remove engine_sleeps)")
    if value is False and framework == "nemo-rl":
        raise ConfigError("[policy] engine_sleeps: false: NeMo RL has no switch to keep its vLLM engine awake (it "
                          "builds vllm.LLM with enable_sleep_mode=True and VllmGeneration.finish_generation puts a "
                          "colocated engine to sleep after every generation, v0.1.0-v0.7.0); an engine on GPUs of "
                          "its own (colocated.enabled: false) shares them with no task, where sleeping changes "
                          "nothing (remove engine_sleeps)")
    if value is True and framework == "openrlhf" and release is not None \
            and table_release(release) < OPENRLHF_VLLM_SLEEP:
        raise ConfigError(f"[policy] engine_sleeps: true with framework_version {release!r}: OpenRLHF has vLLM's "
                          "sleep mode from 0.5.8 (--vllm_enable_sleep, openrlhf/cli/train_ppo_ray.py), so this "
                          "release's engines never sleep; drop engine_sleeps or set framework_version 0.5.8 or "
                          "later")
    if value is False and framework == "verl" and release is not None \
            and table_release(release) < VERL_ENGINE_AWAKE_SINCE:
        raise ConfigError(f"[policy] engine_sleeps: false with framework_version {release!r}: verl keeps its vLLM "
                          "engine awake only from 0.5.0 (rollout.free_cache_engine=False); before it the sharding "
                          "manager offloads the engine's weights after every rollout whatever free_cache_engine "
                          "says (the sharding manager's __exit__, fsdp_vllm.py / megatron_vllm.py, v0.1-v0.4.1); "
                          "drop engine_sleeps or set framework_version 0.5.0 or later")
    return value


def _yaml(value: Any) -> str:
    """``value`` as the config's YAML spells it in a message (:func:`~packplace.errors.show_setting`: ``true`` /
    ``false`` for a boolean, not Python's ``True`` / ``False``)."""
    return show_setting(value)


def _check_model_len(engine: RolloutEngine, actor: ModelSpec, workload: Any) -> None:
    """Refuse a workload whose sequences (``context_length + generation_length``) exceed the rollout engine's
    ``max_model_len`` where the framework release passes vLLM none and the actor gives its
    ``max_position_embeddings`` (the length vLLM then takes): vLLM stops a sequence at max_model_len tokens and
    refuses a prompt that reaches it, so the workload's responses cannot run (``estimate`` refuses the same
    ``--context``). Where the release passes a length, it is the workload's own (no gap)."""
    most = engine.model_max_len(actor)
    total = workload.context_length + workload.generation_length
    if most is not None and total > most:
        raise ConfigError(f"[workload] context_length + generation_length: {total} tokens per sequence exceed vLLM's "
                          f"max_model_len {most} (the actor's max_position_embeddings: this OpenRLHF release passes "
                          f"vLLM no max_model_len): vLLM stops a sequence at max_model_len tokens and refuses a "
                          f"prompt that reaches it; give at most {most} tokens in all")


def _warn_past_position_limits(models: Mapping[str, ModelSpec], workload: Workload) -> None:
    """A :class:`~packplace.errors.PositionLimitWarning` per model (actor, critic, reward; the reference is the
    actor) whose ``max_position_embeddings`` is below the workload's ``context_length + generation_length``."""
    for role in (r for r in ("actor", "critic", "reward") if r in models):
        warn_past_position_limit(models[role], workload.context_length + workload.generation_length,
                                 f"[models] {role}", "[workload] context_length + generation_length")


def build_instance(config: Mapping[str, Any], *, source: str = "<dict>") -> PlacementInstance:
    """Validate a config mapping (the parsed YAML) and build the instance (warnings: :class:`PackplaceWarning`s).

    Raises:
        ConfigError: missing section or field, wrong type or range, unknown algorithm, model role,
            field or staleness key (the message lists the valid ones), ``max_num_seqs`` with static
            batching, a ``framework_version`` that is not a quoted release, precedes the framework's
            first known release or names a framework without release defaults."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"config: must be a mapping of sections, got {type(config).__name__}")
    for key in config:
        if key not in SECTIONS:
            raise ConfigError(f"[{key_shown(key)}] Unknown section; valid: {', '.join(SECTIONS)}")
    cluster, hardware = _hardware(_section(config, "hardware"))
    policy_cfg = _section(config, "policy", required=False)
    raw_version = policy_cfg.get("framework_version") if isinstance(policy_cfg, Mapping) else None
    if isinstance(raw_version, (int, float)) and not isinstance(raw_version, bool):
        raise ConfigError(f"[policy] framework_version: {show(raw_version)} was read as a number; write the "
                          "release quoted, e.g. framework_version: \"0.5.0\" (YAML reads 0.10 as 0.1)")
    if isinstance(policy_cfg, Mapping):
        _check_framework_spelling(policy_cfg.get("framework"))
    policy = check_section(policy_cfg, _policy_fields(), "[policy]", label=_label("policy"), **_FORMATS)
    algorithm = policy["algorithm"]
    if policy["batching"] == "static" and "max_num_seqs" in policy_cfg:
        raise ConfigError(f"[policy] max_num_seqs: {policy_cfg['max_num_seqs']!r} caps a continuous-batching "
                          "engine; with batching: static each round decodes the generation task's micro-batch "
                          "(set that instead, or drop max_num_seqs)")
    if policy["batching"] != "static" and policy_cfg.get("dispatch", "rounds") != "rounds":
        raise ConfigError(f"[policy] dispatch: {policy_cfg['dispatch']!r} hands out static batches; a "
                          "continuous-batching engine takes every request at once (set batching: static, or "
                          "drop dispatch)")
    version = _release_defaults(policy["framework"], algorithm, release := policy.get("framework_version"))
    if (newer := newer_than_known(policy["framework"], release)) is not None:
        warnings.warn(newer, FrameworkVersionWarning, stacklevel=2)
    engine = _rollout_engine(policy, policy_cfg, version)
    models_cfg = _section(config, "models")
    spec = algorithm_spec(algorithm)
    required = spec.required_roles
    rule_reward = None
    if "reward" in required and _is_rule(models_cfg.get("reward")):
        rule_reward = _rule_reward(models_cfg["reward"], policy["framework"])
        models_cfg = {k: v for k, v in models_cfg.items() if k != "reward"}
        required = tuple(r for r in required if r != "reward")
    if "reference" in models_cfg:
        raise ConfigError("[models] reference: the reference model always has the actor's architecture; "
                          "remove this entry")
    roles = all_roles()
    for role in models_cfg:
        if role not in roles:
            raise ConfigError(f"[models] Unknown role {show(role)}; valid roles: {', '.join(roles)}")
        if role not in required:
            raise ConfigError(f"[models] {role}: {algorithm} has no {role} model; remove it "
                              f"({algorithm} needs: {', '.join(required)})" + _defaulted_algorithm(policy_cfg,
                                                                                                  algorithm))
    for role in required:
        if role not in models_cfg:
            raise ConfigError(f"[models] Missing required field: '{role}'"
                              + _defaulted_algorithm(policy_cfg, algorithm))
    models = {role: _model(role, models_cfg[role], source) for role in required}
    models["reference"] = models["actor"]
    _check_release_model_type(policy, models["actor"])
    training, balance = _training(_section(config, "training", required=False), spec.trainable_models, policy)
    _check_training_models(training, models, policy)
    workload = _workload(_section(config, "workload"))
    _check_model_len(engine, models["actor"], workload)
    _warn_past_position_limits(models, workload)
    if algorithm == "dpo" and workload.samples_per_prompt != 2:   # NeMo RL and OpenRLHF DPO: chosen + rejected
        raise ConfigError(f"[workload] samples_per_prompt: a DPO step trains preference pairs, a chosen and a "
                          f"rejected response per prompt: must be 2, got {workload.samples_per_prompt}")
    # a global batch is whole sequences, and for DPO whole chosen / rejected pairs (the prompts)
    units = (workload.batch_size, "preference pairs (batch_size)") if algorithm == "dpo" else (
        workload.sequences, "sequences (batch_size x samples_per_prompt)")
    dynamic_bsz = _dynamic_bsz(policy, workload, models["actor"], cluster.num_gpus)
    _check_verl_only(policy, training, cluster.num_gpus)
    _check_forced_ratio(policy, training)
    for role, options in training.items():
        if units[0] % options.optimizer_steps:
            raise ConfigError(f"[training.{role}] optimizer_steps: {options.optimizer_steps} does not divide the "
                              f"step's {units[0]} {units[1]}: each optimizer step trains a whole global batch")
    optimizer = _optimizer(_section(config, "optimizer", required=False), algorithm)
    # the staleness the framework release runs (OpenRLHF's asynchronous training from 0.8.0), said where it narrows
    notes = tuple(note for note in (release_staleness_note(policy["framework"], policy.get("framework_version"),
                                                           optimizer["staleness_candidates"]),) if note)
    optimizer["staleness_candidates"] = release_staleness(policy["framework"], policy.get("framework_version"),
                                                          optimizer["staleness_candidates"])
    if hardware.decode_step_overhead is None:  # unset: the framework engine's per-step cost
        hardware = replace(hardware, decode_step_overhead=profile(policy["framework"]).decode_step_overhead)
    instance = PlacementInstance(cluster, hardware, models, workload, algorithm,
                                 build_graph(algorithm, reward_model=rule_reward is None), optimizer, source, engine,
                                 training=training, rule_reward=rule_reward, framework=policy["framework"],
                                 inference_offload=policy["inference_offload"], balance=balance,
                                 trainer_backend=policy["trainer_backend"], framework_version=release,
                                 sequence_packing=_sequence_packing(policy, algorithm, workload,
                                                                    _actor_context_parallel(balance)),
                                 dynamic_bsz=dynamic_bsz, entropy_coeff=float(policy["entropy_coeff"]),
                                 force_on_policy_ratio=bool(policy["force_on_policy_ratio"]),
                                 use_remove_padding=_use_remove_padding(policy, dynamic_bsz), notes=notes,
                                 reward_use_remove_padding=_reward_use_remove_padding(policy, "reward" in models))
    check_config(Context.of(instance))
    return instance


#: The first NeMo RL release with ``policy.sequence_packing`` (the v0.1.0 and v0.2.1 tags have neither the
#: setting nor ``nemo_rl/data/packing/``; the v0.3 release notes introduce it).
FIRST_PACKING_RELEASE = (0, 3)


def _actor_context_parallel(balance: Mapping[str, Any]) -> int:
    """The actor's ``training.context_parallel`` degree (its own section's, else ``[training]``'s; 1)."""
    setting = balance.get("actor") or balance.get("")
    return int(setting.context_parallel.degree) if setting is not None else 1


def _sequence_packing(policy: Mapping[str, Any], algorithm: str, workload: Workload,
                      context_parallel: int = 1) -> tuple[int, int] | None:
    """``(train_mb_tokens, logprob_mb_tokens)`` of ``[policy]``, or ``None`` when neither is set.

    Raises:
        ConfigError: one set without the other; either set for a framework other than ``nemo-rl``, for a
            NeMo RL release before 0.3 (v0.1.0 / v0.2.1 have no ``sequence_packing``), for DPO (NeMo RL's
            ``dpo.py`` asserts sequence packing is not supported), or below the longest sequence
            ``context_length + generation_length`` rounded up to the pad multiple of the smallest trainer
            (:func:`~packplace.placement.model.sequence_packing.pad_multiple` at tensor-parallel size 1: the
            length itself, ``2·context_parallel`` multiples with context parallelism), since NeMo RL's packer
            refuses a sequence longer than a pack. A larger tensor-parallel size rounds further: the layout
            rules refuse the strategies whose rounding overflows the pack
            (:func:`~packplace.placement.model.sequence_packing.packing_refusal`); with context parallelism above
            1 on the DTensor backend (``trainer_backend: fsdp``), which NeMo RL's DTensor policy worker refuses
            (``ValueError`` "Context parallel is not supported for sequence packing", v0.4-v0.6).
    """
    train, logprob = policy.get("train_mb_tokens"), policy.get("logprob_mb_tokens")
    if train is None and logprob is None:
        return None
    if train is None or logprob is None:
        missing = "train_mb_tokens" if train is None else "logprob_mb_tokens"
        raise ConfigError(f"[policy] {missing}: NeMo RL's sequence packing sets both pack sizes "
                          "(train_mb_tokens and logprob_mb_tokens); set it too, or drop the other")
    if policy["framework"] != "nemo-rl":
        raise ConfigError(f"[policy] train_mb_tokens: packs by tokens are NeMo RL's sequence packing "
                          f"(framework: nemo-rl), not {policy['framework']!r}'s; drop train_mb_tokens and "
                          "logprob_mb_tokens")
    version = policy.get("framework_version")
    if version is not None and table_release(version) < FIRST_PACKING_RELEASE:
        raise ConfigError(f"[policy] train_mb_tokens: NeMo RL {version} has no sequence packing (it arrived in "
                          f"0.3); drop train_mb_tokens and logprob_mb_tokens or set a later framework_version")
    if algorithm == "dpo":
        raise ConfigError("[policy] train_mb_tokens: NeMo RL's DPO does not run sequence packing (dpo.py asserts "
                          "it); drop train_mb_tokens and logprob_mb_tokens")
    if context_parallel > 1 and policy.get("trainer_backend") == "fsdp":
        raise ConfigError(f"[policy] trainer_backend: 'fsdp' (NeMo RL's DTensor workers) with sequence packing "
                          f"(train_mb_tokens) and training.actor.context_parallel {context_parallel}: the DTensor "
                          "workers refuse context parallelism with sequence packing; use trainer_backend megatron "
                          "(or auto), drop the packs, or context_parallel 1")
    longest = workload.context_length + workload.generation_length
    why = packing_refusal((int(train), int(logprob)), longest, 1, context_parallel)
    if why is not None:
        raise ConfigError(f"[policy] {why.removeprefix('policy.')}")
    return int(train), int(logprob)


def _check_verl_only(policy: Mapping[str, Any], training: Mapping[str, TrainingOptions], num_gpus: int) -> None:
    """Settings the model prices for verl only: ``policy.entropy_coeff`` above 0 and ``training.<role>.fsdp_size``
    (verl's ``(world // fsdp_size, fsdp_size)`` device mesh: a size below the GPUs must divide them; one of the
    whole cluster or more shards over all of it, as ``create_device_mesh`` does).

    Raises:
        ConfigError: either set for another framework, or an ``fsdp_size`` that divides no mesh.
    """
    if policy["entropy_coeff"] and policy["framework"] != "verl":
        raise ConfigError(f"[policy] entropy_coeff: {policy['entropy_coeff']} is verl's entropy bonus "
                          f"(actor.entropy_coeff), which the model prices for framework verl only, not "
                          f"{policy['framework']!r}; drop it")
    for role, options in training.items():
        if options.fsdp_size and policy["framework"] != "verl":
            raise ConfigError(f"[training.{role}] fsdp_size: verl's FSDP group (actor.fsdp_config.fsdp_size), not "
                              f"{policy['framework']!r}'s; drop it")
        if options.fsdp_size and options.fsdp_size < num_gpus and num_gpus % options.fsdp_size:
            raise ConfigError(f"[training.{role}] fsdp_size: {options.fsdp_size} does not divide the cluster's "
                              f"{num_gpus} GPUs (verl's (world // fsdp_size, fsdp_size) device mesh; "
                              "a size of the whole cluster or more shards over all of it)")


def _check_forced_ratio(policy: Mapping[str, Any], training: Mapping[str, TrainingOptions]) -> None:
    """``policy.force_on_policy_ratio`` is NeMo RL's ``loss_fn.force_on_policy_ratio``: a ``nemo-rl`` setting of
    an algorithm with the previous-policy log-prob pass, and NeMo RL requires ``train_global_batch_size ==
    num_prompts_per_step * num_generations_per_prompt`` with it (``nemo_rl/algorithms/grpo.py``, v0.6.0 and
    v0.7.0), i.e. one optimizer step per step. What it does to the step depends on the release: v0.7.0 on skips
    the previous-policy log-prob pass, v0.6.0 still runs it
    (:func:`~packplace.placement.model.nemo_rl_releases.skips_old_log_prob`). An unset ``framework_version``
    applies no release's settings (:func:`~packplace.placement.model.nemo_rl_releases.release_for` is ``None``),
    so the setting would silently do nothing: it is refused without a release.

    Raises:
        ConfigError: set for another framework, for an algorithm without the pass (``dpo``), without
            ``policy.framework_version``, or with ``training.actor.optimizer_steps`` above 1.
    """
    if not policy["force_on_policy_ratio"]:
        return
    if policy["framework"] != "nemo-rl":
        raise ConfigError(f"[policy] force_on_policy_ratio: NeMo RL's loss_fn.force_on_policy_ratio, not "
                          f"{policy['framework']!r}'s; drop it")
    if not algorithm_spec(policy["algorithm"]).old_log_prob:
        raise ConfigError(f"[policy] force_on_policy_ratio: {policy['algorithm']} has no policy ratio "
                          "(no previous-policy log-prob pass); drop it")
    if policy.get("framework_version") is None:
        raise ConfigError("[policy] force_on_policy_ratio: true needs policy.framework_version: whether NeMo RL "
                          "skips the previous-policy log-prob pass depends on the release (from 0.7.0 it does, "
                          "0.6.0 still runs it), and an unset framework_version applies no release's settings; "
                          "set framework_version (e.g. \"0.7.0\") or drop force_on_policy_ratio")
    steps = training["actor"].optimizer_steps if "actor" in training else 1
    if steps != 1:
        raise ConfigError(f"[training.actor] optimizer_steps: {steps} with policy.force_on_policy_ratio; NeMo RL "
                          "requires train_global_batch_size == num_prompts_per_step * "
                          "num_generations_per_prompt (one optimizer step per step)")


def _use_remove_padding(policy: Mapping[str, Any], dynamic_bsz: tuple[int, int, int] | None) -> bool | None:
    """``policy.use_remove_padding`` as the instance keeps it: the config's value, ``None`` where unset, ``True``
    where unset with Ulysses sequence parallelism above 1 (verl asserts ``use_remove_padding`` then:
    ``verl/trainer/ppo/ray_trainer.py`` ``_validate_config``, "When using sequence parallelism for actor/ref
    policy, you must enable `use_remove_padding`", v0.2 to v0.5.0; ``verl/workers/config/actor.py`` from v0.6.0).

    Raises:
        ConfigError: set for a framework other than verl, true at a ``framework_version`` before 0.2 (v0.1 has
            no remove-padding path), or false with ``ulysses_sequence_parallel_size`` above 1.
    """
    setting = policy.get("use_remove_padding")
    ulysses = dynamic_bsz[2] if dynamic_bsz is not None else 1
    if setting is None:
        return True if ulysses > 1 else None
    if policy["framework"] != "verl":
        raise ConfigError(f"[policy] use_remove_padding: {_yaml(setting)} is verl's actor_rollout_ref.model."
                          f"use_remove_padding, which the model prices for framework verl only, not "
                          f"{policy['framework']!r}; drop it")
    version = policy.get("framework_version")
    if setting and version is not None and table_release(version) < VERL_REMOVE_PADDING_SINCE:
        raise ConfigError(f"[policy] use_remove_padding: true at framework_version {version!r}: verl has it from "
                          f"0.2 (v0.1's FSDP actor pads every pass); drop it")
    if not setting and ulysses > 1:
        raise ConfigError(f"[policy] use_remove_padding: false with ulysses_sequence_parallel_size {ulysses}: "
                          "verl refuses Ulysses sequence parallelism without remove-padding (ray_trainer.py "
                          "_validate_config); set it true or drop ulysses_sequence_parallel_size")
    return bool(setting)


def _reward_use_remove_padding(policy: Mapping[str, Any], reward_model: bool) -> bool | None:
    """``policy.reward_use_remove_padding`` (verl's ``reward_model.model.use_remove_padding``), ``None`` where unset:
    true, the reward model's FSDP forward worker runs each micro-batch on its real tokens (``RewardModelWorker``
    ``_forward_micro_batch``, flash-attn ``unpad_input``, ``verl/workers/fsdp_workers.py`` v0.2-v0.6.1), priced
    as the actor's unpadded passes (:func:`~packplace.placement.model.memory.remove_padding_peak_tokens`); false or
    unset, padded rows of ``S + T`` (the key's default, ``False``, at every release that has it: ``ppo_trainer.yaml``
    v0.2-v0.4.1, ``reward_model/dp_reward_model.yaml`` v0.5.0-v0.7.0). ``reward_model``: the config has a reward
    model (not a rule reward).

    Raises:
        ConfigError: set for a framework other than verl; true without a reward model, without a
            ``framework_version`` (the current release, which runs the reward model as a vLLM engine: verl 0.7.1
            on has no such key), or at a ``framework_version`` before 0.2 (v0.1 has no remove-padding path) or from
            0.7.0 (:data:`~packplace.placement.model.framework.VERL_REWARD_ENGINE_SINCE`: the model prices v0.7.0's
            reward model as the reward loop's vLLM engine, ``reward_model.use_reward_loop: true``, the default in
            v0.7.0's ``_generated_ppo_trainer.yaml``, which does not read the key; v0.7.0 still builds the legacy
            ``RewardModelWorker`` (``main_ppo.py`` ``add_reward_model_worker``) and ``ray_trainer.py`` runs it with
            ``use_reward_loop: false``, a setting the model does not price). Each names the field and its value.
    """
    setting = policy.get("reward_use_remove_padding")
    if setting is None:
        return None
    if policy["framework"] != "verl":
        raise ConfigError(f"[policy] reward_use_remove_padding: {_yaml(setting)} is verl's reward_model.model."
                          f"use_remove_padding, which the model prices for framework verl only, not "
                          f"{policy['framework']!r}; drop it")
    if not setting:
        return False
    if not reward_model:
        raise ConfigError("[policy] reward_use_remove_padding: true: the config has no reward model (a rule reward "
                          "or an algorithm without one) whose passes it would unpad; drop it")
    version = policy.get("framework_version")
    if version is None:
        raise ConfigError("[policy] reward_use_remove_padding: true needs policy.framework_version: verl runs the "
                          "reward model as the forward worker that reads reward_model.model.use_remove_padding from "
                          "0.2 before 0.7.0 only, and an unset framework_version plans the current release (a vLLM "
                          "reward engine; the key is gone from 0.7.1); set framework_version (e.g. \"0.6.1\") or "
                          "drop reward_use_remove_padding")
    if not VERL_REMOVE_PADDING_SINCE <= table_release(version) < VERL_REWARD_ENGINE_SINCE:
        why = ("v0.1's reward model pads every pass (no remove-padding path)" if table_release(version) <
               VERL_REMOVE_PADDING_SINCE else "from 0.7.0 this project models the reward model as the reward loop's "
               "vLLM engine (reward_model.use_reward_loop: true, verl's default), which does not read the key; "
               "verl 0.7.0's legacy reward-model worker, run with use_reward_loop: false, is not modelled")
        raise ConfigError(f"[policy] reward_use_remove_padding: true at framework_version {version!r}: verl's "
                          f"reward-model worker unpads from 0.2 before 0.7.0 only ({why}); drop it")
    return True


def _dynamic_bsz(policy: Mapping[str, Any], workload: Workload, actor: ModelSpec,
                 num_gpus: int) -> tuple[int, int, int] | None:
    """``(ppo_max_token_len_per_gpu, log_prob_max_token_len_per_gpu, ulysses_sequence_parallel_size)`` of
    ``[policy]``, or ``None`` when no budget is set: verl's ``use_dynamic_bsz`` (``verl/utils/seqlen_balancing.py``
    ``rearrange_micro_batches``; the Ulysses size defaults to 1).

    The rules verl itself enforces before a step runs: each budget times the Ulysses size holds the longest
    sequence (``rearrange_micro_batches``: ``assert max_token_len >= max_seq_len``, prompt + response caps),
    the Ulysses size divides the attention heads and divides or is divided by the KV heads
    (``verl/models/transformers/monkey_patch.py``), and each worker group's GPUs are a multiple of it (the
    ``(world // sp, sp)`` device mesh of ``fsdp_workers.py``: here at most the cluster's; per group,
    :func:`~packplace.placement.candidates.framework_layout_allows`).

    Raises:
        ConfigError: one budget set without the other, a Ulysses size without them, either set for a
            framework other than ``verl``, or one of verl's rules above broken (naming the field and value).
    """
    train, logprob = policy.get("ppo_max_token_len_per_gpu"), policy.get("log_prob_max_token_len_per_gpu")
    ulysses = policy.get("ulysses_sequence_parallel_size")
    if train is None and logprob is None:
        if ulysses is not None:
            raise ConfigError("[policy] ulysses_sequence_parallel_size: the model applies it to verl's dynamic "
                              "batch size only; set ppo_max_token_len_per_gpu and log_prob_max_token_len_per_gpu "
                              "too, or drop it")
        return None
    if train is None or logprob is None:
        missing = "ppo_max_token_len_per_gpu" if train is None else "log_prob_max_token_len_per_gpu"
        raise ConfigError(f"[policy] {missing}: verl's dynamic batch size takes both token budgets "
                          "(ppo_max_token_len_per_gpu and log_prob_max_token_len_per_gpu); set it too, or drop "
                          "the other")
    if policy["framework"] != "verl":
        raise ConfigError(f"[policy] ppo_max_token_len_per_gpu: micro-batches by a token budget are verl's dynamic "
                          f"batch size (framework: verl), not {policy['framework']!r}'s; drop "
                          "ppo_max_token_len_per_gpu and log_prob_max_token_len_per_gpu")
    sp = int(ulysses or 1)
    longest = workload.context_length + workload.generation_length
    for name, budget in (("ppo_max_token_len_per_gpu", train), ("log_prob_max_token_len_per_gpu", logprob)):
        if int(budget) * sp < longest:
            raise ConfigError(f"[policy] {name}: {budget} tokens x Ulysses size {sp} is below the longest sequence "
                              f"({longest} = context_length + generation_length); verl refuses it "
                              "(rearrange_micro_batches: max_token_len >= max_seq_len)")
    heads, kv_heads = actor.heads, actor.kv_heads
    if heads % sp or (kv_heads % sp and sp % kv_heads):
        raise ConfigError(f"[policy] ulysses_sequence_parallel_size: {sp} must divide the actor's "
                          f"{heads} attention heads and divide or be a multiple of its "
                          f"{kv_heads} KV heads (verl's Ulysses attention)")
    if sp > num_gpus:   # each verl worker group's own GPUs must be a multiple: the candidates' rule
        raise ConfigError(f"[policy] ulysses_sequence_parallel_size: {sp} is more than the cluster's {num_gpus} "
                          "GPUs (verl's (world // sp, sp) device mesh of a worker group)")
    return int(train), int(logprob), sp


def _check_training_models(training: Mapping[str, TrainingOptions], models: Mapping[str, ModelSpec],
                           policy: Mapping[str, Any]) -> None:
    """Each trained model's ``[training.<role>]`` against its model and the policy: its LoRA rank
    (:func:`lora_params`), and the Megatron-Core fields (``bias_activation_fusion``, ``moe_router_dtype``) where
    they can have no effect (:func:`~packplace.placement.model.layout_rules.megatron_field_refusal`: a trainer no
    strategy puts on Megatron-Core, a router dtype on a dense model), and ``fp32_params`` where no trainer reads it
    (:func:`~packplace.placement.model.layout_rules.fp32_params_refusal`); every model against the framework
    (:func:`_check_mla_framework`).

    Raises:
        ConfigError: ``[training.<role>] field: value ...`` naming why.
    """
    _check_mla_framework(policy, models)
    for role, options in training.items():
        try:
            lora_params(models[role], options.lora_rank)
        except ConfigError as exc:
            raise ConfigError(f"[training.{role}] {exc}") from None
        for name in MEGATRON_FIELDS:
            value = getattr(options, name)
            why = megatron_field_refusal(name, value, policy["framework"], policy["trainer_backend"],
                                         models[role].is_moe)
            if why is not None:
                raise ConfigError(f"[training.{role}] {name}: {_yaml(value)} can have no effect: {why}")
        why = sequence_parallel_refusal(options.sequence_parallel, policy["framework"], policy["trainer_backend"])
        if why is not None:
            raise ConfigError(f"[training.{role}] sequence_parallel: true can have no effect: {why}")
        why = fp32_params_refusal(options.fp32_params, policy["framework"], policy["trainer_backend"])
        if why is not None:
            raise ConfigError(f"[training.{role}] fp32_params: {_yaml(options.fp32_params)} can have no effect: {why}")


def _check_release_model_type(policy: Mapping[str, Any], actor: ModelSpec) -> None:
    """A NeMo RL release whose Megatron trainer runs the Qwen models' SwiGLU unfused
    (:func:`~packplace.placement.model.nemo_rl_releases.megatron_fuses_swiglu`) prices the policy's training
    by its family, so a gated-MLP actor that may train on Megatron (``trainer_backend`` other than ``fsdp``)
    must name it: without ``model_type`` the charge would be silently left out.

    Raises:
        ConfigError: ``[models.actor] model_type: required ...``.
    """
    release = release_for(policy["framework"], policy.get("framework_version"))
    if release is None or release.qwen_fused_swiglu or actor.mlp != "gated" or actor.model_type is not None \
            or policy["trainer_backend"] == "fsdp":
        return
    raise ConfigError(f"[models.actor] model_type: required with policy.framework nemo-rl "
                      f"{policy['framework_version']!r}: that release's Megatron trainer runs the SwiGLU of the "
                      "Qwen models unfused, so the training time depends on the family; give the config.json "
                      "model_type (e.g. llama, qwen2, qwen3, qwen3_moe), or trainer_backend: fsdp")


#: The first vLLM release with multi-head latent attention (its v0.7.1 release notes: "MLA" for DeepSeek-V2/V3, the
#: latent KV cache of ``vllm/attention/backends/mla``); an earlier one serves MLA models as multi-head attention.
VLLM_MLA_SINCE = (0, 7, 1)


def _check_mla_framework(policy: Mapping[str, Any], models: Mapping[str, ModelSpec]) -> None:
    """A multi-head latent attention model (``kv_lora_rank``) under DeepSpeed-Chat: its hybrid engine generates
    with DeepSpeed's inference containers (``deepspeed/module_inject/containers``), which have Q/K/V attention
    only; its workspace and weight copies (:mod:`~packplace.placement.model.deepspeed_inference`) are not those of
    MLA, so the plan would be priced wrong.

    A framework release whose rollout engine runs a vLLM before :data:`VLLM_MLA_SINCE` is refused as well: such a
    vLLM has no MLA path and caches per-head K and V (``get_head_size`` pads DeepSeek's 192-wide heads to 256), not
    the latent this shape's cache is sized by.

    Raises:
        ConfigError: ``[models.<role>] kv_lora_rank: ...`` naming the role.
    """
    release = engine_vllm_release(policy["framework"], policy.get("framework_version"))
    mla = [role for role, model in models.items() if model.is_mla]
    if mla and release is not None and release < VLLM_MLA_SINCE:
        raise ConfigError(f"[models.{mla[0]}] kv_lora_rank: multi-head latent attention needs vLLM "
                          f"{'.'.join(map(str, VLLM_MLA_SINCE))} or later for its latent cache; "
                          f"policy.framework_version {policy.get('framework_version')!r} of {policy['framework']} "
                          f"runs vLLM "
                          f"{'.'.join(map(str, release))}, which caches per-head K and V (not modelled)")
    if policy["framework"] != "deepspeed-chat":
        return
    for role, model in models.items():
        if model.is_mla:
            raise ConfigError(f"[models.{role}] kv_lora_rank: {model.kv_lora_rank} (multi-head latent attention) "
                              "under policy.framework deepspeed-chat is not modelled: its hybrid engine's DeepSpeed "
                              "inference containers have Q/K/V attention only; use verl, openrlhf or nemo-rl")


def _is_rule(spec: Any) -> bool:
    return spec == "rule" or (isinstance(spec, Mapping) and spec.get("kind") == "rule")


def _rule_reward(spec: Any, framework: str | None) -> RuleReward:
    """``models.reward: rule`` or ``{kind: rule, verifier: v, seconds_per_sample: s, workers: n}``
    (:data:`RULE_REWARD_FIELDS`): the verifier defaults to the framework's
    (:func:`~packplace.placement.problem.workload.rule_verifier_for`), the seconds per response to the verifier's
    (:data:`~packplace.placement.problem.workload.RULE_VERIFIER_SECONDS`).

    Raises:
        ConfigError: an unknown verifier, naming the field, the value and a near miss when there is one
            (``[models.reward] verifier: 'math_verify' is a near miss of 'math-verify'; write it 'math-verify'``).
    """
    if spec == "rule":
        spec = {"kind": "rule"}
    verifier = spec.get("verifier") if isinstance(spec, Mapping) else None
    if verifier is not None and (not isinstance(verifier, str) or verifier not in RULE_VERIFIER_SECONDS):
        near = difflib.get_close_matches(str(verifier).lower().replace("_", "-"), list(RULE_VERIFIER_SECONDS),
                                         n=1, cutoff=0.6)
        hint = (f" is a near miss of {show(near[0])}; write it {show(near[0])}" if near else
                f": must be one of {', '.join(RULE_VERIFIER_SECONDS)}")
        raise ConfigError(f"[models.reward] verifier: {show(verifier)}{hint}")
    values = check_section(spec, RULE_REWARD_FIELDS, "[models.reward]", label=_label("models.reward"), **_FORMATS)
    name = values.get("verifier") or rule_verifier_for(framework)
    seconds = values.get("seconds_per_sample")
    return RuleReward(RULE_VERIFIER_SECONDS[name] if seconds is None else seconds, values["workers"], name)


def _balance_setting(values: dict[str, Any]) -> BalanceSetting:
    """The :class:`BalanceSetting` of the :data:`BALANCE_FIELDS` in ``values`` (context parallelism included)."""
    cp = ContextParallelSetting(values["context_parallel"], values["dynamic_context_parallel"],
                                values.get("max_tokens_per_rank"))
    return BalanceSetting(values["balance"], values["balance_objective"], cp)


def _training(section: dict[str, Any], models: tuple[str, ...], policy: Mapping[str, Any] | None = None
              ) -> tuple[dict[str, TrainingOptions], dict[str, BalanceSetting]]:
    """``[training]``: options of :data:`TRAINING_FIELDS` for every trained model and/or per model
    (``actor: {...}``, ``critic: {...}``), a model's own entry winning. Returns the memory options per
    model and the :data:`BALANCE_FIELDS` per model (key ``""``: the common setting). ``sharding`` is the
    trainer's (``policy``'s ``framework`` and ``trainer_backend``; none: a bare trainer,
    :func:`~packplace.placement.model.stages.resolved_sharding`): its own where unset. Under verl's or NeMo RL's
    ``trainer_backend: auto`` a model set to ``zero3`` keeps the trainer on its FSDP workers (one backend for the
    plan): the other model's unset is ``zero3`` too, and its ``none`` / ``zero1`` is refused. Otherwise an unset
    sharding under ``auto`` follows the backend each strategy runs on
    (:attr:`~packplace.placement.model.memory.TrainingOptions.sharding_follows_backend`,
    :func:`~packplace.placement.model.memory.backend_sharding`: ``zero3`` on the FSDP / DTensor workers, ``zero1``
    on Megatron-Core).

    Raises:
        ConfigError: a sharding the trainer cannot run, naming ``training.sharding`` (or
            ``training.<role>.sharding`` where the model's own entry sets it), the value and what it runs.
    """
    common = check_section({k: v for k, v in section.items() if k not in models}, TRAINING_FIELDS, "[training]",
                           extra=models, label=_label("training"), **_FORMATS)
    out = {}
    trainer = (policy["framework"], policy["trainer_backend"]) if policy is not None else ("none", "auto")
    version = policy.get("framework_version") if policy is not None else None
    own_sharding = [o.get("sharding") for o in (section.get(m) for m in models) if isinstance(o, Mapping)]
    if trainer[0] in ("verl", "nemo-rl") and trainer[1] == "auto" and "zero3" in (common.get("sharding"),
                                                                                 *own_sharding):
        trainer = (trainer[0], "fsdp")   # a zero3 model keeps the trainer on FSDP: the others' unset is zero3 too
    balance = {"": _balance_setting(common)}
    for model in models:
        own = section.get(model) or {}
        given = check_section(own, {name: replace(spec, default=None) for name, spec in TRAINING_FIELDS.items()},
                              f"[training.{model}]", label=_label(f"training.{model}"), **_FORMATS)
        merged = {**common, **given}
        balance[model] = _balance_setting(merged)
        for name in BALANCE_FIELDS:
            merged.pop(name, None)
        if merged.get("fsdp_size") is None:     # unset: the state shards over every data-parallel rank
            merged["fsdp_size"] = 0
        field = f"training.{model}.sharding" if given.get("sharding") is not None else "training.sharding"
        # unset under auto: each strategy takes its workers' layout (memory.backend_sharding), zero1 held here
        follows = merged.get("sharding") is None and trainer[0] in ("verl", "nemo-rl") and trainer[1] == "auto"
        merged["sharding"] = resolved_sharding(merged.get("sharding"), trainer[0], trainer[1], field)
        if merged.get("recompute") is None:   # unset: the trainer's own (verl FSDP: gradient checkpointing)
            merged["recompute"] = trainer_recompute(trainer[0], trainer[1], version)
        out[model] = TrainingOptions(**merged, sharding_follows_backend=follows)
    return out, balance



#: Deprecated names and what replaces them (they still work, with a DeprecationWarning).
_DEPRECATED = {
    "REQUIRED_ROLES": "packplace.placement.problem.graph.RL_ALGORITHMS[name].required_roles",
    "TRAINABLE": "packplace.placement.problem.graph.RL_ALGORITHMS[name].staleness_keys",
    "STALENESS_KEYS": "packplace.placement.problem.graph.all_staleness_keys()",
}


def __getattr__(name: str) -> Any:
    """The deprecated role and staleness tables, computed from the algorithm table (removal in 0.3.0)."""
    if name not in _DEPRECATED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"packplace.placement.problem.config.{name} is deprecated (removal in 0.3.0); "
                  f"use {_DEPRECATED[name]}", DeprecationWarning, stacklevel=2)
    if name == "REQUIRED_ROLES":
        return {algorithm: spec.required_roles for algorithm, spec in RL_ALGORITHMS.items()}
    if name == "TRAINABLE":
        return {algorithm: spec.staleness_keys for algorithm, spec in RL_ALGORITHMS.items()}
    return all_staleness_keys()
