"""Every file a command reads is held to its contract: a Hugging Face ``config.json``, the validation section,
the measured file, a suite, a baseline and the library's cost columns each give one ``ConfigError`` line
naming the file or field, and a message never repeats the text of a file that is not the config itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from packplace.balance.instance import make_instance
from packplace.cli import main
from packplace.errors import ConfigError
from packplace.shape import MAX_SHAPE_INTEGER, from_hf_config

ROOT = Path(__file__).resolve().parents[1]
LLAMA = json.loads((ROOT / "tests" / "data" / "hf_configs" / "llama-3.2-1b.json").read_text(encoding="utf-8"))
QWEN = ROOT / "benchmarks" / "validation" / "qwen2.5-7b_vllm_batch1_1xa100.yaml"
MEASURED = ROOT / "benchmarks" / "calibration" / "qwen2.5-7b_vllm_batch1_1xa100.measured.yaml"
DPO = ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"


def one_error(capsys, command: str) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"packplace {command}: error: "), err
    return err[0]


@pytest.mark.parametrize("key, raw", [("hidden_size", '"2048"'), ("hidden_size", "[2048]"),
                                      ("num_hidden_layers", "9" * 5000), ("vocab_size", "-1"),
                                      ("num_attention_heads", "{}"), ("intermediate_size", "1e400"),
                                      ("head_dim", str(MAX_SHAPE_INTEGER + 1)), ("tie_word_embeddings", '"no"'),
                                      ("model_type", "3"), ("mlp_only_layers", "7")])
def test_a_bad_config_json_field_is_one_line_naming_the_file_and_key(key, raw, tmp_path, capsys):
    model = tmp_path / "model.json"
    model.write_text(json.dumps({**LLAMA, key: "@"}).replace('"@"', raw), encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(model))}[: ].*"):
        from_hf_config(model)
    config = tmp_path / "config.yaml"
    config.write_text(re.sub(r"(?ms)^  actor:.*?(?=^workload:)", "  actor:\n    hf_config: model.json\n",
                             DPO.read_text(encoding="utf-8")), encoding="utf-8")
    assert main(["place", "--config", str(config), "--solver", "greedy", "--quiet"]) == 2
    line = one_error(capsys, "place")
    assert str(model) in line and (key in line or "invalid JSON" in line), line
    assert '"2048"' not in line and "[2048]" not in line  # the other file's value is described, not quoted


def test_config_json_integer_valued_floats_and_the_shipped_files_still_load():
    assert from_hf_config({**LLAMA, "hidden_size": 2048.0}).hidden_dim == 2048
    for path in sorted((ROOT / "tests" / "data" / "hf_configs").glob("*.json")):
        assert from_hf_config(path).layers >= 1


def _edited(tmp_path: Path, old: str, new: str, source: Path = QWEN) -> Path:
    text = source.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "setup.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize("old, new, expected", [
    ("policy:", "optimizer:\n  staleness_candidates: {actor: 0.5}\npolicy:", "staleness_candidates"),
    ("policy:", "optimizer: 2001-12-14\npolicy:", "optimizer"),
    ("engine_only: [generation]", "engine_only: [[generation]]", "engine_only"),
    ("actor.generate: {dp: 1,", "actor.generate: {dp: 2,", "dp*pp*tp = 2"),
])
def test_validate_and_calibrate_check_the_file_as_place_does(old, new, expected, tmp_path, capsys):
    setup = _edited(tmp_path, old, new)
    assert main(["validate", str(setup), "--quiet"]) == 2
    assert expected in one_error(capsys, "validate")
    assert main(["calibrate", "--config", str(setup), "--measured", str(MEASURED), "--quiet"]) == 2
    assert expected in one_error(capsys, "calibrate")


def test_a_published_stale_plan_with_well_formed_candidates_still_merges(tmp_path):
    from packplace.placement.checking.validate import _allow_staleness

    cfg = {"optimizer": {"staleness_candidates": {"actor": [2]}}}
    _allow_staleness(cfg, {"actor": 1})
    assert cfg["optimizer"]["staleness_candidates"] == {"actor": [0, 1, 2]}
    bad = {"optimizer": {"staleness_candidates": {"actor": 0.5}}}
    _allow_staleness(bad, {"actor": 1})
    assert bad == {"optimizer": {"staleness_candidates": {"actor": 0.5}}}  # left for the config's own check


@pytest.mark.parametrize("text, expected", [
    ("times: {actor.generate: 24.3}\nknobs: [decode_bw_eff]\ntrue: 1\nx: 2\n", "unknown field"),
    ("{true: 3, actor.generate: 2}\n", "not a vertex of the plan"),
    ("times: {actor.generate: " + "9" * 400 + "}\n", "finite number > 0"),
    ("times: {actor.generate: 24.3}\nengine_only: [[actor.generate]]\n", "engine_only must be a list of names"),
], ids=["bool-key", "bool-task", "huge-seconds", "nested-engine-only"])
def test_a_measured_file_with_keys_of_any_type_is_one_line(text, expected, tmp_path, capsys):
    measured = tmp_path / "m.yaml"
    measured.write_text(text, encoding="utf-8")
    assert main(["calibrate", "--config", str(QWEN), "--measured", str(measured), "--quiet"]) == 2
    assert expected in one_error(capsys, "calibrate")


@pytest.mark.parametrize("field, value", [("num_attention_heads", 0), ("num_key_value_heads", 0)])
def test_zero_heads_in_a_balance_cost_model_are_refused_like_placement(field, value, tmp_path, capsys):
    model = f"{{layers: 32, hidden_dim: 4096, ffn_dim: 14336, vocab_size: 128256, {field}: {value}}}"
    config = tmp_path / "b.yaml"
    config.write_text(f"seq_len: 100\ndata_parallel_size: 2\ncost: {{kind: flops, model: {model}}}\n"
                      "samples: {lengths: [10, 20, 30, 40]}\n", encoding="utf-8")
    assert main(["balance", "--config", str(config), "--quiet"]) == 2
    assert f"cost.model.{field}: must be an integer >= 1" in one_error(capsys, "balance")
    placement = tmp_path / "p.yaml"
    placement.write_text(DPO.read_text(encoding="utf-8").replace("    head_dim: 128\n", f"    {field}: {value}\n"),
                         encoding="utf-8")
    assert main(["place", "--config", str(placement), "--quiet"]) == 2
    assert field in one_error(capsys, "place")


def test_a_lone_surrogate_in_a_baseline_is_refused_before_bench_prints_it(tmp_path, capsys):
    import test_fuzz_text as fuzz

    suite = tmp_path / "suite.yaml"
    suite.write_text(fuzz.TINY_SUITE, encoding="utf-8")
    data = json.loads(fuzz._tiny_baseline())
    first = next(iter(data["results"]))
    data["results"]["\ud800" + first] = data["results"].pop(first)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(data), encoding="utf-8")  # ensure_ascii: the file holds the \ud800 escape
    assert main(["bench", "--suite", str(suite), "--baseline", str(baseline), "--quiet"]) == 2
    assert "lone surrogate" in one_error(capsys, "bench")


def test_costs_summing_past_float64_headroom_are_refused_at_instance_creation():
    with pytest.raises(ConfigError, match=r"^samples: the costs sum to 1e\+308, above the supported 2\^1022"):
        make_instance([1, 1, 1], [1e308, 1, 1], seq_len=3, data_parallel_size=2)
    with pytest.raises(ConfigError, match="more than float64 holds"):
        make_instance([1, 1, 1], [1e308, 1e308, 1], seq_len=3, data_parallel_size=2)
    make_instance([1, 1, 1], [2.0**1021, 1, 1], seq_len=3, data_parallel_size=2)  # inside the headroom


@pytest.mark.parametrize("objective", ["makespan", "balance", "rounds", "lockstep"])
def test_every_solver_answers_at_the_cost_headroom(objective):
    from packplace import solvers
    from packplace.balance.api import solve_balance

    extra = {"group_size": 2} if objective == "rounds" else {}
    instance = make_instance([1, 1, 1, 1], [2.0**1020, 2.0**1020, 1, 2.0**1020], seq_len=3, data_parallel_size=2,
                             objective=objective, **extra)
    for name in solvers.available("balance"):
        if name != "reference":
            result = solve_balance(instance, name, time_limit_s=1)
            assert result.status in ("optimal", "feasible"), (name, result.message)


SECRET = "first line of a file that is not a config"


def test_a_suite_entry_whose_file_is_not_a_mapping_never_quotes_that_file(tmp_path, capsys):
    other = tmp_path / "notes.yaml"
    other.write_text(f"{SECRET}\nsecond line\n", encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\nproblem: balance\ninstances:\n  - config: notes.yaml\n", encoding="utf-8")
    out = tmp_path / "report"
    main(["compare", "--problem", "balance", "--suite", str(suite), "--solvers", "lpt", "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    for name in ("report.json", "report.csv", "report.md"):
        text = (out / name).read_text(encoding="utf-8")
        assert "must be a mapping of fields, got str" in text and SECRET not in text


@pytest.mark.parametrize("argv", [["balance", "--config", "{path}"], ["place", "--config", "{path}"],
                                  ["compare", "--problem", "balance", "--suite", "{path}"],
                                  ["calibrate", "--config", str(QWEN), "--measured", "{path}"]])
def test_a_command_pointed_at_a_text_file_does_not_print_its_content(argv, tmp_path, capsys):
    other = tmp_path / "passwd"
    other.write_text(f"{SECRET}\n", encoding="utf-8")
    assert main([a.replace("{path}", str(other)) for a in argv] + ["--quiet"]) == 2
    assert SECRET not in one_error(capsys, argv[0])


SHADOW = "root:$6$salt$hash:20228:0:99999:7:::\n"


@pytest.mark.parametrize("argv", [["balance", "--config", "{path}"], ["place", "--config", "{path}"],
                                  ["calibrate", "--config", str(QWEN), "--measured", "{path}"]])
def test_a_system_file_that_parses_as_a_mapping_is_not_quoted_either(argv, tmp_path, capsys):
    other = tmp_path / "shadow"
    other.write_text(SHADOW, encoding="utf-8")
    assert main([a.replace("{path}", str(other)) for a in argv] + ["--quiet"]) == 2
    line = one_error(capsys, argv[0])
    assert "salt" not in line and "20228" not in line and "not a field name" in line, line


def test_a_misspelt_field_is_still_quoted(tmp_path, capsys):
    config = tmp_path / "b.yaml"
    config.write_text("seq_len: 100\ndata_parallel_size: 2\nsamples: {lengths: [1, 2]}\nseq len: 3\n",
                      encoding="utf-8")
    assert main(["balance", "--config", str(config), "--quiet"]) == 2
    assert "seq len: unknown field" in one_error(capsys, "balance")
