"""``packplace calibrate``: fit the hardware efficiency knobs to the measured task times of one profiled
step on your cluster.

Input: a validation-style config (a placement config whose ``validation.plan`` names the placement the
step ran with) and a YAML of measured seconds per task, flat (``actor.generate: 41.2``: whole tasks,
each including ``phase_overhead``) or ``{source: ..., times: {...}, engine_only: [tasks measured on the
engine alone, without phase_overhead], knobs: [knobs to fit]}`` (:func:`read_measured`).

The knobs of :data:`~packplace.placement.checking.knob_bounds.KNOB_BOUNDS` (default :data:`DEFAULT_KNOBS`) are
fitted with :func:`scipy.optimize.least_squares` (trust-region reflective, within the bounds of
:func:`~packplace.placement.checking.knob_bounds.knob_bound`: the knob's range, and for an efficiency fraction the
GPU type's physical upper bound, each with its source) on the
residuals ``log(predicted / measured)`` of each task's time from
:meth:`~packplace.placement.model.cost.CostModel.vertex_time`. A knob the measurements do not determine (its
Jacobian column vanishes or is a combination of the others, or fewer measurements than knobs) is refused
with an error naming it. With as many measurements as knobs the fit is exact and does not test the model.

:func:`fit_published` is the same fit over many published runs at once, each knob shared by the runs of
one GPU type or one framework (:data:`KNOB_SCOPES`, never one value per run): the residuals are
``log(predicted / published)`` of every published figure; a knob value the runs do not determine stays at
its configured value and is reported. Leave-one-source-out cross-validation calls it per fold
(:mod:`packplace.placement.checking.crossval`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from packplace.contract import key_shown
from packplace.errors import ConfigError, show, show_kind
from packplace.placement.candidates import cost_model, vertex_parts
from packplace.placement.checking.knob_bounds import DEFAULT_GPU, KNOB_BOUNDS, KnobBound, knob_bound
from packplace.placement.problem.hardware import Hardware

#: Knobs that only some frameworks' runs depend on, and the framework-profile flag that says which
#: (:class:`~packplace.placement.model.framework.FrameworkProfile`): a run whose profile lacks the flag gets no
#: parameter for the knob (it keeps the configured value, 0), so the knob is fitted only where runs can determine it.
PROFILE_KNOBS: dict[str, str] = {"inprocess_host_per_sequence": "inprocess_engine"}
#: Default knobs to fit.
DEFAULT_KNOBS = ("gemm_peak_fraction", "decode_bw_eff", "phase_overhead")
#: A knob is unidentifiable when the normalised Jacobian has a singular value below this.
IDENTIFIABILITY_TOLERANCE = 1e-6
#: What one fitted knob value is shared by: the runs of one GPU type (hardware preset) or one framework.
KNOB_SCOPES = ("gpu", "framework")
#: Knobs cross-validation fits by default, as ``knob:scope``.
#: ``phase_overhead`` is not among them: what a framework adds per task is derived from the plan by its
#: execution profile (:mod:`packplace.placement.model.framework`; 0 for DeepSpeed-Chat's process per GPU).
DEFAULT_SCOPED_KNOBS = ("gemm_peak_fraction:gpu", "decode_bw_eff:gpu")
#: Fewest runs that may determine one fitted value (a value set by a single run is a per-run knob, which
#: the scopes exist to rule out); a group with fewer keeps its configured value.
MIN_RUNS_PER_VALUE = 2
#: Residual of a figure the model cannot time (an infinite or undefined prediction) in the joint fit.
UNTIMED_RESIDUAL = 10.0


def task_times(instance, plan, hardware: Hardware, engine_only: tuple[str, ...] = ()) -> dict[str, float]:
    """Predicted seconds of every vertex of ``plan`` under ``hardware`` (the cost model, no schedule); the
    tasks of ``engine_only`` without their ``overhead`` part (``phase_overhead`` and the framework's
    dispatch: a bare engine run has no RL phase around it)."""
    cost = cost_model(instance, hardware=hardware)
    out = {}
    for name, vp in plan.vertices:
        phases = vertex_parts(instance, cost, name, vp.strategy, vp.micro_batch, vp.allocation.extent)
        if name in engine_only:
            phases.pop("overhead", None)
        out[name] = sum(phases.values())
    return out


def read_measured(document: Any, where: str = "measured") -> dict[str, Any]:
    """``{"times": {task: seconds}, "engine_only": (tasks...), "knobs": (knobs...) or None, "source": str}``
    from a measured-times YAML document (flat ``task: seconds``, or the ``times`` / ``engine_only`` /
    ``knobs`` / ``source`` form of the module docstring).

    Raises:
        ConfigError: not a mapping, an unknown key, or a list field that is not a list of names.
    """
    if not isinstance(document, dict) or not document:
        raise ConfigError(f"calibrate: {where}: must be a mapping of task -> seconds, got {show_kind(document)}")
    if "times" not in document:
        return {"times": document, "engine_only": (), "knobs": None, "source": ""}
    unknown = sorted(set(document) - {"times", "engine_only", "knobs", "source"}, key=str)  # keys of any type
    if unknown:
        raise ConfigError(f"calibrate: {where}: unknown field {key_shown(unknown[0], quote=True)}; valid: times, "
                          "engine_only, knobs, source")
    out: dict[str, Any] = {"times": document["times"], "source": str(document.get("source", ""))}
    for key in ("engine_only", "knobs"):
        value = document.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ConfigError(f"calibrate: {where}: {key} must be a list of names, got {show(value)}")
        out[key] = tuple(value) if value is not None else (() if key == "engine_only" else None)
    if not isinstance(out["times"], dict) or not out["times"]:
        raise ConfigError(f"calibrate: {where}: times must be a mapping of task -> seconds, got {show(out['times'])}")
    return out


def calibrate(instance, plan, measured: dict[str, float], knobs: tuple[str, ...] = DEFAULT_KNOBS,
              engine_only: tuple[str, ...] = (), gpu: str = DEFAULT_GPU) -> dict[str, Any]:
    """Fit ``knobs`` so that the predicted task times match ``measured`` (seconds per task); the tasks of
    ``engine_only`` are compared without ``phase_overhead``. Each knob stays within
    :func:`~packplace.placement.checking.knob_bounds.knob_bound` of ``gpu`` (the config's preset name; a custom
    GPU: the default bounds).

    Returns:
        ``{"knobs": {name: value}, "fixed": {name: value} (the other knobs of KNOB_BOUNDS, as configured),
        "residuals": {task: predicted/measured − 1}, "at_limit": [knobs at a bound], "limits": {knob: {"side",
        "bound", "source"}} (of those knobs), "bounds": {knob: (lower, upper)}, "hardware": Hardware,
        "cost": ½·Σ log-residual², "status": least_squares message}``.

    Raises:
        ConfigError: an unknown knob or task, a knob named twice, a non-positive measurement, fewer
            measurements than knobs, or a knob the measurements cannot identify.
    """
    from scipy.optimize import least_squares  # start-up time: scipy loads only when a fit runs

    if not knobs:
        raise ConfigError(f"calibrate: no knob to fit; valid: {', '.join(KNOB_BOUNDS)}")
    for i, k in enumerate(knobs):
        if k not in KNOB_BOUNDS:
            raise ConfigError(f"calibrate: unknown knob {show(k)}; valid: {', '.join(KNOB_BOUNDS)}")
        if k in knobs[:i]:   # two columns of one knob: the fit would call the first one unidentifiable
            raise ConfigError(f"calibrate: knob {show(k)} is named twice; name each knob to fit once")
    names = dict(plan.vertices)
    for task, seconds in measured.items():
        if task not in names:
            raise ConfigError(f"calibrate: measured task {key_shown(task, quote=True)} is not a vertex of the plan; "
                              f"valid: {', '.join(names)}")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 2.0**1023:
            raise ConfigError(f"calibrate: {show(task)}: measured seconds must be a finite number > 0, "
                              f"got {show(seconds)}")
    for task in engine_only:
        if task not in measured:
            raise ConfigError(f"calibrate: engine_only task {show(task)} has no measured time; "
                              f"measured: {', '.join(measured)}")
    if len(measured) < len(knobs):
        raise ConfigError(f"calibrate: {len(measured)} measured tasks cannot determine {len(knobs)} knobs "
                          f"({', '.join(knobs)}); measure more tasks or fit fewer knobs")
    tasks = sorted(measured)
    target = np.log([float(measured[t]) for t in tasks])
    base = instance.hardware
    bounds = {k: knob_bound(k, gpu) for k in knobs}
    lower = np.array([bounds[k].lower for k in knobs])
    upper = np.array([bounds[k].upper for k in knobs])
    start = np.clip([getattr(base, k) for k in knobs], lower, upper)
    # overheads may start at 0: move the start inside the box so the solver can leave the bound
    start = np.where(start <= lower, lower + 0.01 * (upper - lower), start)

    def hardware_at(x: np.ndarray) -> Hardware:
        return replace(base, **{k: float(v) for k, v in zip(knobs, x)})

    def residuals(x: np.ndarray) -> np.ndarray:
        times = task_times(instance, plan, hardware_at(x), engine_only)
        return np.log([times[t] for t in tasks]) - target

    fit = least_squares(residuals, start, bounds=(lower, upper), x_scale=upper - lower, xtol=1e-12, ftol=1e-12,
                        gtol=1e-12)
    jac = fit.jac * (upper - lower)  # sensitivity per unit of each knob's range
    norms = np.linalg.norm(jac, axis=0)
    for k, n in zip(knobs, norms):
        if n < IDENTIFIABILITY_TOLERANCE:
            raise ConfigError(f"calibrate: knob {k!r} does not change any measured task time "
                              f"({', '.join(tasks)}); it cannot be identified — fit fewer knobs")
    singular = np.linalg.svd(jac / norms, compute_uv=True)
    if singular[1][-1] < IDENTIFIABILITY_TOLERANCE * singular[1][0]:
        mixed = [k for k, c in zip(knobs, singular[2][-1]) if abs(c) > 0.1]
        raise ConfigError(f"calibrate: knobs {', '.join(mixed)} trade off against each other on the measured "
                          f"tasks ({', '.join(tasks)}); they cannot be identified separately — fix one of them")
    hw = hardware_at(fit.x)
    times = task_times(instance, plan, hw, engine_only)
    # a knob pressed against its physical limit: the measurements ask for a value outside the bounds
    limits = {k: side for k, x in zip(knobs, fit.x) if (side := bounds[k].limit(float(x))) is not None}
    return {"knobs": dict(zip(knobs, map(float, fit.x))),
            "fixed": {k: float(getattr(hw, k)) for k in KNOB_BOUNDS if k not in knobs},
            "residuals": {t: times[t] / measured[t] - 1.0 for t in tasks},
            "at_limit": list(limits), "limits": limits,
            "bounds": {k: (b.lower, b.upper) for k, b in bounds.items()},
            "hardware": hw, "cost": float(fit.cost), "status": fit.message}


def parse_scoped_knobs(specs, field: str = "--knobs") -> tuple[tuple[str, str], ...]:
    """``(knob, scope)`` pairs from ``"knob:scope"`` strings (a comma-separated string or a list), as
    ``validate --cross-validate --knobs`` takes them; ``field`` names the input in the errors.

    Raises:
        ConfigError: an unknown knob or scope, or a knob given twice: ``--knobs: unknown knob 'speed' in
            'speed:gpu'; valid: ...``.
    """
    items = [x.strip() for x in (specs.split(",") if isinstance(specs, str) else specs) if x.strip()]
    if not items:
        raise ConfigError(f"{field}: no knob to fit; valid: {', '.join(KNOB_BOUNDS)} as knob:scope, got {specs!r}")
    out = []
    for item in items:
        knob, _, scope = item.partition(":")
        if knob not in KNOB_BOUNDS:
            raise ConfigError(f"{field}: unknown knob {knob!r} in {item!r}; valid: {', '.join(KNOB_BOUNDS)}")
        if scope not in KNOB_SCOPES:
            raise ConfigError(f"{field}: {item!r}: scope must be one of {', '.join(KNOB_SCOPES)} (one value per "
                              f"GPU type or per framework, never per run), as {knob}:gpu")
        if any(k == knob for k, _ in out):
            raise ConfigError(f"{field}: knob {knob!r} given twice")
        out.append((knob, scope))
    return tuple(out)


def _unidentified(fit, free: list[tuple[str, str, str]], lower: np.ndarray, upper: np.ndarray, residuals,
                  figure_count: int) -> tuple[tuple[str, str, str], str] | None:
    """The first free parameter of a :func:`fit_published` least-squares ``fit`` that its ``figure_count``
    figures leave undetermined, with the reason; None when they determine every free parameter.

    Undetermined: a vanishing (normalised) Jacobian column, a value at a bound whose 1 % move inward
    changes no residual, or the smallest singular value of the normalised Jacobian below
    :data:`IDENTIFIABILITY_TOLERANCE` (or more parameters than figures).
    """
    # a value pressed against its bound is set by the bound (reported under at_limit); the solver's
    # Jacobian column of such a value is scaled to 0 (Coleman-Li), so only inner values are tested
    inner = [i for i, (v, lo, hi) in enumerate(zip(fit.x, lower, upper))
             if not (math.isclose(v, lo, rel_tol=1e-6, abs_tol=1e-6 * (hi - lo))
                     or math.isclose(v, hi, rel_tol=1e-6, abs_tol=1e-6 * (hi - lo)))]
    jac = (fit.jac * (upper - lower))[:, inner]
    norms = np.linalg.norm(jac, axis=0)
    dead = [free[i] for i, n in zip(inner, norms) if n < IDENTIFIABILITY_TOLERANCE]
    for i in sorted(set(range(len(free))) - set(inner)):  # at a bound: move it 1 % of its range inward
        moved = fit.x.copy()
        moved[i] += 0.01 * (upper[i] - lower[i]) * (1 if math.isclose(moved[i], lower[i], abs_tol=1e-6 *
                                                                      (upper[i] - lower[i])) else -1)
        if np.max(np.abs(residuals(moved) - fit.fun)) < IDENTIFIABILITY_TOLERANCE:
            dead.append(free[i])
    if dead:
        return dead[0], "no fitted figure depends on it"
    if inner:
        singular = np.linalg.svd(jac / norms)
        if len(inner) > figure_count or singular[1][-1] < IDENTIFIABILITY_TOLERANCE * singular[1][0]:
            worst = free[inner[int(np.argmax(np.abs(singular[2][-1])))]]
            return worst, "trades off against other knobs on the fitted figures"
    return None


def knob_applies(setup, knob: str) -> bool:
    """Whether ``setup``'s figures depend on ``knob``: its ``uses_knob(knob)`` when it has one (a knob of
    :data:`PROFILE_KNOBS` its framework profile does not use: false), else true."""
    uses = getattr(setup, "uses_knob", None)
    return uses is None or bool(uses(knob))


#: Why a value whose setups' GPU type has a component table for the knob is not fitted (:func:`fit_published`).
TABLE_REPLACED_REASON = ("its GPU type's component table prices the dense passes and decode steps this knob "
                         "would; the knob prices only the rest (mixture-of-experts and LoRA passes, recompute), "
                         "where a fitted value absorbs what the model lacks there and is never pooled")


def _parameters(setups, scoped_knobs) -> tuple[dict[tuple[str, str, str], list[float]],
                                               dict[tuple[str, str, str], KnobBound],
                                               dict[tuple[str, str, str], tuple[float, str]]]:
    """:func:`fit_published`'s parameters: each ``(knob, scope, group)`` with its setups' configured values,
    its bounds (over the setups' GPU types) and those fixed with the reason (fewer than
    :data:`MIN_RUNS_PER_VALUE` runs, or a knob every setup's component table replaces), at their median."""
    params: dict[tuple[str, str, str], list[float]] = {}
    gpus: dict[tuple[str, str, str], set[str]] = {}
    replaced: dict[tuple[str, str, str], bool] = {}
    for st in setups:
        for knob, scope in scoped_knobs:
            if not knob_applies(st, knob):
                continue
            key = (knob, scope, st.group(scope))
            params.setdefault(key, []).append(float(st.base_value(knob)))
            gpus.setdefault(key, set()).add(str(st.group("gpu")))
            table = getattr(st, "table_replaces", None)
            replaced[key] = replaced.get(key, True) and table is not None and bool(table(knob))
    bounds = {k: knob_bound(k[0], frozenset(g)) for k, g in gpus.items()}
    fixed: dict[tuple[str, str, str], tuple[float, str]] = {}
    for k, v in params.items():
        if len(v) < MIN_RUNS_PER_VALUE:
            fixed[k] = (float(np.median(v)), f"only {len(v)} run of its group: a value fitted on one run is a "
                                             f"per-run value")
        elif replaced[k]:
            fixed[k] = (float(np.median(v)), TABLE_REPLACED_REASON)
    return params, bounds, fixed


def fit_published(setups, scoped_knobs) -> dict[str, Any]:
    """Fit ``scoped_knobs`` (``(knob, scope)`` pairs) to the published figures of ``setups`` jointly.

    A setup provides ``name``, ``published`` (``{figure: seconds}``), ``group(scope)`` (its GPU type or
    framework), ``base_value(knob)`` (its configured value) and ``figures(values)`` (predicted
    ``{figure: seconds}`` with the knobs of ``values`` set), and optionally ``uses_knob(knob)`` (false: the
    setup's figures do not depend on the knob, :data:`PROFILE_KNOBS`, and it adds no parameter). One parameter
    per ``(knob, scope, group)`` present; a parameter of fewer than :data:`MIN_RUNS_PER_VALUE` setups, and
    parameters the figures do not determine (a vanishing Jacobian column, or the smallest singular value of the
    normalised Jacobian below :data:`IDENTIFIABILITY_TOLERANCE`) are fixed at their start value,
    one at a time, and the fit repeated.

    Each parameter is fitted within :func:`~packplace.placement.checking.knob_bounds.knob_bound` of the GPU
    types of its setups (``group("gpu")``; a framework-scoped value spanning several: the tightest). A
    parameter whose every setup says ``table_replaces(knob)`` (optional: a GPU type whose component table
    prices the dense passes the knob would) is fixed at its start value, with the reason.

    Returns:
        ``{"knobs": {(knob, scope, group): value}, "fixed": {(knob, scope, group): (value, reason)},
        "at_limit": [(knob, scope, group)], "limits": {(knob, scope, group): {"side", "bound", "source"}} (of
        those at a limit), "bounds": {(knob, scope, group): (lower, upper)}, "residuals": {(setup, figure):
        predicted/published − 1}, "cost": ½·Σ log-residual²}``.
    """
    from scipy.optimize import least_squares  # start-up time: scipy loads only when a fit runs

    params, bounds, fixed = _parameters(setups, scoped_knobs)
    keys = sorted(params)
    start = {k: float(np.median(v)) for k, v in params.items()}
    figures = [(st, f, float(p)) for st in setups for f, p in st.published.items()]

    def values_for(st, x: dict) -> dict[str, float]:
        return {knob: x[(knob, scope, st.group(scope))] for knob, scope in scoped_knobs if knob_applies(st, knob)}

    # a setup's figures depend only on its own knob values: a finite-difference step of one GPU type's
    # or framework's value re-scores only that group's setups
    memo: dict[tuple[str, tuple[tuple[str, float], ...]], dict[str, float]] = {}

    def predicted(st, x: dict) -> dict[str, float]:
        values = values_for(st, x)
        key = (st.name, tuple(sorted(values.items())))
        if key not in memo:
            memo[key] = st.figures(values)
        return memo[key]

    def residual_vector(x: dict) -> np.ndarray:
        out = []
        for st, f, p in figures:
            pred = predicted(st, x).get(f, math.inf)
            out.append(math.log(pred / p) if 0 < pred < math.inf else UNTIMED_RESIDUAL)
        return np.array(out)

    fit = None
    while True:
        free = [k for k in keys if k not in fixed]
        if not free or not figures:
            break
        lower = np.array([bounds[k].lower for k in free])
        upper = np.array([bounds[k].upper for k in free])
        x0 = np.clip([start[k] for k in free], lower, upper)
        x0 = np.where(x0 <= lower, lower + 0.01 * (upper - lower), x0)

        def residuals(v: np.ndarray, free=free) -> np.ndarray:
            return residual_vector({**start, **{k: float(val) for k, val in zip(free, v)}})

        fit = least_squares(residuals, x0, bounds=(lower, upper), x_scale=upper - lower, diff_step=1e-6,
                            xtol=1e-8, ftol=1e-8, gtol=1e-8)
        culprit = _unidentified(fit, free, lower, upper, residuals, len(figures))
        if culprit is None:
            break
        fixed[culprit[0]] = (start[culprit[0]], culprit[1])
    knobs = {k: start[k] for k in keys if k not in fixed}
    if fit is not None:
        knobs = {k: float(v) for k, v in zip([k for k in keys if k not in fixed], fit.x)}
    x = {**knobs, **{k: val for k, (val, _) in fixed.items()}}
    res = residual_vector(x) if figures else np.array([])
    limits = {k: side for k, v in knobs.items() if (side := bounds[k].limit(v)) is not None}
    return {"knobs": knobs, "fixed": fixed, "at_limit": list(limits), "limits": limits,
            "bounds": {k: (b.lower, b.upper) for k, b in bounds.items()},
            "residuals": {(st.name, f): math.exp(r) - 1.0 for (st, f, _), r in zip(figures, res)},
            "cost": float(0.5 * np.sum(res ** 2))}
