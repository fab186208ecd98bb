"""How long NeMo RL's sequence packing takes to price: the packer, and a packed config's candidate table.

A plain script (no pytest). It times, medians over ``--seeds`` seeds with the worst seed:

* the packer on ``n`` lengths (``S + Q(u)`` of a drawn batch, :func:`~packplace.placement.model.dp_balance.
  draw_lengths`'s distribution: 128-token prompts, responses with median 630, p90 1,750, p99 3,400 tokens):
  the literal transcription of ``ModifiedFirstFitDecreasingPacker`` (``O(n·bins)`` last phase; the oracle of
  ``tests/placement/test_sequence_packing.py``, only up to ``--literal-max`` lengths) against
  :func:`~packplace.placement.model.sequence_packing.mffd_bins`, both with the v0.4/v0.5 first-fit leftovers;
* the candidate table of ``benchmarks/validation/nemo_rl_v0.5_grpo_llama3.1-8b_2x8xh100_1off.yaml`` with its
  ``batch_size`` set to ``--prompts`` (4,096 prompts x 32 samples = 131,072 sequences, drawn as 4 batches of
  16,384) and no validation section, built whole;
* ``packplace.place(..., solver="greedy", time_limit_s=1)`` on the same config: the call's wall time (the
  table build stops at the limit, packing included).

Usage:
    python benchmarks/sequence_packing.py
    python benchmarks/sequence_packing.py --sizes 1024 4096 16384 --seeds 3 --prompts 4096
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import yaml

import packplace
from packplace.placement.candidates import CandidateTable
from packplace.placement.model.dp_balance import draw_lengths
from packplace.placement.model.sequence_packing import mffd_bins
from packplace.placement.problem.config import build_instance

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "benchmarks" / "validation" / "nemo_rl_v0.5_grpo_llama3.1-8b_2x8xh100_1off.yaml"


def literal_packer():
    """The test suite's literal transcription of NeMo RL's packer."""
    spec = importlib.util.spec_from_file_location("packing_tests", ROOT / "tests" / "placement" /
                                                  "test_sequence_packing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._literal_mffd


def seconds(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):8.3f} s   worst {max(values):8.3f} s"


def config(prompts: int) -> dict:
    raw = yaml.safe_load(CONFIG.read_text())
    raw.pop("validation")
    raw["workload"]["batch_size"] = prompts
    return raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--capacity", type=int, default=8192)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--literal-max", type=int, default=4096)
    parser.add_argument("--prompts", type=int, default=4096)
    args = parser.parse_args()
    literal = literal_packer()
    workload = build_instance(config(args.prompts)).workload
    for n in args.sizes:
        draws = [draw_lengths(workload, seed)[:n] for seed in range(args.seeds)]
        fast = [seconds(lambda d=d: mffd_bins(d, args.capacity)) for d in draws]
        line = f"packer n={n:>6} C={args.capacity}: fast {summary(fast)}"
        if n <= args.literal_max:
            slow = [seconds(lambda d=d: literal(d.tolist(), args.capacity)) for d in draws]
            line += f" | literal {summary(slow)}"
        print(line, flush=True)
    builds, places = [], []
    for _ in range(args.seeds):
        instance = build_instance(config(args.prompts))
        builds.append(seconds(lambda inst=instance: CandidateTable(inst)))
        instance = build_instance(config(args.prompts))
        places.append(seconds(lambda inst=instance: packplace.place(inst, solver="greedy", seed=0, time_limit_s=1)))
    print(f"candidate table, {args.prompts} prompts x 32 samples: {summary(builds)}")
    print(f"place --time-limit 1, {args.prompts} prompts x 32 samples: {summary(places)}")


if __name__ == "__main__":
    main()
