"""Do the solvers honour ``time_limit_s`` at size? Wall time of whole library calls against the rule.

A plain script (no pytest). The rule: every solver returns within ``1.1·limit + 0.5`` seconds of
wall time and of CPU time, counted from the library call (``packplace.balance``/``packplace.place``) to
its result written as JSON, at 1M and 4M samples × 4,096 ranks (balance), 16,384 GPUs and an extreme
batch (placement). Building the
instance comes before the call and has no time limit; it is shown (``build``) and added in ``total``.
Each row runs in a fresh child process (one at a time, so that one solver's memory does not slow the
next; with ``--busy N``, N more processes spin on the CPU while it runs: the limit must hold on a loaded
machine too) and prints, in seconds:

* balance — ``build``: :func:`~packplace.balance.instance.make_instance` from numpy columns with
  ``reference_bins="auto"`` (the CLI's default reference), or none with ``--reference none`` (then no
  backend can fall back to a reference: the answer is its own), ``solve``: ``packplace.balance(...)``
  (the backend, the evaluator's scoring and the result), ``json``: ``result.to_json()``; ``total``
  = the three; ``backend``: the backend's own ``wall_s``;
* placement — ``build``: the config loaded into an instance, ``solve``: ``packplace.place(...)``,
  ``json`` and ``total`` as above.

``cpu``: the child's CPU seconds over ``solve`` and ``json`` (every thread); ``objective``: the
evaluator's value of the answer (the same for the same input and seed unless the limit cut a search). ``ok`` when both
``solve + json`` and ``cpu`` are at most ``1.1·limit + 0.5`` and the answer is feasible, ``OVER``
otherwise (also for an answer without a solution); the exit code is 1 when any row is over.

The balance batch: n samples with lognormal token lengths (median 1024, σ 1, clipped to
``seq_len`` 32,768), costs ``t + t²/4096`` (linear layers plus causal attention, token units),
m = the fewest bins per rank that hold the tokens at 85% fill. The placement cluster: the shipped
70B PPO config (``configs/placement/ppo_llama3.1-70b_2x4x8xh200.yaml``) on ``--racks`` ×
``--nodes`` × 8 GPUs (default 32 × 64 × 8 = 16,384); with ``--batch B`` (default 963,761,198,400, a
highly composite count with 6,720 divisors, 5,760 of them even, each a micro-batch choice; 0: off) every
placement solver runs once more on the shipped 8-GPU DPO config with ``B`` sequences (``batch_size: B/2``
chosen / rejected pairs).

With ``--problem command`` the rows are whole ``packplace place`` commands instead (``--config``, default the
shipped GRPO config, ``--json --quiet``), each run ``--repeats`` times as a child process and timed from before its
start to its exit, as ``time`` measures it: the command-line limit covers the whole command (the interpreter's
start-up, imports, loading, the solve, the report and the exit), and the rule is ``1.1·limit``. ``--entry main``
runs the same command through ``packplace.cli.main(argv)`` inside ``python -c``, whose limit counts from that
call (the clock before the command line counted from the process's start): the baseline.

On a shared machine the wall times are noisy (other processes take cores): rerun an ``OVER`` row
alone before trusting it.

Usage:
    python benchmarks/time_limits.py                              # every solver, 1M and 4M, limit 5 s
    python benchmarks/time_limits.py --problem balance --solvers kk lpt --samples 1000000
    python benchmarks/time_limits.py --problem placement --racks 32 --nodes 64
    python benchmarks/time_limits.py --problem balance --reference none --busy 1   # no fallback, loaded
    python benchmarks/time_limits.py --problem command --solvers anneal --time-limit 2   # the whole command
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BALANCE_SOLVERS = ["lpt", "repair", "kk", "lns", "cpsat"]
PLACEMENT_SOLVERS = ["greedy", "concurrent", "anneal", "cpsat"]
SEQ_LEN = 32768
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "placement" / "ppo_llama3.1-70b_2x4x8xh200.yaml"
BATCH_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"
EXTREME_BATCH = 963_761_198_400


def allowed_s(limit: float) -> float:
    """The wall time the rule allows for a time limit, seconds."""
    return 1.1 * limit + 0.5


def balance_row(solver: str, samples: int, ranks: int, limit: float, seed: int, reference: str = "auto") -> dict:
    """One balance solver on the synthetic batch; phase wall times in seconds."""
    import packplace
    from packplace.balance.instance import make_instance

    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.lognormal(math.log(1024), 1.0, size=samples)), 1, SEQ_LEN).astype(np.int64)
    costs = tokens + tokens.astype(np.float64) ** 2 / 4096.0
    per_rank = math.ceil(int(tokens.sum()) / (0.85 * ranks * SEQ_LEN))
    started = time.perf_counter()
    instance = make_instance(tokens, costs, seq_len=SEQ_LEN, data_parallel_size=ranks, local_batch_size=per_rank,
                             reference_bins="auto" if reference == "auto" else None)
    built = time.perf_counter()
    cpu = time.process_time()
    result = packplace.balance(instance, solver=solver, time_limit_s=limit)
    solved = time.perf_counter()
    result.to_json()
    done = time.perf_counter()
    return {"size": f"n={samples} D={ranks} m={per_rank}", "build": built - started, "solve": solved - built,
            "json": done - solved, "total": done - started, "cpu": time.process_time() - cpu,
            "backend": result.wall_s, "status": result.status, "hit": result.hit_time_limit,
            "objective": result.objective}


def placement_row(solver: str, racks: int, nodes: int, limit: float, seed: int, batch: int = 0) -> dict:
    """One placement solver on the 70B PPO config scaled to racks × nodes × 8 GPUs, or (``batch`` > 0) on
    the 8-GPU DPO config with ``batch`` sequences (``batch / 2`` preference pairs)."""
    import packplace
    from packplace.placement.problem.config import build_instance, load_yaml

    if batch:
        config = load_yaml(BATCH_CONFIG)
        config["workload"].update(batch_size=batch // 2, samples_per_prompt=2)
        size = f"8 GPUs, batch {batch}"
    else:
        config = load_yaml(CONFIG)
        config["hardware"].update(racks=racks, nodes_per_rack=nodes)
        size = f"{racks}x{nodes}x8={racks * nodes * 8} GPUs"
    started = time.perf_counter()
    instance = build_instance(config)
    built = time.perf_counter()
    cpu = time.process_time()
    result = packplace.place(instance, solver, time_limit_s=limit, seed=seed)
    solved = time.perf_counter()
    result.to_json()
    done = time.perf_counter()
    return {"size": size, "build": built - started, "solve": solved - built, "json": done - solved,
            "total": done - started, "cpu": time.process_time() - cpu, "backend": result.wall_s,
            "status": result.status, "hit": result.hit_time_limit, "objective": result.objective}


def _child(queue, problem: str, solver: str, size: int, args: argparse.Namespace) -> None:
    try:
        if problem == "balance":
            row = balance_row(solver, size, args.ranks, args.time_limit, args.seed, args.reference)
        else:
            row = placement_row(solver, args.racks, args.nodes, args.time_limit, args.seed, batch=size)
    except Exception as exc:  # noqa: BLE001 - a benchmark row reports any failure as its status
        row = {"size": "", "status": f"error: {type(exc).__name__}: {exc}"[:200]}
    queue.put(row)


GRPO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "placement" / "grpo_qwen2.5-7b_2x8xh100.yaml"


def command_row(solver: str, config: Path, limit: float, seed: int, entry: str) -> dict:
    """One ``packplace place`` command as a child process: its wall time from before the start to the exit
    (seconds), exit code and status. ``entry``: ``console`` (the installed script beside this interpreter, else
    ``python -m packplace.cli``) or ``main`` (``packplace.cli.main(argv)`` called inside ``python -c``)."""
    words = ["place", "--config", str(config), "--solver", solver, "--time-limit", f"{limit:g}", "--seed",
             str(seed), "--json", "--quiet"]
    script = Path(sys.executable).with_name("packplace")
    if entry == "main":
        command = [sys.executable, "-c", "import sys; from packplace.cli import main; sys.exit(main(sys.argv[1:]))"]
    else:
        command = [str(script)] if script.exists() else [sys.executable, "-m", "packplace.cli"]
    started = time.perf_counter()
    done = subprocess.run(command + words, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    try:
        status = json.loads(done.stdout).get("status", "error")
    except ValueError:
        status = f"error: {done.stderr.strip()[-120:]}"
    return {"wall": wall, "exit": done.returncode, "status": status}


def command_rows(args: argparse.Namespace) -> int:
    """``--problem command``: each solver's whole command ``args.repeats`` times; exit 1 when a run is over
    ``1.1·limit`` or without a plan."""
    allowed = 1.1 * args.time_limit
    config = Path(args.config) if args.config else GRPO_CONFIG
    print(f"time limit {args.time_limit:g} s, allowed {allowed:.2f} s (whole command), entry {args.entry}, "
          f"{config.name}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    over = False
    for solver in args.solvers or ["anneal"]:
        rows = [command_row(solver, config, args.time_limit, args.seed, args.entry) for _ in range(args.repeats)]
        walls = sorted(row["wall"] for row in rows)
        bad = [row for row in rows if row["wall"] > allowed or row["status"] not in ("optimal", "feasible")]
        over |= bool(bad)
        print(f"{solver:<10} wall min {walls[0]:.2f} median {walls[len(walls) // 2]:.2f} max {walls[-1]:.2f} s  "
              f"{'ok' if not bad else f'OVER x{len(bad)}'}  status {', '.join(sorted({r['status'] for r in rows}))}",
              flush=True)
    return 1 if over else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=["balance", "placement", "both", "command"], default="both")
    parser.add_argument("--config", default=None, help="--problem command: the placement config (default GRPO)")
    parser.add_argument("--repeats", type=int, default=5, help="--problem command: runs per solver")
    parser.add_argument("--entry", choices=["console", "main"], default="console",
                        help="--problem command: the console script, or packplace.cli.main(argv) (the baseline)")
    parser.add_argument("--solvers", nargs="+", default=None, help="default: every solver of the problem")
    parser.add_argument("--samples", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--racks", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--batch", type=int, default=EXTREME_BATCH,
                        help="extra placement rows on the 8-GPU DPO config at this batch (0: none)")
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", choices=["auto", "none"], default="auto",
                        help="balance: the instances' reference grouping (none: no fallback answer)")
    parser.add_argument("--busy", type=int, default=0,
                        help="CPU-bound processes spinning while each row runs (another load on the cores)")
    parser.add_argument("--json", action="store_true", help="one JSON row per line instead of the table")
    args = parser.parse_args()
    if args.problem == "command":
        return command_rows(args)
    problems = ["balance", "placement"] if args.problem == "both" else [args.problem]
    allowed = allowed_s(args.time_limit)
    over = False
    if not args.json:
        print(f"time limit {args.time_limit:g} s, allowed {allowed:.2f} s, reference {args.reference}, "
              f"{args.busy} busy process(es), load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'problem':<9} {'solver':<10} {'size':<28} {'build':>6} {'solve':>6} {'json':>5} {'total':>6} "
              f"{'cpu':>6} {'backend':>7}  verdict  {'objective':>13}  status")
    context = multiprocessing.get_context("spawn")
    for problem in problems:
        default = BALANCE_SOLVERS if problem == "balance" else PLACEMENT_SOLVERS
        sizes = args.samples if problem == "balance" else [0] + ([args.batch] if args.batch else [])
        for size in sizes:
            for solver in args.solvers or default:
                row = _run_row(context, problem, solver, size, args)
                row.update(problem=problem, solver=solver, limit=args.time_limit, allowed=allowed)
                row["ok"] = ("total" in row and max(row["solve"] + row["json"], row["cpu"]) <= allowed
                             and row["status"] in ("optimal", "feasible"))
                over |= not row["ok"]
                _print_row(row, args.json)
    return 1 if over else 0


def _spin(stop) -> None:
    """Burn CPU until ``stop`` is set (``--busy``)."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _run_row(context, problem: str, solver: str, size: int, args: argparse.Namespace) -> dict:
    """One row in a fresh child process, with ``args.busy`` spinning processes beside it."""
    queue = context.Queue()
    stop = context.Event()
    spinners = [context.Process(target=_spin, args=(stop,)) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    process = context.Process(target=_child, args=(queue, problem, solver, size, args))
    process.start()
    row = queue.get()
    process.join()
    stop.set()
    for spinner in spinners:
        spinner.join()
    return row


def _print_row(row: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(row), flush=True)
    elif "total" not in row:
        print(f"{row['problem']:<9} {row['solver']:<10} {row['status']}", flush=True)
    else:
        print(f"{row['problem']:<9} {row['solver']:<10} {row['size']:<28} {row['build']:>6.2f} {row['solve']:>6.2f} "
              f"{row['json']:>5.2f} {row['total']:>6.2f} {row['cpu']:>6.2f} {row['backend']:>7.2f}  "
              f"{'ok' if row['ok'] else 'OVER':<7}  {row['objective']:>13.8g}  "
              f"{row['status']}{' (limit)' if row['hit'] else ''}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
