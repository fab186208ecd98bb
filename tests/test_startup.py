"""What the command line loads before it answers: ``packplace --help`` and usage errors load none of the
heavy modules (numpy, yaml, OR-Tools, pandas, scipy, matplotlib); a subcommand loads its own module, and
OR-Tools only when a CP-SAT model is built. Checked in a fresh interpreter through ``sys.modules`` (the
CPU time itself is a benchmark: benchmarks/startup_time.py)."""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys

import packplace
from packplace.balance.api import DEFAULT_SOLVER
from packplace.cli import COMMANDS, build_parser, command_of

HEAVY = ("numpy", "yaml", "ortools", "pandas", "scipy", "matplotlib")

PROBE = """
import json, sys, importlib.util
from packplace.cli import main
try:
    code = main({argv!r})
except SystemExit as stop:
    code = stop.code
loaded = sorted({{m.split('.')[0] for m in sys.modules}})
cp = sys.modules.get('ortools.sat.python.cp_model')
real_cp = cp is not None and not isinstance(cp, importlib.util._LazyModule)
sys.stdout = sys.__stdout__
print(json.dumps({{"code": code, "loaded": loaded, "cp_model_loaded": real_cp}}))
"""


def probe(argv: list[str]) -> dict:
    """Run ``packplace argv`` in a fresh interpreter; its exit code, the top-level modules it had loaded at
    the end, and whether OR-Tools' ``cp_model`` had run (not just been bound lazily)."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_help_and_top_level_usage_errors_load_no_heavy_module():
    for argv, code in ((["--help"], 0), (["--json"], 2), (["nosuchcommand", "--json"], 2), (["--version"], 0)):
        seen = probe(argv)
        assert seen["code"] == code, argv
        assert not set(HEAVY) & set(seen["loaded"]), (argv, set(HEAVY) & set(seen["loaded"]))


def test_a_subcommand_usage_error_loads_no_solver_library():
    # place lists the solvers in its --help, so the registry imports every backend; the CP-SAT ones bind
    # OR-Tools lazily, and pandas (which OR-Tools imports) never loads
    for argv in (["place", "--json"], ["balance", "--json"], ["place", "--help"]):
        seen = probe(argv)
        assert seen["code"] == (0 if "--help" in argv else 2), argv
        assert not {"pandas", "scipy", "matplotlib"} & set(seen["loaded"]), argv
        assert seen["cp_model_loaded"] is False, argv


def test_the_command_table_matches_the_command_modules():
    full = build_parser()
    action = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    assert list(action.choices) == list(COMMANDS)
    assert helps == {name: summary for name, (_, summary) in COMMANDS.items()}
    for name, (module, summary) in COMMANDS.items():  # the module named registers the command in full
        only = build_parser([name])
        sub = next(a for a in only._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        assert sub.description != summary and sub.get_default("func") is not None, (name, module)
        stub = next(a for a in only._actions if isinstance(a, argparse._SubParsersAction)).choices
        assert all(stub[other].get_default("func") is None for other in COMMANDS if COMMANDS[other][0] != module)


def test_command_of_is_the_first_word_that_is_not_an_option():
    assert command_of(["--json", "place", "--config", "x.yaml"]) == "place"
    assert command_of(["--help"]) is None
    assert command_of([]) is None


def test_the_lazy_entry_points_are_the_library_functions():
    from packplace.harness import compare
    from packplace.placement.api import solve_placement
    from packplace.result import SolveResult

    assert packplace.place is solve_placement and packplace.compare is compare
    assert packplace.SolveResult is SolveResult
    # solver=None: the problem's default (repair for a balance instance, greedy for a context-parallel one), so
    # that a balance solver named for a context-parallel instance is refused, not replaced
    from packplace.balance.api import solve_balance

    assert inspect.signature(packplace.balance).parameters["solver"].default is None
    assert inspect.signature(solve_balance).parameters["solver"].default is None
    assert DEFAULT_SOLVER == "repair"
