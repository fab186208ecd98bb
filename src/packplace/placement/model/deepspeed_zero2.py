"""How many collectives DeepSpeed 0.9.x's ZeRO-2 runs per optimizer step (DeepSpeed-Chat's Table 1 release).

DeepSpeed v0.9.0 (``pip install deepspeed>=0.9.0`` in the DeepSpeed-Chat README of the Table 1 release) reduces a
ZeRO-2 trainer's gradients in buckets, not with one reduce-scatter: ``runtime/zero/stage_1_and_2.py``
``reduce_independent_p_g_buckets_and_remove_grads`` collects each gradient into the bucket as the backward
produces it and flushes the bucket before it would exceed ``reduce_bucket_size`` elements (the ZeRO config's
default 5e8, ``runtime/zero/config.py``; DeepSpeed-Chat's ``get_train_ds_config`` sets none) and after the last
gradient; ``average_tensor`` then walks the bucket's gradients and, for every run of consecutive slices owned
by the same data-parallel rank (each parameter group is flattened and split into ``dp`` equal partitions,
so one gradient may span several), issues one ``dist.reduce`` to that rank. One NCCL ring reduce per run:
``(dp − 1)`` ring steps of latency each, where a reduce-scatter of the whole bucket has ``dp − 1`` in all.
The same code is in v0.9.0 to v0.10.x; v0.12 (pull request "Communication Optimization for Large-Scale
Training", deepspeedai/DeepSpeed #4695) all-reduces each bucket instead. DeepSpeed's issue "Excessive small
reduce operations scheduled in backward pass with ZeRO2" (#3151, April 2023) and pull request #2581 describe the
fragmentation. After the optimizer step ``runtime/utils.py`` ``all_gather_dp_groups`` gathers each group's
updated parameters in ``max(1, ⌊partition·dp / allgather_bucket_size⌋)`` all-gathers (default 5e8).

DeepSpeed-Chat's optimizer has two parameter groups, as the release that ran Table 1 (DeepSpeedExamples
e468799f, "DeepSpeed Chat Release", 2023-04-11; the validation files' DeepSpeed-Chat OPT rows) builds them:
``applications/DeepSpeed-Chat/training/utils/utils.py`` ``get_optimizer_grouped_parameters`` (lines 78-102,
default ``no_decay_name_list=["bias", "LayerNorm.weight"]`` on lines 80-82), which step 3's
``training/step3_rlhf_finetuning/rlhf_engine.py`` calls with that default for the actor (lines 100-101) and the
critic (lines 208-209). Weight decay for every parameter whose name contains neither string (a case-sensitive
substring test), none for the others: in the OPT and Llama families, whose norms are named ``*_layer_norm`` /
``*layernorm``, the no-decay group is the biases, the norms' included, and the norm weights decay. DeepSpeedExamples
8d850ba2 ("deepspeed-chat: fix weight decay configuration", 2023-10-16) lengthened the default to ``bias``,
``layer_norm.weight``, ``layernorm.weight``, ``norm.weight``, ``ln_f.weight``, moving those norm weights into the
no-decay group; a later release's run is not the one modelled here.

The parameter order is the Hugging Face module order of a decoder block: Q, K, V, O (each weight then its
bias), the attention norm, the MLP (gate, up, down), the second norm; the embeddings (token, then learned
positions, then the ``embedding_dim`` projections) first, the final norm and the head last. The backward
produces the gradients in the reverse order (a tied LM head's matrix is the token embedding, finished last).
OPT orders K, V, Q; the three are the same size, so the count is the same. OPT also registers its final
LayerNorm before the layers (``OPTDecoder.__init__``), which moves the partition edges by ``d`` elements: laid
out that way OPT-1.3B counts 479 reduces on 64 ranks instead of 485, 125 on 8 instead of 138.
"""

from __future__ import annotations

from functools import lru_cache

from packplace.placement.model.counts import check_counts
from packplace.placement.problem.models import ModelSpec

#: DeepSpeed's ZeRO ``reduce_bucket_size`` and ``allgather_bucket_size`` defaults, elements (v0.9.0
#: ``runtime/zero/config.py``: ``pp_int(5e8)`` each).
ZERO_BUCKET_ELEMENTS = 500_000_000
#: DeepSpeed's ``nccl_start_alignment_factor`` (v0.9.0 ``stage_1_and_2.py``: 2 elements, so a partition of
#: 16-bit values starts on a 4-byte boundary); each flattened group is padded to a multiple of it times ``dp``.
ZERO_ALIGNMENT = 2


def parameter_tensors(model: ModelSpec) -> list[tuple[int, bool]]:
    """``(elements, no weight decay)`` of every trainable tensor of a dense ``model`` in module order (module
    docstring; multi-head latent attention's modules, :attr:`~packplace.shape.TransformerShape.mla_modules`, in place
    of Q, K, V, O); no weight decay for the biases alone (e468799f's ``["bias", "LayerNorm.weight"]``). Raises
    ``ValueError`` for a mixture-of-experts model (its experts' tensors are not listed)."""
    if model.is_moe:
        raise ValueError(f"parameter_tensors: a mixture-of-experts model ({model.num_experts} experts) is not listed")
    d, e = model.hidden_dim, model.embedding_dim or model.hidden_dim
    q, k = model.attention_dim, model.kv_heads * model.head_dim
    linear_bias = model.bias == "all"
    out: list[tuple[int, bool]] = [(model.vocab_size * e, False)]
    if model.position_embeddings:
        out.append((model.position_embeddings * d, False))
    if e != d:
        out.append((e * d, False))   # project_in (no bias)

    def norm() -> list[tuple[int, bool]]:
        return [(d, False), (d, True)] if model.norm == "layer" else [(d, False)]

    qkv_bias = model.bias != "none"
    block: list[tuple[int, bool]] = []
    for elements, width, bias in ((d * q, q, qkv_bias), (d * k, k, qkv_bias), (d * k, k, qkv_bias),
                                  (q * d, d, linear_bias)):   # Q, K, V, O
        block += [(elements, False)] + ([(width, True)] if bias else [])
    if model.is_mla:   # multi-head latent attention's modules, no biases (their norms' names decay as Llama's)
        block = [(n, False) for n in model.mla_modules]
    block += norm()
    mlp = [model.ffn_dim] * (2 if model.mlp == "gated" else 1)
    for width in mlp:
        block += [(d * width, False)] + ([(width, True)] if linear_bias else [])
    block += [(model.ffn_dim * d, False)] + ([(d, True)] if linear_bias else [])
    block += norm()
    out += block * model.layers
    out += norm()
    if e != d and model.lm_head:
        out.append((d * e, False))   # project_out (no bias)
    if not model.lm_head:
        out.append((d, False))       # the scalar value head (DeepSpeed-Chat's v_head, no bias)
    elif not model.tie_word_embeddings:
        out.append((e * model.vocab_size, False))
    return out


def _partition_spans(tensors: list[tuple[int, bool]], dp: int) -> list[list[int]]:
    """For each tensor, the data-parallel ranks owning its slices (in order): each group (weight decay or
    not) flattened in module order, padded to a multiple of ``ZERO_ALIGNMENT·dp`` and split into ``dp`` equal
    partitions."""
    spans: list[list[int]] = [[] for _ in tensors]
    for group in (False, True):
        members = [i for i, (_, no_decay) in enumerate(tensors) if no_decay is group]
        total = sum(tensors[i][0] for i in members)
        total += -total % (ZERO_ALIGNMENT * dp)
        part = max(1, total // dp)
        offset = 0
        for i in members:
            end = offset + tensors[i][0]
            spans[i] = list(range(offset // part, (end - 1) // part + 1))
            offset = end
    return spans


def zero2_collective_calls(model: ModelSpec, dp: int) -> tuple[int, int]:
    """``(reduces, all-gathers)`` one ZeRO-2 optimizer step of DeepSpeed 0.9.x issues over ``dp`` ranks for
    ``model`` trained whole (module docstring): one ``dist.reduce`` per run of same-rank slices in each
    gradient bucket, and the step's parameter all-gathers. ``(0, 0)`` for ``dp ≤ 1``.

    Raises:
        ValueError: ``dp`` not a positive integer, or a mixture-of-experts model.
    """
    check_counts("zero2_collective_calls", dp=dp)
    dp = int(dp)
    if dp == 1:
        return 0, 0
    tensors = parameter_tensors(model)
    spans = _partition_spans(tensors, dp)
    reduces = filled = 0
    previous = -1
    for i in reversed(range(len(tensors))):   # the backward's order
        if filled and filled + tensors[i][0] > ZERO_BUCKET_ELEMENTS:
            filled, previous = 0, -1          # the bucket is reduced; the next starts afresh
        for rank in spans[i]:
            reduces += rank != previous
            previous = rank
        filled += tensors[i][0]
    gathers = 0
    for group in (False, True):
        total = sum(n for n, no_decay in tensors if no_decay is group)
        if total:
            gathers += max(1, (total + -total % (ZERO_ALIGNMENT * dp)) // ZERO_BUCKET_ELEMENTS)
    return reduces, gathers


@lru_cache(maxsize=256)
def zero2_partition_gradient_elements(model: ModelSpec, dp: int) -> int:
    """Elements of the largest ``grads_in_partition`` buffer a ZeRO-2 rank of ``dp`` allocates for ``model``
    trained whole: ``DeepSpeedZeroOptimizer.copy_grads_in_partition`` (``stage_1_and_2.py``, v0.9.0 and v0.13.5)
    sizes it as the sum of ``numel()`` of every parameter in ``params_in_partition``, the parameters any of whose
    elements fall in the rank's partition, whole, so a rank holds its partition plus the rest of the tensors
    straddling its edges (laid out as :func:`_partition_spans`). For a mixture-of-experts model (no tensor list)
    the partition plus the two largest tensors' elements bound it. ``dp`` 1: the model's parameters."""
    if model.is_moe:
        largest = max(model.vocab_size * (model.embedding_dim or model.hidden_dim),
                      model.hidden_dim * max(model.expert_ffn_dim, model.shared_expert_ffn_dim, model.ffn_dim))
        return -(-model.params // dp) + 2 * largest
    tensors = parameter_tensors(model)
    held = [0] * dp
    for (elements, _), ranks in zip(tensors, _partition_spans(tensors, dp)):
        for rank in ranks:
            held[rank] += elements
    return max(held)
