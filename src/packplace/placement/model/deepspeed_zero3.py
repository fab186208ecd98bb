"""How many parameter all-gathers DeepSpeed's ZeRO-3 issues per pass once its trace is recorded.

DeepSpeed's ZeRO-3 gathers a module's parameters in a hook before the module runs
(``runtime/zero/partitioned_param_coordinator.py`` ``PartitionedParameterCoordinator.fetch_sub_module``, the same
in v0.9.0, v0.12.6 and v0.13.5-v0.14.x): every leaf module ("submodule") whose parameters are not yet available is
gathered by one ``__all_gather_params`` call, and from the second step on (``is_complete_trace()``: the first step
records the order in which the modules fetch, and the parameter queue of each later step replays it) the same call
prefetches the parameters queued next: it pops them, ``ds_numel`` elements each (the whole parameter, not the
partition), while the popped not-yet-available elements are below ``min(stage3_max_live_parameters − available,
stage3_prefetch_bucket_size)`` (``available``: the elements gathered and not yet released), and gathers all it
popped in a second ``__all_gather_params`` call. After the module has run its parameters are released
(``release_sub_module``: ``available`` drops by their elements). Each call is one NCCL all-gather over the ZeRO
group: ``__all_gather_params_`` passes the whole set to ``all_gather_coalesced``
(``runtime/zero/partition_parameters.py``), which for unquantized weights concatenates the partitions of each
dtype into one flat buffer and issues one ``_dist_allgather_fn`` (``_all_gather_dtype``, v0.12.6 and later; one
flat buffer for all in v0.9.0). Parameters of at most ``stage3_param_persistence_threshold`` elements stay
gathered on every rank (``ds_persist``: ``parameter_offload.py`` ``mark_persistent_parameters``) and are never
fetched. :func:`pass_gathers` replays that loop over a pass's leaf modules (:func:`leaf_modules`).

The settings, by framework (:data:`DSCHAT_TRAIN`, :data:`DSCHAT_EVAL`, :data:`DEEPSPEED_DEFAULTS`):

* DeepSpeed-Chat's training engines (actor and critic; ``dschat/utils/ds_utils.py`` ``get_train_ds_config``):
  persistence 1e4, max live 3e7, prefetch bucket 3e7. The max-live cap is below one OPT-6.7B MLP matrix, so each
  call prefetches at most the next module: one gather per module holding a non-persistent parameter.
* DeepSpeed-Chat's reference and reward (``get_eval_ds_config``: only the persistence threshold 1e4) run at
  DeepSpeed's defaults otherwise (``runtime/zero/config.py``: prefetch bucket 5e7, max live 1e9).
* OpenRLHF (v0.2.7, commit 391e1de4: ``requirements.txt`` ``deepspeed==0.13.5``;
  ``openrlhf/utils/deepspeed_utils.py`` ``get_train_ds_config`` / ``get_eval_ds_config`` set the three to
  ``"auto"``, which DeepSpeed's ``DeepSpeedConfigModel.__init__`` drops, ``runtime/config_utils.py`` v0.13.5
  line 55) runs at DeepSpeed's defaults: persistence 1e5, prefetch bucket 5e7, max live 1e9.

The backward fetches the same modules in the reverse order. Parameters kept from the forward for the backward
within ``stage3_max_reuse_distance`` are counted for memory only (:func:`zero3_turn_gathered`), not for the
gathers. Not modelled: modules without parameters (their hooks run the prefetch too, so a prefetch may be split
at them), the tied LM head's second use of the embedding within a pass for the gathers, and LoRA adapters
(DeepSpeed-Chat's ``LinearLayer_LoRA`` holds them in the module of the weight they adapt, which
fetches them with it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from packplace.errors import ConfigError
from packplace.placement.problem.models import ModelSpec


@dataclass(frozen=True)
class Zero3Prefetch:
    """A ZeRO-3 configuration's fetch settings, elements: ``stage3_param_persistence_threshold``,
    ``stage3_prefetch_bucket_size``, ``stage3_max_live_parameters``."""

    persistence_threshold: int
    prefetch_bucket: int
    max_live: int
    #: ``stage3_max_reuse_distance`` (:func:`zero3_turn_gathered`): DeepSpeed's default 1e9
    #: (``runtime/zero/config.py`` v0.9.0-v0.14.x), which none of the three configs sets.
    max_reuse_distance: int = 1_000_000_000


#: DeepSpeed-Chat's training config (``dschat/utils/ds_utils.py`` ``get_train_ds_config``: 1e4, 3e7, 3e7).
DSCHAT_TRAIN = Zero3Prefetch(10_000, 30_000_000, 30_000_000)
#: DeepSpeed-Chat's eval config (``get_eval_ds_config``: persistence 1e4; DeepSpeed's defaults otherwise).
DSCHAT_EVAL = Zero3Prefetch(10_000, 50_000_000, 1_000_000_000)
#: DeepSpeed's defaults (``runtime/zero/config.py``, v0.9.0 to v0.14.x: ``param_persistence_threshold`` 1e5,
#: ``prefetch_bucket_size`` 5e7, ``max_live_parameters`` 1e9); OpenRLHF's ``"auto"`` leaves them.
DEEPSPEED_DEFAULTS = Zero3Prefetch(100_000, 50_000_000, 1_000_000_000)

Module = tuple[int, ...]


def leaf_modules(model: ModelSpec) -> list[Module]:
    """The element counts of each leaf module's parameters of ``model`` in Hugging Face forward order
    (:func:`_module_groups`, flattened)."""
    before, layers, after = _module_groups(model)
    return before + [m for layer in layers for m in layer] + after


def _module_groups(model: ModelSpec) -> tuple[list[Module], list[list[Module]], list[Module]]:
    """The element counts of each leaf module's parameters of ``model`` in Hugging Face forward order: the token
    and learned position embeddings, ``project_in``; per layer the attention norm, Q, K, V, O (weight, bias; multi-head
    latent attention: :attr:`~packplace.shape.TransformerShape.mla_modules`), the
    MLP norm and the MLP (gate, up, down; a MoE layer's router, each expert's, then the shared expert's); the
    final norm, ``project_out``, the head (a value model's ``v_head``; a tied LM head reuses the embedding and is
    left out); as ``(before the layers, each layer's, after the layers)``."""
    d, e = model.hidden_dim, model.embedding_dim or model.hidden_dim
    q, kv = model.attention_dim, model.kv_heads * model.head_dim
    qkv_bias, linear_bias = model.bias != "none", model.bias == "all"
    norm: Module = (d, d) if model.norm == "layer" else (d,)
    out: list[Module] = [(model.vocab_size * e,)]
    if model.position_embeddings:
        out.append((model.position_embeddings * d,))
    if e != d:
        out.append((e * d,))

    def linear(n_in: int, n_out: int, bias: bool) -> Module:
        return (n_in * n_out, n_out) if bias else (n_in * n_out,)

    def mlp(width: int) -> list[Module]:
        ins = [linear(d, width, linear_bias)] * (2 if model.mlp == "gated" else 1)
        return ins + [linear(width, d, linear_bias)]

    attention = [norm, linear(d, q, qkv_bias), linear(d, kv, qkv_bias), linear(d, kv, qkv_bias),
                 linear(q, d, linear_bias), norm]
    if model.is_mla:   # multi-head latent attention's own modules (no biases)
        attention = [norm, *[(n,) for n in model.mla_modules], norm]
    layers: list[list[Module]] = []
    for layer in range(model.layers):
        block = list(attention)
        if model.is_moe and layer >= model.dense_layers:
            block.append((d * model.num_experts,))
            block += mlp(model.expert_ffn_dim) * model.num_experts
            block += mlp(model.shared_expert_ffn_dim) if model.shared_expert_ffn_dim else []
        else:
            block += mlp(model.ffn_dim)
        layers.append(block)
    after: list[Module] = [norm]
    if e != d and model.lm_head:
        after.append((d * e,))
    if not model.lm_head:
        after.append((d,))
    elif not model.tie_word_embeddings:
        after.append((e * model.vocab_size,))
    return out, layers, after


def pass_gathers(modules: list[Module], prefetch: Zero3Prefetch) -> int:
    """All-gathers one pass over ``modules`` (each a leaf module's parameter sizes, in fetch order) issues in
    the steady state (module docstring): per module one for its parameters not yet available, one for the
    prefetch it pops (up to ``min(max_live − available, prefetch_bucket)`` elements, the last pop may overshoot);
    then its parameters are released. Parameters of at most ``persistence_threshold`` elements are never
    gathered."""
    return _replay(modules, prefetch)[0]


def on_demand_fetches(modules: list[Module], prefetch: Zero3Prefetch) -> int:
    """Modules after the first gathered one that find parameters of theirs not yet gathered when they run in one
    pass over ``modules`` (:func:`pass_gathers`' replay): no earlier module's prefetch popped them, because the
    bucket was spent or ``stage3_max_live_parameters`` left no room (v0.9.0 ``partitioned_param_coordinator.py``
    lines 303-308: ``max_params_to_prefetch = min(max_live − available, bucket)``), so ``fetch_sub_module`` issues
    their all-gather only when the module runs and waits for it. DeepSpeed-Chat's training config (3e7 / 3e7)
    leaves every module of 3e7 elements or more without room for the next one's parameters; its eval config and
    DeepSpeed's defaults (5e7 / 1e9) keep the prefetch ahead of every OPT and Llama-2 module of the validation
    set. Without a prefetch bucket every gathered module but the first."""
    return _replay(modules, prefetch)[1]


def _replay(modules: list[Module], prefetch: Zero3Prefetch) -> tuple[int, int]:
    """``(gathers, on-demand fetches)`` of one pass: :func:`pass_gathers` and :func:`on_demand_fetches`."""
    params = [[(i, j, n) for j, n in enumerate(sizes) if n > prefetch.persistence_threshold]
              for i, sizes in enumerate(modules)]
    queue = deque(p for module in params for p in module)
    available: set[tuple[int, int, int]] = set()
    gathers = live = on_demand = 0
    for pos, module in enumerate(params):
        missing = [p for p in module if p not in available]
        if missing:
            on_demand += 1 if gathers else 0   # the pass's first module is gathered on demand by every config
            gathers += 1
            available.update(missing)
            live += sum(p[2] for p in missing)
        while queue and queue[0][0] == pos:   # its own parameters leave the queue
            queue.popleft()
        budget = min(prefetch.max_live - live, prefetch.prefetch_bucket)
        popped = 0
        while queue and popped < budget and prefetch.prefetch_bucket > 0:
            p = queue.popleft()
            if p not in available:
                available.add(p)
                popped += p[2]
        if popped:
            gathers += 1
            live += popped
        for p in module:
            available.discard(p)
            live -= p[2]
    return gathers, on_demand


@lru_cache(maxsize=256)
def zero3_gathers_per_pass(model: ModelSpec, prefetch: Zero3Prefetch) -> tuple[int, int]:
    """``(forward, backward)`` all-gathers DeepSpeed's ZeRO-3 issues per pass of ``model`` with ``prefetch``'s
    settings after the first step (:func:`pass_gathers` over :func:`leaf_modules`, the backward in reverse)."""
    modules = leaf_modules(model)
    return pass_gathers(modules, prefetch), pass_gathers(modules[::-1], prefetch)


@lru_cache(maxsize=256)
def zero3_forward_prefetches(model: ModelSpec, prefetch: Zero3Prefetch) -> bool:
    """Whether a ZeRO-3 forward of ``model`` with ``prefetch``'s settings gathers every module but the first ahead
    of time (:func:`on_demand_fetches` over :func:`leaf_modules` is 0): from the second pass on each module's
    ``fetch_sub_module`` issues the all-gather of the parameters queued next on DeepSpeed's ``__allgather_stream``
    (v0.9.0 ``partitioned_param_coordinator.py`` lines 368-383, the same in v0.13.5) and returns, so that gather
    runs while the module computes; the trace completes at the end of every no-grad forward
    (``parameter_offload.py`` ``_end_of_forward_hook``, lines 321-324)."""
    return on_demand_fetches(leaf_modules(model), prefetch) == 0


#: A parameter in a trace: ``(its identity, its elements)``.
_Param = tuple[int, int]


def _training_trace(model: ModelSpec, recompute: bool) -> tuple[list[list[_Param]], int]:
    """``(modules, forward length)``: the modules DeepSpeed's ZeRO-3 fetches in one training step, each its
    parameters, and how many of them are the forward's. The forward is :func:`_module_groups` in order (a tied
    LM head last, holding the embedding's parameter), the backward the same in reverse; with ``recompute``
    (activation checkpointing per layer) each layer's backward is preceded by its recomputed forward, whose
    module hooks fetch again (the hooks fire on the recompute as on any forward)."""
    before, layers, after = _module_groups(model)
    ids = iter(range(1 << 30))

    def params(group: list[Module]) -> list[list[_Param]]:
        return [[(next(ids), n) for n in module] for module in group]

    head, blocks, tail = params(before), [params(layer) for layer in layers], params(after)
    if model.lm_head and model.tie_word_embeddings:
        tail.append([head[0][0]])
    forward = head + [m for block in blocks for m in block] + tail
    backward = tail[::-1]
    for block in blocks[::-1]:
        backward += (block + block[::-1]) if recompute else block[::-1]
    return forward + backward + head[::-1], len(forward)


@lru_cache(maxsize=256)
def zero3_turn_gathered(model: ModelSpec, fetch: Zero3Prefetch, recompute: bool) -> int:
    """Parameter elements a DeepSpeed ZeRO-3 rank holds gathered at the forward → backward turn of a training
    step from the second step on (the trace complete): the forward's parameters it did not release plus the
    backward's first prefetch. ``PartitionedParameterCoordinator.__params_to_release``
    (``runtime/zero/partitioned_param_coordinator.py``, v0.9.0 lines 401-429, v0.13.5 lines 487-517) keeps a
    module's parameters after it runs when one of them is fetched again by a module of the trace before the
    modules after it, counted from the next step, add up to ``stage3_max_reuse_distance`` elements (every
    parameter of each module passed counts its whole ``ds_numel``, persistent ones included; the check precedes
    each module). In a training step the next use of a forward parameter is its backward (with ``recompute`` its
    layer's recomputed forward; :func:`_training_trace`), so the last modules of the forward stay gathered into
    the backward. ``stage3_max_live_parameters`` caps the prefetch only (``max_params_to_prefetch = min(max_live
    − available, bucket)``), never what is kept. The backward's first prefetch then pops the modules not kept,
    up to that budget (:func:`pass_gathers`). Parameters of at most ``persistence_threshold`` elements are never
    gathered and not counted."""
    trace, n_forward = _training_trace(model, recompute)
    before = [0]   # before[i]: the elements of the modules ahead of module i
    for module in trace:
        before.append(before[-1] + sum(n for _, n in module))
    uses: dict[int, list[int]] = {}
    for step, module in enumerate(trace):
        for pid, _ in module:
            uses.setdefault(pid, []).append(step)
    kept: dict[int, int] = {}
    for step in range(n_forward):
        for pid, n in trace[step]:
            later = [u for u in uses[pid] if u > step]
            if n <= fetch.persistence_threshold or not later or later[0] < n_forward:
                continue   # persistent, or used again in the forward, whose use decides
            if before[later[0]] - before[step + 1] < fetch.max_reuse_distance:
                kept[pid] = n
    held = sum(kept.values())
    budget = min(fetch.max_live - held, fetch.prefetch_bucket)
    popped, seen = 0, set(kept)
    for module in trace[n_forward:]:
        if popped >= budget:
            break
        for pid, n in module:
            if n > fetch.persistence_threshold and pid not in seen:
                seen.add(pid)
                popped += n
    return held + popped


def zero3_kept_bytes(model: ModelSpec, fetch: Zero3Prefetch | None, full_recompute: bool, tp: int = 1,
                     ep: int = 1) -> float:
    """Gathered bf16 parameter bytes per GPU a DeepSpeed ZeRO-3 trainer (``fetch``: its training engine's
    settings; None: 0, as for FSDP, which releases each unit after it runs) holds at its forward → backward turn
    beyond the one gathered layer the memory model counts: ``2·max(0, G/tp − p_L)``, ``G`` the elements of
    :func:`zero3_turn_gathered`, ``p_L`` that layer's elements (its routed experts over ``ep``). The one formula
    of ``place`` (:func:`~packplace.placement.model.memory.zero3_kept_bytes`) and ``estimate``
    (:func:`~packplace.placement.model.pass_memory.pass_memory`).

    Raises:
        ConfigError: ``ep`` above 1 with ``fetch``: DeepSpeed's ZeRO-3 runs no expert parallelism
            (``deepspeed/runtime/engine.py`` ``_configure_zero_optimizer``, v0.9.0 to v0.16.x: ``assert not
            self.has_moe_layers, "MoE not supported with Stage 3"``; a Hugging Face MoE model under ZeRO-3 holds
            every expert, sharded as any other parameter, ``ep`` 1), so no rank holds a subset of the experts whose
            kept parameters this could count."""
    if fetch is None:
        return 0.0
    if ep != 1:
        raise ConfigError(f"ep: DeepSpeed ZeRO-3 runs no expert parallelism (deepspeed/runtime/engine.py: "
                          f"\"MoE not supported with Stage 3\"), so its kept parameters are priced at ep 1, "
                          f"got ep={ep}")
    layer = model.block_params / model.layers / tp
    return 2.0 * max(0.0, zero3_turn_gathered(model, fetch, full_recompute) / tp - layer)
