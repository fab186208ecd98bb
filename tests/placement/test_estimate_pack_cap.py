"""Edges of `estimate --pack-tokens` and of a context-parallel degree no strategy can take."""

from __future__ import annotations

import pytest

from packplace.errors import ConfigError
from packplace.placement.api import check_instance
from packplace.placement.problem.config import POLICY_FIELDS, build_instance, load_yaml
from packplace.placement.task_estimate import estimate


def test_estimate_refuses_a_pack_above_what_the_config_takes():
    cap = int(POLICY_FIELDS["train_mb_tokens"].maximum)
    with pytest.raises(ConfigError, match=rf"pack_tokens: {cap + 1} tokens is above {cap}"):
        estimate("llama3.1-8b", task="train", framework="nemo-rl", pack_tokens=cap + 1)
    packed = estimate("llama3.1-8b", task="train", framework="nemo-rl", pack_tokens=8192, seq_len=1024)
    assert packed.inputs["micro_batch"] == 8      # 8,192 // 1,024 equal sequences in the pack


def test_no_strategy_for_a_context_parallel_degree_names_it(unhurried):
    cfg = load_yaml("configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml")
    cfg.setdefault("training", {}).setdefault("actor", {})["context_parallel"] = 3   # divides no dp of 16 GPUs
    with pytest.raises(ConfigError, match=r"with training.context_parallel 3 dividing the data-parallel degree"):
        check_instance(build_instance(cfg), time_limit_s=unhurried)
