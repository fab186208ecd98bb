"""The published decode-attention kernel figures of ``benchmarks/vllm_offline_throughput.py``: the bytes each
call moves, by hand; every row reproduces the rate its source prints; the step model's KV rate on each card;
and what the rows say about that rate (docs/calibration-and-validation.md, "Long-output vLLM runs and
decode-attention kernel rates")."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_offline_throughput.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vllm_offline_throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("batch, kv_len, q_heads, kv_heads, expected", [
    # 16 x 2,000 tokens x 32 KV heads x (K + V) x 128 x 2 B = 524,288,000; q and o 16 x 32 x 2 x 128 x 2 B = 262,144
    (16, 2000, 32, 32, 524_550_144),
    # 128 x 2,048 x 8 x 2 x 128 x 2 = 1,073,741,824; q and o 128 x 64 x 2 x 128 x 2 = 4,194,304
    (128, 2048, 64, 8, 1_077_936_128),
    (128, 8192, 64, 8, 4_299_161_600),
])
def test_bytes_of_one_decode_call(bench, batch, kv_len, q_heads, kv_heads, expected):
    assert bench.kernel_bytes(batch, kv_len, q_heads, kv_heads) == expected


def test_every_row_reproduces_its_sources_rate(bench):
    """bytes / published time is the GB/s the source prints, to its printed precision (0.05%)."""
    rows = bench.kernel_rows()
    assert len(rows) == len(bench.KERNEL_FIGURES) == 10
    for row in rows:
        assert row["tbps"] * 1e3 == pytest.approx(row["gbps"], rel=5e-4), row["source"]
        assert 0.0 < row["of_datasheet"] < 1.0


def test_the_models_kv_rate_on_each_card(bench):
    # the H100 table is the H200's scaled by the datasheets: 4.215e12 x 3.35 / 4.8
    assert bench.model_kv_rate("h100-sxm") == pytest.approx(4.215e12 * 3.35 / 4.8, rel=1e-9)
    assert bench.model_kv_rate("h200") == pytest.approx(4.215e12, rel=1e-9)
    # no table: the knob roofline's memory_bandwidth x decode_bw_eff, 2.039e12 x 0.65
    assert bench.model_kv_rate("a100-80gb-sxm") == pytest.approx(2.039e12 * 0.65, rel=1e-9)


def test_paged_and_contiguous_rows_disagree_about_the_table(bench):
    """FA3's paged decode on an H100 reaches 0.61-0.63 of the H100 table's KV rate (1,849.2 GB/s at 4,000
    tokens over 2,941.7), cuDNN's contiguous decode on an H200 0.88-1.05 of the H200 table's: the figures
    published disagree by 1.4x (0.879 / 0.629) to 1.7x (1.051 / 0.611), which is why no KV rate was adopted."""
    rows = {(r["gpu"], r["batch"], r["kv_len"]): r for r in bench.kernel_rows()}
    assert rows[("H100", 16, 4000)]["of_model_kv"] == pytest.approx(1.0488e9 / 567.2e-6 / 2.94172e12, abs=2e-3)
    assert rows[("H200", 128, 2048)]["of_model_kv"] == pytest.approx(4206.465e9 / 4.215e12, abs=2e-3)
    paged = [r["of_model_kv"] for r in rows.values() if r["layout"] == "paged"]
    contiguous = [r["of_model_kv"] for r in rows.values() if r["layout"] == "contiguous" and r["preset"]]
    assert max(paged) < 0.65 and min(contiguous) > 0.85
    assert min(contiguous) / max(paged) == pytest.approx(0.879 / 0.629, abs=5e-3)
    assert max(contiguous) / min(paged) == pytest.approx(1.051 / 0.611, abs=5e-3)
    # the A100 80GB PCIe has no preset: no model rate beside it
    assert all(r["of_model_kv"] is None for r in rows.values() if r["gpu"] == "A100 80GB PCIe")
