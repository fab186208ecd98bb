"""The datasheet floor of a published figure (validate.flop_floor) against hand calculations."""

from __future__ import annotations

import os

import pytest
import yaml

from packplace.placement.checking.crossval import load_setups
from packplace.placement.checking.validate import (
    BELOW_FLOOR,
    floor_reason,
    flop_floor,
    format_rows,
    load_setup,
    validate,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
VERL_16 = os.path.join(VALIDATION, "verl_dapo_qwen2.5-math-7b_2x8xh20_colocate.yaml")
OPENRLHF = os.path.join(VALIDATION, "openrlhf_ppo_llama2-7b_8xa800.yaml")

#: A two-layer model: d 64, 4 heads of 16 (q = kv = 64), gated MLP of 128, vocabulary 1,000.
TINY_MODEL = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 1000,
              "num_attention_heads": 4, "num_key_value_heads": 4}


def _tiny_file(tmp_path, published: dict[str, float]) -> str:
    """A colocated DAPO step of 4 prompts x 2 responses (100 prompt + 100 response tokens) on 2 GPUs of
    1e9 FLOP/s."""
    cfg = {
        "hardware": {"preset": "h20", "flops_per_gpu": 1.0e9},
        "models": {"actor": TINY_MODEL, "reward": "rule"},
        "workload": {"batch_size": 4, "samples_per_prompt": 2, "context_length": 100, "generation_length": 100},
        "policy": {"algorithm": "dapo"},
        "validation": {
            "source": "tiny, hand calculation", "framework": "hand", "published": published,
            "phases": {"generation": ["actor.generate"], "training": ["actor.train"]},
            "plan": {"actor.generate": {"dp": 2, "pp": 1, "tp": 1, "micro_batch": 4, "origin": [0, 0, 0],
                                        "extent": [1, 1, 2]},
                     "actor.train": {"dp": 2, "pp": 1, "tp": 1, "micro_batch": 2, "origin": [0, 0, 0],
                                     "extent": [1, 1, 2]}}},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_floor_of_a_tiny_colocated_step_by_hand(tmp_path):
    instance, plan, section = load_setup(_tiny_file(tmp_path, {"step": 10.0}))
    # N = L·(4d² + 3·d·ff) + d·V = 2·(4·4096 + 3·64·128) + 64·1000 = 2·40,960 + 64,000 = 145,920
    assert instance.models["actor"].gemm_params == 145_920
    # forward FLOPs per token at s = 100 + 100: 2N + 2·L·s·q = 291,840 + 2·2·200·64 = 343,040;
    # 8 sequences x 200 tokens = 1,600 tokens: 548,864,000 FLOPs per forward pass
    forward = 343_040 * 1_600
    floors = flop_floor(instance, plan, section)
    # generation: one forward pass over 2 GPUs of 1e9 FLOP/s = 0.274432 s
    assert floors["generation"] == pytest.approx(forward / 2e9) == pytest.approx(0.274432)
    # training: 3 forward-equivalents (forward + backward) + the old-log-prob forward = 4 passes: 1.097728 s
    assert floors["training"] == pytest.approx(4 * forward / 2e9) == pytest.approx(1.097728)
    # the step: both vertices take turns on the same 2 GPUs, so their floors add: 1.37216 s
    assert floors["step"] == pytest.approx(5 * forward / 2e9) == pytest.approx(1.37216)


def test_a_split_step_lasts_at_least_its_busiest_gpu(tmp_path):
    path = _tiny_file(tmp_path, {"step": 10.0})
    cfg = yaml.safe_load(open(path))
    # generation alone on GPU 0, training alone on GPU 1: they overlap, so the step floor is the larger one
    cfg["validation"]["plan"]["actor.generate"].update({"dp": 1, "extent": [1, 1, 1]})
    cfg["validation"]["plan"]["actor.train"].update({"dp": 1, "origin": [0, 0, 1], "extent": [1, 1, 1]})
    open(path, "w").write(yaml.safe_dump(cfg))
    instance, plan, section = load_setup(path)
    floors = flop_floor(instance, plan, section)
    forward = 343_040 * 1_600
    assert floors["generation"] == pytest.approx(forward / 1e9)
    assert floors["training"] == pytest.approx(4 * forward / 1e9)
    assert floors["step"] == pytest.approx(4 * forward / 1e9)  # max(1, 4) passes, not their sum


def test_a_figure_below_its_floor_is_flagged_and_never_fitted(tmp_path):
    below = _tiny_file(tmp_path, {"step": 1.0, "training": 0.5})   # floors 1.372 and 1.098 s
    (step, training) = validate([below])
    assert step.below_floor and training.below_floor
    assert step.floor == pytest.approx(1.37216)
    assert BELOW_FLOOR in format_rows([step, training])
    instance, plan, section = load_setup(below)
    reason = floor_reason(instance, plan, section)
    assert reason.startswith(BELOW_FLOOR) and "step 1.0 s < 1.4 s" in reason
    (setup,) = load_setups([below])
    assert setup.not_fitted == reason
    above = _tiny_file(tmp_path, {"step": 2.0})
    assert not validate([above])[0].below_floor
    assert load_setups([above])[0].not_fitted == ""


def test_the_verl_one_step_off_row_is_below_its_floor_by_hand():
    # Qwen2.5-Math-7B: N = 28·(2·3584² + 2·3584·512 + 3·3584·18944) + 3584·152,064 = 7,070,285,824;
    # mean response of the file's quantiles (0,1) (0.5,3000) (0.9,8000) (0.99,18000) (1,20480) by the
    # trapezoid rule: 750.25 + 2200 + 1170 + 192.4 = 4312.65, so s = 2048 + 4312.65 = 6360.65 tokens
    instance, plan, section = load_setup(VERL_16)
    assert instance.models["actor"].gemm_params == 7_070_285_824
    s = 2048 + 4312.65
    assert instance.workload.train_seq_len == pytest.approx(s)
    per_token = 2 * 7_070_285_824 + 2 * 28 * s * 3584
    forward = per_token * 6144 * s                       # 512 x 12 sequences: 6.025e17 FLOPs
    floor = 4 * forward / (16 * 148e12)                  # 16 H20 at the 148 TFLOP/s datasheet peak
    assert floor == pytest.approx(1017.7, abs=0.1)
    floors = flop_floor(instance, plan, section)
    assert floors["old_log_prob_and_update_actor"] == pytest.approx(floor, rel=1e-9)
    # published: old_log_prob 88 s + update_actor 286 s = 374 s, 0.37 of the floor
    assert floor_reason(instance, plan, section).startswith(BELOW_FLOOR)


def test_rows_of_other_frameworks_stay_above_their_floors():
    instance, plan, section = load_setup(OPENRLHF)
    floors = flop_floor(instance, plan, section)
    assert all(float(section["published"][f]) > 2.0 * floors[f] for f in section["published"])
    assert floor_reason(instance, plan, section) == ""


def test_runs_below_their_floor_leave_the_bands_but_are_counted():
    from packplace.placement.checking.crossval import CrossRow, summarize

    def row(name, ratio, reason=""):
        return CrossRow(setup=name, figure="step", publication="p", framework="verl", gpu="h100-sxm",
                        published=100.0, in_sample=100.0 * ratio, out_of_sample=100.0 * ratio, memory_ok=True,
                        primary=True, not_fitted=reason)

    rows = [row("a", 1.0), row("b", 1.4), row("c", 3.0, f"{BELOW_FLOOR} 300 s")]
    scored = summarize(rows)
    assert (scored["runs"], scored["below_floor"], scored["median"]) == (2, 1, pytest.approx(1.2))
    assert scored["within_0.67-1.5"] == 1.0 and scored["within_0.8-1.25"] == 0.5
    every = summarize(rows, every_run=True)
    assert (every["runs"], every["median"], every["within_0.67-1.5"]) == (3, 1.4, pytest.approx(2 / 3))


OPENRLHF_70B = os.path.join(VALIDATION, "openrlhf_ppo_llama2-70b_32xa800.yaml")
OPENRLHF_34B = os.path.join(VALIDATION, "openrlhf_ppo_codellama-34b_32xa800.yaml")


def test_the_openrlhf_70b_loop_is_below_its_decode_floor_by_hand():
    # Llama-2-70B: N = 80·(2·8192² + 2·8192·1024 + 3·8192·28672) + 8192·32,000 = 68,713,185,280 matrix weights
    instance, plan, section = load_setup(OPENRLHF_70B)
    assert instance.models["actor"].gemm_params == 68_713_185_280
    # each decode iteration reads the TP-2 engine's half of the bf16 weights at the A800's 2.039 TB/s
    iteration = 2 * 68_713_185_280 / 2 / 2.039e12                     # 33.70 ms
    # 8 actor ranks on 4 engines (rank % 4): 2 ranks x 128 / 2 = 64 micro-rollout calls each, one after another,
    # every response at the file's 1,024-token cap
    generation = 2 * 64 * 1024 * iteration
    assert generation == pytest.approx(4417.1, abs=0.1)
    # the actor's training after the loop: 3 forward passes over 1,024 x 2,048 tokens on 8 GPUs at 312 TFLOP/s,
    # each token 2N + 2·L·s·q = 137,426,370,560 + 2·80·2048·8192 = 140,110,725,120 FLOPs
    training = 3 * 140_110_725_120 * 1024 * 2048 / (8 * 312e12)
    assert training == pytest.approx(353.2, abs=0.1)
    floors = flop_floor(instance, plan, section)
    assert floors["step"] == pytest.approx(generation + training, rel=1e-9)    # 4,770.2 s
    # published 4,488.53 s: no efficiency at or below 1 reproduces it with every response at the cap
    reason = floor_reason(instance, plan, section)
    assert reason.startswith(BELOW_FLOOR) and "step 4488.5 s < 4770.2 s" in reason
    assert load_setups([OPENRLHF_70B])[0].not_fitted == reason


def test_the_openrlhf_34b_loop_stays_above_its_decode_floor():
    # CodeLlama-34B: N = 48·(2·8192² + 2·8192·1024 + 3·8192·22016) + 8192·32,000 = 33,481,031,680 on one GPU per
    # engine; 8 ranks on 8 engines, 32 calls of 4 prompts each at 1,024 iterations
    instance, plan, section = load_setup(OPENRLHF_34B)
    assert instance.models["actor"].gemm_params == 33_481_031_680
    generation = 32 * 1024 * 2 * 33_481_031_680 / 2.039e12
    assert generation == pytest.approx(1076.1, abs=0.1)
    floors = flop_floor(instance, plan, section)
    assert generation < floors["step"] < float(section["published"]["step"])   # 1,249.0 < 1,526.4 s
    assert floor_reason(instance, plan, section) == ""


def test_a_batch_one_engine_decodes_at_most_at_the_datasheet_bandwidth():
    # Qwen2.5-7B, N = 7,070,285,824 (as the verl test's model): one sequence, 2,048 tokens generated on one A100,
    # each iteration reading the bf16 weights at 2.039 TB/s: 2,048 x 6.935 ms = 14.20 s, far above its FLOPs' floor
    instance, plan, section = load_setup(os.path.join(VALIDATION, "qwen2.5-7b_vllm_batch1_1xa100.yaml"))
    assert instance.models["actor"].gemm_params == 7_070_285_824
    floor = 2048 * 2 * 7_070_285_824 / 2.039e12
    assert floor == pytest.approx(14.203, abs=0.001)
    assert flop_floor(instance, plan, section)["generation"] == pytest.approx(floor, rel=1e-9)
    assert floor_reason(instance, plan, section) == ""   # published 24.3 s
