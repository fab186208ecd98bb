"""Published RL runs reproduced within x1.3 (one knob set per GPU type), and calibration of the knobs."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import yaml

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.placement.checking.calibrate import calibrate, read_measured, task_times
from packplace.placement.checking.validate import RATIO_RANGE, flop_floor, load_setup, predict, validate
from packplace.placement.model.engine import mean_live_tokens
from packplace.placement.problem.config import load_yaml
from packplace.placement.problem.plan import Plan
from packplace.placement.problem.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VALIDATION = os.path.join(ROOT, "benchmarks", "validation")
#: NeMo RL's DTensor (FSDP2) Llama-3.1-8B step on 2 x 8 H100: a test fixture (the validation row is Megatron)
NEMO_DTENSOR_FIXTURE = os.path.join(ROOT, "tests", "data", "placement",
                                    "nemo_rl_dtensor_grpo_llama3.1-8b_2x8xh100.yaml")
OPENRLHF = os.path.join(VALIDATION, "openrlhf_ppo_llama2-7b_8xa800.yaml")


#: Rows added with the framework profiles (DeepSpeed-Chat Table 1 per 1,024 samples, OpenRLHF 2024 table).
ADDED = {
    ("deepspeed_chat_ppo_opt-1.3b_1xa100", "step"): 163.19, ("deepspeed_chat_ppo_opt-1.3b_8xa100", "step"): 19.53,
    ("deepspeed_chat_ppo_opt-1.3b_64xa100", "step"): 7.21, ("deepspeed_chat_ppo_opt-6.7b_8xa100", "step"): 57.19,
    ("deepspeed_chat_ppo_opt-6.7b_64xa100", "step"): 11.86, ("deepspeed_chat_ppo_opt-13b_64xa100", "step"): 17.44,
    ("deepspeed_chat_ppo_opt-30b_8xa100", "step"): 251.07, ("deepspeed_chat_ppo_opt-30b_64xa100", "step"): 55.79,
    ("deepspeed_chat_ppo_opt-66b_64xa100", "step"): 104.61, ("openrlhf_ppo_llama2-7b_16xa800", "step"): 471.11,
    ("openrlhf_ppo_llama2-13b_32xa800", "step"): 608.93, ("openrlhf_ppo_llama2-70b_32xa800", "step"): 4488.53,
    ("deepspeed_chat_optimized_ppo_llama2-7b_16xa800", "step"): 855.09,
    ("deepspeed_chat_optimized_ppo_llama2-13b_32xa800", "step"): 1528.93,
    ("deepspeed_chat_optimized_ppo_llama2-70b_32xa800", "step"): 10407.0,
    ("openrlhf_ppo_codellama-34b_32xa800", "step"): 1526.4,
    ("deepspeed_chat_optimized_ppo_codellama-34b_32xa800", "step"): 3634.98,
}


#: Rows whose ratio lies outside RATIO_RANGE today, with the bounds it is kept within (a regression guard,
#: not a target): the MoE row fits in memory with expert parallelism, but its step comes out below the
#: published one (0.61); OpenRLHF's generation + experience phase (1.28 in sample when the presets were
#: set) is 1.31 since its vLLM batches are bounded by their KV cache's tokens (recompute preemption).
#: DeepSpeed-Chat's OPT-13B step (0.77 when the presets were set; 0.71 once the actor trained the script's
#: LoRA adapters) is back in range (0.84) since its ZeRO-3 hybrid engine copies Q/K/V into a merged buffer at
#: every forward. NeMo RL's Llama-3.1-8B step on 2 x 8 H100 (1.01 when the file priced a DTensor layout whose
#: 16-rank FSDP collectives ran at one network card's 45 GB/s) is 0.62 on the Megatron-core TP 1 x PP 2 layout
#: its source ran, with its packed micro-batches (0.70 once a pack's attention is the sum over its sequences'
#: squared lengths; 0.76 once its responses average the row's G-Average Seq len itself, the mean generated
#: tokens, not that less a 128-token prompt): as the v0.4 row of that layout, what NeMo RL spends beyond the
#: kernels of its generation and training is not modelled.
KNOWN_OUT_OF_RANGE = {("nemo_rl_grpo_qwen3-30b-a3b_4x8xh100", "step"): (0.5, 0.75),   # 0.705
                      ("nemo_rl_grpo_llama3.1-8b_2x8xh100", "step"): (0.55, 0.8),
                      ("openrlhf_ppo_llama2-7b_8xa800", "generation_and_experience"): (1.2, 1.4)}
#: The held-out row's ratio (0.67 before its vLLM batch was bounded by the KV cache's tokens at
#: gpu_memory_utilization 0.6: 277.1 / 393 s; 0.705 before the engine's budget kept its workspace; 0.723
#: before the H100's dense passes and decode steps were priced by its component table; 0.756 before the V1
#: engine's host time per running sequence; 0.758 before its Megatron-core passes (TP 4 x PP 4) were priced
#: with Megatron-Core's kernels instead of the eager Hugging Face layer's; 0.649 before the file named its
#: NeMo RL release, v0.4, whose unfused Qwen SwiGLU makes the Megatron training pass 1.25 times longer; 0.707
#: before the file said its recipe's four optimizer steps per step, 2,048 sequences / train_global_batch_size 512;
#: 0.709 before the V1 engine's host time per running sequence was the synchronous engine's 12.85 us and
#: its generation waited for the slowest engine's share of the batch; 0.761 before its passes ran the
#: recipe's sequence packing, 4,096- and 16,384-token packs, each pack of a pipeline-parallel rank padded
#: to its longest; 0.774 before a pack's attention was the sum over its sequences' squared lengths; 0.784
#: before the H100's Megatron-Core pass kernels took megatron_pass_factor 1.07, fitted to NVIDIA's published
#: pre-training step times; 0.812 before its responses averaged the row's G-Average Seq len itself, 3,206
#: generated tokens, instead of 3,206 less a 128-token prompt; 0.854 before the H100 preset's memory was the
#: CUDA total, 79.11 GiB, instead of 80e9: a larger KV cache at gpu_memory_utilization 0.6).
HELD_OUT_RATIO = 0.869
#: The rows the presets' knobs were set with in view (in sample): required within x1.3. The other files of
#: benchmarks/validation/ are reported and cross-validated (tests/placement/test_crossval.py).
IN_SAMPLE = ("nemo_rl_grpo_llama3.1-8b_2x8xh100", "openrlhf_ppo_llama2-7b_8xa800", "deepspeed_chat_ppo_opt-13b_8xa100",
             "qwen2.5-7b_vllm_batch1_1xa100")
IN_SAMPLE_FILES = sorted(os.path.join(VALIDATION, f + ".yaml") for f in IN_SAMPLE)
#: Checked with them: the MoE row (within its KNOWN_OUT_OF_RANGE bounds).
CHECKED_FILES = IN_SAMPLE_FILES + [os.path.join(VALIDATION, "nemo_rl_grpo_qwen3-30b-a3b_4x8xh100.yaml")]


def test_every_published_setup_is_within_the_ratio_range():
    rows = validate(CHECKED_FILES)
    figures = {(r.setup, r.figure): r.published for r in rows}
    assert figures == {
        ("nemo_rl_grpo_llama3.1-8b_2x8xh100", "step"): 92.8,
        ("nemo_rl_grpo_qwen3-30b-a3b_4x8xh100", "step"): 225.0,
        ("openrlhf_ppo_llama2-7b_8xa800", "step"): 885.0,
        ("openrlhf_ppo_llama2-7b_8xa800", "generation_and_experience"): 482.0,
        ("openrlhf_ppo_llama2-7b_8xa800", "training"): 403.0,
        ("deepspeed_chat_ppo_opt-13b_8xa100", "step"): 125.5,
        ("qwen2.5-7b_vllm_batch1_1xa100", "generation"): 24.3,
    }
    for r in rows:
        low, high = KNOWN_OUT_OF_RANGE.get((r.setup, r.figure), RATIO_RANGE)
        assert low <= r.ratio <= high, (r.setup, r.figure, r.ratio)
        assert r.memory_ok, (r.setup, "plan over memory with the run's own memory settings")


def test_the_framework_rows_fit_in_memory_and_are_reported_whatever_their_ratio():
    rows = validate(sorted(os.path.join(VALIDATION, s + ".yaml") for s, _ in ADDED))
    assert {(r.setup, r.figure): r.published for r in rows} == ADDED
    for r in rows:  # DeepSpeed-Chat / OpenRLHF ran them: ZeRO-3 inference makes OPT-30B/8 and OPT-66B/64 fit
        assert r.memory_ok, (r.setup, "memory against the run's code")
    ratios = sorted(r.ratio for r in rows)  # their median lies within x1.5 either way
    assert 1 / 1.5 <= ratios[len(ratios) // 2] <= 1.5



#: The Optimized DSChat files whose script generation batch DeepSpeed's code cannot run: the script's
#: per-device generation batch (prompts per generate call per GPU), the file's inference TP and the batch per
#: TP group ``validate`` fits (34B: 2 per GPU is 85.3 GB of 85.09 with the trainers' resident 7 GB; 70B: 64 per
#: group is 115 GB).
SCRIPT_GENERATION_BATCH = {"deepspeed_chat_optimized_ppo_codellama-34b_32xa800": (8, 1, 1),
                           "deepspeed_chat_optimized_ppo_llama2-70b_32xa800": (8, 8, 32)}


@pytest.mark.parametrize("setup", sorted(SCRIPT_GENERATION_BATCH))
def test_the_optimized_dschat_script_generation_batch_is_over_memory_so_the_file_fits_it(setup, tmp_path):
    # The hybrid engine's inference workspace (GenWorkSpace: activations, scores and every layer's KV at the full
    # head count for the 2,048-token prompt + response cap) at the script's 8 prompts per GPU does not fit beside
    # the gathered weights: 34B at TP 1 67.5 + 32.7 + 0.5 GB, 70B at TP 8 (64 sequences per group) 17.3 + 0.9 +
    # 68.7 + 0.5 GB, against the A800's 85.09 GB; GenWorkSpace raises before decoding. The run did happen, so it
    # used a batch no source gives: the file's generation batch is fitted (docs/calibration-and-validation.md
    # "The hybrid engine's inference workspace").
    per_gpu, tp, fitted = SCRIPT_GENERATION_BATCH[setup]
    path = os.path.join(VALIDATION, setup + ".yaml")
    cfg = load_yaml(path)
    generate = cfg["validation"]["plan"]["actor.generate"]
    assert generate["micro_batch"] == "fit" and generate["tp"] == tp
    scored = validate(path)
    assert [(r.figure, r.memory_ok) for r in scored] == [("step", True)]
    assert scored[0].fitted == ("micro-batch not published, fitted as the largest within memory: "
                                f"actor.generate {fitted}")
    generate["micro_batch"] = per_gpu * tp   # the script's: every GPU of a TP group decodes the group's prompts
    script = tmp_path / (setup + ".yaml")
    script.write_text(yaml.safe_dump(cfg))
    rows = validate(str(script))
    assert [(r.figure, r.memory_ok, r.fitted) for r in rows] == [("step", False, "")]


#: The NeMo RL H100 MoE runs (published step, s): Qwen3-30B-A3B v0.4-v0.6 and Qwen3-235B-A22B 1-step off.
MOE_ROWS = {
    "nemo_rl_grpo_qwen3-30b-a3b_4x8xh100": 225.0, "nemo_rl_v0.4_grpo_qwen3-30b-a3b_4x8xh100_1off": 244.0,
    "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy": 198.0, "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_1off": 154.0,
    "nemo_rl_v0.6_grpo_qwen3-30b-a3b_4x8xh100_onpolicy": 192.0, "nemo_rl_v0.6_grpo_qwen3-30b-a3b_4x8xh100_1off": 152.0,
    "nemo_rl_v0.6_grpo_qwen3-30b-a3b_24x8xh100_8off": 34.5,
    "nemo_rl_v0.4_grpo_qwen3-235b-a22b_32x8xh100_1off": 241.0,
    "nemo_rl_v0.5_grpo_qwen3-235b-a22b_32x8xh100_1off": 203.0,
    "nemo_rl_v0.6_grpo_qwen3-235b-a22b_32x8xh100_1off": 231.0,
}


def test_the_moe_rows_fit_in_memory_and_keep_their_known_gaps():
    """Every published MoE placement fits (expert parallelism) but three Qwen3-30B-A3B rows; a regression guard on
    the documented gaps (docs/calibration-and-validation.md, "Mixture of experts"): Qwen3-235B-A22B within
    0.77-1.35, every Qwen3-30B-A3B run between 0.55 and 1.05 (too fast or within range; the 8-step off-policy one no
    longer too slow: its engines roll out continuously, 1.00 with the V1 engine's host time per running
    sequence)."""
    rows = validate(sorted(os.path.join(VALIDATION, s + ".yaml") for s in MOE_ROWS))
    assert {r.setup: r.published for r in rows} == MOE_ROWS
    # every run fits with its passes at their largest micro-batch (16,384-token log-prob packs), the reference's
    # weights kept on the host and swapped into the policy's tensors as NeMo RL does (use_reference_model)
    for r in rows:
        assert r.memory_ok, (r.setup, "memory verdict with the run's own memory settings")
        if "235b" in r.setup:
            # 58.7 GB of weights per GPU leave 5.3 GB of the engine's 0.8 x 80 GB; the workspace the engine
            # keeps besides its KV cache takes a fifth of that, and v0.5's row comes out at 1.32
            assert RATIO_RANGE[0] <= r.ratio <= 1.35, (r.setup, r.ratio)
        else:
            assert 0.55 <= r.ratio <= 1.05, (r.setup, r.ratio)


@pytest.mark.parametrize("setup, published", [
    (NEMO_DTENSOR_FIXTURE, "grpo_nemo-rl_llama3.1-8b_2x8xh100"),
    (os.path.join(VALIDATION, "openrlhf_ppo_llama2-7b_8xa800.yaml"), "ppo_openrlhf_llama2-7b_1x8xa800"),
    (os.path.join(VALIDATION, "deepspeed_chat_ppo_opt-13b_8xa100.yaml"), "ppo_deepspeed-chat_opt13b_1x8xa100"),
])
def test_validation_files_use_the_published_configs_settings(setup, published):
    validation = load_yaml(setup)
    config = load_yaml(os.path.join(ROOT, "configs", "placement", "published", published + ".yaml"))
    for section in ("hardware", "models", "workload", "training"):
        assert validation[section] == config[section], section
    policy = dict(validation["policy"])
    policy.pop("batching", None)   # the DeepSpeed hybrid engine's static batches (a validation-only setting)
    assert policy == config["policy"]


def test_validate_json_has_one_object_per_row(capsys):
    code = main(["validate", "--json", OPENRLHF])
    document = json.loads(capsys.readouterr().out)
    rows = {r["figure"]: r for r in document["rows"]}
    assert all("phase" not in r for r in document["rows"])   # one name with cross-validate's rows: figure
    assert set(rows) == {"step", "generation_and_experience", "training"}
    # the generation + experience phase is at 1.31 (KNOWN_OUT_OF_RANGE): the file fails, exit 1
    assert rows["generation_and_experience"]["ok"] is False and rows["step"]["ok"] is True
    assert document["ok"] is False and code == 1
    training = rows["training"]
    assert training["published"] == 403.0 and training["memory_ok"] is True
    assert training["source"].startswith("OpenRLHF")
    assert training["ratio"] == pytest.approx(training["predicted"] / 403.0)
    assert set(training["parts"]) == {"actor.train", "critic.train"}
    # ZeRO-3 under OpenRLHF: the old-log-prob pass gathers the partitioned weights; the trainer's
    # recomputation, ZeRO-3 collectives and Adam offload are its memory_options part
    assert set(training["parts"]["actor.train"]) == {"train", "old_log_prob", "gather", "memory_options", "overhead"}
    assert set(rows["step"]["parts"]) == {"actor.generate", "reference.infer", "reward.infer", "critic.infer",
                                          "actor.train", "critic.train"}


def test_validate_command_prints_the_report(capsys):
    # OpenRLHF's generation + experience at 1.31: the figure outside x1.3 (KNOWN_OUT_OF_RANGE); NeMo RL's
    # Llama-3.1-8B step is inside since vLLM's sampler is priced (0.764 -> 0.771, x1.3 = 0.769)
    assert main(["validate", *IN_SAMPLE_FILES]) == 1
    out = capsys.readouterr().out
    assert "nemo_rl_grpo_llama3.1-8b_2x8xh100" in out
    assert "5 of 6 figures within x1.3 of the published value with the plan within memory" in out


def test_mean_live_tokens_by_hand():
    # every response 1,024 tokens: a sequence holds its 1,024-token prompt plus on average 512 generated
    assert mean_live_tokens(Workload(8, 1, 1024, 1024)) == pytest.approx(1024 + 512)


def test_calibrate_recovers_knobs_from_times_the_model_produced():
    instance, plan, _ = load_setup(OPENRLHF)
    truth = replace(instance.hardware, gemm_peak_fraction=0.47, decode_bw_eff=0.58, phase_overhead=3.2)
    measured = task_times(instance, plan, truth)
    result = calibrate(instance, plan, measured, ("gemm_peak_fraction", "decode_bw_eff", "phase_overhead"))
    assert result["knobs"]["gemm_peak_fraction"] == pytest.approx(0.47, rel=1e-4)
    assert result["knobs"]["decode_bw_eff"] == pytest.approx(0.58, rel=1e-4)
    assert result["knobs"]["phase_overhead"] == pytest.approx(3.2, rel=1e-4)
    assert max(abs(r) for r in result["residuals"].values()) < 1e-6


def test_calibrate_refuses_knobs_the_data_cannot_identify():
    instance, plan, _ = load_setup(OPENRLHF)
    measured = task_times(instance, plan, instance.hardware)
    only_training = {"actor.train": measured["actor.train"], "critic.train": measured["critic.train"]}
    with pytest.raises(ConfigError, match="knob 'decode_bw_eff' does not change any measured task time"):
        calibrate(instance, plan, only_training, ("gemm_peak_fraction", "decode_bw_eff"))
    with pytest.raises(ConfigError, match="1 measured tasks cannot determine 2 knobs"):
        calibrate(instance, plan, {"actor.train": 300.0}, ("gemm_peak_fraction", "phase_overhead"))
    with pytest.raises(ConfigError, match="unknown knob 'speed'"):
        calibrate(instance, plan, measured, ("speed",))
    with pytest.raises(ConfigError, match="measured task 'actor.sing' is not a vertex"):
        calibrate(instance, plan, {"actor.sing": 1.0}, ("phase_overhead",))


QWEN = os.path.join(VALIDATION, "qwen2.5-7b_vllm_batch1_1xa100.yaml")
QWEN_MEASURED = os.path.join(ROOT, "benchmarks", "calibration", "qwen2.5-7b_vllm_batch1_1xa100.measured.yaml")


def test_calibrate_fits_a_real_measured_file_without_phase_overhead():
    instance, plan, _ = load_setup(QWEN)
    measured = read_measured(load_yaml(QWEN_MEASURED))
    assert measured["engine_only"] == ("actor.generate",) and measured["knobs"] == ("decode_bw_eff",)
    result = calibrate(instance, plan, measured["times"], measured["knobs"], measured["engine_only"])
    # 2,048 batch-1 decode steps in 24.3 s, less the bare vLLM engine's 1.4 ms per step (framework
    # `none`), its V1 host time of one running sequence (12.85 us) and the 1-token prefill:
    # (24.3 - 2048 x 0.00141285) / 2048 = 10.45 ms per step of weight and KV reads at 2.039 TB/s x 0.667
    # (with the former 2 ms: 9.87 ms at 0.707, and 0.707 x 9.87 / 10.45 = 0.667)
    assert result["knobs"]["decode_bw_eff"] == pytest.approx(0.6670, abs=5e-4)
    assert abs(result["residuals"]["actor.generate"]) < 1e-6
    assert result["fixed"]["phase_overhead"] == instance.hardware.phase_overhead  # kept, and not in the time
    # the bare engine run has no phase around it: phase_overhead cannot be read from it
    with pytest.raises(ConfigError, match="knob 'phase_overhead' does not change any measured task time"):
        calibrate(instance, plan, measured["times"], ("phase_overhead",), measured["engine_only"])


def test_calibrate_command_uses_the_files_knobs(capsys):
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED]) == 0
    out = capsys.readouterr().out
    assert "decode_bw_eff: 0.66" in out and "engine only, no phase_overhead" in out
    assert "the fit is exact and does not test the model" in out
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED, "--knobs",
                 "decode_bw_eff,phase_overhead"]) == 2


def test_calibrate_prints_a_hardware_section_that_replaces_the_configs(capsys, tmp_path):
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED]) == 0
    out = capsys.readouterr().out
    block = yaml.safe_load(out[out.index("\nhardware:\n") + 1:])["hardware"]
    # the config's own field (its preset, which carries racks, nodes and GPUs per node) and the fitted knob
    assert list(block) == ["preset", "decode_bw_eff"] and block["preset"] == "a100-80gb-sxm"
    assert block["decode_bw_eff"] == pytest.approx(0.6670, abs=5e-4)
    cfg = yaml.safe_load(open(QWEN).read())
    cfg["hardware"] = block   # pasted as the whole section: it loads, with the fitted knob
    pasted = tmp_path / "pasted.yaml"
    pasted.write_text(yaml.safe_dump(cfg))
    instance, _, _ = load_setup(str(pasted))
    assert instance.hardware.decode_bw_eff == pytest.approx(block["decode_bw_eff"], rel=1e-5)
    assert instance.hardware.memory_per_gpu == load_setup(QWEN)[0].hardware.memory_per_gpu


def test_calibrate_flags_a_knob_pressed_against_its_limit_and_refuses_no_knob(capsys):
    instance, plan, _ = load_setup(QWEN)
    # 1 s for 2,048 decode steps of 15.2 GB: faster than the HBM allows, so decode_bw_eff hits its bound
    result = calibrate(instance, plan, {"actor.generate": 1.0}, ("decode_bw_eff",), ("actor.generate",))
    assert result["at_limit"] == ["decode_bw_eff"] and result["residuals"]["actor.generate"] > 1.0
    # no GPU type given: the default bound, the largest sourced one (GB200's 0.8828)
    assert result["knobs"]["decode_bw_eff"] == pytest.approx(0.88276, abs=1e-5)
    assert result["limits"]["decode_bw_eff"]["side"] == "upper"
    assert calibrate(instance, plan, {"actor.generate": 24.3}, ("decode_bw_eff",),
                     ("actor.generate",))["at_limit"] == []
    with pytest.raises(ConfigError, match="no knob to fit"):
        calibrate(instance, plan, {"actor.generate": 24.3}, (), ("actor.generate",))
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED, "--knobs", ""]) == 2
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED, "--knobs", "gemm_peak_fraction"]) == 0
    captured = capsys.readouterr()
    # a batch-1 decode hardly depends on the GEMM rate: the fit runs to the A100's MAMF bound, 271.2 / 312
    assert "packplace calibrate: warning: gemm_peak_fraction ended at its physical upper bound 0.869231" in captured.err
    assert "stas00/ml-engineering MAMF table" in captured.err
    assert "the fit is exact" not in captured.out


def test_held_out_row_fits_in_memory_and_is_reported_whatever_its_ratio():
    # a published run added after the knobs were set: its ratio is reported, not required in range
    rows = validate([os.path.join(VALIDATION, "nemo_rl_grpo_qwen3-32b_4x8xh100.yaml")])
    assert [(r.setup, r.figure, r.published) for r in rows] == [("nemo_rl_grpo_qwen3-32b_4x8xh100", "step", 393.0)]
    assert rows[0].memory_ok
    # the NeMo RL profile derives its dispatch (~0) instead of the presets' former 5 s per task
    assert rows[0].ratio == pytest.approx(HELD_OUT_RATIO, abs=0.01)


def _split_nemo_file(tmp_path, staleness):
    """The NeMo RL DTensor Llama-3.1-8B fixture with generation on node 0 and reference + training on node 1, on the
    knob model (``component_table: none``: the hand figures below; with the H100 table the trainer's cycle,
    not the two steps' chain, sets the period)."""
    import yaml
    cfg = load_yaml(NEMO_DTENSOR_FIXTURE)
    cfg["hardware"]["component_table"] = "none"
    node = {"dp": 8, "pp": 1, "tp": 1, "extent": [1, 1, 8]}
    cfg["validation"]["plan"] = {
        "actor.generate": {**node, "micro_batch": 128, "origin": [0, 0, 0]},
        "reference.infer": {**node, "micro_batch": 4, "origin": [0, 1, 0]},
        "actor.train": {**node, "micro_batch": 4, "origin": [0, 1, 0]},
    }
    if staleness is not None:
        cfg["validation"]["plan"]["staleness"] = staleness
    path = tmp_path / f"split_{staleness}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_validate_scores_a_stale_plan_as_the_asynchronous_period(tmp_path):
    from packplace.placement.evaluator import get_evaluator
    sync_path, async_path = _split_nemo_file(tmp_path, None), _split_nemo_file(tmp_path, {"actor": 1})
    (sync_row,), (async_row,) = validate([sync_path]), validate([async_path])
    instance, plan, _ = load_setup(async_path)
    assert plan.staleness == (("actor", 1),)
    ev = get_evaluator(instance)
    score, alone = ev.score(plan), ev.score(Plan(plan.vertices))
    g, r, t = (score.vertex_time[v] for v in ("actor.generate", "reference.infer", "actor.train"))
    g_batch = alone.vertex_time["actor.generate"]
    sync = score.synchronous_step_time
    realloc = score.realloc["actor.train->actor.generate"]
    # synchronous: one chain generate -> reference -> train -> weight sync, so the step is their sum
    # (plus the rollouts' transfer between the nodes, < 1 ms), the generation at its batch makespan
    assert sync_row.predicted == pytest.approx(sync)
    assert sync == pytest.approx(g_batch + r + t + realloc, abs=1e-3)
    # stale, the nemo-rl profile rolls out continuously: the next batch's prompts fill the slots this
    # batch's tail frees, so a step of generation costs its steady-state time, below the makespan (on the
    # async engine's 128 slots per engine: vLLM's AsyncLLM default, framework.VLLM_ASYNC_ENGINE_MAX_NUM_SEQS)
    # (the V1 engine's host time per running sequence, framework.VLLM_HOST_SECONDS_PER_SEQUENCE, included)
    # (the math reward: after the batch 2,048 responses x 0.73 ms over the recipe's 8 workers, 0.19 s; in the
    # stream, which scores each response as it finishes, the last one's 0.73 ms); the batch waits for the
    # slowest of its 8 engines' shares, the stream does not
    assert g < g_batch and g == pytest.approx(48.68, abs=0.01) and g_batch == pytest.approx(57.93, abs=0.01)
    # 1-step off-policy: period = max(node 0's cycle g, node 1's cycle r + t, the chain over 2 steps)
    # = max(48.68, 8.35 + 39.90 = 48.25, (48.68 + 48.25 + 1.62) / 2 = 49.27) = the chain (the reference swap
    # moves the DTensor policy's fp32 state dict): the generation
    # outlasts the trainer's reference + training passes, and the two steps' chain adds the refit across the
    # nodes (NCCL broadcast, NeMo RL's full-parameter gather and vLLM's weight load, 1.62 s); the FSDP2
    # trainer runs no step-end gradient all-reduce, and its 64 micro-batches' edges (the first layer's
    # gather, the last layer's fp32 reduce-scatter) are 64·7·(2·1 µs + 6·P/8/360e9)/32 = 0.234 s of the 39.90
    chain = (g + r + t + realloc) / 2
    assert realloc == pytest.approx(1.62, abs=0.01)
    assert r + t == pytest.approx(48.25, abs=0.01) and chain == pytest.approx(49.27, abs=0.01)
    assert async_row.predicted == pytest.approx(max(g, r + t, chain), abs=1e-3)
    assert async_row.predicted == pytest.approx(chain, abs=1e-3) and chain > g > r + t
    assert async_row.predicted < 0.47 * sync_row.predicted  # 49.21 / 107.67 = 0.457


def test_validation_plan_staleness_must_be_a_mapping_of_steps(tmp_path):
    with pytest.raises(ConfigError, match="plan.staleness.actor"):
        load_setup(_split_nemo_file(tmp_path, {"actor": -1}))
    with pytest.raises(ConfigError, match="plan.staleness: must be a mapping"):
        load_setup(_split_nemo_file(tmp_path, [1]))


def test_parts_add_up_to_the_task_time_and_calibrate_uses_the_same_total():
    # The 70B "Optimized DSChat" file trains ZeRO-3 with parameter and Adam offload and full recomputation:
    # its trainers' memory options cost over a third of their passes, so a part list without them (the
    # former validate --json parts and calibrate task times) would be off by that much.
    from packplace.placement.model.training_time import training_overhead_seconds

    path = os.path.join(VALIDATION, "deepspeed_chat_optimized_ppo_llama2-70b_32xa800.yaml")
    instance, plan, _ = load_setup(path)
    from packplace.placement.checking.validate import plan_evaluator

    ev = plan_evaluator(instance, plan)
    score = ev.score(plan)
    times = task_times(instance, plan, instance.hardware)
    for name, _vp in plan.vertices:
        parts = score.phases[name]
        assert sum(parts.values()) == pytest.approx(score.vertex_time[name], rel=1e-12)
        assert times[name] == pytest.approx(score.vertex_time[name], rel=1e-12)
    vp = dict(plan.vertices)["actor.train"]
    s = vp.strategy
    expected = training_overhead_seconds(ev.cost, instance.models["actor"], instance.training["actor"], s.dp, s.pp,
                                         s.tp, vp.micro_batch, vp.allocation.extent, s.ep)
    assert score.phases["actor.train"]["memory_options"] == pytest.approx(expected)
    assert expected > 0.3 * score.phases["actor.train"]["train"]


def test_validate_refuses_knobs_without_cross_validate(capsys):
    # --knobs names what --cross-validate fits; alone it would be ignored, so it is bad input
    assert main(["validate", OPENRLHF, "--knobs", "decode_bw_eff:gpu"]) == 2
    assert "--knobs" in capsys.readouterr().err


def test_validate_and_cross_validate_rows_name_their_figure_alike():
    # validate --json had said "phase" where cross-validate --json says "figure" for the same thing
    from packplace.placement.checking.crossval import CrossRow
    from packplace.placement.checking.validate import ValidationRow
    row = ValidationRow("setup", "step", 10.0, 8.0, True)
    cross = CrossRow("setup", "step", "a publication", "verl", "h100-sxm", 8.0, 10.0, 9.0, True, True)
    assert row.as_dict()["figure"] == cross.as_dict()["figure"] == "step"
    assert "phase" not in row.as_dict() and "phase" not in cross.as_dict()
    with pytest.warns(DeprecationWarning, match=r"ValidationRow\.phase is deprecated; use ValidationRow\.figure"):
        assert row.phase == "step"   # the attribute's deprecated alias, still the figure


def test_calibrate_refuses_the_component_table_flags_without_measurements(tmp_path, capsys):
    # --gpu and --out belong to --measurements: a knob fit had ignored them, exit 0 and no file written
    out = tmp_path / "fitted.json"
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED, "--out", str(out)]) == 2
    assert "calibrate: --out " in capsys.readouterr().err and not out.exists()
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED, "--gpu", "h200"]) == 2
    assert "calibrate: --gpu 'h200': only --measurements" in capsys.readouterr().err
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED]) == 0


def test_calibrate_refuses_a_knob_named_twice_and_an_empty_knobs_list(tmp_path, capsys):
    instance, plan, _ = load_setup(OPENRLHF)
    measured = task_times(instance, plan, instance.hardware)
    # the second column had replaced the first: "knob 'gemm_peak_fraction' does not change any measured task time"
    with pytest.raises(ConfigError, match="knob 'gemm_peak_fraction' is named twice"):
        calibrate(instance, plan, measured, ("gemm_peak_fraction", "gemm_peak_fraction"))
    assert main(["calibrate", "--config", QWEN, "--measured", QWEN_MEASURED, "--knobs",
                 "decode_bw_eff,decode_bw_eff"]) == 2
    assert "named twice" in capsys.readouterr().err
    # `knobs: []` in the measured file names no knob: refused, as `--knobs ''` is (it had fitted the 3 defaults)
    empty = tmp_path / "measured.yaml"
    empty.write_text("times: {actor.generate: 24.3}\nengine_only: [actor.generate]\nknobs: []\n")
    assert main(["calibrate", "--config", QWEN, "--measured", str(empty)]) == 2
    assert "no knob to fit" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["openrlhf_ppo_llama2-7b_8xa800", "openrlhf_ppo_llama2-7b_16xa800",
                                  "deepspeed_chat_ppo_opt-1.3b_64xa100", "nemo_rl_v0.5_grpo_llama3.1-8b_2x8xh100_1off",
                                  "verl_dapo_qwen2.5-math-7b_2x8xh20_colocate"])
def test_predict_returns_plain_floats(name):
    # OpenRLHF >= 0.5's rows (openrlhf_ppo_llama2-7b_8xa800) came back as
    # np.float64 while the other files' were floats: every number leaves predict and flop_floor a float.
    instance, plan, section = load_setup(f"benchmarks/validation/{name}.yaml")
    predicted, fits, parts = predict(instance, plan, section)
    assert type(fits) is bool and predicted and parts
    assert all(type(v) is float for v in predicted.values())
    assert all(type(v) is float for vertex in parts.values() for v in vertex.values())
    assert all(type(v) is float for v in flop_floor(instance, plan, section).values())
