"""Leave-one-source-out cross-validation, plan pairs and the validation files (hand-computed cases)."""

from __future__ import annotations

import json
import math
import os

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.calibrate import fit_published, parse_scoped_knobs
from packplace.placement.crossval import cross_validate, load_setups, pair_rows, summarize
from packplace.placement.validate import declared_staleness, validate, validation_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
FULL_SET = validation_files(VALIDATION) + validation_files(os.path.join(VALIDATION, "held_out"))


class Run:
    """A synthetic run whose one figure is ``work / gemm_peak_fraction`` seconds."""

    def __init__(self, name, publication, work, published, gpu="x", pairs=()):
        self.name, self.publication, self.work, self.gpu = name, publication, work, gpu
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
    # its knob stays at the configured 0.5 -> 4 / 0.5 = 8 s against 10: 0.8, and the row says so
    assert rows["c"].ratio() == pytest.approx(1.0206, abs=1e-4)
    assert rows["d"].ratio() == pytest.approx(0.8, rel=1e-6)
    assert rows["d"].unfitted == ["gemm_peak_fraction[y]"] and rows["c"].unfitted == []
    # in sample: the configured 0.5 everywhere: 20/20, 24/25, 18/18, 8/10
    assert [rows[n].ratio("in_sample") for n in "abcd"] == pytest.approx([1.0, 0.96, 1.0, 0.8])
    summary = result["summary"]["out_of_sample"]
    # out of sample 1.0206, 0.96, 1.0206, 0.8: median (0.96 + 1.0206) / 2; 3 of 4 within 0.8-1.25 (0.8 is in)
    assert summary["runs"] == 4 and summary["median"] == pytest.approx((0.96 + 10 / math.sqrt(0.24) / 20) / 2)
    assert summary["within_0.8-1.25"] == pytest.approx(1.0) and summary["within_0.67-1.5"] == 1.0
    assert summary["out_of_memory"] == 0
    assert [f["left_out"] for f in result["folds"]] == ["P1", "P2", "P3"]


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
    # two publications on A100: the Qwen batch-1 engine run determines decode_bw_eff[a100-80gb-sxm] (0.707, as
    # `packplace calibrate` finds on it alone); DeepSpeed-Chat left out is predicted with it
    files = [os.path.join(VALIDATION, f) for f in ("qwen2.5-7b_vllm_batch1_1xa100.yaml",
                                                   "deepspeed_chat_ppo_opt-13b_8xa100.yaml")]
    assert main(["validate", "--cross-validate", "--knobs", "decode_bw_eff:gpu", "--json", *files]) == 0
    document = json.loads(capsys.readouterr().out)
    folds = {f["left_out"]: f for f in document["folds"]}
    assert folds["DeepSpeed-Chat"]["knobs"]["decode_bw_eff[a100-80gb-sxm]"] == pytest.approx(0.7068, abs=5e-4)
    rows = {r["setup"]: r for r in document["rows"]}
    # 0.77 under the deepspeed-chat profile (1.00 with the presets' former 5 s per task)
    assert rows["deepspeed_chat_ppo_opt-13b_8xa100"]["in_sample_ratio"] == pytest.approx(0.77, abs=0.01)
    assert rows["deepspeed_chat_ppo_opt-13b_8xa100"]["out_of_sample_ratio"] != rows[
        "deepspeed_chat_ppo_opt-13b_8xa100"]["in_sample_ratio"]
    assert document["summary"]["out_of_sample"]["runs"] == 2


def test_validate_reports_skipped_asynchronous_rows_and_pairs(capsys):
    rows = validate(FULL_SET)
    skipped = [r for r in rows if r.skipped]
    assert all(not r.ok for r in skipped)
    main(["validate", *[f for f in FULL_SET if "llama3.1-8b" in f]])
    out = capsys.readouterr().out
    assert "pairs: predicted speed-up against the published one" in out
    summary = summarize([])
    assert summary["runs"] == 0 and summary["median"] is None
