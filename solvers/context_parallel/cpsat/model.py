"""The CP-SAT model of dynamic context parallelism: a layout per slot, a group per sequence.

Indices: sequences ``i`` (in the model's order, longest first), slots ``k < K`` (``K`` the instance's
fixed micro-batch count, else the most slots a plan can have: every group holds a sequence, so at most
``n // fewest groups per slot``), group classes ``c`` (a size and what else the cost reads from a
block's position, :mod:`.layouts`) and, per class, positions ``j`` (at most the class's largest count in
any slot signature, and at most n).

Variables: ``used[k]`` (the slot runs), ``active[k, c, j]`` (the slot has a j-th group of class c),
``x[i, k, c, j]`` (sequence i runs in it; only where its tokens fit the class's cap), ``M[k]`` (the
slot's time, integer ticks).

Constraints:
* each sequence in exactly one group; a group holds a sequence iff it is active; its tokens within
  ``size · max_tokens_per_rank``, its sequences at most ``max_members`` where given;
* per slot, the vector of active counts per class is one of the signatures (a tiling exists with these
  groups; ``AddAllowedAssignments``), or all zero for an unused slot; Σ size·active = R·used;
* a group's time ``T[k, c, j] ≥`` each of its affine pieces ``const·active + Σ_i coeff_i·x`` (the cost
  model's group time is their maximum), ``M[k] ≥ T`` of each group of the slot, and ``R·M[k] ≥
  Σ_groups size·T`` (every rank is busy at most the slot's time: the slot's rank-seconds fit in
  ``R·M[k]``; redundant, it feeds the LP);
* symmetry breaking: slots used first; slot k's smallest sequence index above slot k−1's, groups of one
  class in a slot likewise (``x[i, k, c, j] ≤ Σ_{i' < i} x[i', k, c, j−1]``): every plan has exactly one
  such ordering, so no plan is lost;
* the objective ``Σ_k M[k]`` at most ``ceiling`` (the start's model value).

Pieces are scaled to integer ticks rounding *down* (:class:`Pieces`), so the model's time of every group
is at most its true time × scale: CP-SAT's proven bound ÷ scale is a valid bound on the true step time,
and the model's optimum is within ``(n + K)`` ticks of the true one.
Reference: Perron & Didier, "CP-SAT", OR-Tools (https://developers.google.com/optimization).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packplace.lazy import lazy_module
from packplace.run import OutOfTime, clock
from packplace.solvers.context_parallel.cpsat.layouts import SlotLayouts

if TYPE_CHECKING:
    from ortools.sat.python import cp_model
else:  # start-up time: OR-Tools loads when a model is first built, not when the registry lists it
    cp_model = lazy_module("ortools.sat.python.cp_model")

#: Scaled value of the largest time the model holds (the start's step time), in ticks.
TICKS = 10**9


@dataclass(frozen=True)
class Pieces:
    """A group's time per class as the maximum of affine pieces, in seconds.

    ``pieces[c]`` is a list of ``(constant, coefficients)``; a group of class ``c`` holding sequences
    ``S`` takes ``max_p (constant_p + Σ_{i ∈ S} coefficients_p[i])`` seconds. ``fits[c][i]``: sequence i
    may run in a group of class c (its tokens within the class's cap).
    """

    pieces: list[list[tuple[float, list[float]]]]
    fits: list[list[bool]]


@dataclass
class Built:
    """The model and the variables the solve hints and reads back."""

    model: Any
    used: list[Any]
    active: dict[tuple[int, int, int], Any]
    x: dict[tuple[int, int, int, int], Any]
    slot_time: list[Any]
    scale: float
    ticks: list[list[tuple[int, list[int]]]]
    positions: list[int]
    slots: int
    fixed_slots: bool
    counts: list[list[Any]]
    derived: list[tuple[Any, list[Any]]]


def scaled(pieces: Pieces, scale: float) -> list[list[tuple[int, list[int]]]]:
    """Every constant and coefficient × ``scale``, rounded down (never above the true value × scale)."""
    def down(value: float) -> int:
        v = value * scale
        return math.floor(v - 1e-9 * abs(v))  # below any floating-point noise of the product
    return [[(down(const), [down(c) for c in coeffs]) for const, coeffs in per_class] for per_class in pieces.pieces]


def group_ticks(ticks: list[list[tuple[int, list[int]]]], c: int, members: Sequence[int]) -> int:
    """The model's time (ticks) of a group of class ``c`` holding ``members``."""
    return max(const + sum(coeffs[i] for i in members) for const, coeffs in ticks[c])


def build(
    *, layouts: SlotLayouts, ranks: int, tokens: Sequence[int], cap_per_rank: int, pieces: Pieces, scale: float,
    slots: int, fixed_slots: bool, ceiling: int | None, check_clock: Callable[[], None] = lambda: None,
    max_members: int | None = None,
) -> Built:
    """The model of the module docstring.

    Args:
        layouts: The slot signatures (:func:`~.layouts.slot_layouts`).
        ranks: R.
        tokens: Tokens per sequence, model order.
        cap_per_rank: ``max_tokens_per_rank``: a group of size s holds at most s times as many tokens.
        pieces: The groups' times (seconds); ``scale``: ticks per second.
        slots: K, the slots modelled; ``fixed_slots``: every one is used (the instance fixes the count).
        ceiling: Largest objective (ticks) worth finding (the start's), or None.
        check_clock: Raises :class:`~packplace.run.OutOfTime` when the deadline passed (called between
            phases).
        max_members: At most this many sequences in one group (None: no cap).
    """
    model = cp_model.CpModel()
    n = len(tokens)
    classes = layouts.classes
    positions = [min(most, n) for most in layouts.most]
    ticks = scaled(pieces, scale)
    # no slot takes longer than its slowest conceivable group: the largest constant and every sequence
    upper = max(const for per in ticks for const, _ in per) + sum(
        max(max(coeffs[i] for per in ticks for _, coeffs in per), 0) for i in range(n))
    if ceiling is not None:
        upper = min(upper, ceiling)
    used = [model.NewConstant(1) if fixed_slots else model.NewBoolVar(f"used_{k}") for k in range(slots)]
    active: dict[tuple[int, int, int], Any] = {}
    x: dict[tuple[int, int, int, int], Any] = {}
    for k in range(slots):
        for c, count in enumerate(positions):
            for j in range(count):
                active[k, c, j] = model.NewBoolVar(f"a_{k}_{c}_{j}")
                # the smallest sequences of slots 0..k (of groups 0..j of a class) rise: i ≥ k and i ≥ j
                for i in range(max(k, j), n):
                    if pieces.fits[c][i]:
                        x[i, k, c, j] = model.NewBoolVar(f"x_{i}_{k}_{c}_{j}")
        check_clock()
    # every sequence in one group
    by_sequence: list[list[Any]] = [[] for _ in range(n)]
    for (i, *_), v in x.items():
        by_sequence[i].append(v)
    for i in range(n):
        model.AddExactlyOne(by_sequence[i])
    check_clock()
    members: dict[tuple[int, int, int], list[tuple[int, Any]]] = {key: [] for key in active}
    for (i, k, c, j), v in x.items():
        members[k, c, j].append((i, v))
    slot_time = []
    slot_counts: list[list[Any]] = []
    derived: list[tuple[Any, list[Any]]] = []
    allowed = [list(s) for s in layouts.signatures]
    if not fixed_slots:
        allowed.append([0] * len(classes))
    for k in range(slots):
        for c, count in enumerate(positions):
            for j in range(count):
                a = active[k, c, j]
                held = members[k, c, j]
                for _, v in held:
                    model.AddImplication(v, a)
                model.AddBoolOr([v for _, v in held] + [a.Not()])
                size = classes[c][0]
                if sum(tokens[i] for i, _ in held) > size * cap_per_rank:
                    model.Add(sum(tokens[i] * v for i, v in held) <= size * cap_per_rank)
                if max_members is not None and len(held) > max_members:
                    model.Add(sum(v for _, v in held) <= max_members)
                if j > 0:
                    model.AddImplication(a, active[k, c, j - 1])
                    # the j-th group's smallest sequence comes after the (j−1)-th group's
                    _after(model, held, _prefixes(model, members[k, c, j - 1], n, derived))
        counts = [model.NewIntVar(0, count, f"n_{k}_{c}") for c, count in enumerate(positions)]
        slot_counts.append(counts)
        for c, count in enumerate(positions):
            model.Add(counts[c] == sum(active[k, c, j] for j in range(count)))
        model.AddAllowedAssignments(counts, allowed)
        model.Add(sum(classes[c][0] * counts[c] for c in range(len(classes))) == ranks * used[k])
        slot_time.append(_slot_time(model, k, positions, classes, active, members, ticks, upper, ranks,
                                    None if fixed_slots else used[k]))
        check_clock()
    # slots: used ones first, ordered by their smallest sequence
    by_slot: list[list[tuple[int, Any]]] = [[] for _ in range(slots)]
    for (i, k, _c, _j), v in x.items():
        by_slot[k].append((i, v))
    for k in range(1, slots):
        if not fixed_slots:
            model.AddImplication(used[k], used[k - 1])
        _after(model, by_slot[k], _prefixes(model, by_slot[k - 1], n, derived))
        check_clock()
    total = sum(slot_time)
    if ceiling is not None:
        model.Add(total <= ceiling)
    model.Minimize(total)
    return Built(model, used, active, x, slot_time, scale, ticks, positions, slots, fixed_slots, slot_counts, derived)


def _slot_time(model: Any, k: int, positions: list[int], classes: Any, active: dict[tuple[int, int, int], Any],
               members: dict[tuple[int, int, int], list[tuple[int, Any]]], ticks: list[list[tuple[int, list[int]]]],
               upper: int, ranks: int, used: Any) -> Any:
    """Slot ``k``'s time M (ticks): above every group's time, each above its pieces, and the slot's
    rank-seconds Σ size·T within R·M; 0 when ``used`` (the slot's Boolean, None: always used) is false."""
    # the slot's time: above every group's
    m = model.NewIntVar(0, max(upper, 0), f"M_{k}")
    if used is not None:
        model.Add(m == 0).OnlyEnforceIf(used.Not())
    # a time per group above each of its pieces; the slot's rank-seconds Σ size·T fit in R·M
    times = []
    for c, count in enumerate(positions):
        for j in range(count):
            t = model.NewIntVar(0, max(upper, 0), "")
            for const, coeffs in ticks[c]:
                model.Add(t >= const * active[k, c, j] + sum(coeffs[i] * v for i, v in members[k, c, j]))
            model.Add(m >= t)
            times.append(classes[c][0] * t)
    model.Add(ranks * m >= sum(times))
    return m


def _prefixes(model: Any, members: Sequence[tuple[int, Any]], n: int,
              derived: list[tuple[Any, list[Any]]]) -> list[Any]:
    """``out[i]``: a literal true iff some member of index ≤ i is (None: no member ≤ i). Each new literal
    is recorded in ``derived`` with the literals it is the disjunction of (for the hint)."""
    by_index: dict[int, list[Any]] = {}
    for i, v in members:
        by_index.setdefault(i, []).append(v)
    out: list[Any] = [None] * n
    current = None
    for i in range(n):
        literals = by_index.get(i, [])
        if literals:
            parts = ([current] if current is not None else []) + literals
            if len(parts) == 1:
                current = parts[0]
            else:
                z = model.NewBoolVar("")
                for part in parts:
                    model.AddImplication(part, z)
                model.AddBoolOr([*parts, z.Not()])
                derived.append((z, parts))
                current = z
        out[i] = current
    return out


def _after(model: Any, members: Sequence[tuple[int, Any]], earlier: list[Any]) -> None:
    """Member ``(i, v)`` true only if ``earlier[i − 1]`` is: some member of the preceding group (slot) has a
    smaller index."""
    for i, v in members:
        before = earlier[i - 1] if i > 0 else None
        if before is None:
            model.Add(v == 0)
        else:
            model.AddImplication(v, before)


def hint(built: Built, slots: Sequence[Sequence[tuple[int, Sequence[int]]]]) -> int:
    """Hint every variable with a plan given as slots of ``(class, member indices)`` groups, put in the
    model's symmetry-breaking order first; returns the plan's model objective (ticks)."""
    ordered_slots = sorted(slots, key=lambda groups: min(min(m) for _, m in groups))
    chosen: dict[tuple[int, int, int, int], bool] = {}
    on: set[tuple[int, int, int]] = set()
    total = 0
    for k, groups in enumerate(ordered_slots):
        by_class: dict[int, list[Sequence[int]]] = {}
        for c, members in groups:
            by_class.setdefault(c, []).append(members)
        slot = 0
        for c, lists in by_class.items():
            for j, members in enumerate(sorted(lists, key=min)):
                on.add((k, c, j))
                for i in members:
                    chosen[i, k, c, j] = True
                slot = max(slot, group_ticks(built.ticks, c, members))
        built.model.AddHint(built.slot_time[k], slot)
        total += slot
    for k in range(len(ordered_slots), built.slots):
        built.model.AddHint(built.slot_time[k], 0)
    if not built.fixed_slots:
        for k, u in enumerate(built.used):
            built.model.AddHint(u, k < len(ordered_slots))
    for key, a in built.active.items():
        built.model.AddHint(a, key in on)
    for k, counts in enumerate(built.counts):
        for c, count in enumerate(counts):
            built.model.AddHint(count, sum(1 for kk, cc, _ in on if kk == k and cc == c))
    values: dict[int, bool] = {}
    for key, v in built.x.items():
        values[v.Index()] = chosen.get(key, False)
        built.model.AddHint(v, values[v.Index()])
    for z, parts in built.derived:
        values[z.Index()] = any(values[part.Index()] for part in parts)
        built.model.AddHint(z, values[z.Index()])
    return total


def read(value: Callable[[Any], bool], built: Built) -> list[list[tuple[int, list[int]]]]:
    """The answer as slots of ``(class, member indices)`` groups (used slots only); ``value`` is the
    solver's (or a solution callback's) ``BooleanValue``."""
    groups: dict[int, dict[tuple[int, int], list[int]]] = {}
    for (i, k, c, j), v in built.x.items():
        if value(v):
            groups.setdefault(k, {}).setdefault((c, j), []).append(i)
    return [[(c, sorted(m)) for (c, _j), m in sorted(groups[k].items())] for k in sorted(groups)]


def out_of_time_checker(deadline: float | None) -> Callable[[], None]:
    """A ``check_clock`` for :func:`build`: raises :class:`~packplace.run.OutOfTime` past ``deadline``."""
    def check() -> None:
        if deadline is not None and clock() > deadline:
            raise OutOfTime("the deadline passed while the model was being built")
    return check
