"""Fuzz both config loaders and solvers field by field (hypothesis): valid, boundary, wrong type, huge
and non-finite values. Every input ends in a result or a one-line ConfigError/InfeasibleError naming the
field (the command line's exit 0/1/2/3), never another exception (each solve within its own time limit);
an invalid value is never accepted; every answer is re-checked by a validator written here, independent of the
problems' evaluators.

The default run draws a few dozen inputs per problem; the long sweep (``-m slow``; ``FUZZ_EXAMPLES`` and
``FUZZ_SEED`` set its size and seed) prints its counts.
"""

from __future__ import annotations

import copy
import math
import os
from collections import Counter

import pytest
from conftest import BALANCE_SEARCHING, PLACEMENT_HEURISTICS
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import packplace
from packplace.balance import config as balance_config
from packplace.contract import Field
from packplace.errors import ConfigError, InfeasibleError
from packplace.placement.problem import config as placement_config
from packplace.result import optimality_level

#: Values outside every numeric contract or of a wrong type.
WRONG = [10**400, -(10**400), float("nan"), float("inf"), float("-inf"), "12", "true", [1], {"a": 1}]
COUNTS: Counter = Counter()


def value_for(field: Field, data) -> tuple[object, bool]:
    """A value for ``field`` and whether the contract admits it (decided here from its documented range)."""
    kind = data.draw(st.sampled_from(["valid", "boundary", "outside", "wrong"]))
    if field.kind == "bool":
        if kind in ("valid", "boundary"):
            return data.draw(st.booleans()), True
        return data.draw(st.sampled_from(["false", "true", 0, 1, *WRONG[:3]])), False
    if field.kind == "enum":
        if kind in ("valid", "boundary"):
            return data.draw(st.sampled_from(field.choices)), True
        return data.draw(st.sampled_from(["bogus", 1, *WRONG])), False
    low = field.minimum if field.minimum is not None else -1e6
    high = field.maximum if field.maximum is not None else 1e6
    if kind == "wrong":
        value = data.draw(st.sampled_from(WRONG + [True, False]))
        return value, False
    if kind == "outside":
        below = low - (1 if field.kind == "int" else max(abs(low) * 0.5, 1e-3)) if not field.exclusive_minimum else low
        above = high + (1 if field.kind == "int" else abs(high))
        candidates = [above] + ([below] if not (field.zero_allowed and below == 0) else [])
        if field.kind == "int":
            candidates.append(low + 0.5)  # not an integer
        if field.zero_allowed:
            candidates.append(5e-324)  # subnormal: neither 0 nor in range
        return data.draw(st.sampled_from(candidates)), False
    if kind == "boundary":
        options = [high] + ([] if field.exclusive_minimum else [low])
        return data.draw(st.sampled_from(options)), True
    if field.kind == "int":
        return data.draw(st.integers(int(math.ceil(low)), int(min(high, low + 64)))), True
    value = data.draw(st.floats(low, min(high, max(low * 4, low + 1)), allow_nan=False, allow_infinity=False,
                                exclude_min=field.exclusive_minimum))
    return value, value != 0 or field.zero_allowed or (low <= 0 and not field.exclusive_minimum)


# ---- balance --------------------------------------------------------------------------------------

BALANCE_BASE = {"seq_len": 64, "data_parallel_size": 2, "samples": {"lengths": [5, 9, 17, 30, 11, 8]},
                "cost": {"kind": "tokens"}}
BALANCE_FIELDS = ([((), n, f) for n, f in balance_config.FIELDS.items()]
                  + [(("cost",), n, f) for n, f in balance_config.COST_FIELDS.items()]
                  + [(("cost", "latency"), n, f) for n, f in balance_config.LATENCY_FIELDS.items()])


def validate_balance(instance, result) -> None:
    """Independent of the evaluator: every sample once, D·m non-empty bins, capacities, budgets, rank
    rules, and the makespan recomputed from the samples' costs."""
    assert result.solution is not None
    bins = [list(b) for b in result.solution.bins]
    ranks, per_rank = instance.data_parallel_size, instance.local_batch_size
    assert len(bins) == ranks * per_rank and all(bins)
    samples = {s.key: s for s in instance.samples}
    keys = [k for b in bins for k in b]
    assert sorted(map(repr, keys)) == sorted(map(repr, samples)) and len(set(keys)) == len(keys)
    seq_len = instance.constraints.seq_len
    for b in bins:
        tokens = sum(samples[k].tokens for k in b)
        assert tokens <= seq_len or (instance.constraints.oversized_policy == "single" and len(b) == 1)
        for name, limit in instance.constraints.budgets.items():
            assert sum(samples[k].budgets.get(name, 0) for k in b) <= limit
        if instance.max_samples_per_bin is not None:
            assert len(b) <= instance.max_samples_per_bin
    counts = [sum(len(b) for b in bins[r * per_rank:(r + 1) * per_rank]) for r in range(ranks)]
    if instance.equal_count:
        assert max(counts) - min(counts) <= 1
    if instance.objective == "makespan" and instance.padding_cost is None:
        loads = [math.fsum(samples[k].cost.llm for b in bins[r * per_rank:(r + 1) * per_rank] for k in b)
                 for r in range(ranks)]
        assert result.objective == pytest.approx(max(loads), rel=1e-9, abs=1e-12)
    assert result.bound <= result.objective * (1 + 1e-6) + 1e-9
    proven = result.objective <= optimality_level(result.bound)
    assert (result.status == "optimal") == proven


#: Structured balance fields: (label, make(config, value), values the loader must refuse, values it takes).
KEYS_BAD = [1.5, True, None, float("inf"), b"ab", [1], 2**70, "x" * 1001]
KEYS_GOOD = ["a", 7, -3, "", 2**62]


def _item_key(config, key):
    config["samples"] = {"items": [{"key": key, "tokens": 5}, {"key": "other", "tokens": 9}, {"tokens": 4}]}


def _item_tokens(config, tokens):
    config["samples"] = {"items": [{"key": "a", "tokens": tokens}, {"key": "b", "tokens": 9},
                                   {"key": "c", "tokens": 4}]}


def _item_cost(config, cost):
    config["cost"] = {"kind": "given"}
    config["samples"] = {"items": [{"key": "a", "tokens": 5, "cost": cost}, {"key": "b", "tokens": 9, "cost": 2},
                                   {"key": "c", "tokens": 4, "cost": 1}]}


def _budget(config, limit):
    config["budgets"] = {"vision": limit}
    config["samples"] = {"items": [{"key": "a", "tokens": 5, "budgets": {"vision": 3}}, {"key": "b", "tokens": 9},
                                   {"key": "c", "tokens": 4}]}


def _reference(config, bins):
    config["samples"] = {"items": [{"key": k, "tokens": 5} for k in "abcd"]}
    config["reference"] = bins


def _lengths(config, entry):
    config["samples"] = {"lengths": [5, entry, 9]}


STRUCTURED = [
    ("samples.items[0].key", _item_key, KEYS_BAD, KEYS_GOOD),
    ("samples.items[0].tokens", _item_tokens, [0, -1, 2.5, "5", True, 2**31, 10**400, float("nan")], [1, 5, 64]),
    ("samples.items[0].cost", _item_cost, [-1, float("nan"), float("inf"), 1e308, 5e-324, "3", True, 10**400],
     [0, 1e-30, 3.5, 1e30, {"llm": 2.0}]),
    ("budgets.vision", _budget, [-1, float("nan"), 1e16, "4", True], [3, 4.5, 1e15]),
    ("reference", _reference, [["a", "b", "c", "d"], [["a", "d"], "bc"], 7, [[1.5]], "sometimes"],
     ["auto", "none", [["a", "b"], ["c", "d"]]]),
    ("samples.lengths[1]", _lengths, [0, 2.5, "7", True, None, 10**400, float("inf")], [1, 7, 64]),
]


def balance_structured_case(data) -> None:
    label, make, bad, good = data.draw(st.sampled_from(STRUCTURED), label="structured field")
    valid = data.draw(st.booleans())
    value = data.draw(st.sampled_from(good if valid else bad))
    config = copy.deepcopy(BALANCE_BASE)
    make(config, value)
    try:
        instance = balance_config.build_instance(config)
    except (ConfigError, InfeasibleError) as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 600
        if not valid:
            assert label.split("[")[0].split(".")[0] in message, (label, value, message)
            COUNTS["balance: invalid refused"] += 1
        else:
            COUNTS["balance: valid refused for another reason"] += 1
        return
    assert valid, f"silently accepted {label}={value!r}"
    result = packplace.balance(instance, data.draw(st.sampled_from(BALANCE_SEARCHING)), time_limit_s=2)
    if result.ok:
        validate_balance(instance, result)
        COUNTS["balance: answers validated"] += 1
    else:
        COUNTS["balance: no answer"] += 1


def balance_case(data) -> None:
    if data.draw(st.integers(0, 3), label="structured?") == 0:
        balance_structured_case(data)
        return
    config = copy.deepcopy(BALANCE_BASE)
    path, name, field = data.draw(st.sampled_from(BALANCE_FIELDS), label="field")
    if path == ("cost", "latency"):
        config["cost"] = {"kind": "latency", "latency": {}}
    value, valid = value_for(field, data)
    section = config
    for key in path:
        section = section[key]
    section[name] = value
    label = ".".join(path + (name,))
    try:
        instance = balance_config.build_instance(config)
    except (ConfigError, InfeasibleError) as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 600
        if not valid:
            assert label in message or name in message, (label, value, message)
            COUNTS["balance: invalid refused"] += 1
        else:
            COUNTS["balance: valid refused for another reason"] += 1
        return
    assert valid, f"silently accepted {label}={value!r}"
    solver = data.draw(st.sampled_from(BALANCE_SEARCHING), label="solver")
    result = packplace.balance(instance, solver, time_limit_s=2)
    if result.ok:
        validate_balance(instance, result)
        COUNTS["balance: answers validated"] += 1
    else:
        assert result.status in ("unknown", "infeasible"), result.message
        COUNTS["balance: no answer"] += 1


# ---- placement ------------------------------------------------------------------------------------

# 40 GB: the default engine's 0.9 pool (36 GB) with the 3.47 GB it holds outside it (workspace 1.02 GB, CUDA graphs
# 2.28 GiB) fits a GPU (at 30 GB, 27 + 3.47 does not)
HARDWARE = dict(racks=1, nodes_per_rack=1, gpus_per_node=4, flops_per_gpu=1e14, memory_per_gpu=4e10,
                memory_bandwidth=2e12, **{f"{k}_{w}_{lv}": 1e-6 if k == "alpha" else 1e-10
                                          for w in ("coll", "p2p") for lv in "gnr" for k in ("alpha", "beta")})
TINY = dict(layers=2, hidden_dim=256, ffn_dim=512, vocab_size=1000, head_dim=64)
PLACEMENT_BASE = {"hardware": HARDWARE, "models": {"actor": TINY, "reward": TINY},
                  "workload": dict(batch_size=8, samples_per_prompt=2, context_length=64, generation_length=64),
                  "policy": {"algorithm": "grpo"}, "optimizer": {"k_eval": 4}}
PLACEMENT_FIELDS = ([("hardware", n, f) for n, f in {**placement_config.CLUSTER_FIELDS,
                                                     **placement_config.HARDWARE_FIELDS}.items()]
                    + [("workload", n, f) for n, f in placement_config.WORKLOAD_FIELDS.items()]
                    + [("policy", n, f) for n, f in placement_config.POLICY_FIELDS.items()]
                    + [("optimizer", n, f) for n, f in placement_config.OPTIMIZER_KNOBS.items()])


def validate_placement(instance, result) -> None:
    """Independent of the evaluator: every task placed once on a block inside the cluster whose GPU count
    is its dp·pp·tp, a positive finite step time, a bound below it, an honest status."""
    plan = result.solution
    names = sorted(v.name for v in instance.graph.vertices)
    assert sorted(name for name, _ in plan.vertices) == names
    for _, vertex in plan.vertices:
        lo, hi = vertex.allocation.gpu_range(instance.cluster)
        assert 0 <= lo < hi <= instance.cluster.num_gpus
        s = vertex.strategy
        assert s.dp * s.pp * s.tp == hi - lo and vertex.micro_batch >= 1
    assert 0 < result.objective < math.inf
    assert result.bound <= result.objective * (1 + 1e-6) + 1e-9
    proven = result.objective <= optimality_level(result.bound)
    assert (result.status == "optimal") == proven


PLACEMENT_STRUCTURED = [
    ("gen_quantiles", lambda c, v: c["workload"].update(gen_quantiles=v),
     [[[0.5, 10**400]], [[float("nan"), 3]], [[0.5, 99]], [[0.6, 10], [0.4, 12]], "x", [], [[0.5]]],
     [[[0.5, 10], [1.0, 64]], [[1.0, 1]]]),
    ("staleness_candidates", lambda c, v: c["optimizer"].update(staleness_candidates={"actor": v}),
     [[0, 10**6], [-1], [0.5], [True], [], "0", [float("nan")]], [[0], [0, 1], [0, 16]]),
    ("models.actor.layers", lambda c, v: c["models"]["actor"].update(layers=v),
     [0, -1, 2**62, 10**400, float("inf"), "2", True], [1, 2, 8]),
    ("models", lambda c, v: c["models"].update(v), [{"critic": TINY}, {"reference": TINY}, {"judge": TINY}], [{}]),
]


def placement_case(data) -> None:
    config = copy.deepcopy(PLACEMENT_BASE)
    if data.draw(st.integers(0, 3), label="structured?") == 0:
        label, make, bad, good = data.draw(st.sampled_from(PLACEMENT_STRUCTURED), label="structured field")
        valid = data.draw(st.booleans())
        make(config, copy.deepcopy(data.draw(st.sampled_from(good if valid else bad))))
        try:
            instance = placement_config.build_instance(config)
        except (ConfigError, InfeasibleError) as exc:
            message = str(exc)
            assert "\n" not in message and len(message) < 600
            assert valid or label.split(".")[-1] in message or "models" in message, (label, message)
            COUNTS["placement: invalid refused" if not valid else "placement: valid refused for another reason"] += 1
            return
        assert valid, f"silently accepted {label}={config!r:.300}"
        result = packplace.place(instance, "greedy", time_limit_s=3)
        if result.ok:
            validate_placement(instance, result)
            COUNTS["placement: answers validated"] += 1
        return
    section, name, field = data.draw(st.sampled_from(PLACEMENT_FIELDS), label="field")
    value, valid = value_for(field, data)
    if section == "hardware" and name in placement_config.CLUSTER_FIELDS and valid and not isinstance(value, bool):
        value = min(value, 8)  # keep the cluster small: the fuzz is about values, not search time
    if name == "e_max" and valid:
        value = min(value, 500)
    config[section][name] = value
    try:
        instance = placement_config.build_instance(config)
    except (ConfigError, InfeasibleError) as exc:
        message = str(exc)
        assert "\n" not in message and len(message) < 600
        if not valid:
            assert name in message, (section, name, value, message)
            COUNTS["placement: invalid refused"] += 1
        else:
            COUNTS["placement: valid refused for another reason"] += 1
        return
    assert valid, f"silently accepted [{section}] {name}={value!r}"
    solver = data.draw(st.sampled_from(PLACEMENT_HEURISTICS), label="solver")
    params = {"e_max": 300} if solver == "anneal" else {}
    try:
        result = packplace.place(instance, solver, time_limit_s=3, **params)
    except (ConfigError, InfeasibleError) as exc:  # e.g. a task that fits on no block: one line
        assert "\n" not in str(exc) and len(str(exc)) < 600
        COUNTS["placement: refused at the pre-launch check"] += 1
        return
    if result.ok:
        validate_placement(instance, result)
        COUNTS["placement: answers validated"] += 1
    else:
        assert result.status == "unknown" and "no feasible plan found" in result.message
        COUNTS["placement: no plan found"] += 1


SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)


@settings(max_examples=60, **SETTINGS)
@given(st.data())
def test_fuzz_balance_fields(data):
    balance_case(data)


@settings(max_examples=30, **SETTINGS)
@given(st.data())
def test_fuzz_placement_fields(data):
    placement_case(data)


SWEEP = int(os.environ.get("FUZZ_EXAMPLES", "5000"))
SWEEP_SEED = int(os.environ.get("FUZZ_SEED", "20261201"))


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["balance", "placement"])
def test_fuzz_long_sweep(problem):
    case = balance_case if problem == "balance" else placement_case

    @seed(SWEEP_SEED)
    @settings(max_examples=SWEEP, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def run(data):
        COUNTS[f"{problem}: inputs"] += 1
        case(data)

    run()
    print(f"\nfuzz sweep seed {SWEEP_SEED}, {problem}:", dict(sorted((k, v) for k, v in COUNTS.items()
                                                                   if k.startswith(problem))))
