"""packplace's hyper_parallel adapter against the protocol's default algorithm on random instances.

A plain script (no pytest). Draws ``--instances`` random one-bin-per-rank instances (2, 4 or 8
ranks, rounds of 2 ranks on half of the larger ones, 1-6 samples per rank of 1-64 tokens with costs
tokens² plus noise, a token cap from the tightest possible to 16 above it), takes the default
algorithm's greedy pass as the planner's reference (instances where it dead-ends are skipped),
and scores both answers — ``PackplaceBalancingAlgorithm().assign`` and the default algorithm
(``tests/integrations/hyper_parallel_protocol.ReferenceLPT``, written from the protocol's
description) — by the protocol's scheduled makespan. Prints how often packplace is better, equal
and worse, and the mean gain where it is better.

With ``--planted`` the instances are the adapter test's planted ones instead
(``tests/integrations/test_hyper_parallel_protocol._planted_instance``: a random packing of bins filled
to or near the cap is the reference, one or two bins per rank), where the default's greedy pass often
dead-ends and returns to the reference; none is skipped, and dead ends are counted.

Usage:
    python benchmarks/hyper_parallel_adapter.py
    python benchmarks/hyper_parallel_adapter.py --instances 1000 --seed 1
    python benchmarks/hyper_parallel_adapter.py --planted --instances 1000
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integrations"))

from hyper_parallel_protocol import PackingConstraints, ReferenceLPT, samples_of, scheduled_score  # noqa: E402

from packplace.integrations.hyper_parallel import PackplaceBalancingAlgorithm  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--planted", action="store_true", help="planted references (dead ends included)")
    args = parser.parse_args()
    if args.planted:
        planted(args.instances, args.seed)
        return
    rng = random.Random(args.seed)
    counts = {"better": 0, "equal": 0, "worse": 0, "skipped": 0}
    gains = []
    for _ in range(args.instances):
        ranks = rng.choice([2, 4, 8])
        group = rng.choice([None, 2]) if ranks > 2 else None
        n = rng.randint(ranks, 6 * ranks)
        tokens = [rng.randint(1, 64) for _ in range(n)]
        costs = [t * t + rng.randint(0, 500) for t in tokens]
        cap = max(max(tokens), -(-sum(tokens) // ranks) + rng.randint(0, 16))
        samples = samples_of(tokens, costs)
        constraints = PackingConstraints(cap)
        reference = ReferenceLPT()._greedy(samples, constraints, ranks, 1, group or ranks)
        if reference is None:
            counts["skipped"] += 1
            continue
        extra = {} if group is None else {"objective_group_size": group}
        call = {"reference_bins": reference, "constraints": constraints, "data_parallel_size": ranks,
                "local_batch_size": 1, **extra}
        theirs = scheduled_score(ReferenceLPT().assign(samples, **call), samples, group or ranks)
        ours = scheduled_score(PackplaceBalancingAlgorithm().assign(samples, **call), samples, group or ranks)
        if ours < theirs:
            counts["better"] += 1
            gains.append(1 - ours / theirs)
        else:
            counts["equal" if ours == theirs else "worse"] += 1
    print(" ".join(f"{name}={value}" for name, value in counts.items()))
    if gains:
        print(f"mean gain where better: {100 * sum(gains) / len(gains):.2f}%  largest: {100 * max(gains):.2f}%")


def planted(instances: int, seed: int) -> None:
    """The adapter against the default algorithm on planted instances (module docstring), dead ends included."""
    from test_hyper_parallel_protocol import _planted_instance, _rank_rounds_score

    rng = random.Random(seed)
    counts = {"better": 0, "equal": 0, "worse": 0, "dead_ends": 0}
    gains = []
    for _ in range(instances):
        samples, reference, cap, ranks, per_rank, group = _planted_instance(rng)
        call = {"reference_bins": reference, "constraints": PackingConstraints(cap), "data_parallel_size": ranks,
                "local_batch_size": per_rank, **({} if group is None else {"objective_group_size": group})}
        g = group or ranks
        counts["dead_ends"] += ReferenceLPT()._greedy(samples, PackingConstraints(cap), ranks, per_rank, g) is None
        theirs = _rank_rounds_score(ReferenceLPT().assign(samples, **call), samples, per_rank, g)
        ours = _rank_rounds_score(PackplaceBalancingAlgorithm().assign(samples, **call), samples, per_rank, g)
        if ours < theirs:
            counts["better"] += 1
            gains.append(1 - ours / theirs)
        else:
            counts["equal" if ours == theirs else "worse"] += 1
    print(" ".join(f"{name}={value}" for name, value in counts.items()))
    if gains:
        print(f"mean gain where better: {100 * sum(gains) / len(gains):.2f}%  largest: {100 * max(gains):.2f}%")


if __name__ == "__main__":
    main()
