"""Range contracts of both config loaders: every field refuses wrong types, non-finite and huge values
with one line naming it; sizes are refused up front; structured fields reject unknown keys."""

from __future__ import annotations

import copy
import datetime

import pytest
from conftest import counting_calls

from packplace.balance import config as balance_config
from packplace.contract import REQUIRED, Field
from packplace.errors import ConfigError
from packplace.placement.checking import validate as placement_validate
from packplace.placement.problem import config as placement_config
from packplace.yamlio import loads_yaml

BALANCE = {"seq_len": 10, "data_parallel_size": 2, "samples": {"lengths": [3, 4, 5]}}
HARDWARE = dict(racks=1, nodes_per_rack=1, gpus_per_node=4, flops_per_gpu=1e12, memory_per_gpu=80e9,
                memory_bandwidth=2e12, **{f"{k}_{w}_{lv}": 1e-6 if k == "alpha" else 1e-10
                                          for w in ("coll", "p2p") for lv in "gnr" for k in ("alpha", "beta")})
MODEL = dict(layers=2, hidden_dim=256, ffn_dim=512, vocab_size=1000)
PLACEMENT = {"hardware": HARDWARE, "models": {"actor": MODEL, "critic": MODEL, "reward": MODEL},
             "workload": dict(batch_size=8, samples_per_prompt=2, context_length=16, generation_length=16),
             "policy": {"algorithm": "ppo"}, "optimizer": {}}
#: Values no numeric field accepts: beyond float range, non-finite, wrong types.
BAD_VALUES = [10**400, -(10**400), float("nan"), float("inf"), float("-inf"), "12", True, [1], {"a": 1}]


def bad_values(field: Field) -> list:
    """:data:`BAD_VALUES` minus the ones ``field`` accepts (``True`` for a boolean)."""
    return [v for v in BAD_VALUES if not (field.kind == "bool" and isinstance(v, bool))]


def balance_error(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        balance_config.build_instance(config)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400
    return message


def placement_error(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        placement_config.build_instance(config)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400
    return message


def balance_cases():
    """(path into the config, field name, bad value) over every scalar field of the balance tables."""
    tables = [((), balance_config.FIELDS), (("cost",), balance_config.COST_FIELDS),
              (("cost", "latency"), balance_config.LATENCY_FIELDS),
              (("samples", "corpus"), balance_config.CORPUS_FIELDS)]
    return [pytest.param(path, name, value, id=f"{'.'.join(path + (name,))}={value!r:.20}")
            for path, table in tables for name, field in table.items() for value in bad_values(field)]


def balance_with(path: tuple[str, ...], name: str, value) -> dict:
    config = copy.deepcopy(BALANCE)
    if path[:1] == ("cost",):
        kind = {"model": "flops", "latency": "latency"}.get(path[1] if len(path) > 1 else "", "flops")
        config["cost"] = {"kind": kind, "model": dict(MODEL)} if kind == "flops" else {"kind": kind, "latency": {}}
    if path == ("samples", "corpus"):
        config["samples"] = {"corpus": {}}
    section = config
    for key in path:
        section = section[key]
    section[name] = value
    return config


@pytest.mark.parametrize("path, name, value", balance_cases())
def test_every_balance_field_refuses_bad_values(path, name, value):
    label = ".".join(path + (name,))
    assert label in balance_error(balance_with(path, name, value))


def placement_cases():
    """(section, field name, bad value) over every field of the placement tables."""
    tables = [("hardware", {**placement_config.CLUSTER_FIELDS, **placement_config.HARDWARE_FIELDS}),
              ("workload", placement_config.WORKLOAD_FIELDS),
              ("policy", placement_config.POLICY_FIELDS), ("optimizer", placement_config.OPTIMIZER_KNOBS)]
    return [pytest.param(section, name, value, id=f"{section}.{name}={value!r:.20}")
            for section, table in tables for name, field in table.items() for value in bad_values(field)]


@pytest.mark.parametrize("section, name, value", placement_cases())
def test_every_placement_field_refuses_bad_values(section, name, value):
    config = copy.deepcopy(PLACEMENT)
    target = config
    for key in section.split("."):
        target = target[key]
    target[name] = value
    message = placement_error(config)
    assert message.startswith(f"[{section}] {name}:")


def test_field_bounds_are_inclusive_and_defaults_documented():
    spec = Field("int", "tokens", 1, 10)
    assert spec.check(1, "x") == 1 and spec.check(10.0, "x") == 10
    for bad in (0, 11, 2.5):
        with pytest.raises(ConfigError, match=r"^x: must be an integer in \[1, 10\], got "):
            spec.check(bad, "x")
    cost = Field("float", "", 1e-30, 1e30, zero_allowed=True)
    assert cost.check(0, "c") == 0 and cost.check(1e-30, "c") == 1e-30
    with pytest.raises(ConfigError, match=r"must be 0 or a finite number in \[1e-30, 1e30\], got 5e-324"):
        cost.check(5e-324, "c")
    text = Field("str")
    assert text.check("NeMo RL", "s") == "NeMo RL" and text.describe() == "a non-empty string"
    for bad in ("", "  ", 3, None, ["a"]):
        with pytest.raises(ConfigError, match=r"^s: must be a non-empty string, got "):
            text.check(bad, "s")
    for table in (balance_config.FIELDS, placement_config.HARDWARE_FIELDS, placement_config.OPTIMIZER_KNOBS,
                  placement_validate.VALIDATION_FIELDS, placement_validate.PLAN_TASK_FIELDS,
                  placement_validate.PAIR_FIELDS):
        for name, field in table.items():
            assert field.meaning, name
            if field.default not in (REQUIRED, None):
                assert field.check(field.default, name) == field.default


# ---- balance reproducers --------------------------------------------------------------------------

def test_padding_must_be_a_real_boolean():
    config = {**BALANCE, "cost": {"kind": "flops", "model": MODEL, "padding": "false"}}
    assert balance_error(config) == "cost.padding: must be true or false, got 'false'"


def test_unknown_fields_in_items_and_cost_are_refused():
    config = {**BALANCE, "samples": {"items": [{"key": "a", "tokens": 3, "weight": 2}]}}
    assert balance_error(config).startswith("samples.items[0].weight: unknown field")
    config = {**BALANCE, "cost": {"kind": "tokens", "speed": 1}}
    assert balance_error(config).startswith("cost.speed: unknown field")
    config = {**BALANCE, "cost": {"kind": "latency", "latency": {"a": 0, "d": 1}}}
    assert balance_error(config).startswith("cost.latency.d: unknown field")
    config = {**BALANCE, "cost": {"kind": "latency", "latency": {1: 0.5}}}
    assert balance_error(config).startswith("cost.latency.1: unknown field")
    config = {**BALANCE, "cost": {"kind": "tokens", "model": MODEL}}
    assert balance_error(config) == "cost.model: only used with kind flops, but kind is 'tokens'"


def test_reference_bins_must_be_lists_of_keys():
    items = {"items": [{"key": k, "tokens": 3} for k in "abcd"]}
    config = {**BALANCE, "samples": items, "reference": [["a", "d"], "bc"]}
    assert balance_error(config).startswith("reference[1]: must be a list of sample keys")
    config = {**BALANCE, "samples": items, "reference": ["a", "b", "c", "d"]}
    assert balance_error(config).startswith("reference[0]: must be a list of sample keys")


@pytest.mark.parametrize("key", [float("inf"), 1.5, True, datetime.date(2024, 1, 1), b"ab", None, 2**70, "x" * 2000])
def test_sample_keys_of_undocumented_types_are_refused(key):
    config = {**BALANCE, "samples": {"items": [{"key": key, "tokens": 3}, {"key": "b", "tokens": 4}]}}
    assert balance_error(config).startswith("samples.items[0].key: a sample key must be a string or an integer")


def test_yaml_keys_dates_and_inf_are_refused():
    text = "seq_len: 10\ndata_parallel_size: 2\nsamples:\n  items:\n    - {key: 2024-01-01, tokens: 3}\n"
    assert balance_error(loads_yaml(text)).startswith("samples.items[0].key:")
    text = text.replace("2024-01-01", ".inf")
    assert balance_error(loads_yaml(text)).startswith("samples.items[0].key:")


def test_an_items_cost_under_a_cost_model_is_refused_not_mixed_with_the_models_units():
    items = [{"key": 0, "tokens": 3, "cost": 1000}, {"key": 1, "tokens": 4}]
    for cost, unit in (({"kind": "latency", "latency": {"b": 1.0}}, "'latency' (costs in s)"),
                       (None, "'tokens' (costs in tokens)")):
        config = {**BALANCE, "samples": {"items": items}}
        if cost is not None:
            config["cost"] = cost
        assert balance_error(config) == (f"samples.items[0].cost: read only with cost.kind 'given', but cost.kind "
                                         f"is {unit}; set cost.kind: given to use the items' costs, or remove them")


def test_a_flops_only_cost_field_under_another_kind_is_refused():
    for kind in ("tokens", "given"):
        config = {**BALANCE, "cost": {"kind": kind, "mode": "inference"}}
        assert balance_error(config) == f"cost.mode: only used with kind flops, but kind is {kind!r}"


def test_costs_that_would_overflow_sums_or_scaling_are_refused():
    items = [{"key": i, "tokens": 3, "cost": 1e308} for i in range(3)]
    config = {**BALANCE, "cost": {"kind": "given"}, "samples": {"items": items}}
    assert balance_error(config).startswith("samples.items[0].cost: must be 0 or a finite number in [1e-30, 1e30]")
    items[0]["cost"] = 5e-324
    items[1]["cost"] = items[2]["cost"] = 1.0
    assert "got 5e-324" in balance_error(config)


def test_corpus_bytes_per_token_and_seed_are_bounded_and_refused_before_any_work():
    # building even a valid corpus makes over 500,000 calls; a refusal comes before any of it
    with counting_calls() as work:
        config = {**BALANCE, "samples": {"corpus": {"bytes_per_token": 1e-300}}}
        assert balance_error(config).startswith("samples.corpus.bytes_per_token: must be a finite number in [1, 64]")
        config = {**BALANCE, "samples": {"corpus": {"seed": -1}}}
        assert balance_error(config).startswith("samples.corpus.seed: must be an integer in [0, ")
        config = {**BALANCE, "samples": {"corpus": {"seed": "x"}}}
        assert balance_error(config).startswith("samples.corpus.seed:")
    assert work.calls < 10_000, work.calls


def test_sizes_are_refused_up_front_with_the_estimate():
    config = {**BALANCE, "data_parallel_size": 2**20, "local_batch_size": 2**10}
    assert balance_error(config) == ("local_batch_size: 1,073,741,824 bins (data_parallel_size 1048576 x "
                                     "local_batch_size 1024); the limit is 10,000,000")
    config = {**BALANCE, "seq_len": 1, "samples": {"corpus": {}}}
    assert "documents after splitting at seq_len 1; the limit is 1,000,000" in balance_error(config)


# ---- placement reproducers ------------------------------------------------------------------------

def test_a_cluster_of_2_62_nodes_is_refused_at_once():
    config = copy.deepcopy(PLACEMENT)
    config["hardware"].update(racks=2**31, nodes_per_rack=2**31)
    with counting_calls() as work:  # refused before anything per node or GPU is built
        assert placement_error(config).startswith("[hardware] racks: must be an integer in [1, 4096]")
        config["hardware"].update(racks=4096, nodes_per_rack=4096, gpus_per_node=8)
        assert placement_error(config) == ("[hardware] racks: 134,217,728 GPUs (racks 4096 x nodes_per_rack 4096 x "
                                           "gpus_per_node 8); the limit is 65,536")
    assert work.calls < 10_000, work.calls


def test_staleness_candidates_are_bounded():
    config = copy.deepcopy(PLACEMENT)
    config["optimizer"]["staleness_candidates"] = {"actor": [0, 1000000]}
    assert placement_error(config) == ("[optimizer.staleness_candidates] actor: must be an integer in "
                                       f"[0, {placement_config.MAX_STALENESS}], got 1000000")


def test_a_dpo_config_with_a_critic_is_refused():
    config = copy.deepcopy(PLACEMENT)
    config["policy"]["algorithm"] = "dpo"
    del config["models"]["reward"]
    assert placement_error(config) == "[models] critic: dpo has no critic model; remove it (dpo needs: actor)"


def test_merge_keys_share_a_model_shape():
    text = """
hardware: {racks: 1, nodes_per_rack: 1, gpus_per_node: 4, flops_per_gpu: 1e12, memory_per_gpu: 8e10,
           memory_bandwidth: 2e12, alpha_coll_g: 0, beta_coll_g: 0, alpha_coll_n: 0, beta_coll_n: 0,
           alpha_coll_r: 0, beta_coll_r: 0, alpha_p2p_g: 0, beta_p2p_g: 0, alpha_p2p_n: 0, beta_p2p_n: 0,
           alpha_p2p_r: 0, beta_p2p_r: 0}
models:
  actor: &shape {layers: 2, hidden_dim: 256, ffn_dim: 512, vocab_size: 1000}
  reward: {<<: *shape, layers: 1}
workload: {batch_size: 8, samples_per_prompt: 2, context_length: 16, generation_length: 16}
policy: {algorithm: grpo}
"""
    instance = placement_config.build_instance(loads_yaml(text))
    assert instance.models["reward"].layers == 1 and instance.models["reward"].hidden_dim == 256


def test_gen_quantiles_with_huge_numbers_are_errors():
    config = copy.deepcopy(PLACEMENT)
    config["workload"]["gen_quantiles"] = [[0.5, 10**400]]
    assert placement_error(config).startswith("[workload] gen_quantiles: tokens")
    config["workload"]["gen_quantiles"] = [[float("nan"), 3]]
    assert placement_error(config).startswith("[workload] gen_quantiles: quantile")


def _config_reference_script():
    """docs/generate_config_reference.py, loaded as a module (docs/ is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "generate_config_reference.py"
    spec = importlib.util.spec_from_file_location("generate_config_reference", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_reference_page_is_the_generated_one():
    script = _config_reference_script()
    page = script.PAGE.read_text(encoding="utf-8")
    assert page == script.config_reference(), "rerun python docs/generate_config_reference.py"
    assert "| `seq_len` | an integer in [1, 2,147,483,647] | tokens | required | tokens per bin (pack) |" in page
    assert "| `e_max` | an integer in [1, 1,000,000,000] | plans | 50000 |" in page


def test_config_reference_lists_every_contract_table():
    tables = _config_reference_script().tables()
    listed_fields = {id(spec) for _, fields, _ in tables for spec in fields.values()}
    for module in (balance_config, placement_config, placement_validate):
        for name, value in vars(module).items():
            if isinstance(value, dict) and value and all(isinstance(v, Field) for v in value.values()):
                assert all(id(spec) in listed_fields for spec in value.values()), \
                    f"{module.__name__}.{name} is missing from docs/config-reference.md"


def test_every_hardware_field_has_a_contract():
    from packplace.placement.problem.hardware import CLUSTER_DEFAULTS, HARDWARE_DEFAULTS, HARDWARE_REQUIRED
    contracted = set(placement_config.CLUSTER_FIELDS) | set(placement_config.HARDWARE_FIELDS)
    assert contracted == set(HARDWARE_REQUIRED) | set(HARDWARE_DEFAULTS) | set(CLUSTER_DEFAULTS)
    for name, default in CLUSTER_DEFAULTS.items():
        assert placement_config.CLUSTER_FIELDS[name].default == default
    for name, default in HARDWARE_DEFAULTS.items():
        assert placement_config.HARDWARE_FIELDS[name].default == default


def test_a_preset_is_checked_like_written_fields():
    config = copy.deepcopy(PLACEMENT)
    config["hardware"] = {"preset": "h100", "gpus_per_node": 4, "decode_bw_eff": 2.0}
    assert placement_error(config).startswith("[hardware] decode_bw_eff: must be a finite number in [0.001, 1]")
    config["hardware"] = {"preset": "h100", "gpus_per_node": 4}
    assert placement_config.build_instance(config).num_gpus == 4


@pytest.mark.parametrize("name", ["layers", "hidden_dim", "ffn_dim", "vocab_size", "head_dim", "num_kv_heads"])
@pytest.mark.parametrize("value", [2**62, 10**400, float("inf"), float("nan"), "8", True, -1], ids=repr)
def test_model_shape_fields_are_bounded_in_both_problems(name, value):
    model = {**MODEL, name: value}
    assert f"cost.model.{name}:" in balance_error({**BALANCE, "cost": {"kind": "flops", "model": model}})
    config = copy.deepcopy(PLACEMENT)
    config["models"]["actor"] = model
    assert placement_error(config).startswith(f"[models.actor] {name}:")
