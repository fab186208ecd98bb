"""A packplace scheduler for Megatron-Core's sequence-packing slot (``megatron/core/datasets/data_schedule.py``).

Megatron-Core packs a global batch of variable-length sequences into micro-batches with a
scheduler class (``BasePackingScheduler``; its ``dp_balanced`` scheduler packs next-fit in arrival
order, then splits packs until their count is a multiple of the data-parallel size). Its slot is
``get_groups_and_subsamples(sample_id_seqlens)``: (global id, length) pairs in, and out
``groups[i][j]``, the sample positions of micro-batch i on DP×CP rank j. :class:`PackplacePackingScheduler`
fills the same slot: every pack within ``max_seqlen_per_dp_cp_rank · cp_size`` tokens, the same
number of packs per DP rank (the fewest that pack, a multiple of the virtual-pipeline group),
and per-rank FLOPs balanced by a packplace balance solver; each rank's packs run heaviest first,
so micro-batch i pairs the i-th heaviest packs of all ranks. Megatron's pipelines synchronise every
micro-batch, so with ``repair`` (the default) the scheduler asks for its ``tie_break="lockstep"``: among
the answers at the makespan optimum, the one with the lowest lockstep time (Σ over micro-batch index of
the slowest rank's pack); ``tie_break=None`` takes the plain makespan answer. Plug it in with one call, which adds a
scheduler name next to Megatron's own (``dp_balanced`` stays as it is)::

    from packplace.integrations.megatron import register
    register()                                   # adds PackingSchedulerEnum.PACKPLACE
    config.sequence_packing_scheduler = "packplace"   # Megatron's wrap_data_iterator picks it up

The registered class subclasses both this class and Megatron's ``DpBalancedScheduler``, so
``run()`` (gathering, routing and padding the samples) stays Megatron's.

Source followed: Megatron-LM ``megatron/core/datasets/data_schedule.py`` at commit
a9381be5980c4a76bc5186ac7a80e14dd6baedba (``BasePackingScheduler``, ``DpBalancedScheduler``).
Megatron need not be installed. Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from packplace.balance.api import solve_balance
from packplace.balance.instance import make_instance
from packplace.balance.rank_rules import FreeRanks, PackingColumns, construct
from packplace.balance.reference import first_passing, local_batch_size_bound
from packplace.balance.schema import BalanceInstance
from packplace.errors import ConfigError, InfeasibleError, show
from packplace.integrations.arguments import BalanceTerms, callers_terms, number_list, positive_integer
from packplace.integrations.partition import DEFAULT_SOLVER
from packplace.registry import get as get_solver
from packplace.result import INFEASIBLE, SolveResult
from packplace.run import Run, check_limits

#: The least ``time_limit_s`` (seconds) the backend is given where the count decision used up the deadline (the
#: backends refuse 0); what it cannot finish there the fallbacks do.
MIN_SOLVE_S = 1e-3
#: The backends run, in turn, to completion with no time limit where the scheduler's backend found no assignment
#: and none is proven impossible: ``lpt`` (deterministic, a dead end hands over to the construction), then
#: ``reference`` (the instance's own construction).
FALLBACK_SOLVERS = ("lpt", "reference")
def sequence_flops(seqlens: Sequence[int] | np.ndarray, hidden_size: int) -> np.ndarray:
    """Relative FLOPs of one dense-transformer layer per sequence, ``6·h·s + s²`` (float array, shape (n,)).

    Source: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
    Using Megatron-LM" (arXiv:2104.04473) §5.1: a layer's forward pass costs ``24·s·h² + 4·s²·h``
    FLOPs; divided by 4h. Packed sequences attend only within themselves (THD), so a pack costs the
    sum of its sequences.
    """
    values = np.asarray(number_list(seqlens, "seqlens"), dtype=np.float64)
    hidden = positive_integer(hidden_size, "hidden_size")
    return 6.0 * hidden * values + values * values


def construction_count(tokens: np.ndarray, seq_len: int, ranks: int, multiple: int = 1) -> int | None:
    """The fewest packs per rank m, a multiple of ``multiple``, for which the feasibility-first construction
    (:func:`packplace.balance.rank_rules.construct`, ordered by tokens) packs ``tokens`` (positive ints, shape
    (n,), none above ``seq_len``) on ``ranks`` ranks, every pack non-empty; None where it packs at no m in
    [lower bound, n // ranks].

    The search of ``local_batch_size="auto"`` (:func:`~packplace.balance.reference.first_passing` from the tight
    lower bound) without its exact CP-SAT check, whose work (seconds on a small batch) no time limit bounds. It
    reads no clock: the same batch gives the same m on every rank.
    """
    n = len(tokens)
    if not n or int(tokens.max()) > seq_len:   # make_instance names the sequence over the cap
        return None
    no_groups = np.full(n, -1, dtype=np.int64)
    lower = local_batch_size_bound(tokens, seq_len, None, no_groups, ranks, tight=True)
    first, last = -(-lower // multiple), n // ranks // multiple
    if first > last:
        return None

    def columns_at(k: int) -> PackingColumns:
        return PackingColumns(tokens=tokens, priority=tokens.astype(np.float64), key_rank=np.arange(n),
                              group_of=no_groups, ranks=ranks, per_rank=k * multiple, seq_len=seq_len)

    free = FreeRanks(columns_at(first))

    def packs(k: int) -> bool:
        return construct(columns_at(k), free=free) is not None

    found = first_passing(first, last, packs)
    return None if found is None else found * multiple


class PackplacePackingScheduler:
    """Megatron-Core packing scheduler that balances FLOPs across DP ranks under the token cap.

    Args:
        max_seqlen_per_dp_cp_rank: Token cap of one pack per DP×CP rank (a pack holds at most
            this times ``cp_size`` tokens).
        cp_size: Context-parallel size; each pack spans ``cp_size`` consecutive ranks.
        dp_size: Data-parallel size D.
        microbatch_group_size_per_vp_stage: With virtual pipelining, packs per rank are a multiple
            of it (None: any count).
        hidden_size: h of the FLOP proxy :func:`sequence_flops`.
        solver, time_limit_s, seed: packplace balance backend (default ``repair``); ``time_limit_s`` bounds
            each call as a whole, the count decision included (:meth:`rank_packs`: with a limit the count
            is the construction's, and a plan the limit cut is replaced by a deterministic fallback's); a limit that
            is not a positive finite number is refused (ConfigError naming it; None: no limit).
        tie_break: ``"lockstep"`` (default) or None: passed to ``repair`` (other backends' answers are
            taken as they are): among packings at its makespan, the lowest lockstep time.

    Attributes:
        last_result: The :class:`~packplace.result.SolveResult` of the latest schedule.
    """

    def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                 microbatch_group_size_per_vp_stage: int | None, *, hidden_size: int = 4096,
                 solver: str = DEFAULT_SOLVER, time_limit_s: float | None = None, seed: int = 0,
                 tie_break: str | None = "lockstep") -> None:
        for name, value in (("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank), ("cp_size", cp_size),
                            ("dp_size", dp_size), ("hidden_size", hidden_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name}: must be an integer >= 1, got {show(value)}")
        group = microbatch_group_size_per_vp_stage
        if group is not None and (isinstance(group, bool) or not isinstance(group, int) or group < 1):
            raise ConfigError(f"microbatch_group_size_per_vp_stage: must be None or an integer >= 1, got {show(group)}")
        self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
        self.cp_size = cp_size
        self.dp_size = dp_size
        self.microbatch_group_size_per_vp_stage = group
        self.max_seq_len_all_ranks = max_seqlen_per_dp_cp_rank * cp_size
        self.hidden_size = hidden_size
        if tie_break not in (None, "lockstep"):
            raise ConfigError(f"tie_break: must be 'lockstep' or None, got {show(tie_break)}")
        check_limits(time_limit_s, seed)   # a limit <= 0, NaN or inf is refused, not run as none (None: no limit)
        self.solver, self.time_limit_s, self.seed = solver, time_limit_s, seed
        self.tie_break = tie_break
        # validates the name and loads the backends now, so that a process's first batch does not pay the import
        # within its time limit
        get_solver("balance", solver)
        self.last_result: Any = None

    def get_required_sample_keys(self) -> list[str]:
        """The batch keys Megatron's ``run`` needs (as ``DpBalancedScheduler``)."""
        return ["tokens", "labels", "loss_mask", "position_ids", "original_seq_len", "padded_seq_len"]

    def rank_packs(self, seqlens: Sequence[int] | np.ndarray) -> list[list[list[int]]]:
        """``packs[r][i]``: sorted sample positions of rank r's i-th pack, heaviest pack first.

        ``time_limit_s`` bounds the whole call (one deadline, :class:`~packplace.run.Run`): the count of packs
        per rank comes first, from a decision that does not read the clock (:meth:`_instance`: with a limit,
        the fewest counts for which the feasibility-first construction packs, no CP-SAT), and the backend
        gets what is left of the deadline (at least :data:`MIN_SOLVE_S`). Where the backend found no
        assignment and none is proven impossible (its time limit ran out: what a process's first call
        loads counts against it), or where the time limit cut it (its plan would depend on the machine's load, and
        Megatron schedules the batch on every rank), :data:`FALLBACK_SOLVERS` run in turn to completion with
        no time limit (deterministic); ``last_result.hit_time_limit`` is then true and
        ``last_result.info["fallback"]`` names the one whose plan it is (None where no fallback ran). So the
        plan is the backend's full answer or the fallback's, each a function of the batch: ranks disagree
        only where the clock cut the backend on some ranks and not on others (a limit near the call's own
        time; docs/performance.md has the times). Zero-length sequences are placed too (:meth:`_with_empty`).

        Raises:
            ConfigError: a sequence above the pack cap, bad lengths.
            InfeasibleError: fewer sequences than ranks (a pack cannot be empty).
            RuntimeError: neither the backend nor the fallbacks found an assignment.
        """
        lengths = number_list(seqlens, "seqlens", integers=True, minimum=0)
        if not lengths:
            raise ConfigError("seqlens: no sequences to pack")
        deadline = Run("balance", None, time_limit_s=self.time_limit_s)
        tokens = np.asarray(lengths, dtype=np.int64)
        costs = sequence_flops(tokens, self.hidden_size)
        multiple = self.microbatch_group_size_per_vp_stage or 1
        cap = self.max_seq_len_all_ranks
        for i, length in enumerate(lengths):   # as make_instance words it, before the path that builds none
            if length > cap:
                raise ConfigError(f"seqlens[{i}]: {length} tokens exceed the cap max_seqlen_per_dp_cp_rank x cp_size "
                                  f"= {cap} tokens per pack")
        positive = [i for i, length in enumerate(lengths) if length > 0]
        if len(positive) < self.dp_size * multiple:   # zero-length sequences must fill packs: no solve needed
            packs = self._one_per_pack(positive, costs, multiple, len(lengths))
            return self._heaviest_first(self._with_empty(packs, lengths, costs), costs)
        nonzero = np.asarray(positive, dtype=np.int64)
        instance = self._instance(tokens[nonzero], costs[nonzero], multiple)
        result = self._solve(instance, deadline)
        out = []
        for rank in result.solution.ranks():
            packs = [sorted(int(nonzero[i]) for i in pack) for pack in rank]
            packs.sort(key=lambda pack: (-float(costs[pack].sum()), pack))
            out.append(packs)
        return self._with_empty(out, lengths, costs)

    def _solve(self, instance: BalanceInstance, deadline: Run) -> SolveResult:
        """The backend's answer within what ``deadline`` has left, else :data:`FALLBACK_SOLVERS`' (no time limit);
        kept in ``last_result``.

        Raises:
            RuntimeError: no assignment from any of them.
        """
        # ranks synchronise every micro-batch: among makespan-optimal answers, the lowest lockstep time
        tie = {"tie_break": self.tie_break} if self.solver == "repair" and self.tie_break else {}
        limit = None if self.time_limit_s is None else max(MIN_SOLVE_S, deadline.left())
        result = solve_balance(instance, self.solver, time_limit_s=limit, seed=self.seed, **tie)
        fallback = None
        # a plan the clock cut is the machine's load's (ranks would disagree): the fallback's is the batch's own
        if result.status != INFEASIBLE and (result.solution is None or (limit is not None and result.hit_time_limit)):
            first = result
            why = ("found no assignment" if first.solution is None
                   else "was cut by the time limit (its plan would depend on the machine's load)")
            for name in FALLBACK_SOLVERS:
                result = solve_balance(instance, name, seed=self.seed)
                if result.solution is not None:
                    fallback = name
                    result = dataclasses.replace(
                        result, hit_time_limit=True,
                        message=f"{first.solver} {why} ({first.status}: {first.message}); returning the {name} "
                                f"fallback's plan (run to completion, no time limit)")
                    break
            else:
                result = first
        self.last_result = dataclasses.replace(result, info={**result.info, "fallback": fallback})
        if result.solution is None:
            raise RuntimeError(f"megatron packing: {result.solver} found no assignment ({result.status}: "
                               f"{result.message})")
        return result

    def _instance(self, tokens: np.ndarray, costs: np.ndarray, multiple: int) -> BalanceInstance:
        """The balance instance of the sequences (all of positive length) at a count of packs per rank, a
        multiple of ``multiple``.

        With ``time_limit_s``: the fewest counts for which the feasibility-first construction packs them
        (:func:`construction_count`: no CP-SAT and no clock, so every rank decides alike, within the limit;
        the count may be above the proven fewest where only an exact search packs fewer). Without a limit, or
        where the construction packs at no count: ``local_batch_size="auto"`` (the construction, then CP-SAT's
        exact check of the smaller counts under its deterministic work limit while the model is small: the
        proven fewest, or the proof that none packs; seconds on a batch of a few hundred sequences).

        Raises:
            ConfigError: a sequence above the pack cap.
            InfeasibleError: no count of packs per rank holds the sequences (proven).
        """
        terms = BalanceTerms(
            sequences="seqlens", element="seqlens[{key}]",
            cap=f"max_seqlen_per_dp_cp_rank x cp_size = {self.max_seq_len_all_ranks} tokens per pack",
            ranks=f"dp_size={self.dp_size}", unit="pack", count="packs per rank")
        shape = {"seq_len": self.max_seq_len_all_ranks, "data_parallel_size": self.dp_size,
                 "name": "megatron-packing"}
        with callers_terms(terms):
            per_rank = None if self.time_limit_s is None else construction_count(
                tokens, self.max_seq_len_all_ranks, self.dp_size, multiple)
            instance = make_instance(tokens, costs, local_batch_size=per_rank or "auto", **shape)
        if instance.local_batch_size % multiple:
            per_rank = -(-instance.local_batch_size // multiple) * multiple
            try:
                instance = make_instance(tokens, costs, local_batch_size=per_rank, **shape)
            except InfeasibleError:
                raise InfeasibleError(
                    f"microbatch_group_size_per_vp_stage: {multiple} needs {per_rank} packs per rank here, and "
                    f"{per_rank} packs on each of dp_size={self.dp_size} ranks need at least "
                    f"{per_rank * self.dp_size} sequences; seqlens has {len(tokens)}") from None
        return instance

    def _one_per_pack(self, positive: list[int], costs: np.ndarray, multiple: int, n: int) -> list[list[list[int]]]:
        """Where fewer sequences of positive length than ``dp_size × multiple`` packs are given: that many
        packs, each positive one alone in a pack (heaviest first, one per rank in turn), the zero-length ones
        filling the packs left empty in rank order (:meth:`_with_empty` places the rest).

        Raises:
            InfeasibleError: fewer sequences than packs.
        """
        ranks = self.dp_size
        if n < ranks:
            raise InfeasibleError(f"seqlens: {n} sequences cannot give each of dp_size={ranks} ranks a non-empty "
                                  "pack")
        if n < ranks * multiple:
            raise InfeasibleError(
                f"microbatch_group_size_per_vp_stage: {multiple} needs {multiple} packs per rank here, and "
                f"{multiple} packs on each of dp_size={ranks} ranks need at least {ranks * multiple} sequences; "
                f"seqlens has {n}")
        packs: list[list[list[int]]] = [[[] for _ in range(multiple)] for _ in range(ranks)]
        order = sorted(positive, key=lambda i: (-float(costs[i]), i))
        for k, i in enumerate(order):
            packs[k % ranks][k // ranks].append(i)
        taken = set(positive)
        zeros = iter(i for i in range(n) if i not in taken)
        for rank in packs:
            for pack in rank:
                if not pack:
                    pack.append(next(zeros))
        return packs

    @staticmethod
    def _with_empty(packs: list[list[list[int]]], lengths: list[int], costs: np.ndarray) -> list[list[list[int]]]:
        """``packs`` with every zero-length sequence not yet in one placed as Megatron's next-fit places it,
        in a pack beside the sequence before it in the batch (the sequence after it where it comes first;
        no tokens and no FLOPs, so the cap and the balance stay as they are); packs re-sorted, heaviest first."""
        where = {i: pack for rank in packs for pack in rank for i in pack}
        if len(where) == len(lengths):
            return packs
        host = where[min(where)]   # a leading zero-length sequence joins the first placed one
        for i in range(len(lengths)):
            if i in where:
                host = where[i]
            else:
                host.append(i)
        return PackplacePackingScheduler._heaviest_first(packs, costs)

    @staticmethod
    def _heaviest_first(packs: list[list[list[int]]], costs: np.ndarray) -> list[list[list[int]]]:
        """Each pack's positions sorted, each rank's packs heaviest first (ties by their positions)."""
        for rank in packs:
            for pack in rank:
                pack.sort()
            rank.sort(key=lambda pack: (-float(costs[pack].sum()), pack))
        return packs

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[tuple[Any, int]]) -> list[list[list[int]]]:
        """Megatron's slot: ``groups[i][j]`` = sample positions (into ``sample_id_seqlens``) of micro-batch i
        on DP×CP rank j; j // cp_size is the DP rank, whose pack the CP ranks of that group share.

        Args:
            sample_id_seqlens: (global sample id, sequence length) pairs of the global batch.

        Raises:
            ConfigError: an entry that is not a (sample id, length) pair, a sample id given twice (named:
                Megatron's ``data_schedule_utils._get_global_seqlens_and_ids`` numbers the samples 0..n-1, so a
                repeated id is a caller's error that its schedulers pass on silently, and its routing by id,
                ``dict(global_id_seqlens)``, would then drop one), an unhashable id, a bad length
                (:meth:`rank_packs`).
        """
        if isinstance(sample_id_seqlens, (str, bytes, dict)) or not hasattr(sample_id_seqlens, "__iter__"):
            raise ConfigError(f"sample_id_seqlens: must be a sequence of (sample id, sequence length) pairs, "
                              f"got {show(sample_id_seqlens)}")
        lengths = []
        first_at: dict[Any, int] = {}
        for i, entry in enumerate(sample_id_seqlens):
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ConfigError(f"sample_id_seqlens[{i}]: must be a (sample id, sequence length) pair, "
                                  f"got {show(entry)}")
            try:
                seen = first_at.setdefault(entry[0], i)
            except TypeError:
                raise ConfigError(f"sample_id_seqlens[{i}][0]: a sample id must be hashable, "
                                  f"got {show(entry[0])}") from None
            if seen != i:   # Megatron numbers the batch's samples 0..n-1 (``_get_global_seqlens_and_ids``)
                raise ConfigError(f"sample_id_seqlens[{i}][0]: duplicate sample id {show(entry[0])} (also "
                                  f"sample_id_seqlens[{seen}][0])")
            lengths.append(entry[1])
        if not lengths:
            raise ConfigError("sample_id_seqlens: no samples to pack")
        try:
            packs = self.rank_packs(lengths)
        except (ConfigError, InfeasibleError) as error:
            message = str(error)
            if message.startswith("seqlens["):   # name the pair's length element as the caller wrote it
                index, rest = message[len("seqlens["):].split("]", 1)
                raise type(error)(f"sample_id_seqlens[{index}][1]{rest}") from None
            if message.startswith("seqlens:") or "; seqlens has " in message:
                raise type(error)(message.replace("seqlens", "sample_id_seqlens")) from None
            raise
        count = len(packs[0])
        return [[packs[j // self.cp_size][i] for j in range(self.dp_size * self.cp_size)] for i in range(count)]


#: The module Megatron-Core keeps its packing schedulers in (``PackingSchedulerEnum``, ``scheduler_map``).
DATA_SCHEDULE_MODULE = "megatron.core.datasets.data_schedule"


def register(name: str = "packplace", *, data_schedule: Any = None, **options: Any) -> Any:
    """Add packplace's scheduler to Megatron-Core under a new scheduler name, keeping Megatron's own.

    Megatron's ``wrap_data_iterator`` looks the scheduler up as
    ``scheduler_map[PackingSchedulerEnum[config.sequence_packing_scheduler.upper()]]`` and builds it
    with ``(max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage)``.
    This adds the member ``name.upper()`` (value ``name``) to ``PackingSchedulerEnum`` and maps it
    to a class deriving from :class:`PackplacePackingScheduler` and Megatron's
    ``DpBalancedScheduler`` (whose ``run()`` it keeps). Existing members and entries, ``DP_BALANCED``
    included, are not touched. Calling it again with the same name changes nothing.

    Args:
        name: The scheduler name for ``config.sequence_packing_scheduler`` (a Python identifier).
        data_schedule: The module to register in; default ``megatron.core.datasets.data_schedule``.
        **options: Keyword options of :class:`PackplacePackingScheduler` (``hidden_size``,
            ``solver``, ``time_limit_s``, ``seed``, ``tie_break``) for every scheduler Megatron builds.

    Returns:
        The new ``PackingSchedulerEnum`` member.

    Raises:
        ConfigError: ``name`` is not an identifier or is already one of Megatron's schedulers; an
            unknown option.
        ImportError: Megatron-Core is not importable (one line).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"name: must be a Python identifier, got {show(name)}")
    unknown = sorted(set(options) - {"hidden_size", "solver", "time_limit_s", "seed", "tie_break"})
    if unknown:
        raise ConfigError(f"options: unknown option {show(unknown[0])} (hidden_size, solver, time_limit_s, seed, "
                          "tie_break)")
    if data_schedule is None:
        try:
            data_schedule = importlib.import_module(DATA_SCHEDULE_MODULE)
        except ImportError as missing:
            raise ImportError(f"register: {DATA_SCHEDULE_MODULE} is not importable ({missing})") from None
    needed = ("PackingSchedulerEnum", "scheduler_map", "DpBalancedScheduler")
    if not all(hasattr(data_schedule, name) for name in needed):
        raise ConfigError(f"data_schedule: must be Megatron-Core's data_schedule module (PackingSchedulerEnum, "
                          f"scheduler_map, DpBalancedScheduler), got {show(data_schedule)}")
    members = data_schedule.PackingSchedulerEnum
    key = name.upper()
    if key in members.__members__:
        member = members[key]
        if getattr(data_schedule.scheduler_map.get(member), "packplace_options", None) == options:
            return member
        raise ConfigError(f"name: {show(name)} is already Megatron's scheduler {member.name}; pick another name")
    if any(member.value == name.lower() for member in members):
        raise ConfigError(f"name: the value {show(name.lower())} is already a scheduler's; pick another name")
    base = data_schedule.DpBalancedScheduler

    class PackplaceScheduler(PackplacePackingScheduler, base):  # type: ignore[misc, valid-type]
        """packplace's FLOP-balancing scheduler in Megatron's slot (``run()`` is Megatron's)."""

        packplace_options = dict(options)

        def __init__(self, max_seqlen_per_dp_cp_rank: int, cp_size: int, dp_size: int,
                     microbatch_group_size_per_vp_stage: int | None) -> None:
            PackplacePackingScheduler.__init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                                               microbatch_group_size_per_vp_stage, **options)

    member = _add_member(members, key, name.lower())
    data_schedule.scheduler_map[member] = PackplaceScheduler
    return member


def _add_member(members: type[enum.Enum], key: str, value: str) -> enum.Enum:
    """Add ``key = value`` to an existing Enum class in place (lookups by name, by value and iteration),
    so that references to the class held elsewhere see it too."""
    member = object.__new__(members)
    member._name_ = key
    member._value_ = value
    member.__objclass__ = members  # type: ignore[attr-defined]
    if hasattr(members, "_sort_order_"):
        member._sort_order_ = len(members._member_names_)  # type: ignore[attr-defined]
    type.__setattr__(members, key, member)
    members._member_map_[key] = member
    members._value2member_map_[value] = member
    members._member_names_.append(key)  # type: ignore[attr-defined]
    return member


__all__ = ["DATA_SCHEDULE_MODULE", "PackplacePackingScheduler", "register", "sequence_flops"]
