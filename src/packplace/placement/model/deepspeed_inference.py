"""What DeepSpeed's hybrid engine holds per GPU while DeepSpeed-Chat generates, beyond the gathered weights.

DeepSpeed-Chat's actor generates through DeepSpeed's inference containers (``runtime/hybrid_engine.py``
``DeepSpeedHybridEngine``, v0.9.0 to v0.12.6 and the OpenRLHF authors' patched 0.12.6 wheel), whose kernels keep
their activations, the attention scores and the KV cache of every layer in one preallocated buffer, not in
PyTorch's allocator. The first layer's first forward allocates it (``model_implementations/transformers/
ds_transformer.py`` ``DeepSpeedTransformerInference.forward``: ``allocate_workspace`` with the config's
``hidden_size``, ``heads``, the batch of that forward, the number of layers, ``mp_size`` and ``max_out_tokens`` /
``min_out_tokens``), sized by ``InferenceContext::GenWorkSpace``
(``csrc/transformer/inference/includes/inference_context.h``, the same in the tag and the patched wheel), per
token of ``_max_seq_len``, in elements of the inference dtype:

* activations ``10·heads·h_e·b`` (``h_e``: the head size padded to 32, 64 or 128 where it is at most 128);
* attention scores ``b·(heads/mp)·max_out_tokens``;
* the KV cache ``layers·b·(heads·h_e/mp)·2``: every layer's keys and values at the model's full head count (a
  grouped-query model's few KV heads do not shrink it: ``ds_softmax_context`` in ``pt_binding.cpp`` addresses
  ``layer_id·2·bsz·max_tokens·hidden_dim`` per layer).

``_max_seq_len`` is what the GPU's free memory holds (``cudaMemGetInfo``, read once), less
``minimal_requirements`` (the score elements of one token plus 500 MiB), capped at ``max_out_tokens``; below
``min_out_tokens`` GenWorkSpace throws ("Workspace can't be allocated, not enough memory"). The hybrid engine
sets both to its ``max_out_tokens`` (``new_inference_container``), and DeepSpeed-Chat to
``max_prompt_seq_len + max_answer_seq_len`` (``dschat/rlhf/rlhf_engine.py`` ``_init_actor``): the buffer is
always the whole length, or generation does not start. With ``--release_inference_cache`` every ``generate``
call frees it and takes the same size back (``retake_workspace``), so the step holds it again at every call.

At inference TP > 1 the hybrid engine all-gathers the group's prompts (``generate``: ``all_gather_into_tensor``
over the inference group), so each GPU of the group runs ``b`` = the group's sequences, ``mp`` = the TP degree;
its LM head is not sliced (``_other_layers`` keep the whole weight). Transformers' Llama (4.34.1, the fork's pin,
``models/llama/modeling_llama.py`` ``LlamaForCausalLM.forward``: ``logits = self.lm_head(hidden_states)``,
``logits = logits.float()``) computes the prefill's logits at every prompt position and copies them to fp32; OPT's
forward (``models/opt/modeling_opt.py``) keeps them in the model's dtype.
"""

from __future__ import annotations

from packplace.errors import ConfigError
from packplace.placement.model.counts import check_counts
from packplace.placement.problem.models import ModelSpec

#: Activation elements per sequence per token, in units of ``heads·h_e`` (``inference_context.h``
#: ``GenWorkSpace``: ``activation_size = 10 * (num_heads * effective_head_size) * batch_size``).
WORKSPACE_ACTIVATION_WIDTHS = 10
#: Bytes GenWorkSpace requires free beyond the buffer where the GPU has more than 1 GiB free
#: (``minimal_requirements``: ``500 * MEGABYTE``, ``MEGABYTE`` 1024·1024).
WORKSPACE_RESERVE_BYTES = 500 * 1024 * 1024
#: Bytes per element of the inference dtype (bf16 / fp16: ``sizeof(T)`` of ``allocate_workspace<T>``).
WORKSPACE_ELEMENT_BYTES = 2
#: Model types whose Hugging Face forward copies the logits to fp32 (transformers 4.34.1:
#: ``LlamaForCausalLM.forward`` ``logits = logits.float()``; ``OPTForCausalLM.forward`` does not).
LOGITS_KEPT_IN_MODEL_DTYPE = ("opt",)


def padded_head_size(model: ModelSpec) -> int:
    """``effective_head_size`` of ``GenWorkSpace``: the head size ``hidden/heads`` rounded up to 32, 64 or
    128 where it is at most 128, else itself."""
    head = model.hidden_dim // model.heads
    if head > 128:
        return head
    return 32 if head <= 32 else (64 if head <= 64 else 128)


def inference_workspace_bytes(model: ModelSpec, *, tp: int, sequences: int, max_out_tokens: int) -> float:
    """Bytes a GPU must have free for the hybrid engine's inference workspace (module docstring): the buffer
    ``(10·heads·h_e·b + b·(heads/tp)·T + layers·b·(heads·h_e/tp)·2)·T·2`` for ``b`` = ``sequences`` decoded
    together on the GPU and ``T`` = ``max_out_tokens``, plus GenWorkSpace's ``minimal_requirements`` (the score
    elements of one token, ``b·(heads/tp)·T``, and :data:`WORKSPACE_RESERVE_BYTES`).

    Raises:
        ValueError: ``tp``, ``sequences`` or ``max_out_tokens`` not a positive integer
            (:func:`~packplace.placement.model.counts.check_counts`), or ``tp`` not dividing the model's attention
            heads (DeepSpeed's inference containers assert ``num_attention_heads % mp_size == 0``:
            ``module_inject/containers/base.py`` ``create_ds_model_config``).
        ConfigError: a multi-head latent attention model (``kv_lora_rank``).
    """
    check_counts("inference_workspace_bytes", tp=tp, sequences=sequences, max_out_tokens=max_out_tokens)
    if model.is_mla:
        raise ConfigError(f"kv_lora_rank: {model.kv_lora_rank} (multi-head latent attention): DeepSpeed's inference "
                          "containers (the hybrid engine) have Q/K/V attention only; not modelled")
    tp, sequences, max_out_tokens = int(tp), int(sequences), int(max_out_tokens)
    if model.heads % tp:
        raise ValueError(f"inference_workspace_bytes: tp must divide the model's {model.heads} attention heads "
                         f"(DeepSpeed's inference containers split them evenly), got {tp}")
    width = model.heads * padded_head_size(model)
    activation = WORKSPACE_ACTIVATION_WIDTHS * width * sequences
    scores = sequences * (model.heads // tp) * max_out_tokens
    cache = model.layers * sequences * (width // tp) * 2
    buffer = (activation + scores + cache) * max_out_tokens * WORKSPACE_ELEMENT_BYTES
    return float(buffer + scores + WORKSPACE_RESERVE_BYTES)


def prefill_logit_bytes(model: ModelSpec, *, sequences: int, prompt_len: int) -> float:
    """Bytes of the prefill's logits on each GPU of the hybrid engine (module docstring): ``b·S·V`` in the
    model's dtype (the unsliced LM head's output), plus their fp32 copy except for
    :data:`LOGITS_KEPT_IN_MODEL_DTYPE`.

    Raises:
        ValueError: ``sequences`` or ``prompt_len`` not a positive integer
            (:func:`~packplace.placement.model.counts.check_counts`).
    """
    check_counts("prefill_logit_bytes", sequences=sequences, prompt_len=prompt_len)
    sequences, prompt_len = int(sequences), int(prompt_len)
    per_entry = 2 + (0 if model.model_type in LOGITS_KEPT_IN_MODEL_DTYPE else 4)
    return float(sequences * prompt_len * model.output_dim * per_entry)
