"""The no-fit hint tries full activation recomputation (``training: {recompute: full}``), and verl's FSDP workers
recompute every layer where the config leaves ``recompute`` unset (``model.enable_gradient_checkpointing: true``,
``framework.trainer_recompute``). The case: GRPO of a Qwen3-8B shape on one H100 node, 256 prompts x 8 samples of
1,024 + 4,096 tokens, verl 0.7.0 forced onto its FSDP workers."""

from __future__ import annotations

import pytest

from packplace.errors import InfeasibleError
from packplace.placement import api
from packplace.placement.fit_hints import SETTINGS
from packplace.placement.problem.config import build_instance

CONFIG = {
    "hardware": {"preset": "h100-sxm", "nodes_per_rack": 1},
    "models": {"actor": {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096,
                         "intermediate_size": 12288, "vocab_size": 151936, "num_attention_heads": 32, "head_dim": 128,
                         "num_key_value_heads": 8}, "reward": "rule"},
    "workload": {"batch_size": 256, "samples_per_prompt": 8, "context_length": 1024, "generation_length": 4096},
    "policy": {"algorithm": "grpo", "framework": "verl", "framework_version": "0.7.0", "trainer_backend": "fsdp",
               "ppo_max_token_len_per_gpu": 16384, "log_prob_max_token_len_per_gpu": 32768},
}


def _instance(training=None):
    return build_instance({**CONFIG, **({"training": training} if training else {})})


def test_the_hint_tries_full_recompute_first():
    assert SETTINGS[0] == ("training: {recompute: full}", {"recompute": "full"}, {})


def test_verl_fsdp_fits_by_its_own_default_and_the_hint_names_it_where_selective_was_set():
    unset, full = _instance(), _instance({"recompute": "full"})
    assert unset.training["actor"].recompute == "full"   # enable_gradient_checkpointing: true
    a = api.solve_placement(unset, "greedy", time_limit_s=60)
    b = api.solve_placement(full, "greedy", time_limit_s=60)
    assert a.solution is not None and a.objective == pytest.approx(b.objective, rel=1e-12)
    # set to selective the trainer's activations (dynamic batches of 16,384 tokens a GPU) do not fit on 80 GB: the
    # hint names full recomputation, at the step of the plan with it set
    with pytest.raises(InfeasibleError) as err:
        api.solve_placement(_instance({"recompute": "selective"}), "greedy", time_limit_s=60)
    assert "fits with training: {recompute: full}: step " in str(err.value)
