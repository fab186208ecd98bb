"""The rate fraction of a PyTorch-native trainer's training passes on a component table: which passes it
slows (the Hugging Face kernels' training forward, backward and full recompute), which it leaves (Megatron-
Core's, forward-only log-prob passes, a GPU type priced by the efficiency knobs), and by how much, by hand."""

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from packplace.placement.model import components as C
from packplace.placement.model.cost import PYTORCH_TRAIN_FRACTION, CostModel
from packplace.placement.model.layout_rules import Context
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.model.training_time import training_overhead_seconds
from packplace.placement.problem.hardware import Cluster, Hardware, resolve_preset
from packplace.placement.problem.workload import Workload
from packplace.shape import TransformerShape

LLAMA_8B = TransformerShape(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
# 16 sequences of 1,024 tokens (a prompt of 1,023 and one generated token) over dp 8: 2 micro-batches of 1
WORKLOAD = Workload(batch_size=16, samples_per_prompt=1, context_length=1023, generation_length=1)
EXTENT = (1, 1, 8)


def hardware(preset):
    return Hardware(**{k: v for k, v in resolve_preset({"preset": preset}).items()
                       if k not in ("racks", "nodes_per_rack", "gpus_per_node")})


def cost_model(backend, preset="h100-sxm", sharding="zero3"):
    ctx = Context("nemo-rl", "grpo", {"actor": TrainingOptions(sharding=sharding)}, False, backend)
    return CostModel(hardware(preset), Cluster(1, 1, 8), WORKLOAD, layout=ctx)


def test_the_fraction_is_the_published_table_median():
    """The median predicted / published step time of the BF16 H100 rows of
    ``benchmarks/fsdp_training_throughput.json`` priced at fraction 1 (the benchmark's own pricing) is the
    shipped fraction to two digits, and at the shipped fraction their median is 1 within 2 %."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fsdp_training_throughput.py"
    spec = importlib.util.spec_from_file_location("fsdp_training_throughput", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    document = json.loads(bench.DATA.read_text())
    rows = bench.table_rows(document)
    assert len(rows) == 8 and all("h100" in row["hardware"] for row in rows)
    at_one = statistics.median(bench.ratio_at(row, document, 1.0) for row in rows)
    assert round(at_one, 2) == PYTORCH_TRAIN_FRACTION
    shipped = statistics.median(bench.ratio_at(row, document, PYTORCH_TRAIN_FRACTION) for row in rows)
    assert shipped == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("backend, preset, expected", [
    ("fsdp", "h100-sxm", PYTORCH_TRAIN_FRACTION),   # DTensor: Hugging Face kernels on the H100 table
    ("fsdp", "b200", PYTORCH_TRAIN_FRACTION),
    ("megatron", "h100-sxm", 1.0),                  # Megatron-Core's passes: the table as measured
    ("fsdp", "a100", 1.0),                          # no table: gemm_peak_fraction is a whole-pass efficiency
])
def test_which_passes_take_the_fraction(backend, preset, expected):
    assert cost_model(backend, preset).train_rate_fraction(LLAMA_8B, 1, 1) == expected


def test_training_pass_by_hand():
    """Two micro-batches of 1,024 tokens through 32 eager layers and the head, tp = pp = 1 (no
    all-reduce, no pipeline): ``2·(32·layer + head)/0.67``; a forward-only pass keeps the table's rate."""
    cost = cost_model("fsdp")
    table = cost.components
    layer = C.pass_times(table, LLAMA_8B, tokens=1024, seq_len=1024, train=True, layers=1, head=False)
    head = C.pass_times(table, LLAMA_8B, tokens=1024, seq_len=1024, train=True, layers=0, head=True)
    by_hand = 2 * (32 * (layer.forward + layer.backward) + head.forward + head.backward) / 0.67
    assert cost.pass_time(LLAMA_8B, True, 8, 1, 1, 1, EXTENT, include_update=False) == pytest.approx(by_hand,
                                                                                                    rel=1e-12)
    fwd = C.pass_times(table, LLAMA_8B, tokens=1024, seq_len=1024, train=False, layers=1, head=False)
    top = C.pass_times(table, LLAMA_8B, tokens=1024, seq_len=1024, train=False, layers=0, head=True)
    assert cost.pass_time(LLAMA_8B, False, 8, 1, 1, 1, EXTENT) == pytest.approx(
        2 * (32 * fwd.forward + top.forward), rel=1e-12)


def test_full_recompute_takes_the_fraction_too():
    """``recompute: full`` re-runs the 32 layers' forward of each micro-batch (no head): ``2·32·fwd/0.67``
    on the eager trainer, ``2·32·fwd`` times the GPU type's ``megatron_pass_factor`` on a Megatron-Core one
    (its own kernels, no fraction)."""
    full = TrainingOptions(sharding="zero1", recompute="full")
    none = TrainingOptions(sharding="zero1", recompute="none")
    megatron = hardware("h100-sxm").megatron_pass_factor
    for backend, fraction, kernels in (("fsdp", 0.67, "hf"), ("megatron", 1.0 / megatron, "megatron")):
        cost = cost_model(backend, sharding="zero1")
        fwd = C.pass_times(cost.components, LLAMA_8B, tokens=1024, seq_len=1024, train=False, layers=1, head=False,
                           kernels=kernels)
        extra = (training_overhead_seconds(cost, LLAMA_8B, full, 8, 1, 1, 1, EXTENT)
                 - training_overhead_seconds(cost, LLAMA_8B, none, 8, 1, 1, 1, EXTENT))
        assert extra == pytest.approx(2 * 32 * fwd.forward / fraction, rel=1e-12)
