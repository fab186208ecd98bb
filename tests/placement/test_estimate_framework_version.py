"""`estimate` prices a framework release and verl's entropy bonus as `place` does, and NeMo RL's packs as the
step model pads them on the backend the strategy runs."""

from __future__ import annotations

import json

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.model.components import load_table, pass_times
from packplace.placement.model.framework import trainer_logit_bytes
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.placement.task_estimate import _logit_bytes, estimate, resolve_model

#: Llama 3.1 8B's vocabulary and the default tokens per sequence: logits bytes = tokens · V · bytes per entry.
VOCAB, TOKENS = 128256, 4096


@pytest.mark.parametrize("task, kwargs, per_entry", [
    ("train", {}, 4.0),                                                    # current verl: bf16 logits, in place
    ("train", {"framework_version": "0.4.0"}, 4.0),
    ("train", {"framework_version": "0.3.0"}, 12.0),                       # before 0.4: the model's 10 / 12
    ("train", {"framework_version": "0.6.0", "entropy_coeff": 0.001}, 12.0),  # entropy bonus: out of place
    ("train", {"entropy_coeff": 0.0}, 4.0),
    ("infer", {}, 2.0),
    ("infer", {"framework_version": "v0.3"}, 10.0),
    ("infer", {"entropy_coeff": 0.01}, 10.0),
])
def test_verl_logit_bytes_follow_the_release_and_the_entropy_bonus(task, kwargs, per_entry):
    result = estimate("llama3.1-8b", "h100-sxm", task, framework="verl", **kwargs)
    rule = _logit_bytes("verl", kwargs.get("framework_version"), task, kwargs.get("entropy_coeff", 0.0))
    if rule is None:   # before verl 0.4 or with the entropy bonus: the memory model's 10 / 12 bytes
        assert per_entry == (12.0 if task == "train" else 10.0)
    else:              # (forward, loss backward) bytes per entry
        assert rule[1 if task == "train" else 0] == per_entry
    if task == "train" and rule is not None:
        # verl's 4 bytes in place: the loss phase (4096 x 128,256 x 4 bytes = 2.1 GB) is below a layer's backward
        # (its saved activations plus the backward's working set), which sets the peak, so the peak's parts carry
        # no logits
        assert result.memory["logits"] == 0.0
    else:
        assert result.memory["logits"] == TOKENS * VOCAB * per_entry
    assert result.inputs["entropy_coeff"] == kwargs.get("entropy_coeff", 0.0)


def test_estimate_takes_the_logit_bytes_place_takes_for_the_same_config():
    # the config's policy.framework_version and policy.entropy_coeff, read by the config parser, give the
    # bytes place's candidates price (trainer_logit_bytes of the instance); estimate's flags give the same
    cfg = load_yaml("configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml")
    for version, coeff in (("0.3.0", 0.0), ("0.4.0", 0.0), ("0.6.0", 0.001), (None, 0.0)):
        policy = dict(cfg.get("policy", {}), framework="verl", entropy_coeff=coeff)
        if version is not None:
            policy["framework_version"] = version
        instance = build_instance(dict(cfg, policy=policy))
        placed = trainer_logit_bytes(instance.framework, instance.framework_version, instance.entropy_coeff > 0)
        assert _logit_bytes("verl", version, "train", coeff) == placed
    assert _logit_bytes("none", None, "train", 0.0) is None


@pytest.mark.parametrize("kwargs, message", [
    ({"framework": "nemo-rl", "entropy_coeff": 0.01},
     "entropy_coeff: 0.01 is verl's entropy bonus (actor.entropy_coeff), which the model prices for framework "
     "verl only, not nemo-rl; drop it"),
    ({"framework": "verl", "entropy_coeff": -1}, "entropy_coeff: must be a finite number in [0, 1e6], got -1"),
    ({"framework": "verl", "entropy_coeff": "0.1"}, "entropy_coeff: must be a finite number in [0, 1e6], got '0.1'"),
    ({"framework": "verl", "framework_version": "0.x"}, "framework_version: '0.x' is not a release"),
    ({"framework": "verl", "framework_version": "0.0.9"}, "framework_version: '0.0.9' is before verl 0.1"),
    ({"framework": "deepspeed-chat", "framework_version": "0.1.0"},
     "framework_version: '0.1.0' is set, but the deepspeed-chat framework has no version-dependent defaults"),
])
def test_bad_release_or_entropy_values_name_the_field_and_value(kwargs, message):
    with pytest.raises(ConfigError) as info:
        estimate("llama3.1-8b", "h100-sxm", "train", **kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_entropy_bonus_refused_for_an_engine_task():
    with pytest.raises(ConfigError, match="entropy_coeff: 0.01 changes the trainer's logits .* not task decode"):
        estimate("llama3.1-8b", "h100-sxm", "decode", framework="verl", entropy_coeff=0.01)


def test_cli_takes_the_release_and_entropy_for_training(capsys):
    args = ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--framework", "verl", "--json"]
    assert main(args + ["--framework-version", "0.3.0"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["logits"] == TOKENS * VOCAB * 12
    assert main(args + ["--entropy-coeff", "0.001", "--task", "infer"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["memory"]["logits"], document["inputs"]["entropy_coeff"]) == (TOKENS * VOCAB * 10, 0.001)
    assert main(args + ["--framework-version", "latest"]) == 2
    assert capsys.readouterr().err.startswith("packplace estimate: error: framework_version: 'latest' is not a release")
    assert main(args[:-3] + ["--framework", "openrlhf", "--entropy-coeff", "0.1"]) == 2
    assert "entropy_coeff: 0.1 is verl's entropy bonus" in capsys.readouterr().err


# -- NeMo RL packs: the DTensor pad -------------------------------------------------------------------------------
def _packed(task: str, **kwargs):
    # 1,025-token sequences rounded to TP 2's multiple, 1,026: an 8,192-token pack holds 7 of them (7,182 tokens)
    return estimate("llama3.1-8b", "h100-sxm", task, seq_len=1025, tp=2, framework="nemo-rl", pack_tokens=8192,
                    **kwargs)


def test_dtensor_training_pack_is_priced_at_train_mb_tokens():
    packed = _packed("train")
    assert (packed.inputs["pack_backend"], packed.inputs["pack_priced_tokens"]) == ("dtensor", 8192)
    # the pad's tokens run every linear kernel; the attention stays each sequence's own: 7 · 1,026² over 8,192
    model = resolve_model("llama3.1-8b")
    table = load_table("h100-sxm")
    expected = pass_times(table, model, tokens=8192, seq_len=7 * 1026 ** 2 / 8192, train=True, layers=model.layers,
                          head=True, tp=2)   # bf16 weights: place prices no autocast
    assert packed.parts["forward"] == pytest.approx(expected.forward, rel=1e-12)
    assert packed.parts["backward"] == pytest.approx(expected.backward, rel=1e-12)
    # memory and the tensor-parallel all-reduces follow the tokens: those of one 8,192-token row
    row = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=8192, tp=2, framework="nemo-rl")
    assert packed.memory == row.memory
    assert packed.parts["communication"] == pytest.approx(row.parts["communication"], rel=1e-12)
    unpadded = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=1026, micro_batch=7, tp=2, framework="nemo-rl")
    assert unpadded.parts["forward"] < packed.parts["forward"] < row.parts["forward"]


def test_knob_model_prices_the_same_pad():
    packed = _packed("train", table="none")
    row = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=8192, tp=2, framework="nemo-rl", table="none")
    unpadded = estimate("llama3.1-8b", "h100-sxm", "train", seq_len=1026, micro_batch=7, tp=2, framework="nemo-rl",
                        table="none")
    assert packed.parts["communication"] == pytest.approx(row.parts["communication"], rel=1e-12)
    assert unpadded.parts["forward"] < packed.parts["forward"] < row.parts["forward"]


def test_log_prob_packs_padded_from_release_0_6_on_dtensor_only():
    assert _packed("infer").inputs["pack_priced_tokens"] == 7 * 1026                  # unversioned: v0.5's rule
    assert _packed("infer", framework_version="0.5.0").inputs["pack_priced_tokens"] == 7 * 1026
    padded = _packed("infer", framework_version="0.6.0", train_mb_tokens=16384)
    assert padded.inputs["pack_priced_tokens"] == 16384
    assert padded.memory == estimate("llama3.1-8b", "h100-sxm", "infer", seq_len=16384, tp=2,
                                     framework="nemo-rl").memory
    # a training pack below the log-prob pack's tokens adds no pad
    assert _packed("infer", framework_version="0.7", train_mb_tokens=4096).inputs["pack_priced_tokens"] == 7 * 1026
    # Megatron (pipeline parallelism) pads nothing
    megatron = _packed("train", pp=2)
    assert (megatron.inputs["pack_backend"], megatron.inputs["pack_priced_tokens"]) == ("megatron", 7 * 1026)


@pytest.mark.parametrize("task, kwargs, message", [
    ("infer", {"framework_version": "0.6.0"},
     "train_mb_tokens: needed with task infer and pack_tokens under NeMo RL 0.6.0: its DTensor workers pad"),
    ("infer", {"framework_version": "0.5.0", "train_mb_tokens": 16384},
     "train_mb_tokens: 16384 changes nothing here: NeMo RL 0.5.0 pads training packs only; drop it"),
    ("infer", {"framework_version": "0.6.0", "train_mb_tokens": 16384, "pp": 2},
     "train_mb_tokens: 16384 changes nothing here: the Megatron-Core workers (which trainer_backend auto picks for "
     "pp 2 / ep 1) do not pad to it; drop it"),
    ("infer", {"framework_version": "0.6.0", "train_mb_tokens": 16384, "trainer_backend": "megatron"},
     "train_mb_tokens: 16384 changes nothing here: the Megatron-Core workers (trainer_backend megatron) do not pad "
     "to it; drop it"),
    ("infer", {"framework_version": "0.6.0", "train_mb_tokens": 0}, "train_mb_tokens: must be an integer >= 1, got 0"),
    ("train", {"train_mb_tokens": 16384}, "train_mb_tokens: 16384 with task train: the training pack is pack_tokens"),
    ("train", {"framework_version": "0.2.0"}, "pack_tokens: NeMo RL 0.2.0 has no sequence packing"),
])
def test_pack_settings_that_do_not_apply_are_refused(task, kwargs, message):
    with pytest.raises(ConfigError) as info:
        _packed(task, **kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_train_mb_tokens_without_packs_is_refused():
    with pytest.raises(ConfigError, match="train_mb_tokens: 8192 is the training pack .* goes with pack_tokens"):
        estimate("llama3.1-8b", "h100-sxm", "infer", framework="nemo-rl", train_mb_tokens=8192)


def test_text_output_says_how_a_pack_was_priced():
    from packplace.placement.task_estimate import format_estimate
    # 1,025-token sequences rounded to 1,026 (TP 2): 1 pad token each, 7 in the pack; the DTensor pack padded
    # to 8,192 holds 8,192 - 7,175 = 1,017 pad tokens, the Megatron-Core pack only the rounding's 7
    rounded = ("pack: 7 sequences of 1025 tokens (7175), each padded to 1026 (a multiple of tp = 2: 1 pad token per "
               "sequence, 7 in all), on NeMo RL's")
    assert f"{rounded} DTensor workers: the pack padded to 8192 tokens (1017 pad tokens)" in \
        format_estimate(_packed("train")).splitlines()
    assert (f"{rounded} Megatron-Core workers: 7182 tokens, 7 of them pad; memory sized at the whole 8192-token "
            "pack, as place sizes it") in \
        format_estimate(_packed("train", pp=2)).splitlines()


def test_a_release_past_the_newest_known_is_warned_about_as_place_does(capsys, recwarn):
    from packplace.errors import FrameworkVersionWarning
    with pytest.warns(FrameworkVersionWarning, match=r"^framework_version: '99.0' is newer than verl 0\.7\.x"):
        future = estimate("llama3.1-8b", "h100-sxm", "train", framework="verl", framework_version="99.0")
    newest = estimate("llama3.1-8b", "h100-sxm", "train", framework="verl", framework_version="0.7.0")
    assert not [w for w in recwarn if issubclass(w.category, FrameworkVersionWarning)]
    assert (future.time_s, future.memory) == (newest.time_s, newest.memory)   # the newest release's defaults
    args = ["estimate", "--model", "llama3.1-8b", "--gpu", "h100-sxm", "--task", "generate", "--framework", "verl",
            "--json"]
    assert main(args + ["--framework-version", "99.0"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["inputs"]["framework_version"] == "99.0"   # stdout: the JSON document only
    assert "packplace estimate: warning: framework_version: '99.0' is newer than verl 0.7.x" in err
    assert main(args + ["--framework-version", "0.7.0"]) == 0
    assert "warning" not in capsys.readouterr().err
