"""What would make a placement that does not fit in memory fit, and what it costs.

When no plan fits (a task fits on no block of the cluster, or no solver finds a plan), :func:`fit_hints`
re-evaluates the instance (within :data:`HINTS_BUDGET_S` seconds in all) with each memory-saving setting of
:data:`SETTINGS` applied to every trained model: full activation recomputation (``training: {recompute: full}``:
every layer's input kept, the layer recomputed in the backward), ZeRO-3 sharding (``training: {sharding: zero3}``), host
offload of the optimizer state or of the parameters too, the inference-only models' weights in host memory
(``policy.inference_offload``), verl's / NeMo RL's Megatron trainer backend (more tensor and pipeline
parallelism than FSDP allows there), or LoRA adapters. Each setting that fits is planned with the
``greedy`` solver under a short time limit; the line names the setting, its step time and what the setting
costs on that plan: its step time against the same plan scored with the instance's own settings and memory
not counted (the evaluator's ``relaxed_step_time``), e.g. "fits with training: {sharding: zero3}: step
59.5 s (step +12.0% over the same plan without it, memory aside)". A setting the framework cannot run
(:func:`~packplace.placement.model.layout_rules.config_refusals`) is skipped. Settings that change what is
trained (LoRA) are listed last: they fit at another model's quality, not only another speed.

Where verl's FSDP passes run padded rows (``policy.use_remove_padding`` false, or unset at a release whose
default is false: :func:`~packplace.placement.model.framework.verl_padded_roles`), the instance with the key true
is tried first (:func:`unpadded`) and, where it fits, named first whatever its step time, as the cause ("fits with
policy: {use_remove_padding: true} (verl's actor_rollout_ref.model.use_remove_padding; padding is the cause: ...)
..."); where it does not, nothing is said of it. The check's refusal of a cluster too small for some task, which
tries no other setting, adds that line alone (:func:`padding_hint`).

A config with NeMo RL's sequence packing (``policy.train_mb_tokens`` / ``logprob_mb_tokens``) is also tried
with the largest packs under which every policy task fits on its own (:func:`largest_fitting_packs`:
computed from the memory model by bisection, not a guessed fraction), planned and reported like the
settings above ("fits with policy: {train_mb_tokens: 6144, logprob_mb_tokens: 8192} (the largest packs
that fit) ...").
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from packplace.errors import ConfigError, InfeasibleError
from packplace.placement.candidates import TableBuildTimeout, cost_model, fit_alone, fits_alone
from packplace.placement.evaluator import get_evaluator, get_table
from packplace.placement.model.framework import (
    VERL_REMOVE_PADDING_ROLES,
    VERL_REMOVE_PADDING_SINCE,
    table_release,
    verl_padded_roles,
)
from packplace.placement.model.layout_rules import Context, config_refusals
from packplace.placement.model.memory import DEFAULT_TRAINING, lora_params
from packplace.placement.model.sequence_packing import pad_multiple, padded_length
from packplace.run import clock

#: Settings tried, in order: ``(label, training overrides for every trained model, policy overrides)``.
SETTINGS: tuple[tuple[str, dict[str, Any], dict[str, Any]], ...] = (
    ("training: {recompute: full}", {"recompute": "full"}, {}),
    ("training: {sharding: zero3}", {"sharding": "zero3"}, {}),
    ("training: {offload: optimizer}", {"offload": "optimizer"}, {}),
    ("training: {sharding: zero3, offload: optimizer}", {"sharding": "zero3", "offload": "optimizer"}, {}),
    ("training: {sharding: zero3, offload: optimizer+params}", {"sharding": "zero3", "offload": "optimizer+params"},
     {}),
    ("policy: {inference_offload: reference+reward}", {}, {"inference_offload": "reference+reward"}),
    ("training: {sharding: zero3}, policy: {inference_offload: reference+reward}", {"sharding": "zero3"},
     {"inference_offload": "reference+reward"}),
    ("policy: {trainer_backend: megatron} (tensor and pipeline parallelism for the trainers)", {},
     {"trainer_backend": "megatron"}),
    ("training: {lora_rank: 64} (LoRA: other trained weights)", {"lora_rank": 64}, {}),
)
#: Seconds the ``greedy`` solver gets for each setting.
HINT_TIME_LIMIT_S = 3.0
#: Seconds all settings together may take (candidate tables and solves); the settings not reached are
#: not reported.
HINTS_BUDGET_S = 15.0
#: Times the sequence-packing hint halves both packs when the largest under which each task fits alone plans
#: nothing (colocated tasks share the GPUs).
PACK_HALVINGS = 4
#: How the check words a proof that no plan fits by a layout rule (a task the framework runs on GPUs of its own
#: finds none free), not by memory (``"[hardware] memory_per_gpu: ..."``).
RULE_PROOF = "[policy] framework: "
#: The label of the smaller-sequence-packs setting among the settings a layout rule refuses.
PACKS_LABEL = "policy: {train_mb_tokens, logprob_mb_tokens} smaller"
#: The order :func:`_fitting` gives the remove-padding hint (before the packs' 0 and the settings' 1, 2, ...).
UNPAD_ORDER = -1
#: Set while :func:`fit_hints` plans the variants (their own failures are not hinted again).
_ACTIVE: list[bool] = []


def hinting() -> bool:
    """Whether a :func:`fit_hints` call is planning its variants now."""
    return bool(_ACTIVE)


def _variant(instance, training: dict[str, Any], policy: dict[str, Any]):
    """``instance`` with ``training`` applied to every trained model and ``policy`` fields set; ``None``
    when nothing changes or the framework cannot run it (not an option of that framework: skipped, not
    reported)."""
    options = {}
    # a sharding the hint sets, or a backend it forces, is the config's own: it no longer follows the backend
    given = {"sharding_follows_backend": False} if "sharding" in training or policy.get(
        "trainer_backend", "auto") != "auto" else {}
    for model in ("actor", "critic"):
        if model not in instance.models:
            continue
        current = instance.training.get(model, DEFAULT_TRAINING)
        try:
            options[model] = replace(current, **training, **given)
            lora_params(instance.models[model], options[model].lora_rank)   # a MoE or MLA model takes no LoRA
        except (ConfigError, TypeError, ValueError):
            return None
    changed = any(options[m] != instance.training.get(m, DEFAULT_TRAINING) for m in options) or any(
        getattr(instance, k) != v for k, v in policy.items())
    if not changed:
        return None
    variant = replace(instance, training=options, _cache={}, **policy)
    if config_refusals(Context.of(variant)):
        return None
    return variant


def _padded_roles(instance) -> frozenset[str]:
    """The roles whose verl FSDP passes run padded rows in ``instance``
    (:func:`~packplace.placement.model.framework.verl_padded_roles` of its framework, release and keys)."""
    return verl_padded_roles(instance.framework, getattr(instance, "framework_version", None),
                             getattr(instance, "use_remove_padding", None), instance.models,
                             getattr(instance, "reward_use_remove_padding", None))


def unpadded(instance):
    """``instance`` with ``policy.use_remove_padding`` true, where its verl FSDP passes of the actor, the reference
    or the critic run padded rows (:func:`~packplace.placement.model.framework.verl_padded_roles`: the key false,
    or unset at a release whose default is false) and the release has the key
    (:data:`~packplace.placement.model.framework.VERL_REMOVE_PADDING_SINCE`, or no ``framework_version``); else
    ``None``. The reward model's own key (``policy.reward_use_remove_padding``) is left as it is."""
    if instance.framework != "verl" or getattr(instance, "use_remove_padding", None):
        return None
    version = getattr(instance, "framework_version", None)
    if version is not None and table_release(version) < VERL_REMOVE_PADDING_SINCE:
        return None
    padded = _padded_roles(instance)
    if not padded.intersection(VERL_REMOVE_PADDING_ROLES):
        return None
    return replace(instance, use_remove_padding=True, _cache={})


def unpad_label(instance) -> str:
    """The remove-padding hint's label: the setting, verl's keys it sets, and that the padded rows are the cause
    (the roles :func:`~packplace.placement.model.framework.verl_padded_roles` pads now; with the dynamic batch
    size, as many rows a micro-batch as the token budget admits)."""
    padded = _padded_roles(instance)
    roles = [r for r in VERL_REMOVE_PADDING_ROLES if r in padded]
    keys = "actor_rollout_ref.model.use_remove_padding" + (
        " and critic.model.use_remove_padding" if "critic" in instance.models else "")
    budget = "" if getattr(instance, "dynamic_bsz", None) is None else (
        ", as many rows a micro-batch as its real tokens admit under ppo_max_token_len_per_gpu / "
        "log_prob_max_token_len_per_gpu")
    names = roles[0] if len(roles) == 1 else f"{', '.join(roles[:-1])} and {roles[-1]}"
    return (f"policy: {{use_remove_padding: true}} (verl's {keys}; padding is the cause: each FSDP pass of the "
            f"{names} now runs every sequence as a row padded to context_length + generation_length{budget})")


def smallest_pack(instance) -> int:
    """Tokens of the smallest pack NeMo RL accepts for ``instance``: its longest sequence (prompt + response
    caps) rounded up to the pad multiple at tensor-parallel size 1."""
    w = instance.workload
    return padded_length(w.context_length + w.generation_length,
                         pad_multiple(1, Context.of(instance).context_parallel))


def largest_fitting_packs(instance) -> tuple[int, int] | None:
    """The largest ``(train_mb_tokens, logprob_mb_tokens)``, each at most the instance's own, under which every
    task of NeMo RL's policy workers (the training vertex and the reference forward; their activations and
    logits are a pack's: :meth:`~packplace.placement.model.cost.CostModel.peak_pass_tokens`) has a candidate
    that fits in memory on its own (:func:`~packplace.placement.candidates.fits_alone`); ``None`` without
    sequence packing, when the instance's packs already fit so, or when not even packs of the longest
    sequence (rounded up to the pad multiple at tensor-parallel size 1) do.

    Fitting is monotone in each pack size (a pack's activations and logits grow with its tokens), so the
    sizes are found by bisection: the largest pair on the line from the smallest legal pack to the
    instance's (their ratio kept), then the log-prob pack raised alone, then the training pack.
    """
    packs = getattr(instance, "sequence_packing", None)
    if packs is None:
        return None
    cost = cost_model(instance)
    names = [v.name for v in instance.graph.vertices
             if v.kind != "generate" and cost.for_role(v.model).packed(instance.models[v.model])]

    def fits(train: int, logprob: int) -> bool:
        variant = replace(instance, sequence_packing=(train, logprob), _cache={})
        return all(fits_alone(variant, cost_model(variant), name) for name in names)

    def largest(low: int, high: int, ok) -> int:     # the largest x in [low, high] with ok(x), ok(low) true
        while low < high:
            mid = (low + high + 1) // 2
            if ok(mid):
                low = mid
            else:
                high = mid - 1
        return low

    train0, logprob0 = packs
    if not names or fits(train0, logprob0):
        return None
    smallest = smallest_pack(instance)
    if not fits(smallest, smallest):
        return None

    def along(t: int) -> int:
        return max(smallest, min(logprob0, logprob0 * t // train0))

    train = largest(smallest, train0, lambda t: fits(t, along(t))) if fits(smallest, along(smallest)) else smallest
    logprob = largest(along(train) if fits(train, along(train)) else smallest, logprob0,
                      lambda x: fits(train, x))
    train = largest(train, train0, lambda t: fits(t, logprob))
    return train, logprob


def may_fit(instance) -> bool:
    """The fit hints' memory-only screen of a setting's instance, before its candidate table is priced (time
    included) and the greedy solver plans it: False where every task has a legal strategy and some task has no
    candidate that fits in memory on its own (:func:`~packplace.placement.candidates.fit_alone`, the table's
    :attr:`~packplace.placement.candidates.Candidate.fits` rule), where the table would list that task with no
    feasible candidate and the hint would be dropped all the same; True otherwise (a task with no legal strategy is
    left to the table, whose refusal names the layout rule). It changes no hint, only skips the pricing that would
    end in none.

    Raises:
        ConfigError: as the table's memory pricing raises it.
    """
    cost = cost_model(instance)
    verdicts = [fit_alone(instance, cost, vertex.name) for vertex in instance.graph.vertices]
    return not all(legal for legal, _ in verdicts) or all(fits for _, fits in verdicts)


def with_hints(message: str, instance, *, deadline: float | None = None) -> str:
    """``message`` followed by :func:`fit_hints` (``"; fits with ..."``), tried until ``deadline`` (a
    ``packplace.run.clock()`` reading; None: :data:`HINTS_BUDGET_S` from now), and "not all tried" where the
    deadline stopped a setting first; when none fits, with "no memory-saving setting tried fits" (or, when the
    deadline stopped them first, that not all were tried),
    and where a layout rule, not memory, refused settings (a task keeps no
    legal strategy under them, or a task the framework runs on GPUs of its own finds none free) the rules, each
    once, with the settings they refused."""
    hints, refused, cut = _report(instance, deadline=deadline)
    not_all = ("the memory-saving settings were not all tried: the time limit ran out first (a longer limit tries "
               "them)")
    if hints:
        return f"{message}; {'; '.join(hints)}" + (f"; {not_all}" if cut else "")
    if cut:
        return f"{message}; {not_all}"
    packed = getattr(instance, "sequence_packing", None) is not None
    total = len(SETTINGS) + packed
    tried = (f"no memory-saving setting tried ({total}: full recompute, zero3, offload, host-held inference weights, "
             f"the Megatron trainer backend, LoRA{', smaller sequence packs' if packed else ''}) fits")
    if not refused:
        return f"{message}; {tried} either"
    rules: dict[str, list[str]] = {}
    for label, rule in refused:
        rules.setdefault(rule, []).append(label)

    def which(labels: list[str]) -> str:
        distinct = list(dict.fromkeys(labels))
        if len(distinct) == total:
            return "every setting"
        return "; ".join(distinct) if len(distinct) <= 4 else f"{len(distinct)} settings"

    named = [f"the layout rule above ({which(labels)})" if rule in message
             else f"{rule} ({which(labels)})" for rule, labels in rules.items()]
    count = len({label for label, _ in refused})
    of = f"all {count}" if count == total else f"{count}"
    return f"{message}; {tried}, and a layout rule, not memory, refuses {of} of them: {'; '.join(named)}"


def fit_hints(instance, max_hints: int = 3) -> list[str]:
    """Lines naming the settings of :data:`SETTINGS` under which ``instance`` fits, fastest first (at most
    ``max_hints``; LoRA last), each with the ``greedy`` plan's step time and what the setting costs on it
    (module docstring); empty when none fits. Never raises on an instance that does not fit."""
    return _report(instance, max_hints)[0]


def _report(instance, max_hints: int = 3, deadline: float | None = None,
            ) -> tuple[list[str], list[tuple[str, str]], bool]:
    """``(fit_hints lines, [(setting label, layout rule that refused it)], cut)``: :func:`fit_hints` and, for
    the settings that do not fit because of a framework's layout rule rather than memory, that rule (one
    line); ``cut``: ``deadline`` (a ``packplace.run.clock()`` reading) stopped a setting before it was
    decided."""
    from packplace.placement import api  # the placement front-end solves each variant

    if _ACTIVE:
        return [], [], False
    _ACTIVE.append(True)
    refused: list[tuple[str, str]] = []
    cut: list[str] = []
    try:
        found = _fitting(instance, api, refused, deadline, cut)
    finally:
        _ACTIVE.pop()
    if not found:
        return [], refused, bool(cut)
    changes_model = [f for f in found if "LoRA" in f[2]]
    unpad = [f for f in found if f[1] == UNPAD_ORDER]   # the cause itself: named first, whatever its step time
    ranked = unpad + sorted(f for f in found if f not in changes_model + unpad) + sorted(changes_model)
    lines = [_hint_line(seconds, label, without) for seconds, _, label, without in ranked[:max_hints]]
    return lines, refused, bool(cut)


def _planned(variant, label: str, api, deadline: float, rules: list[tuple[str, str]], stopped: list[str]):
    """The greedy plan of ``variant`` (a setting's instance, None: skipped) within ``deadline`` (a
    ``packplace.run.clock()`` reading), or ``None``: a layout rule that refused it goes to ``rules`` as ``(label,
    rule)``, a setting the time ran out on to ``stopped``."""
    left = deadline - clock()
    if variant is None:
        return None
    if left <= 0:
        stopped.append(label)
        return None
    try:
        if not may_fit(variant):   # memory only: the table would find a task without a feasible candidate
            return None
        table = get_table(variant, deadline=deadline)
        empty = [name for name, cands in table.all.items() if not cands]
        if empty:   # a task without a legal strategy under the setting: a layout rule, not memory
            rules.append((label, table.no_strategy_message(empty[0])))
            return None
        if not all(table.feasible.values()):  # some task fits on no block of this cluster
            return None
        result = api.solve_placement(variant, "greedy", time_limit_s=min(HINT_TIME_LIMIT_S, max(left, 1e-3)), seed=0)
    except ConfigError:
        return None
    except InfeasibleError as exc:
        if str(exc).startswith(RULE_PROOF):
            rules.append((label, str(exc).removeprefix(RULE_PROOF)))
        return None
    except TableBuildTimeout:
        stopped.append(label)
        return None
    if result.solution is None and result.hit_time_limit:
        stopped.append(label)
    return result if result.solution is not None and result.status in ("optimal", "feasible") else None


def padding_hint(instance, deadline: float | None = None) -> str | None:
    """``"fits with policy: {use_remove_padding: true} (...): step X s (...)"`` where ``instance``'s verl passes run
    padded rows (:func:`unpadded`) and the greedy solver plans the instance with ``policy.use_remove_padding`` true on
    its own cluster within ``deadline`` (a ``packplace.run.clock()`` reading; None: :data:`HINTS_BUDGET_S` from
    now), the plan scored by the evaluator; else ``None`` (nothing said). For the check's refusal of a cluster too
    small for some task, which tries no other setting."""
    from packplace.placement import api  # the placement front-end solves the variant

    variant = unpadded(instance)
    if variant is None or _ACTIVE:
        return None
    until = clock() + HINTS_BUDGET_S if deadline is None else min(deadline, clock() + HINTS_BUDGET_S)
    _ACTIVE.append(True)
    try:
        result = _planned(variant, unpad_label(instance), api, until, [], [])
    finally:
        _ACTIVE.pop()
    if result is None:
        return None
    without, _ = get_evaluator(instance).relaxed_step_time(result.solution)
    return _hint_line(result.objective, unpad_label(instance), without)


def _hint_line(seconds: float, label: str, without: float) -> str:
    """``"fits with LABEL: step X s (step +Y% over the same plan without it, memory aside)"``: a setting's plan of
    ``seconds`` per step against ``without``, the same plan's under the instance's own settings, memory not
    counted (inf or 0: "the plan is not legal without it")."""
    cost = (f"step {seconds / without - 1:+.1%} over the same plan without it, memory aside"
            if math.isfinite(without) and without > 0 else "the plan is not legal without it")
    return f"fits with {label}: step {seconds:.4g} s ({cost})"


def _fitting(instance, api, refused: list[tuple[str, str]] | None = None, until: float | None = None,
             cut: list[str] | None = None) -> list[tuple[float, int, str, float]]:
    """``(step seconds, order, label, seconds of the same plan under the instance's own settings with memory
    not counted)`` of every setting under which the greedy solver plans ``instance``: the second time is
    what the setting costs on that plan (ZeRO-3's gathers, offload traffic), inf where the plan is not
    legal without the setting. First, where its verl passes run padded rows, ``policy.use_remove_padding`` true
    (:func:`unpadded`; order :data:`UNPAD_ORDER`; a refusal or a cut of it is not reported). ``refused`` (when
    given) receives ``(label, rule)`` for each setting a layout
    rule refuses: a task has no legal strategy under it
    (:meth:`~packplace.placement.candidates.CandidateTable.no_strategy_message`), or the check proves no plan by
    a task the framework runs on GPUs of its own (an ``InfeasibleError`` on ``[policy] framework``). A setting
    that is no option of the framework at all (:func:`_variant`) is skipped. ``until`` (a
    ``packplace.run.clock()`` reading; None: none) ends the search earlier than :data:`HINTS_BUDGET_S`;
    ``cut`` (when given) receives the label of each setting the time ran out on before it was decided."""
    found: list[tuple[float, int, str, float]] = []
    deadline = clock() + HINTS_BUDGET_S if until is None else min(until, clock() + HINTS_BUDGET_S)
    rules = refused if refused is not None else []
    stopped = cut if cut is not None else []

    def planned(variant, label: str):
        return _planned(variant, label, api, deadline, rules, stopped)

    def record(result, order: int, label: str) -> None:
        without, _ = get_evaluator(instance).relaxed_step_time(result.solution)
        found.append((result.objective, order, label, without))

    def halved(pair: tuple[int, int]) -> tuple[int, int] | None:
        smaller = (max(smallest_pack(instance), pair[0] // 2), max(smallest_pack(instance), pair[1] // 2))
        return None if smaller == pair else smaller

    # each task fitting alone does not make a plan (colocated tasks share the GPUs): halve both packs, down to
    # the smallest legal one, until the greedy solver plans one; from the config's own packs when each task
    # already fits alone at them
    packs, first, origin = largest_fitting_packs(instance), 0, "the largest under which each task fits alone"
    own = getattr(instance, "sequence_packing", None)
    if packs is None and own is not None:
        packs, first, origin = halved(own), 1, "the config's"
    for halvings in range(first, PACK_HALVINGS + 1):
        if packs is None:
            break
        result = planned(replace(instance, sequence_packing=packs, _cache={}), PACKS_LABEL)
        if result is not None:
            which = "the largest packs that fit" if halvings == 0 else f"halved {halvings}x from {origin}"
            record(result, 0, f"policy: {{train_mb_tokens: {packs[0]}, logprob_mb_tokens: {packs[1]}}} ({which})")
            break
        packs = halved(packs)
    # verl's padded rows: re-scored unpadded first; a refusal or a cut of it says nothing new
    variant = unpadded(instance)
    result = None if variant is None else _planned(variant, unpad_label(instance), api, deadline, [], [])
    if result is not None:
        record(result, UNPAD_ORDER, unpad_label(instance))
    for order, (label, training, policy) in enumerate(SETTINGS, start=1):
        result = planned(_variant(instance, training, policy), label)
        if result is not None:
            record(result, order, label)
    return found
