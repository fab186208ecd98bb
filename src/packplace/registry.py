"""Name → backend registry for both problems.

A backend is a function ``solve(instance, run, **options) -> Proposal`` decorated with
:func:`register`; ``run`` is the :class:`packplace.run.Run` of the call (time budget, seed, evaluator,
incumbent). A function written to the earlier keyword convention ``solve(instance, *, time_limit_s,
seed, **options)`` is still accepted (it gets the run's limit and seed).

The registry finds the backends itself: the first lookup of a problem imports every module and
subpackage of ``packplace.solvers.<problem>`` whose name does not start with ``_``
(:func:`pkgutil.iter_modules`), so a new backend is one file (or one subpackage) in that folder.
Modules whose names start with ``_`` (shared helpers such as ``_common``) are imported only by the
backends that use them.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from packplace.errors import ConfigError

SolveFunction = TypeVar("SolveFunction", bound=Callable[..., Any])

#: The problems packplace solves, each with its own backends package under ``packplace.solvers``.
PROBLEMS = ("balance", "placement", "context_parallel")


@dataclass(frozen=True)
class SolverSpec:
    """A registered backend.

    Attributes:
        problem: ``"balance"``, ``"placement"`` or ``"context_parallel"``.
        name: Registry name (what ``solver=`` takes).
        function: The registered function as written.
        exact: True for backends that can prove optimality (CP-SAT).
        summary: One line for listings.
        legacy: ``function`` takes the earlier keywords ``time_limit_s`` and ``seed`` instead of a run.
    """

    problem: str
    name: str
    function: Callable[..., Any]
    exact: bool = False
    summary: str = ""
    legacy: bool = field(default=False)

    def backend(self, instance: Any, run: Any, **options: Any) -> Any:
        """``backend(instance, run, **options) -> Proposal``: the backend on a :class:`packplace.run.Run`."""
        if self.legacy:
            return self.function(instance, time_limit_s=run.time_limit_s, seed=run.seed, **options)
        return self.function(instance, run, **options)

    def solve(self, instance: Any, *, time_limit_s: float | None = None, seed: int = 0, **options: Any) -> Any:
        """The backend called with a fresh run of ``time_limit_s`` seconds (None: its default) and ``seed``,
        the problem's evaluator built on first use: the front-ends' call without the scoring (tests,
        benchmarks). Returns its :class:`~packplace.result.Proposal`.

        Raises:
            ConfigError: ``time_limit_s`` or ``seed`` as the front ends refuse them
                (:func:`~packplace.run.check_limits`): a negative or NaN limit had run as an expired or an
                unlimited one, a negative seed had seeded the search.
        """
        from packplace.run import Run, check_limits  # at call time: packplace.run imports this module

        check_limits(time_limit_s, seed)
        return self.backend(instance, Run(self.problem, instance, time_limit_s=time_limit_s, seed=seed), **options)

    def accepts(self, options: dict[str, Any]) -> bool:
        """The backend takes every one of ``options`` as a keyword."""
        signature = inspect.signature(self.function)
        try:
            if self.legacy:
                signature.bind(None, time_limit_s=None, seed=0, **options)
            else:
                signature.bind(None, None, **options)
        except TypeError:
            return False
        return True

    def option_names(self) -> list[str]:
        """The backend's own keyword options (not ``time_limit_s``, ``seed``)."""
        return [name for name, p in inspect.signature(self.function).parameters.items()
                if p.kind is p.KEYWORD_ONLY and name not in ("time_limit_s", "seed")]


def _is_legacy(function: Callable[..., Any]) -> bool:
    """``function`` takes ``time_limit_s`` as a keyword (the convention before the run object)."""
    parameters = inspect.signature(function).parameters
    return "time_limit_s" in parameters and parameters["time_limit_s"].kind is inspect.Parameter.KEYWORD_ONLY


_REGISTRY: dict[str, dict[str, SolverSpec]] = {problem: {} for problem in PROBLEMS}
_ALIASES: dict[str, dict[str, str]] = {problem: {} for problem in PROBLEMS}
_LOADED: set[str] = set()


def register(
    problem: str, name: str, *, exact: bool = False, aliases: tuple[str, ...] = ()
) -> Callable[[SolveFunction], SolveFunction]:
    """Decorator registering ``solve(instance, run, **options)`` as backend ``name`` of ``problem``.

    Raises:
        ValueError: unknown problem, or a name already taken by another function.
    """
    if problem not in PROBLEMS:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {problem!r}")

    def decorator(solve: SolveFunction) -> SolveFunction:
        existing = _REGISTRY[problem].get(name)
        if existing is not None and existing.function is not solve:
            raise ValueError(f"{problem} solver {name!r} is already registered")
        summary = (solve.__doc__ or "").strip().splitlines()[0] if solve.__doc__ else ""
        _REGISTRY[problem][name] = SolverSpec(problem, name, solve, exact, summary, _is_legacy(solve))
        for alias in aliases:
            _ALIASES[problem][alias] = name
        return solve

    return decorator


def _load(problem: str) -> None:
    """Import every public module and subpackage of the problem's backends package once (sorted by
    name), so that their backends register themselves."""
    if problem not in _LOADED:
        _LOADED.add(problem)
        package = importlib.import_module(f"packplace.solvers.{problem}")
        names = sorted(info.name for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_"))
        for name in names:
            importlib.import_module(f"{package.__name__}.{name}")


@overload
def available(problem: str) -> list[str]: ...


@overload
def available(problem: None = None) -> dict[str, list[str]]: ...


def available(problem: str | None = None) -> list[str] | dict[str, list[str]]:
    """Names of the registered backends, sorted (aliases not included).

    With ``problem`` (``"balance"`` or ``"placement"``): that problem's names. Without: a dict from
    every problem in :data:`PROBLEMS` to its names.

    Raises:
        ConfigError: unknown problem.
    """
    if problem is None:
        return {name: available(name) for name in PROBLEMS}
    if problem not in PROBLEMS:
        raise ConfigError(f"problem: unknown {problem!r}; valid: {', '.join(PROBLEMS)}")
    _load(problem)
    return sorted(_REGISTRY[problem])


def aliases(problem: str) -> dict[str, str]:
    """The aliases of ``problem``'s backends: ``{alias: registry name}`` (a copy).

    Raises:
        ConfigError: unknown problem.
    """
    available(problem)
    return dict(_ALIASES[problem])


def get(problem: str, name: str) -> SolverSpec:
    """The backend registered as ``name`` (or one of its aliases) for ``problem``.

    Raises:
        ConfigError: unknown problem or solver name; the message lists the valid names.
    """
    names = available(problem)
    resolved = _ALIASES[problem].get(name, name)
    if resolved not in _REGISTRY[problem]:
        raise ConfigError(f"solver: unknown {problem} solver {name!r}; available: {', '.join(names)}")
    return _REGISTRY[problem][resolved]


def unregister(problem: str, name: str) -> None:
    """Remove a backend (for tests that register throwaway solvers)."""
    _REGISTRY[problem].pop(name, None)
    for alias, target in list(_ALIASES[problem].items()):
        if target == name:
            del _ALIASES[problem][alias]
