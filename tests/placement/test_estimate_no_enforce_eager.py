"""``packplace estimate`` prices CUDA graphs on a release that defaults to eager (``--no-enforce-eager``, the
library's ``enforce_eager=False``, a config's ``policy.enforce_eager: false``), as ``place`` does
(``config._enforce_eager``: a value set wins over the release's default)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from packplace.cli import build_parser, main
from packplace.errors import ConfigError
from packplace.placement.checking.validate import load_setup, plan_evaluator
from packplace.placement.model.components import load_table
from packplace.placement.task_estimate import estimate, run_estimate
from packplace.yamlio import load_yaml

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
VERL_DAPO = os.path.join(ROOT, "benchmarks", "validation", "verl_dapo_qwen2.5-math-7b_2x8xh20_colocate.yaml")
DECODE = dict(batch=64, context=4096, framework="verl", framework_version="0.3.0")


def test_false_prices_graphs_on_an_eager_release() -> None:
    """verl v0.3 defaults to eager (ppo_trainer.yaml rollout.enforce_eager: True): unset and True price the eager
    decode, False the graph decode of the same V0 engine: the decode part of v0.6's graphs with V0's sampler in
    place of V1's, the v0 host overhead."""
    default = estimate("qwen2.5-1.5b", "h200", "decode", **DECODE)
    eager = estimate("qwen2.5-1.5b", "h200", "decode", enforce_eager=True, **DECODE)
    graphs = estimate("qwen2.5-1.5b", "h200", "decode", enforce_eager=False, **DECODE)
    v06 = estimate("qwen2.5-1.5b", "h200", "decode", batch=64, context=4096, framework="verl",
                   framework_version="0.6.0")
    assert default.inputs["enforce_eager"] is True and eager.parts == default.parts
    assert graphs.inputs["enforce_eager"] is False and graphs.inputs["engine_generation"] == "v0"
    assert graphs.parts["decode"] < default.parts["decode"]
    # V0's sampler with raw log-probabilities (88 bytes per vocabulary entry, 20 kernels) against v0.6's V1 one
    # (64, 14), after the graph (its host issue, 20 x 20.41 us, hidden behind the 3.7 ms graph): 6 kernels'
    # fixed 3.34 us and 24 x 151,936 x 64 bytes at 4.215 TB/s, 75.41 us
    table = load_table("h200")
    assert graphs.parts["decode"] - v06.parts["decode"] == pytest.approx(
        6 * table.kernel_gpu_s + 24 * 151_936 * 64 / table.stream_bandwidth, rel=1e-9)
    assert graphs.parts["decode"] - v06.parts["decode"] == pytest.approx(75.41e-6, abs=0.01e-6)
    assert graphs.parts["overhead"] == default.parts["overhead"]   # the release's V0 host time stays
    # a release that defaults to graphs: False changes nothing
    assert estimate("qwen2.5-1.5b", "h200", "decode", batch=64, context=4096, framework="verl",
                    framework_version="0.6.0", enforce_eager=False).parts == v06.parts


def _run(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_the_cli_flag_is_three_way(capsys) -> None:
    base = ["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h200", "--task", "decode", "--batch", "64",
            "--context", "4096", "--framework", "verl", "--framework-version", "0.3.0", "--json"]
    assert _run(capsys, base)["inputs"]["enforce_eager"] is True
    assert _run(capsys, [*base, "--enforce-eager"])["inputs"]["enforce_eager"] is True
    off = _run(capsys, [*base, "--no-enforce-eager"])
    assert off["inputs"]["enforce_eager"] is False
    graphs = estimate("qwen2.5-1.5b", "h200", "decode", enforce_eager=False, **DECODE)
    assert off["time_s"] == pytest.approx(graphs.time_s, rel=1e-12)


@pytest.mark.parametrize("extra, message", [
    (["--task", "train"], "--no-enforce-eager: means nothing for --task train (it sets decode, generate)"),
    (["--task", "decode", "--framework", "deepspeed-chat"], "--no-enforce-eager: a vLLM setting; the deepspeed-chat"),
])
def test_the_cli_refuses_false_where_it_means_nothing(extra, message) -> None:
    args = build_parser().parse_args(["estimate", "--model", "qwen2.5-1.5b", "--gpu", "h200", "--no-enforce-eager",
                                      *extra])
    with pytest.raises(ConfigError) as info:
        run_estimate(args)
    assert str(info.value).startswith(message), str(info.value)


def _verl_config(tmp_path, eager: bool | None) -> str:
    """The verl DAPO 2 x 8 H20 file at release 0.4.0 (rollout enforce_eager: True), policy.enforce_eager ``eager``
    (``None``: removed, the release's)."""
    cfg = load_yaml(VERL_DAPO)
    cfg["policy"]["framework_version"] = "0.4.0"
    cfg["policy"].pop("enforce_eager", None)
    if eager is not None:
        cfg["policy"]["enforce_eager"] = eager
    path = tmp_path / f"verl_{eager}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_a_config_s_false_is_taken_and_matches_place(capsys, tmp_path) -> None:
    """``--model CONFIG:actor --task generate`` takes the config's ``enforce_eager: false`` (it took only true): the
    engine then holds its CUDA graphs, and estimate's peak moves by what the evaluator's ``actor.generate`` vertex of
    that file moves (the vertex also holds the colocated trainer's kept bytes, which estimate's engine does not)."""
    charged, priced = {}, {}
    for eager in (False, None):
        path = _verl_config(tmp_path, eager)
        instance, plan, _ = load_setup(path)
        assert instance.engine.enforce_eager is (eager is None)
        charged[eager] = plan_evaluator(instance, plan).vertex_memory(plan)["actor.generate"]
        priced[eager] = _run(capsys, ["estimate", "--model", f"{path}:actor", "--task", "generate", "--tp", "2",
                                      "--batch", "96", "--seq-len", "2048", "--context", "22528", "--json"])
    assert priced[False]["inputs"]["from_config"]["enforce_eager"] is False
    assert priced[False]["inputs"]["enforce_eager"] is False and priced[None]["inputs"]["enforce_eager"] is True
    assert "enforce_eager" not in priced[None]["inputs"]["from_config"]
    graphs = priced[False]["memory"]["peak_bytes"] - priced[None]["memory"]["peak_bytes"]
    assert graphs > 1e9   # the engine's CUDA graphs, held beside its pool
    assert graphs == pytest.approx(charged[False] - charged[None], rel=1e-9)
    assert priced[False]["time_s"] < priced[None]["time_s"]
