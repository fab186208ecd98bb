"""``estimate --hw FIELD=VALUE``: a field given twice, the preset or the cluster's size (which ``estimate``
derives from ``--gpu`` and ``tp · pp · dp``) are refused, and ``gpus_per_node`` sizes a cluster that holds
every rank of the strategy."""

from __future__ import annotations

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.task_estimate import estimate, resolve_hardware


@pytest.mark.parametrize("flags, line", [
    (["--hw", "memory_per_gpu=8e10", "--hw", "memory_per_gpu=1e9"],
     "--hw: memory_per_gpu given twice (80000000000.0, then '1e9'); give it once"),
    (["--hw", "preset=a100"],
     "hardware: preset 'a100' is set by estimate itself (give the preset as gpu (--gpu)); drop it"),
    (["--dp", "16", "--hw", "nodes_per_rack=1"],
     "hardware: nodes_per_rack 1 is set by estimate itself (the cluster holds the strategy's tp x pp x cp x dp "
     "GPUs); drop it"),
    (["--hw", "racks=2"],
     "hardware: racks 2 is set by estimate itself (the cluster holds the strategy's tp x pp x cp x dp GPUs); drop "
     "it"),
    (["--hw", "gpus_per_node=2.5"], "[hardware] gpus_per_node: must be an integer >= 1, got 2.5"),
])
def test_a_hardware_flag_estimate_cannot_apply_is_refused(capsys, flags, line):
    # each was taken: the last value, an a100 priced under --gpu h200, 16 ranks on one node of 8 GPUs
    assert main(["estimate", "--model", "qwen2.5-0.5b", *flags]) == 2
    assert capsys.readouterr().err.splitlines() == [f"packplace estimate: error: {line}"]


@pytest.mark.parametrize("per_node, gpus, nodes", [(4, 16, 4), (16, 16, 1), (8, 16, 2), (4, 2, 1)])
def test_gpus_per_node_sizes_a_cluster_holding_every_rank(per_node, gpus, nodes):
    cluster, hw = resolve_hardware("h200", {"gpus_per_node": per_node}, gpus)
    assert cluster.num_gpus >= gpus and cluster.nodes_per_rack == nodes
    assert cluster.gpus_per_node == min(per_node, gpus)


def test_the_data_parallel_all_reduce_crosses_nodes_of_the_given_size():
    one_node = estimate("qwen2.5-0.5b", dp=8).parts["communication"]
    assert estimate("qwen2.5-0.5b", dp=8, hardware={"gpus_per_node": 8}).parts["communication"] == one_node
    assert estimate("qwen2.5-0.5b", dp=8, hardware={"gpus_per_node": 4}).parts["communication"] > one_node
    with pytest.raises(ConfigError, match="racks 1 is set by estimate itself"):
        estimate("qwen2.5-0.5b", hardware={"racks": 1})


def test_a_placement_config_given_as_the_model_names_its_models(capsys):
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    config = os.path.join(root, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")
    assert main(["estimate", "--model", config]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"packplace estimate: error: model: {config!r} is a placement config; name one of its models (actor) as "
        f"{config}:ROLE, or give a model entry, a config.json or a preset"]
