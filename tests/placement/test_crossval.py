"""Leave-one-source-out cross-validation, plan pairs and the validation files (hand-computed cases)."""

from __future__ import annotations

import json
import math
import os

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.calibrate import fit_published, parse_scoped_knobs
from packplace.placement.checking.crossval import cross_validate, load_setups, pair_rows, summarize
from packplace.placement.checking.validate import declared_staleness, not_fitted, validate, validation_files
from packplace.placement.problem.config import load_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
FULL_SET = validation_files(VALIDATION)


class Run:
    """A synthetic run whose one figure is ``work / gemm_peak_fraction`` seconds."""

    def __init__(self, name, publication, work, published, gpu="x", pairs=(), not_fitted=""):
        self.name, self.publication, self.work, self.gpu, self.not_fitted = name, publication, work, gpu, not_fitted
        self.framework = "f"
        self.published = {"step": published}
        self.section = {"published": self.published}
        self.primary, self.skipped, self.pairs = "step", "", list(pairs)

    def group(self, scope):
        return self.gpu if scope == "gpu" else self.framework

    def base_value(self, knob):
        return 0.5

    def score(self, values=None):
        return {"step": self.work / (values or {}).get("gemm_peak_fraction", 0.5)}, True

    def figures(self, values):
        return self.score(values)[0]


KNOB = (("gemm_peak_fraction", "gpu"),)


def test_fit_published_is_the_geometric_mean_of_work_over_published():
    # minimising sum (log(w_i / g) - log(p_i))^2 over g gives log g = mean log(w_i / p_i):
    # runs 12/25 = 0.48 and 9/18 = 0.5 -> g = sqrt(0.48 x 0.5) = sqrt(0.24) = 0.489898
    fit = fit_published([Run("b", "P2", 12, 25), Run("c", "P3", 9, 18)], KNOB)
    assert fit["knobs"][("gemm_peak_fraction", "gpu", "x")] == pytest.approx(math.sqrt(0.24), rel=1e-6)
    # residuals predicted/published - 1: 12 / 0.489898 / 25 - 1 = +2.06 %, 9 / 0.489898 / 18 - 1 = -2.02 %
    assert fit["residuals"][("b", "step")] == pytest.approx(12 / math.sqrt(0.24) / 25 - 1, rel=1e-5)
    assert fit["residuals"][("c", "step")] == pytest.approx(9 / math.sqrt(0.24) / 18 - 1, rel=1e-5)


def test_cross_validation_by_hand():
    runs = [Run("a", "P1", 10, 20), Run("b", "P2", 12, 25), Run("c", "P3", 9, 18), Run("d", "P3", 4, 10, gpu="y")]
    result = cross_validate(runs, KNOB)
    rows = {r.setup: r for r in result["rows"]}
    # without P1: g_x = sqrt(0.48 x 0.5) = 0.489898 (b, c), g_y = 4 / 10 = 0.4 (d alone)
    # -> a predicted 10 / 0.489898 = 20.41 s against 20: ratio 1.0206
    assert rows["a"].out_of_sample == pytest.approx(10 / math.sqrt(0.24), rel=1e-5)
    assert rows["a"].ratio() == pytest.approx(1.0206, abs=1e-4)
    # without P2: g_x = sqrt(0.5 x 0.5) = 0.5 -> b predicted 12 / 0.5 = 24 s against 25: 0.96
    assert rows["b"].ratio() == pytest.approx(0.96, rel=1e-5)
    # without P3: g_x = sqrt(0.5 x 0.48) -> c 9 / 0.489898 / 18 = 1.0206; d's GPU type y has no other run:
    # it takes the median of the fold's other GPU types, g_x = 0.489898 -> 4 / 0.489898 = 8.165 s against
    # 10: 0.8165, and the row says so
    assert rows["c"].ratio() == pytest.approx(1.0206, abs=1e-4)
    assert rows["d"].ratio() == pytest.approx(0.4 / math.sqrt(0.24), rel=1e-5)
    assert rows["d"].pooled == {"gemm_peak_fraction[y]": pytest.approx(math.sqrt(0.24), rel=1e-6)}
    assert rows["d"].unfitted == [] and rows["c"].pooled == {}
    # in sample: the configured 0.5 everywhere: 20/20, 24/25, 18/18, 8/10
    assert [rows[n].ratio("in_sample") for n in "abcd"] == pytest.approx([1.0, 0.96, 1.0, 0.8])
    summary = result["summary"]["out_of_sample"]
    # out of sample 1.0206, 0.96, 1.0206, 0.8165: median (0.96 + 1.0206) / 2; all 4 within 0.8-1.25
    assert summary["runs"] == 4 and summary["median"] == pytest.approx((0.96 + 10 / math.sqrt(0.24) / 20) / 2)
    assert summary["within_0.8-1.25"] == pytest.approx(1.0) and summary["within_0.67-1.5"] == 1.0
    assert summary["out_of_memory"] == 0
    assert [f["left_out"] for f in result["folds"]] == ["P1", "P2", "P3"]


def test_a_value_of_one_run_is_not_fitted_and_a_not_fitted_run_never_trains():
    # GPU type y has one run: fitting g_y to it would be a per-run knob -> kept at its configured 0.5;
    # g_x from runs b and c: sqrt(12/25 x 9/18) = sqrt(0.24)
    fit = fit_published([Run("b", "P2", 12, 25), Run("c", "P3", 9, 18), Run("d", "P3", 4, 10, gpu="y")], KNOB)
    assert ("gemm_peak_fraction", "gpu", "y") not in fit["knobs"]
    value, reason = fit["fixed"][("gemm_peak_fraction", "gpu", "y")]
    assert value == 0.5 and reason.startswith("only 1 run")
    assert fit["knobs"][("gemm_peak_fraction", "gpu", "x")] == pytest.approx(math.sqrt(0.24), rel=1e-6)
    # e (work 1, published 100) would drag g_x to (0.48 x 0.5 x 0.01)^(1/3) = 0.1339 in the fold without
    # P1; declared not fitted it is left out of every fold's fit, yet scored: 1 / 0.489898 / 100 = 0.0204
    runs = [Run("a", "P1", 10, 20), Run("b", "P2", 12, 25), Run("c", "P3", 9, 18),
            Run("e", "P2", 1, 100, not_fitted="mechanism not modelled")]
    rows = {r.setup: r for r in cross_validate(runs, KNOB)["rows"]}
    assert rows["a"].out_of_sample == pytest.approx(10 / math.sqrt(0.24), rel=1e-5)
    assert rows["e"].ratio() == pytest.approx(0.01 / 0.5, rel=1e-5)  # without P2: g_x = sqrt(0.5 x 0.5)
    assert rows["e"].not_fitted == "mechanism not modelled"
    with pytest.raises(ConfigError, match="not_fitted must be the reason"):
        not_fitted({"not_fitted": "  "}, "x.yaml")


def test_pair_ratio_by_hand():
    a, b = Run("a", "P", 30, 120), Run("b", "P", 20, 60, pairs=[{"setup": "a", "what": "2x GPUs"}])
    # published speed-up 120 / 60 = 2; predicted 60 / 40 = 1.5 (in sample) and, with other steps, 2.4
    (pair,) = pair_rows([a, b], {"a": 60.0, "b": 40.0}, {"a": 72.0, "b": 30.0})
    assert pair["published"] == 2.0
    assert pair["in_sample"] == 1.5 and pair["in_sample_ratio"] == 0.75 and pair["in_sample_order_ok"] is True
    assert pair["out_of_sample"] == 2.4 and pair["out_of_sample_ratio"] == pytest.approx(1.2)
    # the predicted order reversed: b slower than a while published faster
    (reversed_pair,) = pair_rows([a, b], {"a": 40.0, "b": 50.0})
    assert reversed_pair["in_sample_order_ok"] is False and reversed_pair["out_of_sample"] is None
    other = Run("c", "Q", 1, 1, pairs=[{"setup": "a", "what": ""}])
    with pytest.raises(ConfigError, match="from another publication"):
        pair_rows([a, other], {"a": 1.0, "c": 1.0})


def test_every_validation_file_loads_with_its_source_framework_and_pairs():
    setups = load_setups(FULL_SET)
    assert len(setups) >= 15
    for s in setups:
        assert s.section.get("url") and s.section.get("source"), s.name
        assert s.framework != "unknown", s.name
        assert s.published or s.skipped, s.name
    assert len({s.framework for s in setups} - {"none"}) >= 4
    names = {s.name for s in setups}
    pairs = [(p["setup"], s.name) for s in setups for p in s.pairs]
    assert len(pairs) >= 6 and all(a in names for a, _ in pairs)
    # an asynchronous run carries its staleness and is skipped until the plan can carry it, never scored
    # as synchronous
    stale = [s for s in setups if declared_staleness(s.section)]
    assert stale and all(s.skipped.startswith("asynchronous run") or s.plan.staleness for s in stale)


def test_staleness_and_knob_declarations_are_checked():
    with pytest.raises(ConfigError, match="plan.staleness: must be a mapping"):
        declared_staleness({"plan": {"staleness": {"actor": -1}}})
    assert declared_staleness({"plan": {"staleness": {"actor": 0}}}) == {}
    assert parse_scoped_knobs("decode_bw_eff:gpu, phase_overhead:framework") == (
        ("decode_bw_eff", "gpu"), ("phase_overhead", "framework"))
    with pytest.raises(ConfigError, match="never per run"):
        parse_scoped_knobs("decode_bw_eff:row")
    with pytest.raises(ConfigError, match="unknown knob 'speed'"):
        parse_scoped_knobs("speed:gpu")


def test_cross_validate_command_on_real_files(capsys):
    # two publications on A100: the DeepSpeed-Chat table's two runs determine decode_bw_eff[a100-80gb-sxm]
    # in the fold without the Qwen batch-1 run; the Qwen run alone does not (a value of one run), so in the
    # DeepSpeed-Chat fold the knob keeps its preset and those rows' ratios are the in-sample ones
    files = [os.path.join(VALIDATION, f) for f in ("qwen2.5-7b_vllm_batch1_1xa100.yaml",
                                                   "deepspeed_chat_ppo_opt-13b_8xa100.yaml",
                                                   "deepspeed_chat_ppo_opt-30b_8xa100.yaml")]
    assert main(["validate", "--cross-validate", "--knobs", "decode_bw_eff:gpu", "--json", *files]) == 0
    document = json.loads(capsys.readouterr().out)
    folds = {f["left_out"].split(" ")[0]: f for f in document["folds"]}
    assert 0.02 <= folds["Qwen2.5"]["knobs"]["decode_bw_eff[a100-80gb-sxm]"] <= 1.0
    assert folds["DeepSpeed-Chat"]["knobs"] == {}
    assert folds["DeepSpeed-Chat"]["fixed"]["decode_bw_eff[a100-80gb-sxm]"]["reason"].startswith("only 1 run")
    rows = {r["setup"]: r for r in document["rows"]}
    dsc = rows["deepspeed_chat_ppo_opt-13b_8xa100"]
    # 0.84 under the deepspeed-chat profile with the actor's LoRA, the hybrid engine's 4.7 ms per decode step
    # and its ZeRO-3 Q/K/V copy into a merged buffer at every forward (0.75 without the copy; 0.77 training
    # the whole actor at the presets' former 2 ms, 1.00 with their former 5 s per task), and the adapters
    # folded into the weights at each generate call (0.834 without the fold, 0.843 with)
    assert dsc["in_sample_ratio"] == pytest.approx(0.84, abs=0.01)
    assert dsc["out_of_sample_ratio"] == dsc["in_sample_ratio"]
    assert dsc["unfitted"] == ["decode_bw_eff[a100-80gb-sxm]"]
    qwen = rows["qwen2.5-7b_vllm_batch1_1xa100"]
    assert qwen["out_of_sample_ratio"] != qwen["in_sample_ratio"] and qwen["unfitted"] == []
    assert document["summary"]["out_of_sample"]["runs"] == 3


def test_cross_validate_rows_say_which_micro_batches_were_fitted(capsys):
    # the CodeLlama-34B Optimized DSChat file fits its generation batch (the script's cannot be held by DeepSpeed's
    # inference workspace): its row says so, as plain validate's does; a file with published batches says nothing
    files = [os.path.join(VALIDATION, f) for f in ("deepspeed_chat_optimized_ppo_codellama-34b_32xa800.yaml",
                                                   "qwen2.5-7b_vllm_batch1_1xa100.yaml")]
    assert main(["validate", "--cross-validate", "--json", *files]) == 0
    rows = {r["setup"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["deepspeed_chat_optimized_ppo_codellama-34b_32xa800"]["fitted"] == (
        "micro-batch not published, fitted as the largest within memory: actor.generate 1")
    assert rows["qwen2.5-7b_vllm_batch1_1xa100"]["fitted"] == ""


#: The OpenRLHF README "Performance" table at commit 391e1de4 (OpenRLHF / Optimized DSChat, seconds per 1,024
#: prompts): every row the model can express, one file per column, the two columns of a row paired.
OPENRLHF_TABLE = {"llama2-7b_16xa800": (471.11, 855.09), "llama2-13b_32xa800": (608.93, 1528.93),
                  "codellama-34b_32xa800": (1526.4, 3634.98), "llama2-70b_32xa800": (4488.53, 10407.0)}


def test_every_row_of_the_openrlhf_table_is_a_pair_of_files_of_one_model():
    setups = {s.name: s for s in load_setups(FULL_SET)}
    for row, (openrlhf, dschat) in OPENRLHF_TABLE.items():
        a, b = setups[f"openrlhf_ppo_{row}"], setups[f"deepspeed_chat_optimized_ppo_{row}"]
        assert (a.published["step"], b.published["step"]) == (openrlhf, dschat), row
        assert [p["setup"] for p in a.pairs] == [b.name], row
        assert a.section["url"] == b.section["url"] == "https://github.com/OpenRLHF/OpenRLHF/blob/391e1de4/README.md"
        # both columns of a row train one architecture (actor, critic and reward alike)
        models_a, models_b = (load_yaml(os.path.join(VALIDATION, s.name + ".yaml"))["models"] for s in (a, b))
        for role in ("actor", "critic", "reward"):
            assert models_a[role] == models_b[role], (row, role)


def test_validate_reports_skipped_asynchronous_rows_and_pairs(capsys):
    rows = validate(FULL_SET)
    skipped = [r for r in rows if r.skipped]
    assert all(not r.ok for r in skipped)
    main(["validate", *[f for f in FULL_SET if "llama3.1-8b" in f]])
    out = capsys.readouterr().out
    assert "pairs: predicted speed-up against the published one" in out
    summary = summarize([])
    assert summary["runs"] == 0 and summary["median"] is None
