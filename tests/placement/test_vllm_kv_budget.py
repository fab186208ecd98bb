"""``benchmarks/vllm_kv_budget.py``: the engine's KV budget against vLLM's start-up logs. The rows' internal
consistency (tokens against bytes per token, the logged parts against the logged budget, concurrency against
tokens), the KV bytes per token and weights by hand, and the figures docs/calibration-and-validation.md quotes
("The engine's KV budget against vLLM's start-up logs")."""

import pytest
from benchmark_scripts import load

GIB = 2.0 ** 30


def _script():
    return load("vllm_kv_budget")


def _checks():
    v = _script()
    return {r["id"]: v.row_check(r) for r in v.ROWS}


def test_rows_cite_a_source_and_a_vllm_version():
    v = _script()
    assert len(v.ROWS) >= 10
    assert len({r["id"] for r in v.ROWS}) == len(v.ROWS)
    for r in v.ROWS:
        assert r["url"].startswith("https://github.com/"), r["id"]
        assert r["vllm"], r["id"]
        assert r["kv_gib"] is not None or r["kv_tokens"] is not None or r["parts"], r["id"]


def test_logged_tokens_match_logged_bytes_over_bytes_per_token():
    """Where a row logs both the budget and the tokens, the tokens are the budget over the KV bytes per token of
    the rank's layers: never more than the 2-decimal GiB allows, at most 2% fewer (block rounding)."""
    v = _script()
    checked = 0
    for r in v.ROWS:
        c = v.row_check(r)
        if "tokens_over_bytes_per_token" not in c:
            continue
        checked += 1
        upper = (r["kv_gib"] + 0.005) * GIB / c["kv_bytes_per_token"]
        assert r["kv_tokens"] <= upper, r["id"]
        assert c["tokens_over_bytes_per_token"] > 0.98, r["id"]
    assert checked >= 4


def test_logged_parts_add_up_to_the_logged_budget():
    """gmu x total - weights - non-torch - activation = available KV, to the logs' rounding (each figure to
    0.005 GiB)."""
    v = _script()
    checked = 0
    for r in v.ROWS:
        c = v.row_check(r)
        if r["parts"] and r["total_gib"] and r["kv_gib"] is not None:
            checked += 1
            assert c["parts_remainder_bytes"] / GIB == pytest.approx(r["kv_gib"], abs=0.02), r["id"]
    assert checked >= 5


def test_concurrency_is_tokens_over_max_model_len():
    for rid in ("qwen3-14b-tp1", "llama3.1-8b-rtx3090-20k", "llama3.1-8b-rtx3090-29k"):
        assert _checks()[rid]["concurrency_check"] == pytest.approx(1.0, abs=0.01), rid


def test_kv_bytes_per_token_and_weights_by_hand():
    c = _checks()
    # Llama-3-8B: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes; TP 2 halves the heads
    assert c["llama3-8b-tp1-h100"]["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2 == 131072
    assert c["llama3-8b-tp2-h100"]["kv_bytes_per_token"] == 65536
    # Llama-2-70B at TP 4: 8 KV heads / 4 = 2 per rank, 80 layers
    assert c["llama2-70b-tp4-a100"]["kv_bytes_per_token"] == 2 * 80 * 2 * 128 * 2 == 81920
    # Qwen3-235B-A22B at TP 4: 4 KV heads / 4 = 1 per rank, 94 layers
    assert c["qwen3-235b-fp8-tp4-h100"]["kv_bytes_per_token"] == 2 * 94 * 1 * 128 * 2 == 48128
    # vLLM's "model weights take 14.96GiB" is the bf16 weights the package prices (8,030,261,248 parameters)
    assert 14.96 * GIB / (2 * 8_030_261_248) == pytest.approx(1.0, abs=5e-4)
    assert c["llama3-8b-tp1-h100"]["weights_logged_over_model"] == pytest.approx(1.0, abs=5e-4)


def test_h100_budget_at_or_under_vllms_with_v0_non_torch_inside_the_pool():
    """With the pool at the preset's CUDA total (79.11 GiB; the logs read 79.22), the profile run's activation peak
    priced and V0's non-torch bytes inside the pool (1.79 GiB at TP 1, of which the KV budget's overhead already
    holds the 1.02 GB workspace, so 0.84 GiB more; at TP 2 NCCL's 1.79 GiB besides), the two H100 rows with a full
    breakdown are priced at 0.9995 (TP 1) and 0.99999 (TP 2) of vLLM's budget. Both figures are read from the same
    log (vllm-project/vllm pull 10511), so this checks the arithmetic, not an independent prediction."""
    c = _checks()
    one, two = c["llama3-8b-tp1-h100"], c["llama3-8b-tp2-h100"]
    assert one["predicted_over_logged_bytes"] == pytest.approx(0.9995, abs=0.0002)
    assert two["predicted_over_logged_bytes"] == pytest.approx(1.0000, abs=0.0002)
    assert one["predicted_over_logged_bytes"] <= 1.0 and two["predicted_over_logged_bytes"] <= 1.0
    # in-pool by hand: 1.79 GiB less the 1.02e9 B workspace = 0.8401 GiB; TP 2 adds V0's 1.79 GiB of NCCL
    assert one["in_pool_bytes"] == pytest.approx(1.79 * GIB - 1.02e9)
    assert one["in_pool_bytes"] / GIB == pytest.approx(0.8401, abs=1e-4)
    assert two["in_pool_bytes"] == pytest.approx(2 * 1.79 * GIB - 1.02e9)
    # what the package reserves besides the weights, from vLLM's requested memory (79.22 GiB), is now at or above
    # vLLM's logged non-torch + activation, 3.05 / 4.84 GiB (3.08 / 4.84 GiB: the pool's 0.1 GiB smaller total)
    assert one["model_reserved_besides_weights_bytes"] / GIB == pytest.approx(3.077, abs=0.002)
    assert two["model_reserved_besides_weights_bytes"] / GIB == pytest.approx(4.842, abs=0.002)
    for row in (one, two):
        assert row["model_reserved_besides_weights_bytes"] >= row["reserved_besides_weights_bytes"]
    # the profile peak at 8,192 tokens and 256 rows is V0's sampler: the final hidden states (2 x 4,096 x 8,192 B)
    # and 30 B a logit over 256 x 128,256 logits, 1,052,114,944 B = 0.98 GiB, under the logged 1.26 GiB
    assert one["profile_peak_bytes"] == 2 * 4096 * 8192 + 256 * 128256 * 30 == 1_052_114_944
    assert one["profile_peak_bytes"] < 1.26 * GIB
    # TP 1 by hand: 0.9 x 79.11 GiB = 71.20 GiB less 14.96 GiB of weights (logged; the package's bf16 weights are
    # 1.0002 x), the package's 1.17 GiB overhead (one prompt's working set, the 1.02 GB workspace, slack), the
    # profile peak beyond that prompt's working set (0.98 - 0.012 GiB) and the 0.84 GiB in-pool rest is 53.26 GiB,
    # 0.9995 x the logged 53.29 GiB
    work = 102400 * 128 / GIB
    assert one["engine_overhead_bytes"] / GIB == pytest.approx(1.17, abs=0.005)
    assert one["predicted_kv_bytes"] / GIB == pytest.approx(53.26, abs=0.01)
    assert (0.9 * 79.11 - 14.96 - 1.17 - (0.98 - work) - 0.84) / 53.29 == pytest.approx(0.9995, abs=0.001)


def test_the_priced_profile_peak_never_exceeds_the_logged_activation():
    """Every priced row with a logged activation peak: the package's profile-run peak is at most vLLM's (a lower
    bound by construction), and on the two RTX 3090 rows, where the forward at 20,000 / 29,000 tokens binds, within
    1% of it: 110,592 B a token (6d + 6f for Llama-3-8B) against the logged 2.07 / 2.99 GiB."""
    c = _checks()
    ratios = {rid: row["profile_peak_over_logged_activation"] for rid, row in c.items()
              if "profile_peak_over_logged_activation" in row}
    assert set(ratios) == {"llama3-8b-tp1-h100", "llama3-8b-tp2-h100", "llama3.1-8b-rtx3090-20k",
                           "llama3.1-8b-rtx3090-29k"}
    assert all(r <= 1.0 for r in ratios.values()), ratios
    assert c["llama3.1-8b-rtx3090-20k"]["profile_peak_bytes"] == 20000 * (6 * 4096 + 6 * 14336)
    assert ratios["llama3.1-8b-rtx3090-20k"] == pytest.approx(0.995, abs=0.001)
    assert ratios["llama3.1-8b-rtx3090-29k"] == pytest.approx(0.999, abs=0.001)


def test_every_priced_row_moves_down_by_its_profile_peak():
    """The terms only lower budgets: each priced row's predicted/logged fell from the CUDA-total figures (H100
    1.033 / 1.031, A100 Llama-2-7B 1.001 / Llama-2-70B TP 4 1.410) to 1.015 / 1.014 / 0.995 / 1.396 with the
    profile peak, then the H100 rows (vLLM 0.6.5) to 0.9995 / 1.000 with that release's non-torch bytes inside the
    pool; the A100 rows (vLLM 0.2.4, whose non-torch reading the workspace covers) do not move. The TP 4 row (on
    PyTorch before ``TORCH_NCCL_AVOID_RECORD_STREAMS``) stays above: its profile held fragmented activation blocks
    the package does not price (vllm-project/vllm issue 2248)."""
    c = _checks()
    got = {rid: c[rid].get("predicted_over_logged_bytes", c[rid].get("predicted_over_logged_tokens"))
           for rid in ("llama3-8b-tp1-h100", "llama3-8b-tp2-h100", "llama2-7b-tp1-a100", "llama2-70b-tp4-a100")}
    want = {"llama3-8b-tp1-h100": 0.9995, "llama3-8b-tp2-h100": 1.000, "llama2-7b-tp1-a100": 0.995,
            "llama2-70b-tp4-a100": 1.396}
    for rid, ratio in want.items():
        assert got[rid] == pytest.approx(ratio, abs=0.001), rid


def test_profile_activation_scales_with_batched_tokens_like_the_working_set():
    """vLLM V0's profile-run activation grows with the profile's token count (max_model_len 20,000 -> 29,000 on
    the same server): (2.99 - 2.07) GiB / 9,000 tokens = 110 kB a token, the package's no-grad working set of
    Llama-3-8B (102,400 B a token: 4d + 6f, f = 14,336) within 10%."""
    c = _checks()
    a, b = c["llama3.1-8b-rtx3090-20k"], c["llama3.1-8b-rtx3090-29k"]
    slope = (b["reserved_besides_weights_bytes"] - a["reserved_besides_weights_bytes"]) / 9000
    assert a["working_set_per_token_bytes"] == 4 * 4096 + 6 * 14336 == 102400
    assert slope / a["working_set_per_token_bytes"] == pytest.approx(1.07, abs=0.03)


def test_ab_engine_budgets_by_hand():
    """The A/B's engine: Qwen3-235B-A22B's bf16 weights over TP 8 (235,093,634,560 parameters x 2 / 8) and vLLM's
    budget 0.80 / 0.88 x 79.22 GiB less them and the Llama-3-8B TP 1 reservation (1.79 + 1.26 GiB)."""
    eng = _script().ab_engine()
    weights = 235_093_634_560 * 2 / 8
    assert eng["weights_bytes"] == pytest.approx(weights, rel=1e-9)
    reserved = (1.79 + 1.26) * GIB
    est = eng["vllm"]["llama3-8b-tp1-h100"]
    assert est["budgets"][0] == pytest.approx(0.80 * 79.22 * GIB - weights - reserved, rel=1e-9)
    assert est["budgets"][1] == pytest.approx(0.88 * 79.22 * GIB - weights - reserved, rel=1e-9)
    # at the preset's CUDA total, less the profile peak of NeMo RL's V1 engine (8,192 tokens, 256 rows: the sampler,
    # 0.456 GB, binds), the package's budget (7.35 -> 14.14 GB) grows x1.92 from 0.80 to 0.88, less than vLLM's with
    # either logged reservation (x2.13, x2.67): it sits above both, as its reservation is smaller
    assert eng["profile_peak_bytes"] / 1e9 == pytest.approx(0.456, abs=0.0005)
    assert eng["package"][0] / 1e9 == pytest.approx(7.35, abs=0.005)
    assert eng["package"][1] / 1e9 == pytest.approx(14.14, abs=0.005)
    assert eng["package_ratio"] == pytest.approx(1.92, abs=0.01)
    assert eng["vllm"]["llama3-8b-tp2-h100"]["ratio"] == pytest.approx(2.67, abs=0.01)
    assert eng["package_ratio"] < est["ratio"] and eng["package"][0] > est["budgets"][0]


def test_the_engine_footprint_leaves_no_more_headroom_than_vllm_does():
    """The package's engine footprint (the pool at the preset's CUDA total, 79.11 GiB, plus what the release holds
    outside it) leaves at most the headroom vLLM's (the pool at the logged 79.22 GiB plus the same terms) does."""
    v = _script()
    feet = {e["id"]: v.footprint_check(e) for e in v.FOOTPRINT_ENGINES}
    assert all(f["package_headroom_within_vllms"] for f in feet.values())
    graph, v0_graph, nccl, ws = 2.28 * GIB, 3.34 * GIB, 4.52 * GIB, 1.02e9
    # V0 (vLLM 0.6.5): NCCL inside the pool, the graphs outside: TP 1 and TP 2 hold the same
    one, two = feet["llama3-8b-tp1-h100"], feet["llama3-8b-tp2-h100"]
    h100 = 79.11 * GIB
    assert one["package_footprint_bytes"] == pytest.approx(0.9 * h100 + ws + v0_graph)
    assert two["package_footprint_bytes"] == pytest.approx(one["package_footprint_bytes"])
    assert one["vllm_headroom_bytes"] - one["package_headroom_bytes"] == pytest.approx(0.1 * (79.22 - 79.11) * GIB)
    # vLLM 0.20 at TP 8: NCCL outside too; at 0.88 the package leaves 1.87 GB, vLLM 1.89 GB
    late = feet["ab-qwen3-235b-tp8-0.88"]
    assert late["outside_bytes"] == pytest.approx(ws + graph + nccl)
    assert late["package_headroom_bytes"] == pytest.approx(h100 - 0.88 * h100 - ws - graph - nccl)
    assert late["package_headroom_bytes"] / 1e9 == pytest.approx(1.87, abs=0.005)
    assert late["vllm_headroom_bytes"] / 1e9 == pytest.approx(1.89, abs=0.005)
