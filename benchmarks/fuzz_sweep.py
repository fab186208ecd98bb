"""The text-level fuzz sweep at scale: every family of tests/test_fuzz_text.py (shipped configs, Hugging Face
``config.json``, validation, measured files, suites, baselines), in worker processes.

Each worker runs a chunk of inputs in-process through :func:`packplace.cli.main` with its current folder,
``TMPDIR`` and ``HOME`` inside the sweep's temporary folder. Counted: tracebacks (an exception leaving
``main``), hangs (an input past the test module's bound), exit codes outside 0/1/2, exit 2 without exactly one
error line, inputs overwritten, ``/dev/null`` replaced; the peak resident memory of every worker (the
largest any input reached: ``ru_maxrss`` only grows); files created, changed or removed outside the sweep's
folder in the repository tree (compared before and after, ``.git``/``.venv``/caches left out).

Usage:
    python benchmarks/fuzz_sweep.py --inputs 10000 --chunk 250 --seed 1
    python benchmarks/fuzz_sweep.py --inputs 200 --families hf_config measured   # one part
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis",
        "packplace.egg-info"}
WORKER = r"""
import json, resource, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_fuzz_text as fuzz
start, stop, seed, folder, families = {start}, {stop}, {seed}, Path({folder!r}), {families!r}
rows = []
for index in range(start, stop):
    case = fuzz.make_case(index, seed=seed)
    if families and case["family"] not in families:
        continue
    where = folder / str(index)
    where.mkdir()
    outcome = fuzz.run_case(case, where)
    rows.append({{"index": index, "family": case["family"], "source": case["source"], "special": case["special"],
                 "code": outcome["code"], "problems": fuzz.problems(outcome)}})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"rows": rows, "peak_rss_bytes": peak}}))
"""


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Path -> (size, mtime_ns) of every file under ``root`` outside :data:`SKIP`."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for name in files:
            path = os.path.join(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            found[path] = (info.st_size, info.st_mtime_ns)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10000)
    parser.add_argument("--chunk", type=int, default=250)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--families", nargs="*", default=[])
    parser.add_argument("--worker-timeout", type=float, default=3600)
    args = parser.parse_args()
    before = snapshot(ROOT)
    counts: collections.Counter = collections.Counter()
    failures, peaks = [], []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="fuzz_sweep_") as folder:
        env = {**os.environ, "TMPDIR": folder, "HOME": folder}
        for start in range(0, args.inputs, args.chunk):
            stop = min(args.inputs, start + args.chunk)
            chunk = Path(folder) / f"chunk{start}"
            chunk.mkdir()
            code = WORKER.format(tests=str(ROOT / "tests"), start=start, stop=stop, seed=args.seed,
                                 folder=str(chunk), families=args.families)
            try:
                done = subprocess.run([sys.executable, "-c", code], cwd=chunk, env=env, capture_output=True,
                                      text=True, timeout=args.worker_timeout)
                report = json.loads(done.stdout.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
                counts["worker failed"] += 1
                failures.append((start, "worker", str(exc)[:200]))
                continue
            peaks.append(report["peak_rss_bytes"])
            for row in report["rows"]:
                counts["inputs"] += 1
                counts[f"family {row['family']}"] += 1
                counts[f"exit {row['code']}"] += 1
                for problem in row["problems"]:
                    counts[problem.split(" ")[0]] += 1
                if row["problems"]:
                    failures.append((row["index"], row["family"], row["source"], row["special"], row["problems"]))
            print(f"{stop:>6} inputs, {time.time() - started:7.0f} s, worker peak {peaks[-1] / 2**20:6.0f} MiB, "
                  f"failures so far {len(failures)}", flush=True)
    after = snapshot(ROOT)
    touched = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    print(f"\nfuzz sweep: {counts['inputs']} inputs in {time.time() - started:.0f} s; "
          + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k != "inputs"))
    print(f"peak resident memory of a worker: {max(peaks, default=0) / 2**20:.0f} MiB (median "
          f"{sorted(peaks)[len(peaks) // 2] / 2**20 if peaks else 0:.0f} MiB over {len(peaks)} workers)")
    print(f"files touched in the repository outside the sweep's folder: {len(touched)} {touched[:10]}")
    for failure in failures[:40]:
        print("FAIL", failure)
    return 1 if failures or touched or max(peaks, default=0) > 2 * 2**30 else 0


if __name__ == "__main__":
    sys.exit(main())
