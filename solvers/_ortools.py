"""Loading OR-Tools (``ortools.sat.python.cp_model``, pandas with it) inside a time limit, shared by the CP-SAT
backends (placement and balance ``cpsat``, and ``lns`` through the balance model).

The backends bind ``cp_model`` lazily (:func:`packplace.lazy.lazy_module`): the first model build of a process runs
the import, which cannot be cut once started. :func:`load_ortools` starts it only with :data:`ORTOOLS_IMPORT_S` of
the budget left, so a short limit returns its hint or start instead of running the import past the deadline.
Performance: docs/performance.md ("The OR-Tools import").
"""

from __future__ import annotations

import types

from packplace.lazy import loaded
from packplace.run import OutOfTime, clock

#: Seconds a model build keeps for loading OR-Tools where no model was built before in the process: the median CPU
#: seconds of the cold import (``ortools.sat.python.cp_model`` with the protobuf, numpy and pandas it loads, in a bare
#: interpreter: 0.370 s, 15 fresh processes of ``python benchmarks/ortools_import.py``, docs/performance.md "The
#: OR-Tools import"), the stand-in for its wall seconds on an idle machine, where the two agree (files in the page
#: cache); no idle run was available. The cold context bounds the placement and balance ones (numpy loaded already:
#: 0.27 s). The import cannot be cut once started, so a build starts it only with that much of its budget left (a
#: projection); else the model is not built instead of the import running past the deadline. Under load the import
#: takes longer (0.9 s wall, load average 6-7 on 2 cores): a build that starts it with less left than it takes ends
#: when it ends, past the deadline by the difference, with no search after it (``OutOfTime("loading OR-Tools")``:
#: the caller's answer says so and sets ``hit_time_limit``).
ORTOOLS_IMPORT_S = 0.37


def load_ortools(cp_model: types.ModuleType, deadline: float) -> None:
    """Load ``cp_model`` (the backend's lazily bound OR-Tools module) where it is not loaded yet, only with
    :data:`ORTOOLS_IMPORT_S` left before ``deadline`` (a :data:`~packplace.run.clock` reading), and check the
    deadline after the import.

    Raises:
        OutOfTime: less than :data:`ORTOOLS_IMPORT_S` left (``projected``, nothing imported), or the import ended
            past ``deadline``.
    """
    if loaded(cp_model):
        return
    left = deadline - clock()
    if left < ORTOOLS_IMPORT_S:
        raise OutOfTime(f"OR-Tools is not loaded in this process, and its import (ORTOOLS_IMPORT_S="
                        f"{ORTOOLS_IMPORT_S} s) does not fit in the {max(0.0, left):.2f} s left", projected=True,
                        ortools=True)
    cp_model.CpModel  # noqa: B018 - the attribute read runs the lazy import (packplace.lazy)
    if clock() > deadline:
        raise OutOfTime("loading OR-Tools")
