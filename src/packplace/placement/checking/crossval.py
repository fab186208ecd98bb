"""Validation that measures itself out of sample: leave-one-source-out cross-validation and plan pairs.

Every validation file belongs to one publication (``validation.publication``, default its ``source`` up to the
first comma). For each publication ``P`` the declared knobs (``knob:scope``, one value per GPU type or per
framework, :data:`~packplace.placement.checking.calibrate.DEFAULT_SCOPED_KNOBS`) are fitted by
:func:`~packplace.placement.checking.calibrate.fit_published` on the figures of every *other* publication, and
``P``'s figures are predicted with them: that ratio is out of sample. A value whose group has a single run in
the fold is not fitted (a per-run knob; :data:`~packplace.placement.checking.calibrate.MIN_RUNS_PER_VALUE`). A
GPU type or framework that no other publication determines takes the median of the same knob's fitted values
over the fold's other groups (those not at a physical limit), so no preset enters an out-of-sample figure
unless no group was fitted; the row says which. A GPU type whose dense passes a component table prices
(``hardware.component_table``, :data:`TABLE_REPLACED_KNOBS`) has no value of those knobs fitted
(:meth:`Setup.table_replaces`): there they price only what the table does not (mixture-of-experts and LoRA
passes, a preempted sequence's recompute), so a fitted value would not be the dense-pass fraction the other
groups fit, and its rows take the other groups' median when their publication is left out. Every value is
fitted within its physical bounds (:mod:`packplace.placement.checking.knob_bounds`). Files with
``validation.not_fitted`` are scored and summarised but never train a fold, and so are files with a published
figure below its inputs' datasheet floor (:func:`~packplace.placement.checking.validate.floor_reason`: no
efficiency at or below 1 reproduces it).
The configured (preset) ratio is in sample: the presets were set with the rows in view.

Pairs (``validation.pair_with``): two files of one publication, the same job at two placements or cluster
sizes. The published speed-up ``published(A) / published(B)`` of their primary figure (``step`` when
published) is compared with the predicted one, in sample and out of sample (both sides predicted in the
same fold), and whether the predicted order matches the published one.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any

from packplace import progress
from packplace.errors import ConfigError, PackplaceError
from packplace.placement.checking.calibrate import PROFILE_KNOBS, fit_published, knob_applies
from packplace.placement.checking.validate import (
    BELOW_FLOOR,
    check_distinct_files,
    fitted_note,
    floor_reason,
    framework,
    load_setup,
    not_fitted,
    pairs_of,
    predict,
    publication,
    skip_reason,
)
from packplace.placement.model.framework import profile

#: Summary ranges of the predicted/published ratio: the issue's "within" bands.
SUMMARY_BANDS = ((0.8, 1.25), (0.67, 1.5))
#: Knobs whose role in dense passes and decode steps a GPU type's component table takes over
#: (:meth:`~packplace.placement.model.cost.CostModel.components_for`): a value of these fitted on such a GPU
#: type never enters another group's pooled median (module docstring).
TABLE_REPLACED_KNOBS = ("gemm_peak_fraction", "gemm_m_half", "decode_bw_eff")


@dataclass
class Setup:
    """One validation file prepared for fitting: ``name`` (file name without ``.yaml``), its
    ``publication``, ``framework``, ``gpu`` (canonical preset name), ``published`` figures (seconds; empty
    for a skipped file), ``skipped`` reason, its ``pairs`` (``pair_with`` entries) and ``not_fitted``
    (why its figures are scored but never fitted: the declared reason,
    :func:`~packplace.placement.checking.validate.not_fitted`, else
    :func:`~packplace.placement.checking.validate.floor_reason`)."""

    name: str
    instance: Any
    plan: Any
    section: dict[str, Any]
    publication: str
    framework: str
    gpu: str
    published: dict[str, float]
    skipped: str = ""
    pairs: list[dict[str, str]] = field(default_factory=list)
    not_fitted: str = ""

    @property
    def primary(self) -> str:
        """The figure a summary counts once per run: ``step`` when published, else the first figure."""
        return "step" if "step" in self.section["published"] else next(iter(self.section["published"]))

    def group(self, scope: str) -> str:
        """The setup's GPU type (``scope == "gpu"``) or framework."""
        return self.gpu if scope == "gpu" else self.framework

    def base_value(self, knob: str) -> float:
        """The knob's configured value (preset or config override)."""
        return float(getattr(self.instance.hardware, knob))

    def score(self, values: dict[str, float] | None = None) -> tuple[dict[str, float], bool]:
        """``(predicted {figure: seconds}, plan fits in memory)`` with the knobs of ``values`` set."""
        instance = self.instance
        if values:
            instance = replace(instance, hardware=replace(instance.hardware, **values), _cache={})
        predicted, fits, _ = predict(instance, self.plan, self.section)
        return predicted, fits

    def uses_knob(self, knob: str) -> bool:
        """Whether the setup's figures depend on ``knob``: false for a knob of
        :data:`~packplace.placement.checking.calibrate.PROFILE_KNOBS` whose flag the setup's framework profile
        lacks (it then keeps its configured value and is neither fitted nor pooled for this setup)."""
        flag = PROFILE_KNOBS.get(knob)
        return flag is None or bool(getattr(profile(self.instance.framework), flag))

    def figures(self, values: dict[str, float]) -> dict[str, float]:
        """Predicted seconds per figure with ``values`` (for :func:`fit_published`)."""
        return self.score(values)[0]

    def table_replaces(self, knob: str) -> bool:
        """Whether the setup's GPU type has a component table that prices the dense passes and decode steps
        ``knob`` would (:data:`TABLE_REPLACED_KNOBS`): :func:`fit_published` then does not fit the knob's value
        for the GPU type (the rows take the other groups' median when their publication is left out)."""
        return knob in TABLE_REPLACED_KNOBS and _component_table(self) != "none"


def load_setups(paths: list[str], refused: dict[str, str] | None = None, *,
                one_file: bool | None = None) -> list[Setup]:
    """The files of ``paths`` as :class:`Setup` objects. With ``refused`` (a dict), a file refused at
    load is recorded there (``{name: one-line error}``) and left out instead of raised, unless ``paths`` is
    the one file given (``one_file``, as :func:`~packplace.placement.checking.validate.validate` takes it;
    None: ``paths`` holds one path).

    Raises:
        ConfigError: a bad file (without ``refused``), the one file given refused, or two files with one
            name or one content (:func:`~packplace.placement.checking.validate.check_distinct_files`).
    """
    check_distinct_files(paths)
    one_file = len(paths) == 1 if one_file is None else one_file
    out: list[Setup] = []
    first: PackplaceError | None = None
    for path in paths:
        name = os.path.splitext(os.path.basename(path))[0]
        try:
            instance, plan, section = load_setup(path)
        except PackplaceError as exc:
            if refused is None:
                raise
            refused[name] = str(exc)
            first = first or exc
            continue
        skipped = skip_reason(plan, section)
        published = {} if skipped else {f: float(v) for f, v in section["published"].items()}
        reason = not_fitted(section, path) or ("" if skipped else floor_reason(instance, plan, section))
        out.append(Setup(name, instance, plan, section, publication(section), framework(instance, section),
                         section["_gpu"], published, skipped, pairs_of(section), reason))
    if first is not None and one_file:   # the one file given, refused: bad input (a folder's: in ``refused``)
        raise first
    return out


@dataclass
class CrossRow:
    """One figure: published seconds, predicted with the configured knobs (``in_sample``) and with the
    knobs fitted without its publication (``out_of_sample``), ``memory_ok`` and the knobs of its fold kept
    at their configured value (``unfitted``: no other publication determines them and no other group has a
    fitted value) or set to the median of the other groups' fitted values of the fold (``pooled``,
    ``{knob[group]: value}``: no other publication has that GPU type or framework); ``not_fitted``: why
    the file never trains a fold (declared, or a figure below its datasheet floor; its figures are still
    scored and summarised); ``fitted``: the sentence naming the micro-batches ``validate`` fitted because the
    source does not give them (:func:`~packplace.placement.checking.validate.fitted_note`; empty when all are
    published)."""

    setup: str
    figure: str
    publication: str
    framework: str
    gpu: str
    published: float
    in_sample: float
    out_of_sample: float
    memory_ok: bool
    primary: bool
    skipped: str = ""
    unfitted: list[str] = field(default_factory=list)
    not_fitted: str = ""
    pooled: dict[str, float] = field(default_factory=dict)
    fitted: str = ""

    def ratio(self, which: str = "out_of_sample") -> float:
        """``predicted / published`` of ``which`` (``in_sample`` or ``out_of_sample``)."""
        return getattr(self, which) / self.published

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (ratios ``None`` for a skipped row)."""
        scored = not self.skipped
        return {"setup": self.setup, "figure": self.figure, "publication": self.publication,
                "framework": self.framework, "gpu": self.gpu, "published": self.published,
                "in_sample": self.in_sample if scored else None,
                "out_of_sample": self.out_of_sample if scored else None,
                "in_sample_ratio": self.ratio("in_sample") if scored else None,
                "out_of_sample_ratio": self.ratio() if scored else None, "memory_ok": self.memory_ok,
                "primary": self.primary, "skipped": self.skipped, "unfitted": self.unfitted,
                "not_fitted": self.not_fitted, "pooled": self.pooled, "fitted": self.fitted}


def _component_table(setup) -> str:
    """The component table of a setup's hardware (``none`` when it has none, or for a stand-in without an
    instance)."""
    hardware = getattr(getattr(setup, "instance", None), "hardware", None)
    return str(getattr(hardware, "component_table", "none"))


def _label(key: tuple[str, str, str]) -> str:
    return f"{key[0]}[{key[2]}]"


def cross_validate(setups: list[Setup], scoped_knobs) -> dict[str, Any]:
    """Leave-one-publication-out cross-validation of ``setups`` with ``scoped_knobs``. Each finished fold
    reports ``cross-validate: fold i/n done (left out: P), E s elapsed`` through
    :func:`packplace.progress.report` (stderr unless ``--quiet``): a run over the shipped set takes minutes.

    Returns:
        ``{"rows": [CrossRow], "folds": [{"left_out", "knobs", "fixed", "at_limit", "limits" (each at-limit
        knob's side, bound and the bound's source), "bounds" (each fitted value's ``[lower, upper]``),
        "train_setups"}],
        "pairs": [pair dicts, :func:`pair_rows`], "summary": {"in_sample": ..., "out_of_sample": ...}}``.
    """
    started = time.perf_counter()
    scored = [s for s in setups if not s.skipped]
    base = {s.name: s.score() for s in setups}
    out_pred: dict[str, dict[str, float]] = {}
    unfitted: dict[str, list[str]] = {}
    pooled: dict[str, dict[str, float]] = {}
    folds = []
    publications = sorted({s.publication for s in scored})
    # GPU types whose dense passes a component table prices: their TABLE_REPLACED_KNOBS are not pooled
    tabled = {s.group("gpu") for s in setups if _component_table(s) != "none"}
    progress.report(f"cross-validate: {len(setups)} files scored in sample, {len(publications)} folds to fit "
                    f"({time.perf_counter() - started:.0f} s elapsed)")
    for index, pub in enumerate(publications, 1):
        train = [s for s in scored if s.publication != pub and not s.not_fitted]
        fit = fit_published(train, scoped_knobs)
        folds.append({"left_out": pub, "train_setups": [s.name for s in train],
                      "knobs": {_label(k): v for k, v in fit["knobs"].items()},
                      "fixed": {_label(k): {"value": v, "reason": r} for k, (v, r) in fit["fixed"].items()},
                      "at_limit": [_label(k) for k in fit["at_limit"]],
                      "limits": {_label(k): v for k, v in fit["limits"].items()},
                      "bounds": {_label(k): list(v) for k, v in fit["bounds"].items()}})
        for s in scored:
            if s.publication != pub:
                continue
            values, kept = {}, []
            for knob, scope in scoped_knobs:
                if not knob_applies(s, knob):
                    continue
                key = (knob, scope, s.group(scope))
                if key in fit["knobs"]:
                    values[knob] = fit["knobs"][key]
                    continue
                others = [v for k, v in fit["knobs"].items() if k[:2] == (knob, scope) and k not in fit["at_limit"]
                          and not (scope == "gpu" and knob in TABLE_REPLACED_KNOBS and k[2] in tabled)]
                if others:  # no other publication determines this group's value: the other groups' median
                    values[knob] = float(statistics.median(others))
                    pooled.setdefault(s.name, {})[_label(key)] = values[knob]
                else:
                    kept.append(_label(key))
            out_pred[s.name] = s.score(values)[0]
            unfitted[s.name] = kept
        progress.report(f"cross-validate: fold {index}/{len(publications)} done (left out: {pub}), "
                        f"{time.perf_counter() - started:.0f} s elapsed")
    rows = []
    for s in setups:
        predicted, fits = base[s.name]
        for fig, pub_s in s.section["published"].items():
            oos = out_pred.get(s.name, predicted).get(fig, math.nan)
            rows.append(CrossRow(s.name, fig, s.publication, s.framework, s.gpu, float(pub_s), predicted[fig], oos,
                                 fits, fig == s.primary, s.skipped, unfitted.get(s.name, []), s.not_fitted,
                                 pooled.get(s.name, {}), fitted_note(s.section.get("_fitted", {}))))
    in_step = {s.name: base[s.name][0][s.primary] for s in scored}
    out_step = {s.name: out_pred[s.name][s.primary] for s in scored}
    return {"rows": rows, "folds": folds, "pairs": pair_rows(setups, in_step, out_step),
            "summary": {"in_sample": summarize(rows, "in_sample"), "out_of_sample": summarize(rows),
                        "out_of_sample_every_run": summarize(rows, every_run=True)}}


def below_floor(row: CrossRow) -> bool:
    """The run's published figure is below its inputs' datasheet floor
    (:func:`~packplace.placement.checking.validate.floor_reason`): no model can reproduce it from the file's inputs,
    so its ratio measures the estimated inputs (unpublished lengths), not the model."""
    return row.not_fitted.startswith(BELOW_FLOOR)


def summarize(rows: list[CrossRow], which: str = "out_of_sample", every_run: bool = False) -> dict[str, Any]:
    """Over the primary figure of every scored run: ``runs``, ``median`` ratio, the share within each band
    of :data:`SUMMARY_BANDS` (``within_0.8-1.25``, ``within_0.67-1.5``), ``out_of_memory`` (published
    placements the memory model judges over capacity), ``skipped`` runs and ``below_floor`` runs (published
    below their inputs' datasheet floor, :func:`below_floor`), which the bands leave out unless
    ``every_run``."""
    primary = [r for r in rows if r.primary and not r.skipped and (every_run or not below_floor(r))]
    ratios = [r.ratio(which) for r in primary]
    out: dict[str, Any] = {"runs": len(primary), "median": statistics.median(ratios) if ratios else None}
    for lo, hi in SUMMARY_BANDS:
        out[f"within_{lo:g}-{hi:g}"] = (sum(lo <= x <= hi for x in ratios) / len(ratios)) if ratios else None
    out["out_of_memory"] = sum(not r.memory_ok for r in primary)
    out["skipped"] = sum(1 for r in rows if r.primary and r.skipped)
    out["below_floor"] = sum(1 for r in rows if r.primary and not r.skipped and below_floor(r))
    return out


def pair_rows(setups: list[Setup], in_step: dict[str, float], out_step: dict[str, float] | None = None
              ) -> list[dict[str, Any]]:
    """One dict per ``pair_with`` entry (``b`` pairs with ``a``): ``a, b, what, published`` (speed-up
    ``published(a) / published(b)`` of the primary figure), ``in_sample`` and ``out_of_sample`` predicted
    speed-ups, their ratios to the published one, ``order_ok`` (same side faster) per kind, and
    ``skipped`` (the reason when a side is not scored)."""
    by_name = {s.name: s for s in setups}
    out = []
    for b in setups:
        for pair in b.pairs:
            a = by_name.get(pair["setup"])
            if a is None:  # its partner is not among the files validated
                out.append({"a": pair["setup"], "b": b.name, "what": pair["what"], "published": None,
                            "skipped": f"{pair['setup']} is not among the files validated", **{
                                f"{k}{x}": None for k in ("in_sample", "out_of_sample")
                                for x in ("", "_ratio", "_order_ok")}})
                continue
            entry: dict[str, Any] = {"a": a.name, "b": b.name, "what": pair["what"],
                                     "published": float(a.section["published"][a.primary])
                                     / float(b.section["published"][b.primary])}
            if a.publication != b.publication:
                raise ConfigError(f"[validation] {b.name}: pair_with {a.name!r} is from another publication "
                                  f"({a.publication!r} vs {b.publication!r}); a pair compares one source's runs")
            side = a.skipped or b.skipped or next(
                (f"{x.name}: published {BELOW_FLOOR}" for x in (a, b) if x.not_fitted.startswith(BELOW_FLOOR)), "")
            entry["skipped"] = side
            for kind, step in (("in_sample", in_step), ("out_of_sample", out_step)):
                if side or step is None:
                    entry[kind] = entry[f"{kind}_ratio"] = entry[f"{kind}_order_ok"] = None
                    continue
                speedup = step[a.name] / step[b.name]
                entry[kind] = speedup
                entry[f"{kind}_ratio"] = speedup / entry["published"]
                entry[f"{kind}_order_ok"] = (speedup > 1) == (entry["published"] > 1)
            out.append(entry)
    return out


def format_cross_validation(result: dict[str, Any]) -> str:
    """The report: per figure the in-sample and out-of-sample ratios, the summaries, pairs and fold knobs
    (one line saying none was fitted where no file was scored)."""
    header = (f"{'setup':<50} {'figure':<30} {'published s':>11} {'in-sample':>9} {'out-of-sample':>13}  note")
    lines = ["per figure: predicted / published (in-sample: the configured knobs, chosen with rows in view; "
             "out-of-sample: knobs fitted without the row's publication)", header, "-" * len(header)]
    for r in result["rows"]:
        if r.skipped:
            lines.append(f"{r.setup:<50} {r.figure:<30} {r.published:>11.1f} {'-':>9} {'-':>13}  SKIPPED: {r.skipped}")
            continue
        notes = [] if r.memory_ok else ["plan over memory in the model"]
        if r.pooled:
            notes.append("other groups' median: " + ", ".join(f"{k} {v:.3g}" for k, v in r.pooled.items()))
        if r.unfitted:
            notes.append("kept at preset: " + ", ".join(r.unfitted))
        if r.not_fitted and r.primary:
            notes.append(f"never fitted ({BELOW_FLOOR})" if r.not_fitted.startswith(BELOW_FLOOR)
                         else "never fitted (validation.not_fitted)")
        lines.append(f"{r.setup:<50} {r.figure:<30} {r.published:>11.1f} {r.ratio('in_sample'):>9.2f} "
                     f"{r.ratio():>13.2f}  {'; '.join(notes)}")
    lines.append("")
    lines.append("summary over each run's primary figure (step when published):")
    lines.append(f"  {'':<14} {'runs':>4} {'median':>7} {'0.8-1.25':>9} {'0.67-1.5':>9} {'over memory':>11} "
                 f"{'skipped':>7} {'below floor':>11}")
    for kind, label in (("in_sample", "in-sample"), ("out_of_sample", "out-of-sample"),
                        ("out_of_sample_every_run", "  every run")):
        sm = result["summary"][kind]
        med = f"{sm['median']:.2f}" if sm["median"] is not None else "-"
        shares = [f"{sm[k]:.0%}" if sm[k] is not None else "-" for k in ("within_0.8-1.25", "within_0.67-1.5")]
        floor = "counted" if kind.endswith("every_run") else f"{sm['below_floor']}"
        lines.append(f"  {label:<14} {sm['runs']:>4} {med:>7} {shares[0]:>9} {shares[1]:>9} "
                     f"{sm['out_of_memory']:>11} {sm['skipped']:>7} {floor:>11}")
    lines.append("  (below floor: published faster than the datasheet allows for the file's estimated inputs; "
                 "left out of the bands above, counted in 'every run')")
    lines += ["", format_pairs(result["pairs"]), ""]
    if not result["folds"]:   # every file refused, or none given: no header over an empty list
        lines.append("knobs fitted per fold: none (no file was scored, so no fold was fitted)")
        return "\n".join(lines)
    lines.append("knobs fitted per fold (left-out publication):")
    for fold in result["folds"]:
        knobs = ", ".join(f"{k} {v:.3g}" for k, v in fold["knobs"].items()) or "none"
        lines.append(f"  without {fold['left_out']}: {knobs}")
        for k, info in fold["fixed"].items():
            lines.append(f"    {k} kept at {info['value']:.3g}: {info['reason']}")
        for k in fold["at_limit"]:
            limit = fold["limits"][k]
            lines.append(f"    warning: {k} ended at its physical {limit['side']} bound {limit['bound']:.3g} "
                         f"({limit['source']})")
    return "\n".join(lines)


def format_pairs(pairs: list[dict[str, Any]]) -> str:
    """The pairs section: published and predicted speed-ups ``a / b`` and whether the order matches."""
    if not pairs:
        return "pairs: none declared (validation.pair_with)"
    header = (f"{'pair (speed-up = a / b)':<100} {'published':>9} {'in-sample':>9} {'out-of-sample':>13} "
              f"{'ratio':>6} {'order':>5}")
    lines = ["pairs: predicted speed-up against the published one", header, "-" * len(header)]
    for p in pairs:
        name = f"{p['a']} / {p['b']}"
        if p["skipped"]:
            published = f"{p['published']:>9.2f}" if p["published"] is not None else f"{'-':>9}"
            lines.append(f"{name:<100} {published} {'-':>9} {'-':>13} {'-':>6} {'-':>5}  SKIPPED: {p['skipped']}")
            continue
        oos = p["out_of_sample"]
        ratio_of = p["out_of_sample_ratio"] if oos is not None else p["in_sample_ratio"]
        order = p["out_of_sample_order_ok"] if oos is not None else p["in_sample_order_ok"]
        oos_text = f"{oos:>13.2f}" if oos is not None else f"{'-':>13}"
        lines.append(f"{name:<100} {p['published']:>9.2f} {p['in_sample']:>9.2f} {oos_text} {ratio_of:>6.3f} "
                     f"{'yes' if order else 'NO':>5}")
        if p["what"]:
            lines.append(f"    {p['what']}")
    scored = [p for p in pairs if not p["skipped"]]
    if scored:
        kind = "out_of_sample" if scored[0]["out_of_sample"] is not None else "in_sample"
        within = sum(0.8 <= p[f"{kind}_ratio"] <= 1.25 for p in scored)
        ordered = sum(bool(p[f"{kind}_order_ok"]) for p in scored)
        lines.append(f"{within} of {len(scored)} pairs within 0.8-1.25 of the published speed-up, {ordered} of "
                     f"{len(scored)} ordered as published ({kind.replace('_', '-')}); "
                     f"{len(pairs) - len(scored)} skipped")
    return "\n".join(lines)
