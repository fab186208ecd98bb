"""OpenRLHF's layout rules between tasks in the synchronous placement CP-SAT model.

Without them the model relaxes the framework's rules (:func:`~packplace.placement.model.layout_rules.refusals`): its
bound stands, but where its optimum breaks a rule the backend moves that plan onto the rules and claims nothing.
For an OpenRLHF PPO/GRPO step at staleness 0 the model encodes the rules of ``_openrlhf`` in
:mod:`packplace.placement.model.layout_rules` that read only the tasks' blocks and strategies:

* the critic's value forward runs on the critic trainer's block with its strategy (one critic actor group);
* the critic trains at the actor trainer's tensor-parallel degree (one ``--ds.tensor_parallel_size``);
* two OpenRLHF groups (actor, vLLM, reference, reward model, critic: :data:`OPENRLHF_GROUPS`) share no GPU unless
  they are an allowed pair (:data:`OPENRLHF_SHARED`) on the same block, or every group runs on the same block
  where the release colocates everything (:data:`OPENRLHF_COLOCATE_ALL`, or no release named);
* for DPO: the reference on the actor trainer's block;
* at a release before :data:`OPENRLHF_ROUND_ROBIN_DROPPED`, its group-size rules
  (:func:`~packplace.placement.model.layout_rules.openrlhf_sizes`: world sizes that are powers of 2, that divide
  the actor's, the engines against the actor's world, the prompts against it).
  Each of them reads the actor trainer's strategy and at most one other task's, so a pair of strategies is
  forbidden exactly where the rules refuse the two tasks alone (:func:`_add_size_rules`).

Each constraint forbids exactly the plans the rule refuses, so every plan that keeps the rules stays (the bound is
one of the rule-keeping problem); rules left out (the staleness rules, which the periodic model would need; the
per-task strategy rules the candidate table already keeps) stay relaxed as before, and
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
    """The instance's rule context where the model encodes its rules (OpenRLHF, the synchronous model), else None."""
    if asynchronous:
        return None
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


def add_layout_rules(m: Any, ctx: Context | None, tables, loc) -> None:
    """The rules of the module docstring on the model ``m`` (``loc``: its
    :class:`~packplace.solvers.placement.cpsat.model.Locator`); nothing where ``ctx`` is None."""
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
    groups = [(group, index[name]) for group, name in OPENRLHF_GROUPS
              if name in index and not (name == REWARD and not ctx.reward_model)]
    everything = _all_on_one_block(m, [loc.block_of[v] for _, v in groups]) if (
        ctx.release is None or ctx.release >= OPENRLHF_COLOCATE_ALL) else None
    for i, (a_name, a) in enumerate(groups):
        for b_name, b in groups[i + 1:]:
            shared = (a_name, b_name) in OPENRLHF_SHARED
            for (alo, ahi), lit_a in loc.block_of[a].items():
                for (blo, bhi), lit_b in loc.block_of[b].items():
                    if ahi <= blo or bhi <= alo or (shared and (alo, ahi) == (blo, bhi)):
                        continue
                    m.AddBoolOr([lit_a.Not(), lit_b.Not(), *([everything] if everything is not None else [])])


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
