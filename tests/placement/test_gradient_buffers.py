"""A DeepSpeed ZeRO or Megatron-Core trainer's gradient buffers beyond the gradients the training state counts
(:mod:`packplace.placement.model.gradient_buffers`), and the output head's fp32 input gradient under autocast.
Figures hand-computed from the config shapes and DeepSpeed's default ``reduce_bucket_size`` (5e8 elements)."""

from __future__ import annotations

import pytest

from packplace.placement.model.deepspeed_zero2 import zero2_partition_gradient_elements
from packplace.placement.model.deepspeed_zero3 import DEEPSPEED_DEFAULTS
from packplace.placement.model.framework import fp32_gradient_accumulation
from packplace.placement.model.gradient_buffers import (
    NO_BUFFERS,
    GradientBuffers,
    gradient_buffers,
    largest_layer_matrix,
    megatron_buffers,
    zero3_buffers,
    zero12_buffers,
    zero_step_bytes,
)
from packplace.placement.model.memory import TrainingOptions, vertex_memory
from packplace.placement.model.pass_memory import head_backward_bytes, pass_memory
from packplace.shape import from_hf_config

# huggingface.co/meta-llama/Llama-2-7b-hf config.json
LLAMA2_7B = from_hf_config({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                            "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
                            "vocab_size": 32000})
P = 6_738_415_616          # Llama-2-7B's parameters
MLP = 4096 * 11008         # its largest layer matrix (gate, up or down) = 45,088,768 elements
BUCKET = 500_000_000       # DeepSpeed's default reduce_bucket_size, elements


def test_largest_layer_matrix_is_an_mlp_matrix_over_tp() -> None:
    """Llama-2-7B: d·f = 4096·11008 = 45,088,768 elements, above Q's d·d = 16,777,216; half at tp 2."""
    assert P == LLAMA2_7B.params
    assert largest_layer_matrix(LLAMA2_7B, 1) == MLP == 45_088_768
    assert largest_layer_matrix(LLAMA2_7B, 2) == 22_544_384


def test_zero2_holds_one_bucket_through_the_backward_and_openrlhf_flattens_it() -> None:
    """ZeRO-2: ipg_buffer[0], 5e8 bf16 elements = 1,000,000,000 B in every backward phase; in the layer's backward
    one MLP matrix's gradient, 2·45,088,768 = 90,177,536 B, and on OpenRLHF (DeepSpeed 0.13.5) the bucket's
    flat copy, 2·5e8 = 1,000,000,000 B: 1,090,177,536 B. DeepSpeed-Chat (0.9.x) reduces in place: 90,177,536 B."""
    # resident: the straddling tensors of the fullest rank's grads_in_partition (test below), 2·73,793,280 B
    straddling = 2 * (494_944_256 - P // 16)
    assert straddling == 147_586_560
    openrlhf = gradient_buffers(LLAMA2_7B, framework="openrlhf", sharding="zero2", tp=1, dp=16, trainable=P)
    # the step: the partition flattened and cast to fp32, 6·P/16 = 6·421,150,976 = 2,526,905,856 B
    step = 2_526_905_856
    assert openrlhf == GradientBuffers(resident=straddling, backward=1_000_000_000, layer=1_090_177_536, step=step)
    dschat = gradient_buffers(LLAMA2_7B, framework="deepspeed-chat", sharding="zero2", tp=1, dp=16, trainable=P)
    assert dschat == GradientBuffers(resident=straddling, backward=1_000_000_000, layer=90_177_536, step=step)
    # ZeRO-1 keeps whole gradients in the training state (no partition buffer priced)
    zero1 = gradient_buffers(LLAMA2_7B, framework="openrlhf", sharding="zero1", tp=1, dp=16, trainable=P)
    assert zero1 == GradientBuffers(resident=0.0, backward=1_000_000_000, layer=1_090_177_536, step=step)


def test_zero2_partition_buffer_holds_the_tensors_straddling_its_edges() -> None:
    """A one-layer toy (d 4, f 8, V 16, untied): tensors embed 64, Q K V O 16 each, norm 4, gate up down 32 each,
    norm 4, final norm 4, head 64 = 300 elements; over 2 ranks 150 each. Rank 0's partition [0, 150) ends inside
    gate [132, 164): it holds embed..norm (132) and the whole gate, 164; rank 1 the whole gate, up, down, the two
    norms and the head, 32·3 + 4 + 4 + 64 = 168, the largest. Llama-2-7B over 16: 494,944,256 (P/16 =
    421,150,976)."""
    toy = from_hf_config({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 4, "intermediate_size": 8,
                          "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 16})
    assert toy.params == 300
    assert zero2_partition_gradient_elements(toy, 2) == 168
    assert zero2_partition_gradient_elements(toy, 1) == 300
    assert zero2_partition_gradient_elements(LLAMA2_7B, 16) == 494_944_256


def test_a_model_smaller_than_a_bucket_flattens_only_its_gradients() -> None:
    """OPT-350M-sized trainable set, 331,196,416 elements < 5e8: the flat copy is 2·331,196,416 = 662,392,832 B."""
    assert zero12_buffers(331_196_416, 0.0, flattens=True).layer == 662_392_832
    assert zero3_buffers(331_196_416, 0.0, dp=8).layer == 662_392_832


def test_zero3_keeps_its_flat_bucket_and_openrlhf_its_fp32_partitions() -> None:
    """ZeRO-3, Llama-2-7B over 8 ranks: the flat ipg bucket, 1,000,000,000 B, in every phase; OpenRLHF's fp32
    gradient partitions (before v0.5) add 2·P/8 = 1,684,603,904 B to it (2,684,603,904 B), none with the optimizer
    offloaded (they live on the host) or at a current release; the layer's backward holds one matrix's gradient and
    the reduce-scatter's interleaved copy of the bucket: 90,177,536 + 1,000,000,000 = 1,090,177,536 B; the step's
    flat fp32 cast of the partition (842,301,952 elements, below the 1e9 sub-group): 6·842,301,952 = 5,053,811,712
    B."""
    step = 5_053_811_712
    openrlhf = gradient_buffers(LLAMA2_7B, framework="openrlhf", sharding="zero3", tp=1, dp=8, trainable=P,
                                fp32_partitions=True)
    assert openrlhf == GradientBuffers(resident=2_684_603_904, backward=0.0, layer=1_090_177_536, step=step)
    current = gradient_buffers(LLAMA2_7B, framework="openrlhf", sharding="zero3", tp=1, dp=8, trainable=P)
    assert current.resident == 1_000_000_000
    offloaded = gradient_buffers(LLAMA2_7B, framework="openrlhf", sharding="zero3", tp=1, dp=8, trainable=P,
                                 offload="optimizer", fp32_partitions=True)
    assert offloaded.resident == 1_000_000_000 and offloaded.step == 0.0
    dschat = gradient_buffers(LLAMA2_7B, framework="deepspeed-chat", sharding="zero3", tp=1, dp=8, trainable=P)
    assert dschat == GradientBuffers(resident=1_000_000_000, backward=0.0, layer=1_090_177_536, step=step)


def test_zero3_step_casts_one_sub_group_at_a_time() -> None:
    """ZeRO-3's step casts each sub-group (1e9 elements) in turn: a 70e9-parameter model over 8 ranks (8.75e9 a
    rank) holds 6·1e9 = 6e9 B at the step, ZeRO-2 its whole partition, 6·8.75e9 = 5.25e10 B."""
    assert zero_step_bytes("zero3", 70e9, 8) == 6e9
    assert zero_step_bytes("zero2", 70e9, 8) == 5.25e10


def test_lora_has_no_layer_matrix_gradient_and_other_trainers_no_buffers() -> None:
    """Under LoRA the layers' matrices are frozen: the flat copy of the trainable set alone (2·2e7 = 4e7 B);
    verl (FSDP: fsdp_train_bytes), a bare loop and ``sharding: none`` have none."""
    lora = gradient_buffers(LLAMA2_7B, framework="deepspeed-chat", sharding="zero3", tp=1, dp=8,
                            trainable=20_000_000, lora=True)
    assert lora.layer == 40_000_000
    for framework, sharding in (("verl", "zero3"), ("none", "none"), ("openrlhf", "none")):
        assert gradient_buffers(LLAMA2_7B, framework=framework, sharding=sharding, tp=1, dp=8,
                                trainable=P) is NO_BUFFERS


def test_megatron_output_layer_keeps_its_sequence_parallel_gather_buffer() -> None:
    """Megatron-Core's output layer at tp 2: the global "mpu" buffer of the gathered [s, d] input, 2·4096·8192 =
    67,108,864 B for 8,192 tokens, kept in every phase on the last stage; none at tp 1, on another stage or
    without sequence parallelism."""
    assert megatron_buffers(LLAMA2_7B, tp=2, tokens=8192, last=True).resident == 67_108_864
    assert megatron_buffers(LLAMA2_7B, tp=1, tokens=8192, last=True) is NO_BUFFERS
    assert megatron_buffers(LLAMA2_7B, tp=2, tokens=8192, last=False) is NO_BUFFERS
    assert gradient_buffers(LLAMA2_7B, framework="nemo-rl", sharding="zero1", tp=2, dp=4, trainable=P,
                            megatron=True, tokens=8192, last=True).resident == 67_108_864
    # without sequence parallelism the output layer's input is whole on every TP rank: nothing is gathered into it
    assert gradient_buffers(LLAMA2_7B, framework="nemo-rl", sharding="zero1", tp=2, dp=4, trainable=P,
                            megatron=True, tokens=8192, last=True, sequence_parallel=False) is NO_BUFFERS


def test_vertex_charges_zero3_bucket_as_resident() -> None:
    """``place``'s training vertex: OpenRLHF 0.2.7 ZeRO-3 over 8 ranks holds 2,684,603,904 B more resident than
    the same layout on verl's FSDP, whose root and layer backward are transient (fsdp_train_bytes); a current
    OpenRLHF (bf16 gradient partitions) the bucket alone, 1,000,000,000 B."""
    args = dict(dp=8, pp=1, tp=1, micro_batch=1, micro_batches=1, seq_len=1024, prompt_len=512, live_len=1024,
                options=TrainingOptions(sharding="zero3", recompute="full"), workspace_bytes=0.0)
    openrlhf = vertex_memory(LLAMA2_7B, "train", framework="openrlhf", zero3_fetch=DEEPSPEED_DEFAULTS,
                             fp32_grad_partitions=fp32_gradient_accumulation("openrlhf", "0.2.7"),
                             **args)  # type: ignore[arg-type]
    current = vertex_memory(LLAMA2_7B, "train", framework="openrlhf", zero3_fetch=DEEPSPEED_DEFAULTS,
                            **args)  # type: ignore[arg-type]
    verl = vertex_memory(LLAMA2_7B, "train", framework="verl", **args)  # type: ignore[arg-type]
    assert openrlhf[0] - verl[0] == pytest.approx(2_684_603_904)
    assert current[0] - verl[0] == pytest.approx(1_000_000_000)


def test_openrlhf_accumulates_in_fp32_before_v0_5_only() -> None:
    """OpenRLHF's get_train_ds_config: ``"fp32"`` by default to v0.4.x, unset from v0.5; no version: current."""
    assert fp32_gradient_accumulation("openrlhf", "0.2.7")
    assert fp32_gradient_accumulation("openrlhf", "0.4.6")
    assert not fp32_gradient_accumulation("openrlhf", "0.5.0")
    assert not fp32_gradient_accumulation("openrlhf", None)
    assert not fp32_gradient_accumulation("verl", "0.4.1")


def test_estimate_zero2_layer_backward_holds_bucket_matrix_and_flat_copy() -> None:
    """``estimate``'s pass, OpenRLHF ZeRO-2 over 16: the ``layer_backward`` phase's gradients are the shard
    2·P/16 = 842,301,952 B plus 147,586,560 + 1,000,000,000 + 1,090,177,536 B of buffers = 3,080,066,048 B."""
    pm = pass_memory(LLAMA2_7B, "train", micro_batch=1, seq_len=1024, dp=16, sharding="zero2",
                     framework="openrlhf", recompute="full", workspace_bytes=0.0)
    assert pm.phase == "layer_backward"
    assert pm.gradients == pytest.approx(3_080_066_048)


def test_autocast_head_weight_cast_holds_the_fp32_input_gradient() -> None:
    """Under autocast the head weight gradient's fp32 cast (6·V·d) is live with the head input's fp32 gradient
    (4·d·t). Llama-2-7B's head 32000·4096 = 131,072,000, 1,024 tokens: 6·131,072,000 = 786,432,000 plus
    4·4096·1024 = 16,777,216, 803,209,216 B, above 2V·t + 2d·t + 2·head = 65,536,000 + 8,388,608 + 262,144,000,
    with 3 tensors' slack of 1 MiB: 806,354,944 B."""
    head = 32000 * 4096
    assert head_backward_bytes(LLAMA2_7B, 1024, head, True) == 806_354_944
    assert head_backward_bytes(LLAMA2_7B, 1024, head, False) == 65_536_000 + 8_388_608 + 262_144_000 + 3 * 2**20


def test_estimate_prices_the_zero_step_as_a_phase() -> None:
    """A 16-token micro-batch (OpenRLHF ZeRO-2 over 16, Llama-2-7B): the step's flat fp32 cast, 2,526,905,856 B,
    exceeds the layer backward's buffers (1,000,000,000 + 1,090,177,536 B) and its activations, so the pass peaks
    at the step: gradients 842,301,952 (shard) + 147,586,560 (straddling) + 2,526,905,856 = 3,516,794,368 B, no
    activations or logits."""
    pm = pass_memory(LLAMA2_7B, "train", micro_batch=1, seq_len=16, dp=16, sharding="zero2",
                     framework="openrlhf", recompute="full", workspace_bytes=0.0)
    assert pm.phase == "optimizer_step"
    assert pm.gradients == pytest.approx(3_516_794_368)
    assert pm.activations == pm.logits == 0.0
