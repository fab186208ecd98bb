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
:mod:`packplace.placement.crossval`; default: ``source`` up to its first comma), ``framework``,
``pair_with`` (:data:`PAIR_KEYS`) and ``not_fitted`` (:func:`not_fitted`). A row whose declared staleness
the plan does not carry is flagged and skipped, never scored as synchronous.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.candidates import CandidateTable
from packplace.placement.config import STALENESS_FIELD, build_instance, load_yaml
from packplace.placement.evaluator import PlacementEvaluator
from packplace.placement.hardware import PRESETS
from packplace.placement.plan import Allocation, Plan, Strategy, VertexPlan

#: A setup passes when every predicted/published ratio lies in this range.
RATIO_RANGE = (1 / 1.3, 1.3)
#: Keys of the validation section (anything else is a typo).
SECTION_KEYS = ("source", "url", "publication", "framework", "published", "phases", "engine_only", "plan",
                "pair_with", "note", "not_fitted")
#: Start of :func:`floor_reason`'s sentence (a published figure below its inputs' datasheet floor).
BELOW_FLOOR = "below its inputs' datasheet floor"
#: Keys of one ``pair_with`` entry: the other setup's file name without ``.yaml`` and what changes.
PAIR_KEYS = ("setup", "what")


@dataclass
class ValidationRow:
    """One compared figure: ``setup``, ``phase`` (``step`` or a phase name), seconds predicted and
    published, whether the plan fits in memory under the model (``memory_ok``), the file's ``source`` and
    ``parts``: per vertex of the phase (every vertex for ``step``), its predicted seconds by part
    (``generation``, ``forward``, ``train``, ``old_log_prob``, ``overhead``) and ``floor``: the figure's
    datasheet lower bound for the file's workload (:func:`flop_floor`, seconds)."""

    setup: str
    phase: str
    predicted: float
    published: float
    memory_ok: bool
    source: str = ""
    parts: dict[str, dict[str, float]] = field(default_factory=dict)
    skipped: str = ""
    floor: float = 0.0

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
        """The ratio lies in :data:`RATIO_RANGE` and the plan fits in memory (never for a skipped row)."""
        return not self.skipped and self.memory_ok and RATIO_RANGE[0] <= self.ratio <= RATIO_RANGE[1]

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready fields: ``setup, phase, source, published, predicted, ratio, memory_ok,
        ok, parts`` (seconds), ``skipped`` (the reason, empty when scored), ``floor`` (seconds) and
        ``below_floor``."""
        return {"setup": self.setup, "phase": self.phase, "source": self.source, "published": self.published,
                "predicted": self.predicted, "ratio": self.ratio, "memory_ok": self.memory_ok, "ok": self.ok,
                "parts": self.parts, "skipped": self.skipped, "floor": self.floor,
                "below_floor": self.below_floor}


def _staleness(spec: Any, where: str) -> dict[str, int]:
    """The plan's ``staleness`` mapping ``{model: steps}`` (empty when absent)."""
    raw = spec.get("staleness") if isinstance(spec, dict) else None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"[{where}] plan.staleness: must be a mapping of model -> steps, got {raw!r}")
    return {str(m): STALENESS_FIELD.check(t, f"[{where}] plan.staleness.{m}") for m, t in raw.items()}


def _plan(spec: Any, where: str) -> Plan:
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"[{where}] plan: must be a mapping of vertex -> placement, got {spec!r}")
    vertices = {}
    for name, v in spec.items():
        if name == "staleness":
            continue
        try:
            vertices[name] = VertexPlan(Strategy(int(v["dp"]), int(v["pp"]), int(v["tp"]), int(v.get("ep", 1))),
                                        int(v["micro_batch"]), Allocation(tuple(v["origin"]), tuple(v["extent"])))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"[{where}] plan.{name}: needs dp, pp, tp, micro_batch, origin, extent and "
                              f"optionally ep ({exc})") from None
    return Plan.build(vertices, _staleness(spec, where))


def load_setup(path: str) -> tuple[Any, Plan, dict[str, Any]]:
    """``(instance, plan, validation section)`` of one validation file.

    Raises:
        ConfigError: a missing ``validation`` section or a malformed plan (one line naming the field).
    """
    cfg = load_yaml(path)
    section = cfg.pop("validation", None)
    if not isinstance(section, dict) or "published" not in section or "plan" not in section:
        raise ConfigError(f"[validation] {path}: needs a validation section with 'published' and 'plan'")
    unknown = sorted(set(section) - set(SECTION_KEYS))
    if unknown:
        raise ConfigError(f"[validation] {path}: unknown key {unknown[0]!r}; valid: {', '.join(SECTION_KEYS)}")
    stale = _staleness(section["plan"], "validation")
    if stale:  # the published run's staleness is allowed, whatever the search candidates say
        optimizer = dict(cfg.get("optimizer") or {})
        allowed = dict(optimizer.get("staleness_candidates") or {})
        for model, t in stale.items():
            allowed[model] = sorted({0, t, *(allowed.get(model) or [])})
        optimizer["staleness_candidates"] = allowed
        cfg["optimizer"] = optimizer
    instance = build_instance(cfg, source=path)
    section = dict(section)
    preset = (cfg.get("hardware") or {}).get("preset")
    section["_gpu"] = next((k for k, v in PRESETS.items() if v is PRESETS.get(preset)), preset) or "custom"
    return instance, _plan(section["plan"], "validation"), section


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
    when the instance has one (``unknown`` when neither is given)."""
    value = section.get("framework") or getattr(instance, "framework", None)
    return str(getattr(value, "name", value) or "unknown")


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


def pairs_of(section: dict[str, Any], where: str) -> list[dict[str, str]]:
    """The ``pair_with`` entries of a section as ``[{"setup": ..., "what": ...}]``.

    Raises:
        ConfigError: an entry without ``setup`` or with an unknown key.
    """
    spec = section.get("pair_with") or []
    entries = spec if isinstance(spec, list) else [spec]
    out = []
    for entry in entries:
        if isinstance(entry, str):
            entry = {"setup": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("setup"), str) or set(entry) - set(PAIR_KEYS):
            raise ConfigError(f"[validation] {where}: pair_with entries need 'setup' (a file name without .yaml) "
                              f"and optionally 'what'; got {entry!r}")
        out.append({"setup": entry["setup"], "what": str(entry.get("what", ""))})
    return out


def plan_evaluator(instance, plan: Plan) -> PlacementEvaluator:
    """An evaluator whose candidate table holds only ``plan``'s candidates (scoring one known plan)."""
    return PlacementEvaluator(instance, CandidateTable(instance, plan))


def predict(instance, plan: Plan, section: dict[str, Any]
            ) -> tuple[dict[str, float], bool, dict[str, dict[str, float]]]:
    """Predicted seconds of the step and of each phase of ``section['phases']``, whether the plan fits,
    and the predicted parts of every vertex (``{vertex: {part: seconds}}``).

    Raises:
        ConfigError: the plan breaks a hard rule (the evaluator's reason).
    """
    predicted, fits, phases, _ = _predict(instance, plan, section)
    return predicted, fits, phases


def flop_floor(instance, plan: Plan, section: dict[str, Any]) -> dict[str, float]:
    """Datasheet lower bound of every published figure, seconds: the model FLOPs the figure's vertices
    must run for the file's workload, at the whole dense peak of their GPUs (``{figure: seconds}``).

    A vertex's floor is ``FLOPs / (GPUs · flops_per_gpu)`` with the strategy-independent FLOPs of
    :meth:`~packplace.placement.cost.CostModel.vertex_flops` (training ``3×`` a forward pass over the
    ``B·K·(S + mean response)`` packed tokens, inference and generation ``1×``) plus, for a training
    vertex that recomputes the old log-probs, one more forward pass; no recomputation, communication,
    overhead or efficiency below 1 (Kaplan et al. 2020, Table 1: ``2N`` FLOPs per token forward, ``6N``
    forward and backward). The attention term uses the mean length, less than the mean of the squared
    lengths, so the floor stays a lower bound. A figure spans its phase's vertices (every vertex for
    ``step``); the vertices sharing a GPU take turns on it (a synchronous step runs each once; an
    asynchronous period too), so the figure lasts at least the largest sum of floors over one GPU's
    vertices. A published figure below its floor cannot come from the file's workload on the file's
    GPUs at any efficiency: the inputs (lengths, batch) are not those of the run."""
    return _predict(instance, plan, section)[3]


def floor_reason(instance, plan: Plan, section: dict[str, Any]) -> str:
    """Why a file's figures cannot determine an efficiency knob: the first published figure shorter than
    its datasheet floor (:func:`flop_floor`), as a sentence naming figure, published and floor seconds;
    empty when every figure is above its floor. No efficiency at or below 1 reproduces such a figure, so a
    fit it entered would be pulled to the knob's physical limit by inputs that are not the run's."""
    floors = flop_floor(instance, plan, section)
    for fig, published in section["published"].items():
        if float(published) < floors.get(fig, 0.0):
            return (f"{BELOW_FLOOR}: published {fig} {float(published):.1f} s < {floors[fig]:.1f} s at the "
                    "whole dense peak for the file's workload")
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
    return out, fits, score.phases, floors


def validate(paths: list[str]) -> list[ValidationRow]:
    """One row per published figure of every file in ``paths``."""
    rows = []
    for path in paths:
        instance, plan, section = load_setup(path)
        predicted, fits, parts, floors = _predict(instance, plan, section)
        setup = os.path.splitext(os.path.basename(path))[0]
        skipped = skip_reason(plan, section)
        phases = section.get("phases") or {}
        engine_only = set(section.get("engine_only", ()))
        for phase, published in section["published"].items():
            if phase not in predicted:
                raise ConfigError(f"[validation] {path}: published phase {phase!r} has no entry in 'phases'")
            names = phases.get(phase, list(parts))
            row_parts = {n: {k: v for k, v in parts[n].items() if not (phase in engine_only and k == "overhead")}
                         for n in names}
            rows.append(ValidationRow(setup, phase, predicted[phase], float(published), fits,
                                      str(section.get("source", "")), row_parts, skipped, floors[phase]))
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
    header = f"{'setup':<50} {'phase':<30} {'predicted s':>11} {'published s':>11} {'ratio':>6}  "
    lines = [header, "-" * len(header)]
    for r in rows:
        if r.skipped:
            lines.append(f"{r.setup:<50} {r.phase:<30} {'-':>11} {r.published:>11.1f} {'-':>6}  SKIPPED: {r.skipped}")
            continue
        in_range = RATIO_RANGE[0] <= r.ratio <= RATIO_RANGE[1]
        note = "ok" if r.ok else ("OUT OF RANGE" if not in_range else "FAILS")
        if not r.memory_ok:
            note += " (plan over memory in the model; time scored without the memory check)"
        if r.below_floor:
            note += f" (published {BELOW_FLOOR} {r.floor:.1f} s: the inputs are not the run's)"
        lines.append(f"{r.setup:<50} {r.phase:<30} {r.predicted:>11.1f} {r.published:>11.1f} {r.ratio:>6.2f}  {note}")
    scored = [r for r in rows if not r.skipped]
    bad = sum(not r.ok for r in scored)
    lines.append(f"{len(scored) - bad} of {len(scored)} figures within x{RATIO_RANGE[1]} of the published value "
                 "with the plan within memory" + (f"; {len(rows) - len(scored)} skipped" if len(scored) < len(rows)
                                                   else ""))
    return "\n".join(lines)


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
