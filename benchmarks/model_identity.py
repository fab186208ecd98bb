"""Whether a change to the cost model's code leaves every number where it was: ``packplace validate`` on the
project's own validation set and the full candidate table of chosen rows, run under another checkout's
sources and under this one, compared byte for byte, with the table build times.

Run: ``python benchmarks/model_identity.py /path/to/other/checkout [--rows FILE ...]``. The other checkout's
``src`` goes first on ``PYTHONPATH``; ``packplace.solvers`` still comes from this checkout (the editable
install maps it), so the comparison covers changes under ``src/`` only. Exits 1 when anything differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERL_ROW = os.path.join("benchmarks", "validation", "verl_dapo_qwen2.5-math-7b_4x8xh20_colocate.yaml")

TABLE = """
import sys, time
from packplace.yamlio import load_yaml
from packplace.placement.problem.config import build_instance
from packplace.placement.evaluator import get_table
data = load_yaml(sys.argv[1]); data.pop("validation", None)
instance = build_instance(data, source=sys.argv[1])
start = time.perf_counter()
table = get_table(instance)
print(f"{time.perf_counter() - start:.2f}", file=sys.stderr)
print("\\n".join(repr(c) for name in sorted(table.all) for c in table.all[name]))
"""


def run(src: str | None, args: list[str]) -> tuple[str, str]:
    """stdout and stderr of ``python args`` with ``src`` (if any) first on ``PYTHONPATH``."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True)
    return done.stdout, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", help="the checkout to compare with (its src/ is imported)")
    parser.add_argument("--rows", nargs="*", default=[VERL_ROW], help="configs whose full table is compared")
    args = parser.parse_args()
    other = os.path.join(os.path.abspath(args.other), "src")
    same = True
    validate = ["-m", "packplace.cli", "validate", os.path.join("benchmarks", "validation"), "--json", "--quiet"]
    before, after = run(other, validate)[0], run(None, validate)[0]
    same &= before == after
    print(f"validate --json: {'identical' if before == after else 'DIFFERENT'} ({len(after)} characters)")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(TABLE)
    try:
        for row in args.rows:
            (before, t_before), (after, t_after) = run(other, [f.name, row]), run(None, [f.name, row])
            same &= before == after and bool(after)
            print(f"{os.path.basename(row)}: table {'identical' if before == after else 'DIFFERENT'} "
                  f"({len(after.splitlines())} candidates), build s {t_before.strip()} -> {t_after.strip()}")
    finally:
        os.unlink(f.name)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
