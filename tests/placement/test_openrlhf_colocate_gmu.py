"""OpenRLHF v0.5.8-v0.6.0 lower ``--vllm_gpu_memory_utilization`` to 0.4 under ``--colocate_all_models`` when it
is at least 0.9, the user's value included (:func:`~packplace.placement.model.framework.
colocate_all_gpu_memory_utilization`; openrlhf/cli/train_ppo_ray.py at those tags)."""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.placement.model.framework import colocate_all_gpu_memory_utilization, default_gpu_memory_utilization


@pytest.mark.parametrize("version", ["0.5.8", "v0.5.9", "0.5.9.post1", "0.6.0", "0.6"])
def test_the_override_holds_from_v0_5_8_to_v0_6_0(version):
    # the framework's default at those releases is vLLM's 0.9, which the override lowers
    default = default_gpu_memory_utilization("openrlhf", version)
    assert default == 0.9
    assert colocate_all_gpu_memory_utilization("openrlhf", version, default) == 0.4
    # it overrides a value the user set at or above 0.9 too, and leaves one below alone
    assert colocate_all_gpu_memory_utilization("openrlhf", version, 0.95) == 0.4
    assert colocate_all_gpu_memory_utilization("openrlhf", version, 0.9) == 0.4
    assert colocate_all_gpu_memory_utilization("openrlhf", version, 0.89) == 0.89
    assert colocate_all_gpu_memory_utilization("openrlhf", version, 0.3) == 0.3


@pytest.mark.parametrize("version", ["0.5.7", "0.2.7", "0.6.0.post1", "0.6.0.post3", "0.6.1", "0.6.4", "0.11.0", None])
def test_no_override_outside_those_releases(version):
    value = default_gpu_memory_utilization("openrlhf", version)
    assert colocate_all_gpu_memory_utilization("openrlhf", version, value) == value
    assert colocate_all_gpu_memory_utilization("openrlhf", version, 0.95) == 0.95


def test_other_frameworks_keep_their_value():
    assert colocate_all_gpu_memory_utilization("verl", "0.5.0", 0.9) == 0.9
    assert colocate_all_gpu_memory_utilization("nemo-rl", "0.5.0", 0.95) == 0.95
    assert colocate_all_gpu_memory_utilization("none", None, 0.9) == 0.9


def test_a_malformed_release_names_the_field():
    with pytest.raises(ConfigError, match=r"framework_version: 'six' is not a release"):
        colocate_all_gpu_memory_utilization("openrlhf", "six", 0.9)
