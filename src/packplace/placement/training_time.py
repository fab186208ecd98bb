"""Seconds that the training memory options cost (:class:`~packplace.placement.memory.TrainingOptions`).

Saving memory is not free, so the planner sees the trade-off:

* ``recompute: selective`` re-runs the attention core (QKᵀ, softmax, AV) in the backward pass: one more
  forward of the attention term ``2·L·s·q`` FLOPs per token (Korthikanti et al. 2022, §5: "selective
  activation recomputation", ≈ 2-4 % of a step for GPT-3-sized models) at ``gemm_peak_fraction`` of peak;
* ``recompute: full`` re-runs each layer's forward pass before its backward pass: one more forward pass
  over every micro-batch (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost"; Korthikanti
  et al. 2022, Table 4: ≈ 33-36 % overhead), the inference pass time of the same strategy;
* ``offload: optimizer`` sends the gradients to the host and the updated bf16 weights back once per step
  (ZeRO-Offload, Ren et al. 2021, §4): ``(g + 2)·p_shard`` bytes at ``host_bandwidth``; the CPU Adam step
  is assumed to overlap with these transfers (ZeRO-Offload's one-step delayed update is not modelled);
* ``offload: optimizer+params`` also streams each GPU's weight shard from the host for the forward and
  the backward of every micro-batch (ZeRO-Infinity, Rajbhandari et al. 2021; FSDP ``CPUOffload``):
  ``2·2·p_shard·m`` more bytes at ``host_bandwidth``.

``p_shard`` is the parameters a GPU owns: ``params/(tp·pp)``, divided by ``dp`` under zero1-3 (each rank
updates its shard); with expert parallelism (``ep``) the routed experts count ``1/ep`` of that, sharded
over the ``dp/ep`` ranks holding the same experts, which gives the same ``params/(tp·pp·dp)`` under zero1-3.
Every GPU has its own PCIe link (HGX nodes: one PCIe switch port per GPU).
"""

from __future__ import annotations

from packplace.placement.memory import TrainingOptions, stage_share
from packplace.placement.models import ModelSpec


def training_overhead_seconds(cost, model: ModelSpec, options: TrainingOptions, dp: int, pp: int, tp: int,
                              micro_batch: int, extent: tuple[int, int, int], ep: int = 1) -> float:
    """Extra seconds per step of ``options`` for a training vertex (module docstring).

    Args:
        cost: The instance's :class:`~packplace.placement.cost.CostModel` (hardware, workload).
        model, options: The trained model and its memory options.
        dp, pp, tp, micro_batch, extent, ep: The candidate's strategy and block shape.

    Returns:
        Seconds (0 for ``recompute: none`` and ``offload: none``).
    """
    hw, w = cost.hw, cost.workload
    micro_batches = w.sequences // (dp * micro_batch)
    seconds = 0.0
    if options.recompute == "full":
        seconds += cost.pass_time(model, False, dp, pp, tp, micro_batch, extent, ep)
    elif options.recompute == "selective":
        s = w.train_seq_len
        tokens = micro_batch * s
        attention = 2.0 * model.layers * s * model.attention_dim * tokens   # forward attention FLOPs
        stage = attention * stage_share(model.layers, pp) / (tp * hw.flops_per_gpu * hw.gemm_peak_fraction)
        seconds += cost.pipeline(micro_batches, pp, stage)
    if options.offload != "none":
        shard = model.params * stage_share(model.layers, pp) / tp
        if options.sharding != "none":
            shard /= dp
        elif ep > 1 and model.is_moe:
            shard -= model.expert_params * stage_share(model.layers, pp) / tp * (1.0 - 1.0 / ep)
        grad_bytes = 4.0 if options.fp32_grad_buffer else 2.0
        moved = (grad_bytes + 2.0) * shard
        if options.offload == "optimizer+params":
            moved += 2.0 * 2.0 * shard * micro_batches
        seconds += moved / hw.host_bandwidth
    return seconds
