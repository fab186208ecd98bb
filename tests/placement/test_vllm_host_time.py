"""``benchmarks/vllm_host_time.py``: vLLM V1's host time per running sequence fitted to ML.ENERGY's H100 runs
(the transcription of ``benchmarks/blackwell_throughput.py``); the fitting arithmetic by hand, and the figures
docs/calibration-and-validation.md quotes ("vLLM's host time per running sequence against ML.ENERGY's H100 runs")."""


import numpy as np
import pytest
from benchmark_scripts import load

from packplace.placement.model.framework import VLLM_DECODE_STEP_OVERHEAD, VLLM_HOST_SECONDS_PER_SEQUENCE


def _script():
    return load("vllm_host_time")


def _row(task, running, excess, gpu=10.0, kv=0.0, model="m", tp=1, mns=None):
    """A synthetic priced row whose published ITL is the GPU step + 1.4 ms + ``excess`` ms."""
    return {"model": model, "task": task, "tp": tp, "max_num_seqs": mns or running, "running": running,
            "context": 1000.0, "gpu_ms": gpu, "kv_ms": kv, "excess_ms": excess, "itl_ms": gpu + 1.4 + excess}


def test_fit_recovers_planted_terms():
    v = _script()
    rows = [_row("a", n, 0.5 + 0.03 * n + 0.2 * kv, kv=kv) for n, kv in ((8, 1.0), (64, 3.0), (256, 20.0))]
    assert v.fit(rows, ("one", "running", "kv")) == pytest.approx([0.5, 0.03, 0.2], abs=1e-9)
    # through the origin: h = Σa·y / Σa², by hand for excess = 0.04·a
    rows = [_row("a", n, 0.04 * n) for n in (16, 128)]
    assert v.fit(rows, ("running",))[0] == pytest.approx(0.04, abs=1e-12)


def test_predicted_itl_adds_exactly_n_times_h():
    v = _script()
    rows = [_row("a", n, 0.0) for n in (1, 100, 512)]
    base = v.predicted_itl(rows, ("running",), np.array([0.0]))
    with_h = v.predicted_itl(rows, ("running",), np.array([0.025]))
    assert list(base) == pytest.approx([11.4, 11.4, 11.4])
    assert list(with_h - base) == pytest.approx([0.025, 2.5, 12.8])


def test_holdout_by_workload_prices_the_other_workload_by_hand():
    v = _script()
    # workload a: 0.01 ms per running sequence; b: 0.03. Fitted to a, b's run at 100 running is priced at
    # 10 + 1.4 + 1.0 = 12.4 ms against the published 10 + 1.4 + 3.0 = 14.4 ms: 1.16129
    rows = [_row("a", 50, 0.5), _row("a", 100, 1.0), _row("b", 100, 3.0)]
    out = v.holdout(rows, ("running",), "task")
    assert out["held_out"]["b"]["median"] == pytest.approx(14.4 / 12.4, abs=1e-3)
    assert out["coefficients_fitted_without"]["b"] == [pytest.approx(0.01)]
    assert out["coefficients_fitted_without"]["a"] == [pytest.approx(0.03)]
    # a's runs priced at 0.03: 11.4 + 1.5 = 12.9 against 11.9, and 11.4 + 3.0 = 14.4 against 12.4
    assert out["held_out"]["a"]["min"] == pytest.approx(round(12.4 / 14.4, 3))
    assert out["count"] == 3


def test_workload_host_and_its_standard_error_by_hand():
    v = _script()
    # a = (1, 2), excess (1, 3) ms: h = (1 + 6)/(1 + 4) = 1.4 ms; residuals −0.4, 0.2: Σres² = 0.2,
    # se = sqrt(0.2 / 1 / 5) = 0.2 ms
    rows = [_row("lm-arena-chat", 1, 1.0), _row("lm-arena-chat", 2, 3.0), _row("gpqa", 4, 0.4), _row("gpqa", 8, 0.8)]
    out = v.workload_host(rows)
    assert out["lm-arena-chat"] == {"runs": 2, "host_us": 1400.0, "standard_error_us": 200.0}
    assert out["gpqa"] == {"runs": 2, "host_us": 100.0, "standard_error_us": 0.0}
    with pytest.raises(ValueError, match="workload 'gpqa': 1 runs"):
        v.workload_host(rows[:3])


def test_matched_pairs_the_two_workloads_at_one_max_num_seqs():
    v = _script()
    rows = [_row("lm-arena-chat", 64, 3.2, kv=2.0, mns=64), _row("gpqa", 50, 0.5, kv=16.0, mns=64),
            _row("lm-arena-chat", 128, 6.0, mns=128)]
    (pair,) = v.matched(rows)
    assert pair["max_num_seqs"] == 64
    assert pair["chat"]["excess_us_per_seq"] == 50.0 and pair["gpqa"]["excess_us_per_seq"] == 10.0
    assert pair["chat"]["kv_us_per_seq"] == 31.2 and pair["gpqa"]["kv_us_per_seq"] == 320.0


def test_bad_input_is_refused():
    v = _script()
    with pytest.raises(ValueError, match="terms: unknown"):
        v.design([_row("a", 8, 0.0)], ("hosts",))
    with pytest.raises(ValueError, match="chat_prompt: must be >= 1"):
        v.h100_rows(chat_prompt=0)
    with pytest.raises(ValueError, match="rows: nothing to fit"):
        v.fit([], ("running",))


def test_priced_rows_split_the_iteration_exactly():
    v = _script()
    rows = v.h100_rows()
    assert len(rows) == 66 and {r["task"] for r in rows} == {"lm-arena-chat", "gpqa"}
    h = VLLM_HOST_SECONDS_PER_SEQUENCE["v1"] * 1e3
    for r in rows:
        # the GPU step, the 1.4 ms and a·h make up the model's iteration; the excess is the rest of the ITL
        assert r["gpu_ms"] + VLLM_DECODE_STEP_OVERHEAD * 1e3 + h * max(1, round(r["running"])) == pytest.approx(
            r["iteration_ms"], abs=2e-4)
        assert r["excess_ms"] == pytest.approx(r["itl_ms"] - r["gpu_ms"] - 1.4, abs=2e-4)
        assert r["kv_ms"] > 0


def test_the_documented_figures():
    v = _script()
    rows = v.h100_rows()
    table = v.fit_table(rows)
    host = table["host"]
    # 40 µs per running sequence (42 before vLLM's sampler was priced in the model's GPU step)
    assert host["coefficients"][0] == pytest.approx(0.0399, abs=0.0005)
    # fitted to the chat runs, the gpqa runs come out slower than published; fitted to gpqa, chat far faster
    held = host["by_workload"]["held_out"]
    assert held["gpqa"]["max"] < 1.02 and held["lm-arena-chat"]["median"] > 1.3
    # a KV-read factor fitted to the chat runs prices the long-context gpqa runs far too slow
    assert table["KV rate"]["by_workload"]["held_out"]["gpqa"]["median"] < 0.75
    by_task = v.workload_host(rows)
    chat, gpqa = by_task["lm-arena-chat"], by_task["gpqa"]
    assert chat["host_us"] == pytest.approx(40.1, abs=0.5) and gpqa["host_us"] == pytest.approx(-7.6, abs=1.0)
    assert chat["host_us"] - gpqa["host_us"] > 4 * (chat["standard_error_us"] + gpqa["standard_error_us"])
    # at the same model and max_num_seqs 64, the chat runs carry 20+ µs more per running sequence
    at64 = [p for p in v.matched(rows) if p["max_num_seqs"] == 64]
    assert len(at64) == 3
    assert all(p["chat"]["excess_us_per_seq"] > p["gpqa"]["excess_us_per_seq"] + 20 for p in at64)
    # nothing adopted: the model's V1 figure is the pull-23914 slope
    assert VLLM_HOST_SECONDS_PER_SEQUENCE["v1"] == pytest.approx(12.85e-6, abs=0.005e-6)


def test_the_chat_figure_rests_on_the_prompt_assumption():
    v = _script()
    sens = v.prompt_sensitivity((300, 1000))
    assert sens[300]["chat_host_us"] == pytest.approx(40.1, abs=0.5)
    assert sens[1000]["chat_host_us"] < 0.45 * sens[300]["chat_host_us"]
