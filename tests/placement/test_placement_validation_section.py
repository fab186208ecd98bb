"""The ``validation`` section of a validation file is checked field by field when it loads: a bad value is
exit 2 with one line naming the field path and the value, before any scoring."""

from __future__ import annotations

import copy
import os

import pytest
import yaml

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup, validate
from packplace.placement.problem.config import load_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN = os.path.join(ROOT, "benchmarks", "validation", "qwen2.5-7b_vllm_batch1_1xa100.yaml")
QWEN_MEASURED = os.path.join(ROOT, "benchmarks", "calibration", "qwen2.5-7b_vllm_batch1_1xa100.measured.yaml")
TASKS = "actor.generate, reference.infer, reward.infer, actor.train"


def _edited(tmp_path, edit, name="setup.yaml") -> str:
    """The Qwen2.5-7B batch-1 file with ``edit(validation_section)`` applied, written under ``tmp_path``."""
    cfg = copy.deepcopy(load_yaml(QWEN))
    edit(cfg["validation"])
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _set(key, value):
    return lambda section: section.__setitem__(key, value)


def _set_origin(value):
    return lambda section: section["plan"]["actor.generate"].__setitem__("origin", value)


#: (edit of the validation section, the whole error line after "packplace validate: error: ").
CLI_CASES = [
    pytest.param(_set("phases", {"generation": ["actor.gen"]}),
                 f"[validation] phases.generation: unknown task 'actor.gen'; tasks: {TASKS}", id="unknown-task"),
    pytest.param(_set("phases", {"generation": []}),
                 f"[validation] phases.generation: must be a non-empty list of tasks ({TASKS}), got []",
                 id="empty-phase"),
    pytest.param(_set("phases", {"generation": "actor.generate"}),
                 f"[validation] phases.generation: must be a non-empty list of tasks ({TASKS}), got 'actor.generate'",
                 id="phase-as-string"),
    pytest.param(_set("published", {"generation": 0}),
                 "[validation] published.generation: must be a finite number in (0, inf), got 0", id="published-0"),
    pytest.param(_set("published", {"generation": "fast"}),
                 "[validation] published.generation: must be a finite number in (0, inf), got 'fast'",
                 id="published-string"),
    pytest.param(_set_origin("0,0,0"),
                 "[validation] plan.actor.generate.origin: must be a list of 3 integers [rack, node, gpu], "
                 "got '0,0,0'", id="origin-string"),
    pytest.param(_set("published", {"generation": -1}),
                 "[validation] published.generation: must be a finite number in (0, inf), got -1",
                 id="published-negative"),
    pytest.param(_set("framework", "verl"),
                 "[validation] framework: 'verl' ran the step, but policy.framework is 'none': the two must name "
                 "the same framework (the run is priced by policy.framework's execution profile); set "
                 "policy.framework: verl, or correct validation.framework", id="framework-disagrees"),
    pytest.param(_set("framework", "NeMo RL"),
                 "[validation] framework: 'NeMo RL' names the nemo-rl framework; write it 'nemo-rl' "
                 "(cross-validation groups runs by this name)", id="framework-spelling"),
    pytest.param(_set("engine_only", ["gen"]),
                 "[validation] engine_only: 'gen' is not a phase of 'phases'; phases: generation",
                 id="engine-only-not-a-phase"),
]


@pytest.mark.parametrize("edit, line", CLI_CASES)
def test_validate_refuses_a_bad_validation_field_with_one_line(tmp_path, capsys, edit, line):
    path = _edited(tmp_path, edit)
    assert main(["validate", path]) == 2
    captured = capsys.readouterr()
    named = line.replace("[validation] ", f"[validation] {path}: ", 1)   # the file comes first
    assert captured.err.splitlines() == [f"packplace validate: error: {named}"]
    assert captured.out == ""  # refused at load: no row is printed


def test_a_framework_without_a_profile_may_be_scored_on_the_bare_engine(tmp_path):
    # a system the model has no execution profile for names itself and is priced as framework none
    instance, _, section = load_setup(_edited(tmp_path, _set("framework", "some-other-system")))
    assert instance.framework == "none" and section["framework"] == "some-other-system"


@pytest.mark.parametrize("written, canonical, release", [
    ("NeMoRL", "nemo-rl", False), ("nemo_rl", "nemo-rl", False), ("NeMo RL v0.5", "nemo-rl", True),
    ("NeMo-RL 0.5.0rc1", "nemo-rl", True), ("Verl", "verl", False), ("verl v0.4", "verl", True),
    ("HybridFlow", "verl", False), ("OpenRLHF 0.2.7", "openrlhf", True), ("deepspeed chat", "deepspeed-chat", False),
    ("DeepSpeed-Chat", "deepspeed-chat", False), ("DS-Chat", "deepspeed-chat", False), ("None", "none", False),
    # a release without a separator is a release too: "openrlhf2" had passed as a new system while
    # "OpenRLHF-v2" was refused
    ("openrlhf2", "openrlhf", True), ("OpenRLHF-v2", "openrlhf", True), ("open_rlhf.v2", "openrlhf", True),
    ("verl2", "verl", True),
])
def test_a_known_framework_spelled_another_way_is_refused_naming_it(tmp_path, written, canonical, release):
    # each of these was taken for an unknown system and priced without the framework's execution profile
    message = _load_error(tmp_path, _set("framework", written))
    assert message == (f"[validation] framework: {written!r} names the {canonical} framework; write it "
                       f"{canonical!r} (cross-validation groups runs by this name"
                       + ("; the release goes in policy.framework_version)" if release else ")"))


@pytest.mark.parametrize("written", ["-", "...", "_ -", "2.0", "0.4.1", "- 2"])
def test_a_framework_name_with_no_letters_left_is_refused(tmp_path, written):
    # "-" had passed as a system of its own (its canonical form is empty)
    message = _load_error(tmp_path, _set("framework", written))
    assert message.startswith(f"[validation] framework: {written!r} names no framework")


@pytest.mark.parametrize("written, canonical", [
    ("OpenRLFH", "openrlhf"), ("openrlh", "openrlhf"), ("verll", "verl"), ("vrl", "verl"), ("NeMo-RM", "nemo-rl"),
    ("deepspeed-caht", "deepspeed-chat"), ("DeepSpedChta", "deepspeed-chat"), ("OpenRLFH v2", "openrlhf"),
])
def test_a_near_miss_of_a_known_framework_is_refused_naming_it(tmp_path, written, canonical):
    # a misspelt framework had been scored as a new system on the bare engine
    message = _load_error(tmp_path, _set("framework", written))
    assert message == (f"[validation] framework: {written!r} is a near miss of the {canonical} framework; write it "
                       f"{canonical!r} (or, for another system, a name that does not misspell a framework with an "
                       "execution profile)")


@pytest.mark.parametrize("other", ["skyrl", "ROLL", "AReaL", "verl-agent", "NeMo-Aligner", "ReaLHF v0.3", "OpenRL",
                                   "TRL", "NeMo"])
def test_another_system_whose_name_resembles_a_framework_is_still_accepted(tmp_path, other):
    instance, _, section = load_setup(_edited(tmp_path, _set("framework", other)))
    assert instance.framework == "none" and section["framework"] == other


def test_a_framework_that_is_not_text_is_refused(tmp_path):
    assert _load_error(tmp_path, _set("framework", 0.5)) == (
        "[validation] framework: must be a non-empty string, got 0.5")


def _load_error(tmp_path, edit) -> str:
    """The one-line error of the edited file, without the file name it starts with."""
    path = _edited(tmp_path, edit)
    with pytest.raises(ConfigError) as info:
        load_setup(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"[validation] {path}: ")
    return message.replace(f"{path}: ", "", 1)


def _plan_entry(key, value):
    def edit(section):
        if value is None:
            section["plan"]["actor.generate"].pop(key)
        else:
            section["plan"]["actor.generate"][key] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    # published: a mapping of step or declared phases to positive finite seconds
    (_set("published", {"generation": float("inf")}),
     "[validation] published.generation: must be a finite number in (0, inf), got inf"),
    (_set("published", {"generation": True}),
     "[validation] published.generation: must be a finite number in (0, inf), got True"),
    (_set("published", {"gen": 24.3}), "[validation] published.gen: not step or a phase of 'phases'; valid: step, "
                                       "generation"),
    (_set("published", [24.3]),
     "[validation] published: must be a mapping of figure (step or a phase of 'phases') -> seconds, got [24.3]"),
    (_set("published", {}), "[validation] published: needs at least one figure (step or a phase of 'phases'), got {}"),
    # phases: a mapping of phase names (not "step") to non-empty lists of distinct known tasks
    (_set("phases", ["actor.generate"]),
     "[validation] phases: must be a mapping of phase -> list of tasks, got ['actor.generate']"),
    (_set("phases", {"step": ["actor.generate"]}),
     "[validation] phases: a phase name must be a string other than 'step' (the whole step), got 'step'"),
    (_set("phases", {"generation": ["actor.generate", "actor.generate"]}),
     "[validation] phases.generation: a task is listed twice, got ['actor.generate', 'actor.generate']"),
    # engine_only: a list of declared phases
    (_set("engine_only", "generation"),
     "[validation] engine_only: must be a list of phases of 'phases' (generation), got 'generation'"),
    # plan entries: known tasks, integer degrees, [rack, node, gpu] blocks, no unknown field
    (_plan_entry("dp", 1.5), "[validation] plan.actor.generate.dp: must be an integer in [1, 65,536], got 1.5"),
    (_plan_entry("tp", "1"), "[validation] plan.actor.generate.tp: must be an integer in [1, 65,536], got '1'"),
    (_plan_entry("micro_batch", True),
     "[validation] plan.actor.generate.micro_batch: must be an integer in [1, 1,000,000,000,000] or fit, got True"),
    # 'fit' is the one word it takes (lower case), and the message names it
    (_plan_entry("micro_batch", "Fit"),
     "[validation] plan.actor.generate.micro_batch: must be an integer in [1, 1,000,000,000,000] or fit, got 'Fit'"),
    (_plan_entry("pp", None), "[validation] plan.actor.generate.pp: missing required field"),
    (_plan_entry("extent", None), "[validation] plan.actor.generate.extent: missing required field"),
    (_plan_entry("origin", [0, 0]),
     "[validation] plan.actor.generate.origin: must be a list of 3 integers [rack, node, gpu], got [0, 0]"),
    (_plan_entry("origin", [0, 0, -1]),
     "[validation] plan.actor.generate.origin[2]: must be an integer in [0, 65,536], got -1"),
    (_plan_entry("extent", [1, 1, 0]),
     "[validation] plan.actor.generate.extent[2]: must be an integer in [1, 65,536], got 0"),
    (_plan_entry("speed", 1), "[validation] plan.actor.generate.speed: unknown field; valid: dp, pp, tp, ep, "
                              "micro_batch, origin, extent"),
    (lambda s: s["plan"].__setitem__("actor.gen", s["plan"].pop("actor.generate")),
     f"[validation] plan: unknown task 'actor.gen'; tasks: {TASKS}"),
    (lambda s: s["plan"].__setitem__("actor.generate", 3),
     "[validation] plan.actor.generate: must be a mapping, got 3"),
    # pair_with: entries of setup and what
    (_set("pair_with", {"setup": "other", "wat": "2x GPUs"}),
     "[validation] pair_with.wat: unknown field; valid: setup, what"),
    (_set("pair_with", ["other", {"what": "2x GPUs"}]), "[validation] pair_with[1].setup: missing required field"),
    (_set("pair_with", [3]), "[validation] pair_with[0]: must be a mapping, got 3"),
    # free text
    (_set("source", 3), "[validation] source: must be a non-empty string, got 3"),
    (_set("not_fitted", " "), "[validation] not_fitted: must be a non-empty string, got ' '"),
])
def test_every_validation_field_is_checked_at_load(tmp_path, edit, message):
    assert _load_error(tmp_path, edit) == message


def test_an_unknown_validation_key_names_the_file(tmp_path):
    path = _edited(tmp_path, _set("sorce", "x"))
    with pytest.raises(ConfigError, match=rf"^\[validation\] {path}: unknown key 'sorce'; valid: source, url, "):
        load_setup(path)


def test_the_checked_section_is_normalised_and_scores_as_before(tmp_path):
    # published as floats in the file's order, phases and engine_only as given (empty when absent)
    _, _, section = load_setup(_edited(tmp_path, _set("published", {"generation": 24, "step": 30})))
    assert section["published"] == {"generation": 24.0, "step": 30.0}
    assert list(section["published"]) == ["generation", "step"]
    assert section["phases"] == {"generation": ["actor.generate"]} and section["engine_only"] == ["generation"]
    _, _, bare = load_setup(_edited(tmp_path, lambda s: [s.pop("phases"), s.pop("engine_only"),
                                                         s.__setitem__("published", {"step": 30})], "bare.yaml"))
    assert bare["phases"] == {} and bare["engine_only"] == []
    (row,) = validate([QWEN])
    assert (row.figure, row.published) == ("generation", 24.3) and row.ok


def test_calibrate_names_an_empty_measured_file_as_the_measured_file(tmp_path, capsys):
    empty = tmp_path / "m3.yaml"
    empty.write_text("")
    assert main(["calibrate", "--config", QWEN, "--measured", str(empty)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"packplace calibrate: error: calibrate: measured {str(empty)!r}: must be a mapping of task -> seconds, "
        "got None"]
    assert main(["calibrate", "--config", QWEN, "--measured", str(tmp_path / "absent.yaml")]) == 2
    assert capsys.readouterr().err.startswith(f"packplace calibrate: error: measured: cannot read "
                                              f"{str(tmp_path / 'absent.yaml')!r}")
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED]) == 0


def test_micro_batch_fit_scores_the_largest_within_memory_and_says_so(tmp_path):
    from packplace.placement.checking.validate import _with_micro_batch, plan_evaluator

    nemo = os.path.join(ROOT, "tests", "data", "placement", "nemo_rl_dtensor_grpo_llama3.1-8b_2x8xh100.yaml")
    cfg = copy.deepcopy(load_yaml(nemo))
    cfg["validation"]["plan"]["actor.train"]["micro_batch"] = "fit"
    path = tmp_path / "fit.yaml"
    path.write_text(yaml.safe_dump(cfg))
    instance, plan, section = load_setup(str(path))
    mb = section["_fitted"]["actor.train"]
    assert dict(plan.vertices)["actor.train"].micro_batch == mb
    # the largest: mb fits, the next divisor of the 128 sequences per replica does not (memory grows
    # with the micro-batch)
    assert 128 % mb == 0 and mb < 128
    assert not plan_evaluator(instance, plan).score(plan).oom
    above = _with_micro_batch(plan, "actor.train", 2 * mb)
    assert plan_evaluator(instance, above).score(above).oom
    # the published file's 4 fits, so the fitted batch is at least that
    assert mb >= 4
    row = validate([str(path)])[0]
    assert row.fitted == f"micro-batch not published, fitted as the largest within memory: actor.train {mb}"
    assert row.as_dict()["fitted"] == row.fitted
    assert validate([nemo])[0].fitted == ""


def test_a_setup_given_twice_is_refused_before_any_row_is_printed(capsys):
    # it had been scored twice ("2 of 2 figures"), then refused with exit 2 after the report
    assert main(["validate", QWEN, QWEN]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"packplace validate: error: [validation] {QWEN}: a second setup named 'qwen2.5-7b_vllm_batch1_1xa100' "
        f"(first: {QWEN}); give each file once"]


def test_one_file_under_two_names_is_refused_naming_both(tmp_path, capsys):
    # the same run copied under another name had been scored twice (refused by file name only)
    copy_path = tmp_path / "copy_of_qwen.yaml"
    copy_path.write_text(open(QWEN, encoding="utf-8").read())
    assert main(["validate", QWEN, str(copy_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"packplace validate: error: [validation] {copy_path}: the same content as {QWEN} (one run under two "
        "names: its figures would be scored twice); give each file once"]
    # comments and layout do not make another run; cross-validation refuses it too
    reformatted = tmp_path / "reformatted.yaml"
    reformatted.write_text("# a copy\n" + yaml.safe_dump(load_yaml(QWEN), default_flow_style=True))
    assert main(["validate", "--cross-validate", str(reformatted), QWEN]) == 2
    assert f"{QWEN}: the same content as {reformatted}" in capsys.readouterr().err
    # the library function refuses it the same way, before scoring any file
    with pytest.raises(ConfigError) as refused:
        validate([QWEN, str(copy_path)])
    assert str(refused.value) == (f"[validation] {copy_path}: the same content as {QWEN} (one run under two "
                                  "names: its figures would be scored twice); give each file once")
    with pytest.raises(ConfigError, match=r"a second setup named 'qwen2\.5-7b_vllm_batch1_1xa100'"):
        validate([QWEN, QWEN])
    # one changed value is another file
    other = _edited(tmp_path, _set("source", "another source"), name="other.yaml")
    rows = validate([QWEN, other])
    assert {r.setup for r in rows} == {"qwen2.5-7b_vllm_batch1_1xa100", "other"}


def test_two_spellings_of_one_unknown_system_share_its_knob_group(tmp_path):
    # cross-validation fits framework-scoped knobs per framework name: "SkyRL" and "skyrl 0.2" had been two
    from packplace.placement.checking.crossval import load_setups
    paths = [_edited(tmp_path, _set("framework", spelling), name=f"run{i}.yaml")
             for i, spelling in enumerate(["SkyRL", "skyrl 0.2", "Sky-RL"])]
    groups = [setup.framework for setup in load_setups(paths)]
    # one canonical form for every name: case, punctuation and a release dropped, as for the known frameworks
    assert groups == ["skyrl", "skyrl", "skyrl"]


def test_a_dpo_micro_batch_left_to_fit_is_fitted_in_whole_pairs(tmp_path):
    # the placeholder of an unpublished micro-batch had been 1 sequence, half a pair: the file was refused
    cfg = copy.deepcopy(load_yaml(os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")))
    block = {"origin": [0, 0, 0], "extent": [1, 1, 8]}
    cfg["validation"] = {"source": "a DPO run", "published": {"step": 4.0},
                         "plan": {"reference.infer": {"dp": 8, "pp": 1, "tp": 1, "micro_batch": "fit", **block},
                                  "actor.train": {"dp": 4, "pp": 2, "tp": 1, "micro_batch": "fit", **block}}}
    path = tmp_path / "dpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    _, plan, section = load_setup(str(path))
    fitted = section["_fitted"]
    assert set(fitted) == {"reference.infer", "actor.train"}
    assert all(mb % 2 == 0 and (256 // dp) % mb == 0 for mb, dp in ((fitted["reference.infer"], 8),
                                                                      (fitted["actor.train"], 4)))
    assert dict(plan.vertices)["actor.train"].micro_batch == fitted["actor.train"]


@pytest.mark.parametrize("written, line", [
    ("openrlhf2", "[policy] framework: 'openrlhf2' names the openrlhf framework; write it 'openrlhf' and give the "
                  "release as policy.framework_version"),
    ("OpenRLFH", "[policy] framework: 'OpenRLFH' is a near miss of the openrlhf framework; write it 'openrlhf'"),
])
def test_policy_framework_takes_the_same_canonical_form(written, line):
    # policy.framework had listed the valid names for "openrlhf2" while naming the framework for "OpenRLHF-v2"
    from packplace.placement.problem.config import build_instance
    cfg = load_yaml(os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml"))
    cfg["policy"]["framework"] = written
    with pytest.raises(ConfigError) as info:
        build_instance(cfg)
    assert str(info.value) == line


def test_the_library_validate_takes_one_path_as_one_file():
    from pathlib import Path

    from packplace.placement.checking.validate import validate
    path = os.path.join(ROOT, "benchmarks", "validation", "nemo_rl_grpo_llama3.1-8b_2x8xh100.yaml")
    for given in (path, Path(path), os.fsencode(path), [path]):
        rows = validate(given)
        assert [row.setup for row in rows] == ["nemo_rl_grpo_llama3.1-8b_2x8xh100"]
