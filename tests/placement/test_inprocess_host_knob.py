"""The in-process engine's host time per running sequence: charged only to a synchronous decode iteration of a
framework whose profile runs vLLM's engine core in its own process (NeMo RL), fitted per framework by the
cross-validation only where runs depend on it; hand calculations."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest

from packplace.placement.checking.calibrate import (
    DEFAULT_SCOPED_KNOBS,
    KNOB_BOUNDS,
    PROFILE_KNOBS,
    fit_published,
    parse_scoped_knobs,
)
from packplace.placement.checking.crossval import cross_validate, load_setups
from packplace.placement.checking.validate import predict
from packplace.placement.model.cost import CostModel
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

VALIDATION = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation")
LLAMA8B = ModelSpec(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
KNOB = "inprocess_host_per_sequence"
# One decode iteration of Llama-3.1-8B, batch 1, 1,000 cached tokens, on the H100 preset's knob roofline:
# (2·7,504,658,432 + 1,000·131,072) bytes / (3.35e12 · 0.65) = 6.953107 ms, + vLLM's 1.4 ms per iteration
# = 8.353107 ms (tests/placement/test_placement_decode_step_overhead.py derives both).
BASE_STEP = 8.353107e-3


def _steps(framework: str, running: float, synchronous: bool = True, **hardware) -> float:
    hw = Hardware(**{**PRESETS["h100-sxm"], "component_table": "none", **hardware})
    cost = CostModel(hw, Cluster(1, 1, 8), Workload(1, 1, 1, 2048), framework=FRAMEWORKS[framework])
    context = np.array([1000.0 * running])
    return float(cost.decode_step_times(LLAMA8B, 1, 1, (1, 1, 1), 1, np.array([running]), context,
                                        synchronous=synchronous)[0])


def test_only_nemo_rl_runs_its_engine_in_process():
    assert [name for name, p in FRAMEWORKS.items() if p.inprocess_engine] == ["nemo-rl"]
    assert PROFILE_KNOBS == {KNOB: "inprocess_engine"} and KNOB_BOUNDS[KNOB] == (0.0, 0.002)
    assert PRESETS["h100-sxm"].get(KNOB, 0.0) == 0.0  # no preset sets it: 0 unless a config or a fit does
    # a knob --knobs may name per framework, not one the cross-validation fits by default (measured: docs)
    assert parse_scoped_knobs(f"{KNOB}:framework") == ((KNOB, "framework"),)
    assert all(not spec.startswith(KNOB) for spec in DEFAULT_SCOPED_KNOBS)


def test_a_synchronous_nemo_rl_iteration_adds_the_knob_per_running_sequence():
    # batch 1: 8.353107 ms + 1 × 200 µs = 8.553107 ms
    assert _steps("nemo-rl", 1.0) == pytest.approx(BASE_STEP, rel=1e-6)
    assert _steps("nemo-rl", 1.0, **{KNOB: 200e-6}) == pytest.approx(BASE_STEP + 200e-6, rel=1e-6)
    # batch 128: the difference is 128 × 200 µs = 25.6 ms, whatever the roofline of the 128 sequences
    assert _steps("nemo-rl", 128.0, **{KNOB: 200e-6}) - _steps("nemo-rl", 128.0) == pytest.approx(25.6e-3, rel=1e-9)


@pytest.mark.parametrize("framework", ["verl", "openrlhf", "none"])
def test_other_frameworks_and_the_asynchronous_engine_do_not_pay_it(framework):
    assert _steps(framework, 1.0, **{KNOB: 200e-6}) == pytest.approx(BASE_STEP, rel=1e-6)
    # NeMo RL's asynchronous rollout (AsyncLLM, a background engine-core process): not charged
    assert _steps("nemo-rl", 1.0, synchronous=False, **{KNOB: 200e-6}) == pytest.approx(BASE_STEP, rel=1e-6)


class Run:
    """A synthetic run whose figure is ``work + sequence_iterations × knob`` seconds; a run of framework ``g``
    does not depend on the knob (as a profile without the in-process flag)."""

    def __init__(self, name, publication, work, iterations, published, framework="f"):
        self.name, self.publication, self.work, self.iterations = name, publication, work, iterations
        self.framework, self.gpu, self.not_fitted = framework, "x", ""
        self.published = {"step": published}
        self.section = {"published": self.published}
        self.primary, self.skipped, self.pairs = "step", "", []

    def group(self, scope):
        return self.gpu if scope == "gpu" else self.framework

    def base_value(self, knob):
        return 0.0

    def uses_knob(self, knob):
        return self.framework == "f"

    def score(self, values=None):
        x = (values or {}).get(KNOB, 0.0) if self.uses_knob(KNOB) else 0.0
        return {"step": self.work + self.iterations * x}, True

    def figures(self, values):
        return self.score(values)[0]


SCOPED = ((KNOB, "framework"),)


def test_the_knob_is_fitted_for_the_runs_that_depend_on_it_only():
    # a: 10 s + 10,000 × x = 12 s and b: 5 s + 5,000 × x = 6 s both give x = 200 µs exactly; run c of
    # framework g has no parameter (neither fitted nor fixed) and keeps its own figure
    fit = fit_published([Run("a", "P1", 10, 10_000, 12), Run("b", "P2", 5, 5_000, 6),
                         Run("c", "P2", 7, 1_000, 8, framework="g")], SCOPED)
    assert fit["knobs"] == {(KNOB, "framework", "f"): pytest.approx(200e-6, rel=1e-6)}
    assert fit["fixed"] == {}
    assert fit["residuals"][("c", "step")] == pytest.approx(7 / 8 - 1)


def test_leave_one_publication_out_refits_it_and_a_lone_run_keeps_zero():
    runs = [Run("a", "P1", 10, 10_000, 12), Run("b", "P2", 5, 5_000, 6), Run("d", "P2", 8, 4_000, 9),
            Run("c", "P3", 7, 1_000, 8, framework="g")]
    rows = {r.setup: r for r in cross_validate(runs, SCOPED)["rows"]}
    # without P1: b and d give 1/5,000 = 200 µs and 1/4,000 = 250 µs; least squares on log(pred/pub):
    # a predicted 10 + 10,000·x with x between them
    fold_x = (rows["a"].out_of_sample - 10) / 10_000
    assert 200e-6 < fold_x < 250e-6
    # without P2: f has one run (a) -> not fitted, and no other framework has a value: kept at 0, said so
    assert rows["b"].out_of_sample == pytest.approx(5.0) and rows["b"].unfitted == [f"{KNOB}[f]"]
    # c (framework g) never takes the knob: no unfitted or pooled entry, its own 7 s
    assert rows["c"].out_of_sample == pytest.approx(7.0) and rows["c"].unfitted == [] and rows["c"].pooled == {}


def test_on_real_files_only_the_synchronous_rollout_moves():
    names = ("nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml",
             "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_1off.yaml")
    on_policy, one_off = load_setups([os.path.join(VALIDATION, f) for f in names])
    assert on_policy.uses_knob(KNOB) and one_off.uses_knob(KNOB)

    def step(setup, value):
        instance = replace(setup.instance, hardware=replace(setup.instance.hardware, **{KNOB: value}), _cache={})
        return predict(instance, setup.plan, setup.section)[0]["step"]

    assert step(on_policy, 100e-6) > step(on_policy, 0.0) + 1.0  # thousands of iterations × 100 µs × sequences
    assert step(one_off, 100e-6) == pytest.approx(step(one_off, 0.0), rel=1e-12)  # AsyncLLM: not charged
