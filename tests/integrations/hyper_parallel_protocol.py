"""A stand-in for hyper_parallel's balancing protocol, written for the adapter tests from the protocol's
description (``hyper_parallel.distributed_data``, Apache-2.0): its sample, cost and constraint types and
its default algorithm's rules (greedy longest-processing-time placement, then bounded two-bin repair
under suffix subset-sum reachability), independent of packplace's own copy of those rules."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class SampleKey:
    reader_rank: int
    dataset_index: int


@dataclass(frozen=True)
class WorkloadCost:
    llm: float = 0.0
    encoder: float = 0.0

    def __add__(self, other):
        return WorkloadCost(self.llm + other.llm, self.encoder + other.encoder)


@dataclass(frozen=True)
class SampleMetadata:
    """What the planner passes to ``assign``: key, tokens and cost on the sample itself."""

    key: SampleKey
    pack_tokens: int
    cost: WorkloadCost = WorkloadCost()
    packing_costs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Wrapped:
    """The buffered form: the metadata one level down."""

    key: SampleKey
    metadata: SampleMetadata


@dataclass(frozen=True)
class PackingConstraints:
    seq_len: int
    packing_budgets: dict = field(default_factory=dict)

    def fits(self, tokens, packing_costs, sample):
        if tokens + sample.pack_tokens > self.seq_len:
            return False
        return all(packing_costs.get(name, 0.0) + sample.packing_costs.get(name, 0.0) <= budget
                   for name, budget in self.packing_budgets.items())

    def add_costs(self, packing_costs, sample):
        out = dict(packing_costs)
        for name in self.packing_budgets:
            out[name] = out.get(name, 0.0) + sample.packing_costs.get(name, 0.0)
        return out


def samples_of(tokens, costs=None, reader=0):
    costs = tokens if costs is None else costs
    return [SampleMetadata(SampleKey(reader, i), t, WorkloadCost(llm=float(c)))
            for i, (t, c) in enumerate(zip(tokens, costs))]


def scheduled_score(bins, samples, group):
    """The protocol's makespan over rounds of ``group`` ranks (one bin per rank): Σ sorted_desc[::group]."""
    llm = {s.key: s.cost.llm for s in samples}
    loads = sorted((math.fsum(llm[k] for k in b) for b in bins), reverse=True)
    return math.fsum(loads[::group])


class ReferenceLPT:
    """The protocol's default algorithm (makespan objective, no padding callback), one bin per rank or more."""

    def __init__(self, max_repair_pairs=64):
        self.budget = max_repair_pairs

    def assign(self, samples, *, reference_bins, constraints, data_parallel_size, local_batch_size,
               objective_group_size=None):
        group = objective_group_size or data_parallel_size
        bins = self._greedy(samples, constraints, data_parallel_size, local_batch_size, group)
        if bins is None:
            bins = reference_bins
        if local_batch_size != 1 or constraints.packing_budgets or len(reference_bins) < 2:
            return bins
        by_key = {s.key: s for s in samples}
        if any(sum(by_key[k].pack_tokens for k in b) > constraints.seq_len for b in bins):
            return bins
        return self._repair(by_key, bins, constraints.seq_len, group)

    def _greedy(self, samples, constraints, ranks, per_rank, group):
        order = sorted(samples, key=lambda s: (-s.cost.llm, -s.pack_tokens, s.key))
        n_bins = ranks * per_rank
        content = [[] for _ in range(n_bins)]
        used = [0] * n_bins
        stage = [{} for _ in range(n_bins)]
        load = [0.0] * ranks
        rank_tok = [0] * ranks
        window = group < ranks and per_rank == 1
        for position, s in enumerate(order):
            choices = []
            for b in range(n_bins):
                if position < n_bins and content[b]:
                    continue
                if not constraints.fits(used[b], stage[b], s):
                    continue
                r = b // per_rank
                if window:
                    after = load.copy()
                    after[r] += s.cost.llm
                    primary = math.fsum(sorted(after, reverse=True)[::group])
                else:
                    primary = load[r]
                left = constraints.seq_len - min(constraints.seq_len, used[b] + s.pack_tokens)
                choices.append(((primary, left, rank_tok[r], r, b % per_rank), b))
            if not choices:
                return None
            b = min(choices)[1]
            r = b // per_rank
            load[r] += s.cost.llm
            content[b].append(s.key)
            used[b] += s.pack_tokens
            stage[b] = constraints.add_costs(stage[b], s)
            rank_tok[r] += min(s.pack_tokens, constraints.seq_len)
        return tuple(tuple(c) for c in content)

    def _repair(self, by_key, start, cap, group):
        bins = [tuple(b) for b in start]
        cost = [math.fsum(by_key[k].cost.llm for k in b) for b in bins]

        def score(values):
            return math.fsum(sorted(values, reverse=True)[::group])

        current = score(cost)
        seen = set()
        version = [0] * len(bins)
        moved = False
        while len(seen) < self.budget:
            order = sorted(range(len(cost)), key=lambda i: (-cost[i], i))
            where = {b: p for p, b in enumerate(order)}
            pairs = set()
            for lead in order[::group]:
                for other in order[:4] + order[-4:] + [order[(where[lead] + j) % len(order)] for j in (1, 2, 3, 4)]:
                    if other != lead and (min(lead, other), max(lead, other), version[min(lead, other)],
                                          version[max(lead, other)]) not in seen:
                        pairs.add((min(lead, other), max(lead, other)))
            accepted = False
            for a, b in sorted(pairs, key=lambda p: (-self._gain(cost, p, group), p)):
                if len(seen) == self.budget:
                    break
                seen.add((a, b, version[a], version[b]))
                pool = sorted((by_key[k] for i in (a, b) for k in bins[i]),
                              key=lambda s: (-s.cost.llm, -s.pack_tokens, s.key))
                split = self._split(pool, cap, cost, (a, b), group)
                if split is None:
                    continue
                trial = cost.copy()
                trial[a] = math.fsum(by_key[k].cost.llm for k in split[0])
                trial[b] = math.fsum(by_key[k].cost.llm for k in split[1])
                if score(trial) < current:
                    bins[a], bins[b] = split
                    cost, current, moved = trial, score(trial), True
                    version[a] += 1
                    version[b] += 1
                    accepted = True
                    break
            if not accepted:
                break
        return tuple(bins) if moved else start

    @staticmethod
    def _gain(cost, pair, group):
        both = cost[pair[0]] + cost[pair[1]]
        rest = sorted((c for i, c in enumerate(cost) if i not in pair), reverse=True)
        edges = [c for i, c in enumerate(rest) if i % group in {0, (group - 1) % group, (group - 2) % group}]
        cuts = {0.0, both, both / 2}
        cuts.update(c for c in edges if c <= both)
        cuts.update(both - c for c in edges if c <= both)
        best = min(math.fsum(sorted(rest + [c, both - c], reverse=True)[::group]) for c in cuts)
        return math.fsum(sorted(cost, reverse=True)[::group]) - best

    @staticmethod
    def _split(pool, cap, cost, pair, group):
        reach = [0] * (len(pool) + 1)
        reach[len(pool)] = 1
        full = (1 << (cap + 1)) - 1
        for i in range(len(pool) - 1, -1, -1):
            reach[i] = (reach[i + 1] | (reach[i + 1] << pool[i].pack_tokens)) & full
        held = [0, 0]
        sums = [0.0, 0.0]
        out = [[], []]
        rest = sum(s.pack_tokens for s in pool)
        for i, s in enumerate(pool):
            rest -= s.pack_tokens
            options = []
            for side in (0, 1):
                t = held.copy()
                t[side] += s.pack_tokens
                # x more tokens go to side 0: both sides non-empty and within the cap
                lo = max(0, 1 - t[0], rest + t[1] - cap)
                hi = min(rest, cap - t[0], rest + t[1] - 1)
                if lo > hi or not any((reach[i + 1] >> x) & 1 for x in range(lo, hi + 1)):
                    continue
                trial = cost.copy()
                trial[pair[0]], trial[pair[1]] = sums
                trial[pair[side]] += s.cost.llm
                options.append((math.fsum(sorted(trial, reverse=True)[::group]), cap - t[side], side))
            if not options:
                return None
            side = min(options)[2]
            out[side].append(s.key)
            held[side] += s.pack_tokens
            sums[side] += s.cost.llm
        return tuple(out[0]), tuple(out[1])
