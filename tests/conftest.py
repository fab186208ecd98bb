"""Shared test settings: the registered solver lists, read from the registry at collection time.

Every test that runs "each solver" or "each heuristic" takes its list from here, so a solver added
under ``solvers/balance/``, ``solvers/placement/`` or ``solvers/context_parallel/`` is picked up by every
such test (and by ``test_solver_contract.py``) with no other edit. Subsets are derived from the registry's
:class:`~packplace.solvers.SolverSpec` (``exact``); the one name written out is ``reference``
(:data:`BALANCE_BASELINES`), the backend that returns the instance's own grouping instead of searching.

Work counts: :func:`counting_calls` counts the Python function calls made inside a block, a measure
of work that, unlike a stopwatch, gives the same number on any machine under any load. The fixture
:func:`work_clock` makes placement deadlines a count too: a clock that moves only with evaluator calls.

Fixtures: a test that takes an argument ``balance_solver`` (``placement_solver``) is run once per
registered balance (placement) solver; ``balance_heuristic`` / ``placement_heuristic`` once per
non-exact one that builds its own answer.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings

from packplace.cli import main as cli_main
from packplace.placement.evaluator import PlacementEvaluator
from packplace.solvers import available, get

#: Every registered backend of each problem, sorted (aliases not included).
BALANCE_SOLVERS: list[str] = available("balance")
PLACEMENT_SOLVERS: list[str] = available("placement")
CONTEXT_PARALLEL_SOLVERS: list[str] = available("context_parallel")

#: Backends that can prove optimality (``SolverSpec.exact``).
BALANCE_EXACT: list[str] = [name for name in BALANCE_SOLVERS if get("balance", name).exact]
PLACEMENT_EXACT: list[str] = [name for name in PLACEMENT_SOLVERS if get("placement", name).exact]
CONTEXT_PARALLEL_EXACT: list[str] = [name for name in CONTEXT_PARALLEL_SOLVERS if get("context_parallel", name).exact]

#: Backends that return the instance's own grouping instead of searching (an answer only when the
#: instance carries ``reference_bins``): the one registered solver left out of the heuristic lists.
BALANCE_BASELINES: tuple[str, ...] = ("reference",)

#: The non-exact backends that build their own answer (every instance, with or without a reference).
BALANCE_HEURISTICS: list[str] = [
    name for name in BALANCE_SOLVERS if name not in BALANCE_EXACT and name not in BALANCE_BASELINES
]
PLACEMENT_HEURISTICS: list[str] = [name for name in PLACEMENT_SOLVERS if name not in PLACEMENT_EXACT]

#: Every backend that builds its own answer (the heuristics and the exact ones).
BALANCE_SEARCHING: list[str] = [name for name in BALANCE_SOLVERS if name not in BALANCE_BASELINES]

# No example of a property test may fail for taking long on a loaded machine: no per-example deadline
# and no "too slow" health check (the tests' own @settings still choose the number of examples).
settings.register_profile("packplace", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("packplace")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize the solver-name arguments from the registry."""
    lists = {
        "balance_solver": BALANCE_SOLVERS,
        "placement_solver": PLACEMENT_SOLVERS,
        "balance_heuristic": BALANCE_HEURISTICS,
        "placement_heuristic": PLACEMENT_HEURISTICS,
    }
    for argument, names in lists.items():
        if argument in metafunc.fixturenames:
            metafunc.parametrize(argument, names)


@dataclass
class Work:
    """Python function calls counted by :func:`counting_calls`."""

    calls: int = 0


@contextmanager
def counting_calls() -> Iterator[Work]:
    """Count the Python function calls made in the ``with`` block (this thread; C functions not counted).

    For "refused at once" checks: an input that would make the code do a huge amount of work (expand a
    YAML bomb, walk 10^9 shared leaves) must be refused after a bounded number of calls.
    """
    work = Work()

    def profile(frame, event, arg):
        if event == "call":
            work.calls += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield work
    finally:
        sys.setprofile(previous)


def run_cli(capsys, *argv):
    """``packplace ARGV...`` in-process: (exit code, stdout, stderr)."""
    code = cli_main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line(err: str) -> str:
    """The single line of ``err``, asserting there is exactly one and no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


#: The CUDA-graph term the placement solver tests' toy instances were sized around, bytes (1.3 GiB).
TOY_CUDA_GRAPH_BYTES = 1.3 * 2**30


@pytest.fixture(scope="module")
def toy_cuda_graphs():
    """``memory.VLLM_CUDA_GRAPH_BYTES`` at :data:`TOY_CUDA_GRAPH_BYTES` for a whole module (module scope: such modules
    cache their tables across tests, and property tests take no function-scoped fixture).

    The placement solver tests' toy instances (an 8-layer, 1024-wide model on GPUs of 2.4-20 GB, a bare vLLM engine at
    a small ``gpu_memory_utilization``) were sized so that the engine's pool and its CUDA graphs keep memory binding,
    with the graph term at 1.3 GiB. The V1 envelope since (2.28 GiB, the largest capture a vLLM release logged) alone
    fills most of such a GPU, which a model that small does not capture (a 1B model logs 0.21 GiB,
    docs/calibration-and-validation.md "CUDA graphs by release"); the searches are what those tests test. The graph
    figure itself is tested with the presets (``test_vllm_engine_reservation.py``, ``test_sleep_kept_memory.py``,
    ``test_engine_fits_gpu.py``)."""
    from packplace.placement.model import memory
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(memory, "VLLM_CUDA_GRAPH_BYTES", TOY_CUDA_GRAPH_BYTES)
        yield TOY_CUDA_GRAPH_BYTES


#: A time limit (seconds) no test's placement check reaches, however loaded the machine: the check's table,
#: its proofs, greedy and concurrent (deterministic constructions that a limit only cuts) and the search of
#: grown clusters end on their own long before, so what a test asserts is their answer, never the clock's.
UNHURRIED_S = 600.0


@pytest.fixture
def unhurried(monkeypatch) -> float:
    """:data:`UNHURRIED_S`, with the wall-clock budgets a placement check takes besides its ``time_limit_s``
    lifted to it: the memory-setting hints' (``fit_hints.HINTS_BUDGET_S``, ``HINT_TIME_LIMIT_S``) and each
    grown cluster's search where the check has no deadline (``api.SEARCH_TIME_LIMIT_S``). A test of a
    message that names hints or a grown cluster takes this; a test of time-limit behaviour takes
    :func:`work_clock` instead."""
    from packplace.placement import api, fit_hints
    monkeypatch.setattr(fit_hints, "HINTS_BUDGET_S", UNHURRIED_S)
    monkeypatch.setattr(fit_hints, "HINT_TIME_LIMIT_S", UNHURRIED_S)
    monkeypatch.setattr(api, "SEARCH_TIME_LIMIT_S", UNHURRIED_S)
    return UNHURRIED_S


#: Fake seconds one evaluator call costs on :func:`work_clock` (500 calls a fake second).
EVALUATION_S = 2e-3


class WorkClock:
    """The fake clock of :func:`work_clock`: ``now`` (seconds), ``evaluation_s`` (seconds per evaluator call)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.evaluation_s = EVALUATION_S

    def read(self) -> float:
        self.now += 1e-6
        return self.now


@pytest.fixture
def work_clock(monkeypatch) -> WorkClock:
    """Replace ``time.perf_counter`` (every deadline of a placement call reads it: the table's, the bound's,
    the backends' through ``packplace.run.clock``) with a clock that moves only with work: 1 µs per reading
    and :data:`EVALUATION_S` per evaluator call (``score``, ``step_time``, ``relaxed_step_time``), so that
    a deadline falls at the same point of a search on any machine under any load; ``clock.now`` says how
    much work a call did in these units."""
    clock = WorkClock()
    monkeypatch.setattr(time, "perf_counter", clock.read)
    for name in ("score", "step_time", "relaxed_step_time"):
        original = getattr(PlacementEvaluator, name)

        def costed(self, *args, _original=original, **kwargs):
            clock.now += EVALUATION_S
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(PlacementEvaluator, name, costed)
    return clock


def cp_work(deterministic_s: float) -> dict[str, float]:
    """``cp_parameters`` that end CP-SAT's search on its own work counter only: ``max_deterministic_time`` (CP-SAT's
    deterministic seconds, about seconds of one unloaded core) at ``deterministic_s``, and its wall-clock stop, which
    the backend sets from the time left, lifted to :data:`UNHURRIED_S`. With :func:`work_clock` (which moves every
    other deadline of the call with work only) a placement ``cpsat`` call then ends the same way on any machine
    under any load: a proof that takes far less than ``deterministic_s`` is a proof, however slow the machine."""
    return {"max_deterministic_time": float(deterministic_s), "max_time_in_seconds": UNHURRIED_S}


class SlowImport(importlib.abc.Loader):
    """A lazily loaded stand-in for ``ortools.sat.python.cp_model`` whose import costs ``seconds`` on the work clock."""

    def __init__(self, clock, seconds: float) -> None:
        self.clock, self.seconds, self.runs = clock, seconds, 0

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        self.clock.now += self.seconds
        self.runs += 1
        real = importlib.import_module("ortools.sat.python.cp_model")
        module.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})


def slow_ortools(monkeypatch, clock, seconds: float, users) -> SlowImport:
    """Bind the ``cp_model`` of every module of ``users`` (the backend's modules that bind OR-Tools lazily) to one not
    yet loaded module whose import takes ``seconds`` on ``clock`` (:func:`work_clock`)."""
    from packplace.lazy import loaded

    loader = SlowImport(clock, seconds)
    spec = importlib.util.spec_from_loader("slow_cp_model", importlib.util.LazyLoader(loader))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for user in users:
        monkeypatch.setattr(user, "cp_model", None)   # restored after the test; setattr(module) would read it
        user.cp_model = module
    assert not loaded(module) and loader.runs == 0
    return loader
