"""Data-parallel load balance of a pass: per-rank loads of a drawn batch instead of an even split.

Model: for every data-parallel pass over the step's rollouts (training, the old-log-prob forward, the
reference / reward / critic forwards; not generation, whose lengths are unknown when it is dispatched)
seeded batches of ``B·K`` sequence lengths are drawn from the workload (:func:`draw_lengths`: ``S`` prompt
tokens plus a response of the ``gen_quantiles`` distribution, a prompt's ``K`` samples consecutive, as
GRPO dispatches siblings), split over the ``dp`` ranks and their ``m = B·K/(dp·mb)`` micro-batches as
``training.balance`` says (:func:`split_batch`), and each micro-batch's load measured in forward FLOPs
``Σ l·(2N + 2·L·l·q)`` (:func:`sequence_costs`; a verl pass on padded rows of ``R`` tokens
``Σ (R·2N + 2·L·l²·q)``). The ranks wait for the slowest: with ZeRO-3 / FSDP partitioned weights every
micro-batch all-gathers each layer over the group, so micro-batch ``k`` ends with its slowest rank
(``lockstep``: ``Σ_k max_r load[r, k]``, :func:`lockstep_load`); otherwise the ranks meet
once, at the gradient all-reduce or the result gather (``makespan``: ``max_r Σ_k load[r, k]``). The
imbalance factor ``f`` is that over the mean rank's total, averaged over the batches; the pass's
per-micro-batch part ``P`` stretches to ``f·P`` (phase ``imbalance`` = ``(f − 1)·P``,
:meth:`VertexBalance.seconds`).

A step of more than :data:`MAX_DRAWN_SEQUENCES` sequences is estimated on a smaller shape (:func:`reduced_shape`).
Options (``training.balance``, per trained model and for the inference passes its owner's):
``framework`` (default: what the framework does, :data:`FRAMEWORK_BALANCE`), ``none`` (the contiguous
split), or a balance solver of :mod:`packplace.balance` (``lpt``, ``kk``, ``repair``) assigning
equal-count ranks; ``balance_objective`` ``makespan`` or ``lockstep``. References: verl
``trainer.balance_batch`` (verl/trainer/ppo/ray_trainer.py ``_balance_batch``, verl/utils/seqlen_balancing.py,
github.com/volcengine/verl at b178a3cd56f5); Tencent-Hunyuan/UniRL pull request 45 (greedy LPT into
equal-count buckets). Performance: docs/performance.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.instance import make_instance
from packplace.errors import ConfigError
from packplace.placement.model.cp_balance import ContextParallelBalance, ContextParallelSetting
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

#: ``training.balance`` values that name a split (``framework`` resolves to one of them).
BALANCE_SPLITS = ("none", "lpt", "kk", "repair")
#: ``training.balance`` values of a config.
BALANCE_CHOICES = ("framework", *BALANCE_SPLITS)
#: ``training.balance_objective`` values.
BALANCE_OBJECTIVES = ("makespan", "lockstep")
#: The split a framework applies by default. verl: ``trainer.balance_batch: True`` in
#: verl/trainer/config/ppo_trainer.yaml, Karmarkar–Karp into equal-size partitions
#: (``get_seqlen_balanced_partitions(..., equal_size=True)``; github.com/volcengine/verl at b178a3cd56f5).
#: NeMo RL: ``policy.sequence_packing.enabled: True`` with ``algorithm: modified_first_fit_decreasing`` in
#: examples/configs/grpo_math_1B.yaml (the GRPO recipes' base; github.com/NVIDIA-NeMo/RL at 00294d9baabc):
#: the driver packs the batch longest-first into bins spread over the ranks (``shard_by_batch_size``), a
#: length-aware split modelled by ``lpt``; a config that gives the pack sizes (``policy.train_mb_tokens``)
#: prices the packs themselves instead (:mod:`packplace.placement.model.sequence_packing`, no factor). The
#: other profiles' sources dispatch contiguously.
FRAMEWORK_BALANCE = {"verl": "kk", "nemo-rl": "lpt"}
#: Seed of the first drawn batch of lengths (fixed batches: the same instance always gives the same loads).
LENGTH_SEED = 0
#: Batches drawn (seeds ``LENGTH_SEED ..``); a factor is the mean over them, the expected straggler rather
#: than one batch's luck.
LENGTH_DRAWS = 4
#: Most sequences of a drawn batch. A larger step is estimated on a shape with fewer sequences
#: (:func:`reduced_shape`), the excess imbalance scaled by the square root of the sequences it stands for.
MAX_DRAWN_SEQUENCES = 16_384
#: Cached factors kept before the cache is cleared (bounds memory in long searches).
FACTOR_CACHE_LIMIT = 100_000


@dataclass(frozen=True)
class BalanceSetting:
    """How one data-parallel pass splits its batch.

    Attributes:
        split: A value of :data:`BALANCE_CHOICES` (``framework`` before :meth:`resolved`).
        objective: ``makespan`` (the balance solver minimises the slowest rank's total) or ``lockstep``
            (the sum over micro-batches of the slowest rank's micro-batch: the solver's makespan
            assignment with each rank's micro-batches in decreasing load, :func:`split_batch`).
        context_parallel: The trained model's context parallelism
            (:class:`~packplace.placement.model.cp_balance.ContextParallelSetting`): when active its CP plan's
            factor replaces the data-parallel one for the trainer's passes.

    Raises:
        ConfigError: a value outside its choices (``balance: must be one of ..., got 'x'``).
    """

    split: str = "framework"
    objective: str = "makespan"
    context_parallel: ContextParallelSetting = ContextParallelSetting()

    def __post_init__(self) -> None:
        if self.split not in BALANCE_CHOICES:
            raise ConfigError(f"balance: must be one of {', '.join(BALANCE_CHOICES)}, got {self.split!r}")
        if self.objective not in BALANCE_OBJECTIVES:
            raise ConfigError(f"balance_objective: must be one of {', '.join(BALANCE_OBJECTIVES)}, "
                              f"got {self.objective!r}")

    def resolved(self, framework: str) -> BalanceSetting:
        """The setting with ``framework`` replaced by that framework's split (:data:`FRAMEWORK_BALANCE`,
        ``none`` for the others)."""
        if self.split != "framework":
            return self
        return BalanceSetting(FRAMEWORK_BALANCE.get(framework, "none"), self.objective, self.context_parallel)


def draw_lengths(workload: Workload, seed: int = LENGTH_SEED, cap: int = MAX_DRAWN_SEQUENCES) -> np.ndarray:
    """Tokens of each of the step's ``n = min(B·K, cap)`` sequences, shape ``(n,)`` int64: ``S + Q(u)`` rounded up,
    ``Q`` the workload's response quantile function and ``u`` stratified (``u_i = (π_i + v_i)/n``,
    ``π`` a seeded permutation, ``v_i`` seeded uniform; McKay, Beckman & Conover 1979, Latin hypercube
    sampling), so the batch follows the distribution and only the order is random. Sequence ``p·K + j``
    is sample ``j`` of prompt ``p`` (siblings consecutive). Every length is ``S + T`` without
    ``gen_quantiles``."""
    n = min(workload.sequences, cap)
    rng = np.random.default_rng(seed)
    u = (rng.permutation(n) + rng.random(n)) / n
    response = workload.quantiles(u)
    response = np.clip(np.ceil(response - 1e-9), 1, workload.generation_length)
    return (workload.context_length + response).astype(np.int64)


def sequence_costs(model: ModelSpec, lengths: np.ndarray, row: float = 0.0) -> np.ndarray:
    """Forward FLOPs of each sequence, shape like ``lengths``: ``l·(2N + 2·L·l·q)`` (document-masked
    causal attention, :meth:`~packplace.shape.TransformerShape.forward_flops`; Kaplan et al. 2020,
    Table 1). Backward passes cost a fixed multiple, so the ratios of loads are those of training too.
    ``row > 0``: each sequence a padded row of ``row`` tokens (verl without ``use_remove_padding``,
    :meth:`~packplace.placement.model.cost.CostModel.padded_row`), its dense layers on the whole row and its
    attention on its own ``l`` tokens (flash-attention varlen): ``row·2N + 2·L·l²·q``."""
    ctx = lengths.astype(np.float64)
    costs = ctx * model.forward_flops_per_token(ctx)
    if row > 0.0:
        costs = costs + (float(row) - ctx) * 2.0 * model.gemm_params
    return costs


def contiguous_split(n: int, dp: int, micro_batch: int) -> np.ndarray:
    """Sequence indices of the framework's contiguous dispatch, shape ``(dp, m, mb)``: rank ``r`` takes
    the ``r``-th chunk of ``n/dp`` sequences, its micro-batches consecutive slices of it."""
    return np.arange(n).reshape(dp, n // (dp * micro_batch), micro_batch)


def solver_ranks(lengths: np.ndarray, costs: np.ndarray, dp: int, solver: str) -> list[np.ndarray]:
    """Each rank's sequence indices from the balance solver ``solver`` (:func:`packplace.balance.api.
    solve_balance`, seed 0): one bin per rank holding ``n/dp`` sequences (``equal_count``, verl's
    ``equal_size``), the instance's ``makespan`` objective over ``costs``; the bin capacity is the batch's
    total tokens, so only the loads bind."""
    instance = make_instance(lengths, costs, seq_len=int(lengths.sum()), data_parallel_size=dp,
                             local_batch_size=1, equal_count=True)
    result = solve_balance(instance, solver, seed=0)
    if result.solution is None:  # an equal-count split always exists: a solver that returns none failed
        raise ConfigError(f"training.balance: {solver} returned no assignment ({result.status}: {result.message})")
    return [np.array(sorted(b), dtype=np.int64) for b in result.solution.bins]


def order_micro_batches(ranks: list[np.ndarray], costs: np.ndarray, micro_batch: int) -> np.ndarray:
    """Indices ``(dp, m, mb)``: each rank's sequences in decreasing cost (ties by index), cut into
    consecutive micro-batches, so micro-batch ``k`` of every rank holds that rank's ``k``-th heaviest
    slice (the order a longest-first balancer emits; UniRL's LPT buckets)."""
    out = []
    for idx in ranks:
        order = idx[np.lexsort((idx, -costs[idx]))]
        out.append(order.reshape(-1, micro_batch))
    return np.stack(out)


def ends_first_micro_batches(ranks: list[np.ndarray], costs: np.ndarray, micro_batch: int) -> np.ndarray:
    """Indices ``(dp, m, mb)`` in verl's order after balancing: each rank's sequences in increasing cost,
    the even positions then the odd ones reversed (the lightest at both ends, to shorten pipeline bubbles;
    ``_balance_batch`` in verl/trainer/ppo/ray_trainer.py at b178a3cd56f5), cut into consecutive
    micro-batches."""
    out = []
    for idx in ranks:
        order = idx[np.lexsort((idx, costs[idx]))]
        order = np.concatenate([order[::2], order[1::2][::-1]])
        out.append(order.reshape(-1, micro_batch))
    return np.stack(out)


def split_batch(lengths: np.ndarray, costs: np.ndarray, dp: int, micro_batch: int,
                setting: BalanceSetting, ranks: list[np.ndarray] | None = None) -> np.ndarray:
    """Indices ``(dp, m, mb)`` of the sequences of each micro-batch of each rank for a resolved
    ``setting``: ``none`` → :func:`contiguous_split`; a solver → its ranks (:func:`solver_ranks`, or the
    given ``ranks``), ordered within each rank by :func:`ends_first_micro_batches` (objective
    ``makespan``: the rank totals are what is balanced, the order is verl's) or
    :func:`order_micro_batches` (``lockstep``: micro-batch ``k`` of every rank its ``k``-th heaviest, so
    the per-micro-batch maxima line up)."""
    if setting.split == "none" or dp == 1:
        return contiguous_split(len(lengths), dp, micro_batch)
    if ranks is None:
        ranks = solver_ranks(lengths, costs, dp, setting.split)
    if setting.objective == "lockstep":
        return order_micro_batches(ranks, costs, micro_batch)
    return ends_first_micro_batches(ranks, costs, micro_batch)


def reduced_shape(sequences: int, dp: int, micro_batch: int, lockstep: bool,
                  cap: int = MAX_DRAWN_SEQUENCES) -> tuple[int, int, float] | None:
    """``(mb', m', scale)``: the micro-batch and micro-batches per rank a drawn batch of at most ``cap``
    sequences is split into for a step of ``sequences`` at ``(dp, mb)``, and the factor by which its excess
    imbalance ``f' − 1`` is scaled. ``(mb, m, 1)`` when the step fits. Otherwise ``mb' = min(mb, cap/dp)``,
    ``m' = min(m, cap/(dp·mb'))`` and, since the spread of a sum of ``k`` independent lengths relative to
    its mean falls as ``1/√k`` (central limit theorem), ``scale = √(mb'/mb)`` under lockstep (a
    micro-batch's slowest rank) or ``√(mb'·m'/(mb·m))`` for the slowest rank total. ``None`` (no
    imbalance estimated, factor 1) when ``dp > cap``."""
    m = sequences // (dp * micro_batch)
    if sequences <= cap:
        return micro_batch, m, 1.0
    if dp > cap:
        return None
    mb = min(micro_batch, cap // dp)
    mm = max(1, min(m, cap // (dp * mb)))
    kept = mb if lockstep else mb * mm
    return mb, mm, float(np.sqrt(kept / (micro_batch if lockstep else micro_batch * m)))


def lockstep_load(loads: np.ndarray) -> float:
    """``Σ_k max_r loads[r, k]`` of a ``(dp, m)`` array: micro-batch ``k`` ends when its slowest rank does
    (a collective in every micro-batch). The balance evaluator's lockstep objective is the same figure."""
    return float(loads.max(axis=0).sum())


def imbalance_factor(loads: np.ndarray, lockstep: bool) -> float:
    """Slowest over mean of a ``(dp, m)`` load array: ``max_r Σ_k loads / mean_r Σ_k loads`` (makespan) or
    :func:`lockstep_load` over the same mean (``lockstep``); 1 for equal loads, never below 1."""
    totals = loads.sum(axis=1)
    mean = float(totals.mean())
    if mean <= 0.0:
        return 1.0
    slowest = lockstep_load(loads) if lockstep else float(totals.max())
    return max(1.0, slowest / mean)


class DataParallelBalance:
    """One instance's drawn batches, their balanced rank assignments and imbalance factors, cached.

    Args:
        workload: The step's batch (:func:`draw_lengths`, :data:`LENGTH_DRAWS` seeds).
        hardware, gpus_per_node: The instance's hardware and GPUs per node, for the context-parallel factors
            (:attr:`context_parallel`; None: no trainer uses CP).

    Attributes:
        draws: The batches of lengths, each of shape ``(B·K,)``.

    Caches: the costs per model shape, the solver's ranks per ``(draw, shape, dp, split)`` (independent of
    the micro-batch) and the factor per ``(shape, dp, mb, setting, lockstep)``.
    """

    def __init__(self, workload: Workload, hardware: Any = None, gpus_per_node: int = 8) -> None:
        self.workload = workload
        self.draws = [draw_lengths(workload, LENGTH_SEED + k) for k in range(LENGTH_DRAWS)]
        self.context_parallel = ContextParallelBalance(self.draws, hardware, gpus_per_node) \
            if hardware is not None else None
        self._costs: dict[tuple, np.ndarray] = {}
        self._ranks: dict[tuple, list[np.ndarray]] = {}
        self._factors: dict[tuple, float] = {}
        self._shapes: dict[int, tuple] = {}

    def _shape_key(self, model: ModelSpec) -> tuple:
        """``(N, L, q)`` of ``model``, the figures its costs depend on (kept per model object: ``N`` is a
        computed property)."""
        key = self._shapes.get(id(model))
        if key is None or key[0] is not model:
            key = self._shapes[id(model)] = (model, (model.gemm_params, model.layers, model.attention_flop_dim))
        return key[1]

    def costs(self, model: ModelSpec, draw: int = 0) -> np.ndarray:
        """:func:`sequence_costs` of batch ``draw`` for ``model`` (cached per shape)."""
        key = (draw, self._shape_key(model))
        costs = self._costs.get(key)
        if costs is None:
            costs = self._costs[key] = sequence_costs(model, self.draws[draw])
        return costs

    def loads(self, model: ModelSpec, dp: int, micro_batch: int, setting: BalanceSetting,
              draw: int = 0, micro_batches: int | None = None, row: float = 0.0) -> np.ndarray:
        """FLOPs per micro-batch per rank of batch ``draw``, shape ``(dp, m)``, split as ``setting``
        (resolved) says; with ``micro_batches`` only the first ``dp·m·mb`` sequences of the batch. ``row > 0``:
        the split is the same (verl's ``_balance_batch`` balances real token counts, ``attention_mask.sum``), the
        loads those of padded rows of ``row`` tokens (:func:`sequence_costs`)."""
        lengths, costs = self.draws[draw], self.costs(model, draw)
        paid = sequence_costs(model, lengths, row) if row > 0.0 else costs
        if micro_batches is not None:
            count = dp * micro_batches * micro_batch
            lengths, costs, paid = lengths[:count], costs[:count], paid[:count]
        ranks = None
        if setting.split != "none" and dp > 1:
            key = (draw, self._shape_key(model), dp, len(lengths), setting.split)
            ranks = self._ranks.get(key)
            if ranks is None:
                ranks = self._ranks[key] = solver_ranks(lengths, costs, dp, setting.split)
        idx = split_batch(lengths, costs, dp, micro_batch, setting, ranks)
        return paid[idx].sum(axis=2)

    def factor(self, model: ModelSpec, dp: int, micro_batch: int, setting: BalanceSetting, lockstep: bool,
               row: float = 0.0) -> float:
        """The mean over the drawn batches of :func:`imbalance_factor` of :meth:`loads` (cached; ``row``: padded
        rows of that many tokens), on the :func:`reduced_shape` of a step larger than
        :data:`MAX_DRAWN_SEQUENCES`."""
        key = (self._shape_key(model), dp, micro_batch, setting, lockstep, float(row))
        f = self._factors.get(key)
        if f is None:
            if len(self._factors) >= FACTOR_CACHE_LIMIT:
                self._factors.clear()
            shape = reduced_shape(self.workload.sequences, dp, micro_batch, lockstep)
            if shape is None:
                f = 1.0
            else:
                mb, m, scale = shape
                sample = float(np.mean([
                    imbalance_factor(self.loads(model, dp, mb, setting, k, m, row), lockstep)
                    for k in range(len(self.draws))]))
                f = 1.0 + (sample - 1.0) * scale
            self._factors[key] = f
        return f


@dataclass(frozen=True)
class VertexBalance:
    """The balance of one vertex's passes: the instance's :class:`DataParallelBalance`, the vertex's
    resolved setting, whether its passes run in lockstep (ZeRO-3 / FSDP-partitioned weights) and whether
    its training re-runs the forward pass of every micro-batch (``recompute: full``,
    :mod:`packplace.placement.model.training_time`); ``lora_rank`` of a trainer with LoRA adapters
    (:meth:`~packplace.placement.model.cost.CostModel.pass_time`); ``context_parallel_forward``: a forward
    vertex that runs with its trained model's context parallelism (verl's Megatron reference with the
    actor's and critic values with the critic's, :func:`~packplace.placement.candidates.forward_context_parallel`)."""

    balance: DataParallelBalance
    setting: BalanceSetting
    lockstep: bool
    recompute_full: bool = False
    lora_rank: int = 0
    context_parallel_forward: bool = False

    def factor(self, model: ModelSpec, dp: int, micro_batch: int, row: float = 0.0) -> float:
        """Slowest over mean rank (≥ 1) of the vertex's passes (:meth:`DataParallelBalance.factor`; ``row``: a
        verl pass on padded rows of that many tokens, :meth:`~packplace.placement.model.cost.CostModel.padded_row`)."""
        return self.balance.factor(model, dp, micro_batch, self.setting, self.lockstep, row)

    def seconds(self, cost: Any, model: ModelSpec, kind: str, dp: int, pp: int, tp: int, micro_batch: int,
                extent: tuple[int, int, int], ep: int, phases: dict[str, float]) -> float:
        """Seconds the slowest rank adds: ``(f − 1)·P`` with ``P`` the per-micro-batch part of the passes,
        ``forward`` of an inference vertex, or of a training vertex its training pipeline
        (:meth:`~packplace.placement.model.cost.CostModel.pass_time` without the gradient all-reduce and the
        optimizer update) plus ``old_log_prob`` plus, with ``recompute: full``, the recomputed forward (one
        more forward pass per micro-batch). For a training vertex whose model runs context parallelism
        (``setting.context_parallel`` active) ``f`` is its CP plan's factor
        (:class:`~packplace.placement.model.cp_balance.ContextParallelBalance`), and so for a forward that
        runs with it (``context_parallel_forward``) at a forward's cost (one pass of FLOPs and of K/V
        exchange). 0 for generation, ``dp = 1``
        and a model whose passes run NeMo RL's sequence packing (``cost.packed(model)``): their packs' slowest
        path is already the pass's micro-batches (:mod:`packplace.placement.model.sequence_packing`). A verl pass on
        padded rows (``cost.padded_row``) weighs each sequence as its row: its dense layers equal on every rank,
        only its attention uneven (:func:`sequence_costs`), against ``P`` priced on those rows."""
        packed = getattr(cost, "packed", None)   # a cost stand-in without packing has no such method
        if kind == "generate" or dp <= 1 or (packed is not None and packed(model)):
            return 0.0
        cp = self.setting.context_parallel
        if (kind == "train" or self.context_parallel_forward) and cp.active \
                and self.balance.context_parallel is not None:
            f = self.balance.context_parallel.factor(model, dp, tp, cp,   # the trainer's CP plan
                                                     "train" if kind == "train" else "inference")
        else:
            padded_row = getattr(cost, "padded_row", None)   # a cost stand-in has no padded rows
            f = self.factor(model, dp, micro_batch, padded_row(model, pp, tp, ep) if padded_row is not None else 0.0)
        if f <= 1.0:
            return 0.0
        if kind == "infer":
            per_micro_batch = phases.get("forward", 0.0)
        else:
            per_micro_batch = (cost.pass_time(model, True, dp, pp, tp, micro_batch, extent, ep, include_update=False,
                                              lora_rank=self.lora_rank)
                               + phases.get("old_log_prob", 0.0))
            if self.recompute_full:
                per_micro_batch += cost.pass_time(model, False, dp, pp, tp, micro_batch, extent, ep,
                                                  lora_rank=self.lora_rank)
        return (f - 1.0) * per_micro_batch


def instance_balance(instance: Any) -> DataParallelBalance:
    """The instance's :class:`DataParallelBalance`, built once and cached on the instance."""
    cached = instance._cache.get("dp_balance")
    if cached is None:
        cached = instance._cache["dp_balance"] = DataParallelBalance(instance.workload, instance.hardware,
                                                                     instance.cluster.gpus_per_node)
    return cached


def vertex_setting(instance: Any, owner: str | None) -> BalanceSetting:
    """The resolved setting of a pass whose batch belongs to trained model ``owner`` (its own
    ``training.<model>.balance``, else ``training.balance``, else the framework's)."""
    settings = getattr(instance, "balance", None) or {}
    setting = settings.get(owner) if owner is not None else None
    if setting is None:
        setting = settings.get("", BalanceSetting())
    return setting.resolved(instance.framework)
