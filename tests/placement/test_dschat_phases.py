"""benchmarks/dschat_phases.py: the published DeepSpeed-Chat step-3 log rows are consistent, each is priced as the
docs say, and the per-iteration residuals and the leave-one-log-out fits are computed by their formulas
(docs/calibration-and-validation.md, "DeepSpeed-Chat phases against published step-3 logs")."""

import pytest
from benchmark_scripts import load

from packplace.placement.model import framework

phases = load("dschat_phases")


@pytest.fixture(scope="module")
def rows():
    return {r["id"]: r for r in phases.all_rows()}


def test_v100_log_medians_add_up():
    pub = phases.LOGS[0]["published"]
    # DeepSpeed's hybrid-engine line: E2E = Generate + Training + Others (medians over 476 steps: 2.52 + 1.06 +
    # 0.22 = 3.80, the median E2E)
    assert pub["generation"] + pub["experience_and_actor_train"] + pub["others"] == pytest.approx(pub["e2e"])


@pytest.mark.parametrize("row", phases.LOGS, ids=lambda r: r["id"])
def test_published_phases_fit_in_their_step(row):
    pub = row["published"]
    parts = [v for k, v in pub.items() if k != "e2e"]
    assert sum(parts) <= pub["e2e"] + 1e-9
    assert row["source"] and row["config"] and row["gpus"] >= 1
    assert row["per_device_batch"] >= 1 and row["answer_len"] >= 1


def test_not_priced_rows_say_why():
    for n in phases.NOT_PRICED:
        assert n["source"] and n["what"] and n["reason"]


def test_v100_row_reproduces_the_profiles_own_source(rows):
    r = rows["dse-log-opt1.3b-16xv100"]
    # one generate call of 4 prompts per GPU, 256 decode iterations: the 4.7 ms per iteration was read from this
    # log's Generate time (2.52 s), so the model's generation comes back to within 2%
    assert (r["calls"], r["iterations"]) == (1, 256)
    assert r["ratio"]["generation"] == pytest.approx(1.0, abs=0.02)
    assert r["per_token_ms"]["published"] == pytest.approx(2520 / 256)


def test_ratios_and_per_token_latency_by_hand(rows):
    for r in rows.values():
        for key, ratio in r["ratio"].items():
            assert ratio == pytest.approx(r["predicted"][key] / r["published"][key])
        assert r["per_token_ms"]["predicted"] == pytest.approx(1e3 * r["predicted"]["generation"] / r["iterations"])
    r = rows["openrlhf-issue327-llama2-7b-16xa800"]
    # 1,024 prompts on 16 GPUs at 8 per generate call: 8 calls of 1,024 decode iterations
    assert (r["calls"], r["iterations"]) == (8, 8192)
    assert r["per_token_ms"]["published"] == pytest.approx(328000 / 8192)


def test_the_flat_term_is_charged_once_per_decode_iteration(rows):
    # the profile's 4.7 ms enters the generation once per decode iteration of every call: the price less the
    # price without it, over 4.7 ms, is calls x answer length on every row
    for r in rows.values():
        assert r["flat_overhead_iterations"] == pytest.approx(r["iterations"], rel=1e-6)
        assert r["base_generation"] < r["predicted"]["generation"]


def test_decode_overhead_switch_restores_the_profile():
    before = framework.FRAMEWORKS["deepspeed-chat"]
    with phases.decode_overhead(0.0):
        assert framework.FRAMEWORKS["deepspeed-chat"].decode_step_overhead == 0.0
    assert framework.FRAMEWORKS["deepspeed-chat"] is before
    assert before.decode_step_overhead == framework.DS_HYBRID_DECODE_STEP_OVERHEAD


def test_residuals_by_their_formula(rows):
    res = {x["id"]: x for x in phases.residuals(list(rows.values()))}
    for rid, x in res.items():
        r = rows[rid]
        assert x["per_iteration_s"] == pytest.approx(
            (r["published"]["generation"] - r["base_generation"]) / r["iterations"])
        assert x["per_layer_s"] == pytest.approx(x["per_iteration_s"] / r["layers"])
    # the V100 log is the constant's source: what it implies per iteration is the 4.7 ms within 0.3 ms
    assert res["dse-log-opt1.3b-16xv100"]["per_iteration_s"] == pytest.approx(
        framework.DS_HYBRID_DECODE_STEP_OVERHEAD, abs=3e-4)


def test_leave_one_out_holds_each_fit_row_out(rows):
    rlist = list(rows.values())
    res = phases.residuals(rlist)
    loo = phases.leave_one_out(res, rlist)
    fit = [x for x in res if x["fit"]]
    assert loo["fit_rows"] == [x["id"] for x in fit] and len(fit) == 2
    a, b = fit
    held = {h["id"]: h for h in loo["held_out"]}
    # with two fit rows, each is priced with the other's constant
    assert held[a["id"]]["flat_s"] == pytest.approx(b["per_iteration_s"])
    assert held[b["id"]]["per_layer_s"] == pytest.approx(a["per_layer_s"])
    ra = rows[a["id"]]
    assert held[a["id"]]["flat_ratio"] == pytest.approx(
        (ra["base_generation"] + ra["iterations"] * b["per_iteration_s"]) / ra["published"]["generation"])
    # rows not fitted take the median of both fit rows
    blog = held["blog-fig6-opt13b-8xa100"]
    assert not blog["in_fit"]
    assert blog["flat_s"] == pytest.approx((a["per_iteration_s"] + b["per_iteration_s"]) / 2)
