"""numpy scalars where the placement config loader and ``estimate()`` take Python numbers: a numpy integer
is the int (as a plan read from a mapping takes it), a numpy float the float, a numpy boolean the bool where
a boolean is asked; booleans (``np.True_`` too) where a number is asked, and fractions, stay refused, naming
the field and the value."""

from __future__ import annotations

import copy
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import packplace
from packplace.contract import Field, plain_bool, plain_number
from packplace.errors import ConfigError
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.task_estimate import estimate

DPO = "configs/placement/dpo_llama3.1-8b_1x8xh100.yaml"


def numpy_ints(value, kind=np.int64):
    """``value`` with every int (not bool) made a numpy scalar of ``kind``."""
    if isinstance(value, dict):
        return {k: numpy_ints(v, kind) for k, v in value.items()}
    if isinstance(value, list):
        return [numpy_ints(v, kind) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return kind(value)
    return value


def test_plain_number():
    assert [plain_number(v) for v in (np.int64(3), np.uint8(4), np.int32(-2))] == [3, 4, -2]
    assert all(type(plain_number(v)) is int for v in (np.int64(3), np.uint8(4)))
    assert plain_number(np.float32(0.5)) == 0.5 and type(plain_number(np.float32(0.5))) is float
    assert type(plain_number(np.float64(2.0))) is float
    for kept in (True, np.True_, "3", None, [1], Fraction(2), Fraction(10**400), Decimal("2.5"), 10**400):
        assert plain_number(kept) is kept   # only numpy's numbers are converted


def test_plain_bool():
    assert plain_bool(np.True_) is True and plain_bool(np.False_) is False
    for kept in (True, 1, np.int64(1), "true", None):
        assert plain_bool(kept) is kept


def test_field_check_takes_numpy_numbers():
    assert Field("int", minimum=1).check(np.int64(8), "f") == 8
    assert Field("int", minimum=1).check(np.float32(8.0), "f") == 8   # an integral float, as YAML's 8.0
    assert Field("float", minimum=0).check(np.float32(0.5), "f") == 0.5
    assert Field("enum", choices=(1, 2)).check(np.int64(2), "f") == 2
    with pytest.raises(ConfigError, match=r"^f: must be an integer in \[1, inf\), got 2\.5$"):
        Field("int", minimum=1).check(np.float32(2.5), "f")
    for flag in (np.True_, True):
        with pytest.raises(ConfigError, match="^f: must be an integer"):
            Field("int", minimum=1).check(flag, "f")
    assert Field("bool").check(np.True_, "f") is True and Field("bool").check(np.False_, "f") is False
    for number in (np.int64(1), 1):
        with pytest.raises(ConfigError, match=r"^f: must be true or false, got (1|np\.int64\(1\))$"):
            Field("bool").check(number, "f")


@pytest.mark.parametrize("kind", ["int", "float"])
def test_field_check_refuses_fractions_in_one_line(kind):
    for value, shown in ((Fraction(2), r"Fraction\(2, 1\)"), (Fraction(10**400), r"Fraction\(1000.*, 1\)")):
        with pytest.raises(ConfigError, match=rf"^f: must be (an integer|a finite number) in \[1, inf\), got {shown}$"):
            Field(kind, minimum=1).check(value, "f")


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint32])
def test_config_with_numpy_integers_is_the_same_instance(kind):
    config = load_yaml(DPO)
    plain = packplace.place(build_instance(config, source=DPO), "greedy")
    numpy = packplace.place(build_instance(numpy_ints(copy.deepcopy(config), kind), source=DPO), "greedy")
    assert numpy.objective == plain.objective and numpy.solution == plain.solution


def test_config_refuses_numpy_bool_and_fraction_naming_the_field():
    config = load_yaml(DPO)
    config["hardware"]["nodes_per_rack"] = np.True_
    with pytest.raises(ConfigError, match=r"nodes_per_rack: must be an integer in \[1, 4096\], got np\.True_"):
        build_instance(config, source=DPO)
    config["hardware"]["nodes_per_rack"] = np.float64(1.5)
    with pytest.raises(ConfigError, match=r"nodes_per_rack: must be an integer in \[1, 4096\], got 1\.5"):
        build_instance(config, source=DPO)
    for fraction in (Fraction(2), Fraction(10**400)):   # not converted: a one-line error, no OverflowError
        config["hardware"]["nodes_per_rack"] = fraction
        with pytest.raises(ConfigError, match=r"nodes_per_rack: must be an integer in \[1, 4096\], got Fraction\("):
            build_instance(config, source=DPO)
    config["hardware"]["nodes_per_rack"] = 1
    config["models"]["actor"]["layers"] = np.int64(-1)
    with pytest.raises(ConfigError, match=r"layers: must be an integer in \[1, .*\], got -1"):
        build_instance(config, source=DPO)


@pytest.mark.parametrize(("task", "kwargs"), [
    ("train", dict(micro_batch=2, seq_len=1024, tp=2, pp=1, dp=2, ep=1, cp=1, micro_batches=2)),
    ("decode", dict(batch=4, context=1024, tp=2)),
    ("generate", dict(batch=4, seq_len=256, context=1024)),
    ("infer", dict(micro_batch=1, seq_len=1024, train_mb_tokens=2048, pack_tokens=4096, framework="nemo-rl",
                   framework_version="0.6")),
])
def test_estimate_takes_numpy_integers(task, kwargs):
    plain = estimate("llama3.1-8b", "h100-sxm", task, **kwargs)
    numpy = estimate("llama3.1-8b", "h100-sxm", task, **numpy_ints(kwargs))
    assert numpy == plain and numpy.time_s > 0
    assert all(type(plain.inputs[k]) is type(numpy.inputs[k]) for k in kwargs)   # no numpy scalar kept


def test_estimate_hardware_overrides_take_numpy_integers():
    plain = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=1024, tp=2, hardware={"gpus_per_node": 4})
    numpy = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=1024, tp=np.int64(2),
                     hardware={"gpus_per_node": np.int64(4)})
    assert numpy == plain


def test_estimate_refuses_numpy_bool_and_float():
    with pytest.raises(ConfigError, match=r"^tp: must be an integer >= 1, got np\.True_$"):
        estimate("llama3.1-8b", "h100-sxm", "train", tp=np.True_)
    with pytest.raises(ConfigError, match=r"^tp: must be an integer >= 1, got 2\.0$"):
        estimate("llama3.1-8b", "h100-sxm", "train", tp=np.float64(2.0))   # as a Python 2.0 is refused


def test_estimate_refuses_fractions_in_one_line():
    for fraction in (Fraction(2), Fraction(10**400)):
        with pytest.raises(ConfigError, match=r"^micro_batch: must be an integer >= 1, got Fraction\("):
            estimate("llama3.1-8b", "h100-sxm", "train", micro_batch=fraction)


def test_estimate_refuses_a_count_past_exact_floats_in_one_line():
    for huge in (10**400, 2**53 + 1, np.uint64(2**63)):   # had raised OverflowError deep in the model
        with pytest.raises(ConfigError, match=r"^micro_batch: must be an integer <= 2\*\*53 \(9007199254740992\), "):
            estimate("llama3.1-8b", "h100-sxm", "train", micro_batch=huge)


def test_estimate_takes_numpy_booleans_where_booleans_are_asked():
    plain = estimate("llama3.1-8b", "h100-sxm", "decode", batch=4, context=1024, enforce_eager=True)
    numpy = estimate("llama3.1-8b", "h100-sxm", "decode", batch=4, context=1024, enforce_eager=np.True_)
    assert numpy == plain and type(numpy.inputs["enforce_eager"]) is bool and numpy.inputs["enforce_eager"] is True
    assert numpy.time_s > estimate("llama3.1-8b", "h100-sxm", "decode", batch=4, context=1024,
                                   enforce_eager=np.False_).time_s   # eager decode: no CUDA graphs, slower
    with pytest.raises(ConfigError, match=r"^enforce_eager: must be true or false, got (1|np\.int64\(1\))$"):
        estimate("llama3.1-8b", "h100-sxm", "decode", enforce_eager=np.int64(1))


PPO = "configs/placement/ppo_llama3.1-70b_2x4x8xh200.yaml"


def test_config_numpy_booleans_and_fractions_in_policy():
    config = load_yaml(PPO)
    config["policy"]["enforce_eager"] = True
    plain = build_instance(copy.deepcopy(config), source=PPO)
    config["policy"]["enforce_eager"] = np.True_
    numpy = build_instance(copy.deepcopy(config), source=PPO)
    assert packplace.place(numpy, "greedy").objective == packplace.place(plain, "greedy").objective
    config["policy"]["enforce_eager"] = np.int64(1)
    with pytest.raises(ConfigError, match=r"enforce_eager: must be true or false, got (1|np\.int64\(1\))"):
        build_instance(copy.deepcopy(config), source=PPO)
    config["policy"]["enforce_eager"] = True
    for bad, shown in ((Fraction(10**400), r"Fraction\("), (np.True_, r"np\.True_")):
        config["policy"]["gpu_memory_utilization"] = bad
        with pytest.raises(ConfigError, match=rf"gpu_memory_utilization: must be .*, got {shown}"):
            build_instance(copy.deepcopy(config), source=PPO)


def test_validation_setup_mapping_takes_numpy_integers_and_names_what_yaml_cannot_hold():
    from packplace.placement.checking.validate import setup_detail
    path = "benchmarks/validation/deepspeed_chat_ppo_opt-13b_8xa100.yaml"
    config = load_yaml(path)
    plain = setup_detail(config)
    # the mapping is written as YAML for the file reader: numpy's numbers had raised yaml's RepresenterError
    assert setup_detail(numpy_ints(copy.deepcopy(config)))["step_time_s"] == plain["step_time_s"] > 0
    config["workload"]["batch_size"] = {1, 2}
    with pytest.raises(ConfigError, match=r"^validation setup\.workload\.batch_size: .* is no YAML value"):
        setup_detail(config)


def test_hf_config_takes_numpy_booleans():
    from packplace.shape import from_hf_config
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
    numpy = from_hf_config(dict(cfg, tie_word_embeddings=np.True_))
    assert numpy == from_hf_config(dict(cfg, tie_word_embeddings=True)) and type(numpy.tie_word_embeddings) is bool
    assert numpy != from_hf_config(dict(cfg, tie_word_embeddings=np.False_))   # tied: one embedding matrix fewer
    with pytest.raises(ConfigError, match=r"tie_word_embeddings: must be true or false"):
        from_hf_config(dict(cfg, tie_word_embeddings=np.int64(1)))
