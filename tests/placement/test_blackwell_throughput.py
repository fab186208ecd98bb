"""``benchmarks/blackwell_throughput.py``: whole vLLM engines on B200 against H100 (ML.ENERGY v3.0, vLLM 0.11.1)
priced with the component tables; the hand-checkable parts of its pricing, the transcription's consistency and
the figures docs/calibration-and-validation.md quotes."""


import pytest
from benchmark_scripts import load


def _script():
    return load("blackwell_throughput")


def test_mean_context_of_equal_quantiles():
    b = _script()
    # Workload's quantile function runs through (0, 1): L(q) = 1 + 3990 q below q = 0.1, then 400.
    # E[L] = 0.1 + 3990·0.005 + 0.9·400 = 380.05; E[L²] = (400³ − 1)/(3·3990) + 0.9·400² = 149,346.69;
    # a running sequence holds 300 + E[L²]/(2E[L]) = 300 + 196.48 on average
    assert b.mean_context(300, 400, (400,) * len(b.QUANTILES)) == pytest.approx(496.48, abs=0.05)


def test_mean_context_of_uniform_responses():
    b = _script()
    # L(q) = 1 + 3000 q: E[L] = 1501, E[L²] = 1 + 3000 + 3000²/3 = 3,003,001, so E[L²]/(2E[L]) = 1000.33
    lengths = tuple(int(1 + 3000 * q) for q in b.QUANTILES)
    assert b.mean_context(0, 3001, lengths) == pytest.approx(3_003_001 / (2 * 1501), abs=0.5)


def test_workload_refuses_a_wrong_number_of_lengths():
    b = _script()
    with pytest.raises(ValueError, match="lengths: 3 values"):
        b.workload(8, 100, 400, (1, 2, 3))


def test_steady_throughput_is_the_iteration_rate_less_the_prefill():
    b = _script()
    lengths = (400,) * len(b.QUANTILES)
    step = b.iteration_ms("llama3.1-8b", "h100-sxm", 1, 64, b.mean_context(300, 400, lengths)) / 1e3
    got = b.steady_throughput("llama3.1-8b", "h100-sxm", 1, 64, 400, lengths, 300)
    # 64 tokens per iteration, slowed by the 64/400 prompts each iteration admits
    assert 0.8 * 64 / step < got < 64 / step


def test_pairs_divide_the_b200_gain_predicted_by_the_published():
    b = _script()
    rows = [{"model": "m", "task": "t", "gpu": g, "tp": 1, "max_num_seqs": 8, "published_tokens_per_s": pub,
             "predicted_tokens_per_s": pred} for g, pub, pred in (("B200", 200.0, 300.0), ("H100", 100.0, 100.0))]
    (pair,) = b.pairs(rows)
    assert (pair["published"], pair["predicted"], pair["predicted_over_published"]) == (2.0, 3.0, 1.5)
    assert pair["matched"]


def test_transcription_is_consistent():
    b = _script()
    for (model, task), configs in b.PUBLISHED.items():
        assert model in b.QWEN3 or model.startswith("llama3.1"), model
        for gpu, tp, mns, running, mean_out, itl, tokens_s, cap, lengths in configs:
            assert gpu in b.GPU and tp in (1, 2, 4)
            assert 0.8 * mns <= running <= mns, (model, task, gpu, mns)
            assert list(lengths) == sorted(lengths) and lengths[-1] <= cap
            # a steady state's output rate is about the running sequences over the median iteration
            assert 0.6 < tokens_s / (running / itl * 1e3) < 1.15, (model, task, gpu, mns)
            assert lengths[4] < mean_out * 1.5


def test_the_documented_figures():
    b = _script()
    rows = b.price_rows()
    summary = b.summarize(rows, b.pairs(rows))
    h100_chat = summary["H100 lm-arena-chat TP 1 throughput predicted/published"]
    b200_gpqa = summary["B200 gpqa TP 1 throughput predicted/published"]
    chat_pairs = summary["matched pairs lm-arena-chat: predicted/published B200 gain"]
    assert 0.9 < h100_chat[0] < 1.25 and h100_chat[3] == 32
    # with the Blackwell vLLM KV-read fraction (0.434): the gpqa rows 2.78 -> 1.73, the chat pairs 1.27 -> 1.10
    assert 1.5 < b200_gpqa[0] < 2.0 and b200_gpqa[3] == 15
    assert 1.0 < chat_pairs[0] < 1.2 and chat_pairs[3] == 23
    # the small-batch B200 rows are priced right: the weight-bound decode iteration holds
    small = [r["ratio"] for r in rows if r["gpu"] == "B200" and r["max_num_seqs"] == 8 and r["task"] != "gpqa"]
    assert all(0.9 < x < 1.1 for x in small)
