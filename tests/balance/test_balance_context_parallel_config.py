"""The ``context_parallel`` section of a balance config and ``packplace balance`` on it: the instance it
builds, the fields it refuses, the printed CP groups and the JSON document, against hand-computed plans."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from packplace.balance.config import (
    build_context_parallel_instance,
    build_instance,
    load_any_config,
    load_context_parallel_config,
)
from packplace.context_parallel import ContextParallelInstance, CPCost
from packplace.errors import ConfigError, InfeasibleError
from tests.conftest import one_line, run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs" / "context_parallel" / "sft_long_tail_llama8b_4x8xh200.yaml"
LLAMA = {"layers": 32, "hidden_dim": 4096, "ffn_dim": 14336, "vocab_size": 128256, "num_kv_heads": 8, "head_dim": 128}


def _config(**extra):
    config = {"name": "tiny", "data_parallel_size": 2,
              "context_parallel": {"max": 2, "max_tokens_per_rank": 4}, "samples": {"lengths": [8, 4, 3, 2, 2, 1]}}
    config.update(extra)
    return config


def test_the_section_builds_a_context_parallel_instance():
    instance = build_context_parallel_instance(_config())
    assert isinstance(instance, ContextParallelInstance)
    assert (instance.dp, instance.max_cp, instance.ranks, instance.sizes) == (2, 2, 4, (1, 2))
    assert instance.max_tokens_per_rank == 4 and instance.objective == "step_time" and instance.cost == CPCost()
    assert instance.tokens.tolist() == [8, 4, 3, 2, 2, 1] and instance.keys == tuple(range(6))
    # seq_len is the default cap; sizes, min, micro_batches and gpus_per_node pass through
    sized = build_context_parallel_instance({"data_parallel_size": 2, "seq_len": 8, "objective": "makespan",
                                             "context_parallel": {"max": 4, "sizes": [2, 4, 8], "micro_batches": 2,
                                                                  "gpus_per_node": 4},
                                             "samples": {"items": [{"key": "a", "tokens": 9}, {"key": "b", "tokens": 3},
                                                                   {"key": "c", "tokens": 5}]}})
    assert (sized.sizes, sized.min_cp_size, sized.max_tokens_per_rank, sized.micro_batches, sized.gpus_per_node) == \
        ((2, 4, 8), 2, 8, 2, 4)
    assert sized.keys == ("a", "b", "c") and sized.objective == "makespan"


def test_kind_flops_costs_the_model_on_the_hardware_preset():
    instance = build_context_parallel_instance(_config(cost={"kind": "flops", "model": LLAMA, "hardware": "h200"}))
    cost = instance.cost
    # Llama-3.1-8B: 3 passes x 32 layers x K and V of 8 heads x 128 x 2 bytes per token of the shard
    assert cost.ring_bytes_per_token == 3 * 32 * 2 * 8 * 128 * 2 and cost.ring_messages == 3 * 32
    assert cost.linear_s_per_token > 0 and cost.attention_s_per_token2 > 0 and cost.overlap
    slower = build_context_parallel_instance(_config(cost={"kind": "flops", "model": LLAMA, "flops_per_s": 1e14}))
    assert slower.cost.linear_s_per_token > cost.linear_s_per_token


@pytest.mark.parametrize("extra, message", [
    ({"local_batch_size": 2}, "local_batch_size: not used with context_parallel (the micro-batches are "
                              "context_parallel.micro_batches)"),
    ({"reference": "auto"}, "reference: not used with context_parallel"),
    ({"objective": "lockstep"}, "objective: must be one of step_time, makespan, balance, got 'lockstep'"),
    ({"context_parallel": {"max": 0}}, "context_parallel.max: must be an integer in [1, "),
    ({"context_parallel": {"max": 2, "cap": 4}}, "context_parallel.cap: unknown field"),
    ({"context_parallel": {"max": 2, "sizes": [3]}}, "context_parallel.sizes: 3 does not divide the 4 ranks"),
    ({"context_parallel": {"max": 2, "sizes": "1,2"}}, "context_parallel.sizes: must be a non-empty list"),
    ({"cost": {"kind": "flops"}}, "cost.model: missing required field (kind flops)"),
    ({"cost": {"hardware": "h100"}}, "cost.hardware: only used with kind flops, but kind is 'workload'"),
    ({"cost": {"kind": "flops", "model": LLAMA, "hardware": "tpu"}}, "cost.hardware: unknown preset 'tpu'"),
    ({"samples": {"items": [{"key": "a", "tokens": 3, "cost": 1.0}]}},
     "samples.items[0].cost: not used with context_parallel"),
    ({"samples": {"lengths": [3, 0]}}, "samples.lengths[1]: must be an integer in [1, "),
])
def test_bad_fields_are_one_line_naming_the_field(extra, message):
    with pytest.raises(ConfigError) as error:
        build_context_parallel_instance(_config(**extra))
    assert str(error.value).startswith(message)


def test_a_sequence_no_group_holds_is_infeasible_and_the_plain_loader_points_to_the_right_one(tmp_path):
    with pytest.raises(InfeasibleError):
        build_context_parallel_instance(_config(samples={"lengths": [17]}))   # 4 ranks x 4 tokens
    with pytest.raises(ConfigError, match="^context_parallel: this config describes a dynamic context-parallel"):
        build_instance(_config())
    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump(_config()))
    assert isinstance(load_any_config(path), ContextParallelInstance)
    assert isinstance(load_context_parallel_config(path), ContextParallelInstance)
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({"seq_len": 8, "data_parallel_size": 2, "samples": {"lengths": [3, 4]}}))
    with pytest.raises(ConfigError, match="^context_parallel: missing required section"):
        load_context_parallel_config(plain)


def test_packplace_balance_prints_each_micro_batchs_cp_groups_and_writes_them(tmp_path, capsys):
    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump(_config(context_parallel={"max": 2, "sizes": [1, 2, 4], "max_tokens_per_rank": 4})))
    out = tmp_path / "plan.json"
    code, stdout, _ = run_cli(capsys, "balance", "--config", path, "--out", out, "--solver", "megatron")
    assert code == 0
    assert stdout.startswith("tiny: 6 sequences, D=2, max CP=2 (4 ranks), CP sizes [1, 2, 4], "
                             "max_tokens_per_rank=4")
    header = next(line for line in stdout.splitlines() if line.startswith("micro-batch"))
    assert header.split() == ["micro-batch", "ranks", "cp", "sequences", "tokens", "keys", "time", "(token^2)",
                              "micro-batch", "time", "(token^2)"]
    document = json.loads(out.read_text())
    assert document["problem"] == "context_parallel" and document["report"]["parameters"]["ranks"] == 4
    plan = document["report"]["plan"]
    keys = sorted(k for slot in plan for group in slot["groups"] for k in group["keys"])
    assert keys == list(range(6))
    for slot in plan:
        ranks = [r for group in slot["groups"] for r in range(group["ranks"][0], group["ranks"][1] + 1)]
        assert ranks == [0, 1, 2, 3]
        assert slot["time"] == pytest.approx(max(group["time"] for group in slot["groups"]))
        for group in slot["groups"]:   # Megatron's workload: sum of s^2 over the group's size
            lengths = [[8, 4, 3, 2, 2, 1][k] for k in group["keys"]]
            assert group["time"] == pytest.approx(sum(n * n for n in lengths) / group["size"])
            assert group["tokens"] == sum(lengths) <= 4 * group["size"]
    assert document["objective"] == pytest.approx(sum(slot["time"] for slot in plan))
    assert document["bound"] == pytest.approx(24.5)        # (64 + 16 + 9 + 4 + 4 + 1) / 4 ranks
    assert document["objective"] == pytest.approx(34.0)    # Megatron's scheduler on this batch (hand-traced)
    for row in (f"{group['ranks'][0]}-{group['ranks'][1]}" for slot in plan for group in slot["groups"]
                if group["size"] > 1):
        assert row in stdout
    # both time columns at one precision: six significant digits of the largest time (tens of token^2: 4 decimals)
    lines = stdout.splitlines()
    table = lines[lines.index(header) + 2:]
    table = table[:table.index("")]
    cells = [cell for line in table for cell in line.split() if re.fullmatch(r"\d+\.\d+", cell)]
    assert len(cells) == sum(len(slot["groups"]) + 1 for slot in plan)
    assert {len(cell.split(".")[1]) for cell in cells} == {4}
    assert cells[0] == f"{plan[0]['groups'][0]['time']:.4f}"


def test_packplace_balance_refuses_what_a_cp_config_cannot_do(tmp_path, capsys):
    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump(_config()))
    code, _, err = run_cli(capsys, "balance", "--config", path, "--min-gain", "0.1")
    assert code == 2 and one_line(err).endswith("--min-gain: not available for a context_parallel config")
    code, _, err = run_cli(capsys, "balance", "--config", path, "--solver", "lpt")
    assert code == 2 and "lpt" in one_line(err)


def test_the_shipped_example_runs_with_every_heuristic_backend(capsys, tmp_path):
    assert isinstance(load_any_config(EXAMPLE), ContextParallelInstance)
    steps = {}
    for backend in ("greedy", "megatron", "static"):
        out = tmp_path / f"{backend}.json"
        code, _, _ = run_cli(capsys, "balance", "--config", EXAMPLE, "--solver", backend, "--quiet", "--out", out)
        document = json.loads(out.read_text())
        assert code == 0 and document["status"] in ("feasible", "optimal")
        assert document["bound"] <= document["objective"]
        steps[backend] = document["objective"]
    # greedy starts from Megatron's plan; one CP size for all is the slowest here
    assert steps["greedy"] <= steps["megatron"] and steps["greedy"] < steps["static"]


@pytest.mark.parametrize("lengths,count,objective", [([8, 4, 6, 4], 4, 132.0), ([4, 4, 4, 4], 3, 64.0)])
def test_a_fixed_micro_batch_count_above_greedys_own_is_reached(tmp_path, capsys, lengths, count, objective):
    # one rank of 8 tokens: [8, 4, 6, 4] in 4 micro-batches is each alone (64 + 16 + 36 + 16); [4, 4, 4, 4] in 3 is
    # {4, 4} (32) and two alone (16 + 16); both proven optimal by the bound
    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump(_config(data_parallel_size=1, samples={"lengths": lengths}, context_parallel={
        "max": 1, "max_tokens_per_rank": 8, "micro_batches": count})))
    out = tmp_path / "plan.json"
    code, stdout, err = run_cli(capsys, "balance", "--config", path, "--out", out)
    assert code == 0, err
    document = json.loads(out.read_text())
    assert len(document["report"]["plan"]) == count
    assert document["objective"] == pytest.approx(objective)
    assert f"note: {count} micro-batches" in stdout


def test_a_fixed_micro_batch_count_the_token_cap_rules_out_names_the_constraint(tmp_path, capsys):
    path = tmp_path / "cp.yaml"
    path.write_text(yaml.safe_dump(_config(data_parallel_size=1, samples={"lengths": [8, 8, 8]}, context_parallel={
        "max": 1, "max_tokens_per_rank": 8, "micro_batches": 2})))
    code, _, err = run_cli(capsys, "balance", "--config", path)
    assert code != 0
    assert one_line(err) == ("packplace balance: infeasible: context_parallel.micro_batches: 2 micro-batches of 1 "
                             "ranks hold at most 16 tokens (max_tokens_per_rank 8), the sequences have 24")
