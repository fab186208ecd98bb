"""``estimate``'s ``seq_len`` is the prompt or sequence length of the tasks that have one: unset, each of
them takes 4096 tokens; a decode iteration has none (its sequences hold ``context`` tokens), so a given
``seq_len`` is refused there, and what a framework's dispatch carries for decode and generate follows
``context``, the length the sequences reach."""

from __future__ import annotations

import json

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.model.framework import RAY_BATCH_BYTES_PER_TOKEN, RAY_CALL_LATENCY
from packplace.placement.problem.hardware import PRESETS
from packplace.placement.task_estimate import DEFAULT_SEQ_LEN, estimate

MODEL = "qwen2.5-0.5b"


def _cli(capsys, *flags: str) -> dict:
    assert main(["estimate", "--model", MODEL, *flags, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.mark.parametrize("task", ["train", "infer", "prefill", "generate"])
def test_an_unset_seq_len_is_the_4096_tokens_it_always_was(capsys, task):
    assert DEFAULT_SEQ_LEN == 4096
    unset = _cli(capsys, "--task", task)
    given = _cli(capsys, "--task", task, "--seq-len", "4096")
    assert unset == given and unset["inputs"]["seq_len"] == 4096
    # the library takes the command line's defaults (generate: the prompt plus 2,048 new tokens; it had
    # refused its own default context of 2,048 as shorter than the prompt)
    library = estimate(MODEL, task=task)
    assert library.time_s == pytest.approx(unset["time_s"], rel=1e-12)
    # (a pass that holds no cache reports no context: it had read decode's 2,048)
    assert library.inputs["context"] == unset["inputs"]["context"] == (6144 if task == "generate" else None)


def test_decode_has_no_seq_len_and_refuses_one(capsys):
    document = _cli(capsys, "--task", "decode", "--batch", "8")
    assert document["inputs"]["seq_len"] is None and set(document["inputs"]) >= {"seq_len", "context"}
    with pytest.raises(ConfigError, match=r"^seq_len: means nothing for task decode \(its 8 running sequences "
                                          r"hold context = 2048 cached tokens each\), got 4096; give context$"):
        estimate(MODEL, task="decode", batch=8, seq_len=4096)


@pytest.mark.parametrize("framework", ["verl", "nemo-rl", "openrlhf"])
def test_a_ray_dispatch_carries_the_tokens_the_sequences_reach(framework):
    # dispatch = one remote call + 2·B·(S + T)·28 bytes at the host link (dp = 1); S + T = context
    h200 = PRESETS["h200"]["host_bandwidth"]
    batch = 8

    def dispatch(tokens: int) -> float:
        return RAY_CALL_LATENCY + 2.0 * batch * tokens * RAY_BATCH_BYTES_PER_TOKEN / h200

    short = estimate(MODEL, task="decode", batch=batch, context=2048, framework=framework).parts["overhead"]
    long = estimate(MODEL, task="decode", batch=batch, context=8192, framework=framework).parts["overhead"]
    assert long - short == pytest.approx(dispatch(8192) - dispatch(2048), rel=1e-9)
    per_iteration = short - dispatch(2048)   # the engine's per-step cost, the same at every context
    generate = estimate(MODEL, task="generate", batch=batch, seq_len=1024, context=3072, framework=framework)
    assert generate.parts["overhead"] == pytest.approx((3072 - 1024) * per_iteration + dispatch(3072), rel=1e-9)


@pytest.mark.parametrize("task, kwargs, message", [
    ("train", {"seq_len": 10**9}, "seq_len: 1000000000 tokens is above 10000000, the most a config's "
                                  "workload.context_length / generation_length takes"),
    ("generate", {"seq_len": 10_000_001}, "seq_len: 10000001 tokens is above 10000000"),
    ("decode", {"context": 10**9}, "context: 1000000000 tokens is above 10000000"),
    ("generate", {"seq_len": 4096, "context": 10**9}, "context: 1000000000 tokens is above 10000000"),
])
def test_a_length_above_a_configs_limit_is_refused(task, kwargs, message):
    with pytest.raises(ConfigError) as info:
        estimate(MODEL, "h100-sxm", task, **kwargs)
    assert str(info.value).startswith(message), str(info.value)


def test_the_limit_itself_is_accepted_and_the_cli_refuses_above_it(capsys):
    from packplace.placement.problem.config import WORKLOAD_FIELDS
    assert WORKLOAD_FIELDS["context_length"].maximum == 10_000_000
    assert estimate(MODEL, "h100-sxm", "decode", context=10_000_000).inputs["context"] == 10_000_000
    assert main(["estimate", "--model", MODEL, "--seq-len", "1000000000"]) == 2
    assert "seq_len: 1000000000 tokens is above 10000000" in capsys.readouterr().err
