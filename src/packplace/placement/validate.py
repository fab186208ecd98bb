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
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.config import STALENESS_FIELD, build_instance, load_yaml
from packplace.placement.evaluator import get_evaluator
from packplace.placement.plan import Allocation, Plan, Strategy, VertexPlan

#: A setup passes when every predicted/published ratio lies in this range.
RATIO_RANGE = (1 / 1.3, 1.3)


@dataclass
class ValidationRow:
    """One compared figure: ``setup``, ``phase`` (``step`` or a phase name), seconds predicted and
    published, whether the plan fits in memory under the model (``memory_ok``), the file's ``source`` and
    ``parts``: per vertex of the phase (every vertex for ``step``), its predicted seconds by part
    (``generation``, ``forward``, ``train``, ``old_log_prob``, ``overhead``)."""

    setup: str
    phase: str
    predicted: float
    published: float
    memory_ok: bool
    source: str = ""
    parts: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """``predicted / published``."""
        return self.predicted / self.published

    @property
    def ok(self) -> bool:
        """The ratio lies in :data:`RATIO_RANGE` and the plan fits in memory."""
        return self.memory_ok and RATIO_RANGE[0] <= self.ratio <= RATIO_RANGE[1]

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready fields: ``setup, phase, source, published, predicted, ratio, memory_ok,
        ok, parts`` (seconds)."""
        return {"setup": self.setup, "phase": self.phase, "source": self.source, "published": self.published,
                "predicted": self.predicted, "ratio": self.ratio, "memory_ok": self.memory_ok, "ok": self.ok,
                "parts": self.parts}


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
    stale = _staleness(section["plan"], "validation")
    if stale:  # the published run's staleness is allowed, whatever the search candidates say
        optimizer = dict(cfg.get("optimizer") or {})
        allowed = dict(optimizer.get("staleness_candidates") or {})
        for model, t in stale.items():
            allowed[model] = sorted({0, t, *(allowed.get(model) or [])})
        optimizer["staleness_candidates"] = allowed
        cfg["optimizer"] = optimizer
    instance = build_instance(cfg, source=path)
    return instance, _plan(section["plan"], "validation"), section


def predict(instance, plan: Plan, section: dict[str, Any]
            ) -> tuple[dict[str, float], bool, dict[str, dict[str, float]]]:
    """Predicted seconds of the step and of each phase of ``section['phases']``, whether the plan fits,
    and the predicted parts of every vertex (``{vertex: {part: seconds}}``).

    Raises:
        ConfigError: the plan breaks a hard rule (the evaluator's reason).
    """
    ev = get_evaluator(instance)
    score = ev.score(plan)
    broken = [v for v in score.violations if not v.startswith("out of memory")]
    if broken:
        raise ConfigError(f"[validation] plan: {broken[0]}")
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
    return out, fits, score.phases


def validate(paths: list[str]) -> list[ValidationRow]:
    """One row per published figure of every file in ``paths``."""
    rows = []
    for path in paths:
        instance, plan, section = load_setup(path)
        predicted, fits, parts = predict(instance, plan, section)
        setup = os.path.splitext(os.path.basename(path))[0]
        phases = section.get("phases") or {}
        engine_only = set(section.get("engine_only", ()))
        for phase, published in section["published"].items():
            if phase not in predicted:
                raise ConfigError(f"[validation] {path}: published phase {phase!r} has no entry in 'phases'")
            names = phases.get(phase, list(parts))
            row_parts = {n: {k: v for k, v in parts[n].items() if not (phase in engine_only and k == "overhead")}
                         for n in names}
            rows.append(ValidationRow(setup, phase, predicted[phase], float(published), fits,
                                      str(section.get("source", "")), row_parts))
    return rows


def format_rows(rows: list[ValidationRow]) -> str:
    """The report table."""
    header = f"{'setup':<44} {'phase':<22} {'predicted s':>11} {'published s':>11} {'ratio':>6}  "
    lines = [header, "-" * len(header)]
    for r in rows:
        in_range = RATIO_RANGE[0] <= r.ratio <= RATIO_RANGE[1]
        note = "ok" if r.ok else ("OUT OF RANGE" if not in_range else "FAILS")
        if not r.memory_ok:
            note += " (plan over memory in the model; time scored without the memory check)"
        lines.append(f"{r.setup:<44} {r.phase:<22} {r.predicted:>11.1f} {r.published:>11.1f} {r.ratio:>6.2f}  {note}")
    bad = sum(not r.ok for r in rows)
    lines.append(f"{len(rows) - bad} of {len(rows)} figures within x{RATIO_RANGE[1]} of the published value "
                 "with the plan within memory")
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
