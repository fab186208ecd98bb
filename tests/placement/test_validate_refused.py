"""``packplace validate <dir>`` with one refused file: its own row with its error, the others scored,
exit 1 (every file refused too: a row each); ``--cross-validate`` reports each fold on stderr."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.validate import validate

VALIDATION = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "validation")
GOOD = ("qwen2.5-7b_vllm_batch1_1xa100.yaml", "deepspeed_chat_ppo_opt-13b_8xa100.yaml",
        "deepspeed_chat_ppo_opt-30b_8xa100.yaml")
ERROR = "published.step: must be a finite number in (0, inf), got -1"


@pytest.fixture
def folder(tmp_path):
    """The three files of :data:`GOOD` and ``bad.yaml``: a copy of the first with a negative published step."""
    for name in GOOD:
        shutil.copy(os.path.join(VALIDATION, name), tmp_path / name)
    text = (tmp_path / GOOD[0]).read_text(encoding="utf-8")
    before, after = text.split("published:", 1)
    (tmp_path / "bad.yaml").write_text(before + "published: {step: -1}\n" + after.split("\n", 1)[1],
                                       encoding="utf-8")
    return tmp_path


def test_a_refused_file_has_its_own_row_and_the_others_are_scored(folder, capsys):
    rows = validate(sorted(str(p) for p in folder.glob("*.yaml")))
    refused = [r for r in rows if r.error]
    assert [r.setup for r in refused] == ["bad"] and ERROR in refused[0].error
    assert str(folder / "bad.yaml") in refused[0].error   # the file is named
    assert not refused[0].ok and math.isnan(refused[0].predicted)
    scored = {r.setup for r in rows if not r.error}
    assert scored == {name.removesuffix(".yaml") for name in GOOD}
    assert all(r.predicted > 0 for r in rows if not r.error)

    assert main(["validate", str(folder)]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("bad "))
    assert "REFUSED: " in line and ERROR in line
    assert out.count(" ok") + out.count("OUT OF RANGE") == 3   # three files scored
    assert "; 1 file refused" in out

    assert main(["validate", "--json", str(folder)]) == 1
    document = json.loads(capsys.readouterr().out)
    (bad,) = [r for r in document["rows"] if r["error"]]
    assert bad["setup"] == "bad" and bad["predicted"] is None and not document["ok"]


def test_one_refused_file_is_bad_input_and_several_are_a_row_each(folder):
    bad = str(folder / "bad.yaml")
    other = folder / "also_bad.yaml"          # another run (a note of its own), refused for the same field
    other.write_text((folder / "bad.yaml").read_text(encoding="utf-8").replace(
        "validation:", "validation:\n  note: another run", 1), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"published\.step"):
        validate([bad])
    rows = validate([bad, str(other)])          # had raised the first file's error alone
    assert [r.setup for r in rows] == ["bad", "also_bad"] and all(ERROR in r.error for r in rows)
    with pytest.raises(ConfigError, match=r"a second setup named 'bad'"):   # one file twice: refused up front
        validate([bad, bad])
    assert main(["validate", bad, "--quiet"]) == 2


PLAIN = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "placement")


def test_a_folder_of_plain_configs_is_a_refused_row_each(tmp_path, capsys):
    plain = sorted(name for name in os.listdir(PLAIN) if name.endswith(".yaml"))
    for name in plain:
        shutil.copy(os.path.join(PLAIN, name), tmp_path / name)
    why = "needs a validation section with 'published' and 'plan'"
    # it had stopped at the first file (exit 2, one line); each is now a row, as a refused file among others
    assert main(["validate", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    for name in plain:
        line = next(x for x in out.splitlines() if x.startswith(name.removesuffix(".yaml") + " "))
        assert f"REFUSED: [validation] {tmp_path / name}: {why}" in line
    assert f"0 of 0 figures within x1.3 of the published value with the plan within memory; {len(plain)} files " \
           "refused" in out
    # the text report had printed the "knobs fitted per fold (left-out publication):" header over nothing
    assert main(["validate", "--cross-validate", "--quiet", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "knobs fitted per fold (left-out publication):" not in out
    assert out.count("knobs fitted per fold") == 1
    assert "knobs fitted per fold: none (no file was scored, so no fold was fitted)\n\nsetup " in out
    assert main(["validate", "--cross-validate", "--quiet", "--json", str(tmp_path)]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["folds"] == []
    assert sorted(document["refused"]) == [name.removesuffix(".yaml") for name in plain]
    assert document["rows"] == [] and document["summary"]["in_sample"]["runs"] == 0
    shutil.copy(os.path.join(VALIDATION, GOOD[0]), tmp_path / GOOD[0])   # and beside a validation file: scored
    rows = validate(sorted(str(p) for p in tmp_path.glob("*.yaml")))
    assert [r.setup for r in rows if not r.error] == [GOOD[0].removesuffix(".yaml")] and rows[-1].predicted > 0


def test_cross_validate_reports_each_fold_and_the_refused_file(folder, capsys):
    assert main(["validate", "--cross-validate", "--knobs", "decode_bw_eff:gpu", "--json", str(folder)]) == 1
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert list(document["refused"]) == ["bad"] and ERROR in document["refused"]["bad"]
    assert document["summary"]["out_of_sample"]["runs"] == 3
    progress = [x for x in captured.err.splitlines() if x.startswith("cross-validate: ")]
    # two publications (the DeepSpeed-Chat table, the Qwen2.5 benchmark): the in-sample line, then a fold each
    assert progress[0].startswith("cross-validate: 3 files scored in sample, 2 folds to fit")
    assert [x.split(" done")[0] for x in progress[1:]] == ["cross-validate: fold 1/2", "cross-validate: fold 2/2"]
    assert all(x.endswith(" s elapsed") for x in progress[1:])
    assert main(["validate", "--cross-validate", "--knobs", "decode_bw_eff:gpu", "--quiet", str(folder)]) == 1
    captured = capsys.readouterr()
    assert "cross-validate: fold" not in captured.err
    # folds fitted: the header and a line per fold, as before
    assert "knobs fitted per fold (left-out publication):\n  without " in captured.out
    assert "no fold was fitted" not in captured.out


def test_a_folder_of_one_plain_config_is_a_refused_row_as_a_folder_of_two(tmp_path, capsys):
    # whether the user gave a folder decides, not how many files it holds: a folder of one had exited 2 with
    # the bare error where a folder of two gave a REFUSED row each (exit 1)
    name = "dpo_llama3.1-8b_1x8xh100.yaml"
    shutil.copy(os.path.join(PLAIN, name), tmp_path / name)
    why = "needs a validation section with 'published' and 'plan'"
    assert main(["validate", str(tmp_path)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(name.removesuffix(".yaml") + " "))
    assert f"REFUSED: [validation] {tmp_path / name}: {why}" in line
    assert main(["validate", "--cross-validate", "--quiet", "--json", str(tmp_path)]) == 1
    document = json.loads(capsys.readouterr().out)
    assert list(document["refused"]) == [name.removesuffix(".yaml")] and why in document["refused"][
        name.removesuffix(".yaml")]
    # the one file given is still bad input (exit 2), on the command line and in Python
    assert main(["validate", "--quiet", str(tmp_path / name)]) == 2
    with pytest.raises(ConfigError, match=why):
        validate([str(tmp_path / name)])
    rows = validate([str(tmp_path / name)], one_file=False)   # a folder's one file: its row
    assert [r.setup for r in rows] == [name.removesuffix(".yaml")] and why in rows[0].error
