"""What ``packplace estimate`` charges a vLLM engine's decode or generation per GPU: the bytes ``place`` charges
the same engine's vertex (the whole ``gpu_memory_utilization`` pool and what the engine holds outside it), with
``place``'s fits rule.

vLLM reserves ``gpu_memory_utilization · memory_per_gpu`` at start-up whatever the live sequences (its KV cache
fills what the weights and the profiled peak leave: vllm/v1/worker/gpu_worker.py ``determine_available_memory``),
so a pooled engine's peak is ``max(need, pool) + outside``
(:func:`~packplace.placement.model.memory.engine_held_bytes`, :func:`~packplace.placement.candidates._engine_held`)
and it fits when its need fits the pool and the pool plus the outside bytes fit the GPU
(:func:`~packplace.placement.candidates.candidate_fits`). The release's terms come from the cost model's
:meth:`~packplace.placement.model.cost.CostModel.engine_reservation`, as ``place`` takes them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from packplace.errors import ConfigError, show
from packplace.placement.candidates import _engine_held, candidate_fits
from packplace.placement.model.components import VLLM_SAMPLER_KERNELS, ComponentTable
from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.framework import FRAMEWORKS, default_gpu_memory_utilization, engine_vllm_release
from packplace.placement.model.memory import _v0_non_torch_beyond, one_sequence_kv_bytes, vllm_refuses_to_start
from packplace.placement.problem.hardware import Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.plan import Strategy
from packplace.placement.problem.workload import Workload

#: The parts of :func:`engine_memory`'s split, bytes per GPU: inside the pool the weights, the KV budget (what the
#: pool leaves the KV cache), the other bytes the engine needs there (working set, logits, workspace), NCCL's
#: buffers on a release that counts them there (before vLLM 0.11), a V0 engine's non-torch bytes beyond the
#: workspace (vLLM 0.6.5-0.6.x) and the CUDA graphs a release takes from the KV cache; outside it the CUDA graphs,
#: NCCL's buffers (from vLLM 0.11) and the CUDA context.
ENGINE_PARTS = ("weights", "kv_budget", "other_in_pool", "nccl_in_pool", "non_torch_in_pool", "graphs_in_pool",
                "graphs", "nccl", "context")


def engine_gmu(framework: str, framework_version: str | None, gmu: Any) -> float:
    """The engine's ``gpu_memory_utilization`` (a fraction in (0, 1]): ``gmu`` when given, else the framework's
    default as ``place`` takes it when ``policy.gpu_memory_utilization`` is unset
    (:func:`~packplace.placement.model.framework.default_gpu_memory_utilization`; ``vllm`` and ``none``: vLLM's
    0.9).

    Raises:
        ConfigError: ``gpu_memory_utilization`` not a number in (0, 1].
    """
    if gmu is None:
        return default_gpu_memory_utilization("none" if framework == "vllm" else framework, framework_version)
    if isinstance(gmu, bool) or not isinstance(gmu, (int, float)) or not 0 < gmu <= 1:
        raise ConfigError(f"gpu_memory_utilization: must be a number in (0, 1] (the fraction of each GPU vLLM "
                          f"reserves), got {show(gmu)}")
    return float(gmu)


def engine_memory(memory: dict[str, float], *, hw: Hardware, cluster: Cluster, tp: int, pp: int, ep: int,
                  framework: str, framework_version: str | None, engine_generation: str | None,
                  enforce_eager: bool, gmu: float, shape: ModelSpec | None = None, prompt_len: int = 1,
                  max_model_len: int = 2) -> dict[str, float] | None:
    """``place``'s charge per GPU for a vLLM engine whose need inside its pool is ``memory`` (the bytes of
    :func:`~packplace.placement.task_estimate.memory_parts`: ``peak_bytes``, ``weights``, ``kv_cache``), or
    ``None`` for an engine that reserves no pool (``engine_generation`` None).

    Returns:
        Bytes per GPU: ``peak_bytes`` (``max(need, pool) + outside``), ``need_bytes`` (the need inside the pool,
        the release's in-pool graphs included), ``pool_bytes`` (``gmu · memory_per_gpu``), ``outside_bytes``,
        the parts of :data:`ENGINE_PARTS` (they sum to ``peak_bytes``), ``kv_cache`` (the live KV of the batch,
        within ``kv_budget`` when the need fits the pool), ``gpu_memory_utilization``, ``kv_needed`` (the KV bytes
        vLLM requires at start-up, one request of ``max_model_len`` in whole blocks,
        :func:`~packplace.placement.model.memory.one_sequence_kv_bytes`), ``kv_available`` (the evaluator's KV
        budget, what vLLM's start-up check compares with ``kv_needed``), ``starts`` (a ``bool``: vLLM starts the
        engine, :func:`~packplace.placement.model.memory.vllm_refuses_to_start` false) and ``fits`` (a ``bool``:
        :func:`~packplace.placement.candidates.candidate_fits`, and the engine starts). ``non_torch_in_pool`` is
        :func:`~packplace.placement.model.memory._v0_non_torch_beyond` of a V0 engine (0 on V1);
        ``nccl_in_pool`` the rest of the release's in-pool reservation without CUDA graphs.

        ``kv_budget`` is the evaluator's KV budget for the same engine where its need fits the pool
        (:meth:`~packplace.placement.model.cost.CostModel.engine_kv_budget` on ``shape`` with prompts of
        ``prompt_len`` tokens: the pool less the weights, the working set, workspace and allocator slack, the
        start-up profile run's peak beyond that working set and the release's in-pool bytes; negative where the
        pool holds less than those, and vLLM then refuses to start); ``other_in_pool`` is then what the pool holds
        besides the weights, that budget and the in-pool parts. Where the need exceeds the pool, ``kv_budget`` is
        the batch's live KV (the pool is short of the need). ``shape`` ``None``: no budget is priced, the old
        split (``kv_budget`` the pool's remainder beside the need) and ``starts`` true.
    """
    if engine_generation is None:
        return None
    release = engine_vllm_release("none" if framework == "vllm" else framework, framework_version)
    engine = RolloutEngine(gpu_memory_utilization=gmu, enforce_eager=enforce_eager,
                           engine_generation=engine_generation, vllm_release=release)
    profile = FRAMEWORKS.get("none" if framework == "vllm" else framework)
    workload = Workload(batch_size=1, samples_per_prompt=1, context_length=int(prompt_len),
                        generation_length=max(1, int(max_model_len) - int(prompt_len)))
    cost = CostModel(hw, cluster, workload, engine, framework=profile)
    reservation = cost.engine_reservation(tp, pp)
    if not reservation.pooled:
        return None
    cost_eager = CostModel(hw, cluster, cost.workload, replace(engine, enforce_eager=True))
    bare = cost_eager.engine_reservation(tp, pp)   # the same engine without CUDA graphs
    pool = gmu * float(hw.memory_per_gpu)
    weights = memory["weights"]
    held, need = _engine_held(cost, Strategy(1, pp, tp, ep), weights, memory["peak_bytes"] - weights, pool)
    capacity = float(hw.memory_per_gpu)
    graphs_in, graphs_out = reservation.in_pool - bare.in_pool, reservation.outside - bare.outside
    context = float(hw.memory_workspace)
    non_torch = _v0_non_torch_beyond(context, release) if engine_generation == "v0" else 0.0
    nccl_in = bare.in_pool - non_torch
    other = need - weights - memory["kv_cache"] - graphs_in - nccl_in - non_torch
    budget = max(need, pool) - weights - other - graphs_in - nccl_in - non_torch
    needed, starts, priced = 0.0, True, budget
    if shape is not None:
        needed = one_sequence_kv_bytes(shape, tp=tp, pp=pp, max_model_len=int(max_model_len),
                                       engine_generation=engine_generation)
        priced = cost.engine_kv_budget(shape, tp, pp, ep)
        starts = not vllm_refuses_to_start(priced, needed)
        if need <= pool:   # the evaluator's budget; the pool's other bytes what it leaves besides
            budget = priced
            other = pool - weights - budget - graphs_in - nccl_in - non_torch
    return {"peak_bytes": weights + held, "need_bytes": need, "pool_bytes": pool,
            "outside_bytes": reservation.outside, "weights": weights, "kv_cache": memory["kv_cache"],
            "kv_budget": budget, "kv_available": priced, "kv_needed": needed, "starts": starts,
            "other_in_pool": other, "nccl_in_pool": nccl_in, "non_torch_in_pool": non_torch,
            "graphs_in_pool": graphs_in, "graphs": graphs_out, "nccl": reservation.outside - graphs_out - context,
            "context": context, "gpu_memory_utilization": gmu,
            "fits": bool(candidate_fits(weights, held, need, pool, capacity)) and starts}


def add_engine_argument(parser: Any) -> None:
    """Add ``--gpu-memory-utilization`` to ``estimate``'s argument ``parser``."""
    parser.add_argument("--gpu-memory-utilization", type=float, default=None, dest="gpu_memory_utilization",
                        metavar="F", help="a vLLM engine's pool (decode, generate with --framework vllm, verl, nemo-rl "
                                          "or openrlhf): the fraction of each GPU it reserves at start-up, as "
                                          "policy.gpu_memory_utilization; default the framework's, as place takes "
                                          "it. The peak is then what place charges the engine: the pool plus the "
                                          "CUDA graphs, NCCL buffers and CUDA context outside it, and it fits by "
                                          "place's rule (its need within the pool, the pool and the outside bytes "
                                          "within the GPU)")


def engine_lines(engine: dict[str, float]) -> list[str]:
    """The text lines of :func:`engine_memory`'s split (GB per GPU), under ``estimate``'s peak line. Where the need
    exceeds the pool, the KV line is the batch's live KV and says by how much the pool is short (the pool then
    leaves the KV cache nothing)."""
    GB = 1e9
    over = ", more than the pool" if engine["need_bytes"] > engine["pool_bytes"] else ""
    lines = [f"  pool           {engine['pool_bytes'] / GB:.2f} GB  (vLLM reserves gpu_memory_utilization "
             f"{engine['gpu_memory_utilization']:g} of the GPU at start-up; needed inside it: "
             f"{engine['need_bytes'] / GB:.2f} GB{over})"]
    short = engine["need_bytes"] - engine["pool_bytes"]
    kv_note = (f"  (the batch's live KV; the pool is short by {short / GB:.2f} GB of the need, so it leaves the KV "
               f"cache nothing)" if short > 0 else
               f"  (what the pool leaves the KV cache; the batch's live KV: {engine['kv_cache'] / GB:.2f} GB)")
    inside = {"weights": "", "kv_budget": kv_note,
              "other_in_pool": "  (working set, start-up profile peak, logits, workspace)",
              "nccl_in_pool": "  (NCCL buffers: this vLLM release counts them inside the pool)",
              "non_torch_in_pool": "  (V0 non-torch bytes beyond the workspace, vLLM 0.6.5-0.6.x)",
              "graphs_in_pool": "  (CUDA graphs)"}
    optional = ("nccl_in_pool", "non_torch_in_pool", "graphs_in_pool")   # printed where they hold bytes
    lines += [f"    {name:<14} {engine[name] / GB:.2f} GB{note}" for name, note in inside.items()
              if name not in optional or engine[name] > 0]
    lines.append(f"  outside        {engine['outside_bytes'] / GB:.2f} GB")
    nccl_note = "  (NCCL buffers: inside the pool on this release, above)" if engine["nccl_in_pool"] > 0 else \
        "  (NCCL buffers)"
    notes = {"graphs": "  (CUDA graphs)", "nccl": nccl_note, "context": "  (CUDA context, workspaces)"}
    lines += [f"    {name:<14} {engine[name] / GB:.2f} GB{note}" for name, note in notes.items()]
    if "max_model_len" in engine:
        lines.append(f"  max_model_len  {engine['max_model_len']} tokens  (vLLM's start-up check holds one request "
                     f"of it in the KV cache; from {engine['max_model_len_source']})")
    if not engine.get("starts", True):
        length = f" {engine['max_model_len']} tokens" if "max_model_len" in engine else ""
        lines.append(f"  vLLM would refuse to start this engine: its KV cache cannot hold one request of "
                     f"max_model_len{length} ({engine['kv_available'] / GB:.3f} GB available for it, "
                     f"{engine['kv_needed'] / GB:.3f} GB needed in whole blocks of 16 tokens)")
    return lines


#: How :func:`sampler_line` names the log-probabilities a rollout's requests ask vLLM for
#: (:data:`~packplace.placement.model.components.SAMPLER_LOGPROBS`).
LOGPROBS_WORDS = {None: "no log-probabilities", "raw_logprobs": "raw log-probabilities",
                  "processed_logprobs": "processed log-probabilities"}


def sampler_mark(cost: CostModel, table: ComponentTable | None) -> dict[str, Any]:
    """The sampler an ``estimate`` decode iteration on ``table`` prices (``{}`` where none is priced: the knob
    model, ``table`` None, or an engine that is not vLLM): the cost model's own
    :meth:`~packplace.placement.model.cost.CostModel.decode_sampler` (``engine_generation``, ``logprobs``) and its
    bytes per vocabulary entry per running sequence and kernels (:data:`~packplace.placement.model.components.
    VLLM_SAMPLER_KERNELS`), which :func:`sampler_line` prints."""
    sampler = cost.decode_sampler() if table is not None else None
    if sampler is None:
        return {}
    kernels = VLLM_SAMPLER_KERNELS[sampler]
    return {"engine_generation": sampler[0], "logprobs": sampler[1],
            "bytes_per_entry": float(sum(per_entry for _, per_entry in kernels)), "kernels": len(kernels)}


def sampler_line(inputs: dict[str, Any]) -> str | None:
    """The note of a decode or generate estimate that says which vLLM engine's sampler it priced and whose engine
    that is (``inputs["sampler"]``, :func:`sampler_mark`; the release from ``framework`` /
    ``framework_version``), or that the knob model prices none beside a vLLM engine (``engine_generation`` set);
    ``None`` for other tasks and engines that are not vLLM."""
    task, framework, version = inputs.get("task"), inputs.get("framework"), inputs.get("framework_version")
    sampler, generation = inputs.get("sampler"), inputs.get("engine_generation")
    if task not in ("decode", "generate") or (not sampler and generation is None):
        return None
    if version:
        whose = f"{framework} {version}'s engine"
    elif framework == "none":
        whose = "bare kernels (--framework none): no engine, but the sampler of vLLM's current engine (V1)"
    elif framework == "vllm":
        whose = "vLLM's current engine"
    else:
        whose = f"{framework}'s current release's engine; --framework-version prices an older release's"
    if not sampler:
        return (f"  (vLLM {str(generation).upper()}: {whose}; the knob model prices no sampler, no head kernel "
                "beside the head's weights)")
    return (f"  (sampler: vLLM {sampler['engine_generation'].upper()}'s with {LOGPROBS_WORDS[sampler['logprobs']]}, "
            f"{sampler['bytes_per_entry']:g} bytes per vocabulary entry per running sequence\n   in "
            f"{sampler['kernels']} kernels: {whose})")
