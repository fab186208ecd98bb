"""How close is the measured finish reserve to the finish it stands for? Balance, CPU seconds.

A plain script (no pytest). ``packplace.balance`` keeps back, from the backend's time limit, the finish of
an answer as :meth:`~packplace.balance.evaluator.BalanceEvaluator.finish_cost` measures it on the
instance: the canonical order and JSON text of a plan of the first 32,768 keys (the median of three
runs), scaled to n and by ``FINISH_PROBE_MARGIN``. For the batches of ``benchmarks/time_limits.py``
(lognormal token lengths, median 1024, ``seq_len`` 32,768, costs ``t + t²/4096``, 4,096 ranks, m bins
per rank at 85% fill, no reference grouping) this prints, in wall seconds on the run's clock (the probe's
own; on a shared machine compare rows of one run, and the load average in the header):

* ``probe``: the reserve ``finish_cost()`` gives (its first call in the process, as in a command-line run)
  and ``warm``, again on a second instance object of the same batch (as in a long-lived process);
* the real finish of the quick packing's answer: ``order`` (canonical order and run order), ``score``,
  ``json`` (``SolveResult.to_json()``) and their ``total``, with ``cpu``, its CPU seconds; ``ratio`` =
  probe / total and warm / total (above 1: the reserve covers the finish).

Usage:
    python benchmarks/finish_cost.py                       # 1M and 4M samples
    python benchmarks/finish_cost.py --samples 262144
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

SEQ_LEN = 32768


def row(samples: int, ranks: int, seed: int) -> dict:
    """Probe and real finish of one batch, CPU seconds."""
    from packplace.balance import evaluator as evaluator_module
    from packplace.balance.instance import make_instance
    from packplace.balance.quick import quick_packing
    from packplace.balance.schema import Assignment
    from packplace.result import FEASIBLE, SolveResult
    from packplace.run import clock

    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.lognormal(math.log(1024), 1.0, size=samples)), 1, SEQ_LEN).astype(np.int64)
    costs = tokens + tokens.astype(np.float64) ** 2 / 4096.0
    per_rank = math.ceil(int(tokens.sum()) / (0.85 * ranks * SEQ_LEN))

    def build():
        return make_instance(tokens, costs, seq_len=SEQ_LEN, data_parallel_size=ranks, local_batch_size=per_rank)

    instance = build()
    evaluator = evaluator_module.BalanceEvaluator(instance)
    bound = evaluator.lower_bound()  # computed before the backend by the front end: not part of the finish
    cold = evaluator.finish_cost()
    warm = evaluator_module.BalanceEvaluator(build()).finish_cost()
    plan = quick_packing(instance)
    cpu = time.process_time()
    started = clock()
    answer = evaluator.with_run_order(evaluator.canonical(Assignment(plan, per_rank)))
    ordered = clock()
    score = evaluator.score(answer)
    scored = clock()
    SolveResult(problem="balance", solver="quick", solution=answer, objective=score.objective, bound=bound,
                status=FEASIBLE, info=score.detail()).to_json()
    done = clock()
    return {"size": f"n={samples} D={ranks} m={per_rank}", "cold": cold, "warm": warm, "order": ordered - started,
            "score": scored - ordered, "json": done - scored, "total": done - started,
            "cpu": time.process_time() - cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'size':<26} {'probe':>6} {'warm':>6} {'order':>6} {'score':>6} {'json':>6} {'total':>6} {'cpu':>6} "
          f"{'ratio':>6} {'warm':>6}")
    for samples in args.samples:
        r = row(samples, args.ranks, args.seed)
        print(f"{r['size']:<26} {r['cold']:6.3f} {r['warm']:6.3f} {r['order']:6.3f} {r['score']:6.3f} "
              f"{r['json']:6.3f} {r['total']:6.3f} {r['cpu']:6.3f} {r['cold'] / r['total']:6.2f} "
              f"{r['warm'] / r['total']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
