"""A proven lower bound on a dynamic-CP instance's objective.

For a group of size ``c`` with ``T`` tokens and ``Q = Σ s²`` (:mod:`packplace.context_parallel.cost`),
its rank-seconds ``c · t`` are at least a sum over its sequences of a per-sequence *work*:

* with overlap, ``c·t = a·T + b·Q/c + c·max(b·Q·(c-1)/c², comm)`` and, for any ``λ ∈ [0, 1]``,
  ``max(x, y) ≥ λ·x + (1-λ)·y``, while ``c·comm ≥ (c-1)·β·B·T`` (the latency term dropped): so
  ``c·t ≥ Σ_i w_i(c, λ)`` with ``w_i(c, λ) = a·s + b·s²/c + λ·b·s²·(c-1)/c + (1-λ)·(c-1)·β·B·s``;
* without overlap, ``c·t ≥ Σ_i (a·s + b·s² + (c-1)·β·B·s)``; ``c = 1``: ``c·t = Σ_i (a·s + b·s²)``.

With one ``λ_c`` per size (any choice is valid), every sequence does at least ``w_i = min over its allowed
sizes c of w_i(c, λ_c)`` rank-seconds wherever it goes. In every slot the groups tile the ``R`` ranks, so the
slot's slowest group takes at least the slot's rank-seconds / ``R``; summed over slots:

    step_time ≥ W / R,    W = max over λ ∈ {0,1}^sizes of Σ_i w_i          (the work bound)

The slot holding sequence i takes at least ``m_i`` = its fastest time alone in an allowed group (the time
grows with a group's tokens); a plan has at least ``k`` slots (the fixed ``micro_batches``, or
``⌈Σ tokens / (R · max_tokens_per_rank)⌉``, at least 1), and the slots' slowest sequences are distinct:

    step_time ≥ max_i m_i + Σ of the k - 1 smallest m_j over the other sequences     (the slot bound)

With a token cap, the slot holding the sequence ``l`` of the largest ``m_l`` takes at least ``m_l`` and holds at
most ``R · max_tokens_per_rank`` tokens, so at most ``V`` of the work, the fractional knapsack of the works
``w_i = a·s + b·s²`` (a valid work of every sequence: λ = 1 above) in those tokens with ``l`` in it; every other
slot takes at least its work / R:

    step_time ≥ m_l + (Σ_i w_i − V) / R                                             (the leader bound)

The makespan (a rank's busy seconds over the step) has the work bound and ``max_i m_i``; the balance has 0.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from packplace.context_parallel.instance import ContextParallelInstance

#: Sizes above 1 whose λ choices are enumerated (2^this combinations at most); beyond them λ = 1.
MAX_ENUMERATED_SIZES = 10


def allowed_mask(instance: ContextParallelInstance) -> np.ndarray:
    """``mask[c_index, i]``: sequence i fits a group of ``sizes[c_index]`` alone (the token cap)."""
    sizes = np.asarray(instance.sizes, dtype=np.float64)[:, None]
    tokens = instance.tokens.astype(np.float64)[None, :]
    if instance.max_tokens_per_rank is None:
        return np.ones((len(instance.sizes), instance.n), dtype=bool)
    return tokens <= sizes * instance.max_tokens_per_rank


def solo_times(instance: ContextParallelInstance) -> np.ndarray:
    """``m_i``: the fastest seconds of sequence i alone in any allowed group, shape (n,)."""
    mask = allowed_mask(instance)
    s = instance.tokens.astype(np.float64)
    best = np.full(instance.n, np.inf)
    for k, size in enumerate(instance.sizes):
        times = instance.cost.times(size, s, s * s, instance.inside_node(size))
        best = np.where(mask[k], np.minimum(best, times), best)
    return best


def work_bound(instance: ContextParallelInstance) -> float:
    """``W``: the rank-seconds every plan spends at least (module docstring), seconds × ranks."""
    if instance.n == 0:
        return 0.0
    cost = instance.cost
    mask = allowed_mask(instance)
    s = instance.tokens.astype(np.float64)
    a, b = cost.linear_s_per_token, cost.attention_s_per_token2
    rows: list[tuple[np.ndarray, np.ndarray]] = []  # (λ = 1, λ = 0) works per size
    for k, size in enumerate(instance.sizes):
        _, beta = cost.link(instance.inside_node(size))
        comm = (size - 1) * beta * cost.ring_bytes_per_token * s
        if size == 1:
            full = a * s + b * s * s
            pair = (full, full)
        elif cost.overlap:
            pair = (a * s + b * s * s, a * s + b * s * s / size + comm)
        else:
            full = a * s + b * s * s + comm
            pair = (full, full)
        rows.append((np.where(mask[k], pair[0], np.inf), np.where(mask[k], pair[1], np.inf)))
    choosable = [k for k, size in enumerate(instance.sizes) if size > 1 and cost.overlap][:MAX_ENUMERATED_SIZES]
    best = 0.0
    for choice in itertools.product((0, 1), repeat=len(choosable)):
        picked = dict(zip(choosable, choice, strict=True))
        stack = np.stack([rows[k][picked.get(k, 0)] for k in range(len(rows))])
        best = max(best, float(stack.min(axis=0).sum()))
    return best


def minimum_slots(instance: ContextParallelInstance) -> int:
    """The fewest slots a plan can have: the fixed ``micro_batches``, else the token cap's
    ``⌈Σ tokens / (R · max_tokens_per_rank)⌉`` (at least 1 with sequences, 0 without)."""
    if instance.micro_batches is not None:
        return instance.micro_batches
    if instance.n == 0:
        return 0
    if instance.max_tokens_per_rank is None:
        return 1
    return max(1, math.ceil(int(instance.tokens.sum()) / (instance.ranks * instance.max_tokens_per_rank)))


def slot_bound(instance: ContextParallelInstance, solo: np.ndarray | None = None) -> float:
    """The slot bound on the step time (module docstring), seconds."""
    if instance.n == 0:
        return 0.0
    solo = solo_times(instance) if solo is None else solo
    order = np.sort(solo)
    k = min(minimum_slots(instance), instance.n)
    return float(order[-1] + order[: k - 1].sum()) if k > 1 else float(order[-1])


def leader_bound(instance: ContextParallelInstance, solo: np.ndarray | None = None) -> float:
    """The leader bound on the step time (module docstring), seconds; 0 without a token cap."""
    if instance.n == 0 or instance.max_tokens_per_rank is None:
        return 0.0
    solo = solo_times(instance) if solo is None else solo
    cost = instance.cost
    s = instance.tokens.astype(np.float64)
    work = cost.linear_s_per_token * s + cost.attention_s_per_token2 * s * s
    leader = int(np.argmax(solo))
    room = float(instance.ranks) * instance.max_tokens_per_rank - s[leader]
    held = float(work[leader])
    for i in np.argsort(-(work / s), kind="stable").tolist():  # densest first: the fractional knapsack
        if i == leader:
            continue
        if s[i] <= room:
            held += float(work[i])
            room -= s[i]
        else:
            held += float(work[i]) * max(0.0, room) / s[i]
            break
    return float(solo[leader]) + max(0.0, float(work.sum()) - held) / instance.ranks


def lower_bound(instance: ContextParallelInstance) -> float:
    """A proven lower bound on the instance's objective (seconds; 0 for ``balance``)."""
    if instance.objective == "balance" or instance.n == 0:
        return 0.0
    solo = solo_times(instance)
    work = work_bound(instance) / instance.ranks
    if instance.objective == "makespan":
        return max(work, float(solo.max()))
    return max(work, slot_bound(instance, solo), leader_bound(instance, solo))
