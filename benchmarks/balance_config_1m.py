"""``packplace balance`` on a config of a million token counts: load, validate, solve, write, within the limit.

A plain script (no pytest). It writes a balance YAML of ``--samples`` lengths drawn as in
``benchmarks/time_limits.py`` (lognormal, median 1024, sigma 1, clipped to ``seq_len`` 32,768; D = 4,096
ranks, m the fewest bins per rank at 85% fill, ``reference: auto``) as one flow list
(``samples: {lengths: [...]}``), then:

* times the stages in-process (CPU seconds, best of ``--repeats``): parsing the YAML, the whole
  ``load_config`` (parse, validate the lengths as a column, build the instance with its ``auto``
  reference), and writing the ``--out`` document of a full answer (the reference grouping);
* runs the command ``packplace balance --config <file> --time-limit <limit> --out <json> --quiet``
  ``--repeats`` times as a child process and prints its wall and CPU seconds (user + system) against the
  allowance ``1.1 * limit + 0.5``.

The exit code is 1 when a command's CPU time is over the allowance.

Usage:
    python benchmarks/balance_config_1m.py
    python benchmarks/balance_config_1m.py --samples 1000000 --limit 5 --repeats 3
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SEQ_LEN = 32768


def write_config(path: Path, samples: int, ranks: int, seed: int) -> None:
    """The balance YAML of ``samples`` lognormal lengths (module docstring)."""
    rng = np.random.default_rng(seed)
    tokens = np.clip(np.rint(rng.lognormal(math.log(1024), 1.0, size=samples)), 1, SEQ_LEN).astype(np.int64)
    per_rank = math.ceil(int(tokens.sum()) / (0.85 * ranks * SEQ_LEN))
    with path.open("w", encoding="utf-8") as handle:
        handle.write(f"name: lengths-{samples}\nseq_len: {SEQ_LEN}\ndata_parallel_size: {ranks}\n"
                     f"local_batch_size: {per_rank}\nreference: auto\nsamples:\n  lengths: [")
        handle.write(", ".join(map(str, tokens.tolist())))
        handle.write("]\n")


def best_cpu(action, repeats: int) -> float:
    """Least CPU seconds (this process) of ``repeats`` calls of ``action``."""
    best = math.inf
    for _ in range(repeats):
        start = time.process_time()
        action()
        best = min(best, time.process_time() - start)
    return best


def stages(config: Path, folder: Path, repeats: int) -> dict[str, float]:
    """CPU seconds of parsing, loading and writing (module docstring)."""
    from packplace.balance.api import solve_balance
    from packplace.balance.cli import result_json
    from packplace.balance.config import load_config
    from packplace.jsontext import json_text
    from packplace.outputs import write_atomic
    from packplace.yamlio import load_yaml

    instance = load_config(config)
    result = solve_balance(instance, "reference", time_limit_s=60)

    def write() -> None:
        write_atomic(str(folder / "stage.json"), json_text(result_json(result, instance, "x")) + "\n", "--out")

    return {"parse": best_cpu(lambda: load_yaml(config), repeats),
            "load": best_cpu(lambda: load_config(config), repeats), "write": best_cpu(write, repeats)}


def command(config: Path, folder: Path, limit: float) -> tuple[float, float, int]:
    """(wall s, CPU s of the child, exit code) of one ``packplace balance`` run."""
    script = shutil.which("packplace", path=str(Path(sys.executable).parent)) or "packplace"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([script, "balance", "--config", str(config), "--time-limit", str(limit), "--out",
                           str(folder / "out.json"), "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        print(done.stderr.strip()[-500:], file=sys.stderr)
    return wall, cpu, done.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=4096)
    parser.add_argument("--limit", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    allowed = 1.1 * args.limit + 0.5
    print(f"load average {os.getloadavg()[0]:.2f}; {args.samples:,} samples, D={args.ranks}, "
          f"limit {args.limit:g} s, allowed {allowed:.2f} s of CPU")
    over = 0
    with tempfile.TemporaryDirectory(prefix="balance_1m_") as name:
        folder = Path(name)
        config = folder / "lengths.yaml"
        write_config(config, args.samples, args.ranks, args.seed)
        print(f"config: {config.stat().st_size / 2**20:.1f} MiB")
        for stage, seconds in stages(config, folder, args.repeats).items():
            print(f"  {stage:<6} {seconds:6.2f} s CPU (best of {args.repeats})")
        for run in range(args.repeats):
            wall, cpu, code = command(config, folder, args.limit)
            verdict = "ok" if cpu <= allowed else "OVER"
            over += verdict != "ok"
            print(f"  command run {run + 1}: wall {wall:6.2f} s  CPU {cpu:6.2f} s  exit {code}  {verdict}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
