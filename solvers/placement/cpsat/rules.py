"""Layout rules between tasks in the placement CP-SAT models: OpenRLHF's, verl's and NeMo RL's, in the synchronous
model and the periodic one.

Without them a model relaxes the framework's rules (:func:`~packplace.placement.model.layout_rules.refusals`): its
bound stands, but where its optimum breaks a rule the backend moves that plan onto the rules and claims nothing.
For an OpenRLHF PPO/GRPO step the models encode the rules of ``_openrlhf`` in
:mod:`packplace.placement.model.layout_rules` that read only the tasks' blocks and strategies and whether the step
is stale (the periodic model's staleness Booleans; the synchronous model's step is not):

* the critic's value forward runs on the critic trainer's block with its strategy (one critic actor group);
* the critic trains, and the reference and reward model run their forwards, at the actor trainer's tensor-parallel
  degree (one ``--ds.tensor_parallel_size`` for every DeepSpeed model:
  :func:`~packplace.placement.model.layout_rules.forward_tp_refusals`; DPO's reference too);
* two OpenRLHF groups (actor, vLLM, reference, reward model, critic: :data:`OPENRLHF_GROUPS`) share no GPU unless
  they are an allowed pair (:data:`OPENRLHF_SHARED`) on the same block, or every group runs on the same block
  where the release colocates everything (:data:`OPENRLHF_COLOCATE_ALL`, or no release named);
* with some staleness at least 1, the vLLM engines share no GPU with any other task, and the rule above holds
  among the other groups (everything: every group but vLLM on one block);
* for DPO: the reference on the actor trainer's block;
* at a release before :data:`OPENRLHF_ROUND_ROBIN_DROPPED`, its group-size rules
  (:func:`~packplace.placement.model.layout_rules.openrlhf_sizes`: world sizes that are powers of 2, that divide
  the actor's, the engines against the actor's world, the prompts against it).
  Each of them reads the actor trainer's strategy and at most one other task's, so a pair of strategies is
  forbidden exactly where the rules refuse the two tasks alone (:func:`_add_size_rules`).

For verl (:func:`_add_verl_rules`): the reference, the critic and its value forward on the actor trainer's block,
the value forward at the critic's strategy, under the Megatron backend
(:func:`~packplace.placement.model.layout_rules.trainer_backend`, which the trainers' and forwards' strategies set
under ``auto``) the reference, the critic and a reward forward worker on the trainer's block at the trainer's
strategy, the rollout on the trainer's block or, with the actor
stale, on GPUs disjoint from it, a reward model on it or on GPUs apart. For NeMo RL, likewise
(:func:`_add_nemo_rl_rules`): the reference on the policy's block at its strategy, the value forward on the critic's
at its, the reward model on GPUs of its own, PPO's critic and generation on the policy's block, GRPO's generation on
it or apart (apart only with the actor stale; another algorithm with a generation never stale), and a block apart
on whole nodes where the plan spans several (:func:`_multi_node`). Both read the actor's own staleness (a Boolean of
the periodic model's, :func:`stale_literal`), OpenRLHF's whether any model is stale.

Where a rule-keeping stale plan's synchronous twin breaks a rule (verl's rollout apart), the model has no twin
scored at the synchronous step time, which the evaluator takes where it is below the period; so verl's periodic
model encodes the rules only while verl's profile rolls out in batches (:func:`encoded`: then no stale duration
exceeds the option's own, and the stale plan's model period is below that step time plus the rounding). OpenRLHF's
and NeMo RL's stale rules are stricter than their synchronous ones, so the twin keeps them.

Each constraint forbids exactly the plans the rule refuses, so every plan that keeps the rules stays (the bound is
one of the rule-keeping problem); rules left out (the release's most staleness, which the staleness candidates
already keep, :func:`~packplace.placement.model.layout_rules.release_staleness`; the per-task strategy rules the
candidate table already keeps) stay relaxed as before, and
:func:`~packplace.placement.model.layout_rules.plan_refusals` still checks the answer. Dominance pruning must then
keep what the rules read (:func:`rule_key`).
"""

from __future__ import annotations

from typing import Any

from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.model.layout_rules import (
    CRITIC_INFER,
    CRITIC_TRAIN,
    GENERATE,
    OPENRLHF_COLOCATE_ALL,
    OPENRLHF_GROUPS,
    OPENRLHF_ROUND_ROBIN_DROPPED,
    OPENRLHF_SHARED,
    REFERENCE,
    REWARD,
    TRAIN,
    Context,
    Placed,
    megatron_pool_followers,
    openrlhf_sizes,
    openrlhf_tp_forwards,
    reward_forward_worker,
    trainer_backend,
)


def encoded(instance, asynchronous: bool = False) -> Context | None:
    """The instance's rule context where the models encode its rules (OpenRLHF, verl and NeMo RL: the synchronous
    model and the periodic one, ``asynchronous``), else None. verl's periodic model only while its profile rolls out
    in batches (no continuous rollout): a stale plan's period then never exceeds its synchronous step time beyond
    the rounding, which its rollout apart (allowed stale only) needs, as the model has no synchronous twin of it."""
    ctx = Context.of(instance)
    if not ctx.ruled:
        return None
    if asynchronous and ctx.framework == "verl" and FRAMEWORKS["verl"].continuous_rollout:
        return None
    return ctx


def rule_key(ctx: Context | None, name: str, cand) -> Any:
    """What the encoded rules read of vertex ``name``'s candidate ``cand`` beyond its block: two candidates of
    a vertex compete in dominance pruning only where this is equal (None everywhere without encoded rules)."""
    if ctx is None:
        return None
    if ctx.framework == "verl":   # the value forward's and the reference's strategies, and the backend they set
        forwards = (REWARD,) if reward_forward_worker(ctx) else ()
        return cand.strategy if name in (TRAIN, REFERENCE, CRITIC_TRAIN, CRITIC_INFER, *forwards) else None
    if ctx.framework == "nemo-rl":   # the strategies the forwards follow; the GPUs per node of a block apart
        return cand.strategy if name in (TRAIN, REFERENCE, CRITIC_TRAIN, CRITIC_INFER) else (
            cand.extent if name in (GENERATE, REWARD) else None)
    if name in (CRITIC_INFER, CRITIC_TRAIN) or (name == TRAIN and _sized(ctx)):
        return cand.strategy
    if name == TRAIN:
        return cand.strategy.tp
    if _sized(ctx) and name in (GENERATE, REFERENCE, REWARD):   # the engines' count, the groups' world sizes
        return cand.strategy
    if name in openrlhf_tp_forwards(ctx):   # at the trainer's --ds.tensor_parallel_size
        return cand.strategy.tp
    return None


def _sized(ctx: Context) -> bool:
    """The release has OpenRLHF's group-size rules (``openrlhf_sizes``)."""
    return ctx.release is not None and ctx.release < OPENRLHF_ROUND_ROBIN_DROPPED and ctx.algorithm != "dpo"


def add_layout_rules(m: Any, ctx: Context | None, tables, loc, stale: dict[str, dict[int, Any]] | None = None) -> None:
    """The rules of the module docstring on the model ``m`` (``loc``: its
    :class:`~packplace.solvers.placement.cpsat.model.Locator`); nothing where ``ctx`` is None. ``stale``: the
    periodic model's staleness Booleans (``{model: {t: Boolean}}``, exactly one true per model; None: the
    synchronous model, staleness 0). The rules that read the staleness bind under a Boolean of it
    (:func:`stale_literal`): OpenRLHF's sharing rules under "some staleness ≥ 1" (:func:`_add_sharing_rules`), verl's
    and NeMo RL's rollout rules under "the actor's staleness ≥ 1", as the evaluator reads them."""
    if ctx is None:
        return
    index = {name: v for v, name in enumerate(tables.names)}
    if TRAIN not in index:
        return
    if ctx.framework in ("verl", "nemo-rl"):
        actor = None if stale is None else stale_literal(m, stale, ("actor",))
        (_add_verl_rules if ctx.framework == "verl" else _add_nemo_rl_rules)(m, ctx, index, loc, actor)
        return
    train = index[TRAIN]

    def tp(o) -> int:
        return int(o.cand.strategy.tp)

    for name in openrlhf_tp_forwards(ctx):
        if name in index:
            _same_key(m, loc.where(index[name], tp), loc.where(train, tp))
    if ctx.algorithm == "dpo":
        if REFERENCE in index:
            _same_key(m, loc.block_of[index[REFERENCE]], loc.block_of[train])
        return
    if CRITIC_TRAIN in index and CRITIC_INFER in index:
        def placed(o) -> tuple:
            return (o.lo, o.hi, o.cand.strategy)

        _same_key(m, loc.where(index[CRITIC_INFER], placed), loc.where(index[CRITIC_TRAIN], placed))
    if CRITIC_TRAIN in index:
        _same_key(m, loc.where(index[CRITIC_TRAIN], tp), loc.where(train, tp))
    _add_size_rules(m, ctx, index, loc)
    _add_sharing_rules(m, ctx, index, loc, None if stale is None else stale_literal(m, stale))


def stale_literal(m: Any, stale: dict[str, dict[int, Any]], models: tuple[str, ...] | None = None) -> Any:
    """A Boolean true exactly when the staleness of some of ``models`` (None: every model of ``stale``) is at least
    1; false where none of them has a staleness Boolean (the evaluator reads an absent model's as 0)."""
    lits = [lit for model, values in stale.items() if models is None or model in models
            for t, lit in values.items() if t >= 1]
    out = m.NewBoolVar("staleness >= 1" + ("" if models is None else f" ({', '.join(models)})"))
    m.AddMaxEquality(out, lits) if lits else m.Add(out == 0)
    return out


def _add_sharing_rules(m: Any, ctx: Context, index: dict[str, int], loc, stale: Any) -> None:
    """Which groups share GPUs. At staleness 0: two groups overlap only as an allowed pair on the same block, or
    with every group on one block where the release colocates everything. With some staleness at least 1 (the
    ``stale`` Boolean true): the vLLM engines share no GPU with any other task, and the other groups keep the
    same rule among themselves (everything: every group but vLLM on one block). Each clause carries ``stale``
    (or its negation) so it binds only where the evaluator reads that staleness."""
    groups = [(group, index[name]) for group, name in OPENRLHF_GROUPS
              if name in index and not (name == REWARD and not ctx.reward_model)]
    colocate_all = ctx.release is None or ctx.release >= OPENRLHF_COLOCATE_ALL
    gen = index.get(GENERATE)
    # per staleness case (the literal that makes the case's clauses vacuous, its "everything on one block")
    cases = [(stale, groups)] if stale is None else [(stale, groups), (stale.Not(), [g for g in groups
                                                                                   if g[1] != gen])]
    for off, members in cases:
        everything = _all_on_one_block(m, [loc.block_of[v] for _, v in members]) if colocate_all else None
        extra = [lit for lit in (off, everything) if lit is not None]
        for i, (a_name, a) in enumerate(members):
            for b_name, b in members[i + 1:]:
                shared = (a_name, b_name) in OPENRLHF_SHARED
                for lit_a, lit_b in _overlapping(loc, a, b, same_allowed=shared):
                    m.AddBoolOr([lit_a.Not(), lit_b.Not(), *extra])
    if stale is None or gen is None:
        return
    for v in range(len(index)):   # stale: the engines on GPUs of their own
        if v != gen:
            for lit_g, lit_v in _overlapping(loc, gen, v, same_allowed=False):
                m.AddBoolOr([lit_g.Not(), lit_v.Not(), stale.Not()])


def _overlapping(loc, a: int, b: int, same_allowed: bool) -> list[tuple[Any, Any]]:
    """The pairs of block indicators of vertices ``a`` and ``b`` whose blocks share a GPU (the same block left out
    where ``same_allowed``)."""
    return [(lit_a, lit_b) for (alo, ahi), lit_a in loc.block_of[a].items()
            for (blo, bhi), lit_b in loc.block_of[b].items()
            if not (ahi <= blo or bhi <= alo or (same_allowed and (alo, ahi) == (blo, bhi)))]


def _same_key(m: Any, follower: dict, leader: dict) -> None:
    """The follower's key is the leader's (each side's indicators exclusive, one true): the follower's indicator
    of a key implies the leader's, false where the leader has no such key."""
    for key, lit in follower.items():
        if key in leader:
            m.AddImplication(lit, leader[key])
        else:
            m.Add(lit == 0)


def _all_on_one_block(m: Any, blocks: list[dict]) -> Any:
    """A Boolean true exactly when every one of ``blocks`` (per vertex ``{block: indicator}``) takes the same block."""
    common = set(blocks[0]).intersection(*blocks[1:]) if blocks else set()
    together = []
    for block in sorted(common):
        z = m.NewBoolVar("")
        lits = [b[block] for b in blocks]
        m.AddBoolAnd(lits).OnlyEnforceIf(z)
        m.AddBoolOr([z, *(lit.Not() for lit in lits)])
        together.append(z)
    everything = m.NewBoolVar("all groups on one block")
    m.Add(everything == sum(together))
    return everything


def _add_size_rules(m: Any, ctx: Context, index: dict[str, int], loc) -> None:
    """The release's group-size rules (module docstring): an actor trainer strategy the rules refuse alone is never
    taken, and a pair of it and another task's strategy they refuse together is never taken together."""
    if not _sized(ctx):
        return

    def alone(name: str, strategy) -> Placed:
        return Placed(name, strategy, 0, 1, 1)   # the size rules read strategies only

    def strategy(o):
        return o.cand.strategy

    train = loc.where(index[TRAIN], strategy)
    for s, lit in train.items():
        if openrlhf_sizes(ctx, {TRAIN: alone(TRAIN, s)}):
            m.Add(lit == 0)
    for name in (CRITIC_TRAIN, GENERATE, REFERENCE, REWARD):
        if name not in index:
            continue
        other = loc.where(index[name], strategy)
        for s, lit in train.items():
            for u, lit_u in other.items():
                if openrlhf_sizes(ctx, {TRAIN: alone(TRAIN, s), name: alone(name, u)}):
                    m.AddBoolOr([lit.Not(), lit_u.Not()])


def _add_verl_rules(m: Any, ctx: Context, index: dict[str, int], loc, actor_stale: Any = None) -> None:
    """verl's rules (``_verl`` in :mod:`packplace.placement.model.layout_rules`): the reference, the critic and its
    value forward on the actor trainer's block; the value forward with the critic's strategy; under the Megatron
    backend the reference with the trainer's strategy; the rollout on the trainer's block, or on GPUs disjoint from
    it with the actor stale (``actor_stale``, the periodic model's Boolean; None: the synchronous model's step, never
    stale); a reward model on the trainer's block or GPUs disjoint from it."""
    train = index[TRAIN]

    def strategy(o):
        return o.cand.strategy

    for name in (REFERENCE, CRITIC_TRAIN, CRITIC_INFER):
        if name in index:
            _same_key(m, loc.block_of[index[name]], loc.block_of[train])
    if CRITIC_TRAIN in index and CRITIC_INFER in index:
        _same_key(m, loc.where(index[CRITIC_INFER], strategy), loc.where(index[CRITIC_TRAIN], strategy))
    megatron = _verl_megatron(m, ctx, index, loc)
    if megatron is not None:   # the reference, and the Megatron workers on the trainer's block, at its strategy
        trained = loc.where(train, strategy)
        for name in (REFERENCE, *megatron_pool_followers(ctx)):
            if name not in index:
                continue
            for (block, s), lit in loc.where(index[name], lambda o: ((o.lo, o.hi), o.cand.strategy)).items():
                there = [] if name != REWARD or block not in loc.block_of[train] else [loc.block_of[train][block]]
                if name == REWARD and not there:
                    continue
                m.AddBoolOr([lit.Not(), megatron.Not(), *(x.Not() for x in there),
                             *([trained[s]] if s in trained else [])])
    for name in (GENERATE, REWARD):   # the rollout on the trainer's block (apart: stale); a reward model there or apart
        if name not in index or (name == REWARD and not ctx.reward_model):
            continue
        for (alo, ahi), lit_a in loc.block_of[index[name]].items():
            for (blo, bhi), lit_b in loc.block_of[train].items():
                apart = ahi <= blo or bhi <= alo
                if (alo, ahi) == (blo, bhi) or (name == REWARD and apart):
                    continue
                stale_apart = [actor_stale] if name == GENERATE and apart and actor_stale is not None else []
                m.AddBoolOr([lit_a.Not(), lit_b.Not(), *stale_apart])


def _verl_megatron(m: Any, ctx: Context, index: dict[str, int], loc) -> Any:
    """A Boolean true exactly when the plan runs verl's Megatron backend (:func:`trainer_backend`; None where it
    never does)."""
    fixed = trainer_backend(ctx)
    if fixed != "auto":
        if fixed != "megatron":
            return None
        always = m.NewBoolVar("verl megatron backend")
        m.Add(always == 1)
        return always
    forwards = (REWARD,) if reward_forward_worker(ctx) else ()
    lits = [lit for name in (TRAIN, CRITIC_TRAIN, REFERENCE, CRITIC_INFER, *forwards) if name in index
            for s, lit in loc.where(index[name], lambda o: o.cand.strategy).items()
            if s.pp > 1 or s.ep > 1 or s.tp > 1]
    if not lits:
        return None
    megatron = m.NewBoolVar("verl megatron backend")
    m.AddMaxEquality(megatron, lits)
    return megatron


def _add_nemo_rl_rules(m: Any, ctx: Context, index: dict[str, int], loc, actor_stale: Any = None) -> None:
    """NeMo RL's rules (``_nemo_rl`` in :mod:`packplace.placement.model.layout_rules`): the reference on the policy's
    block with its strategy, the value forward on the critic's with its; a reward model on GPUs of its own, whole
    nodes of a multi-node plan; PPO's critic and generation on the policy's block, else generation on the policy's
    block or apart, whole nodes of a multi-node plan; with the actor stale (``actor_stale``, the periodic model's
    Boolean; None: the synchronous model's step, never stale) GRPO's generation apart only, and no other algorithm
    with a generation (PPO returns before that rule) stale at all."""
    train = index[TRAIN]

    def placed(o) -> tuple:
        return (o.lo, o.hi, o.cand.strategy)

    if REFERENCE in index:
        _same_key(m, loc.where(index[REFERENCE], placed), loc.where(train, placed))
    if CRITIC_TRAIN in index and CRITIC_INFER in index:
        _same_key(m, loc.where(index[CRITIC_INFER], placed), loc.where(index[CRITIC_TRAIN], placed))
    multi = _multi_node(m, ctx, loc, len(index))
    if REWARD in index and ctx.reward_model:
        reward = index[REWARD]
        for v in range(len(index)):
            if v != reward:
                for lit_r, lit_v in _overlapping(loc, reward, v, same_allowed=False):
                    m.AddBoolOr([lit_r.Not(), lit_v.Not()])
        _whole_nodes(m, ctx, loc, reward, multi)
    if ctx.algorithm == "ppo":
        for name in (CRITIC_TRAIN, GENERATE):
            if name in index:
                _same_key(m, loc.block_of[index[name]], loc.block_of[train])
        return
    if GENERATE in index:
        _add_nemo_rl_generation(m, ctx, index, loc, multi, actor_stale)


def _add_nemo_rl_generation(m: Any, ctx: Context, index: dict[str, int], loc, multi: Any, actor_stale: Any) -> None:
    """NeMo RL's generation beside the policy (not PPO): on its block or apart, whole nodes apart on a multi-node
    plan; stale (``actor_stale``; None: never) GRPO's apart only, another algorithm's never."""
    gen, train = index[GENERATE], index[TRAIN]
    for lit_g, lit_t in _overlapping(loc, gen, train, same_allowed=True):
        m.AddBoolOr([lit_g.Not(), lit_t.Not()])
    if actor_stale is not None and ctx.algorithm != "grpo":
        m.Add(actor_stale == 0)   # NeMo RL's asynchronous mode is GRPO's
    elif actor_stale is not None:   # asynchronous GRPO: generation on GPUs of its own, never on the policy's block
        for block, lit_g in loc.block_of[gen].items():
            if block in loc.block_of[train]:
                m.AddBoolOr([lit_g.Not(), loc.block_of[train][block].Not(), actor_stale.Not()])
    parts = loc.where(gen, lambda o: (o.lo, o.hi, min(o.alloc.extent[2], ctx.gpus_per_node)))
    for (lo, hi, share), lit_g in parts.items():
        if share == ctx.gpus_per_node:
            continue
        for (tlo, thi), lit_t in loc.block_of[train].items():
            if hi <= tlo or thi <= lo:   # apart from the policy on part of a node: one node only
                m.AddBoolOr([lit_g.Not(), lit_t.Not(), multi.Not()])


def _multi_node(m: Any, ctx: Context, loc, n: int) -> Any:
    """A Boolean true exactly when the plan's tasks use more than one node (``layout_rules._plan_nodes``)."""
    covering: dict[int, list] = {}
    for v in range(n):
        for (lo, hi), lit in loc.block_of[v].items():
            for node in range(lo // ctx.gpus_per_node, (hi - 1) // ctx.gpus_per_node + 1):
                covering.setdefault(node, []).append(lit)
    used = []
    for lits in covering.values():
        u = m.NewBoolVar("")
        m.AddMaxEquality(u, lits)
        used.append(u)
    multi = m.NewBoolVar("plan on several nodes")
    m.Add(sum(used) >= 2).OnlyEnforceIf(multi)
    m.Add(sum(used) <= 1).OnlyEnforceIf(multi.Not())
    return multi


def _whole_nodes(m: Any, ctx: Context, loc, v: int, multi: Any) -> None:
    """Vertex ``v`` on whole nodes where the plan spans several (its block's GPUs per node the node's)."""
    for share, lit in loc.where(v, lambda o: min(o.alloc.extent[2], ctx.gpus_per_node)).items():
        if share != ctx.gpus_per_node:
            m.AddBoolOr([lit.Not(), multi.Not()])
