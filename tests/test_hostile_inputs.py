"""Library callbacks and JSON readers: a bad ``padding_cost`` is one ConfigError at construction naming
the expected return; ``SolveResult.from_json`` and the bench baseline reader raise ConfigError only,
whatever the document (wrong types, deep nesting, huge numbers)."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packplace.balance import make_instance
from packplace.balance.api import solve_balance
from packplace.balance.samples import WorkloadCost
from packplace.balance.workload import CheckedPaddingCost
from packplace.errors import ConfigError
from packplace.harness import bench
from packplace.result import SolveResult

ROOT = Path(__file__).resolve().parents[1]
BASELINE = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())


def instance(padding):
    return make_instance([5, 6, 7, 9], data_parallel_size=2, seq_len=20, padding_cost=padding)


def linear_padding(pad: int) -> WorkloadCost:
    return WorkloadCost(llm=2.0 * pad)


@pytest.mark.parametrize(("callback", "fragment"), [
    (lambda pad: 1.0, "returned float 1.0; expected a WorkloadCost"),
    (lambda pad: math.nan, "returned float nan; expected a WorkloadCost"),
    (lambda pad: "x", "returned str 'x'; expected a WorkloadCost"),
    (lambda pad: None, "returned NoneType None; expected a WorkloadCost"),
    (lambda pad: 1 / 0, "raised ZeroDivisionError: division by zero"),
    (lambda pad: WorkloadCost(llm=-1.0), "cost.llm"),
    (lambda: WorkloadCost(), "raised TypeError"),
    (42, "must be callable"),
])
def test_a_bad_padding_cost_is_one_line_at_construction(callback, fragment):
    with pytest.raises(ConfigError, match="padding_cost: ") as caught:
        instance(callback)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_a_padding_cost_failing_later_is_a_config_error_naming_it():
    def flaky(pad: int) -> WorkloadCost:
        if pad == 7:
            raise RuntimeError("no table entry")
        return WorkloadCost(llm=float(pad))

    built = instance(flaky)  # the probes (0, 1, seq_len) pass
    with pytest.raises(ConfigError, match=r"padding_cost: .*flaky\(7\) raised RuntimeError: no table entry"):
        built.padding_cost(7)


@pytest.mark.parametrize("solver", ["lpt", "repair", "karmarkar_karp"])
def test_a_good_padding_cost_still_solves(solver):
    result = solve_balance(instance(linear_padding), solver)
    assert result.status in ("optimal", "feasible") and result.objective > 0
    assert isinstance(result_padding := instance(linear_padding).padding_cost, CheckedPaddingCost)
    assert pickle.loads(pickle.dumps(result_padding))(3) == WorkloadCost(llm=6.0)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


def good_result() -> dict:
    result = solve_balance(instance(None), "lpt")
    return json.loads(result.to_json())


GOOD_RESULT = good_result()


def mutated(document: dict, path: list, value):
    out = json.loads(json.dumps(document))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def paths(document, prefix=()):
    yield list(prefix)
    if isinstance(document, dict):
        for key, value in document.items():
            yield from paths(value, (*prefix, key))
    elif isinstance(document, list):
        for k, value in enumerate(document[:3]):
            yield from paths(value, (*prefix, k))


RESULT_PATHS = [p for p in paths(GOOD_RESULT) if p]
BASELINE_PATHS = [p for p in paths(BASELINE) if p][:400]


def only_config_errors(call) -> None:
    try:
        call()
    except ConfigError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(RESULT_PATHS), json_values)
def test_from_json_raises_config_error_only_on_mutated_documents(path, value):
    text = json.dumps(mutated(GOOD_RESULT, path, value))
    only_config_errors(lambda: SolveResult.from_json(text))


@settings(max_examples=80, deadline=None)
@given(json_values)
def test_from_json_raises_config_error_only_on_any_value(value):
    only_config_errors(lambda: SolveResult.from_json(json.dumps(value)))


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000,
                                  "1" * 5000, '{"problem": "balance", "objective": ' + "9" * 5000 + "}",
                                  b"\xff\xfe", "", "NaN"])
def test_from_json_deep_nesting_and_huge_numbers(text):
    only_config_errors(lambda: SolveResult.from_json(text))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.sampled_from(BASELINE_PATHS), json_values)
def test_the_baseline_reader_raises_config_error_only(tmp_path, path, value):
    document = mutated(BASELINE, path, value)
    target = tmp_path / "baseline.json"
    target.write_text(json.dumps(document))

    def read_and_check() -> None:
        stored = bench.load_baseline(target)
        bench.check_against(stored, {}, 1.0)
        stored.get("versions", {}).items()

    only_config_errors(read_and_check)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"format": 1, "results": {"a": {"b": {"objective": '
                                  + "9" * 400 + "}}}}", '{"format": 1, "results": {"a": {"b": {"objective": '
                                  + "9" * 5000 + "}}}}"])
def test_the_baseline_reader_deep_nesting_and_huge_numbers(tmp_path, text):
    target = tmp_path / "baseline.json"
    target.write_text(text)
    with pytest.raises(ConfigError, match="baseline: "):
        bench.load_baseline(target)
