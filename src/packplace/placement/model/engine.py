"""The rollout engine: how many sequences a generation engine decodes at once, and the schedule of a
continuously batched engine.

vLLM (Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving with
PagedAttention") and SGLang (Zheng et al. 2024, "SGLang: Efficient Execution of Structured Language Model
Programs") batch continuously (Yu et al. 2022, "Orca", iteration-level scheduling): every decode iteration
advances every running sequence by one token; a sequence that emits its last token leaves at once, frees
its KV pages, and the scheduler admits the next waiting request (first come, first served) up to
``max_num_seqs`` running sequences and the paged KV capacity. Engines without it run *static rounds*:
a round of ``mb`` sequences lasts as long as its longest response.

:func:`continuous_schedule` simulates that scheduler on response lengths drawn from the workload's
quantiles and returns piecewise-constant *segments* (decode iterations during which the running set does
not change); :mod:`packplace.placement.model.cost` prices each segment with the decode roofline.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from packplace.placement.model.memory import (
    kv_cache_budget_bytes,
    max_concurrent_sequences,
    stage_kv_bytes_per_token,
)
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload, expected_order_statistics

#: Batching policies of a rollout engine.
BATCHING = ("continuous", "static")
#: How static batches reach the engine replicas: ``rounds`` (each replica runs its own share, every round to
#: the workload's longest response) or ``queue`` (a work queue: each batch goes to the first free replica,
#: :func:`static_queue_makespan`).
DISPATCH = ("rounds", "queue")
#: vLLM's default ``max_num_seqs`` (EngineArgs; sequences running at once per engine).
DEFAULT_MAX_NUM_SEQS = 256
#: Fraction of GPU memory a vLLM engine may use (``gpu_memory_utilization`` default 0.9, EngineArgs).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: Sequences simulated at most per engine: longer queues are simulated at this size with the running
#: limit scaled by the same ratio and the segment lengths scaled back (the schedule of ``n`` sequences on
#: ``c`` slots is then that of ``n·k`` on ``c·k`` with time stretched by ``k`` — exact when ``k`` divides
#: both, a close approximation otherwise), which keeps the evaluator's candidate build bounded.
SIMULATED_SEQUENCES = 4096
#: Seed of the fixed arrival order of the response lengths (deterministic for a given workload).
ARRIVAL_SEED = 12345
#: Seed of the first drawn batch of engine shares (:func:`engine_shares`; fixed batches, so the same
#: instance always gives the same slowest engine), as the trainer's drawn batches
#: (:data:`~packplace.placement.model.dp_balance.LENGTH_SEED`).
SHARE_SEED = 0
#: Batches of engine shares drawn (seeds ``SHARE_SEED ..``); the slowest engine's time is the mean over
#: them, the expected straggler rather than one batch's luck (the trainer's
#: :data:`~packplace.placement.model.dp_balance.LENGTH_DRAWS`).
SHARE_DRAWS = 4
#: Most sequences of a batch whose engine shares are drawn (:func:`engine_shares`); a larger batch keeps
#: every replica's representative share (:func:`response_lengths` of its size; drawing and ranking every
#: share would cost memory and time in proportion to the batch), not a physical constant.
MAX_SHARE_SEQUENCES = 65_536
#: Engines simulated per drawn batch (:func:`straggler_candidates`): this many with the longest
#: first-come-first-served makespans on the engine's slots and this many with the most tokens.
STRAGGLER_CANDIDATES = 2


@dataclass(frozen=True)
class RolloutEngine:
    """Settings of the generation engine (config ``policy`` section).

    Attributes:
        batching: ``continuous`` (vLLM / SGLang; default) or ``static`` (rounds of ``mb`` sequences).
        max_num_seqs: Running sequences at most per engine replica (default 256, vLLM's default).
        gpu_memory_utilization: Fraction of each GPU the engine may use for weights, activations and
            KV cache (default 0.9, vLLM's); a generation candidate must fit in it.
        max_num_seqs_set: The config sets ``max_num_seqs`` (false: the default above, which a framework
            profile's ``stale_engine_max_num_seqs`` may replace for an asynchronous rollout).
        dispatch: With static batching, how the batches reach the replicas (:data:`DISPATCH`; default
            ``rounds``).
        enforce_eager: vLLM's ``enforce_eager``: no CUDA graph capture, so every decode iteration issues
            each kernel from the host (:meth:`~packplace.placement.model.cost.CostModel.decode_step_times`
            prices it as an eager pass); default false (vLLM's own default, graphs captured).
        host_seconds_per_sequence: Host seconds the engine adds to every decode iteration per running
            sequence (scheduler, input preparation, sampler output processing of each request), beside the
            per-iteration ``decode_step_overhead``: the engine generation's
            (:data:`~packplace.placement.model.framework.VLLM_HOST_SECONDS_PER_SEQUENCE`, which a config
            sets from its framework's engine generation); default 0, none charged.
        engine_generation: The vLLM engine generation (``v0`` / ``v1``,
            :data:`~packplace.placement.model.framework.VLLM_ENGINE_GENERATIONS`) that the config's framework
            release runs; ``None``: the engine is not vLLM (DeepSpeed-Chat's hybrid engine) and reserves no
            ``gpu_memory_utilization`` pool. Default ``v1``.
        vllm_release: The vLLM release the framework release pins
            (:func:`~packplace.placement.model.framework.engine_vllm_release`); ``None`` (the default): unknown,
            priced on the side that never under-counts (:func:`~packplace.placement.model.memory.engine_reservation`).
        model_context: The framework release starts vLLM without a ``max_model_len``, so vLLM takes the model's
            context length (:func:`~packplace.placement.model.framework.engine_takes_model_context`: OpenRLHF
            before v0.3.2); default false (the framework passes prompt + response).
        sleeps: Whether the vLLM engine sleeps between its generate calls where it shares GPUs with other tasks
            (the config's ``policy.engine_sleeps``); ``None`` (the default): the framework's
            (:attr:`~packplace.placement.model.framework.FrameworkProfile.engine_sleeps`,
            :func:`~packplace.placement.candidates.engine_sleeps`).
    """

    batching: str = "continuous"
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    max_num_seqs_set: bool = False
    dispatch: str = "rounds"
    enforce_eager: bool = False
    host_seconds_per_sequence: float = 0.0
    engine_generation: str | None = "v1"
    vllm_release: tuple[int, ...] | None = None
    model_context: bool = False
    sleeps: bool | None = None

    def model_max_len(self, model: ModelSpec | None) -> int | None:
        """The ``max_model_len`` vLLM takes from ``model`` (tokens): its ``max_position_embeddings`` where the
        release passes vLLM none (:attr:`model_context`) and the model gives it; ``None`` where the length is
        the workload's (the release passes it) or the model does not give one."""
        if self.model_context and model is not None and model.max_position_embeddings is not None:
            return int(model.max_position_embeddings)
        return None


def kv_capacity_sequences(model: ModelSpec, memory_per_gpu: float, workload: Workload, tp: int, pp: int,
                          gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION, ep: int = 1,
                          workspace_bytes: float | None = None, non_torch_bytes: float = 0.0,
                          profile_bytes: float = 0.0) -> int:
    """Sequences a paged KV cache holds at once on one engine replica (at least 1): the memory model's
    :func:`packplace.placement.model.memory.max_concurrent_sequences` with live sequences of
    :func:`mean_live_tokens` tokens (vLLM reserves ``gpu_memory_utilization`` of the GPU, keeps the bf16 weights of the
    largest pipeline stage (its experts split ``ep`` ways under expert parallelism) and a prefill
    workspace, and gives the rest to KV pages holding only live tokens; Kwon et al. 2023). ``non_torch_bytes``:
    what the engine's release takes from the cache besides
    (:attr:`~packplace.placement.model.memory.EngineReservation.in_pool`); ``profile_bytes``: vLLM's start-up
    profile-run peak (:func:`~packplace.placement.model.memory.profile_run_peak_bytes`), taken from it too."""
    live = mean_live_tokens(workload)
    return max(1, max_concurrent_sequences(model, tp=tp, pp=pp, memory_per_gpu=memory_per_gpu,
                                           gpu_memory_utilization=gpu_memory_utilization,
                                           prompt_len=workload.context_length, live_len=live, ep=ep,
                                           workspace_bytes=workspace_bytes, non_torch_bytes=non_torch_bytes,
                                           profile_bytes=profile_bytes))


def kv_capacity_tokens(model: ModelSpec, memory_per_gpu: float, workload: Workload, tp: int, pp: int,
                       gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION, ep: int = 1,
                       workspace_bytes: float | None = None, non_torch_bytes: float = 0.0,
                       profile_bytes: float = 0.0) -> int:
    """Tokens the paged KV cache of one engine replica holds, all running sequences together (at least 1):
    the budget of :func:`packplace.placement.model.memory.max_concurrent_sequences` (``gpu_memory_utilization``
    of the GPU less the bf16 weights of the largest stage and one prompt's prefill workspace) over the KV
    bytes of one token on the largest stage's layers. vLLM sizes its cache the same way (the fraction of
    the GPU it may use less the weights and the profiled activations; the rest is KV blocks,
    docs.vllm.ai "Engine Arguments", ``--gpu-memory-utilization``) and allocates blocks to a sequence as
    it grows (Kwon et al. 2023, §4). ``non_torch_bytes``, ``profile_bytes``: as :func:`kv_capacity_sequences`."""
    budget = kv_cache_budget_bytes(model, tp=tp, pp=pp, memory_per_gpu=memory_per_gpu,
                                   gpu_memory_utilization=gpu_memory_utilization,
                                   prompt_len=workload.context_length, ep=ep, workspace_bytes=workspace_bytes,
                                   non_torch_bytes=non_torch_bytes, profile_bytes=profile_bytes)
    per_token = stage_kv_bytes_per_token(model, tp, pp)
    if budget <= 0 or per_token <= 0:
        return 1
    return max(1, int(budget // per_token))


def mean_live_tokens(workload: Workload) -> float:
    """Mean KV tokens a running sequence holds over its life, tokens: ``S + E[T²]/(2·E[T])`` — its
    prompt plus, weighted by how long each response runs, half its response (a sequence of ``T`` tokens
    holds on average ``T/2`` generated tokens during its ``T`` iterations). From the quantile function
    (trapezoid rule on ``Q²``)."""
    qs, ts = workload._quantile_points
    second = float(np.sum((ts[1:] ** 2 + ts[:-1] ** 2 + ts[1:] * ts[:-1]) / 3.0 * np.diff(qs)))
    return workload.context_length + second / (2.0 * workload.mean_response)


def response_lengths(workload: Workload, count: int) -> np.ndarray:
    """``count`` response lengths (decode steps, integers ≥ 1) in arrival order: the expected order statistics
    of ``count`` draws rounded to integers (:func:`ordered_lengths`, shape ``(count,)``), shuffled by a fixed
    seed (requests arrive in an order unrelated to their length)."""
    lengths = ordered_lengths(workload, count)
    order = np.random.default_rng(ARRIVAL_SEED).permutation(count)
    return lengths[order]


def ordered_lengths(workload: Workload, count: int) -> np.ndarray:
    """The response lengths a batch of ``count`` sequences is simulated on, ascending (decode steps, integers
    in ``[1, T]``, shape ``(count,)``, read-only): the expected order statistics ``E[X_(i:count)]`` of
    ``count`` draws from the workload's quantile function
    (:func:`~packplace.placement.problem.workload.expected_order_statistics`), rounded.

    Rounding: the ``count − 1`` shorter ones by their cumulative sum (each length is the step of the rounded
    running total, ``round(C_i) − round(C_(i−1))``, so each stays within 1 of its expected value, at least 1
    and at most ``T``, and their total within 1/2 of theirs), the longest rounded up, which is
    :meth:`~packplace.placement.problem.workload.Workload.longest_response` of ``count``. The total drives the
    prefill and decode work and the KV cache's load, and the longest the phase's end: rounding every length
    up would add up to ``count`` tokens (half a token a response on average), a rounded total keeps the work
    within 1.5 tokens of ``count`` times the mean; the longest rounded up is the one definition of the decode
    length of a batch run to its longest, so a continuously batched engine that admits the whole batch ends
    when a static batch of it would.

    Raises:
        ValueError: ``count`` below 1.
    """
    if int(count) != count or count < 1:
        raise ValueError(f"ordered_lengths: count must be an integer of at least 1, got {count!r}")
    return _ordered_lengths(workload, int(count))


@lru_cache(maxsize=64)
def _ordered_lengths(workload: Workload, count: int) -> np.ndarray:
    qs, ts = workload._quantile_points
    expected = np.clip(expected_order_statistics(qs, ts, count), 1.0, float(workload.generation_length))
    totals = np.floor(np.cumsum(expected[:-1]) + 0.5)
    lengths = np.sort(np.append(np.diff(totals, prepend=0.0), float(workload.longest_response(count))))
    lengths.setflags(write=False)
    return lengths


def engine_shares(workload: Workload, replicas: int, draw: int = 0) -> np.ndarray:
    """Response lengths (decode steps, integers ≥ 1) of each engine replica's share of one drawn batch,
    shape ``(replicas, n/replicas)`` with ``n = B·K``, row ``r`` in the order engine ``r`` receives them.

    The frameworks cut the step's batch into ``replicas`` equal contiguous shards before any token is
    generated, the batch ordered prompt by prompt with a prompt's ``K`` samples consecutive: NeMo RL
    ``VllmGeneration.generate`` (``data.shard_by_batch_size(dp_size)``, nemo_rl/distributed/
    batched_data_dict.py: contiguous shards), verl ``gen_batch.repeat(repeat_times=rollout.n,
    interleave=True)`` then the rollout workers' ``DataProto.chunk`` (verl/trainer/ppo/ray_trainer.py,
    verl/protocol.py), OpenRLHF ``[prompt] * n_samples_per_prompt`` sliced per vLLM engine
    (openrlhf/trainer/ppo_utils/experience_maker.py). No engine takes work from another, so the slowest
    engine ends the phase.

    The lengths: the batch's ``n`` responses are the expected order statistics of ``n`` draws from the
    workload's distribution (:func:`ordered_lengths`, as :func:`response_lengths`), in an order drawn with seed
    ``SHARE_SEED + draw``: a prompt's samples are drawn *independently* of each other, so any
    equal-count split is a uniformly random one and each engine's share is a random ``n/replicas`` of the
    batch's lengths (sampling without replacement). How a prompt's samples correlate in length is left
    out: no published source sizes it (docs/calibration-and-validation.md, "GRPO generation dispatched
    in prompt groups"); with correlated lengths the shares spread further, so the slowest engine this
    gives is a lower bound.

    Raises:
        ValueError: ``replicas`` < 1 or not dividing ``B·K``.
    """
    n = workload.sequences
    if replicas < 1 or n % replicas:
        raise ValueError(f"engine_shares: replicas must be >= 1 and divide the batch's {n} sequences, "
                         f"got {replicas!r}")
    return _shares(workload, int(replicas), int(draw))


@lru_cache(maxsize=256)
def _shares(workload: Workload, replicas: int, draw: int) -> np.ndarray:
    n = workload.sequences
    order = np.random.default_rng(SHARE_SEED + draw).permutation(n)
    shares = ordered_lengths(workload, n)[order].reshape(replicas, n // replicas)
    shares.setflags(write=False)
    return shares


def straggler_candidates(shares: np.ndarray, slots: int, count: int = STRAGGLER_CANDIDATES) -> np.ndarray:
    """Row indices of the engines of ``shares`` (shape ``(replicas, m)``, each row in arrival order) most
    likely to end last, sorted: the ``count`` whose first-come-first-served makespan on ``slots`` running
    sequences (:func:`fcfs_makespan`, decode iterations without the cache limit) is longest, ties by the
    total, and the ``count`` with the most response tokens (the first to outgrow a tight cache). An
    engine's time follows its iterations and its tokens; simulating these instead of every engine keeps
    the estimate's cost nearly independent of the replica count (the maximum over a subset: never above
    the slowest engine's true time)."""
    c = max(1, min(int(slots), shares.shape[1]))
    total = shares.sum(axis=1)
    if c == shares.shape[1]:
        makespan = shares.max(axis=1)
    else:
        makespan = np.array([fcfs_makespan(row, c) for row in shares])
    by_makespan = np.lexsort((-total, -makespan))[:count]
    by_total = np.argsort(-total, kind="stable")[:count]
    return np.unique(np.concatenate([by_makespan, by_total]))


def fcfs_makespan(lengths: np.ndarray, slots: int) -> float:
    """Decode iterations until the last of ``lengths`` (arrival order) ends on ``slots`` slots, first come
    first served, a finished sequence's slot refilled at once (the makespan of :func:`continuous_schedule`
    without its segments; list scheduling, Graham 1969)."""
    c = max(1, min(int(slots), len(lengths)))
    values = np.asarray(lengths, dtype=float).tolist()
    heap = values[:c]
    heapq.heapify(heap)
    for x in values[c:]:
        heapq.heapreplace(heap, heap[0] + x)
    return max(heap)


def straggler_schedules(workload: Workload, replicas: int, slots: int, kv_tokens: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The :func:`share_schedule` of every straggler candidate (:func:`straggler_candidates`) of the
    :data:`SHARE_DRAWS` drawn batches of :func:`engine_shares`, on ``slots`` running sequences and a
    cache of ``kv_tokens`` tokens, laid end to end so that one vectorised pricing covers them all.

    Returns:
        ``(iterations, running, generated, owner, recomputed, draw)``: the segments of all schedules
        (shape ``(s,)`` each, :func:`continuous_schedule`'s form) with ``owner[j]`` the schedule segment
        ``j`` belongs to, and per schedule (shape ``(k,)``) the tokens it recomputes and its batch's draw.

    Raises:
        ValueError: as :func:`engine_shares` and :func:`share_schedule`.
    """
    if int(slots) < 1 or int(kv_tokens) < 1:
        raise ValueError(f"straggler_schedules: slots and kv_tokens must be >= 1, got {slots!r}, {kv_tokens!r}")
    engine_shares(workload, replicas)   # validates replicas
    return _straggler_schedules(workload, int(replicas), int(slots), int(kv_tokens))


@lru_cache(maxsize=256)
def _candidate_runs(workload: Workload, replicas: int, slots: int) -> tuple:
    """What :func:`straggler_schedules` needs before the cache size is known: the candidates' simulated
    lengths (:func:`_share_sample`), the running limit they run on, the running and time scales, each
    one's batch draw, unscaled first-come-first-served schedule (:func:`_share_fcfs`) and largest KV
    footprint in tokens, and those schedules scaled and laid end to end (what every cache that holds the
    footprints gives)."""
    samples: list[tuple[float, ...]] = []
    draws: list[int] = []
    c = slots
    for draw in range(SHARE_DRAWS):
        shares = _shares(workload, replicas, draw)
        for r in straggler_candidates(shares, slots):
            sample, c = _share_sample(tuple(shares[r].tolist()), min(slots, shares.shape[1]))
            samples.append(sample)
            draws.append(draw)
    per_replica = workload.sequences // replicas
    ratio = per_replica / len(samples[0])
    scale_running = min(slots, per_replica) / c
    scale_time = ratio / scale_running
    runs = [_share_fcfs(sample, c) for sample in samples]
    S = float(workload.context_length)
    peaks = np.array([float(np.max(run * S + gen + run * it)) if len(run) else 0.0 for it, run, gen in runs])
    owner = np.concatenate([np.full(len(it), k) for k, (it, _, _) in enumerate(runs)])
    plain = (np.concatenate([it for it, _, _ in runs]) * scale_time,
             np.concatenate([run for _, run, _ in runs]) * scale_running,
             np.concatenate([gen for _, _, gen in runs]) * scale_running,
             owner, np.zeros(len(runs)), np.array(draws))
    for a in plain:
        a.setflags(write=False)
    return samples, c, scale_running, scale_time, runs, peaks, plain


@lru_cache(maxsize=512)
def _straggler_schedules(workload: Workload, replicas: int, slots: int, kv_tokens: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    samples, c, scale_running, scale_time, runs, peaks, plain = _candidate_runs(workload, replicas, slots)
    S, cap = float(workload.context_length), kv_tokens / scale_running
    if bool(np.all(peaks <= cap)):
        return plain
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    recomputed: list[float] = []
    for sample, (iterations, running, generated), peak in zip(samples, runs, peaks, strict=True):
        tokens = 0.0
        if peak > cap:
            iterations, running, generated, tokens = _preempting(np.array(sample), c, S, cap)
        parts.append((iterations * scale_time, running * scale_running, generated * scale_running))
        recomputed.append(tokens * scale_time * scale_running)
    owner = np.concatenate([np.full(len(p[0]), k) for k, p in enumerate(parts)])
    out = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
           np.concatenate([p[2] for p in parts]), owner, np.array(recomputed), plain[5])
    for a in out:
        a.setflags(write=False)
    return out


def share_schedule(lengths: np.ndarray, slots: int, context_length: int, kv_tokens: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """:func:`paged_schedule` of one engine decoding the given ``lengths`` (shape ``(m,)``, in arrival
    order) instead of the workload's representative lengths (:func:`response_lengths`): the segments
    ``(iterations, running, generated)`` and the tokens recomputed after preemptions, with prompts of
    ``context_length`` tokens and a paged cache of ``kv_tokens`` tokens. A share of more than
    :data:`SIMULATED_SEQUENCES` is simulated on that many of its own order statistics (evenly spaced ranks, its
    longest kept) with the running limit and the time scaled as :func:`continuous_schedule` does.

    Raises:
        ValueError: an empty ``lengths``, ``slots`` or ``kv_tokens`` < 1.
    """
    lengths = np.asarray(lengths, dtype=float)
    if lengths.size < 1 or int(slots) < 1 or int(kv_tokens) < 1:
        raise ValueError(f"share_schedule: needs lengths, slots >= 1 and kv_tokens >= 1, got {lengths.size} "
                         f"lengths, slots {slots!r}, kv_tokens {kv_tokens!r}")
    return _share_schedule(tuple(lengths.tolist()), int(min(slots, lengths.size)), int(context_length),
                           int(kv_tokens))


@lru_cache(maxsize=1024)
def _share_schedule(lengths: tuple[float, ...], slots: int, context_length: int, kv_tokens: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    share, c = _share_sample(lengths, slots)
    n = len(lengths)
    ratio = n / len(share)
    scale_running = slots / c
    scale_time = ratio / scale_running
    cap, S = kv_tokens / scale_running, float(context_length)
    iterations, running, generated = _share_fcfs(share, c)
    peak = float(np.max(running * S + generated + running * iterations)) if len(running) else 0.0
    recomputed = 0.0
    if peak > cap:
        iterations, running, generated, recomputed = _preempting(np.array(share), c, S, cap)
    return iterations * scale_time, running * scale_running, generated * scale_running, recomputed * ratio


def _share_sample(lengths: tuple[float, ...], slots: int) -> tuple[tuple[float, ...], int]:
    """The lengths a share is simulated on and its running limit: the share itself on ``slots``, or for a
    share of more than :data:`SIMULATED_SEQUENCES` that many of its order statistics (evenly spaced
    ranks, its longest kept, in their arrival order) on ``slots`` scaled by the same ratio."""
    n = len(lengths)
    if n <= SIMULATED_SEQUENCES:
        return lengths, slots
    share = np.array(lengths)
    ratio = n / SIMULATED_SEQUENCES
    ranks = np.argsort(share, kind="stable")
    picks = np.floor((np.arange(SIMULATED_SEQUENCES) + 0.5) * ratio).astype(int)
    picks[-1] = n - 1
    keep = np.sort(ranks[picks])
    return tuple(share[keep].tolist()), max(1, round(slots / ratio))


@lru_cache(maxsize=1024)
def _share_fcfs(lengths: tuple[float, ...], c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_fcfs` of a share (cached: a share's schedule does not depend on the cache size unless it
    preempts)."""
    return _fcfs(np.array(lengths), c)


def continuous_schedule(workload: Workload, sequences: int, slots: int) -> tuple[np.ndarray, np.ndarray,
                                                                                    np.ndarray]:
    """Segments of a continuously batched engine decoding ``sequences`` responses with at most ``slots``
    running at once (first come, first served; a finished sequence's slot is refilled at the next
    iteration).

    Returns:
        ``(iterations, running, generated)``, each of shape ``(k,)``: segment ``j`` lasts
        ``iterations[j]`` decode iterations with ``running[j]`` sequences running, which had generated
        ``generated[j]`` response tokens in total when it began (each running sequence adds one token
        per iteration). ``iterations.sum()`` is the engine's decode iterations (its makespan) and
        ``(iterations · running).sum()`` the response tokens (every sequence's length).
    """
    return _schedule(workload, int(sequences), int(max(1, min(slots, sequences))))


@lru_cache(maxsize=512)
def _schedule(workload: Workload, sequences: int, slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if sequences > SIMULATED_SEQUENCES:
        ratio = sequences / SIMULATED_SEQUENCES
        sim_slots = max(1, round(slots / ratio))
        scale_running = slots / sim_slots
        scale_time = ratio / scale_running
        n, c = SIMULATED_SEQUENCES, sim_slots
    else:
        n, c, scale_running, scale_time = sequences, slots, 1.0, 1.0
    iterations, running, generated = _fcfs(response_lengths(workload, n), c)
    return iterations * scale_time, running * scale_running, generated * scale_running


def _fcfs(lengths: np.ndarray, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments of ``lengths`` (arrival order) on ``c`` slots, first come first served, a finished
    sequence's slot refilled at once (:func:`continuous_schedule`'s return form, unscaled)."""
    n = len(lengths)
    values = np.asarray(lengths, dtype=float).tolist()
    begun = [0.0] * n
    heap = values[:c]
    heapq.heapify(heap)
    for i in range(c, n):
        t = heap[0]
        begun[i] = t
        heapq.heapreplace(heap, t + values[i])
    starts = np.array(begun, dtype=float)
    return _segments(starts, starts + lengths)


def _paged_lengths(lengths: np.ndarray, c: int, S: float, cap: float
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """:func:`_fcfs` of ``lengths`` on ``c`` slots when it never holds more than ``cap`` KV tokens
    (prompts of ``S`` tokens), else :func:`_preempting`; unscaled, with the tokens recomputed."""
    iterations, running, generated = _fcfs(lengths, c)
    peak = float(np.max(running * S + generated + running * iterations)) if len(running) else 0.0
    if peak <= cap:
        return iterations, running, generated, 0.0
    return _preempting(lengths, c, S, cap)


def static_queue_makespan(workload: Workload, micro_batch: int, replicas: int, batch_seconds) -> float:
    """Seconds until the last of the step's static batches ends when a work queue hands each batch to the
    first free engine replica (NeMo-Aligner's PPO rollout with ``batch_iterator.use_flask``:
    nemo_aligner/utils/batch_iterators.py ``HTTPBatchIterator``, every data-parallel rank asks rank 0's
    ``SharedSet`` for the next ``batch_size`` prompt indices when its previous generate call returns).

    The ``B·K`` sequences, in the arrival order of :func:`response_lengths`, form ``⌈B·K/mb⌉`` batches of
    ``micro_batch``; a batch lasts ``batch_seconds(T)`` for its longest response ``T`` (a static batch
    decodes until its last sequence ends); batches go in order to whichever of the ``replicas`` frees first
    (list scheduling, Graham 1966). Strict rounds would run every round to the longest response of all.

    Raises:
        ValueError: ``micro_batch`` or ``replicas`` below 1.
    """
    if micro_batch < 1 or replicas < 1:
        raise ValueError(f"static_queue_makespan: micro_batch and replicas must be >= 1, got {micro_batch}, "
                         f"{replicas}")
    n = workload.sequences
    batches = -(-n // micro_batch)
    lengths = response_lengths(workload, n)
    longest = np.array([lengths[i * micro_batch:(i + 1) * micro_batch].max() for i in range(batches)])
    free = [0.0] * min(replicas, batches)
    heapq.heapify(free)
    end = 0.0
    for t in longest:
        start = heapq.heappop(free)
        finish = start + float(batch_seconds(float(t)))
        end = max(end, finish)
        heapq.heappush(free, finish)
    return end


def paged_schedule(workload: Workload, sequences: int, slots: int, kv_tokens: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """:func:`continuous_schedule` with the paged KV cache's token capacity enforced as vLLM's scheduler
    enforces it, and the tokens it recomputes.

    A batch whose sequences all start together holds its largest KV footprint in mid-decode, when most
    sequences are still running and long: ``max_t n(T > t)·(S + t)`` tokens, more than the running count
    times the mean live length (:func:`mean_live_tokens`, the capacity of a steady stream) that sizes
    ``slots``. When the schedule of :func:`continuous_schedule` never holds more than ``kv_tokens``
    tokens (prompt plus generated tokens of the running sequences) it is returned as it is. Otherwise
    the scheduler of vLLM V1 (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``; docs.vllm.ai,
    "Optimization and Tuning", "Preemption") is simulated: each decode iteration every running sequence
    needs one more token's KV slot; when the cache cannot hold them the most recently admitted running
    sequence is preempted (first come, first served: ``self.running.pop()``), its KV freed, and it
    returns to the head of the waiting queue keeping its generated tokens, whose KV is recomputed
    (prefill of prompt plus generated tokens) when it is admitted again; no sequence is admitted in an
    iteration that preempted one. A waiting sequence is admitted (at most ``slots`` running) when its
    tokens and one more token of every running sequence fit (otherwise it would be the sequence preempted
    at the next iteration). Token granularity (vLLM's 16-token blocks are ignored).

    Returns:
        ``(iterations, running, generated, recomputed)``: the segments as :func:`continuous_schedule`
        returns them (shape ``(k,)`` each; ``generated`` counts the response tokens the running sequences
        hold, those kept over a preemption included) and the tokens re-prefilled after preemptions.

    Raises:
        ValueError: ``kv_tokens`` < 1.
    """
    if int(kv_tokens) < 1:
        raise ValueError(f"paged_schedule: kv_tokens must be >= 1, got {kv_tokens!r}")
    return _paged(workload, int(sequences), int(max(1, min(slots, sequences))), int(kv_tokens))


@lru_cache(maxsize=256)
def _paged(workload: Workload, sequences: int, slots: int, kv_tokens: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    iterations, running, generated = _schedule(workload, sequences, slots)
    S = float(workload.context_length)
    peak = float(np.max(running * S + generated + running * iterations)) if len(running) else 0.0
    if peak <= kv_tokens:
        return iterations, running, generated, 0.0
    if sequences > SIMULATED_SEQUENCES:
        ratio = sequences / SIMULATED_SEQUENCES
        n, c = SIMULATED_SEQUENCES, max(1, round(slots / ratio))
        scale_running = slots / c
        cap = kv_tokens / scale_running
        scale_time = ratio / scale_running
    else:
        n, c, cap, scale_running, scale_time, ratio = sequences, slots, float(kv_tokens), 1.0, 1.0, 1.0
    iterations, running, generated, recomputed = _preempting(response_lengths(workload, n), c, S, cap)
    return (iterations * scale_time, running * scale_running, generated * scale_running, recomputed * ratio)


def _preempting(lengths: np.ndarray, c: int, S: float, cap: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """vLLM V1's recompute-preemption scheduler of :func:`paged_schedule` on ``lengths`` (arrival order),
    ``c`` slots, a cache of ``cap`` tokens and prompts of ``S`` tokens; unscaled segments and the tokens
    recomputed.

    Integer lengths and prompt (every caller's) run :func:`_preempting_events`, which gives
    :func:`_preempting_reference`'s result bit for bit (every token count is an integer below 2**53, so
    exact in any order); other inputs run the reference."""
    lengths = np.asarray(lengths, dtype=float)
    n = len(lengths)
    if n and float(S).is_integer() and bool(np.all(np.isfinite(lengths))) \
            and bool(np.all(lengths == np.floor(lengths))) \
            and n * (abs(float(S)) + float(np.max(np.abs(lengths))) + 2.0) < 2.0 ** 52:
        return _preempting_events([int(x) for x in lengths.tolist()], int(c), float(S), float(cap))
    return _preempting_reference(lengths, c, S, cap)


def _preempting_events(wanted: list[int], c: int, S: float, cap: float
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """:func:`_preempting_reference` on integer lengths, event by event: a running sequence admitted at
    clock ``t`` holding ``g`` tokens holds ``clock - base`` with ``base = t - g`` and ends at clock
    ``base + length`` (a heap of those, entries of preempted sequences dropped lazily by epoch); the
    running set in admission order is a list whose finished entries are skipped when it is popped."""
    n = len(wanted)
    s = int(S)
    S64 = np.float64(S)  # the reference's tokens recomputed are a numpy scalar once one is added
    gen = [0] * n
    base = [0] * n
    epoch = [0] * n
    live = [False] * n
    waiting = list(range(n - 1, -1, -1))  # a stack: the head of the queue at the end
    run: list[int] = []  # admission order, newest last; finished entries stay until popped or compacted
    ends: list[tuple[int, int, int]] = []  # (clock at which it ends, sequence, epoch)
    clock = r = sum_base = used = 0
    recomputed = 0.0
    seg_it: list[int] = []
    seg_run: list[int] = []
    seg_gen: list[int] = []
    push, pop = heapq.heappush, heapq.heappop
    preempted = False
    while waiting or r:
        if not preempted:
            while waiting and r < c:
                i = waiting[-1]
                need = s + gen[i]
                if r and used + need + r + 1 > cap:
                    break
                waiting.pop()
                if gen[i] > 0:
                    recomputed += S64 + gen[i]
                base[i] = clock - gen[i]
                live[i] = True
                push(ends, (base[i] + wanted[i], i, epoch[i]))
                run.append(i)
                r += 1
                sum_base += base[i]
                used += need
        room = int((cap - used) // r)
        if room < 1 and r > 1:
            i = run.pop()
            while not live[i]:
                i = run.pop()
            gen[i] = clock - base[i]
            live[i] = False
            epoch[i] += 1
            used -= s + gen[i]
            sum_base -= base[i]
            r -= 1
            waiting.append(i)
            preempted = True
            continue
        while not live[ends[0][1]] or ends[0][2] != epoch[ends[0][1]]:
            pop(ends)
        left = ends[0][0] - clock
        # a lone sequence larger than the cache runs on (vLLM would refuse it; the model keeps a time)
        step = max(1, min(left, room)) if room >= 1 else max(1, left)
        seg_it.append(step)
        seg_run.append(r)
        seg_gen.append(r * clock - sum_base)
        clock += step
        used += r * step
        preempted = False
        while ends and ends[0][0] <= clock:
            _, i, e = pop(ends)
            if live[i] and e == epoch[i]:
                live[i] = False
                used -= s + clock - base[i]
                sum_base -= base[i]
                r -= 1
        if len(run) > 2 * r + 64:
            run = [i for i in run if live[i]]
    return (np.array(seg_it, dtype=float), np.array(seg_run, dtype=float), np.array(seg_gen, dtype=float),
            recomputed)


def _preempting_reference(lengths: np.ndarray, c: int, S: float, cap: float
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """:func:`_preempting` as vLLM's loop reads, one iteration at a time on arrays (any lengths; the
    oracle of :func:`_preempting_events`)."""
    n = len(lengths)
    gen = np.zeros(n)
    waiting = list(range(n))
    waiting.reverse()  # a stack: the head of the queue at the end
    run: list[int] = []  # admission order: the newest last
    used = 0.0
    recomputed = 0.0
    seg_it: list[float] = []
    seg_run: list[float] = []
    seg_gen: list[float] = []
    preempted = False
    changed = True  # the running set changed since ``idx`` was built
    idx = np.empty(0, dtype=int)
    wanted = np.empty(0)
    while waiting or run:
        if not preempted:
            while waiting and len(run) < c:
                i = waiting[-1]
                need = S + gen[i]
                if run and used + need + len(run) + 1 > cap:
                    break
                waiting.pop()
                if gen[i] > 0:
                    recomputed += need
                run.append(i)
                used += need
                changed = True
        r = len(run)
        if changed:
            idx = np.array(run, dtype=int)
            wanted = lengths[idx]
            changed = False
        room = int((cap - used) // r)
        if room < 1 and r > 1:
            i = run.pop()
            used -= S + gen[i]
            waiting.append(i)
            preempted = True
            changed = True
            continue
        held = gen[idx]
        left = wanted - held
        # a lone sequence larger than the cache runs on (vLLM would refuse it; the model keeps a time)
        step = max(1, min(int(left.min()), room)) if room >= 1 else max(1, int(left.min()))
        seg_it.append(float(step))
        seg_run.append(float(r))
        seg_gen.append(float(held.sum()))
        held = held + step
        gen[idx] = held
        used += r * step
        preempted = False
        finished = held >= wanted
        if finished.any():
            used -= float(np.sum(S + held[finished]))
            run = idx[~finished].tolist()
            changed = True
    return np.array(seg_it), np.array(seg_run), np.array(seg_gen), recomputed


def rollout_stream_schedule(workload: Workload, batch_sequences: int, group: int, groups_in_flight: int,
                            slots: int, batches: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Segments of a *continuous rollout*: one engine replica fed a stream of prompt groups, several
    batches back to back, as an asynchronous RL framework drives it (NeMo RL's async GRPO: one request
    of ``group`` samples per prompt, at most ``groups_in_flight`` such requests outstanding — its
    ``_inflight_sema`` of ``num_prompts_per_step × max_trajectory_age_steps`` prompts, nemo_rl/algorithms/
    async_utils.py, v0.5.0 — and a new prompt's request issued as soon as an earlier one has returned all
    its samples).

    The engine runs at most ``slots`` sequences (first come, first served, as :func:`continuous_schedule`);
    a group holds its in-flight place until its last sample finishes. ``batches`` batches of
    ``batch_sequences`` sequences (``batch_sequences / group`` groups each) arrive in order.

    Returns:
        ``(iterations, running, generated, batch_done)``: the segments as :func:`continuous_schedule`
        returns them (shape ``(k,)`` each) and, shape ``(batches,)``, the iteration at which each batch's
        last sequence finishes.

    Raises:
        ValueError: a non-positive size, or ``batch_sequences`` not a multiple of ``group``.
    """
    for name, value in (("batch_sequences", batch_sequences), ("group", group),
                        ("groups_in_flight", groups_in_flight), ("slots", slots), ("batches", batches)):
        if int(value) < 1:
            raise ValueError(f"rollout_stream_schedule: {name} must be >= 1, got {value!r}")
    if batch_sequences % group:
        raise ValueError(f"rollout_stream_schedule: batch_sequences {batch_sequences} is not a multiple of "
                         f"group {group}")
    return _stream(workload, int(batch_sequences), int(group), int(groups_in_flight), int(slots), int(batches))


@lru_cache(maxsize=256)
def _stream(workload: Workload, batch_sequences: int, group: int, groups_in_flight: int, slots: int,
            batches: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = batch_sequences * batches
    lengths = response_lengths(workload, n)
    groups = n // group
    starts = np.zeros(n)
    finishes = np.zeros(n)
    left = [group] * groups  # unfinished samples per group
    queue: list[int] = []  # sequences waiting for a slot, in arrival order
    head = 0
    running: list[tuple[float, int]] = []  # (finish iteration, sequence)
    admitted = 0
    now = 0.0

    def admit() -> None:
        nonlocal admitted
        queue.extend(range(admitted * group, (admitted + 1) * group))
        admitted += 1

    while admitted < min(groups_in_flight, groups):
        admit()
    while True:
        while len(running) < slots and head < len(queue):
            i = queue[head]
            head += 1
            starts[i] = now
            heapq.heappush(running, (now + lengths[i], i))
        if not running:
            break
        now, i = heapq.heappop(running)
        finishes[i] = now
        g = i // group
        left[g] -= 1
        if left[g] == 0 and admitted < groups:
            admit()
    iterations, run, generated = _segments(starts, finishes)
    done = finishes.reshape(batches, batch_sequences).max(axis=1)
    return iterations, run, generated, np.maximum.accumulate(done)


def _segments(starts: np.ndarray, finishes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Piecewise-constant segments of the running set from every sequence's start and finish iteration
    (:func:`continuous_schedule`'s return form)."""
    times = np.unique(np.concatenate([starts, finishes]))
    order_s, order_f = np.sort(starts), np.argsort(finishes)
    started = np.searchsorted(order_s, times, side="right")
    start_sum = np.concatenate([[0.0], np.cumsum(order_s)])[started]
    finished = np.searchsorted(finishes[order_f], times, side="right")
    finish_start_sum = np.concatenate([[0.0], np.cumsum(starts[order_f])])[finished]
    running = (started - finished)[:-1].astype(float)
    generated = running * times[:-1] - (start_sum - finish_start_sum)[:-1]
    iterations = np.diff(times)
    keep = running > 0
    return iterations[keep], running[keep], generated[keep]
