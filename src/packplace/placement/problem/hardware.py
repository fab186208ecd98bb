"""The device grid (racks × nodes × GPUs) and the hardware figures of one GPU type.

GPU ids are linear: ``gid = (r · N + n) · G + g`` for rack ``r``, node ``n`` in the rack, GPU ``g`` in
the node. Every block of the grid (see :class:`packplace.placement.problem.plan.Allocation`) is then a
contiguous range ``[lo, hi)`` of ids, which keeps the evaluator's overlap and level tests O(1).

Communication levels: ``0`` inside a node (suffix ``_g``), ``1`` across nodes of one rack (``_n``),
``2`` across racks (``_r``); each has an α–β (latency, inverse bandwidth) pair for collectives and for
point-to-point transfers.

GPU presets (:data:`PRESETS`, ``hardware: {preset: h100-sxm}``) hold datasheet figures, link figures
from :func:`_links` and documented efficiency estimates, each with its source in the comment above the
table; a config's own fields override them. Adding a preset: ``docs/recipes/add-a-gpu-preset.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packplace.errors import ConfigError

#: Communication level names, indexed by level.
LEVEL_NAMES = ("g", "n", "r")


@dataclass(frozen=True)
class Cluster:
    """A homogeneous grid of ``racks × nodes_per_rack × gpus_per_node`` GPUs.

    ``gpus_per_host`` (``None``: ``gpus_per_node``) is the GPUs of one host, the unit a job launcher (Ray,
    a framework's ``gpus_per_node``) calls a node, when a node of the grid (one NVLink domain) holds
    several: a GB200 NVL72 domain of 72 GPUs is 18 hosts (compute trays) of 4. It divides
    ``gpus_per_node``; the link levels do not see it.
    """

    racks: int
    nodes_per_rack: int
    gpus_per_node: int
    gpus_per_host: int | None = None

    @property
    def host_gpus(self) -> int:
        """GPUs of one host: ``gpus_per_host``, else ``gpus_per_node``."""
        return self.gpus_per_host or self.gpus_per_node

    def host_share(self, g_ext: int) -> int:
        """GPUs per host of a block with ``g_ext`` GPUs per node: ``min(g_ext, host_gpus)``."""
        return min(g_ext, self.host_gpus)

    @property
    def num_gpus(self) -> int:
        """Total GPU count ``R · N · G``."""
        return self.racks * self.nodes_per_rack * self.gpus_per_node

    @property
    def gpus_per_rack(self) -> int:
        """``N · G``."""
        return self.nodes_per_rack * self.gpus_per_node

    def gpu_id(self, rack: int, node: int, gpu: int) -> int:
        """Linear id of GPU ``(rack, node, gpu)``."""
        return (rack * self.nodes_per_rack + node) * self.gpus_per_node + gpu

    def coords(self, gid: int) -> tuple[int, int, int]:
        """``(rack, node, gpu)`` of linear id ``gid``."""
        node_all, gpu = divmod(gid, self.gpus_per_node)
        rack, node = divmod(node_all, self.nodes_per_rack)
        return rack, node, gpu

    def span_level(self, lo: int, hi: int) -> int:
        """Slowest communication level inside the id range ``[lo, hi)``: 0 node, 1 rack, 2 across racks."""
        last = hi - 1
        if lo // self.gpus_per_node == last // self.gpus_per_node:
            return 0
        if lo // self.gpus_per_rack == last // self.gpus_per_rack:
            return 1
        return 2


@dataclass(frozen=True)
class Hardware:
    """Per-GPU throughput, memory and the α–β link model at three levels.

    Range checks of the config loader (:mod:`packplace.placement.problem.config`): ``flops_per_gpu``,
    ``memory_per_gpu`` and ``memory_bandwidth`` ≥ 1e6 (smaller values are not a GPU and make every time
    astronomically large); fractions in (0, 1].

    Attributes:
        flops_per_gpu: Peak dense bf16 throughput, FLOP/s.
        memory_per_gpu: The GPU's memory as CUDA reports it, bytes: the total of ``torch.cuda.mem_get_info()``
            (vLLM's ``gpu_memory_utilization`` is a fraction of it; the CUDA context within it is
            ``memory_workspace``, counted on its own). A config's own value is taken as that total.
        memory_bandwidth: HBM bandwidth, bytes/s.
        alpha_coll_{g,n,r}: Per-step latency of a ring collective at level g/n/r, seconds.
        beta_coll_{g,n,r}: Inverse bus bandwidth of a collective, seconds/byte.
        alpha_p2p_{g,n,r}, beta_p2p_{g,n,r}: The same for point-to-point transfers.
        gemm_m_half: Rows of a GEMM (micro-batch tokens; with tensor parallelism every rank holds all
            of them), in units of 64 rows, at which a GEMM reaches half of its ceiling (default 5: 320 rows).
        gemm_peak_fraction: Ceiling of the GEMM efficiency, the fraction of ``flops_per_gpu`` a very large
            dense GEMM sustains (0 < x ≤ 1). Default 0.7: datasheet peaks are not reached by real GEMMs
            (H100 SXM bf16: ~700-750 of 989 TFLOP/s with cuBLAS, A100 ~250-280 of 312), and whole
            training steps sustain less (Megatron-LM reports 0.52-0.57 of A100 peak as MFU at scale,
            Narayanan et al. 2021); the default never exceeds these sustained fractions.
        gemm_k_half: Inner dimension (hidden size per tensor-parallel rank), in units of 64, at which
            a GEMM reaches half of peak; 0 disables the term.
        decode_bw_eff: Fraction of ``memory_bandwidth`` a decode step achieves (0 < x ≤ 1; default 0.7,
            an in-sample default: :data:`PRESETS`).
        non_gemm_constant: Seconds per layer per micro-batch spent outside GEMMs (norms, softmax,
            kernel launches); 0 disables.
        non_gemm_scaling: Seconds per layer per ``non_gemm_batch_cal`` tokens (per tensor-parallel rank)
            outside GEMMs.
        non_gemm_batch_cal: Token count at which ``non_gemm_scaling`` was calibrated.
        host_bandwidth: Host↔GPU (PCIe) bandwidth per GPU, one direction, bytes/s: what sleep/wake
            (offload/onload of a colocated engine's weights) moves at. Default 25e9: PCIe Gen4 x16 is
            32 GB/s per direction (PCI-SIG), pinned-memory copies sustain ≈ 25 GB/s; Gen5 doubles it.
        decode_step_overhead: Seconds added to every decode step of a generation engine (scheduler,
            sampling, Python and launch overhead that CUDA graphs do not hide); ``None`` (the default, no
            preset sets it): the framework engine's
            (:attr:`~packplace.placement.model.framework.FrameworkProfile.decode_step_overhead`); a value set
            here (a config override, a ``calibrate`` fit) replaces it.
        phase_overhead: Seconds added once to every task of the step, on top of the framework profile's
            derived dispatch (:mod:`packplace.placement.model.framework`); default 0, no preset sets it: a
            knob for ``calibrate`` to fit a measured per-task cost.
        weight_sync_overhead: Seconds added to every per-step weight synchronisation from a trainer to
            its rollout engine, on top of the framework's refit path; default 0, no preset sets it.
        inprocess_host_per_sequence: Host seconds per running sequence that every synchronous decode
            iteration of an in-process engine adds (a framework profile with
            :attr:`~packplace.placement.model.framework.FrameworkProfile.inprocess_engine`: NeMo RL's
            ``vllm.LLM`` with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), on top of the engine's own host time per
            sequence; default 0, no preset sets it and no source sizes it: a knob ``calibrate`` and the
            cross-validation (``--knobs inprocess_host_per_sequence:framework``) can fit, left out of the
            cross-validation's defaults because NeMo RL's off-policy runs (asynchronous engine, never charged)
            miss as much time as its on-policy ones (docs/calibration-and-validation.md).
        moe_decode_bw_eff: Fraction of ``memory_bandwidth`` at which a decode step streams the routed
            experts' weights of a mixture of experts once each expert receives
            :data:`MOE_FULL_TOKENS` tokens or more (the fused-MoE grouped GEMMs;
            :meth:`expert_decode_bw_eff`); 0 (the default): ``decode_bw_eff``, as for dense weights.
            Source of the H100 value: :data:`MOE_DECODE_BW_EFF_H100`.
        moe_gemm_peak_fraction: Ceiling of the routed experts' GEMM efficiency in the training and
            log-prob passes of a mixture of experts (in place of ``gemm_peak_fraction`` for the
            experts' FLOPs; the rows-per-expert saturation still applies); 0 (the default):
            ``gemm_peak_fraction``. Source of the H100 value: :data:`MOE_GEMM_PEAK_FRACTION_H100`.
        megatron_pass_factor: Time factor on the kernels of a trainer's Megatron-Core passes priced by the
            component table (the layers and the head of every training, log-prob, reference and value
            micro-batch, :meth:`~packplace.placement.model.cost.CostModel.pass_kernels` ``megatron``):
            NVIDIA's published Megatron-Core pre-training step over the one the component model prices,
            per GPU type; 1 (the default): the table as it is. Sources of the H100 and GB200 values:
            :data:`MEGATRON_PASS_FACTOR_H100`, :data:`MEGATRON_PASS_FACTOR_GB200`.
        vllm_kv_bandwidth_fraction: Fraction of the KV-read rate its kernels reach at which a vLLM engine's
            decode iteration reads the KV cache (every framework profile with a vLLM engine,
            :attr:`~packplace.placement.model.framework.FrameworkProfile.engine_generation` set; not the
            DeepSpeed hybrid engine), in [0.01, 1] (the config refuses a value outside it): it multiplies the
            rate of the path that prices the iteration, the component table's ``kv_bandwidth`` (a dense model)
            or the knob model's ``memory_bandwidth·decode_bw_eff`` (a mixture of experts or a GPU type without
            a table;
            :meth:`~packplace.placement.model.cost.CostModel.kv_read_fraction`); 1 (the default): the
            kernels' rate. Source of the Blackwell value: :data:`VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL`.
        component_table: Name of the GPU type's component table (:mod:`packplace.placement.model.components`:
            ``h200`` measured kernel by kernel, ``h100-sxm``, ``b200`` and ``gb200`` derived from it,
            :data:`COMPONENT_TABLES`),
            which then prices the dense layers' passes and decode steps in place of
            ``gemm_peak_fraction``, ``gemm_m_half``, ``decode_bw_eff`` and the non-GEMM knobs (a mixture of
            experts, LoRA, a preempted sequence's recompute and selective recomputation keep them); ``none``
            (the default, every preset without a table) keeps those knobs. A ``flops_per_gpu`` or
            ``memory_bandwidth`` that differs from the table's own preset scales the table's compute or
            HBM-streaming rates by the ratio (:func:`~packplace.placement.model.cost.hardware_table`).
        memory_workspace: Bytes per GPU a PyTorch process holds beyond its tensors and their allocator
            slack (cuBLAS workspaces, kernel scratch), added to every task's peak memory; default
            :data:`packplace.placement.model.pass_memory.STACKS` ``none`` (measured on an H200, the only GPU
            with a measurement; every preset keeps it).
    """

    flops_per_gpu: float
    memory_per_gpu: float
    memory_bandwidth: float
    alpha_coll_g: float
    beta_coll_g: float
    alpha_coll_n: float
    beta_coll_n: float
    alpha_coll_r: float
    beta_coll_r: float
    alpha_p2p_g: float
    beta_p2p_g: float
    alpha_p2p_n: float
    beta_p2p_n: float
    alpha_p2p_r: float
    beta_p2p_r: float
    gemm_m_half: float = 5.0
    gemm_k_half: float = 0.0
    gemm_peak_fraction: float = 0.7
    decode_bw_eff: float = 0.7
    non_gemm_constant: float = 0.0
    non_gemm_scaling: float = 0.0
    non_gemm_batch_cal: float = 64.0
    host_bandwidth: float = 25e9
    decode_step_overhead: float | None = None
    phase_overhead: float = 0.0
    weight_sync_overhead: float = 0.0
    inprocess_host_per_sequence: float = 0.0
    moe_decode_bw_eff: float = 0.0
    moe_gemm_peak_fraction: float = 0.0
    megatron_pass_factor: float = 1.0
    vllm_kv_bandwidth_fraction: float = 1.0
    component_table: str = "none"
    memory_workspace: float = 1.02e9

    def expert_decode_bw_eff(self, tokens_per_expert):
        """The fraction of ``memory_bandwidth`` at which routed experts stream in a decode step whose
        experts receive ``tokens_per_expert`` tokens each (float or array): ``decode_bw_eff`` up to
        :data:`MOE_GEMV_TOKENS`, ``moe_decode_bw_eff`` from :data:`MOE_FULL_TOKENS` on, linear in
        ``log2`` between (the shape of the published kernel times, :data:`MOE_DECODE_BW_EFF_H100`);
        ``decode_bw_eff`` throughout when ``moe_decode_bw_eff`` is 0 (unset)."""
        if self.moe_decode_bw_eff <= 0:
            return self.decode_bw_eff + 0.0 * tokens_per_expert
        span = np.log2(MOE_FULL_TOKENS / MOE_GEMV_TOKENS)
        x = np.clip(np.log2(np.maximum(tokens_per_expert, 1e-9) / MOE_GEMV_TOKENS) / span, 0.0, 1.0)
        return self.decode_bw_eff + (self.moe_decode_bw_eff - self.decode_bw_eff) * x

    def coll(self, level: int) -> tuple[float, float]:
        """``(α, β)`` of a collective at ``level`` (seconds, seconds/byte)."""
        return ((self.alpha_coll_g, self.beta_coll_g), (self.alpha_coll_n, self.beta_coll_n),
                (self.alpha_coll_r, self.beta_coll_r))[level]

    def p2p(self, level: int) -> tuple[float, float]:
        """``(α, β)`` of a point-to-point transfer at ``level`` (seconds, seconds/byte)."""
        return ((self.alpha_p2p_g, self.beta_p2p_g), (self.alpha_p2p_n, self.beta_p2p_n),
                (self.alpha_p2p_r, self.beta_p2p_r))[level]


#: Required hardware fields (α–β pairs included), in the order the config documents them.
HARDWARE_REQUIRED = (
    "racks", "nodes_per_rack", "gpus_per_node", "flops_per_gpu", "memory_per_gpu", "memory_bandwidth",
    "alpha_coll_g", "beta_coll_g", "alpha_coll_n", "beta_coll_n", "alpha_coll_r", "beta_coll_r",
    "alpha_p2p_g", "beta_p2p_g", "alpha_p2p_n", "beta_p2p_n", "alpha_p2p_r", "beta_p2p_r",
)
#: Optional cluster-shape fields and their defaults (``None``: a host is a node).
CLUSTER_DEFAULTS: dict[str, Any] = {"gpus_per_host": None}
#: Optional efficiency knobs and their defaults.
HARDWARE_DEFAULTS = {
    "gemm_m_half": 5.0, "gemm_k_half": 0.0, "gemm_peak_fraction": 0.7, "decode_bw_eff": 0.7,
    "non_gemm_constant": 0.0, "non_gemm_scaling": 0.0, "non_gemm_batch_cal": 64.0,
    "host_bandwidth": 25e9, "decode_step_overhead": None, "phase_overhead": 0.0, "weight_sync_overhead": 0.0,
    "inprocess_host_per_sequence": 0.0,
    "moe_decode_bw_eff": 0.0, "moe_gemm_peak_fraction": 0.0, "megatron_pass_factor": 1.0, "component_table": "none",
    "vllm_kv_bandwidth_fraction": 1.0, "memory_workspace": 1.02e9,
}
#: Component tables shipped with the package (``placement/model/tables/<name>.json``); ``none`` uses the knobs.
#: ``h200`` is measured (``benchmarks/hardware/h200/``); ``h100-sxm`` is derived from it (the same GH100
#: compute die: compute, per-kernel and host constants as measured, the HBM-streaming ones scaled by the
#: datasheet bandwidth ratio 3.35/4.8; ``tables/h100-sxm.json`` names each factor and its source); ``b200`` and
#: ``gb200`` are derived from it by achieved ratios from published microbenchmarks that ran one kernel on both
#: GPUs (GEMM constants by the best BF16 matmuls, 2.196 and 2.293; attention by cuDNN's fused attention, 2.094
#: and 2.188; the HBM-streaming ones by decode attention's best bandwidth, 1.609 and 1.704; the host and
#: per-kernel fixed times as measured; ``tables/b200.json``, ``tables/gb200.json`` name each source).
COMPONENT_TABLES = ("none", "h200", "h100-sxm", "b200", "gb200")
#: Cluster-shape fields a preset fills (8 GPUs per node, one node, one rack) unless the preset (``gb200``:
#: a 72-GPU NVLink domain per node) or the config sets them.
PRESET_CLUSTER = {"racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8}


def _links(nvlink_bus: float, nic: float, *, rack_factor: float = 0.9) -> dict[str, float]:
    """α–β figures of the three levels from the NCCL bus bandwidth inside a node (``nvlink_bus``,
    bytes/s) and the per-GPU network bandwidth across nodes (``nic``, bytes/s, one NIC per GPU); across
    racks the network is taken ``rack_factor`` as fast (one more switch hop). Latencies: 1 µs per ring
    step in a node, 5 µs across nodes, 8 µs across racks (nccl-tests small-message all-reduce times on
    NVSwitch and InfiniBand systems, order of magnitude). Point-to-point runs at 1.1× the collective bus
    bandwidth (no ring reduction)."""
    return {
        "alpha_coll_g": 1e-6, "beta_coll_g": 1.0 / nvlink_bus,
        "alpha_coll_n": 5e-6, "beta_coll_n": 1.0 / nic,
        "alpha_coll_r": 8e-6, "beta_coll_r": 1.0 / (nic * rack_factor),
        "alpha_p2p_g": 2e-6, "beta_p2p_g": 1.0 / (1.1 * nvlink_bus),
        "alpha_p2p_n": 5e-6, "beta_p2p_n": 1.0 / (1.1 * nic),
        "alpha_p2p_r": 8e-6, "beta_p2p_r": 1.0 / (1.1 * nic * rack_factor),
    }


#: ``moe_decode_bw_eff`` of the ``h100-sxm`` preset: the fraction of HBM bandwidth at which vLLM's fused-MoE
#: Triton kernel streams the routed experts at decode batch sizes. Source: vLLM pull request
#: github.com/vllm-project/vllm/pull/24700 ("Benchmarks on H100", ``benchmarks/kernels/benchmark_moe.py
#: --model=Qwen/Qwen3-30B-A3B -tp=1 --dtype=fp8_w8a8``, the "Main" kernel times of one MoE layer): the bytes
#: of the experts a batch touches (:meth:`~packplace.placement.model.cost.CostModel.decode_expert_weights_read`)
#: over the kernel time, as a fraction of the H100 SXM's 3.35 TB/s, stay near the dense decode fraction up
#: to 8 tokens per expert and fall to 0.51 at 16 (the per-batch-size table: docs/calibration-and-validation.md,
#: "Mixture of experts"). Held at 0.51 beyond 16 (an engine of ``max_num_seqs`` 256 reaches 16 on this
#: model). An fp8 figure used for bf16 weights, so uncertain: ``packplace calibrate --knobs
#: moe_decode_bw_eff`` fits it to a step of your own. Other presets leave it unset (0: ``decode_bw_eff``).
MOE_DECODE_BW_EFF_H100 = 0.51
#: Tokens per expert up to which fused-MoE decode streams at the dense fraction (the plateau of the
#: source of :data:`MOE_DECODE_BW_EFF_H100`).
MOE_GEMV_TOKENS = 8.0
#: Tokens per expert from which fused-MoE decode streams at ``moe_decode_bw_eff`` (the same source).
MOE_FULL_TOKENS = 16.0
#: ``moe_gemm_peak_fraction`` of the ``h100-sxm`` preset: the experts' GEMM ceiling at which the model's
#: training pass reproduces Megatron-Bridge's published MoE pre-training throughput on H100. Source:
#: Megatron-Bridge performance summary (github.com/NVIDIA-NeMo/Megatron-Bridge, docs/performance-summary.md,
#: "25.11 NeMo Container", "System: DGX-H100"), row Qwen3_30B_a3B: 16 GPUs, GBS 512, MBS 2, sequence 4096,
#: TP 1, PP 2, EP 8, 5,275 tokens/s/GPU (121 model TFLOP/s/GPU). The model with the H100 preset's other
#: figures gives 15,053 tokens/s/GPU with the experts at ``gemm_peak_fraction`` 0.55 and 5,275 with
#: 0.084 (:meth:`~packplace.placement.model.cost.CostModel.pass_time`, a test reproduces it): the grouped GEMMs
#: of ~1,000 rows per expert, token permutation, router and the expert all-to-all that Megatron-Core
#: does not hide run at about a fifth of a dense GEMM's sustained rate. That run is FP8 (current
#: scaling), at least as fast as the BF16 runs this model times, so for BF16 the value is an upper
#: bound; a ``calibrate`` knob (``--knobs moe_gemm_peak_fraction``). Other presets leave it unset.
MOE_GEMM_PEAK_FRACTION_H100 = 0.084
#: ``megatron_pass_factor`` of the ``h100-sxm`` preset: the factor on the component table's Megatron-Core
#: kernels at which the model's training step reproduces, at the median, NVIDIA's published BF16 Megatron-Core
#: pre-training step times on DGX H100 (github.com/NVIDIA/dgxc-benchmarking @ 8f5cbb37, tag v25.02, NeMo 24.12:
#: the README tables of Llama 3.1 8B / 70B / 405B and Nemotron-4 15B / 340B, 30 rows of 8 to 2,304 GPUs,
#: TP 1-8, PP 1-9, CP 1-2, VP up to 12). Without it the model prices those steps at a median 0.944 of the
#: published (0.898-1.019); the fit is 1.0695, and held out one model at a time it is 1.066-1.078 and moves
#: the held-out models' medians from 0.91-1.01 to 0.97-1.08 (``benchmarks/training_throughput.py``, which fits it;
#: docs/calibration-and-validation.md, "Megatron-Core pre-training throughput against NVIDIA's published
#: tables"). Not a validation row. No source names the mechanism (context parallelism's split attention is
#: the leading candidate), so a fitted per-GPU-type factor; other presets keep 1.
MEGATRON_PASS_FACTOR_H100 = 1.07
#: ``megatron_pass_factor`` of the ``gb200`` preset: the same fit (``benchmarks/training_throughput.py``) to
#: NVIDIA's published BF16 Megatron-Core pre-training step times on GB200 NVL72 (github.com/NVIDIA/dgxc-benchmarking
#: @ c5c765f2, tag v25.05.05, NeMo 25.04.01: the README tables of Llama 3.1 405B at TP 4, PP 8, CP 2, VP 8 on
#: 128-512 GPUs and Nemotron-4 340B at TP 8, PP 4, VP 12 on 128-512 GPUs, weak and strong scaling, 9 rows).
#: The ``gb200`` component table is the H200 table scaled by datasheet ratios; without the factor those steps
#: are priced at a median 0.835 of the published (0.797-0.894), while the H100 rows of the same tag and container
#: are priced at 0.997-1.009 with the H100 preset, so the gap is the GPU type's, not the software's. The fit is
#: 1.244; held out one model at a time it is 1.235 (Llama held out: 0.805 -> 0.974) and 1.271 (Nemotron held out:
#: 0.841 -> 1.025). Not a validation row. The ``b200`` preset keeps 1: no BF16 dense B200 table is published
#: (Megatron-Bridge's B200 rows are FP8 only).
MEGATRON_PASS_FACTOR_GB200 = 1.24

#: GPUs of one GB200 NVL72 NVLink domain: 18 compute trays of 4 GPUs (2 GB200 superchips of 1 Grace CPU +
#: 2 Blackwell GPUs each) joined by 9 NVLink switch trays (NVIDIA GB200 NVL72 product page,
#: nvidia.com/en-us/data-center/gb200-nvl72: "72 Blackwell GPUs", "36 Grace CPUs", "130 TB/s" NVLink
#: bandwidth = 72 x 1.8 TB/s, every GPU pair at the full per-GPU NVLink bandwidth through the switches).
GB200_NVLINK_DOMAIN = 72
#: GPUs of one GB200 compute tray: one host (one operating system, its own network cards), the unit a job
#: launcher counts as a node (MLCommons inference v6.1 system description GB200-NVL72_GB200-186GB:
#: "accelerators_per_node": 4, "Full NVLink mesh within each 4-GPU node", "for each 4-GPU node: 4x
#: ConnectX-7"). Inside a domain a tray boundary changes no link: the grid's node is the domain.
GB200_TRAY_GPUS = 4
#: Dense BF16 FLOP/s of one GB200 GPU: the NVL72's "FP16/BF16 Tensor Core 360 PFLOPS", a with-sparsity
#: figure (the product page's footnote), halved for dense and divided by 72 GPUs: 2.5 PFLOP/s (the GB200
#: superchip's "10 PFLOPS" over 2 GPUs, halved, agrees).
GB200_DENSE_BF16_FLOPS = 360e15 / 2 / GB200_NVLINK_DOMAIN
#: HBM3e per GB200 GPU: "up to 13.4 TB" per NVL72 / 72 = 186 GB (the superchip's 372 GB over 2 GPUs; the
#: MLCommons system description's "186 GB").
GB200_HBM_BYTES = 13.4e12 / GB200_NVLINK_DOMAIN
#: Bytes the CUDA runtime reports as an H100 80GB's total (``torch.cuda.mem_get_info()[1]``, the total vLLM's
#: ``gpu_memory_utilization`` is a fraction of and the PyTorch allocator can fill): 79.11 GiB in PyTorch's
#: out-of-memory message of a vLLM engine on an H100 ("GPU 0 has a total capacity of 79.11 GiB",
#: github.com/vllm-project/vllm/issues/27508); vLLM's start-up log on an H100 80GB reads 79.22 GiB
#: ("total_gpu_memory 79.22GiB", github.com/vllm-project/vllm/pull/10511), nvidia-smi 81,559 MiB (79.65 GiB,
#: github.com/vllm-project/vllm/issues/55169: the driver's reserve is not the CUDA total). The smaller of the two
#: CUDA readings, 79.11 GiB = 84.94e9 bytes, 6.2% over the datasheet's 80e9 the preset had used.
H100_CUDA_TOTAL_BYTES = 79.11 * 2**30
#: Bytes the CUDA runtime reports as an A100 80GB's total: PyTorch's out-of-memory message on "a single NVIDIA
#: A100 card which has 80GB" ("GPU 0 has a total capacity of 79.14 GiB", github.com/lianqi1008/Control-GIC/issues/6);
#: another A100 reads 79.25 GiB (github.com/HiDream-ai/VAREdit/issues/6). The smaller, 79.14 GiB = 84.98e9 bytes.
A100_80GB_CUDA_TOTAL_BYTES = 79.14 * 2**30
#: Bytes the CUDA runtime reports as an A800 80GB's total: PyTorch's out-of-memory message on "A800-80G" GPUs, "GPU 0
#: has a total capacity of 79.25 GiB" (github.com/sgl-project/sglang/issues/1463); two others read 79.33 GiB
#: (github.com/hahnyuan/PB-LLM/issues/3, github.com/sgl-project/sglang/issues/21730). The smaller, 79.25 GiB =
#: 85.09e9 bytes (the A800 is A100 silicon with its NVLink cut, the same 80 GB of HBM2e).
A800_CUDA_TOTAL_BYTES = 79.25 * 2**30
#: Bytes the CUDA runtime reports as a B200's total: ``cudaGetDeviceProperties`` on an NVIDIA B200 with ECC on,
#: "Total Global Memory: 178.35 GB" (GiB: 2^30 bytes; github.com/pytorch/ao/pull/4002), under nvidia-smi's 183,359
#: MiB (179.06 GiB, github.com/NVIDIA/TensorRT-LLM/issues/10278) by the driver's reserve as on the H100.
#: 178.35 GiB = 191.50e9 bytes, over the HGX B200 datasheet's 180 GB per GPU (1.44 TB per 8 GPUs) the preset had used.
B200_CUDA_TOTAL_BYTES = 178.35 * 2**30
#: Bytes a 48 GB GDDR6 (ECC) Ada card gives CUDA: PyTorch's out-of-memory message on an L40 ("GPU 0 has a total
#: capacity of 44.40 GiB", github.com/QwenLM/Qwen3-VL/issues/2097) and a vLLM start-up log on a 48 GB card
#: (44.4 GiB, github.com/vllm-project/vllm/pull/29830); the L40S has the L40's 48 GB GDDR6 with ECC (L40S
#: datasheet). 44.40 GiB = 47.67e9 bytes, 0.7% under the datasheet's 48e9 that the preset had used.
L40S_CUDA_TOTAL_BYTES = 44.40 * 2**30
#: HBM3e bandwidth per GB200 GPU: the NVL72's "576 TB/s" / 72 = 8 TB/s (the superchip's 16 TB/s over 2).
GB200_HBM_BANDWIDTH = 576e12 / GB200_NVLINK_DOMAIN
#: NCCL all-reduce bus bandwidth inside a GB200 NVLink domain, measured, not the 0.8-of-line rule the other
#: presets take (0.8 x 900 GB/s = 720 GB/s): Azure ND GB200 v6 (github.com/Azure/AI-benchmarking-guide,
#: Azure_Results/ND_GB200_v6_results.md, "NCCL Bandwidth": nccl-tests AllReduce, Ring algorithm, in-place, the
#: 4 GPUs of one tray over NVLink 5, NCCL 2.25.1) 679.61 GB/s at 8 GB, 673.06 at 4 GB: 0.755 of the 900 GB/s
#: line rate (Hopper's ring reaches about 370 of 450, 0.82: NCCL maintainer, github.com/NVIDIA/nccl-tests/issues/212).
GB200_NVLINK_BUS_BANDWIDTH = 680e9
#: ``gemm_peak_fraction`` of the ``gb200`` preset: the ``h100-sxm`` preset's 0.55 scaled by the ratio of
#: the two GPUs' sustained fractions of their datasheet peak in the same pre-training recipe. Source:
#: Megatron-Bridge performance summary (github.com/NVIDIA-NeMo/Megatron-Bridge, docs/performance-summary.md,
#: "25.11 NeMo Container"), row LLAMA3_8B on 8 GPUs, FP8-CS: DGX-GB200 1,622 model TFLOP/s/GPU of 5,000
#: dense FP8 (0.324), DGX-H100 744 of 1,979 (0.376): GB200 sustains 0.863 of H100's fraction, so
#: 0.55 x 0.863 = 0.475. Not a validation row; the only same-model, same-size pair of the table (the 70B
#: and 405B rows differ in parallelism), and an FP8 ratio used for BF16 passes: a ``calibrate`` knob.
GEMM_PEAK_FRACTION_GB200 = 0.55 * (1622 / 5000) / (744 / 1979)
#: ``gemm_peak_fraction`` of the ``b200`` preset, by the ``gb200`` rule from the same table's DGX-B200 row:
#: LLAMA3_8B on 8 GPUs, FP8-CS, 1,576 model TFLOP/s/GPU of 4,500 dense FP8 (0.350) against DGX-H100's 744 of
#: 1,979 (0.376): 0.55 x 0.932 = 0.512 (it was 0.5, chosen with the validation rows in view). It prices only
#: what the ``b200`` component table does not (mixture-of-experts and LoRA passes, recomputation).
GEMM_PEAK_FRACTION_B200 = 0.55 * (1576 / 4500) / (744 / 1979)
#: ``vllm_kv_bandwidth_fraction`` of the ``b200`` and ``gb200`` presets (the same Blackwell die): a vLLM engine's
#: decode attention on Blackwell reads the KV cache at ``1 / (1 + k)`` of the table's ``kv_bandwidth``,
#: ``k`` = 1.266 fitted by ``benchmarks/blackwell_engine_term.py`` (non-negative least squares on the relative
#: inter-token-latency residual) to the 62 B200 runs of the ML.ENERGY Leaderboard v3.0 (vLLM 0.11.1, ``vllm serve
#: --async-scheduling``; five dense models on the chat and long-context ``gpqa`` tasks), chosen among a host time
#: per running sequence, a per-iteration constant and their pairs by the error held out one model and one task
#: at a time (docs/calibration-and-validation.md, "Whole engines on Blackwell"): 0.441, about the rate of the H100
#: table. Measured on vLLM 0.11.1 only (V1 runs FlashInfer's decode on Blackwell by default, with TRT-LLM-gen
#: kernels on SM100 since mid-2025: github.com/vllm-project/vllm/pull/19118, /pull/19825); no source says why the
#: whole engine reads slower than the kernel microbenchmarks, so it is applied to every vLLM V1 release alike.
#: A ratio of the engine's rate to its kernels', it multiplies the knob model's KV read too (a mixture of
#: experts: ``memory_bandwidth·decode_bw_eff``), :meth:`~packplace.placement.model.cost.CostModel.kv_read_fraction`.
VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL = 0.441

#: Hardware presets: ``hardware: {preset: h100-sxm, nodes_per_rack: 2}``; every field may be overridden.
#:
#: Datasheet figures (dense BF16 Tensor Core FLOP/s — half the "with sparsity" number —, memory, HBM
#: bandwidth, NVLink) from NVIDIA's datasheets: H100 Tensor Core GPU datasheet (SXM: 989 TFLOPS, 80 GB,
#: 3.35 TB/s, NVLink 900 GB/s); H200 Tensor Core GPU datasheet (SXM: 989 TFLOPS, 141 GB, 4.8 TB/s);
#: A100 Tensor Core GPU datasheet (80 GB SXM: 312 TFLOPS, 2,039 GB/s, NVLink 600 GB/s); A800 40/80 GB
#: datasheet (A100 silicon, NVLink limited to 400 GB/s); H20 product brief (148 TFLOPS, 96 GB HBM3,
#: 4.0 TB/s, NVLink 900 GB/s); HGX B200 datasheet (2.25 PFLOPS dense BF16 per GPU, 180 GB HBM3e of the
#: 1.44 TB per 8-GPU board, 8 TB/s, NVLink 5 1.8 TB/s); L40S datasheet (362 TFLOPS, 48 GB GDDR6,
#: 864 GB/s, PCIe Gen4 x16, no NVLink); GB200 NVL72 product page (per GPU: :data:`GB200_DENSE_BF16_FLOPS`,
#: :data:`GB200_HBM_BYTES`, :data:`GB200_HBM_BANDWIDTH`, NVLink 5 1.8 TB/s both directions).
#: ``memory_per_gpu`` is the CUDA total, bytes: what ``torch.cuda.mem_get_info()[1]`` reports, the total vLLM takes
#: ``gpu_memory_utilization`` of and the PyTorch allocator can fill (the CUDA context inside it is the model's
#: ``memory_workspace``, counted on its own): :data:`H100_CUDA_TOTAL_BYTES` (79.11 GiB),
#: :data:`A100_80GB_CUDA_TOTAL_BYTES` (79.14 GiB), :data:`A800_CUDA_TOTAL_BYTES` (79.25 GiB),
#: :data:`B200_CUDA_TOTAL_BYTES` (178.35 GiB), :data:`L40S_CUDA_TOTAL_BYTES` (44.40 GiB), each the smallest published
#: reading. Where no reading of the CUDA total was found (``h200``, ``h20``, ``gb200``) the preset keeps the
#: datasheet's decimal bytes, under the CUDA total on every HBM card read (an H100 80GB reads 6% over its 80e9, a
#: B200 6% over its 180e9), so it under-states what the GPU holds rather than over-stating it.
#:
#: ``gb200`` (alias ``gb200-nvl72``): the grid's node is the NVLink domain (:data:`GB200_NVLINK_DOMAIN`,
#: the preset's ``gpus_per_node`` 72), not the 4-GPU tray (:data:`GB200_TRAY_GPUS`, the preset's
#: ``gpus_per_host``: what the frameworks' layout rules and emitted settings count as a node): level ``g`` is
#: NVLink 5 through the switch trays, the same for two GPUs of one tray and of two trays, so trays need
#: no level of their own; level ``n`` is the InfiniBand network between NVLink domains (one ConnectX-7
#: 400 Gb/s per GPU), ``r`` one more switch hop. A job on part of a domain sets ``gpus_per_node`` to
#: the GPUs it holds there (a multiple of 4: whole trays), e.g. 8 for two trays.
#:
#: Links: NCCL all-reduce bus bandwidth ≈ 0.8 of the one-direction NVLink bandwidth (nccl-tests on
#: DGX/HGX systems; ``gb200``: the measured :data:`GB200_NVLINK_BUS_BANDWIDTH`, 0.755 of it); across nodes
#: one NIC per GPU: 400 Gb/s NDR (H100/H200/H20; 50 GB/s line, 45 GB/s
#: achieved), 200 Gb/s HDR (A100/A800; 22.5 GB/s achieved), 400 Gb/s ConnectX-7 on B200 (the 800 Gb/s
#: ConnectX-8 doubles it) and on GB200 (four per tray); L40S servers talk over PCIe Gen4 in the node
#: (~20 GB/s bus bandwidth) and 200 Gb/s Ethernet/RoCE across nodes. ``host_bandwidth``: PCIe Gen5 x16 (64 GB/s per
#: direction, ~50 sustained) on Hopper and Blackwell boards, Gen4 x16 (32 GB/s, ~25 sustained) on Ampere and L40S;
#: GB200 moves host memory over NVLink-C2C, 900 GB/s both directions per superchip (GB200 product page) shared by
#: its 2 GPUs: 225 GB/s per GPU and direction, taken at the same 0.8 of line rate as PCIe: 180 GB/s.
#:
#: Efficiency defaults (not measured on your cluster; ``packplace calibrate`` fits them):
#: ``gemm_peak_fraction`` is the sustained fraction of dense peak of whole training/inference passes
#: (cuBLAS GEMMs reach ~0.75 of peak; whole passes less: Megatron-LM reports up to 0.52 of A100 peak,
#: Narayanan et al. 2021 Table 1, and up to 0.47 MFU on H100, github.com/NVIDIA/Megatron-LM README) and
#: ``decode_bw_eff`` the fraction of the datasheet HBM bandwidth a decode step streams at. Both preset
#: values were chosen with the validation rows in view: they are in-sample defaults, and the out-of-sample
#: figures (``packplace validate --cross-validate``) do not use them: each GPU type's value there is
#: fitted without the row's publication (docs/calibration-and-validation.md). No preset sets
#: ``decode_step_overhead``: it is the generation engine's, so the framework profile's
#: (:attr:`~packplace.placement.model.framework.FrameworkProfile.decode_step_overhead`).
#: The presets set no ``phase_overhead`` or ``weight_sync_overhead`` (both 0): what an RL
#: framework adds per task and per weight sync is derived from the plan by its execution profile
#: (``policy.framework``, :mod:`packplace.placement.model.framework`); the two knobs remain for ``calibrate``.
#:
#: Component tables: ``h200`` prices dense passes and decode steps from its measured table, ``h100-sxm``
#: (alias ``h100``), ``b200`` and ``gb200`` (alias ``gb200-nvl72``) from tables derived from it
#: (:data:`COMPONENT_TABLES`); on all of them,
#: ``gemm_peak_fraction`` and ``decode_bw_eff`` price only what the table does not (mixture-of-experts and
#: LoRA passes, a preempted sequence's recompute, selective recomputation, context-parallel balance).
PRESETS: dict[str, dict[str, Any]] = {
    "h100-sxm": {"flops_per_gpu": 989e12, "memory_per_gpu": H100_CUDA_TOTAL_BYTES, "memory_bandwidth": 3.35e12,
                 **_links(360e9, 45e9), "host_bandwidth": 50e9,
                 "gemm_peak_fraction": 0.55, "decode_bw_eff": 0.65, "component_table": "h100-sxm",
                 "moe_decode_bw_eff": MOE_DECODE_BW_EFF_H100, "moe_gemm_peak_fraction": MOE_GEMM_PEAK_FRACTION_H100,
                 "megatron_pass_factor": MEGATRON_PASS_FACTOR_H100},
    "h200": {"flops_per_gpu": 989e12, "memory_per_gpu": 141e9, "memory_bandwidth": 4.8e12,
             **_links(360e9, 45e9), "host_bandwidth": 50e9,
             "gemm_peak_fraction": 0.55, "decode_bw_eff": 0.65, "component_table": "h200"},
    "a100-80gb-sxm": {"flops_per_gpu": 312e12, "memory_per_gpu": A100_80GB_CUDA_TOTAL_BYTES,
                      "memory_bandwidth": 2.039e12,
                      **_links(240e9, 22.5e9), "host_bandwidth": 25e9,
                      "gemm_peak_fraction": 0.6, "decode_bw_eff": 0.65},
    "a800": {"flops_per_gpu": 312e12, "memory_per_gpu": A800_CUDA_TOTAL_BYTES,
             "memory_bandwidth": 2.039e12,
             **_links(160e9, 22.5e9), "host_bandwidth": 25e9,
             "gemm_peak_fraction": 0.6, "decode_bw_eff": 0.65},
    "h20": {"flops_per_gpu": 148e12, "memory_per_gpu": 96e9, "memory_bandwidth": 4.0e12,
            **_links(360e9, 45e9), "host_bandwidth": 50e9,
            "gemm_peak_fraction": 0.7, "decode_bw_eff": 0.65},
    "b200": {"flops_per_gpu": 2.25e15, "memory_per_gpu": B200_CUDA_TOTAL_BYTES, "memory_bandwidth": 8.0e12,
             **_links(720e9, 45e9), "host_bandwidth": 50e9,
             "gemm_peak_fraction": GEMM_PEAK_FRACTION_B200, "decode_bw_eff": 0.65, "component_table": "b200",
             "vllm_kv_bandwidth_fraction": VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL},
    "gb200": {"gpus_per_node": GB200_NVLINK_DOMAIN, "gpus_per_host": GB200_TRAY_GPUS,
              "flops_per_gpu": GB200_DENSE_BF16_FLOPS,
              "memory_per_gpu": GB200_HBM_BYTES, "memory_bandwidth": GB200_HBM_BANDWIDTH,
              **_links(GB200_NVLINK_BUS_BANDWIDTH, 45e9), "host_bandwidth": 180e9,
              "gemm_peak_fraction": GEMM_PEAK_FRACTION_GB200, "decode_bw_eff": 0.65, "component_table": "gb200",
              "megatron_pass_factor": MEGATRON_PASS_FACTOR_GB200,
              "vllm_kv_bandwidth_fraction": VLLM_KV_BANDWIDTH_FRACTION_BLACKWELL},
    "l40s": {"flops_per_gpu": 362e12, "memory_per_gpu": L40S_CUDA_TOTAL_BYTES, "memory_bandwidth": 864e9,
             **_links(20e9, 22.5e9), "host_bandwidth": 25e9,
             "gemm_peak_fraction": 0.6, "decode_bw_eff": 0.7},
}
PRESETS["a100"] = PRESETS["a100-80gb-sxm"]
PRESETS["h100"] = PRESETS["h100-sxm"]
PRESETS["gb200-nvl72"] = PRESETS["gb200"]


def resolve_preset(section: dict) -> dict:
    """The ``hardware`` section with its ``preset`` (if any) expanded: the preset's figures and
    :data:`PRESET_CLUSTER` first, the section's own fields on top.

    A field given as ``null`` (YAML ``~`` / ``null``, Python ``None``) is not given: with a preset it keeps the
    preset's value (``{preset: h100-sxm, megatron_pass_factor: null}`` is the preset's 1.07), without one the
    field's default, and a required field without a value is refused as missing. Every field alike; only
    ``preset`` itself cannot be null.

    Raises:
        ConfigError: ``[hardware] preset: unknown 'x100'; valid: ...``; ``[hardware] preset: null ...``.
    """
    given = {k: v for k, v in section.items() if v is not None or k == "preset"}
    if "preset" not in given:
        return given
    name = given.pop("preset")
    if name is None:
        raise ConfigError(f"[hardware] preset: null names no preset; give one of {', '.join(sorted(PRESETS))} or "
                          "drop the field (and give every figure)")
    base = PRESETS.get(name) if isinstance(name, str) else None
    if base is None:
        raise ConfigError(f"[hardware] preset: unknown {name!r}; valid: {', '.join(sorted(PRESETS))}")
    merged = {**PRESET_CLUSTER, **base}
    merged.update(given)
    return merged
