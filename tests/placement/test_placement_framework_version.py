"""A framework release (``policy.framework_version``) and the vLLM engine's host time per running sequence:
release parsing, each framework's defaults by release, the config errors, and a decode iteration's time
computed by hand at a given running count."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle

import numpy as np
import pytest

from packplace.errors import ConfigError
from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.framework import (
    FRAMEWORK_VERSIONS,
    FRAMEWORKS,
    VLLM_DECODE_STEP_OVERHEAD,
    VLLM_HOST_SECONDS_PER_SEQUENCE,
    Release,
    colocate_all_gpu_memory_utilization,
    default_gpu_memory_utilization,
    engine_takes_model_context,
    engine_vllm_release,
    host_seconds_per_sequence,
    parse_version,
    version_defaults,
)
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.problem.hardware import PRESETS, Cluster, Hardware
from packplace.placement.problem.models import ModelSpec
from packplace.placement.problem.workload import Workload

VALIDATION = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation")
OPENRLHF_13B = os.path.join(VALIDATION, "openrlhf_ppo_llama2-13b_32xa800.yaml")
NEMO_V05 = os.path.join(VALIDATION, "nemo_rl_v0.5_grpo_qwen3-32b_8x8xh100_1off.yaml")


def _config(path: str) -> dict:
    cfg = copy.deepcopy(load_yaml(path))
    cfg.pop("validation")
    return cfg


def test_v0_host_time_per_sequence_is_the_issue_thread_figure_less_the_fixed_part():
    # 20 ms between steps at 200 running sequences (vLLM 0.5.x), less the 1.4 ms every iteration pays
    assert VLLM_HOST_SECONDS_PER_SEQUENCE["v0"] == pytest.approx((20e-3 - 1.4e-3) / 200) == pytest.approx(93e-6)
    # V1: the iteration time asynchronous scheduling saves a synchronous in-process engine (vllm pull request
    # 23914, output tokens/s sync / async 3,048 / 3,177 at 128 sequences, 4,039 / 4,258 at 256): a(1/s - 1/a)
    # = 128 * 129 / (3048 * 3177) = 1.705 ms and 256 * 219 / (4039 * 4258) = 3.260 ms per iteration, slope
    # through the origin (128 * 1.705 + 256 * 3.260) / (128^2 + 256^2) ms = 12.85 us per running sequence
    v1 = VLLM_HOST_SECONDS_PER_SEQUENCE["v1"]
    assert v1 == pytest.approx((128 * 128 * 129 / (3048 * 3177) + 256 * 256 * 219 / (4039 * 4258))
                               / (128 ** 2 + 256 ** 2), rel=1e-12)
    assert v1 == pytest.approx(12.85e-6, abs=0.005e-6)
    # it holds the update_from_output loop timed alone (vllm pull request 46112: 0.145 ms per 128 requests)
    assert v1 > 0.145e-3 / 128
    assert host_seconds_per_sequence("v1") == v1


def test_v1_host_time_lands_on_the_held_out_rows():
    # the 32 and 64 sequence rows of the same table, not fitted: 1,014 / 1,025 and 1,853 / 1,896 tokens/s
    v1 = VLLM_HOST_SECONDS_PER_SEQUENCE["v1"]
    for running, sync, overlapped, saved_ms in ((32, 1014, 1025, 0.3387), (64, 1853, 1896, 0.7833)):
        assert running * (1 / sync - 1 / overlapped) * 1e3 == pytest.approx(saved_ms, abs=1e-4)
        assert 0.8 < v1 * running * 1e3 / saved_ms < 1.25   # 1.21 and 1.05
    assert host_seconds_per_sequence("v0") == pytest.approx(93e-6)
    assert host_seconds_per_sequence(None) == 0.0
    with pytest.raises(ValueError, match="engine_generation must be one of v0, v1, got 'v2'"):
        host_seconds_per_sequence("v2")


@pytest.mark.parametrize("text, parts, post, final", [("0.5.0", (0, 5), None, True), ("0.6", (0, 6), None, True),
                                                      ("v0.6.3.post2", (0, 6, 3), 2, False),
                                                      ("0.5.2.POST", (0, 5, 2), 0, False),
                                                      ("0.4.1.dev", (0, 4, 1), None, False),
                                                      ("1.0.0rc1", (1,), None, False),
                                                      (" 0.10.2 ", (0, 10, 2), None, True)])
def test_release_strings_parse_to_their_numbers(text, parts, post, final):
    release = parse_version(text)
    assert (tuple(release), release.post) == (parts, post)
    assert (release == parts) is final   # a post-, pre- or development release is not its base release


@pytest.mark.parametrize("spellings, parts, pre, post, dev", [
    # PEP 440 normalisation (peps.python.org/pep-0440/#normalization): separators '.', '-', '_' or none,
    # alternative spellings, implicit numbers, a bare '-N' post-release, case and a leading 'v'
    (["0.5.2.post1", "0.5.2-post1", "0.5.2_post1", "0.5.2post1", "0.5.2-1", "0.5.2.rev1", "0.5.2-r.1",
      "V0.5.2.POST1", "0.5.2.0.post1"], (0, 5, 2), None, 1, None),
    (["0.6.0rc1", "0.6.0-rc.1", "0.6.0.rc1", "0.6.0_RC_1", "0.6rc1", "0.6.0c1", "0.6.0-pre1", "0.6.0preview.1",
      "v0.6.0rc1"], (0, 6), ("rc", 1), None, None),
    (["0.6.0.dev3", "0.6.0dev3", "0.6.0-dev-3", "0.6.0_dev.3"], (0, 6), None, None, 3),
    (["0.6.0a0", "0.6.0-alpha", "0.6.0.ALPHA.0"], (0, 6), ("a", 0), None, None),
    (["0.5.0-beta", "0.5.0b", "0.5.0.beta0"], (0, 5), ("b", 0), None, None),
    (["0.6.0rc1.post2.dev3", "0.6.0-rc1-post2-dev3", "0.6.0rc1-2.dev3"], (0, 6), ("rc", 1), 2, 3),
    (["0.1.pre", "0.1rc", "0.1.rc0"], (0, 1), ("rc", 0), None, None),   # verl v0.1rc's version file: 0.1.pre
])
def test_pep_440_spellings_read_as_their_normal_form(spellings, parts, pre, post, dev):
    releases = [parse_version(text) for text in spellings]
    for release in releases:
        assert (tuple(release), release.pre, release.post, release.dev) == (parts, pre, post, dev)
    assert len(set(releases)) == 1 and all(r == releases[0] for r in releases)


def test_pre_and_development_releases_order_before_their_release():
    # PEP 440's order ("Version specifiers", packaging.org): dev < a < b < rc < release < post < next release
    ordered = ["0.5.2.post3", "0.6.dev3", "0.6.0a1", "0.6b2", "0.6.0rc1.dev1", "0.6rc1", "0.6.0rc1.post1", "0.6.0",
               "0.6.post1.dev0", "0.6.0.post1", "0.6.1.dev0", "0.6.1"]
    assert sorted(reversed(ordered), key=parse_version) == ordered
    rc = parse_version("0.6.0rc1")
    assert (0, 5, 9) < rc < (0, 6) and rc < (0, 6, 0) and rc != (0, 6) and rc not in {(0, 6)}
    assert parse_version("0.6.0.dev3") < (0, 6) and parse_version("0.6.0.dev3") != (0, 6)
    assert hash(rc) == hash(parse_version("0.6-RC.1")) and rc in {parse_version("v0.6.0c1")}
    assert pickle.loads(pickle.dumps(rc)) == rc and pickle.loads(pickle.dumps(rc)).pre == ("rc", 1)
    assert rc.leads_to() == (0, 6) and parse_version("0.5.2.post1.dev0").leads_to() == parse_version("0.5.2.post1")


@pytest.mark.parametrize("framework, version, same_as", [
    # the tables read a pre-release as the release it leads to: verl's v0.3.0.rc0 tag (setup.py vllm<=0.6.3,
    # enforce_eager True, version file 0.3.0) and v0.1rc (version 0.1.pre, vllm==0.5.4, enforce_eager True);
    # NeMo RL's v0.5.0 tag reports 0.5.0rc0 and v0.2.1 0.2.0dev (nemo_rl/package_info.py)
    ("verl", "0.3.0.rc0", "0.3.0"), ("verl", "0.1.pre", "0.1"), ("verl", "v0.1rc", "0.1"),
    ("nemo-rl", "0.5.0rc0", "0.5.0"), ("nemo-rl", "0.2.0dev", "0.2.0"), ("openrlhf", "0.6.3rc1", "0.6.3"),
    ("openrlhf", "0.5.2.post1.dev0", "0.5.2.post1"), ("openrlhf", "0.5.2-post1", "0.5.2.post1"),
])
def test_the_tables_read_a_pre_release_as_the_release_it_leads_to(framework, version, same_as):
    assert version_defaults(framework, version) == version_defaults(framework, same_as)
    assert engine_vllm_release(framework, version) == engine_vllm_release(framework, same_as)
    assert default_gpu_memory_utilization(framework, version) == default_gpu_memory_utilization(framework, same_as)


def test_release_rules_at_a_switch_read_a_pre_release_as_its_release():
    # OpenRLHF passes vLLM a max_model_len from v0.3.2; v0.5.8-v0.6.0 lower a colocated engine to 0.4
    assert engine_takes_model_context("openrlhf", "0.3.2rc1") is engine_takes_model_context("openrlhf", "0.3.2") \
        is False
    assert engine_takes_model_context("openrlhf", "0.3.1.post1") is True
    assert colocate_all_gpu_memory_utilization("openrlhf", "0.5.8.dev2", 0.9) == 0.4
    assert colocate_all_gpu_memory_utilization("openrlhf", "0.6.0_post1", 0.9) == 0.9


def test_post_releases_order_after_their_release_and_before_the_next():
    # PEP 440: 0.5.2 < 0.5.2.post1 < 0.5.2.post2 < 0.5.3; trailing zeros do not count; plain tuples are final releases
    spellings = ["0.5.3", "0.5.2.post2", "v0.5.2", "0.5.2.post1", "0.5.1.post9", "0.5.2.0.post3"]
    ordered = sorted(spellings, key=parse_version)
    assert ordered == ["0.5.1.post9", "v0.5.2", "0.5.2.post1", "0.5.2.post2", "0.5.2.0.post3", "0.5.3"]
    post = parse_version("0.5.2.post1")
    assert (0, 5, 2) < post < (0, 5, 3) and post > (0, 5, 2, 0) and post != (0, 5, 2)
    assert parse_version("0.6.0") == (0, 6) == parse_version("v0.6") and parse_version("0.6.0.post1") > (0, 6)
    assert hash(parse_version("0.6.0")) == hash(parse_version("0.6"))
    assert parse_version("0.5.8") in {(0, 5, 8)} and parse_version("0.5.8.post1") not in {(0, 5, 8)}   # hash follows ==
    # equal objects hash alike: a plain tuple equals a final release only as it is held (trailing zeros dropped),
    # while ordering ignores trailing zeros
    assert parse_version("0.6.0") == (0, 6) and parse_version("0.6.0") != (0, 6, 0)
    assert parse_version("0.6.0") not in {(0, 6, 0)} and parse_version("0.6.0") in {(0, 6)}
    assert parse_version("0.6.0") >= (0, 6, 0) and parse_version("0.6.0") <= (0, 6, 0)
    for a in ("0.6.0", "0.6", "0.5.2.post1", "0.5.8"):
        for b in ((0, 6), (0, 6, 0), (0, 5, 2), (0, 5, 8), parse_version("0.5.2.post1")):
            if parse_version(a) == b:
                assert hash(parse_version(a)) == hash(b), (a, b)
    assert parse_version("0.5.2.post1") == parse_version("0.5.2.0.post1")
    assert pickle.loads(pickle.dumps(post)) == post and pickle.loads(pickle.dumps(post)).post == 1
    assert post[:2] == (0, 5) and ".".join(map(str, post)) == "0.5.2"   # the numbers read as before


@pytest.mark.parametrize("version, vllm", [("0.5.2", (0, 4, 2)), ("0.5.2.post1", (0, 6, 4)), ("0.5.2.post2", (0, 6, 4)),
                                          ("0.5.1.post1", (0, 4, 2))])
def test_openrlhf_v0_5_2_post1_takes_the_vllm_its_setup_py_pins(version, vllm):
    # setup.py vllm==0.4.2 at v0.5.2, vllm==0.6.4.post1 from v0.5.2.post1 (the old parser read it as v0.5.2)
    assert engine_vllm_release("openrlhf", version) == vllm


@pytest.mark.parametrize("text", ["", "abc", "0.5.x", "0..5", "v", "1.2.3.4.5", "1!0.5", "0.6.3+cu121",
                                  "0.5rc1rc2", "0.5-", "0.5.post1.post2"])
def test_a_malformed_release_names_the_field_and_the_value(text):
    with pytest.raises(ConfigError, match=r"\[policy\] framework_version: .* is not a release"):
        parse_version(text)


@pytest.mark.parametrize("framework, version, eager, generation", [
    # verl: rollout enforce_eager True v0.1-v0.5, False from v0.6.0; vLLM 0.6.3 (V0) up to v0.3, 0.8.x (V1) after
    ("verl", "0.1", True, "v0"), ("verl", "0.2.0.post2", True, "v0"), ("verl", "0.3.0.post1", True, "v0"),
    ("verl", "0.4.1", True, "v1"), ("verl", "0.5.0", True, "v1"), ("verl", "0.6.0", False, "v1"),
    ("verl", "0.7.0", False, "v1"),
    # OpenRLHF: vLLM 0.4.2-0.7.2 (V0) before v0.6.3, 0.8.1+ (V1) from it; enforce_eager always False
    ("openrlhf", "0.2.7", False, "v0"), ("openrlhf", "0.6.2", False, "v0"), ("openrlhf", "0.6.3", False, "v1"),
    ("openrlhf", "0.9.0", False, "v1"),
    # NeMo RL: v0.1 VLLM_USE_V1=0 and eager, v0.2 V1 and eager, v0.3+ V1 with graphs
    ("nemo-rl", "0.1.1", True, "v0"), ("nemo-rl", "0.2.1", True, "v1"), ("nemo-rl", "0.3.0", False, "v1"),
    ("nemo-rl", "0.6.0", False, "v1"),
])
def test_each_release_takes_its_frameworks_defaults(framework, version, eager, generation):
    entry = version_defaults(framework, version)
    assert (entry.enforce_eager, entry.engine_generation) == (eager, generation)


def test_the_newest_entry_repeats_the_profiles_current_defaults():
    for name, table in FRAMEWORK_VERSIONS.items():
        assert table[-1].enforce_eager == FRAMEWORKS[name].enforce_eager
        assert table[-1].engine_generation == FRAMEWORKS[name].engine_generation == "v1"
        assert [e.since for e in table] == sorted(e.since for e in table)
        assert default_gpu_memory_utilization(name, ".".join(map(str, table[-1].since))) == \
            FRAMEWORKS[name].gpu_memory_utilization
    assert version_defaults("verl", None) is None


@pytest.mark.parametrize("framework, version, fraction", [
    # each framework's own config at its tags: verl rollout 0.5 (v0.1-v0.7), NeMo RL grpo_math_1B.yaml 0.6
    # (v0.1.0-v0.7.0), OpenRLHF vLLM's 0.9 until --vllm_gpu_memory_utilization's default became 0.95 at v0.6.4
    ("verl", None, 0.5), ("verl", "0.1", 0.5), ("verl", "0.7.0", 0.5),
    ("nemo-rl", None, 0.6), ("nemo-rl", "0.1.0", 0.6), ("nemo-rl", "0.7.0", 0.6),
    ("openrlhf", None, 0.95), ("openrlhf", "0.2.7", 0.9), ("openrlhf", "0.6.3", 0.9), ("openrlhf", "0.6.4", 0.95),
    ("openrlhf", "0.9.0", 0.95), ("none", None, 0.9), ("deepspeed-chat", None, 0.9),
])
def test_an_unset_gpu_memory_utilization_takes_the_frameworks_default_at_its_release(framework, version, fraction):
    assert default_gpu_memory_utilization(framework, version) == fraction
    cfg = _config(OPENRLHF_13B)
    cfg["policy"].pop("framework_version")
    cfg["policy"].pop("gpu_memory_utilization", None)
    cfg["policy"]["framework"] = framework
    if framework == "nemo-rl":   # its PPO scores with a rule (a reward model is refused at load) and has no PPO
        cfg["models"]["reward"] = "rule"   # before v0.7.0: the config's step as GRPO there
        if version is not None and version != "0.7.0":
            cfg["policy"]["algorithm"] = "grpo"
            cfg["models"] = {k: v for k, v in cfg["models"].items() if k != "critic"}
    if version is not None:
        cfg["policy"]["framework_version"] = version
    assert build_instance(cfg).engine.gpu_memory_utilization == fraction
    cfg["policy"]["gpu_memory_utilization"] = 0.42      # an explicit value always wins
    assert build_instance(cfg).engine.gpu_memory_utilization == 0.42


def test_versions_the_tables_do_not_cover_are_refused():
    with pytest.raises(ConfigError, match=r"framework_version: '0\.0\.9' is before verl 0\.1"):
        version_defaults("verl", "0.0.9")
    with pytest.raises(ConfigError, match="the deepspeed-chat framework has no version-dependent defaults"):
        version_defaults("deepspeed-chat", "0.1")
    with pytest.raises(ConfigError, match="the none framework has no version-dependent defaults"):
        version_defaults("none", "1.0")


def test_a_config_applies_its_release_and_an_explicit_setting_still_wins():
    cfg = _config(OPENRLHF_13B)
    assert cfg["policy"]["framework_version"] == "0.2.7"
    engine = build_instance(cfg).engine
    assert engine.enforce_eager is False and engine.host_seconds_per_sequence == pytest.approx(93e-6)
    assert build_instance(cfg).framework_version == "0.2.7"
    del cfg["policy"]["framework_version"]             # unset: the profile's current defaults (V1)
    assert build_instance(cfg).engine.host_seconds_per_sequence == pytest.approx(12.85e-6, abs=0.005e-6)
    cfg["policy"].update(framework="verl", framework_version="0.5.0")
    assert build_instance(cfg).engine.enforce_eager is True
    cfg["policy"]["enforce_eager"] = False
    assert build_instance(cfg).engine.enforce_eager is False
    # NeMo RL v0.5's row: the release's defaults are today's, so nothing moves
    nemo = _config(NEMO_V05)
    assert nemo["policy"]["framework_version"] == "0.5.0"
    with_version = build_instance(nemo).engine
    del nemo["policy"]["framework_version"]
    # the pinned vLLM differs (0.11.2 against today's 0.20.0), what it holds outside the pool does not
    current = build_instance(nemo).engine
    assert (with_version.vllm_release, current.vllm_release) == ((0, 11, 2), (0, 20, 0))
    assert current == dataclasses.replace(with_version, vllm_release=(0, 20, 0))


@pytest.mark.parametrize("value, message", [
    (0.5, r"\[policy\] framework_version: 0\.5 was read as a number; write the release quoted"),
    ("0.5.x", r"\[policy\] framework_version: '0\.5\.x' is not a release"),
    ("", r"\[policy\] framework_version: must be a non-empty string"),
    (True, r"\[policy\] framework_version: must be a non-empty string, got True"),
])
def test_config_errors_name_the_field_and_the_value(value, message):
    cfg = _config(OPENRLHF_13B)
    cfg["policy"]["framework_version"] = value
    with pytest.raises(ConfigError, match=message):
        build_instance(cfg)


def test_a_framework_without_a_version_table_refuses_a_release():
    cfg = _config(OPENRLHF_13B)
    cfg["policy"]["framework"] = "deepspeed-chat"
    cfg["policy"]["framework_version"] = "0.2.7"
    with pytest.raises(ConfigError, match=r"\[policy\] framework_version: '0\.2\.7' is set, but the deepspeed-chat"):
        build_instance(cfg)


def test_a_decode_iteration_adds_the_host_time_of_each_running_sequence():
    # OPT-125M-like shape on an H100 knob model (no component table): the iteration at 256 running sequences
    # of a V0 engine is that of an engine with no per-sequence host time plus 256 · 93 µs = 23.808 ms, of a
    # V1 engine plus 256 · 1.1328125 µs = 0.29 ms; the differences grow linearly
    model = ModelSpec(layers=12, hidden_dim=768, ffn_dim=3072, vocab_size=50272, num_kv_heads=12, head_dim=64)
    hw = Hardware(**{**PRESETS["h100-sxm"], "component_table": "none",
                     "decode_step_overhead": VLLM_DECODE_STEP_OVERHEAD})
    cluster = Cluster(1, 1, 1)
    work = Workload(batch_size=512, samples_per_prompt=1, context_length=32, generation_length=128)
    running = np.array([1.0, 8.0, 256.0])
    context = running * 96.0
    bare = CostModel(hw, cluster, work, RolloutEngine()).decode_step_times(model, 1, 1, (1, 1, 1), 1, running, context)
    v0 = CostModel(hw, cluster, work, RolloutEngine(host_seconds_per_sequence=93e-6)).decode_step_times(
        model, 1, 1, (1, 1, 1), 1, running, context)
    assert v0 - bare == pytest.approx([93e-6, 0.744e-3, 23.808e-3], rel=1e-12)
    v1 = CostModel(hw, cluster, work, RolloutEngine(host_seconds_per_sequence=1.1328125e-6)).decode_step_times(
        model, 1, 1, (1, 1, 1), 1, running, context)
    assert v1 - bare == pytest.approx([1.1328125e-6, 9.0625e-6, 0.29e-3], rel=1e-12)
    # at 256 sequences the host time is over 90% of the V0 iteration: the tiny model's GPU work is not
    assert 1.4e-3 + 23.808e-3 > 0.9 * v0[2]


@pytest.mark.parametrize("written, line", [
    ("NeMo RL", "[policy] framework: 'NeMo RL' names the nemo-rl framework; write it 'nemo-rl'"),
    ("OpenRLHF 0.2.7", "[policy] framework: 'OpenRLHF 0.2.7' names the openrlhf framework; write it 'openrlhf' and "
                       "give the release as policy.framework_version"),
    ("skyrl", "[policy] framework: must be one of none, verl, nemo-rl, openrlhf, deepspeed-chat, got 'skyrl'"),
])
def test_policy_framework_spelled_another_way_names_the_canonical_framework(written, line):
    cfg = _config(OPENRLHF_13B)
    cfg["policy"]["framework"] = written
    with pytest.raises(ConfigError) as info:
        build_instance(cfg)
    assert str(info.value) == line


def test_a_release_built_from_a_string_is_the_parsed_release_and_compares_with_trailing_zeros():
    # Release("0.5") had held the characters ('0', '.', '5'): against (0, 5, 0) its order raised TypeError
    assert Release("0.5") == parse_version("0.5") == Release((0, 5, 0)) == (0, 5)
    assert Release("0.5") <= (0, 5, 0) <= Release("0.5") and Release("0.5") < (0, 5, 1) and Release("0.5") > (0, 4, 9)
    assert Release("v0.5.2.post1") == Release((0, 5, 2), post=1) and Release("0.6.0rc1").pre == ("rc", 1)
    assert hash(Release("0.5")) == hash((0, 5)) and Release((np.int64(0), np.int32(5))) == (0, 5)
    assert Release("0.5") != (0, 5, 0)   # equal objects hash alike: a plain tuple equals a release as it is held
    with pytest.raises(ValueError, match=r"^Release: 'abc' is not a release; expected numbers"):
        Release("abc")
    with pytest.raises(ValueError, match=r"^Release: a release string '0\.5' carries its own suffixes"):
        Release("0.5", post=1)
    for parts in [("0", "5"), (), (0, -1), (0, True), 0.5, None]:
        with pytest.raises(ValueError, match=r"^Release: parts must be a non-empty tuple of integers >= 0 .*, got "):
            Release(parts)
    with pytest.raises(ValueError, match=r"^Release: post must be an integer >= 0 or None, got -1$"):
        Release((0, 5), post=-1)
    with pytest.raises(ValueError, match=r"^Release: dev must be an integer >= 0 or None, got True$"):
        Release((0, 5), dev=True)
    with pytest.raises(ValueError, match=r"^Release: pre must be \(phase, number\), the phase one of a, b, rc"):
        Release((0, 5), pre=("x", 1))


def test_release_suffix_numbers_are_ints_and_pre_may_be_a_list():
    # numpy suffix numbers had been held as given: repr showed np.int64(1) and json.dumps raised TypeError
    release = Release((0, 5), post=np.int64(1), dev=np.uint8(2))
    assert type(release.post) is int and type(release.dev) is int and (release.post, release.dev) == (1, 2)
    assert repr(release) == "Release((0, 5), post=1, pre=None, dev=2)" and json.dumps([release.post]) == "[1]"
    pre = Release((0, 6), pre=["rc", np.int64(1)])   # a list, as the parts may be one ([0, 6] is (0, 6))
    assert pre.pre == ("rc", 1) and type(pre.pre[1]) is int
    assert pre == Release([0, 6], pre=("rc", 1)) == parse_version("0.6rc1") < (0, 6)
    for bad, name in ((True, "post"), (np.True_, "post"), (-1, "dev"), (np.int64(-2), "dev")):
        with pytest.raises(ValueError, match=rf"^Release: {name} must be an integer >= 0 or None, got "):
            Release((0, 5), **{name: bad})
    for bad in (["rc", True], ["rc", -1], ("rc",), ["x", 1], [["rc"], 1], "rc1"):
        with pytest.raises(ValueError, match=r"^Release: pre must be \(phase, number\), the phase one of a, b, rc"):
            Release((0, 5), pre=bad)


class Tagged(Release):
    """A subclass of Release (module level, so that pickle finds it)."""


def test_a_release_subclass_builds_its_own_instances():
    for built in (Tagged("0.5.2.post1"), Tagged((0, 5, 2), post=1), Tagged("0.6rc1").leads_to(),
                  pickle.loads(pickle.dumps(Tagged("0.6.dev3")))):
        assert type(built) is Tagged
    assert Tagged("0.5.2.post1") == Release((0, 5, 2), post=1) and Tagged("0.6rc1").leads_to() == (0, 6)
    assert repr(Tagged("0.5")) == "Tagged((0, 5), post=None, pre=None, dev=None)"


def test_a_release_reads_as_its_pep_440_normal_form_in_messages():
    for text, shown in (("0.2.7", "0.2.7"), ("v0.6.0rc1", "0.6rc1"), ("0.5.2-post1", "0.5.2.post1"),
                        ("0.5.2.post1.dev0", "0.5.2.post1.dev0"), ("0.5.0", "0.5"), ("1!0", None)):
        if shown is None:
            with pytest.raises(ConfigError):
                parse_version(text)
            continue
        assert str(parse_version(text)) == shown and f"{parse_version(text)}" == shown
        assert parse_version(str(parse_version(text))) == parse_version(text)   # it reads back as itself


QWEN3_8B_VERL = {"hardware": {"preset": "h100-sxm"},
                 "models": {"actor": dict(model_type="qwen3", num_hidden_layers=36, hidden_size=4096,
                                          intermediate_size=12288, vocab_size=151936, num_attention_heads=32,
                                          head_dim=128, num_key_value_heads=8), "reward": "rule"},
                 "workload": dict(batch_size=256, samples_per_prompt=8, context_length=1024, generation_length=4096),
                 "policy": dict(algorithm="grpo", framework="verl", trainer_backend="fsdp"),
                 "training": {"sharding": "zero3"}}


@pytest.mark.parametrize("framework, version, warned", [
    ("verl", "99.0", True), ("verl", "5.0", True), ("verl", "0.8.0", True), ("verl", "0.7.4", False),
    ("verl", "0.5.0", False), ("nemo-rl", "0.8.0rc1", True), ("nemo-rl", "0.7.0", False),
    ("openrlhf", "0.11.2", False), ("openrlhf", "0.12", True), ("openrlhf", "1", True)])
def test_a_release_past_the_newest_known_one_is_named_with_it(framework, version, warned):
    from packplace.placement.model.framework import newer_than_known
    message = newer_than_known(framework, version)
    assert (message is not None) == warned
    if warned:
        newest = {"verl": "0.7", "nemo-rl": "0.7", "openrlhf": "0.11"}[framework]
        assert message.startswith(f"[policy] framework_version: {version!r} is newer than {framework} {newest}.x")
    assert newer_than_known(framework, None) is None and newer_than_known("deepspeed-chat", "9.0") is None


def test_a_config_past_the_newest_release_warns_and_prices_it_as_the_newest(recwarn):
    from packplace.errors import FrameworkVersionWarning
    config = copy.deepcopy(QWEN3_8B_VERL)
    config["policy"]["framework_version"] = "99.0"
    with pytest.warns(FrameworkVersionWarning, match=r"framework_version: '99.0' is newer than verl 0\.7\.x"):
        future = build_instance(config)
    config["policy"]["framework_version"] = "0.7.0"
    newest = build_instance(config)
    assert not [w for w in recwarn if issubclass(w.category, FrameworkVersionWarning)]
    assert future.engine == newest.engine


def test_the_command_line_warns_on_stderr_and_keeps_json_stdout_clean(tmp_path):
    import subprocess
    import sys

    import yaml

    config = {"hardware": {"preset": "h100-sxm", "gpus_per_node": 1},
              "models": {"actor": dict(model_type="qwen2", num_hidden_layers=24, hidden_size=896,
                                       intermediate_size=4864, vocab_size=151936, num_attention_heads=14,
                                       head_dim=64, num_key_value_heads=2, tie_word_embeddings=True),
                         "reward": "rule"},
              "workload": dict(batch_size=8, samples_per_prompt=2, context_length=256, generation_length=256),
              "policy": dict(algorithm="grpo", framework="verl", framework_version="5.0")}
    path = tmp_path / "future.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, "-m", "packplace.cli", "place", "--config", str(path), "--solver",
                           "greedy", "--json", "--quiet"], capture_output=True, text=True, timeout=300)
    out, err = done.stdout, done.stderr
    assert json.loads(out)["status"] in ("feasible", "optimal")
    assert ("packplace place: warning: [policy] framework_version: '5.0' is newer than verl 0.7.x, the newest "
            "release the model knows" in err)
    # no --emit: the emitter runs only for its refusal lines, and its key-table warning is not printed
    assert "emitter knows" not in err and json.loads(out)["report"]["framework_refusals"] == []


def test_the_emitters_key_table_warning_is_printed_only_with_emit(tmp_path, capsys):
    from packplace.cli import main
    config = copy.deepcopy(QWEN3_8B_VERL)
    config["policy"]["framework_version"] = "9.9"
    path = tmp_path / "future.yaml"
    path.write_text(json.dumps(config))
    keys = ("packplace place: warning: [policy] framework_version: '9.9' is newer than verl 0.9.1, the newest "
            "release whose config keys the emitter knows; emitted with 0.9.1's keys")
    for extra, printed in (([], False), (["--emit", "verl"], True)):
        assert main(["place", "--config", str(path), "--solver", "greedy", "--quiet", *extra]) == 0
        err = capsys.readouterr().err
        assert "is newer than verl 0.7.x, the newest release the model knows" in err
        assert (keys in err) == printed, (extra, err)
