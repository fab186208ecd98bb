"""Context parallelism of a trained model: the balance of its CP groups, as :mod:`dp_balance` does for data parallelism.

A trainer with ``training.context_parallel: C`` splits each sequence over a CP group of ``C`` of its ``dp``
data-parallel ranks (Megatron-Core's ``context_parallel_size``; its data-parallel × context-parallel ranks are
the strategy's ``dp``, so ``C`` divides ``dp``); with ``dynamic_context_parallel: true`` the ``dp`` ranks are
pooled and every micro-batch's CP groups are sized per pack (Megatron-Core's dynamic CP). The pass model
(:meth:`~packplace.placement.model.cost.CostModel.pass_time`) already divides the step's compute evenly over
the ``dp`` ranks; what CP adds is what :mod:`packplace.context_parallel` plans and scores: the slowest CP group
of each lockstep micro-batch and ring attention's KV exchange. Its factor

    f = step_time(plan) / (Σ_i t_i / dp),   t_i = the sequence's compute on one rank (a·s + b·s²)

(≥ 1: the plan's step over a perfect split of the compute with no communication) is the trainer's imbalance
factor in place of the data-parallel one (:meth:`~packplace.placement.model.dp_balance.VertexBalance.seconds`
adds ``(f − 1)·P``). The plan is the fastest of packplace's ``context_parallel`` heuristic, Megatron-Core's
scheduler and in-order static packing (:func:`best_plan`, so never slower than what Megatron would run) on the
workload's drawn batches (:func:`~packplace.placement.model.dp_balance.draw_lengths`, at most
:data:`MAX_CP_SEQUENCES` sequences, the mean over :data:`CP_DRAWS` draws). Costs: the model's training FLOPs
per token and per token² at ``flops_per_gpu · gemm_peak_fraction`` FLOP/s per rank and the KV bytes of
its ``kv_heads · head_dim`` per layer over the point-to-point links (``alpha_p2p_g``/``beta_p2p_g`` when a CP
group's ``size · tp`` GPUs fit in a node, else ``alpha_p2p_n``/``beta_p2p_n``):
:func:`packplace.context_parallel.cost_from_shape`. Tensor and pipeline parallelism divide compute and KV
bytes alike, so the factor is computed per data-parallel rank.

The activation memory CP saves (each rank holds ``1/size`` of a sequence, plus the ring attention's buffers) is
the memory model's: :class:`~packplace.placement.model.memory.ContextParallelSplit`, built by
:func:`~packplace.placement.candidates.context_parallel_split`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from packplace.context_parallel.api import DEFAULT_SOLVER, solve_context_parallel
from packplace.context_parallel.cost import cost_from_shape
from packplace.context_parallel.instance import make_instance
from packplace.errors import ConfigError
from packplace.placement.problem.models import ModelSpec
from packplace.registry import available

#: Most sequences of a drawn batch planned for the CP factor (a longer step is estimated on its first ones:
#: the factor is a ratio of times, and the plan's packing granularity is that of this many sequences).
MAX_CP_SEQUENCES = 256
#: Batches drawn for the CP factor (seeds ``LENGTH_SEED ..``, as the data-parallel balance).
CP_DRAWS = 2
#: Seconds each backend may spend on one drawn batch (the heuristic's local search stops there with its best
#: plan; the factor is an estimate, and the placement search prices many data-parallel degrees).
CP_SOLVE_S = 0.1
#: Cached factors kept before the cache is cleared.
CP_CACHE_LIMIT = 10_000


@dataclass(frozen=True)
class ContextParallelSetting:
    """How a trained model's passes use context parallelism.

    Attributes:
        degree: ``C``: the CP degree (1: none); divides the trainer's data-parallel degree.
        dynamic: CP groups sized per micro-batch from the pooled ranks (Megatron-Core dynamic CP).
        max_tokens_per_rank: Token cap per rank (Megatron's ``max_seqlen_per_dp_cp_rank``); None: the
            longest sequence over ``C``, Megatron's starting point.

    Raises:
        ConfigError: a degree or cap below 1, a non-integer, ``dynamic`` not a bool.
    """

    degree: int = 1
    dynamic: bool = False
    max_tokens_per_rank: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.degree, bool) or not isinstance(self.degree, int) or self.degree < 1:
            raise ConfigError(f"context_parallel: must be an integer >= 1, got {self.degree!r}")
        if not isinstance(self.dynamic, bool):
            raise ConfigError(f"dynamic_context_parallel: must be true or false, got {self.dynamic!r}")
        cap = self.max_tokens_per_rank
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ConfigError(f"max_tokens_per_rank: must be an integer >= 1, got {cap!r}")

    @property
    def active(self) -> bool:
        """CP changes the trainer's passes: a degree above 1 or dynamic CP."""
        return self.degree > 1 or self.dynamic

    def refusal(self, dp: int) -> str | None:
        """Why a trainer of ``dp`` data-parallel ranks cannot run this setting (one line), else None."""
        if self.degree > 1 and dp % self.degree:
            return (f"training.context_parallel: {self.degree} does not divide the trainer's data-parallel degree "
                    f"{dp}")
        return None


def _sizes(ranks: int, setting: ContextParallelSetting) -> list[int]:
    """Static: the one degree. Dynamic: the powers of two dividing ``ranks`` and ``ranks`` itself (the groups
    Megatron-Core creates for dynamic CP)."""
    if not setting.dynamic:
        return [setting.degree]
    sizes = {ranks}
    size = 1
    while size < ranks:
        if ranks % size == 0:
            sizes.add(size)
        size *= 2
    return sorted(sizes)


#: The backends whose best feasible plan costs a CP setting: packplace's default heuristic and one CP size
#: packed in order (static CP as Megatron-Core's ``dp_balanced`` runs it); Megatron-Core's dynamic-CP scheduler
#: re-implemented (:data:`FALLBACK_BACKEND`) only when neither finds a plan.
CP_BACKENDS = (DEFAULT_SOLVER, "static")
FALLBACK_BACKEND = "megatron"


def best_plan(instance: Any, seed: int = 0) -> Any:
    """The :class:`~packplace.result.SolveResult` with the smallest objective among the registered
    :data:`CP_BACKENDS`' feasible ones (the evaluator's figures; ties keep the earlier backend), or
    :data:`FALLBACK_BACKEND`'s when none of them finds a plan.

    Raises:
        ConfigError: none found a plan (the message has each backend's status).
    """
    best, statuses = None, []
    backends = list(dict.fromkeys(CP_BACKENDS))
    registered = available("context_parallel")
    while backends:
        backend = backends.pop(0)
        if backend not in registered:
            continue
        result = solve_context_parallel(instance, backend, seed=seed, time_limit_s=CP_SOLVE_S)
        statuses.append(f"{backend} {result.status}")
        if result.solution is not None and (best is None or result.objective < best.objective):
            best = result
        if best is None and not backends and backend != FALLBACK_BACKEND:
            backends.append(FALLBACK_BACKEND)
    if best is None:
        raise ConfigError(f"training.context_parallel: no CP plan found ({', '.join(statuses)})")
    return best


def cp_factor(model: ModelSpec, hardware: Any, lengths: np.ndarray, dp: int, tp: int,
              setting: ContextParallelSetting, seed: int = 0, gpus_per_node: int = 8, mode: str = "train") -> float:
    """``f`` of the module docstring for one batch of ``lengths`` (tokens, shape (n,)) on ``dp`` ranks of
    ``tp`` GPUs each, ``gpus_per_node`` GPUs per node; ``mode`` ``train`` (a training pass) or ``inference``
    (a forward: one pass of FLOPs and of K/V exchange, :func:`~packplace.context_parallel.cost.cost_from_shape`).

    Raises:
        ConfigError: ``setting.refusal(dp)``; no backend found a plan; an unknown ``mode``.
    """
    refusal = setting.refusal(dp)
    if refusal is not None:
        raise ConfigError(refusal)
    degree = setting.degree
    ranks_per_node = max(1, gpus_per_node // max(1, tp))
    cost = cost_from_shape(model, flops_per_s=hardware.flops_per_gpu * hardware.gemm_peak_fraction,
                           alpha_intra_s=hardware.alpha_p2p_g, beta_intra_s_per_byte=hardware.beta_p2p_g,
                           alpha_inter_s=hardware.alpha_p2p_n, beta_inter_s_per_byte=hardware.beta_p2p_n,
                           mode=mode)
    sizes = _sizes(dp, setting)
    cap = setting.max_tokens_per_rank or math.ceil(int(lengths.max()) / degree)
    cap = max(cap, math.ceil(int(lengths.max()) / sizes[-1]))   # the longest sequence fits the largest group
    instance = make_instance(lengths, dp=dp // degree, context_parallel={
        "max": degree, "sizes": sizes, "max_tokens_per_rank": cap, "gpus_per_node": ranks_per_node}, cost=cost)
    result = best_plan(instance, seed)
    s = lengths.astype(np.float64)
    ideal = float((cost.linear_s_per_token * s + cost.attention_s_per_token2 * s * s).sum()) / dp
    return max(1.0, float(result.objective) / ideal) if ideal > 0 else 1.0


class ContextParallelBalance:
    """CP factors of one instance's drawn batches, cached per ``(model shape, dp, tp, setting)``.

    Args:
        draws: The data-parallel balance's batches of lengths
            (:attr:`~packplace.placement.model.dp_balance.DataParallelBalance.draws`); the first
            :data:`CP_DRAWS`, each cut to :data:`MAX_CP_SEQUENCES`, are planned.
        hardware: The instance's hardware (FLOP/s, point-to-point links).
        gpus_per_node: The cluster's GPUs per node.
    """

    def __init__(self, draws: list[np.ndarray], hardware: Any, gpus_per_node: int) -> None:
        self.draws = [d[:MAX_CP_SEQUENCES] for d in draws[:CP_DRAWS]]
        self.hardware, self.gpus_per_node = hardware, gpus_per_node
        self._factors: dict[tuple, float] = {}

    def factor(self, model: ModelSpec, dp: int, tp: int, setting: ContextParallelSetting,
               mode: str = "train") -> float:
        """The mean of :func:`cp_factor` over the drawn batches (cached) of a pass of ``mode`` (``train`` or
        ``inference``); 1 for an inactive setting. A dynamic setting's factor is at most its static degree's
        (those plans are dynamic plans too)."""
        if not setting.active:
            return 1.0
        key = (model.gemm_params, model.layers, model.attention_flop_dim, model.kv_dim, model.kv_heads, model.head_dim,
               dp, tp, setting, mode)
        f = self._factors.get(key)
        if f is None:
            if len(self._factors) >= CP_CACHE_LIMIT:
                self._factors.clear()
            f = float(np.mean([
                cp_factor(model, self.hardware, d, dp, tp, setting, seed=k, gpus_per_node=self.gpus_per_node,
                          mode=mode)
                for k, d in enumerate(self.draws)]))
            if setting.dynamic:   # every group of the static degree is a dynamic plan too
                f = min(f, self.factor(model, dp, tp, replace(setting, dynamic=False), mode))
            self._factors[key] = f
        return f
