"""The rank-rule construction and ``repair``'s rank-level moves keep their answers.

``_reference_assign_ranks`` is the rank assignment as it was before ranks that can no longer take any
unit left its heap (a plain heap of every rank, each unit popping past the ranks that cannot take it):
the current :func:`~packplace.balance.rank_rules.assign_ranks` must pick the same rank for every unit,
ties (equal loads: the lower rank; equal priorities: the unit order) included, on seeded instances of
every rank rule. ``PINNED`` holds the SHA-256 of the bins and the objective that ``lpt`` and ``repair``
answered on such instances before the rank choice and ``improve``'s set-up were made faster.
"""

from __future__ import annotations

import hashlib
import heapq
import json

import numpy as np
import pytest

import packplace
from packplace.balance import make_instance, rank_rules
from packplace.balance.rank_rules import RankRules, assign_ranks, construct, units_of

RULES = ("equal_count", "groups", "cap", "groups_equal_count", "oversized_equal_count", "skewed_equal_count")


def _instance(rule: str, seed: int, ties: bool):
    """A seeded instance under ``rule``: D in [3, 24] ranks of m in [2, 5] bins of 4,096 tokens, about
    four samples a bin; ``ties`` draws tokens from five sizes and sets cost = tokens (many equal loads)."""
    rng = np.random.default_rng(seed)
    ranks, m = int(rng.integers(3, 25)), int(rng.integers(2, 6))
    n = ranks * m * 4 + int(rng.integers(0, ranks))
    if ties:
        tokens = rng.choice([64, 128, 256, 512, 1024], size=n).astype(np.int64)
        costs = tokens.astype(np.float64)
    else:
        tokens = np.clip(rng.lognormal(np.log(300), 0.8, n).astype(np.int64), 1, 2048)
        costs = tokens + tokens * tokens / 4096
    kwargs: dict = {}
    if rule == "skewed_equal_count":  # half the ranks take one huge sample, the others fill up first
        costs = costs.astype(np.float64)
        costs[: ranks // 2] = 1e9
    if rule == "oversized_equal_count":
        tokens[rng.choice(n, size=ranks, replace=False)] = 5000
        costs = tokens + tokens * tokens / 4096
        kwargs["oversized_policy"] = "single"
    if rule in ("equal_count", "groups_equal_count", "oversized_equal_count", "skewed_equal_count"):
        kwargs["equal_count"] = True
    if rule == "cap":
        kwargs["max_samples_per_bin"] = 5
    if rule in ("groups", "groups_equal_count"):
        picked = rng.permutation(n)[: n // 3].tolist()
        groups, start = [], 0
        while start + 1 < len(picked):
            size = int(rng.integers(2, 4))
            groups.append(picked[start:start + size])
            start += size
        kwargs["groups"] = groups
    return make_instance(tokens, costs, seq_len=4096, data_parallel_size=ranks, local_batch_size=m, **kwargs)


def _starved(seed: int, fill: float):
    """64 ranks of 2 bins of 4,096 tokens, 768 samples whose tokens fill about ``fill`` of them and whose costs are
    drawn apart from their tokens (``equal_count``): a rank that took long samples cheaply is left with little token
    room and the least load, so it stays at the heap's top, set aside by every longer sample, and the construction
    ends at a dead end."""
    rng = np.random.default_rng(seed)
    ranks, m, seq_len = 64, 2, 4096
    n = ranks * m * 6
    mu = fill * m * ranks * seq_len / n / np.exp(0.5)
    tokens = np.clip(rng.lognormal(np.log(mu), 1.0, n).astype(np.int64), 1, seq_len)
    return make_instance(tokens, rng.random(n) * 1000, seq_len=seq_len, data_parallel_size=ranks, local_batch_size=m,
                         equal_count=True)


def _reference_assign_ranks(columns, units):
    """The rank of every unit as :func:`assign_ranks` chose it with every rank in one heap (no stop)."""
    tokens, priority = columns.tokens, columns.priority
    n, ranks, m, seq_len = len(tokens), columns.ranks, columns.per_rank, columns.seq_len
    rules = RankRules.of(n, ranks, m, columns.equal_count, columns.max_samples_per_bin)
    if rules.lo > rules.hi:
        return None
    oversized = tokens > seq_len
    size = [len(u) for u in units]
    unit_over = [int(oversized[u].sum()) for u in units]
    unit_tokens = np.array([int(tokens[u][~oversized[u]].sum()) for u in units], dtype=np.int64)
    unit_priority = np.array([float(priority[u].sum()) for u in units])
    unit_tie = np.array([int(columns.key_rank[u].min()) for u in units], dtype=np.int64)
    order = np.lexsort((unit_tie, -(unit_tokens + np.array(unit_over) * seq_len), -unit_priority)).tolist()
    count, over, used = [0] * ranks, [0] * ranks, [0] * ranks
    members: list[list[int]] = [[] for _ in range(ranks)]
    heap = [(0.0, r) for r in range(ranks)]
    remaining, deficit, above = n, ranks * rules.lo, 0
    lo, hi, spare = rules.lo, rules.hi, rules.spare
    for u in order:
        s, o, t = size[u], unit_over[u], int(unit_tokens[u])
        skipped, chosen = [], None
        while heap:
            load, r = heapq.heappop(heap)
            new_count = count[r] + s
            fits = (new_count <= hi and over[r] + o <= m and used[r] + t <= (m - over[r] - o) * seq_len
                    and not (above >= spare and count[r] <= lo < new_count)
                    and remaining - s >= deficit - min(max(0, lo - count[r]), s))
            if fits:
                chosen = (load, r)
                break
            skipped.append((load, r))
        for entry in skipped:
            heapq.heappush(heap, entry)
        if chosen is None:
            return None
        load, r = chosen
        if count[r] <= lo < count[r] + s:
            above += 1
        deficit -= min(max(0, lo - count[r]), s)
        count[r] += s
        over[r] += o
        used[r] += t
        members[r].extend(units[u])
        remaining -= s
        heapq.heappush(heap, (load + float(unit_priority[u]), r))
    if not rules.counts_hold(np.array(count)):
        return None
    return members


@pytest.mark.parametrize("rule", RULES)
def test_assign_ranks_picks_the_rank_the_single_heap_picked(rule):
    answered = 0
    for seed in range(12):
        inst = _instance(rule, seed, ties=seed % 2 == 0)
        for by in ("cost", "tokens"):
            columns = inst.packing_columns(by)
            units = units_of(columns.group_of)
            expected = _reference_assign_ranks(columns, units)
            assert assign_ranks(columns, units) == expected, (rule, seed, by)
            answered += expected is not None
    assert answered >= 20  # the comparison is over real assignments, not dead ends


def _counting_pops(monkeypatch) -> list[int]:
    """``[pops]``: the heap pops of :mod:`~packplace.balance.rank_rules` (its own and the reference's) from here on."""
    pops = [0]
    real_pop = heapq.heappop

    def counting_pop(heap):
        pops[0] += 1
        return real_pop(heap)

    monkeypatch.setattr(rank_rules.heapq, "heappop", counting_pop)
    return pops


def test_full_ranks_leave_the_heap_once(monkeypatch):
    # 21 ranks of 4 bins, 346 samples (lo 16, hi 17), 10 of cost 1e9: the 11 other ranks fill up first;
    # the single heap popped past the full ranks for each unit placed after that, the retiring heap
    # pops each full rank once (at most one pop per unit plus one per rank)
    inst = _instance("skewed_equal_count", 0, ties=False)
    columns = inst.packing_columns("cost")
    units = units_of(columns.group_of)
    pops = _counting_pops(monkeypatch)
    members = assign_ranks(columns, units)
    assert members is not None
    assert pops[0] <= len(units) + columns.ranks
    pops[0] = 0
    assert _reference_assign_ranks(columns, units) == members
    assert pops[0] > len(units) + columns.ranks  # the instance does make the single heap pop past full ranks


def _counting(monkeypatch, name):
    calls = [0]
    real = getattr(rank_rules._RankMirror, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(rank_rules._RankMirror, name, counted)
    return calls


@pytest.mark.parametrize("scan_after", [1, rank_rules.SCAN_AFTER])
def test_the_vectorised_scan_picks_the_rank_the_single_heap_picked(monkeypatch, scan_after):
    # starved batches set ranks aside (the rule instances above retire them instead); with a scan after every
    # rank set aside, each such unit's rank comes from _RankMirror.scan, its old heap entry left behind (and
    # dropped when it surfaces), and still every rank, and every dead end, is the reference's
    monkeypatch.setattr(rank_rules, "SCAN_AFTER", scan_after)
    scans = _counting(monkeypatch, "scan")
    answered = dead = 0
    for seed in range(6):
        for fill in (0.5, 0.6, 0.75, 0.9):
            inst = _starved(seed, fill)
            for by in ("cost", "tokens"):
                columns = inst.packing_columns(by)
                units = units_of(columns.group_of)
                expected = _reference_assign_ranks(columns, units)
                assert assign_ranks(columns, units) == expected, (seed, fill, by)
                answered += expected is not None
                dead += expected is None
    assert answered >= 15 and dead >= 15 and scans[0] > (500 if scan_after == 1 else 50)


@pytest.mark.parametrize("seed, fill", [(3, 0.93), (3, 0.96), (2, 0.85), (0, 0.9), (1, 0.96)])
def test_a_dead_end_where_ranks_run_out_of_tokens_is_found_without_popping_past_them(monkeypatch, seed, fill):
    # the single heap popped past every starved rank for each longer sample (O(D) pops and pushes a unit); now a
    # unit sets at most SCAN_AFTER ranks aside before one numpy scan, which finds the same rank or the dead end
    columns = _starved(seed, fill).packing_columns("cost")
    units = units_of(columns.group_of)
    pops = _counting_pops(monkeypatch)
    scans = _counting(monkeypatch, "scan")
    assert assign_ranks(columns, units) is None
    # set-asides and retirements, plus at most one left-behind entry per scan
    assert pops[0] <= len(units) * rank_rules.SCAN_AFTER + columns.ranks + scans[0]
    assert scans[0] >= 1
    pops[0] = 0
    assert _reference_assign_ranks(columns, units) is None


def test_a_starved_batch_makes_the_single_heap_pop_past_the_starved_ranks(monkeypatch):
    columns = _starved(3, 0.96).packing_columns("cost")
    units = units_of(columns.group_of)
    pops = _counting_pops(monkeypatch)
    assign_ranks(columns, units)
    scanned = pops[0]
    pops[0] = 0
    _reference_assign_ranks(columns, units)
    assert pops[0] > 2 * scanned   # the instance is one where the heap's pops dominate


def test_assign_ranks_keeps_the_lower_rank_on_equal_loads():
    # eight equal samples on four ranks: each round of four goes to ranks 0, 1, 2, 3 in order
    inst = make_instance([10] * 8, seq_len=100, data_parallel_size=4, equal_count=True)
    columns = inst.packing_columns("cost")
    assert assign_ranks(columns, units_of(columns.group_of)) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def _digest(bins) -> str:
    return hashlib.sha256(json.dumps([list(b) for b in bins]).encode()).hexdigest()[:16]


#: (rule, seed, ties, solver) -> (SHA-256 prefix of the bins, objective).
PINNED = {
    ('equal_count', 1, False, 'lpt'): ('b6e87e5a747d373b', 7164.79345703125),
    ('equal_count', 1, False, 'repair'): ('f4d22eddfd5432b1', 7133.440673828125),
    ('equal_count', 2, True, 'lpt'): ('b83fefaf262ab0a8', 5056.0),
    ('equal_count', 2, True, 'repair'): ('364c05ce0e778936', 4992.0),
    ('equal_count', 5, True, 'lpt'): ('4ea6cf719c820e3e', 7872.0),
    ('equal_count', 5, True, 'repair'): ('393ffab6b72b5f7e', 7808.0),
    ('groups', 1, False, 'lpt'): ('27b966011035c0e5', 7160.4072265625),
    ('groups', 1, False, 'repair'): ('524ee50797006d68', 7134.075439453125),
    ('groups', 2, True, 'lpt'): ('c8737b414c9c4e5c', 4928.0),
    ('groups', 2, True, 'repair'): ('c8737b414c9c4e5c', 4928.0),
    ('groups', 5, True, 'lpt'): ('30640d6aa211239e', 7808.0),
    ('groups', 5, True, 'repair'): ('30640d6aa211239e', 7808.0),
    ('cap', 1, False, 'lpt'): ('fb2605ecab8449a9', 7157.16015625),
    ('cap', 1, False, 'repair'): ('4d936c873a0e73ef', 7133.46044921875),
    ('cap', 2, True, 'lpt'): ('e806ba38e898c72f', 4928.0),
    ('cap', 2, True, 'repair'): ('e806ba38e898c72f', 4928.0),
    ('cap', 5, True, 'lpt'): ('37d9c3bc4a8f32bf', 7808.0),
    ('cap', 5, True, 'repair'): ('37d9c3bc4a8f32bf', 7808.0),
    ('groups_equal_count', 1, False, 'lpt'): ('79e7a99d52853609', 7369.18310546875),
    ('groups_equal_count', 1, False, 'repair'): ('f9461be954161e18', 7134.109619140625),
    ('groups_equal_count', 2, True, 'lpt'): ('99c90aca73bbf6c2', 5056.0),
    ('groups_equal_count', 2, True, 'repair'): ('cb4be83b3c1106aa', 4992.0),
    ('groups_equal_count', 5, True, 'lpt'): ('f52c7fa0b3149c92', 7936.0),
    ('groups_equal_count', 5, True, 'repair'): ('4edae721890c7119', 7808.0),
    ('oversized_equal_count', 1, False, 'lpt'): ('6d5696d0ac205387', 17713.48046875),
    ('oversized_equal_count', 1, False, 'repair'): ('64cd57d75592feee', 17651.7265625),
    ('oversized_equal_count', 2, True, 'lpt'): ('a8c570b4a63ea72f', 16425.515625),
    ('oversized_equal_count', 2, True, 'repair'): ('5e67af9b43902908', 16396.515625),
    ('oversized_equal_count', 5, True, 'lpt'): ('77abb8905f85180b', 19827.515625),
    ('oversized_equal_count', 5, True, 'repair'): ('9d94d7b7e1563e6b', 19827.515625),
}
#: (seed, fill, solver) -> the same, on :func:`_starved` batches, whose cost-first construction dead-ends (lpt and
#: repair then take the tokens-first one): answered before the vectorised scan.
PINNED_STARVED = {
    (3, 0.93, 'lpt'): ('dd45ad7201415af8', 7750.698097111763),
    (3, 0.93, 'repair'): ('988f5fdd675fc822', 6123.766923484955),
    (3, 0.96, 'lpt'): ('ae962b710826330e', 8542.843954676084),
    (3, 0.96, 'repair'): ('71ca1ecaf7df25ea', 6125.645222018822),
    (2, 0.85, 'lpt'): ('82848f9fd4bb4458', 7998.536083936191),
    (2, 0.85, 'repair'): ('f38dded9907f2ce3', 6160.336185607479),
}


@pytest.mark.parametrize("key", sorted(PINNED))
def test_lpt_and_repair_answers_are_pinned(key):
    rule, seed, ties, solver = key
    result = packplace.balance(_instance(rule, seed, ties), solver=solver)
    assert result.status in ("optimal", "feasible")
    assert (_digest(result.solution.bins), result.objective) == PINNED[key]


@pytest.mark.parametrize("key", sorted(PINNED_STARVED))
def test_lpt_and_repair_answers_after_a_dead_end_are_pinned(key):
    seed, fill, solver = key
    result = packplace.balance(_starved(seed, fill), solver=solver)
    assert result.status == "feasible" and "cost-first construction dead-ended" in result.message
    assert (_digest(result.solution.bins), result.objective) == PINNED_STARVED[key]


def test_construct_bins_hold_every_sample_once():
    inst = _instance("groups_equal_count", 3, ties=True)
    bins = construct(inst.packing_columns("cost"))
    assert bins is not None
    assert sorted(i for b in bins for i in b) == list(range(len(inst.samples)))


def test_first_cells_is_the_stable_argsort_prefix():
    from packplace.solvers.balance.constrained import _first_cells

    score = np.array([[2.0, 1.0, np.inf], [1.0, 0.5, 1.0]])
    # 0.5 (cell 4), then the three 1.0 cells in index order (1, 3, 5)
    assert _first_cells(score, 3).tolist() == [4, 1, 3]
    assert _first_cells(score, 10).tolist() == [4, 1, 3, 5, 0, 2]
    rng = np.random.default_rng(1)
    for _ in range(300):
        shape = (int(rng.integers(1, 20)), int(rng.integers(1, 20)))
        score = rng.integers(0, 4, size=shape).astype(float)
        score[rng.random(shape) < 0.3] = np.inf
        k = int(rng.integers(1, 10))
        assert _first_cells(score, k).tolist() == np.argsort(score, axis=None, kind="stable")[:k].tolist()
