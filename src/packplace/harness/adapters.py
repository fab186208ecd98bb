"""One small adapter per problem: how the harness builds an instance and calls the problem's front-end.

The harness itself is problem-agnostic; it only needs, per problem:

* ``build(spec) -> (instance, size)``: the instance of an :class:`~packplace.harness.suites.InstanceSpec`
  and its size (samples for balance, GPUs for placement, sequences for context_parallel; compared with
  ``max_exact_size``);
* ``solve(instance, solver, time_limit_s=..., seed=..., **params) -> SolveResult``: the problem's
  front-end, which scores the backend's answer with the problem's evaluator;
* ``cold(instance)``: the instance as a first solver sees it (nothing cached on it by an earlier solve),
  so that every cell of a comparison pays for its own setup.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

from packplace.balance.api import solve_balance
from packplace.balance.config import load_config
from packplace.balance.evaluator import SHARED_ATTR
from packplace.balance.schema import BalanceInstance
from packplace.contract import key_shown
from packplace.errors import ConfigError
from packplace.harness import generators
from packplace.harness.suites import SIZE_LIMIT_KEYS, InstanceSpec, check_instance_memory
from packplace.placement.api import solve_placement
from packplace.placement.problem import config as placement_config
from packplace.result import UNKNOWN, SolveResult
from packplace.yamlio import load_yaml


class BalanceAdapter:
    """Balance: generators of :mod:`packplace.harness.generators`, config files, ``packplace.balance(...)``."""

    problem = "balance"
    size_unit = "samples"
    #: The suite key that caps the size for exact solvers (alias of ``max_exact_size``).
    size_limit_key = SIZE_LIMIT_KEYS["balance"]

    def build(self, spec: InstanceSpec) -> tuple[Any, int]:
        """The :class:`~packplace.balance.schema.BalanceInstance` of ``spec`` and its sample count."""
        if spec.kind == "object":
            instance = spec.instance
            if not isinstance(instance, BalanceInstance):
                raise ConfigError(f"instance {spec.name!r}: expected a BalanceInstance, got {type(instance).__name__}")
        elif spec.kind == "config":
            instance = load_config(spec.config)
        elif spec.generator == "corpus":
            params = dict(spec.params)
            instance = generators.corpus_instance(params.pop("config"), name=spec.name, **_checked(
                params, generators.corpus_instance, spec))
        elif spec.generator == "planted":
            instance = generators.planted_balance(name=spec.name, **_checked(
                spec.params, generators.planted_balance, spec)).instance
        else:
            instance = generators.generate_balance(spec.generator, name=spec.name, **_checked(
                spec.params, generators.generate_balance, spec))
        check_instance_memory(len(instance.samples), instance.data_parallel_size * instance.local_batch_size,
                              f"instance {spec.name!r}")  # a config file's size bounds the load, not the solve
        return instance, len(instance.samples)

    @staticmethod
    def cold(instance: Any) -> Any:
        """A shallow copy of ``instance`` without what an evaluator cached on it (its flattened keys, tokens
        and costs, :data:`~packplace.balance.evaluator.SHARED_ATTR`, and the makespan bounds)."""
        clone = copy.copy(instance)
        for attr in (SHARED_ATTR, "_makespan_bounds"):
            clone.__dict__.pop(attr, None)
        return clone

    def solve(self, instance: Any, solver: str, *, time_limit_s: float | None, seed: int, **params: Any) -> SolveResult:
        """``packplace.balance.api.solve_balance`` (the result is already re-scored by the evaluator). The
        ``reference`` baseline on an instance without ``reference_bins`` (bad input on its own: a
        ``ConfigError``) is a cell of status ``unknown`` that says so: a suite lists it next to the other
        solvers, on the instances that have a reference."""
        if solver == "reference" and getattr(instance, "reference_bins", None) is None:
            return SolveResult(problem="balance", solver=solver, solution=None, objective=float("inf"), bound=0.0,
                               status=UNKNOWN, message="the instance has no reference_bins",
                               params={"time_limit_s": time_limit_s, "seed": seed, **params})
        return solve_balance(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)


def _checked(params: Mapping[str, Any], function: Any, spec: InstanceSpec) -> dict[str, Any]:
    """``params`` as keyword arguments of ``function``; an unknown name or missing one is a ConfigError."""
    signature = inspect.signature(function)
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    named = {n for n, p in signature.parameters.items() if p.kind is not inspect.Parameter.VAR_POSITIONAL}
    named.discard("name")
    if not accepts_any:
        unknown = sorted(set(params) - named, key=str)
        if unknown:
            valid = ", ".join(sorted(named))
            raise ConfigError(f"instance {spec.name!r}: params.{key_shown(unknown[0])}: unknown; valid: {valid}")
    missing = [
        n for n, p in signature.parameters.items()
        if p.default is inspect.Parameter.empty and p.kind is inspect.Parameter.KEYWORD_ONLY and n not in params
    ]
    if missing:
        raise ConfigError(f"instance {spec.name!r}: params.{missing[0]}: required")
    return dict(params)


def deep_merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied recursively (mappings merge, anything else replaces)."""
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def cluster_gpus(config: Mapping[str, Any]) -> int:
    """GPUs of a placement config dict: ``racks · nodes_per_rack · gpus_per_node`` (0 if unreadable)."""
    hardware = config.get("hardware", {}) if isinstance(config, Mapping) else {}
    try:
        return int(hardware.get("racks", 1)) * int(hardware["nodes_per_rack"]) * int(hardware["gpus_per_node"])
    except (KeyError, TypeError, ValueError):
        return 0


class PlacementAdapter:
    """Placement: config files (optionally with ``overrides``), inline configs, ``solve_placement``.

    Uses ``packplace.placement.problem.config.load_config(path)``, ``build_instance(config_dict)`` and
    ``packplace.placement.api.solve_placement(instance, solver=..., time_limit_s=..., seed=...)``.
    """

    problem = "placement"
    size_unit = "GPUs"
    size_limit_key = SIZE_LIMIT_KEYS["placement"]

    def build(self, spec: InstanceSpec) -> tuple[Any, int]:
        """The placement instance of ``spec`` and its cluster's GPU count."""
        if spec.kind == "object":
            instance = spec.instance
            size = _object_gpus(instance)
        elif spec.kind == "config" and not spec.overrides:
            instance = placement_config.load_config(spec.config)
            size = _object_gpus(instance) or cluster_gpus(load_yaml(spec.config))
        else:
            raw = load_yaml(spec.config) if spec.kind == "config" else {}
            data = deep_merge(raw if isinstance(raw, Mapping) else {}, spec.overrides or {})
            instance = placement_config.build_instance(data)
            size = _object_gpus(instance) or cluster_gpus(data)
        return instance, size

    @staticmethod
    def cold(instance: Any) -> Any:
        """A copy of ``instance`` without its cache (candidate table, evaluator and its bound, layout and
        balance helpers): the next solve builds them again and counts them in its time limit."""
        return dataclasses.replace(instance, _cache={}) if hasattr(instance, "_cache") else instance

    def solve(self, instance: Any, solver: str, *, time_limit_s: float | None, seed: int, **params: Any) -> SolveResult:
        """``packplace.placement.api.solve_placement`` (re-scored by the placement evaluator)."""
        return solve_placement(instance, solver=solver, time_limit_s=time_limit_s, seed=seed, **params)


def _object_gpus(instance: Any) -> int:
    for path in (("num_gpus",), ("cluster", "num_gpus")):
        obj = instance
        for attr in path:
            obj = getattr(obj, attr, None)
        if isinstance(obj, int):
            return obj
    return 0


class ContextParallelAdapter:
    """Dynamic context parallelism: :func:`~packplace.harness.generators.generate_context_parallel`,
    ``solve_context_parallel``."""

    problem = "context_parallel"
    size_unit = "sequences"
    size_limit_key = SIZE_LIMIT_KEYS["context_parallel"]

    def build(self, spec: InstanceSpec) -> tuple[Any, int]:
        """The :class:`~packplace.context_parallel.ContextParallelInstance` of ``spec`` and its sequence count."""
        # imported here: the dynamic-CP package loads only for a context_parallel suite
        from packplace.context_parallel import ContextParallelInstance

        if spec.kind == "object":
            instance = spec.instance
            if not isinstance(instance, ContextParallelInstance):
                raise ConfigError(f"instance {spec.name!r}: expected a ContextParallelInstance, "
                                  f"got {type(instance).__name__}")
        elif spec.kind == "generator":
            instance = generators.generate_context_parallel(spec.generator, name=spec.name, **_checked(
                spec.params, generators.generate_context_parallel, spec))
        else:
            raise ConfigError(f"instance {spec.name!r}: context_parallel suites take generator entries only")
        return instance, instance.n

    @staticmethod
    def cold(instance: Any) -> Any:
        """``instance`` itself: a context-parallel solve caches nothing on it."""
        return instance

    def solve(self, instance: Any, solver: str, *, time_limit_s: float | None, seed: int, **params: Any) -> SolveResult:
        """``packplace.context_parallel.solve_context_parallel`` (re-scored by its evaluator)."""
        # imported here: the dynamic-CP package loads only for a context_parallel suite
        from packplace.context_parallel import solve_context_parallel

        return solve_context_parallel(instance, solver, time_limit_s=time_limit_s, seed=seed, **params)


ADAPTERS = {"balance": BalanceAdapter(), "placement": PlacementAdapter(),
            "context_parallel": ContextParallelAdapter()}


def get_adapter(problem: str) -> BalanceAdapter | PlacementAdapter | ContextParallelAdapter:
    """The adapter of ``problem``.

    Raises:
        ConfigError: unknown problem.
    """
    if problem not in ADAPTERS:
        raise ConfigError(f"problem: unknown {problem!r}; valid: {', '.join(ADAPTERS)}")
    return ADAPTERS[problem]
