"""Modules loaded on first attribute access, for the slow optional dependencies of the solvers.

:func:`lazy_module` returns the module object at once and runs its code the first time an attribute is
read (:class:`importlib.util.LazyLoader`, Python documentation, "Implementing lazy imports"). The CP-SAT
backends bind ``cp_model`` this way: the solver registry imports every backend module to list the
solvers (``packplace place --help`` names them), and OR-Tools with pandas would otherwise load for every
command that lists or runs any solver. Nothing changes for a caller: the first ``cp_model.CpModel()``
loads OR-Tools as a plain import would, and an import error surfaces there.
:func:`loaded` tells whether such a module's code has run (a backend that must not start a slow import
past its deadline asks it first: the CP-SAT backends' model builds, ``packplace.solvers._ortools``).
Performance: docs/performance.md ("Start-up time").
"""

from __future__ import annotations

import importlib.util
import sys
import types


def lazy_module(name: str) -> types.ModuleType:
    """The module ``name`` (dotted), loaded when one of its attributes is first read.

    A module already imported is returned as it is. Its parent packages are imported now (finding the
    module needs them); only the module's own code is deferred.

    Raises:
        ModuleNotFoundError: no module of that name (found now, not on first use).
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def loaded(module: types.ModuleType) -> bool:
    """``module``'s code has run: False for a :func:`lazy_module` whose attributes nothing has read yet (its
    first read runs the import), True for any other module. Reads no attribute of ``module``."""
    # a lazy module's class intercepts attribute reads until the first one loads it and restores the plain
    # module class (importlib.util.LazyLoader)
    return type(module).__getattribute__ is types.ModuleType.__getattribute__
