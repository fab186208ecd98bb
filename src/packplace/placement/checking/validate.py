"""``packplace validate``: predicted step and phase times of published RL runs against their published
figures.

A validation file is a placement config plus a ``validation`` section::

    validation:
      source: "NeMo RL v0.5 performance summary, ..."   # where the figure comes from
      published: {step: 92.8}                            # seconds; "step" and/or phase names
      phases: {generation: [actor.generate]}             # phase -> the vertices it spans
      engine_only: [generation]                          # phases measured on the engine alone
      plan: {actor.generate: {dp: 16, pp: 1, tp: 1, micro_batch: 128, origin: [0, 0, 0], extent: [1, 2, 8]},
             staleness: {actor: 1}}                     # optional: an asynchronous (k-step off-policy) run

A vertex's ``ep`` (expert-parallel degree of a MoE model, dividing ``dp``) defaults to 1.

The plan is scored by the evaluator with the file's memory settings; a plan over memory is timed without
the memory check but its rows fail. A plan with ``staleness`` (per model, the values of
``optimizer.staleness_candidates``) is scored as the evaluator scores an asynchronous plan: ``step`` is
the steady-state period (the published value is then a period too); the value is added to the model's
allowed candidates, as the published run used it. A phase's predicted time is the span of its vertices
in the schedule; ``step`` is the evaluator's step time. A row passes within :data:`RATIO_RANGE`.
Optional keys: ``url``, ``publication`` (the group of leave-one-source-out cross-validation,
:mod:`packplace.placement.checking.crossval`; default: ``source`` up to its first comma), ``framework``,
``pair_with`` (:data:`PAIR_KEYS`) and ``not_fitted`` (:func:`not_fitted`). A row whose declared staleness
the plan does not carry is flagged and skipped, never scored as synchronous.

Every field of the section is checked when the file loads (:func:`check_validation`, :func:`load_setup`),
before any scoring: a published figure is a positive finite number of seconds, named ``step`` or a phase of
``phases``; a phase is a non-empty list of tasks of the step graph; ``engine_only`` lists phases of
``phases``; a plan entry has integer degrees and ``[rack, node, gpu]`` blocks. A bad value is a one-line
:class:`~packplace.errors.ConfigError` naming the file and the field path
(``[validation] <file>: phases.generation: ...``).
The contracts (:data:`VALIDATION_FIELDS`, :data:`PUBLISHED_FIELD`, :data:`PLAN_TASK_FIELDS`,
:data:`PAIR_FIELDS`) are listed in docs/config-reference.md.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from packplace.contract import Field, check_section, key_shown, plain_bool, plain_number
from packplace.errors import ConfigError, PackplaceError, show
from packplace.placement.candidates import CandidateTable, global_batch, sequences_together
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.model.framework import micro_rollout_batch_size
from packplace.placement.problem.config import (
    MAX_GPUS,
    MAX_SEQUENCES,
    STALENESS_FIELD,
    build_instance,
    framework_canonical,
    framework_key,
    known_framework,
    load_yaml,
    near_framework,
)
from packplace.placement.problem.hardware import PRESETS
from packplace.placement.problem.plan import Allocation, Plan, Strategy, VertexPlan

#: A setup passes when every predicted/published ratio lies in this range.
RATIO_RANGE = (1 / 1.3, 1.3)
#: Free-text fields of the validation section (:func:`check_section`); the structured ones are
#: :data:`STRUCTURED_KEYS`.
VALIDATION_FIELDS: dict[str, Field] = {
    "source": Field("str", default=None, meaning="where the published figures come from (publication, setup)"),
    "url": Field("str", default=None, meaning="address of the source"),
    "publication": Field("str", default=None,
                         meaning="group left out together by --cross-validate (default: source up to its first comma)"),
    "framework": Field("str", default=None,
                       meaning="framework that ran the step, the group of framework-scoped knobs "
                               "(default: policy.framework; one with an execution profile must equal "
                               "policy.framework, written as it: another spelling of it, any case, spacing, "
                               "punctuation or trailing release (openrlhf2, OpenRLHF-v2), or a near miss "
                               "(OpenRLFH) is refused naming it)"),
    "note": Field("str", default=None, meaning="free text for the reader"),
    "not_fitted": Field("str", default=None,
                        meaning="why the figures are scored but never used to fit knobs "
                                "(the mechanism the model lacks)"),
}
#: Structured keys of the validation section, checked by :func:`check_validation`.
STRUCTURED_KEYS = ("published", "phases", "engine_only", "plan", "pair_with")
#: Keys of the validation section (anything else is a typo).
SECTION_KEYS = tuple(VALIDATION_FIELDS) + STRUCTURED_KEYS
#: One published figure (``published.<figure>``, ``<figure>`` being ``step`` or a phase of ``phases``).
PUBLISHED_FIELD = Field("float", "s", 0, None, exclusive_minimum=True, default=None,
                        meaning="published seconds of the step (step) or of a phase of phases")
#: ``plan.<task>.micro_batch`` when the source does not give it: ``validate`` fits the largest within memory
#: (:func:`fit_micro_batches`) and says so on the row.
FIT = "fit"
#: Fields of one task of ``plan`` (``plan.<task>``) besides ``origin`` and ``extent``.
PLAN_TASK_FIELDS: dict[str, Field] = {
    "dp": Field("int", "ranks", 1, MAX_GPUS, meaning="data-parallel degree"),
    "pp": Field("int", "stages", 1, MAX_GPUS, meaning="pipeline-parallel degree"),
    "tp": Field("int", "ranks", 1, MAX_GPUS, meaning="tensor-parallel degree"),
    "ep": Field("int", "ranks", 1, MAX_GPUS, default=1, meaning="expert-parallel degree of a MoE model (divides dp)"),
    "micro_batch": Field("int", "sequences", 1, MAX_SEQUENCES, literals=(FIT,),
                         meaning="sequences per micro-batch (generation: decoded together per replica); "
                                 "'fit': not published, the largest within memory"),
}
#: ``plan.<task>.origin`` (``[rack, node, gpu]`` of the block's first GPU) and ``.extent`` (its size) coordinates.
BLOCK_FIELDS: dict[str, Field] = {
    "origin": Field("int", "", 0, MAX_GPUS, meaning="block's first GPU: [rack, node, gpu], 3 integers"),
    "extent": Field("int", "", 1, MAX_GPUS, meaning="block's size at each level: [racks, nodes, GPUs], 3 integers"),
}
#: Fields of one ``pair_with`` entry (a bare string is the ``setup``).
PAIR_FIELDS: dict[str, Field] = {
    "setup": Field("str", meaning="the other setup: its file name without .yaml"),
    "what": Field("str", default=None, meaning="what changes between the two setups"),
}
#: Keys of one ``pair_with`` entry: the other setup's file name without ``.yaml`` and what changes.
PAIR_KEYS = tuple(PAIR_FIELDS)
#: Start of :func:`floor_reason`'s sentence (a published figure below its inputs' datasheet floor).
BELOW_FLOOR = "below its inputs' datasheet floor"


@dataclass
class ValidationRow:
    """One compared figure: ``setup``, ``figure`` (``step`` or a phase name), seconds predicted and
    published, whether the plan fits in memory under the model (``memory_ok``), the file's ``source`` and
    ``parts``: per vertex of the phase (every vertex for ``step``), its predicted seconds by part
    (``generation``, ``forward``, ``train``, ``old_log_prob``, ``overhead``), ``floor``: the figure's
    datasheet lower bound for the file's workload (:func:`flop_floor`, seconds), and ``fitted``: the
    sentence naming the micro-batches ``validate`` fitted because the source does not give them
    (:func:`fit_micro_batches`; empty when every one is published). A file refused at load
    (:func:`load_setup` raised) is one row with figure ``-``, NaN seconds and ``error``: the one-line reason.
    ``phase`` is a deprecated alias of ``figure`` (the name cross-validation's rows use too)."""

    setup: str
    figure: str
    predicted: float
    published: float
    memory_ok: bool
    source: str = ""
    parts: dict[str, dict[str, float]] = field(default_factory=dict)
    skipped: str = ""
    floor: float = 0.0
    fitted: str = ""
    error: str = ""

    @property
    def phase(self) -> str:
        """Deprecated alias of :attr:`figure` (warns: :class:`DeprecationWarning`)."""
        warnings.warn("ValidationRow.phase is deprecated; use ValidationRow.figure (step or a phase name)",
                      DeprecationWarning, stacklevel=2)
        return self.figure

    @property
    def below_floor(self) -> bool:
        """The published figure is shorter than its datasheet floor (:func:`flop_floor`): the file's
        inputs cannot be the run's."""
        return self.published < self.floor

    @property
    def ratio(self) -> float:
        """``predicted / published``."""
        return self.predicted / self.published

    @property
    def ok(self) -> bool:
        """The ratio lies in :data:`RATIO_RANGE` and the plan fits in memory (never for a skipped or
        refused row)."""
        return not self.skipped and not self.error and self.memory_ok and RATIO_RANGE[0] <= self.ratio <= RATIO_RANGE[1]

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready fields: ``setup, figure, source, published, predicted, ratio, memory_ok,
        ok, parts`` (seconds), ``skipped`` (the reason, empty when scored), ``floor`` (seconds),
        ``below_floor``, ``fitted`` (the fitted micro-batches' sentence, empty when all are published) and
        ``error`` (why the file was refused, empty when it loaded; its seconds are then ``null``)."""
        return {"setup": self.setup, "figure": self.figure, "source": self.source, "published": self.published,
                "predicted": self.predicted, "ratio": self.ratio, "memory_ok": self.memory_ok, "ok": self.ok,
                "parts": self.parts, "skipped": self.skipped, "floor": self.floor,
                "below_floor": self.below_floor, "fitted": self.fitted, "error": self.error}


def _staleness(spec: Any, where: str) -> dict[str, int]:
    """The plan's ``staleness`` mapping ``{model: steps}`` (empty when absent)."""
    raw = spec.get("staleness") if isinstance(spec, dict) else None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where}] plan.staleness: must be a mapping of model -> steps, got {raw!r}")
    return {str(m): STALENESS_FIELD.check(t, f"[{where}] plan.staleness.{m}") for m, t in raw.items()}


def _block(value: Any, label: str, kind: str) -> tuple[int, int, int]:
    """``plan.<task>.origin`` or ``.extent`` as a ``(rack, node, gpu)`` tuple (:data:`BLOCK_FIELDS`)."""
    if not isinstance(value, list) or len(value) != 3:
        raise ConfigError(f"{label}: must be a list of 3 integers [rack, node, gpu], got {show(value)}")
    x, y, z = (BLOCK_FIELDS[kind].check(v, f"{label}[{i}]") for i, v in enumerate(value))
    return x, y, z


def _plan(spec: Any, where: str, tasks: tuple[str, ...]) -> Plan:
    """The plan of ``validation.plan``: per task (a vertex of the step graph, ``tasks``) the fields of
    :data:`PLAN_TASK_FIELDS` and its block (:data:`BLOCK_FIELDS`), and ``staleness``.

    Raises:
        ConfigError: not a non-empty mapping; an unknown task; a task entry with a missing, unknown or
            ill-typed field.
    """
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"[{where}] plan: must be a mapping of vertex -> placement, got {show(spec)}")
    vertices = {}
    for name, v in spec.items():
        if name == "staleness":
            continue
        task = f"[{where}] plan.{name}"
        if name not in tasks:
            raise ConfigError(f"[{where}] plan: unknown task {show(name)}; tasks: {', '.join(tasks)}")
        if isinstance(v, dict) and v.get("micro_batch") == FIT:
            v = {**v, "micro_batch": 1}  # a placeholder: fit_micro_batches sets the largest that fits
        values = check_section(v, PLAN_TASK_FIELDS, task, extra=tuple(BLOCK_FIELDS),
                               label=lambda field, task=task: f"{task}.{field}")
        block = {}
        for key in BLOCK_FIELDS:
            if v.get(key) is None:
                raise ConfigError(f"{task}.{key}: missing required field")
            block[key] = _block(v[key], f"{task}.{key}", key)
        vertices[name] = VertexPlan(Strategy(values["dp"], values["pp"], values["tp"], values["ep"]),
                                    values["micro_batch"], Allocation(block["origin"], block["extent"]))
    return Plan.build(vertices, _staleness(spec, where))


def fitted_tasks(spec: Any) -> tuple[str, ...]:
    """The tasks of ``validation.plan`` whose ``micro_batch`` is ``fit`` (the source does not give it)."""
    if not isinstance(spec, dict):
        return ()
    return tuple(name for name, v in spec.items() if isinstance(v, dict) and v.get("micro_batch") == FIT)


def fit_micro_batches(instance, plan: Plan, tasks: tuple[str, ...]) -> tuple[Plan, dict[str, int]]:
    """``plan`` with each task of ``tasks`` at the largest micro-batch that keeps the whole plan within
    memory, and those micro-batches (``{task: sequences}``).

    A framework sizes what its source leaves open by the memory it has: a trainer's micro-batch is the
    largest that fits beside everything else on its GPUs, an engine's the largest batch it holds. Memory
    grows with the micro-batch, so a bisection over the divisors of the sequences per replica (the
    workload's ``B·K`` over the task's ``dp``; a micro-batch divides them) finds it; tasks are fitted in
    the order given, each with the ones before it already fitted. A task that does not fit even at 1
    keeps 1 (the plan is then over memory and ``validate`` says so)."""
    fitted: dict[str, int] = {}
    for name in tasks:
        vp = dict(plan.vertices)[name]
        per_replica = max(1, global_batch(instance, name) // vp.strategy.dp)
        whole = sequences_together(instance)   # a DPO micro-batch holds whole preference pairs
        sizes = [d for d in range(1, per_replica + 1) if per_replica % d == 0 and d % whole == 0] or [whole]
        lo, hi = 0, len(sizes) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            trial = _with_micro_batch(plan, name, sizes[mid])
            if plan_evaluator(instance, trial).score(trial).oom:
                hi = mid - 1
            else:
                lo = mid
        plan = _with_micro_batch(plan, name, sizes[lo])
        fitted[name] = sizes[lo]
    return plan, fitted


def _with_micro_batch(plan: Plan, name: str, micro_batch: int) -> Plan:
    """``plan`` with task ``name`` at ``micro_batch`` sequences per micro-batch."""
    vertices = dict(plan.vertices)
    vp = vertices[name]
    vertices[name] = VertexPlan(vp.strategy, micro_batch, vp.allocation)
    return Plan.build(vertices, dict(plan.staleness))


def fitted_note(fitted: dict[str, int]) -> str:
    """The sentence a row carries when some micro-batches were fitted (:func:`fit_micro_batches`)."""
    if not fitted:
        return ""
    shown = ", ".join(f"{name} {mb}" for name, mb in fitted.items())
    return f"micro-batch not published, fitted as the largest within memory: {shown}"


def _phases(spec: Any, tasks: tuple[str, ...]) -> dict[str, list[str]]:
    """``validation.phases``: phase name -> the non-empty list of distinct tasks (vertices of the step
    graph, ``tasks``) it spans; ``step`` is not a phase name (it is the whole step)."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ConfigError(f"[validation] phases: must be a mapping of phase -> list of tasks, got {show(spec)}")
    out = {}
    for phase, names in spec.items():
        label = f"[validation] phases.{phase}"
        if not isinstance(phase, str) or phase == "step":
            raise ConfigError(f"[validation] phases: a phase name must be a string other than 'step' (the whole "
                              f"step), got {show(phase)}")
        if not isinstance(names, list) or not names:
            raise ConfigError(f"{label}: must be a non-empty list of tasks ({', '.join(tasks)}), got {show(names)}")
        for name in names:
            if name not in tasks:
                raise ConfigError(f"{label}: unknown task {show(name)}; tasks: {', '.join(tasks)}")
        if len(set(names)) < len(names):
            raise ConfigError(f"{label}: a task is listed twice, got {show(names)}")
        out[phase] = list(names)
    return out


def _engine_only(spec: Any, phases: dict[str, list[str]]) -> list[str]:
    """``validation.engine_only``: the phases of ``phases`` measured on the engine alone."""
    if spec is None:
        return []
    valid = ", ".join(phases) or "none declared"
    if not isinstance(spec, list):
        raise ConfigError(f"[validation] engine_only: must be a list of phases of 'phases' ({valid}), got {show(spec)}")
    for phase in spec:
        if not isinstance(phase, str) or phase not in phases:
            raise ConfigError(f"[validation] engine_only: {show(phase)} is not a phase of 'phases'; phases: {valid}")
    return list(spec)


def _published(spec: Any, phases: dict[str, list[str]]) -> dict[str, float]:
    """``validation.published``: figure (``step`` or a phase of ``phases``) -> seconds
    (:data:`PUBLISHED_FIELD`), in the file's order."""
    where = "[validation] published"
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: must be a mapping of figure (step or a phase of 'phases') -> seconds, "
                          f"got {show(spec)}")
    fields = {name: PUBLISHED_FIELD for name in ("step", *phases)}
    values = check_section(spec, fields, where, label=lambda name: f"{where}.{name}",
                           unknown="{label}: not step or a phase of 'phases'; valid: {valid}")
    if not values:
        raise ConfigError(f"{where}: needs at least one figure (step or a phase of 'phases'), got {show(spec)}")
    return {name: values[name] for name in spec if name in values}


def check_validation(section: dict[str, Any], tasks: tuple[str, ...]) -> dict[str, Any]:
    """The validation section checked field by field, ``published`` as ``{figure: seconds}`` and
    ``phases`` and ``engine_only`` normalised (empty when absent); ``plan`` is checked by
    :func:`load_setup`. ``tasks`` are the vertices of the file's step graph.

    Raises:
        ConfigError: ``[validation] <field path>: ...`` naming the value: an unknown key, a free-text field
            that is not a non-empty string (:data:`VALIDATION_FIELDS`), a published figure that is not a
            positive finite number of seconds or neither ``step`` nor a phase, a phase that is not a
            non-empty list of known tasks, an ``engine_only`` entry that is not a phase, a malformed
            ``pair_with`` entry.
    """
    check_section(section, VALIDATION_FIELDS, "[validation]", extra=STRUCTURED_KEYS,
                  label=lambda name: f"[validation] {name}")
    phases = _phases(section.get("phases"), tasks)
    out = dict(section)
    out["phases"] = phases
    out["engine_only"] = _engine_only(section.get("engine_only"), phases)
    out["published"] = _published(section.get("published"), phases)
    pairs_of(section)
    return out


def _allow_staleness(cfg: dict[str, Any], stale: dict[str, int]) -> None:
    """Add the published run's staleness ``{model: steps}`` to ``optimizer.staleness_candidates`` of ``cfg``
    (in place). An ``optimizer`` section or candidate list of the wrong shape is left as written: the
    config's own checks (:func:`build_instance`) then refuse it with the line ``place`` prints."""
    optimizer = cfg.get("optimizer")
    if optimizer is not None and not isinstance(optimizer, dict):
        return
    allowed = (optimizer or {}).get("staleness_candidates")
    if allowed is not None and not isinstance(allowed, dict):
        return
    allowed = dict(allowed or {})
    for model, t in stale.items():
        listed = allowed.get(model)
        if listed is not None and not (isinstance(listed, list) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in listed)):
            return
        allowed[model] = sorted({0, t, *(listed or [])})
    cfg["optimizer"] = {**(optimizer or {}), "staleness_candidates": allowed}


def load_setup_mapping(cfg: dict[str, Any]) -> tuple[Any, Plan, dict[str, Any]]:
    """:func:`load_setup` of a validation setup given as a mapping (a file's content, e.g. with fields
    overridden).

    Raises:
        ConfigError: ``cfg`` is not a loadable validation setup (as :func:`load_setup`).
    """
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        path = fh.name
        try:   # numpy numbers are the Python ones (as a config mapping takes them); yaml cannot write numpy's
            yaml.safe_dump(_plain_values(cfg, "validation setup"), fh)
        except ConfigError:
            fh.close()
            os.unlink(path)
            raise
    try:
        return load_setup(path)
    finally:
        os.unlink(path)


def _plain_values(value: Any, where: str) -> Any:
    """``value`` with the numpy numbers and booleans of its mappings and lists made the Python ones
    (:func:`plain_number`, :func:`plain_bool`), tuples made lists: what a YAML file holds.

    Raises:
        ConfigError: ``<where>.<key>: <value> is no YAML value ...`` (an object yaml cannot write).
    """
    if isinstance(value, dict):
        return {key: _plain_values(item, f"{where}.{key_shown(key)}") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_values(item, f"{where}[{i}]") for i, item in enumerate(value)]
    value = plain_bool(plain_number(value))
    if value is not None and not isinstance(value, (bool, int, float, str, datetime.date)):
        raise ConfigError(f"{where}: {show(value)} is no YAML value (a number, string, boolean, date, list or "
                          "mapping)")
    return value


def setup_detail(cfg: dict[str, Any]) -> dict[str, Any]:
    """The evaluator's :meth:`~packplace.placement.evaluator.PlacementScore.detail` of the published plan of a
    validation setup given as a mapping (:func:`load_setup_mapping`): per-vertex phases (``vertex_phases_s``,
    seconds), transfer edges (``realloc_s``, seconds), ``step_time_s`` and the rest.

    Raises:
        ConfigError: ``cfg`` is not a loadable validation setup (as :func:`load_setup`).
    """
    instance, plan, _ = load_setup_mapping(cfg)
    return plan_evaluator(instance, plan).score(plan).detail()


def load_setup(path: str) -> tuple[Any, Plan, dict[str, Any]]:
    """``(instance, plan, validation section)`` of one validation file (the section as
    :func:`check_validation` returns it, with ``_gpu``: the canonical preset name of its GPU).

    Raises:
        ConfigError: a missing ``validation`` section, a field of it that breaks its contract
            (:func:`check_validation`) or a malformed plan (one line naming the field).
    """
    cfg = load_yaml(path)
    section = cfg.pop("validation", None)
    if not isinstance(section, dict) or "published" not in section or "plan" not in section:
        raise ConfigError(f"[validation] {path}: needs a validation section with 'published' and 'plan'")
    unknown = sorted(set(section) - set(SECTION_KEYS), key=str)
    if unknown:
        raise ConfigError(f"[validation] {path}: unknown key {key_shown(unknown[0], quote=True)}; "
                          f"valid: {', '.join(SECTION_KEYS)}")
    stale = _staleness(section["plan"], "validation")
    if stale:  # the published run's staleness is allowed, whatever the search candidates say
        _allow_staleness(cfg, stale)
    instance = build_instance(cfg, source=path)
    try:
        _check_framework_agrees(section, instance)
        fit = fitted_tasks(section["plan"])
        section = check_validation(section, instance.graph.names)
        plan = _plan(section["plan"], "validation", instance.graph.names)
        for name in fit:   # the placeholder is the smallest legal micro-batch (a DPO one holds a whole pair)
            plan = _with_micro_batch(plan, name, sequences_together(instance))
        # the plan's degrees fit its blocks (``calibrate`` divides by them): the evaluator's rules, not memory
        broken = [v for v in plan_evaluator(instance, plan).score(plan).violations if not v.startswith("out of memory")]
        if broken:
            raise ConfigError(f"[validation] plan: {broken[0]}")
        plan, section["_fitted"] = fit_micro_batches(instance, plan, fit)
    except ConfigError as exc:   # name the file: a directory of them is validated at once
        raise ConfigError(f"[validation] {path}: {str(exc).removeprefix('[validation] ')}") from None
    preset = (cfg.get("hardware") or {}).get("preset")
    section["_gpu"] = next((k for k, v in PRESETS.items() if v is PRESETS.get(preset)), preset) or "custom"
    return instance, plan, section


def _check_framework_agrees(section: dict[str, Any], instance) -> None:
    """``validation.framework`` names the framework that ran the step; when the model has that framework's
    execution profile (:data:`~packplace.placement.model.framework.FRAMEWORKS`), ``policy.framework`` must
    select it, or the run would be priced without the mechanics of the framework it names (a framework
    without a profile, e.g. one scored with the bare engine, may differ). A name that spells a framework with
    a profile another way (case, spaces, punctuation, a trailing release, ``OpenRLHF-v2`` and ``openrlhf2``
    alike: :func:`~packplace.placement.problem.config.known_framework`) or misses it by an edit or two
    (:func:`~packplace.placement.problem.config.near_framework`: ``OpenRLFH``) is refused naming the
    canonical one, never taken for another system.

    Raises:
        ConfigError: ``[validation] framework: ...`` naming both values.
    """
    named = section.get("framework")
    if isinstance(named, str) and not any(ch.isalpha() for ch in framework_canonical(named)[0]):
        raise ConfigError(f"[validation] framework: {show(named)} names no framework (no letters once case, "
                          "punctuation and a release are set aside); write the system that ran the step")
    canonical, release = known_framework(named)
    near = near_framework(named) if canonical is None else None
    if near is not None:
        raise ConfigError(f"[validation] framework: {show(named)} is a near miss of the {near} framework; write "
                          f"it {show(near)} (or, for another system, a name that does not misspell a framework "
                          "with an execution profile)")
    if canonical is None:   # another system (or not a string: check_validation names it)
        return
    if canonical != named:
        raise ConfigError(f"[validation] framework: {show(named)} names the {canonical} framework; write it "
                          f"{show(canonical)} (cross-validation groups runs by this name" +
                          ("; the release goes in policy.framework_version)" if release else ")"))
    if named != instance.framework:
        raise ConfigError(f"[validation] framework: {show(named)} ran the step, but policy.framework is "
                          f"{show(instance.framework)}: the two must name the same framework (the run is priced "
                          f"by policy.framework's execution profile); set policy.framework: {named}, or correct "
                          "validation.framework")


def declared_staleness(section: dict[str, Any]) -> dict[str, int]:
    """``{model: steps}`` of ``plan.staleness`` (the published run's asynchrony; empty when synchronous).

    Raises:
        ConfigError: not a mapping of model -> integer >= 0.
    """
    spec = (section.get("plan") or {}).get("staleness") or {}
    if not isinstance(spec, dict) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                             for t in spec.values()):
        raise ConfigError(f"[validation] plan.staleness: must be a mapping of model -> steps >= 0, got {spec!r}")
    return {m: t for m, t in spec.items() if t}


def publication(section: dict[str, Any]) -> str:
    """The publication a file's figures come from (``validation.publication``, else ``source`` up to its
    first comma): the group that leave-one-source-out cross-validation leaves out together."""
    if section.get("publication"):
        return str(section["publication"])
    return str(section.get("source", "")).split(",")[0].strip() or "unknown"


def framework(instance, section: dict[str, Any]) -> str:
    """The framework that ran the step: ``validation.framework``, else the config's ``framework`` setting
    when the instance has one (``unknown`` when neither is given). A system without an execution profile is
    named by its canonical form, without case, punctuation or a trailing release (``"SkyRL v0.2"``,
    ``"Sky-RL"`` -> ``skyrl``: :func:`~packplace.placement.problem.config.framework_key`, the form the
    frameworks with a profile are recognised by), so that its files share one group of framework-scoped knobs
    however each writes it."""
    value = section.get("framework") or getattr(instance, "framework", None)
    name = str(getattr(value, "name", value) or "unknown")
    return name if known_framework(name)[0] is not None else framework_key(name)


def not_fitted(section: dict[str, Any], where: str) -> str:
    """Why a file's figures are scored and reported but never used to fit knobs (``validation.not_fitted``:
    the reason, naming the mechanism the model lacks for that run); empty when the file is fitted.

    Raises:
        ConfigError: ``not_fitted`` given but not a non-empty reason.
    """
    value = section.get("not_fitted")
    if value is None:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"[validation] {where}: not_fitted must be the reason (a non-empty string), got {value!r}")
    return value.strip()


def pairs_of(section: dict[str, Any]) -> list[dict[str, str]]:
    """The ``pair_with`` entries of a section as ``[{"setup": ..., "what": ...}]`` (one entry, a list of
    them, a bare string being the ``setup``; :data:`PAIR_FIELDS`).

    Raises:
        ConfigError: ``[validation] pair_with[i]...``: an entry that is not a mapping, without ``setup``,
            with an unknown key or a field that is not a non-empty string.
    """
    spec = section.get("pair_with") or []
    entries = spec if isinstance(spec, list) else [spec]
    out = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            entry = {"setup": entry}
        where = f"[validation] pair_with[{i}]" if isinstance(spec, list) else "[validation] pair_with"
        values = check_section(entry, PAIR_FIELDS, where, label=lambda name, where=where: f"{where}.{name}")
        out.append({"setup": values["setup"], "what": values.get("what", "")})
    return out


def plan_evaluator(instance, plan: Plan) -> PlacementEvaluator:
    """An evaluator whose candidate table holds only ``plan``'s candidates (scoring one known plan)."""
    return PlacementEvaluator(instance, CandidateTable(instance, plan))


def predict(instance, plan: Plan, section: dict[str, Any]
            ) -> tuple[dict[str, float], bool, dict[str, dict[str, float]]]:
    """Predicted seconds of the step and of each phase of ``section['phases']``, whether the plan fits,
    and the predicted parts of every vertex (``{vertex: {part: seconds}}``); every number a plain Python
    ``float``, the fit a ``bool``.

    Raises:
        ConfigError: the plan breaks a hard rule (the evaluator's reason).
    """
    predicted, fits, phases, _ = _predict(instance, plan, section)
    return predicted, fits, phases


def flop_floor(instance, plan: Plan, section: dict[str, Any]) -> dict[str, float]:
    """Datasheet lower bound of every published figure, seconds: the model FLOPs the figure's vertices
    must run for the file's workload, at the whole dense peak of their GPUs (``{figure: seconds}``).

    A vertex's floor is ``FLOPs / (GPUs · flops_per_gpu)`` with the strategy-independent FLOPs of
    :meth:`~packplace.placement.model.cost.CostModel.vertex_flops` (training ``3×`` a forward pass over the
    ``B·K·(S + mean response)`` packed tokens, inference and generation ``1×``) plus, for a training
    vertex that recomputes the old log-probs, one more forward pass; no recomputation, communication,
    overhead or efficiency below 1 (Kaplan et al. 2020, Table 1: ``2N`` FLOPs per token forward, ``6N``
    forward and backward). The attention term uses the mean length, less than the mean of the squared
    lengths, so the floor stays a lower bound. A figure spans its phase's vertices (every vertex for
    ``step``); the vertices sharing a GPU take turns on it (a synchronous step runs each once; an
    asynchronous period too), so the figure lasts at least the largest sum of floors over one GPU's
    vertices. A published figure below its floor cannot come from the file's workload on the file's
    GPUs at any efficiency: the inputs (lengths, batch) are not those of the run.

    A generation vertex lasts at least its decode's weight reads as well (:func:`decode_floor`: every
    iteration reads the GPU's weight shard at the datasheet HBM bandwidth), and where OpenRLHF's experience is
    its actor ranks' serial loop of engine calls (:func:`~packplace.placement.evaluator.micro_rollout_vertices`,
    before v0.5.0) the actor's training follows the whole loop (0.2.7 ``ppo_trainer.py`` ``fit``: ``ppo_train``
    only after ``update_timesteps`` ``make_experience`` calls; ``ppo_actor.py`` ``ppo_train``: ``flush`` and a
    barrier first), so a figure spanning both lasts at least the sum of their floors."""
    return _predict(instance, plan, section)[3]


def decode_floor(ev: PlacementEvaluator, plan: Plan, i: int) -> float:
    """Seconds generation vertex ``i`` of ``plan`` lasts at least in decode's weight reads alone: an iteration
    runs every layer's matrices over its running tokens, so it reads the weights each token uses (the dense
    part: :meth:`~packplace.placement.model.cost.CostModel.decode_weights_read` of one sequence less its routed
    experts), ``1/(tp·pp)`` of them on each GPU, at no more than the datasheet ``memory_bandwidth``
    (Williams et al. 2009, the roofline's memory side; no efficiency below 1); and it adds at most one token
    to each running sequence (no speculative decoding is priced), so an engine runs at least the mean response's
    iterations (a replica decodes its longest response, at least the mean). Where OpenRLHF's experience runs
    each actor rank's micro-rollout batches one engine call at a time (:attr:`PlacementEvaluator.micro_rollout`;
    vllm_engine.py ``LLMRayActor`` without ``max_concurrency``: calls to one engine run one after another), the
    busiest engine, ``vllm_engines[rank % engines]``, runs ``⌈ranks / engines⌉ × steps`` calls, each at least the
    mean response's iterations."""
    cost = ev.cost
    vertices = dict(plan.vertices)
    s = vertices[ev.names[i]].strategy
    model = ev.model_specs[i]
    one = np.array([1.0])
    dense = float(cost.decode_weights_read(model, one)[0] - cost.decode_expert_weights_read(model, one)[0])
    iteration = 2.0 * dense / (s.tp * s.pp) / cost.hw.memory_bandwidth
    calls = 1
    if ev.micro_rollout is not None and ev.micro_rollout[0] == i:
        _, train, forwards = ev.micro_rollout
        sequences = ev.instance.workload.sequences
        ranks = vertices[ev.names[train]].strategy.dp
        batch = micro_rollout_batch_size(sequences, ranks, (vertices[ev.names[j]].micro_batch for j in forwards))
        steps = -(-max(1, sequences // ranks) // batch)
        calls = -(-ranks // s.dp) * steps
    return calls * ev.instance.workload.mean_response * iteration


def floor_reason(instance, plan: Plan, section: dict[str, Any]) -> str:
    """Why a file's figures cannot determine an efficiency knob: the first published figure shorter than
    its datasheet floor (:func:`flop_floor`), as a sentence naming figure, published and floor seconds;
    empty when every figure is above its floor. No efficiency at or below 1 reproduces such a figure, so a
    fit it entered would be pulled to the knob's physical limit by inputs that are not the run's."""
    floors = flop_floor(instance, plan, section)
    for fig, published in section["published"].items():
        if float(published) < floors.get(fig, 0.0):
            return (f"{BELOW_FLOOR}: published {fig} {float(published):.1f} s < {floors[fig]:.1f} s at the "
                    "whole dense peak (and, in decode, the datasheet HBM bandwidth) for the file's workload")
    return ""


def _predict(instance, plan: Plan, section: dict[str, Any]
             ) -> tuple[dict[str, float], bool, dict[str, dict[str, float]], dict[str, float]]:
    """:func:`predict`'s figures, fit and parts, and :func:`flop_floor`'s floors."""
    ev = plan_evaluator(instance, plan)
    score = ev.score(plan)
    broken = [v for v in score.violations if not v.startswith("out of memory")]
    if broken:
        raise ConfigError(f"[validation] plan: {broken[0]}")
    peak = float(instance.hardware.flops_per_gpu)
    vertex_floor = {}
    for name, vp in plan.vertices:
        flops = ev.table.vertex_flops.get(name, 0.0)
        if "old_log_prob" in score.phases.get(name, {}):
            flops *= 4.0 / 3.0  # the training vertex's 3 forward-equivalents plus the old-log-prob forward
        vertex_floor[name] = flops / (vp.allocation.num_gpus * peak)
        i = ev.names.index(name)
        if instance.graph.vertices[i].kind == "generate":
            vertex_floor[name] = max(vertex_floor[name], decode_floor(ev, plan, i))
    fits = not score.oom
    if fits:
        step = score.step_time
    else:
        step, _ = ev.relaxed_step_time(plan)
    out = {"step": step}
    engine_only = set(section.get("engine_only", ()))
    for phase, names in (section.get("phases") or {}).items():
        span = max(score.end[n] for n in names) - min(score.start[n] for n in names)
        if phase in engine_only:
            span -= sum(score.phases[n].get("overhead", 0.0) for n in names)
        out[phase] = span
    ranges = {name: vp.allocation.gpu_range(instance.cluster) for name, vp in plan.vertices}
    phase_vertices = {"step": list(vertex_floor), **(section.get("phases") or {})}
    floors = {}
    for phase, names in phase_vertices.items():
        names = [n for n in names if n in vertex_floor]
        # vertices sharing a GPU take turns on it: the busiest GPU's sum bounds the figure (the per-GPU
        # sum only rises where a block starts, so the first GPU of some block is the busiest)
        floors[phase] = max((sum(vertex_floor[u] for u in names if ranges[u][0] <= ranges[v][0] < ranges[u][1])
                             for v in names), default=0.0)
        if ev.micro_rollout is not None:   # the actor trains after the whole loop (flop_floor)
            loop = [ev.names[j] for j in ev.micro_rollout[:2]]
            if all(n in names for n in loop):
                floors[phase] = max(floors[phase], sum(vertex_floor[n] for n in loop))
    # plain Python floats at the boundary (the evaluator's arithmetic may leave numpy scalars)
    parts = {name: {part: float(v) for part, v in d.items()} for name, d in score.phases.items()}
    return ({k: float(v) for k, v in out.items()}, bool(fits), parts, {k: float(v) for k, v in floors.items()})


def validate(paths: list[str] | str | bytes | os.PathLike[str], *, one_file: bool | None = None) -> list[ValidationRow]:
    """One row per published figure of every file in ``paths`` (a list of paths, or one path); a file refused
    at load or scoring (a
    :class:`~packplace.errors.ConfigError` naming it and the field: a plain placement config without a
    ``validation`` section too) is one row with ``error`` set, and the other files are still scored, even
    where every file is refused (a folder of plain configs: a row each, not the first file's error alone).
    ``one_file``: ``paths`` is the one file the user gave, whose refusal is raised; False for the files of a
    folder (a folder holding one file too: its refusal is a row); None: ``paths`` holds one path.

    Raises:
        ConfigError: one run given twice, before any file is scored (:func:`check_distinct_files`: two files
            of one setup name, or one content under two names, naming both paths); the one file given
            refused (``one_file``: a single bad file is bad input; an :class:`~packplace.errors.InfeasibleError`
            likewise).
    """
    if isinstance(paths, (str, bytes, os.PathLike)):   # one file, not its characters
        paths = [os.fsdecode(paths)]
    one_file = len(paths) == 1 if one_file is None else one_file
    check_distinct_files(paths)
    rows = []
    errors = []
    for path in paths:
        setup = os.path.splitext(os.path.basename(path))[0]
        try:
            instance, plan, section = load_setup(path)
            predicted, fits, parts, floors = _predict(instance, plan, section)
        except PackplaceError as exc:
            errors.append(exc)
            nan = float("nan")
            rows.append(ValidationRow(setup, "-", nan, nan, False, error=str(exc)))
            continue
        skipped = skip_reason(plan, section)
        phases = section.get("phases") or {}
        engine_only = set(section.get("engine_only", ()))
        for phase, published in section["published"].items():
            names = phases.get(phase, list(parts))
            row_parts = {n: {k: v for k, v in parts[n].items() if not (phase in engine_only and k == "overhead")}
                         for n in names}
            rows.append(ValidationRow(setup, phase, predicted[phase], float(published), fits,
                                      str(section.get("source", "")), row_parts, skipped, floors[phase],
                                      fitted_note(section.get("_fitted", {}))))
    if errors and one_file:   # the one file given, refused: bad input; a folder's files, each refused one is a row
        raise errors[0]
    return rows


def skip_reason(plan: Plan, section: dict[str, Any]) -> str:
    """Why a file's rows are not scored: its run was asynchronous (``plan.staleness``) but the plan does not
    carry that staleness, so the prediction would be the synchronous one; empty when scored."""
    stale = declared_staleness(section)
    if stale and dict(plan.staleness) != stale:
        shown = ", ".join(f"{m} {t}" for m, t in sorted(stale.items()))
        return f"asynchronous run (staleness {shown}) not scored: the plan carries no staleness yet"
    return ""


def format_rows(rows: list[ValidationRow]) -> str:
    """The report table."""
    header = f"{'setup':<50} {'figure':<30} {'predicted s':>11} {'published s':>11} {'ratio':>6}  "
    lines = [header, "-" * len(header)]
    for r in rows:
        if r.error:
            lines.append(f"{r.setup:<50} {r.figure:<30} {'-':>11} {'-':>11} {'-':>6}  REFUSED: {r.error}")
            continue
        if r.skipped:
            lines.append(f"{r.setup:<50} {r.figure:<30} {'-':>11} {r.published:>11.1f} {'-':>6}  SKIPPED: {r.skipped}")
            continue
        in_range = RATIO_RANGE[0] <= r.ratio <= RATIO_RANGE[1]
        note = "ok" if r.ok else ("OUT OF RANGE" if not in_range else "FAILS")
        if not r.memory_ok:
            note += " (plan over memory in the model; time scored without the memory check)"
        if r.below_floor:
            note += f" (published {BELOW_FLOOR} {r.floor:.1f} s: the inputs are not the run's)"
        if r.fitted:
            note += f" ({r.fitted})"
        lines.append(f"{r.setup:<50} {r.figure:<30} {r.predicted:>11.1f} {r.published:>11.1f} {r.ratio:>6.2f}  {note}")
    scored = [r for r in rows if not r.skipped and not r.error]
    skipped = sum(1 for r in rows if r.skipped and not r.error)
    refused = sum(1 for r in rows if r.error)
    bad = sum(not r.ok for r in scored)
    lines.append(f"{len(scored) - bad} of {len(scored)} figures within x{RATIO_RANGE[1]} of the published value "
                 "with the plan within memory" + (f"; {skipped} skipped" if skipped else "")
                 + (f"; {refused} file{'s' if refused > 1 else ''} refused" if refused else ""))
    return "\n".join(lines)


def _content_key(path: str) -> str | None:
    """What two copies of one validation file share: the file's YAML as a canonical JSON text (comments,
    key order and layout set aside); None when it does not load (read through the loader's own checks:
    regular files, size limits), as its load then refuses it on its own row and none of its figures is
    scored."""
    try:
        return json.dumps(load_yaml(path), sort_keys=True, default=repr)
    except PackplaceError:
        return None


def check_distinct_files(paths: list[str]) -> None:
    """Refuse a list of validation files in which one run would be scored twice: two files of one setup name
    (a setup is its file name: rows, pairs and folds are keyed by it), or one content under two names (a copy
    of a file; its figures would count twice in every summary and fold): the same YAML once comments and
    layout are set aside (:func:`_content_key`).

    Raises:
        ConfigError: ``[validation] PATH: ...`` naming both paths.
    """
    named: dict[str, str] = {}
    contents: dict[str, str] = {}
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        if name in named:
            raise ConfigError(f"[validation] {path}: a second setup named {name!r} (first: {named[name]}); give "
                              "each file once")
        named[name] = path
        key = _content_key(path)
        if key is None:
            continue
        if key in contents:
            raise ConfigError(f"[validation] {path}: the same content as {contents[key]} (one run under two names: "
                              "its figures would be scored twice); give each file once")
        contents[key] = path


def given_one_file(targets: list[str]) -> bool:
    """Whether ``targets`` (what the user gave ``validate``) is one file, not a folder (a folder holding one
    file included): the one file's refusal is bad input (exit 2), a folder's refused files are rows (exit 1)."""
    return len(targets) == 1 and not os.path.isdir(targets[0])


def validation_files(target: str) -> list[str]:
    """``target`` itself, or the sorted ``*.yaml`` files of ``target`` when it is a directory.

    Raises:
        ConfigError: a directory without ``*.yaml`` files.
    """
    if os.path.isdir(target):
        files = sorted(glob.glob(os.path.join(target, "*.yaml")))
        if not files:
            raise ConfigError(f"validate: no *.yaml files in {target!r}")
        return files
    return [target]
