"""``estimate --model CONFIG.yaml:ROLE --task train`` takes the config's ``training`` settings of that role (its
own entry over the section's common one, as ``place`` merges them) for the flags left unset, ``recompute`` and
``sharding``, as it takes ``policy``: a config of ``training.actor.recompute: full`` had been priced at the
default recompute. A flag given wins; other tasks take none. No clock is read."""

from __future__ import annotations

import json

import pytest
import yaml

from packplace.cli import main

BASE = "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml"
FLAGS = ["--tp", "4", "--dp", "4", "--seq-len", "2048", "--json", "--quiet"]


def _config(tmp_path, training):
    with open(BASE) as f:
        doc = yaml.safe_load(f)
    doc["training"] = training
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _run(capsys, *argv):
    assert main(["estimate", *argv, *FLAGS]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("training, taken", [
    ({"actor": {"recompute": "full", "sharding": "zero2"}}, {"recompute": "full", "sharding": "zero2"}),
    ({"recompute": "full"}, {"recompute": "full"}),                                   # the common entry
    ({"recompute": "none", "actor": {"recompute": "full"}}, {"recompute": "full"}),   # the role's own wins
    ({"reward": {"recompute": "none"}}, {}),                                          # another role's: not taken
])
def test_the_roles_training_settings_are_the_defaults(capsys, tmp_path, training, taken):
    path = _config(tmp_path, training)
    implicit = _run(capsys, "--model", f"{path}:actor")
    assert {k: v for k, v in implicit["inputs"].get("from_config", {}).items() if k != "framework"} == taken
    explicit = _run(capsys, "--model", f"{path}:actor", *[x for k, v in taken.items() for x in (f"--{k}", v)])
    assert implicit["time_s"] == explicit["time_s"]
    assert implicit["memory"] == explicit["memory"]
    for name, value in taken.items():
        assert implicit["inputs"][name] == value


def test_a_flag_given_wins_and_other_tasks_take_none(capsys, tmp_path):
    path = _config(tmp_path, {"actor": {"recompute": "full", "sharding": "zero2"}})
    doc = _run(capsys, "--model", f"{path}:actor", "--recompute", "none")
    assert doc["inputs"]["recompute"] == "none" and doc["inputs"]["sharding"] == "zero2"
    assert doc["inputs"]["from_config"] == {"framework": "none", "sharding": "zero2"}
    # --optimizer none holds no state to shard: the config's sharding is not taken (nor refused)
    bare = _run(capsys, "--model", f"{path}:actor", "--optimizer", "none")
    assert bare["inputs"]["sharding"] == "none" and "sharding" not in bare["inputs"]["from_config"]
    assert main(["estimate", "--model", f"{path}:actor", "--task", "infer", "--seq-len", "2048", "--json"]) == 0
    infer = json.loads(capsys.readouterr().out)
    assert infer["inputs"]["recompute"] == "none" and set(infer["inputs"]["from_config"]) == {"framework"}


def test_a_config_setting_estimate_refuses_is_named_as_the_configs(capsys, tmp_path):
    # `training.actor.sharding: zero3` (the shipped NeMo RL and DeepSpeed-Chat configs' own) had been refused as
    # "sharding: zero3 gathers ..." with no word that the config, not a flag, had set it; estimate now prices
    # zero3 as place does, taken from the config as the flag would be
    path = _config(tmp_path, {"actor": {"sharding": "zero3"}})
    implicit = _run(capsys, "--model", f"{path}:actor")
    assert implicit["inputs"]["sharding"] == "zero3" and implicit["inputs"]["from_config"]["sharding"] == "zero3"
    assert implicit["time_s"] == _run(capsys, "--model", f"{path}:actor", "--sharding", "zero3")["time_s"]
    # a value estimate refuses is named as the config's own
    path = _config(tmp_path, {"actor": {"sharding": "zero4"}})
    assert main(["estimate", "--model", f"{path}:actor", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("packplace estimate: error: sharding: must be one of none, zero1, zero2, zero3, got "
                          "'zero4'")
    assert f"(sharding zero4 is {path}'s own setting, taken for the unset --sharding: give --sharding" in err
    assert main(["estimate", "--model", f"{path}:actor", "--sharding", "zero1", "--quiet"]) == 0   # a flag wins
    assert main(["estimate", "--model", "qwen2.5-1.5b", "--sharding", "zero4", "--quiet"]) == 2   # a flag's own
    err = capsys.readouterr().err
    assert "sharding: must be one of" in err and "own setting" not in err
