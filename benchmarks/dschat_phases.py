"""DeepSpeed-Chat step-3 phase timings from published logs against the model's phases of the same run.

    python benchmarks/dschat_phases.py            # print the rows, the per-iteration residuals and the fits
    python benchmarks/dschat_phases.py --write    # also refresh benchmarks/dschat_phases.json

The DeepSpeed-Chat validation rows publish whole steps (DeepSpeedExamples' README Table 1 for OPT, the OpenRLHF
README for "Optimized DSChat"), and the model's hybrid-engine step is too fast on most of them. This script collects
step-3 logs published outside those tables, each with its run's settings, and prices the same run phase by phase
(:func:`price`: a validation file, or one built from the log's settings, scored by the evaluator), to say whether
the generation phase carries the gap and whether a per-layer decode-iteration cost (kernels launched eagerly, per
layer) explains it better than the profile's flat ``DS_HYBRID_DECODE_STEP_OVERHEAD``. Nothing here is a validation
row and nothing sets a knob; the write-up is docs/calibration-and-validation.md, "DeepSpeed-Chat phases against
published step-3 logs".

What the logs time (DeepSpeed-Chat ``main.py`` / ``ppo_trainer.py``, DeepSpeed ``runtime/hybrid_engine.py``):

- DeepSpeed's hybrid-engine line ``|E2E latency=… |Gather latency=… |Generate time=… |Training time=… |Others=…``
  (printed at every ``eval()``, v0.9.0 on): ``Generate time`` is the ``generate`` call less its ZeRO-3 gather;
  ``Training time`` runs from the actor's ``train()`` (called by ``generate_experience`` right after generation) to
  its ``step()``, so it holds the experience forwards (actor, reference, reward, critic) and the actor's training;
  the critic's training falls into ``Others``.
- DeepSpeed-Chat's ``Generation => Latency`` (from August 2023, ``utils/perf.py`` ``print_throughput_step3``):
  the wall time of ``_generate_sequence`` (gather included); ``Per-token Latency`` is it over
  ``max_answer_seq_len``; ``Training => Latency`` is the actor's and critic's training after the experience.
- The OpenRLHF authors' fork (github.com/wuxibin89/DeepSpeedExamples, branch ``wuxibin/benchmark``) sums the same
  phases over the 1,024 prompts of its step: generation, training, end to end (experience = the rest).

The model's phases (``ScoreDetail`` ``vertex_phases_s``): ``actor.generate`` (+ the ``actor.train ->
actor.generate`` refit edge, the first call's gather) is the generation; ``reference.infer``, ``reward.infer``,
``critic.infer`` and ``actor.train``'s ``old_log_prob`` are the experience; ``actor.train`` / ``critic.train``'s
``train`` + ``memory_options`` the training.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
from contextlib import contextmanager
from pathlib import Path

from packplace.placement.checking.validate import load_setup_mapping, setup_detail
from packplace.placement.model import framework
from packplace.placement.problem.hardware import _links
from packplace.yamlio import load_yaml, set_dotted

OUT = Path(__file__).with_name("dschat_phases.json")
VALIDATION = Path(__file__).with_name("validation")
DSE = "github.com/deepspeedai/DeepSpeedExamples"
LOG_3A77097A = (f"{DSE} @ 3a77097a applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/training_log_output/"
                "actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log")

#: NVIDIA V100-SXM3-32GB of a DGX-2 (the DeepSpeedExamples training README's machine for its logs): 125 TFLOP/s
#: fp16 tensor, 32 GB HBM2 at 900 GB/s (NVIDIA V100 datasheet); 16 GPUs on NVSwitch, six NVLink2 links of 25 GB/s
#: per direction each (150 GB/s, taken as the NCCL bus bandwidth at 130 GB/s); PCIe 3.0 x16 to the host
#: (12.5 GB/s). The efficiency fractions are the presets' defaults, as the 4.7 ms derivation used them.
DS_BLOG_0831 = "github.com/deepspeedai/DeepSpeed blogs/deepspeed-chat/ds-chat-release-8-31/README.md"
V100_DGX2 = {"flops_per_gpu": 125e12, "memory_per_gpu": 32e9, "memory_bandwidth": 900e9, **_links(130e9, 12.5e9),
             "host_bandwidth": 12.5e9, "gemm_peak_fraction": 0.6, "decode_bw_eff": 0.65,
             "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 16}

#: Llama-2-13B config.json (huggingface.co/meta-llama/Llama-2-13b-hf).
LLAMA2_13B = {"model_type": "llama", "num_hidden_layers": 40, "hidden_size": 5120, "intermediate_size": 13824,
              "vocab_size": 32000, "num_attention_heads": 40, "num_key_value_heads": 40}


#: Published step-3 logs with their run's settings. ``config``: the validation file whose models and plan the run
#: shares (``overrides``: dotted fields set on it; ``build``: a function that rewrites the whole setup). ``fit``:
#: whether the row may size a constant (False: the same runs as a validation row's source). ``published``: seconds
#: of one logged step, in the log's own phase names; ``answer_len``: tokens decoded per ``generate`` call.
LOGS = [
    {"id": "dse-log-opt1.3b-16xv100", "gpu": "V100-SXM3-32GB (DGX-2)", "gpus": 16,
     "source": LOG_3A77097A + " (the run of 2023-04-18; DeepSpeed's hybrid-engine line, 476 steps, medians)",
     "deepspeed": "master of April 2023 (DeepSpeed-Chat's release, between v0.9.0 and v0.9.1)",
     "actor": "OPT-1.3B", "critic": "OPT-350M", "zero": "2 / 2", "lora": 0, "per_device_batch": 4,
     "prompt_len": 256, "answer_len": 256, "inference_tp": 1,
     "notes": "--enable_hybrid_engine --enable_ema; min_length = max_length in that commit's ppo_trainer: every "
              "sequence decodes 256 tokens. The row the profile's 4.7 ms is read from (in sample)",
     "config": "deepspeed_chat_ppo_opt-1.3b_8xa100.yaml", "build": "v100_log", "fit": True,
     "format": "hybrid_engine_line",
     "published": {"generation": 2.52, "experience_and_actor_train": 1.06, "others": 0.22, "e2e": 3.80}},
    {"id": "openrlhf-issue327-llama2-7b-16xa800", "gpu": "A800-80GB", "gpus": 16,
     "source": "github.com/OpenRLHF/OpenRLHF/issues/327 (a user's rerun of the OpenRLHF authors' DeepSpeed-Chat fork, "
               "\"About\" figures of its first steps, per 1,024 prompts)",
     "deepspeed": "0.12.6 (the fork's patched wheel)",
     "actor": "Llama-2-7B", "critic": "Llama-2-7B", "zero": "3 / 3 (+ offload, reference and reward offload)",
     "lora": 0, "per_device_batch": 8, "prompt_len": 1024, "answer_len": 1024, "inference_tp": 1,
     "notes": "the fork's run_llama2_7b_ray.sh as the validation file reads it (2 nodes x 8 A800, 1,024 prompts per "
              "step); the same setup as the Optimized DSChat 7B validation row, run by someone else",
     "config": "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml", "overrides": {}, "fit": True,
     "format": "fork_sums",
     "published": {"generation": 328.0, "training": 148.0, "e2e": 538.0}},
    {"id": "ds-blog-0831-llama2-7b-8xa100", "gpu": "A100-80GB", "gpus": 8, "hardware": "a100-80gb-sxm",
     "source": f"{DS_BLOG_0831} Figure 1 (assets/images/llama2-with-he.png): the hybrid engine's bar, the baseline's "
               "50 s over the figure's 7.1x",
     "deepspeed": "v0.10.1 / v0.10.2 (the blog's release)", "actor": "Llama-2-7B", "critic": "Llama-2-7B",
     "zero": "3 / 3 (+ reference offload)", "lora": 0, "per_device_batch": 1, "prompt_len": 256, "answer_len": 256,
     "inference_tp": 1,
     "notes": "the GPU count is not published: one 8-GPU node assumed (the ZeRO-3 gather of one call is the only "
              "term it moves); run_llama2_7b.sh at 6c83ac20, the only Llama-2 step-3 script of the release",
     "config": "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml", "build": "llama2_script", "fit": True,
     "format": "generation_only", "published": {"generation": 50.0 / 7.1}},
    {"id": "ds-blog-0831-llama2-13b-8xa100", "gpu": "A100-80GB", "gpus": 8, "hardware": "a100-80gb-sxm",
     "model": LLAMA2_13B,
     "source": f"{DS_BLOG_0831} Figure 1 (assets/images/llama2-with-he.png): the hybrid engine's bar, the baseline's "
               "65 s over the figure's 5.4x",
     "deepspeed": "v0.10.1 / v0.10.2 (the blog's release)", "actor": "Llama-2-13B", "critic": "Llama-2-13B",
     "zero": "3 / 3 (+ reference offload)", "lora": 0, "per_device_batch": 1, "prompt_len": 256, "answer_len": 256,
     "inference_tp": 1,
     "notes": "no 13B step-3 script at the release: the 7B script's settings with the 13B models; one 8-GPU node "
              "assumed, as the 7B bar",
     "config": "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml", "build": "llama2_script", "fit": True,
     "format": "generation_only", "published": {"generation": 65.0 / 5.4}},
    {"id": "ds-blog-0831-llama2-7b-16xv100", "gpu": "V100-32GB", "gpus": 16, "hardware": V100_DGX2,
     "source": f"{DS_BLOG_0831} Figure 2 left (assets/images/dschat-llama-7b-HE-perf.png, \"16 V100 GPUs\"): the "
               "hybrid engine's bar, 14.5 s on the chart (the baseline's 57.8 s over its 4x: 14.45 s)",
     "deepspeed": "v0.10.1 / v0.10.2 (the blog's release)", "actor": "Llama-2-7B", "critic": "Llama-2-7B",
     "zero": "3 / 3 (+ reference offload)", "lora": 0, "per_device_batch": 1, "prompt_len": 256, "answer_len": 256,
     "inference_tp": 1,
     "notes": "run_llama2_7b.sh at 6c83ac20; the 16 V100 taken as one DGX-2 (the V100 log's machine)",
     "config": "deepspeed_chat_optimized_ppo_llama2-7b_16xa800.yaml", "build": "llama2_script", "fit": True,
     "format": "generation_only", "published": {"generation": 14.5}},
]

#: The DeepSpeed blog's phase split of its 8-A100 runs (github.com/deepspeedai/DeepSpeed blogs/deepspeed-chat/
#: README.md Figure 6, generation and training TFLOPs per GPU turned into seconds per 1,024 samples with
#: DeepSpeed-Chat's FLOP count: docs/calibration-and-validation.md, "The OPT-1.3B 8 -> 64 A100 pair"). The same
#: runs as the Table 1 validation cells: priced, never fitted (``fit`` False).
BLOG_ROWS = [
    {"id": "blog-fig6-opt1.3b-8xa100", "config": "deepspeed_chat_ppo_opt-1.3b_8xa100.yaml",
     "published": {"generation": 7.4, "training": 10.6}},
    {"id": "blog-fig6-opt6.7b-8xa100", "config": "deepspeed_chat_ppo_opt-6.7b_8xa100.yaml",
     "published": {"generation": 26.8}},
    {"id": "blog-fig6-opt13b-8xa100", "config": "deepspeed_chat_ppo_opt-13b_8xa100.yaml",
     "published": {"generation": 51.6}},
]

#: Published step-3 timings not priced, with the reason.
NOT_PRICED = [
    {"source": f"{DSE}/issues/444", "what": "OPT-1.3B + OPT-350M, single node: Generate time 1.59-1.64 s, "
                                          "Training time 0.42 s, E2E 2.12-2.16 s",
     "reason": "GPU type, GPU count and batch not given (\"a private GPU cluster\")"},
    {"source": f"{DSE}/issues/419", "what": "OPT-1.3B + OPT-350M, 128 + 128 tokens, 4 per GPU: Gather 0.19 s, "
                                          "Generate 2.96 s, Training 1.90 s, Others 1.62 s",
     "reason": "GPU type and count not given; the ZeRO stage is a shell variable"},
    {"source": f"{DSE}/issues/718", "what": "BLOOMZ-7B1 + BLOOM-560M, 256 + 256, ZeRO-3, 8 x A100-40G: generation "
                                          "about 72 s (ZeRO-2: 0.8 s)",
     "reason": "batch not given; the ZeRO-2 figure (0.8 s for 256 tokens of a 7B model, 3 ms per token) is below "
               "the weight-read floor of an A100-40G, so the two figures cannot both be generate calls"},
    {"source": f"{DSE}/issues/764", "what": "ZeRO-3 on 2 A800: per-token latency about 700 ms",
     "reason": "model and batch only in screenshots"},
    {"source": "github.com/deepspeedai/DeepSpeed/issues/4354", "what": "LLaMA-13B, ZeRO-3 + offload, 8 V100-32G, "
                                                                     "256 + 512: generation 20-300 s",
     "reason": "a range, batch not given"},
    {"source": "github.com/fuyuantan/DeepSpeed-Chat-Training-Record README.md", "what": "OPT-1.3B LoRA 128 + "
               "OPT-350M, one GPU, ZeRO 0, 16 prompts: Generation 13.43 s, 52.46 ms per token, Training 1.21 s",
     "reason": "no --enable_hybrid_engine in its arguments (Hugging Face generate, not the hybrid engine) and the "
               "GPU is not named"},
]


#: The 3a77097a log's own split of its training side (the log of ``LOGS[0]``; seconds of one step, medians).
#: ``actor_train``: DeepSpeed's ThroughputTimer lines (``timer.py:199:stop``, every 10th actor step, 47 lines,
#: median ``CurrSamplesPerSec`` 85.96): ``train_batch_size`` (4 x 16 = 64) over the seconds from the actor engine's
#: last ``forward`` (v0.9.0 ``engine.forward`` restarts the timer after a device synchronize, so the training
#: forward, not the experience one) to the end of its ``step()``. ``critic_train``: the gap between the actor's and
#: the critic's ``logging.py:96:log_dist ... step=N`` lines (each printed inside that engine's ``step()``; 47 pairs,
#: median 0.217 s, range 0.214-0.232): the critic's forward, backward and step, which is the whole of ``Others``
#: (0.22), so the EMA update and the loop's logging after it take under 0.01 s. The experience forwards (and the
#: hybrid engine's ``train()`` switch) are ``Training time`` less ``actor_train``.
V100_LOG_SPLIT = {"actor_train": 64 / 85.96, "critic_train": 0.217}

#: The same release's step-1 and step-2 training logs (DeepSpeedExamples @ 3a77097a
#: ``training/step1_supervised_finetuning/training_log_output/opt-1.3b-globalBatchSize128.log``: OPT-1.3B, ZeRO 2,
#: 8 sequences of 512 per GPU, 736 ThroughputTimer lines, median ``CurrSamplesPerSec`` 171.63 of a global batch of
#: 128; ``training/step2_reward_model_finetuning/training_log_output/opt-350m_globalBatchSize-64.log``: OPT-350M,
#: ZeRO 0, 4 chosen/rejected pairs, so 8 sequences of 512, per GPU, 184 lines, median 218.51 of 64): seconds of one
#: forward + backward + step at 4,096 tokens per GPU on 16 GPUs of the same date, against the step-3 passes at
#: 2,048 (:data:`V100_LOG_SPLIT`). No hybrid engine and no step-3 neighbours in memory.
SAME_MACHINE_TRAINING = {"actor_train": 128 / 171.63, "critic_train": 64 / 218.51}


def fixed_and_per_token(t_small: float, t_large: float, tokens_small: float, tokens_large: float) -> dict:
    """The straight line through two step times of one training pass at two token counts per GPU:
    ``per_token_s`` (slope, seconds per token) and ``fixed_s`` (intercept, seconds per step).

    Raises:
        ValueError: the token counts are not positive and distinct.
    """
    if not (tokens_small > 0 and tokens_large > 0) or tokens_small == tokens_large:
        raise ValueError(f"fixed_and_per_token: token counts must be positive and distinct, got "
                         f"{tokens_small!r} and {tokens_large!r}")
    slope = (t_large - t_small) / (tokens_large - tokens_small)
    return {"per_token_s": slope, "fixed_s": t_small - slope * tokens_small}


def same_machine_training(cfg: dict, small: dict) -> dict:
    """:data:`SAME_MACHINE_TRAINING` against the model: ``cfg`` (``LOGS[0]``'s setup) at 8 sequences per GPU
    (global batch 128) priced for the actor's and critic's training passes (ZeRO 2 for both: the step-2 run's ZeRO 0
    all-reduces the same gradient bytes, ``zero2_step_floor``'s ``reduce`` + ``all_gather``), and per pass the line
    through its 2,048- and 4,096-token times (:func:`fixed_and_per_token`), published and predicted. ``small``:
    :func:`price` of ``cfg`` as it is (4 sequences per GPU)."""
    big = json.loads(json.dumps(cfg))
    big["workload"]["batch_size"] = 128
    for vertex in big["validation"]["plan"].values():
        vertex["micro_batch"] = 8
    large = price(big)
    out = {}
    for phase in ("actor_train", "critic_train"):
        pub_small, pub_large = V100_LOG_SPLIT[phase], SAME_MACHINE_TRAINING[phase]
        out[phase] = {"predicted_4096": large[phase], "published_4096": pub_large,
                      "ratio_4096": large[phase] / pub_large,
                      "published": fixed_and_per_token(pub_small, pub_large, 2048, 4096),
                      "predicted": fixed_and_per_token(small[phase], large[phase], 2048, 4096)}
    return out


#: DeepSpeed FusedAdam's bytes per parameter of one step over the fp32 partition (reads parameter, gradient and
#: both moments, writes parameter and moments: 4 x 4 + 3 x 4; ``csrc/adam/multi_tensor_adam.cu``).
ADAM_BYTES_PER_PARAM = 28.0


def zero2_step_floor(params: float, dp: int, hbm_bandwidth: float, bus_bandwidth: float) -> dict:
    """The per-parameter costs of one ZeRO-2 step of DeepSpeed v0.9.0 (``runtime/zero/stage_1_and_2.py``) at their
    bandwidth floors, seconds: ``adam`` (:data:`ADAM_BYTES_PER_PARAM` over the ``params/dp`` fp32 partition at
    ``hbm_bandwidth`` bytes/s), ``reduce`` (``average_tensor``: one ``dist.reduce`` per owning rank's slice of each
    bucket, so every fp16 gradient byte crosses the ring once: ``2·params/bus_bandwidth``) and ``all_gather`` (the
    updated fp16 partitions, ``2·params·(dp−1)/dp/bus_bandwidth``). Latencies are left out (tens of calls).

    Raises:
        ValueError: ``params``, ``dp`` or a bandwidth is not positive.
    """
    for name, value in (("params", params), ("dp", dp), ("hbm_bandwidth", hbm_bandwidth),
                        ("bus_bandwidth", bus_bandwidth)):
        if not value > 0:
            raise ValueError(f"zero2_step_floor: {name} must be positive, got {value!r}")
    return {"adam": ADAM_BYTES_PER_PARAM * params / dp / hbm_bandwidth,
            "reduce": 2.0 * params / bus_bandwidth,
            "all_gather": 2.0 * params * (dp - 1) / dp / bus_bandwidth}


def training_split(p: dict, published: dict, models: dict) -> dict:
    """The V100 log's training side split (:data:`V100_LOG_SPLIT`) against the model's phases ``p``
    (:func:`price` of ``LOGS[0]``'s setup). ``published``: ``LOGS[0]["published"]``; ``models``: role ->
    ``(params, layers)``. Per phase (``experience``, ``actor_train``, ``critic_train``): ``predicted``,
    ``published``, ``ratio``, ``residual_s`` (published − predicted), ``residual_per_layer_ms`` (over the
    layers of the phase's model) and ``residual_per_gparam_s`` (over billions of its parameters; the experience's
    over the four forwards' layers and parameters together), and ``floors``
    (:func:`zero2_step_floor` of the actor and the critic on the log's 16 V100 at 900 GB/s HBM, 130 GB/s bus)."""
    pub = {"actor_train": V100_LOG_SPLIT["actor_train"], "critic_train": V100_LOG_SPLIT["critic_train"],
           "experience": published["experience_and_actor_train"] - V100_LOG_SPLIT["actor_train"]}
    sizes = {"actor_train": models["actor"], "critic_train": models["critic"],
             "experience": tuple(sum(models[m][i] for m in ("actor", "reference", "reward", "critic"))
                                 for i in (0, 1))}
    out = {}
    for phase, seconds in pub.items():
        residual = seconds - p[phase]
        params, layers = sizes[phase]
        out[phase] = {"predicted": p[phase], "published": seconds, "ratio": p[phase] / seconds,
                      "residual_s": residual, "residual_per_layer_ms": 1e3 * residual / layers,
                      "residual_per_gparam_s": residual / (params / 1e9)}
    out["floors"] = {role: zero2_step_floor(models[role][0], 16, V100_DGX2["memory_bandwidth"], 130e9)
                     for role in ("actor", "critic")}
    return out


def model_sizes(cfg: dict) -> dict:
    """Role -> ``(parameters, layers)`` of the setup ``cfg``'s models, as the evaluator builds them.

    Raises:
        ConfigError: ``cfg`` is not a loadable validation setup.
    """
    instance, _, _ = load_setup_mapping(cfg)
    return {role: (m.params, m.layers) for role, m in instance.models.items()}


def _v100_log(cfg: dict, row: dict) -> dict:
    """The 3a77097a log's run on the OPT-1.3B file: 16 V100 of one DGX-2, 4 prompts per GPU (64 per step), one
    optimizer step per model per step (``gradient_accumulation_steps`` 1), ZeRO 2, every model on every GPU."""
    cfg["hardware"] = dict(V100_DGX2)
    cfg["workload"]["batch_size"] = 64
    cfg["training"]["optimizer_steps"] = 1
    for vertex in cfg["validation"]["plan"].values():
        vertex.update(dp=16, micro_batch=4, extent=[1, 1, 16])
    return cfg


def _llama2_script(cfg: dict, row: dict) -> dict:
    """DeepSpeedExamples' Llama-2 step-3 script at the blog's release (6c83ac20, 2023-08-31,
    training_scripts/llama2/run_llama2_7b.sh) on the Llama-2-7B Optimized DSChat file: 1 prompt per GPU
    (``--per_device_generation_batch_size 1``), 256 + 256 tokens, actor and critic ZeRO 3 with gradient
    checkpointing, ``--offload_reference_model`` (the reference only), ``--enable_hybrid_engine`` at inference TP 1,
    no LoRA and no ``--offload``; ``row["gpus"]`` GPUs, ``row["hardware"]`` (a preset name or a section) and
    ``row["model"]`` (a config for actor, critic and reward; the 7B file's own when absent)."""
    hw = row["hardware"]
    cfg["hardware"] = {"preset": hw, "nodes_per_rack": 1} if isinstance(hw, str) else dict(hw)
    if row.get("model"):
        for role in ("actor", "critic", "reward"):
            cfg["models"][role] = dict(row["model"])
    n = row["gpus"]
    per_node = cfg["hardware"].get("gpus_per_node", 8)
    cfg["workload"].update(batch_size=n, context_length=256, generation_length=256)
    cfg["policy"]["inference_offload"] = "reference"
    cfg["training"].pop("offload", None)
    cfg["training"]["optimizer_steps"] = 1
    for vertex in cfg["validation"]["plan"].values():
        vertex.update(dp=n, micro_batch=1, extent=[1, max(1, n // per_node), min(n, per_node)])
    return cfg


BUILDERS = {"v100_log": _v100_log, "llama2_script": _llama2_script}


@contextmanager
def decode_overhead(seconds: float):
    """The ``deepspeed-chat`` profile with ``decode_step_overhead`` = ``seconds`` while the block runs; restored on
    exit (a benchmark-only switch, to take the profile's per-iteration term out of a price)."""
    with framework.overridden_profile("deepspeed-chat", decode_step_overhead=seconds):
        yield


def setup(row: dict) -> dict:
    """The validation-file setup of ``row``: its ``config`` with ``build`` applied and ``overrides`` set."""
    cfg = load_yaml(str(VALIDATION / row["config"]))
    if row.get("build"):
        cfg = BUILDERS[row["build"]](cfg, row)
    for key, value in (row.get("overrides") or {}).items():
        set_dotted(cfg, key, value)
    return cfg


def price(cfg: dict) -> dict:
    """The model's phases of the setup ``cfg``, seconds per step: ``generation`` (actor.generate + the refit edge
    into it; of which ``merge``, the merged-buffer copies of the ZeRO-3 containers, and ``gather``, the per-call
    gathers with the refit), ``experience`` (reference, reward and critic forwards and the actor's old log-probs),
    ``actor_train`` / ``critic_train`` (train + memory_options), ``step``, and ``calls`` / ``layers`` / ``answer_len``
    (generate calls per rank, the actor's layers, tokens decoded per call).

    Raises:
        ConfigError: ``cfg`` is not a loadable validation setup.
    """
    detail = setup_detail(cfg)
    ph = detail["vertex_phases_s"]
    refit = detail["realloc_s"].get("actor.train->actor.generate", 0.0)
    actor, critic = ph["actor.train"], ph["critic.train"]
    experience = sum(ph["reference.infer"].values()) + sum(ph["reward.infer"].values()) \
        + sum(ph["critic.infer"].values()) + actor.get("old_log_prob", 0.0)
    gen_plan = cfg["validation"]["plan"]["actor.generate"]
    sequences = cfg["workload"]["batch_size"] * cfg["workload"].get("samples_per_prompt", 1)
    calls = -(-(sequences // gen_plan["dp"]) // gen_plan["micro_batch"])
    return {"step": detail["step_time_s"], "generation": sum(ph["actor.generate"].values()) + refit,
            "merge": ph["actor.generate"].get("merge", 0.0),
            "gather": ph["actor.generate"].get("gather", 0.0) + refit,
            "experience": experience,
            "actor_train": actor.get("train", 0.0) + actor.get("memory_options", 0.0),
            "critic_train": critic.get("train", 0.0) + critic.get("memory_options", 0.0),
            "calls": calls, "layers": cfg["models"]["actor"]["num_hidden_layers"],
            "answer_len": cfg["workload"]["generation_length"]}


def predicted_phases(p: dict, fmt: str) -> dict:
    """The model's phases ``p`` (:func:`price`) in the log format ``fmt``'s names."""
    if fmt == "hybrid_engine_line":
        return {"generation": p["generation"], "experience_and_actor_train": p["experience"] + p["actor_train"],
                "others": p["critic_train"],
                "e2e": p["generation"] + p["experience"] + p["actor_train"] + p["critic_train"]}
    return {"generation": p["generation"], "training": p["actor_train"] + p["critic_train"],
            "e2e": p["generation"] + p["experience"] + p["actor_train"] + p["critic_train"]}


def price_row(row: dict) -> dict:
    """One log row priced: ``predicted`` and ``ratio`` (predicted / published) per phase, the per-token latencies
    (generation over ``calls · answer_len`` decode iterations), the generation without the profile's
    per-iteration term (``base_generation``), from which :func:`residuals` reads what a decode iteration lacks, and
    the generation ratio without the merged-buffer copies (``generation_ratio_without_merge``)."""
    cfg = setup(row)
    p = price(cfg)
    with decode_overhead(0.0):
        base = price(cfg)["generation"]
    pred = predicted_phases(p, row.get("format", "fork_sums"))
    pub = row["published"]
    iterations = p["calls"] * p["answer_len"]
    out = {k: v for k, v in row.items() if k not in ("overrides",)}
    out.update(predicted=pred, ratio={k: pred[k] / pub[k] for k in pub if k in pred},
               calls=p["calls"], answer_len=p["answer_len"], layers=p["layers"], iterations=iterations,
               per_token_ms={"published": 1e3 * pub["generation"] / iterations,
                             "predicted": 1e3 * pred["generation"] / iterations},
               base_generation=base, merge=p["merge"], gather=p["gather"],
               generation_ratio_without_merge=(pred["generation"] - p["merge"]) / pub["generation"],
               flat_overhead_iterations=(p["generation"] - base) / framework.DS_HYBRID_DECODE_STEP_OVERHEAD)
    return out


def residuals(rows: list[dict]) -> list[dict]:
    """Per row: the host time per decode iteration the published generation implies beyond the model's
    generation without its per-iteration term, ``(published − base) / iterations`` (seconds), and that per layer of
    the actor. Iterations are the ones the profile's term is charged on (its share of the price over 4.7 ms)."""
    out = []
    for r in rows:
        n = r["flat_overhead_iterations"]
        per_iter = (r["published"]["generation"] - r["base_generation"]) / n
        out.append({"id": r["id"], "fit": r["fit"], "layers": r["layers"], "iterations": n,
                    "per_iteration_s": per_iter, "per_layer_s": per_iter / r["layers"]})
    return out


def leave_one_out(res: list[dict], rows: list[dict]) -> dict:
    """The flat per-iteration form (``b`` seconds) and the per-layer form (``c·L``) fitted on the ``fit`` rows
    (median of the rows' own values), and each fitted row held out: its generation priced with the constant of the
    others, over the published generation. Rows not fitted are priced with the constant of all fit rows.
    ``mean_abs_log``: the mean ``|ln(predicted / published)|`` of the held-out fit rows for each form and for the
    model as it is (``current``: the flat 4.7 ms, whose source is the V100 log, so in sample on that row only)."""
    by_id = {r["id"]: r for r in rows}
    fit = [x for x in res if x["fit"]]

    def gen(x, b=None, c=None):
        r = by_id[x["id"]]
        extra = b if b is not None else c * x["layers"]
        return (r["base_generation"] + x["iterations"] * extra) / r["published"]["generation"]

    out = {"fit_rows": [x["id"] for x in fit], "held_out": []}
    if not fit:
        return out
    b_all = statistics.median(x["per_iteration_s"] for x in fit)
    c_all = statistics.median(x["per_layer_s"] for x in fit)
    out.update(flat_s=b_all, per_layer_s=c_all)
    for x in res:
        others = [y for y in fit if y["id"] != x["id"]]
        if x["fit"] and not others:
            continue
        b = statistics.median(y["per_iteration_s"] for y in others) if x["fit"] else b_all
        c = statistics.median(y["per_layer_s"] for y in others) if x["fit"] else c_all
        out["held_out"].append({"id": x["id"], "in_fit": x["fit"], "flat_s": b, "per_layer_s": c,
                                "flat_ratio": gen(x, b=b), "per_layer_ratio": gen(x, c=c),
                                "current_ratio": by_id[x["id"]]["ratio"]["generation"]})
    held = [h for h in out["held_out"] if h["in_fit"]]
    out["mean_abs_log"] = {form: statistics.fmean(abs(math.log(h[f"{form}_ratio"])) for h in held)
                           for form in ("flat", "per_layer", "current")}
    return out


def all_rows() -> list[dict]:
    """:data:`LOGS` and :data:`BLOG_ROWS` priced (:func:`price_row`)."""
    blog = [{**b, "gpu": "A100-80GB", "gpus": 8, "fit": False, "format": "fork_sums",
             "source": "github.com/deepspeedai/DeepSpeed blogs/deepspeed-chat/README.md Figure 6 (per 1,024 samples)"}
            for b in BLOG_ROWS]
    return [price_row(r) for r in LOGS + blog]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = parser.parse_args()
    rows = all_rows()
    for r in rows:
        phases = ", ".join(f"{k} {r['predicted'][k]:.2f}/{r['published'][k]:.2f} ({r['ratio'][k]:.2f})"
                           for k in r["ratio"])
        print(f"{r['id']} ({r['gpus']} x {r['gpu']}, {r['calls']} calls x {r['answer_len']} tokens, "
              f"{r['layers']} layers): {phases}; per token {r['per_token_ms']['predicted']:.2f}/"
              f"{r['per_token_ms']['published']:.2f} ms; merge copies {r['merge']:.2f} s (generation without them "
              f"{r['generation_ratio_without_merge']:.2f})")
    res = residuals(rows)
    print()
    for x in res:
        print(f"{x['id']}: published generation implies {1e3 * x['per_iteration_s']:.2f} ms per decode iteration "
              f"beyond the roofline ({1e3 * x['per_layer_s']:.3f} ms per layer){'' if x['fit'] else ' [not fitted]'}")
    loo = leave_one_out(res, rows)
    print(f"\nfit rows {loo['fit_rows']}: flat {1e3 * loo.get('flat_s', float('nan')):.2f} ms, per layer "
          f"{1e3 * loo.get('per_layer_s', float('nan')):.3f} ms")
    print("mean |ln(predicted / published)| over the held-out fit rows: " + ", ".join(
        f"{k} {v:.3f}" for k, v in loo.get("mean_abs_log", {}).items()))
    for h in loo["held_out"]:
        print(f"  {h['id']}{' (held out)' if h['in_fit'] else ''}: generation ratio flat {h['flat_ratio']:.2f}, "
              f"per layer {h['per_layer_ratio']:.2f}, model now {h['current_ratio']:.2f}")
    for n in NOT_PRICED:
        print(f"not priced: {n['source']}: {n['what']}: {n['reason']}")
    v100 = setup(LOGS[0])
    split = training_split(price(v100), LOGS[0]["published"], model_sizes(v100))
    print("\nV100 log, training side split by the log's own timers (predicted / published):")
    for phase, x in split.items():
        if phase != "floors":
            print(f"  {phase}: {x['predicted']:.3f} / {x['published']:.3f} ({x['ratio']:.2f}); residual "
                  f"{x['residual_s']:.3f} s = {x['residual_per_layer_ms']:.1f} ms per layer = "
                  f"{x['residual_per_gparam_s']:.3f} s per 1e9 parameters")
    for role, f in split["floors"].items():
        print(f"  ZeRO-2 step floors, {role}: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in f.items()))
    same = same_machine_training(v100, price(v100))
    for phase, x in same.items():
        print(f"  {phase} at 4,096 tokens per GPU (step-1/2 logs): {x['predicted_4096']:.3f} / "
              f"{x['published_4096']:.3f} ({x['ratio_4096']:.2f}); per step + per token: published "
              f"{x['published']['fixed_s']:.3f} s + {1e6 * x['published']['per_token_s']:.1f} us, predicted "
              f"{x['predicted']['fixed_s']:.3f} s + {1e6 * x['predicted']['per_token_s']:.1f} us")

    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        OUT.write_text(json.dumps({"measured_at_commit": commit, "rows": rows, "residuals": res,
                                   "leave_one_out": loo, "training_split": split,
                                   "same_machine_training": same,
                                   "not_priced": NOT_PRICED}, indent=1) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
