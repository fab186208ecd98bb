"""The device grid (racks × nodes × GPUs) and the hardware figures of one GPU type.

GPU ids are linear: ``gid = (r · N + n) · G + g`` for rack ``r``, node ``n`` in the rack, GPU ``g`` in
the node. Every aligned block of the grid (see :class:`packplace.placement.plan.Allocation`) is then a
contiguous range ``[lo, hi)`` of ids, which keeps the evaluator's overlap and level tests O(1).

Communication levels: ``0`` inside a node (suffix ``_g``), ``1`` across nodes of one rack (``_n``),
``2`` across racks (``_r``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Communication level names, indexed by level.
LEVEL_NAMES = ("g", "n", "r")


@dataclass(frozen=True)
class Cluster:
    """A homogeneous grid of ``racks × nodes_per_rack × gpus_per_node`` GPUs."""

    racks: int
    nodes_per_rack: int
    gpus_per_node: int

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

    Range checks of the config loader (:mod:`packplace.placement.config`): ``flops_per_gpu``,
    ``memory_per_gpu`` and ``memory_bandwidth`` ≥ 1e6 (smaller values are not a GPU and make every time
    astronomically large); fractions in (0, 1].

    Attributes:
        flops_per_gpu: Peak dense bf16 throughput, FLOP/s.
        memory_per_gpu: HBM capacity, bytes.
        memory_bandwidth: HBM bandwidth, bytes/s.
        alpha_coll_{g,n,r}: Per-step latency of a ring collective at level g/n/r, seconds.
        beta_coll_{g,n,r}: Inverse bus bandwidth of a collective, seconds/byte.
        alpha_p2p_{g,n,r}, beta_p2p_{g,n,r}: The same for point-to-point transfers.
        gemm_m_half: Rows of a GEMM (micro-batch tokens; with tensor parallelism every rank holds all
            of them), in units of 64 rows, at which a GEMM reaches half of its ceiling (default 5: 320 rows).
        gemm_peak_fraction: Ceiling of the GEMM efficiency, the fraction of ``flops_per_gpu`` a very large
            dense GEMM sustains (0 < x ≤ 1; default 1.0 = DESIGN §3's formula ``m/(m + gemm_m_half)``).
            Extension of DESIGN §3: datasheet peaks are not reached by real GEMMs (H100 SXM bf16: ~700-750
            of 989 TFLOP/s measured with cuBLAS, ≈ 0.75 — an estimate from public benchmarks).
        gemm_k_half: Inner dimension (hidden size per tensor-parallel rank), in units of 64, at which
            a GEMM reaches half of peak; 0 disables the term.
        decode_bw_eff: Fraction of ``memory_bandwidth`` a decode step achieves (0 < x ≤ 1; DESIGN §3
            default 0.15; the shipped configs carry a calibrated ≈ 0.7, see their comments).
        non_gemm_constant: Seconds per layer per micro-batch spent outside GEMMs (norms, softmax,
            kernel launches); 0 disables.
        non_gemm_scaling: Seconds per layer per ``non_gemm_batch_cal`` tokens (per tensor-parallel rank)
            outside GEMMs.
        non_gemm_batch_cal: Token count at which ``non_gemm_scaling`` was calibrated.
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
    gemm_peak_fraction: float = 1.0
    decode_bw_eff: float = 0.15
    non_gemm_constant: float = 0.0
    non_gemm_scaling: float = 0.0
    non_gemm_batch_cal: float = 64.0

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
#: Optional efficiency knobs and their defaults.
HARDWARE_DEFAULTS = {
    "gemm_m_half": 5.0, "gemm_k_half": 0.0, "gemm_peak_fraction": 1.0, "decode_bw_eff": 0.15,
    "non_gemm_constant": 0.0, "non_gemm_scaling": 0.0, "non_gemm_batch_cal": 64.0,
}
