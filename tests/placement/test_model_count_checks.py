"""The model's cost functions refuse a count (``dp``, ``pp``, ``tp``, a shard group, calls, layers, ranks) that is
not a whole number with one ``ValueError`` naming the function, the field and the value
(:func:`packplace.placement.model.counts.check_counts`); a numpy int or an integral float prices as the int."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

from packplace.placement.checking.validate import load_setup
from packplace.placement.evaluator import get_evaluator
from packplace.placement.model import framework, training_time
from packplace.placement.model.counts import check_counts, is_count
from packplace.placement.model.deepspeed_zero2 import zero2_collective_calls

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
OPT67_8 = os.path.join(ROOT, "benchmarks", "validation", "deepspeed_chat_ppo_opt-6.7b_8xa100.yaml")
EXTENT = (1, 1, 8)


@pytest.fixture(scope="module")
def setup():
    instance, _, _ = load_setup(OPT67_8)
    return get_evaluator(instance).cost, instance.models["actor"]


def _calls(cost, model):
    """Each checked function with good arguments, as ``name -> (call taking the counts, the counts)``."""
    options, strategy = cost.options(model), {"dp": 8, "pp": 1, "tp": 1, "ep": 1}
    return {
        "hybrid_merge_seconds": (lambda tp, calls: framework.hybrid_merge_seconds(cost, model, tp, calls, 1e12),
                                 {"tp": 2, "calls": 3}),
        "hybrid_gather_seconds": (lambda dp, pp, tp, calls: framework.hybrid_gather_seconds(
            cost, model, dp, pp, tp, calls, EXTENT, offloaded=True), {"dp": 4, "pp": 1, "tp": 2, "calls": 3}),
        "hybrid_lora_fuse_seconds": (lambda tp, calls: framework.hybrid_lora_fuse_seconds(
            cost, model, 8, tp, calls, zero3=True), {"tp": 2, "calls": 3}),
        "generate_calls": (lambda dp, micro_batch: framework.generate_calls(cost, dp, micro_batch),
                           {"dp": 8, "micro_batch": 4}),
        "gather_seconds": (lambda dp, pp, tp, shard: framework.gather_seconds(
            cost, model, dp, pp, tp, 2, EXTENT, shard), {"dp": 8, "pp": 1, "tp": 1, "shard": 4}),
        "onload_seconds": (lambda dp, pp, tp: framework.onload_seconds(cost, model, dp, pp, tp, 2, True),
                           {"dp": 8, "pp": 1, "tp": 1}),
        "dispatch_seconds": (lambda dp: framework.dispatch_seconds(cost, framework.profile("openrlhf"), dp),
                             {"dp": 8}),
        "exposed_gather_seconds": (lambda layers: framework.exposed_gather_seconds(1.0, 0.5, layers),
                                   {"layers": 32}),
        "micro_rollout_batch_size": (lambda ranks: framework.micro_rollout_batch_size(64, ranks, [4, 8]),
                                     {"ranks": 8}),
        "micro_rollout_seconds": (lambda ranks, steps, engines: framework.micro_rollout_seconds(
            ranks, steps, engines, 1.0, 0.5, ((2, 0.25),)), {"ranks": 4, "steps": 2, "engines": 2}),
        "zero2_collective_calls": (lambda dp: zero2_collective_calls(model, dp), {"dp": 8}),
        "zero3_gather_latency_seconds": (lambda dp, tp, shard: cost.zero3_gather_latency_seconds(
            model, dp, tp, EXTENT, True, shard), {"dp": 8, "tp": 1, "shard": 4}),
        # the training-step terms (the actor: ZeRO-3, LoRA, recomputation on)
        **{name: (lambda dp, pp, tp, ep, name=name: getattr(training_time, name)(
            cost, model, options, dp, pp, tp, 4, EXTENT, ep), strategy)
           for name in ("training_overhead_seconds", "optimizer_steps_seconds", "zero3_collective_seconds")},
        "zero3_exposed_seconds": (lambda dp, pp, tp, ep: training_time.zero3_exposed_seconds(
            cost, model, options, dp, pp, tp, 4, EXTENT, ep, 1.0), strategy),
        "recompute_stage_seconds": (lambda dp, pp, tp, ep: training_time.recompute_stage_seconds(
            cost, model, "full", dp, pp, tp, 512.0, 512.0, EXTENT, ep), strategy),
    }


BAD = [(2.5, "2.5"), (0, "0"), (-1, "-1"), (float("nan"), "nan"), (float("inf"), "inf"), (True, "True"),
       (np.float64(1.5), r"np.float64\(1.5\)"), ("2", "'2'")]


@pytest.mark.parametrize("value, shown", BAD)
def test_every_count_of_every_cost_function_is_checked(setup, value, shown):
    for function, (call, counts) in _calls(*setup).items():
        for name in counts:
            bad = {**counts, name: value}
            with pytest.raises(ValueError, match=rf"^{function}: {name} must be a positive integer, got {shown}$"):
                call(**bad)


def test_the_fractional_tp_the_hybrid_merge_took(setup):
    # tp 1.5 had priced 2/3 of the tp-1 copy (a plausible number); it names the field and the value now
    with pytest.raises(ValueError, match=r"^hybrid_merge_seconds: tp must be a positive integer, got 1.5$"):
        framework.hybrid_merge_seconds(setup[0], setup[1], 1.5, 3, 1e12)


def test_whole_counts_of_any_type_price_as_the_int(setup):
    for function, (call, counts) in _calls(*setup).items():
        expected = call(**counts)
        assert call(**{k: np.int64(v) for k, v in counts.items()}) == expected, function
        assert call(**{k: float(v) for k, v in counts.items()}) == expected, function


def test_check_counts_minimum_and_skipped_none():
    check_counts("f", 0, lora_rank=0, shard=None)
    with pytest.raises(ValueError, match=r"^f: lora_rank must be a non-negative integer, got -1$"):
        check_counts("f", 0, lora_rank=-1)
    with pytest.raises(ValueError, match=r"^f: n must be an integer >= 2, got 1$"):
        check_counts("f", 2, n=1)
    assert is_count(np.int32(3)) and is_count(3.0) and not is_count(np.True_) and not is_count(None)
    with pytest.raises(ValueError, match=r"^hybrid_lora_fuse_seconds: lora_rank must be a non-negative integer, "
                                         r"got 0.5$"):
        framework.hybrid_lora_fuse_seconds(None, None, 0.5, 1, 1, zero3=False)


@pytest.mark.parametrize("pp", [2.5, True, float("nan"), 0, "2"])
def test_stage_params_refuses_a_pp_that_is_no_count(setup, pp):
    """``memory.stage_params`` (and ``stage_layers``) had raised a bare ``TypeError`` for a fractional ``pp``
    (``[base] * pp``); a bool had been served ``pp`` 1's cached answer."""
    from packplace.placement.model.memory import stage_layers, stage_params
    model = setup[1]
    stage_params(model, 1)          # a cached ``pp`` 1 must not answer ``True``
    with pytest.raises(ValueError, match=rf"^stage_params: pp must be a positive integer, got {pp!r}$"):
        stage_params(model, pp)
    with pytest.raises(ValueError, match=rf"^stage_layers: pp must be a positive integer, got {pp!r}$"):
        stage_layers(model.layers, pp)


def test_stage_params_prices_an_integral_count_as_the_int(setup):
    from packplace.placement.model.memory import stage_params
    model = setup[1]
    assert stage_params(model, 4.0) == stage_params(model, np.int64(4)) == stage_params(model, 4)
    # OPT-6.7B's tied head: at pp 2 the last stage holds its copy of the 50,272 × 4,096 embedding
    assert sum(stage_params(model, 2)) - sum(stage_params(model, 1)) == 50272 * 4096


# -- every public CostModel method checks its counts and token amounts by parameter name (counts.guard_counts)
def _public_methods():
    """``name -> (parameters checked as counts, as amounts)`` of every public CostModel method that takes one."""
    from packplace.placement.model.cost import CostModel
    from packplace.placement.model.counts import AMOUNT_PARAMETERS, COUNT_PARAMETERS, NONNEGATIVE_COUNT_PARAMETERS

    out = {}
    for name, member in vars(CostModel).items():
        function = member.__func__ if isinstance(member, staticmethod) else member
        if name.startswith("_") or not inspect.isfunction(function):
            continue
        parameters = inspect.signature(function).parameters
        counts = [p for p in parameters if p in COUNT_PARAMETERS | NONNEGATIVE_COUNT_PARAMETERS]
        amounts = [p for p in parameters if p in AMOUNT_PARAMETERS]
        if counts or amounts:
            out[name] = (counts, amounts)
    return out


def test_the_public_methods_with_counts_are_the_ones_expected():
    methods = _public_methods()
    # the ones the model's callers use most, by hand: a method renamed or a parameter renamed away shows here
    for name, counts in {"pass_time": {"dp", "pp", "tp", "micro_batch", "ep", "lora_rank"},
                         "generate_time": {"dp", "pp", "tp", "micro_batch", "ep"},
                         "pipeline": {"pp"}, "tp_allreduce": {"tp"}, "engine_kv_budget": {"tp", "pp", "ep"},
                         "shard_ranks": {"dp"}, "update_shard": {"pp", "tp", "lora_rank"}}.items():
        assert set(methods[name][0]) == counts, name
    assert methods["pipeline"][1] == ["micro_batches", "stage_time"] and methods["recompute_time"][1] == ["tokens"]
    assert methods["allreduce"][1] == ["nbytes"] and methods["gemm_efficiency"][1] == ["rows", "inner"]
    assert methods["decode_step_times"][1] == ["running", "context_sum"]
    assert methods["compute_time"][1] == ["flops_per_token", "factor", "tokens"]
    assert len(methods) >= 50


@pytest.mark.parametrize("value, shown", [(2.5, "2.5"), (0, "0"), (-1, "-1"), (float("nan"), "nan"),
                                          (True, "True"), ("2", "'2'"), (np.float64(1.5), r"np.float64\(1.5\)")])
def test_every_public_cost_model_method_refuses_a_bad_count(setup, value, shown):
    cost = setup[0]
    for name, (counts, _) in _public_methods().items():
        for field in counts:
            if field == "lora_rank" and value == 0:
                continue   # no adapter: a count of 0 is allowed there
            kind = "a non-negative integer" if field == "lora_rank" else "a positive integer"
            with pytest.raises(ValueError, match=rf"^{name}: {field} must be {kind}, got {shown}$"):
                getattr(cost, name)(**{field: value})   # refused before the method runs (no other argument needed)


@pytest.mark.parametrize("value, shown", [(-1.0, r"-1\.0"), (float("inf"), "inf"), (float("nan"), "nan"),
                                          (True, "True"), ("8", "'8'")])
def test_every_public_cost_model_method_refuses_a_bad_token_amount(setup, value, shown):
    cost = setup[0]
    for name, (_, amounts) in _public_methods().items():
        for field in amounts:
            with pytest.raises(ValueError, match=rf"^{name}: {field} must be a finite number >= 0, got {shown}$"):
                getattr(cost, name)(**{field: value})


def test_a_fractional_tp_or_pp_no_longer_prices_a_number(setup):
    # these returned plausible numbers for a fraction of a ring or of a pipeline
    cost, model = setup
    with pytest.raises(ValueError, match=r"^tp_allreduce: tp must be a positive integer, got 1.5$"):
        cost.tp_allreduce(1e9, 1.5, EXTENT)
    with pytest.raises(ValueError, match=r"^pipeline: pp must be a positive integer, got 2.5$"):
        cost.pipeline(4, 2.5, 1.0)
    with pytest.raises(ValueError, match=r"^pass_time: micro_batch must be a positive integer, got 0$"):
        cost.pass_time(model, True, 8, 1, 1, 0, EXTENT)
    with pytest.raises(ValueError, match=r"^recompute_time: tokens must be a finite number >= 0, got -512.0$"):
        cost.recompute_time(model, 1, -512.0)


def test_whole_counts_of_any_type_price_the_public_methods_as_the_int(setup):
    cost, model = setup
    expected = cost.pass_time(model, True, 8, 1, 1, 4, EXTENT)
    assert cost.pass_time(model, True, np.int64(8), 1.0, np.int32(1), 4.0, EXTENT) == expected
    assert cost.pass_time(model, True, dp=8, pp=1, tp=1, micro_batch=4, extent=EXTENT) == expected
    assert cost.pipeline(42.5, 2, 1.0) == pytest.approx(43.5)   # micro_batches: a mean over the packing draws


def test_bytes_rows_factor_and_stage_time_are_amounts(setup):
    # each of these priced a negative or nan number of seconds, or an efficiency of 0
    cost, model = setup
    for call, message in [
            (lambda: cost.allreduce(-1e9, 8, 1),
             r"^allreduce: nbytes must be a finite number >= 0, got -1000000000\.0$"),
            (lambda: cost.allreduce(float("nan"), 8, 1), r"^allreduce: nbytes must be a finite number >= 0, got nan$"),
            (lambda: cost.p2p(-1e9, 1), r"^p2p: nbytes must be a finite number >= 0, got -1000000000\.0$"),
            (lambda: cost.gemm_efficiency(-5, 4096), r"^gemm_efficiency: rows must be a finite number >= 0, got -5$"),
            (lambda: cost.pipeline(4, 2, -1.0), r"^pipeline: stage_time must be a finite number >= 0, got -1\.0$"),
            (lambda: cost.compute_time(model, 1e9, -1.0, 1000.0, 1, 1),
             r"^compute_time: factor must be a finite number >= 0, got -1\.0$"),
            (lambda: cost.hybrid_shard_seconds(-1e9, 1e9, 8, 4, 1, EXTENT),
             r"^hybrid_shard_seconds: gather_bytes must be a finite number >= 0, got -1000000000\.0$")]:
        with pytest.raises(ValueError, match=message):
            call()
    # the good values still price: (4 + 2 - 1) stages of 1 s; a ring of 1 rank is free
    assert cost.pipeline(4, 2, 1.0) == 5.0 and cost.allreduce(1e9, 1, 0) == 0.0


def test_an_array_amount_is_checked_elementwise(setup):
    cost, model = setup
    good = cost.decode_step_times(model, 1, 1, EXTENT, 1, np.array([32.0]), np.array([32.0 * 2048]))
    assert good.shape == (1,) and good[0] > 0
    for running, shown in [([-32.0], r"-32\."), ([np.nan], "nan"), ([1.0, np.inf], "inf")]:
        with pytest.raises(ValueError,
                           match=rf"^decode_step_times: running must hold finite numbers >= 0, got .*{shown}"):
            cost.decode_step_times(model, 1, 1, EXTENT, 1, np.array(running), np.array([32.0 * 2048] * len(running)))
    with pytest.raises(ValueError, match=r"^tp_allreduce: nbytes must hold finite numbers >= 0"):
        cost.tp_allreduce(np.array([1e9, -1e9]), 2, EXTENT)
    assert cost.tp_allreduce(np.array([], dtype=float), 2, EXTENT).shape == (0,)   # an empty array passes


# a float level (1.0 too: it indexes a tuple)
@pytest.mark.parametrize("level", [-1, 3, 7, 1.5, float("nan"), True, 1.0, np.float64(1.0)])
def test_a_level_outside_0_1_2_is_refused(setup, level):
    cost = setup[0]
    with pytest.raises(ValueError, match=r"^allreduce: level must be 0, 1 or 2 \(.*\), got "):
        cost.allreduce(1e9, 8, level)
    with pytest.raises(ValueError, match=r"^p2p: level must be 0, 1 or 2"):
        cost.p2p(1e9, level)


def test_a_huge_count_is_a_value_error_not_an_overflow(setup):
    cost, model = setup
    with pytest.raises(ValueError, match=r"^pass_time: tp must be an integer <= 2\*\*53, got 1e\+300$"):
        cost.pass_time(model, True, 8, 1, 1e300, 4, EXTENT)
    with pytest.raises(ValueError, match=r"^pipeline: pp must be an integer <= 2\*\*53, got 9007199254740993$"):
        cost.pipeline(4, 2 ** 53 + 1, 1.0)
    assert cost.pipeline(0, 2 ** 53, 1.0) == 2 ** 53 - 1   # the largest count still prices


# -- the model's own calls reach the unchecked methods through CostModel's ``_NAME_unchecked`` aliases
def test_the_model_calls_its_methods_unchecked_and_outside_callers_checked(setup):
    from packplace.placement.model.cost import CostModel
    from packplace.placement.model.counts import unchecked
    cost, model = setup
    aliases = [name for name in vars(CostModel) if name.startswith("_") and name.endswith("_unchecked")]
    assert len(aliases) >= 40
    def function(member):
        return member.__func__ if isinstance(member, staticmethod) else member

    for alias in aliases:
        public = vars(CostModel)[alias[1:-len("_unchecked")]]
        raw = function(vars(CostModel)[alias])
        assert raw is function(unchecked(public)) is not function(public), alias   # the method, not its wrapper
    # the alias prices as the public method, and takes what the public one refuses (the check is the caller's)
    assert cost._pipeline_unchecked(4, 2, 1.0) == cost.pipeline(4, 2, 1.0) == 5.0   # (m + pp - 1) stages
    with pytest.raises(ValueError, match=r"^pipeline: pp must be a positive integer, got 0$"):
        cost.pipeline(4, 0, 1.0)
    assert cost._pipeline_unchecked(4, 0, 1.0) == 3.0


def test_an_alias_follows_an_override_and_a_function_set_on_the_class(setup, monkeypatch):
    from packplace.placement.model.cost import CostModel
    cost, model = setup

    class Megatron(CostModel):
        def pass_kernels(self, pp, tp, ep=1):
            return "megatron"

    megatron = Megatron(cost.hw, cost.cluster, cost.workload)
    assert megatron._pass_kernels_unchecked(1, 1) == megatron.pass_kernels(1, 1) == "megatron"
    with pytest.raises(ValueError, match=r"^pass_kernels: tp must be a positive integer, got 1.5$"):
        megatron.pass_kernels(1, 1.5)   # the override is checked as the method it replaces
    assert cost._pass_kernels_unchecked(1, 1) == cost.pass_kernels(1, 1) != "megatron"
    monkeypatch.setattr(CostModel, "pass_kernels", lambda self, pp, tp, ep=1: "patched")
    assert cost._pass_kernels_unchecked(1, 1) == "patched"
    monkeypatch.undo()
    assert cost._pass_kernels_unchecked(1, 1) == cost.pass_kernels(1, 1) != "patched"


def test_an_override_set_on_an_instance_reaches_outside_calls_only(setup):
    # documented (CostModel's docstring): the aliases follow the class, so patch the class or subclass it
    from packplace.placement.model.cost import CostModel
    cost, model = setup
    copy = CostModel(cost.hw, cost.cluster, cost.workload)
    before = copy.pass_time(model, True, 8, 1, 1, 4, EXTENT)
    copy.compute_time = lambda *args, **kwargs: 1000.0
    assert copy.compute_time(model, 1.0, 1.0, 1.0, 1, 1) == 1000.0
    assert copy.pass_time(model, True, 8, 1, 1, 4, EXTENT) == before


def test_an_alias_that_is_not_its_method_is_refused():
    from packplace.placement.model.counts import CountsGuarded

    with pytest.raises(TypeError, match=r"^Bad\._pipeline_unchecked is not the unchecked Bad\.pipeline$"):
        class Bad(metaclass=CountsGuarded):
            def pipeline(self, micro_batches, pp, stage_time):
                return 0.0

            def other(self, pp):
                return 1.0

            _pipeline_unchecked = other
