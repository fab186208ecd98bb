"""The registry's earlier import path: it lives in :mod:`packplace.registry` (imported once with a
``DeprecationWarning``)."""

import warnings

from packplace.registry import (  # noqa: F401 - re-exported
    _ALIASES,
    _LOADED,
    _REGISTRY,
    PROBLEMS,
    SolverSpec,
    aliases,
    available,
    get,
    register,
    unregister,
)

warnings.warn("packplace.solvers.registry moved to packplace.registry", DeprecationWarning, stacklevel=2)

__all__ = ["PROBLEMS", "SolverSpec", "aliases", "available", "get", "register", "unregister"]
