"""verl's FSDP passes under ``use_remove_padding`` hold a micro-batch's real tokens: the bound on the sum of its
responses, and the shipped config of verl's GRPO Qwen2-7B example on one node of 8 H100."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import yaml

from packplace.errors import ConfigError
from packplace.placement.candidates import cost_model
from packplace.placement.checking.validate import load_setup_mapping, plan_evaluator, predict
from packplace.placement.emit import emit
from packplace.placement.model.memory import (
    REMOVE_PADDING_PASS_TAIL,
    dynamic_padded_peak_tokens,
    padded_peak_tokens,
    peak_pass_tokens,
    remove_padding_peak_tokens,
)
from packplace.placement.model.pass_memory import pass_memory
from packplace.placement.problem.workload import Workload, response_sum_bound

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, "configs", "placement", "published", "grpo_verl_qwen2-7b_1x8xh100.yaml")
#: The plan examples/grpo_trainer/run_qwen2-7b.sh implies: vLLM TP 2 x 4 replicas, actor and reference on all 8
#: GPUs at ppo_micro_batch_size_per_gpu / log_prob_micro_batch_size_per_gpu 40.
SCRIPT_PLAN = {
    "actor.generate": {"dp": 4, "pp": 1, "tp": 2, "micro_batch": 1280, "origin": [0, 0, 0], "extent": [1, 1, 8]},
    "reference.infer": {"dp": 8, "pp": 1, "tp": 1, "micro_batch": 40, "origin": [0, 0, 0], "extent": [1, 1, 8]},
    "actor.train": {"dp": 8, "pp": 1, "tp": 1, "micro_batch": 40, "origin": [0, 0, 0], "extent": [1, 1, 8]},
}
#: Qwen2-7B's parameters from its config.json: per layer Q (3584² + 3584 bias), K and V (3584·512 + 512 each),
#: O (3584²), the gated MLP (3·3584·18944) and two norms (2·3584); untied embedding and head (152064·3584 each)
#: and the final norm.
QWEN2_7B_PARAMS = 28 * (3584 * 3584 + 3584 + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584) \
    + 2 * 152064 * 3584 + 3584


def _setup(version: str | None = "0.4.0", quantiles=None, **policy):
    with open(SHIPPED) as fh:
        cfg = yaml.safe_load(fh)
    cfg["policy"]["framework_version"] = version
    for key, value in policy.items():
        if value is None:
            cfg["policy"].pop(key, None)
        else:
            cfg["policy"][key] = value
    if quantiles is not None:
        cfg["workload"]["gen_quantiles"] = quantiles
    cfg["validation"] = {"source": "test", "url": "test", "publication": "test", "framework": "verl",
                         "published": {"step": 1.0}, "plan": SCRIPT_PLAN}
    return load_setup_mapping(cfg)


def test_single_draw_bound_is_the_cells_upper_quantile():
    # T = 1,024, median 512: Q linear from (0, 1) to (0.5, 512) to (1, 1024). At tail 1/64 the 64 top cells of
    # 4,096 lie above the bound; cell 4,032 sits at Q(0.984375) = 512 + 0.484375/0.5 · 512 = 1,008 tokens
    # (bin 504 of 2 tokens), cell 4,033 at 1,008.25 (bin 505)
    w = Workload(1024, 5, 512, 1024, ((0.5, 512),))
    assert w.response_sum(1, 1, 1 / 64) == 1008
    # one group holding all m (comonotonic): m times the single draw, bin for bin
    assert w.response_sum(40, 40, 1 / 64) == 40 * 1008
    # every response at the cap without gen_quantiles
    assert Workload(1024, 5, 512, 1024).response_sum(40, 5, 1e-8) == 40 * 1024


def test_sum_bound_covers_sampled_micro_batches():
    # at most a fraction tail of sampled micro-batches of K-comonotonic groups lies above the bound (a fixed seed;
    # four binomial standard deviations of sampling noise allowed)
    w = Workload(1024, 5, 512, 1024, ((0.5, 250), (0.9, 450), (0.99, 800)))
    qs, ts = w._quantile_points
    points = (tuple(qs.tolist()), tuple(ts.tolist()))
    rng = np.random.default_rng(0)
    for m, group in ((40, 5), (40, 1), (13, 4)):
        c = min(group, m)
        whole, rest = divmod(m, c)
        draws = w.quantiles(rng.random((200_000, whole + 1)))
        sums = c * draws[:, :whole].sum(axis=1) + rest * draws[:, whole]
        for tail in (1e-2, 1e-3):
            above = float(np.mean(sums > response_sum_bound(points, 1024, m, group, tail)))
            assert above <= tail + 4 * math.sqrt(tail / len(sums))
    # and below the old bound of every sequence at the step's longest response
    assert w.response_sum(40, 5, 1e-8) < 40 * w.peak_response


def test_remove_padding_peak_tokens():
    w = Workload(1024, 5, 512, 1024, ((0.5, 250), (0.9, 450), (0.99, 800)))
    tail = REMOVE_PADDING_PASS_TAIL / math.ceil(5120 / 40)
    assert remove_padding_peak_tokens(w, 40) == 40 * 512 + w.response_sum(40, 5, tail)
    assert remove_padding_peak_tokens(w, 40) < peak_pass_tokens(w, 40) == 40 * (512 + w.peak_response)
    with pytest.raises(ValueError, match="micro_batch 0"):
        remove_padding_peak_tokens(w, 0)


def test_verl_cost_model_prices_real_tokens():
    quantiles = [[0.5, 250], [0.9, 450], [0.99, 800]]
    inst, _, _ = _setup(quantiles=quantiles)
    cost, actor, w = cost_model(inst), inst.models["actor"], inst.workload
    for kind in ("train", "logprob"):
        assert cost.peak_pass_tokens(actor, kind, 8, 1, 1, 40) == remove_padding_peak_tokens(w, 40)


def test_shipped_verl_qwen2_7b_example_fits():
    inst, plan, section = _setup()
    _, fits, _ = predict(inst, plan, section)
    score = plan_evaluator(inst, plan).score(plan)
    assert fits and not score.oom
    assert max(score.gpu_memory_peak) < score.memory_capacity
    # the micro-batch of 40 sequences at 512 + 1,024 tokens (no gen_quantiles: every response at the cap)
    tokens = 40 * (512 + 1024)
    assert cost_model(inst).peak_pass_tokens(inst.models["actor"], "train", 8, 1, 1, 40) == tokens
    # the update's pass: bf16 logits and their in-place gradient plus the division's new bf16 gradient, 4 bytes
    # a vocabulary entry (VERL_LOGIT_BYTES, v0.4.0+); fp32 gradients and two Adam moments over 8 FSDP ranks;
    # the 28 checkpointed layer inputs in bf16
    part = pass_memory(inst.models["actor"], "train", micro_batch=40, seq_len=1536, recompute="full", dp=8,
                       framework="verl", sharding="zero3", logit_bytes=(2.0, 4.0), trainer_backend="fsdp",
                       fp32_params=True, workspace_bytes=inst.hardware.memory_workspace)
    assert part.logits == 4 * 152064 * tokens == 37_371_248_640
    assert part.gradients == 4 * QWEN2_7B_PARAMS / 8 == 3_807_808_256
    assert part.optimizer == 8 * QWEN2_7B_PARAMS / 8
    assert part.activations >= 28 * tokens * 3584 * 2
    assert part.peak_bytes < score.memory_capacity


def test_v03_logits_at_the_model_default_do_not_fit():
    # v0.3.x pins no transformers (setup.py 'transformers'; docker/Dockerfile.vemlp.vllm.te 'transformers <= 4.46.0',
    # which admits 4.45's fp32 upcast) and its update always takes the entropy: the logits keep the model's
    # default 12 bytes a vocabulary entry in the loss's backward, 12 x 152,064 x 61,440 = 112 GB at the caps
    inst, plan, _ = _setup("0.3.0.post0")
    score = plan_evaluator(inst, plan).score(plan)
    assert score.oom
    part = pass_memory(inst.models["actor"], "train", micro_batch=40, seq_len=1536, recompute="full", dp=8,
                       framework="verl", sharding="zero3", logit_bytes=None, trainer_backend="fsdp",
                       fp32_params=True, workspace_bytes=inst.hardware.memory_workspace)
    assert part.logits == 12 * 152064 * 40 * 1536


QUANTILES = [[0.5, 250], [0.9, 450], [0.99, 800]]


def _train_tokens(inst) -> float:
    return cost_model(inst).peak_pass_tokens(inst.models["actor"], "train", 8, 1, 1, 40)


def test_unset_is_verl_default_padded_before_0_7():
    # verl's ppo_trainer.yaml (v0.2-v0.6.1) says use_remove_padding False: each sequence a padded row of the
    # prompt cap 512 plus the response cap 1,024 (rollout.response_length), 40 x 1,536 = 61,440 tokens, whatever
    # the response lengths; the real-token charge of the same micro-batch is below it
    for version in ("0.4.0", "0.6.1", None):
        inst, _, _ = _setup(version, quantiles=QUANTILES, use_remove_padding=None)
        assert inst.use_remove_padding is None
        assert _train_tokens(inst) == 40 * (512 + 1024) == 61_440
    inst, _, _ = _setup(quantiles=QUANTILES, use_remove_padding=False)
    assert _train_tokens(inst) == padded_peak_tokens(inst.workload, 40) == 61_440
    assert remove_padding_peak_tokens(inst.workload, 40) < 61_440


def test_true_and_the_0_7_default_charge_real_tokens():
    # set true, or unset at v0.7.0 (model/hf_model.yaml: use_remove_padding True): m·S plus the sum bound
    for version, setting in (("0.4.0", True), ("0.7.0", None)):
        inst, _, _ = _setup(version, quantiles=QUANTILES, use_remove_padding=setting)
        w = inst.workload
        tail = REMOVE_PADDING_PASS_TAIL / math.ceil(5120 / 40)
        assert _train_tokens(inst) == 40 * 512 + w.response_sum(40, 5, tail) < 61_440


def test_dynamic_batch_size_padded_rows():
    # 160 sequences a GPU at a 4,096-token budget, padded rows of 512 + 1,024: a micro-batch of at most
    # 4,096 + 1,536 = 5,632 real tokens holds at most 5,632 // 513 = 10 sequences (each at least its 512-token
    # prompt and one response token), 10 x 1,536 = 15,360 tokens; 3 sequences hold at most 3 rows
    inst, _, _ = _setup(quantiles=QUANTILES)
    assert dynamic_padded_peak_tokens(inst.workload, 160, 4096) == 10 * 1536 == 15_360
    assert dynamic_padded_peak_tokens(inst.workload, 2.5, 4096) == 3 * 1536


@pytest.mark.parametrize(("policy", "match"), [
    ({"use_remove_padding": "yes"}, "use_remove_padding.*yes"),
    ({"use_remove_padding": True, "framework": "openrlhf", "framework_version": None}, "use_remove_padding: true"),
    ({"use_remove_padding": True, "framework_version": "0.1"}, "use_remove_padding: true at framework_version"),
    ({"use_remove_padding": False, "ppo_max_token_len_per_gpu": 4096, "log_prob_max_token_len_per_gpu": 4096,
      "ulysses_sequence_parallel_size": 2}, "use_remove_padding: false with ulysses_sequence_parallel_size 2"),
])
def test_bad_settings_are_refused(policy, match):
    version = policy.pop("framework_version", "0.4.0")
    with pytest.raises(ConfigError, match=match):
        _setup(version, **policy)


def test_emitter_writes_the_priced_setting():
    inst, plan, _ = _setup()
    assert emit(inst, plan, "verl").settings["actor_rollout_ref.model.use_remove_padding"] is True
    inst, plan, _ = _setup(use_remove_padding=None)
    assert emit(inst, plan, "verl").settings["actor_rollout_ref.model.use_remove_padding"] is False
    inst, plan, _ = _setup("0.7.0", use_remove_padding=None)
    assert emit(inst, plan, "verl").settings["actor_rollout_ref.model.use_remove_padding"] is True
    # unset with Ulysses: verl runs it only with remove-padding, so it was priced (and is written) true
    inst, plan, _ = _setup(use_remove_padding=None, ppo_max_token_len_per_gpu=4096, log_prob_max_token_len_per_gpu=4096,
                           ulysses_sequence_parallel_size=2)
    assert inst.use_remove_padding is True
    assert emit(inst, plan, "verl").settings["actor_rollout_ref.model.use_remove_padding"] is True
