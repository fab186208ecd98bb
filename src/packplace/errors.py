"""The exceptions packplace raises, all subclasses of :class:`PackplaceError`.

* :class:`ConfigError` — bad input: a missing or invalid field, an unknown solver name, a bad option.
* :class:`InfeasibleError` — the input is well-formed but the instance provably has no feasible
  answer (more tokens than the bins hold, fewer samples than non-empty bins, a model that fits on no
  legal block of the cluster).
* :class:`PackplaceWarning` (a :class:`UserWarning`, not an error) — accepted input worth a look, e.g.
  :class:`KnobAboveBoundWarning`: an efficiency knob above its GPU's measured bound;
  :class:`FrameworkVersionWarning`: a framework release past the newest the model knows;
  :class:`OverriddenSettingWarning`: a setting the framework runs otherwise, priced as it runs;
  :class:`PositionLimitWarning`: sequences longer than the model's ``max_position_embeddings``.
* :class:`TimeLimitError` — a subclass of :class:`InfeasibleError` (so ``except InfeasibleError`` still
  catches it) for no answer found before the time limit (or a work budget) ran out, not proven infeasible.

:func:`show` bounds the values those one-line messages quote.

``ConfigError`` and ``InfeasibleError`` are siblings: ``except ConfigError`` catches bad input only,
``except InfeasibleError`` no feasible answer (proven, or, as its :class:`TimeLimitError`, not found in time:
``except TimeLimitError`` first tells them apart), and ``except PackplaceError`` all. Both are also
:class:`ValueError`. The command line exits with code 2 on a :class:`ConfigError` and 1 on an
:class:`InfeasibleError` (no feasible plan).
"""

from __future__ import annotations

import reprlib
from typing import Any


class PackplaceError(Exception):
    """Base class of every error packplace raises on purpose; the message is one line."""


class ConfigError(PackplaceError, ValueError):
    """An instance or configuration field is missing or invalid.

    The message is one line that names the field (``[section] field`` for YAML configs) and the
    offending value, so that the command line can print it as is and exit with code 2.
    """


class InfeasibleError(PackplaceError, ValueError):
    """The instance is well-formed but has no feasible answer, and this is proven, not guessed.

    Raised before any solver runs, by the analytic checks of the instance builders (capacity, bin
    count, memory of the least-memory candidate on the largest legal block). The command line exits
    with code 1 (no feasible plan), as when a solver finds none; the message tells the two apart. A
    solver that merely fails to find an answer returns a result with status ``unknown`` instead.
    """


class TimeLimitError(InfeasibleError):
    """No answer was found before the time limit (or a search's work budget, e.g. CP-SAT's deterministic time)
    ran out, and none of the fallbacks run to completion found one either; the instance is *not* proven
    infeasible (a longer limit or budget may find one). A subclass of :class:`InfeasibleError` so that callers
    that catch that still catch this; the message says "not proven".
    """


class PackplaceWarning(UserWarning):
    """Base class of the warnings packplace issues: the input is accepted, but something in it deserves a look
    (the command line prints each once on stderr as ``packplace COMMAND: warning: MESSAGE``, never on stdout)."""


class KnobAboveBoundWarning(PackplaceWarning):
    """An efficiency knob given in a config is above its physical bound for the GPU type (the largest fraction
    of the datasheet peak any microbenchmark of that GPU measured,
    :mod:`packplace.placement.checking.knob_bounds`): the model then prices the GPU faster than it was ever
    measured to run. Accepted (the user may have better hardware data); the message names the field, the value,
    the bound and its source."""


class FrameworkVersionWarning(PackplaceWarning):
    """A config's ``policy.framework_version`` is past the newest release the framework tables know
    (:data:`packplace.placement.model.framework.NEWEST_KNOWN_RELEASE`): accepted and priced with that release's
    defaults, which may not hold for it; the message names the field, the value and the newest release."""


class OverriddenSettingWarning(PackplaceWarning):
    """A setting given explicitly that the framework does not run as given (an explicit
    ``sequence_parallel: false`` under Megatron-Core's tensor plus expert parallelism): priced as the framework
    runs it; the message names the field, the value and why."""


class PositionLimitWarning(PackplaceWarning):
    """The sequences priced are longer than the model's position limit (``config.json``
    ``max_position_embeddings``, GPT-2 ``n_positions``), where the model gives one: priced as given (RoPE scaling
    or a longer-context fine-tune may extend the limit, which the shape does not carry); the message names the
    field, the model, both lengths and where the longer one comes from."""


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 6


def show(value: Any) -> str:
    """``repr(value)`` bounded in length and depth (:mod:`reprlib`): at most 6 items per container, 3
    levels, 60 characters per string, so that a huge or deeply shared value never floods a message."""
    text = _REPR.repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def show_setting(value: Any) -> str:
    """``value`` as a config's YAML and the command line spell it in a message: ``true`` / ``false`` for a boolean
    (not Python's ``True`` / ``False``), else :func:`show`'s bounded ``repr``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return show(value)


def show_kind(value: Any) -> str:
    """What ``value`` is, quoting it only when it is ``None``, a boolean or a number: for a whole document
    read from a file that turned out not to be the expected kind (a system file named by mistake), so that a
    message never repeats the file's text."""
    if value is None or isinstance(value, (bool, int, float)):
        return show(value)
    if isinstance(value, (dict, list, str)) and not value:
        return f"an empty {type(value).__name__}"
    return type(value).__name__


#: CP-SAT's range for ``num_workers`` (its parameter check: "parameter 'num_workers' should be in [0,10000]"): a
#: model solved with more ends MODEL_INVALID.
MAX_CP_WORKERS = 10_000


def cp_parameter_error(parameters: Any, key: str, value: Any, exc: Exception) -> ConfigError:
    """The one-line :class:`ConfigError` for a ``cp_parameters`` entry CP-SAT's ``SatParameters`` refused with
    ``exc`` (its own text spans several lines for a value of the wrong type): an unknown name, or the type the
    parameter holds (read from ``parameters``) and the value given."""
    if isinstance(exc, AttributeError):
        return ConfigError(f"cpsat: cp_parameters.{key}: not a CP-SAT parameter (SatParameters has no field "
                           f"{key!r}), got {show(value)}")
    expected = type(getattr(parameters, key, None)).__name__
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    reason = f"must be of type {expected}" if isinstance(exc, TypeError) else first
    return ConfigError(f"cpsat: cp_parameters.{key}: {reason}, got {show(value)}")


def set_cp_parameters(parameters: Any, cp_parameters: Any) -> None:
    """Set each ``cp_parameters`` entry (a mapping of ``SatParameters`` field names to values) on
    ``parameters`` (a CP-SAT ``SatParameters``), as every cpsat backend does.

    Raises:
        ConfigError: an entry CP-SAT refuses (:func:`cp_parameter_error`), or ``num_workers`` outside CP-SAT's
            range [0, :data:`MAX_CP_WORKERS`] (0: CP-SAT picks the count), which CP-SAT itself would only
            report by ending the solve MODEL_INVALID.
    """
    for key, value in (cp_parameters or {}).items():
        try:
            setattr(parameters, key, value)
        except (AttributeError, TypeError, ValueError) as exc:
            raise cp_parameter_error(parameters, key, value, exc) from None
        if key == "num_workers" and not 0 <= parameters.num_workers <= MAX_CP_WORKERS:
            raise ConfigError(f"cpsat: cp_parameters.num_workers: must be an integer in [0, {MAX_CP_WORKERS}] "
                              f"(CP-SAT's range), got {show(value)}")


def check_cp_parameters(cp_model: Any, cp_parameters: Any) -> None:
    """Every cpsat backend's check of ``cp_parameters`` before any work: each entry set on a scratch solver
    (:func:`set_cp_parameters`), then an empty model solved with them (``cp_model``: OR-Tools'
    ``ortools.sat.python.cp_model``, its log off), so that a value CP-SAT refuses only when it validates the
    parameters at solve time (``max_time_in_seconds: -5``) fails here and not after the backend's work.

    Raises:
        ConfigError: as :func:`set_cp_parameters`, or "cpsat: cp_parameters: CP-SAT refuses them: <CP-SAT's
            reason> (got {...})" where the empty model ends MODEL_INVALID.
    """
    solver = cp_model.CpSolver()
    set_cp_parameters(solver.parameters, cp_parameters)
    solver.parameters.log_search_progress = False
    status = solver.Solve(cp_model.CpModel())
    if solver.StatusName(status) == "MODEL_INVALID":
        raise ConfigError(f"cpsat: cp_parameters: CP-SAT refuses them: {solver.SolutionInfo() or 'MODEL_INVALID'} "
                          f"(got {show(dict(cp_parameters))})")


def cp_status_text(solver: Any, cp_status: Any) -> str:
    """CP-SAT's status name for ``cp_status`` (``solver.StatusName``), and for MODEL_INVALID the reason CP-SAT
    gives (``solver.SolutionInfo()``, its model/parameter validation text, e.g. "MODEL_INVALID (Parameters
    max_time_in_seconds must be non-negative)"), so that no message hides why CP-SAT never searched."""
    name = solver.StatusName(cp_status)
    reason = solver.SolutionInfo() if name == "MODEL_INVALID" else ""
    return f"{name} ({reason})" if reason else name


def cp_start_message(source: str, cp_status_name: str, ended: str, what: str) -> str:
    """The message of a cpsat backend whose answer came from ``source`` (``"cpsat"``: CP-SAT's own, no message;
    else the start it was given): CP-SAT searched (``cp_status_name`` OPTIMAL or FEASIBLE) and did not beat the
    start, or ended ``ended`` (:func:`cp_status_text`) without a ``what`` ("plan", "solution") of its own."""
    if source == "cpsat":
        return ""
    if cp_status_name in ("OPTIMAL", "FEASIBLE"):
        return f"CP-SAT did not beat the {source} start; returning it"
    return f"CP-SAT ended {ended} without a {what}; returning the {source} start"
