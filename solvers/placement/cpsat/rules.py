"""OpenRLHF's layout rules between tasks in the placement CP-SAT models (synchronous and periodic).

Without them a model relaxes the framework's rules (:func:`~packplace.placement.model.layout_rules.refusals`): its
bound stands, but where its optimum breaks a rule the backend moves that plan onto the rules and claims nothing.
For an OpenRLHF PPO/GRPO step the models encode the rules of ``_openrlhf`` in
:mod:`packplace.placement.model.layout_rules` that read only the tasks' blocks and strategies and whether the step
is stale (the periodic model's staleness Booleans; the synchronous model's step is not):

* the critic's value forward runs on the critic trainer's block with its strategy (one critic actor group);
* the critic trains at the actor trainer's tensor-parallel degree (one ``--ds.tensor_parallel_size``);
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

Each constraint forbids exactly the plans the rule refuses, so every plan that keeps the rules stays (the bound is
one of the rule-keeping problem); rules left out (the release's most staleness, which the staleness candidates
already keep, :func:`~packplace.placement.model.layout_rules.release_staleness`; the per-task strategy rules the
candidate table already keeps; verl's and NeMo RL's rules) stay relaxed as before, and
:func:`~packplace.placement.model.layout_rules.plan_refusals` still checks the answer. Dominance pruning must then
keep what the rules read (:func:`rule_key`).
"""

from __future__ import annotations

from typing import Any

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
    openrlhf_sizes,
)


def encoded(instance, asynchronous: bool = False) -> Context | None:
    """The instance's rule context where the models encode its rules (OpenRLHF; the synchronous model and the
    periodic one, ``asynchronous``), else None."""
    del asynchronous   # both models encode them (the periodic one under its staleness Boolean)
    ctx = Context.of(instance)
    return ctx if ctx.ruled and ctx.framework == "openrlhf" else None


def rule_key(ctx: Context | None, name: str, cand) -> Any:
    """What the encoded rules read of vertex ``name``'s candidate ``cand`` beyond its block: two candidates of
    a vertex compete in dominance pruning only where this is equal (None everywhere without encoded rules)."""
    if ctx is None:
        return None
    if name in (CRITIC_INFER, CRITIC_TRAIN) or (name == TRAIN and _sized(ctx)):
        return cand.strategy
    if name == TRAIN:
        return cand.strategy.tp
    if _sized(ctx) and name in (GENERATE, REFERENCE, REWARD):   # the engines' count, the groups' world sizes
        return cand.strategy
    return None


def _sized(ctx: Context) -> bool:
    """The release has OpenRLHF's group-size rules (``openrlhf_sizes``)."""
    return ctx.release is not None and ctx.release < OPENRLHF_ROUND_ROBIN_DROPPED and ctx.algorithm != "dpo"


def add_layout_rules(m: Any, ctx: Context | None, tables, loc, stale: Any = None) -> None:
    """The rules of the module docstring on the model ``m`` (``loc``: its
    :class:`~packplace.solvers.placement.cpsat.model.Locator`); nothing where ``ctx`` is None. ``stale``: the
    periodic model's Boolean true exactly when some model's staleness is at least 1 (None: the synchronous model,
    staleness 0); the GPU-sharing rules then depend on it (:func:`_add_sharing_rules`)."""
    if ctx is None:
        return
    index = {name: v for v, name in enumerate(tables.names)}
    if TRAIN not in index:
        return
    train = index[TRAIN]
    if ctx.algorithm == "dpo":
        if REFERENCE in index:
            _same_key(m, loc.block_of[index[REFERENCE]], loc.block_of[train])
        return
    if CRITIC_TRAIN in index and CRITIC_INFER in index:
        def placed(o) -> tuple:
            return (o.lo, o.hi, o.cand.strategy)

        _same_key(m, loc.where(index[CRITIC_INFER], placed), loc.where(index[CRITIC_TRAIN], placed))
    if CRITIC_TRAIN in index:
        def tp(o) -> int:
            return int(o.cand.strategy.tp)

        _same_key(m, loc.where(index[CRITIC_TRAIN], tp), loc.where(train, tp))
    _add_size_rules(m, ctx, index, loc)
    _add_sharing_rules(m, ctx, index, loc, stale)


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
