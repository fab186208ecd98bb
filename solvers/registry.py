"""Name → backend registry for both problems.

A backend is a function ``solve(instance, *, time_limit_s, seed, **params) -> Proposal`` decorated
with :func:`register`. The registry finds the backends itself: the first lookup of a problem imports
every module and subpackage of ``packplace.solvers.<problem>`` whose name does not start with ``_``
(:func:`pkgutil.iter_modules`), so a new backend is one file (or one subpackage) in that folder.
Modules whose names start with ``_`` (shared helpers such as ``_common``) are imported only by the
backends that use them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from packplace.errors import ConfigError

SolveFunction = TypeVar("SolveFunction", bound=Callable[..., Any])

#: The problems packplace solves, each with its own backends package under ``packplace.solvers``.
PROBLEMS = ("balance", "placement")


@dataclass(frozen=True)
class SolverSpec:
    """A registered backend.

    Attributes:
        problem: ``"balance"`` or ``"placement"``.
        name: Registry name (what ``solver=`` takes).
        solve: ``solve(instance, *, time_limit_s, seed, **params) -> Proposal``.
        exact: True for backends that can prove optimality (CP-SAT).
        summary: One line for listings.
    """

    problem: str
    name: str
    solve: Callable[..., Any]
    exact: bool = False
    summary: str = ""


_REGISTRY: dict[str, dict[str, SolverSpec]] = {problem: {} for problem in PROBLEMS}
_ALIASES: dict[str, dict[str, str]] = {problem: {} for problem in PROBLEMS}
_LOADED: set[str] = set()


def register(
    problem: str, name: str, *, exact: bool = False, aliases: tuple[str, ...] = ()
) -> Callable[[SolveFunction], SolveFunction]:
    """Decorator registering ``solve`` as backend ``name`` of ``problem``.

    Raises:
        ValueError: unknown problem, or a name already taken by another function.
    """
    if problem not in PROBLEMS:
        raise ValueError(f"problem must be one of {PROBLEMS}, got {problem!r}")

    def decorator(solve: SolveFunction) -> SolveFunction:
        existing = _REGISTRY[problem].get(name)
        if existing is not None and existing.solve is not solve:
            raise ValueError(f"{problem} solver {name!r} is already registered")
        summary = (solve.__doc__ or "").strip().splitlines()[0] if solve.__doc__ else ""
        _REGISTRY[problem][name] = SolverSpec(problem, name, solve, exact, summary)
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
