"""NeMo RL's published per-phase timings against the model's phases of the same recipe.

    python benchmarks/nemo_rl_phases.py            # print the rows, the deltas and the on-policy split
    python benchmarks/nemo_rl_phases.py --write    # also refresh benchmarks/nemo_rl_phases.json

The NeMo RL validation rows publish whole steps; the H100 on-policy (colocated) rows come out at 0.70-0.86 of
them out of sample and their 1-step off-policy partners of the same release at 0.80-0.97, but for v0.4's
Qwen3-30B-A3B (1-off 0.71, on-policy 0.70). This script collects what the NeMo RL team published
phase by phase (its GRPO timers: ``generation`` / ``exposed_generation``, ``policy_and_reference_logprobs``,
``policy_training``, ``prepare_for_generation`` / ``weight_sync``, ``total_step_time``) and prices the same
recipe with the model (:func:`price`: a validation file of the recipe, with the fields that differ overridden,
scored by the evaluator), to say which phase carries the gap. Nothing here is a validation row and nothing sets
a knob; the write-up is docs/calibration-and-validation.md, "NeMo RL phases against the team's published phase
timings".

Three kinds of rows:

- :data:`PHASE_ROWS`: a run with its phases published (``priced`` when the model has its inputs);
- :data:`DELTAS`: a published A/B of one recipe field, as a test of a model mechanism (the KV budget of
  ``gpu_memory_utilization``; ``loss_fn.force_on_policy_ratio``, which skips the policy's log-prob pass);
- :data:`NOT_PRICED`: published timings the model cannot express or whose numbers are not in the stored text,
  each with its reason.

The model's phases (``ScoreDetail`` ``vertex_phases_s``; seconds per step): ``actor.generate`` (``generation``
+ the rule ``reward``) is NeMo RL's ``generation`` timer; ``reference.infer`` (the reference forward and the
reference-weight swap) plus ``actor.train``'s ``old_log_prob`` is ``policy_and_reference_logprobs``;
``actor.train``'s ``train`` + ``memory_options`` (the optimizer's host round trip, where priced) is
``policy_training``; the ``realloc_s`` edges (refit, offload, sleep / wake) are the transitions
(``prepare_for_generation`` colocated, ``weight_sync`` split).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from contextlib import contextmanager
from pathlib import Path

from packplace.placement.checking.validate import setup_detail
from packplace.placement.model import framework
from packplace.placement.model.nemo_rl_releases import release_for
from packplace.yamlio import load_yaml, set_dotted

OUT = Path(__file__).with_name("nemo_rl_phases.json")
VALIDATION = Path(__file__).with_name("validation")
NEMO_RL = "github.com/NVIDIA-NeMo/RL"

#: Runs with their phases published, seconds per step. ``config`` is the validation file that holds the
#: recipe (None: not priced here, ``reason`` says why); ``overrides`` are dotted config fields set on it.
PHASE_ROWS = [
    {"id": "gke-b200-llama3.1-8b", "gpu": "b200", "release": "NeMo RL v0.5.0 (vLLM 0.11.2), DTensor",
     "recipe": "grpo-llama3.1-8b-instruct-2n8g (GKE), colocated, 16 B200",
     "source": "github.com/AI-Hypercomputer/gpu-recipes ai-ml/nemo-rl-on-gke/nemoRL/llama3.1-8b/README.md "
               "@ 2b503651 (the recipe's step log)",
     "config": "gke_blog_nemo_rl_grpo_llama3.1-8b_2x8xb200.yaml", "overrides": {},
     "published": {"step": 92.24, "generation": 55.05, "policy_training": 20.30, "logprobs": 9.44,
                   "prepare_for_generation": 4.56, "transfer_and_update_weights": 0.77}},
    {"id": "v0.3-blog-llama3.1-8b", "gpu": "h100-sxm", "release": "NeMo RL v0.3.0, Megatron",
     "recipe": "grpo_math_8B_megatron.yaml, colocated, 8 H100, DP 8",
     "source": "nvidia-nemo.github.io/blog/2025/07/21/nemo-rl-v0.3 (Results; now "
               f"{NEMO_RL}/discussions/1161), averages of steps 22-29",
     "config": None, "reason": "the blog's per-run generated-token means are not in this script's inputs; "
                               "priced as probes in the docs' v0.3 table",
     "published": {"step": 112, "generation": 58, "logprobs": 18, "policy_training": 28, "refit": 5}},
    {"id": "v0.3-blog-llama3.1-70b", "gpu": "h100-sxm", "release": "NeMo RL v0.3.0, Megatron",
     "recipe": "grpo_math_70B_megatron.yaml, colocated, 64 H100, TP 4 x PP 4",
     "source": "nvidia-nemo.github.io/blog/2025/07/21/nemo-rl-v0.3 (Results)",
     "config": None, "reason": "as the Llama-3.1-8B blog row",
     "published": {"step": 147, "generation": 84, "logprobs": 18, "policy_training": 28, "refit": 14}},
    {"id": "v0.3-blog-qwen3-32b", "gpu": "h100-sxm", "release": "NeMo RL v0.3.0, Megatron",
     "recipe": "no v0.3.0 config of its own (the blog's parallelism), colocated, 64 H100, TP 4 x PP 2",
     "source": "nvidia-nemo.github.io/blog/2025/07/21/nemo-rl-v0.3 (Results)",
     "config": None, "reason": "as the Llama-3.1-8B blog row",
     "published": {"step": 213, "generation": 96, "logprobs": 40, "policy_training": 68, "refit": 7}},
    {"id": "v0.3-blog-qwen3-30b-a3b", "gpu": "h100-sxm", "release": "NeMo RL v0.3.0, Megatron",
     "recipe": "grpo_math_qwen30ba3b_megatron.yaml, colocated, 64 H100, TP 2 x EP 8",
     "source": "nvidia-nemo.github.io/blog/2025/07/21/nemo-rl-v0.3 (Results)",
     "config": None, "reason": "as the Llama-3.1-8B blog row",
     "published": {"step": 167, "generation": 78, "logprobs": 23, "policy_training": 50, "refit": 12}},
]

#: Published A/B runs of one recipe field. ``published`` holds the figure before and after (``range``: the
#: publication's span over its cases, percent).
DELTAS = [
    {"id": "gpu-memory-utilization-0.80-0.88", "field": "policy.gpu_memory_utilization", "values": [0.80, 0.88],
     "gpu": "h100-sxm", "release": f"{NEMO_RL} main @ cc34bee34 (2026-07-21), async GRPO 1-step off",
     "recipe": "examples/configs/recipes/llm/performance/grpo-qwen3-235b-32n8g-async-1off.yaml (Qwen3-235B-A22B, "
               "256 H100: vLLM TP 8 x 16 on 128, Megatron TP 4 x PP 8 x EP 16 on 128; its base "
               "grpo-qwen3-235b-16n8g.yaml sets loss_fn.force_on_policy_ratio true since ed685b66d)",
     "source": f"{NEMO_RL}/pull/3278 (\"Averaged over the measured steady-state steps\")",
     "config": "nemo_rl_v0.6_grpo_qwen3-235b-a22b_32x8xh100_1off.yaml",
     "published": {"exposed_generation": [174.0, 137.0], "e2e_tokens_per_s_per_gpu": [51.5, 57.8]},
     "published_note": "exposed generation ~174 s -> ~136-138 s (137 taken); E2E tokens/s/GPU ~51-52 -> ~57.8 "
                       "(51.5 taken)",
     # the v0.6 performance summary's row of the same recipe (the config's source): 58.7 tokens/s/GPU at 231 s
     # on 256 GPUs; taken as the PR's tokens per step (same data and caps) to turn its throughput into steps
     "tokens_per_step": 58.7 * 231 * 256},
    {"id": "force-on-policy-ratio", "field": "loss_fn.force_on_policy_ratio", "values": [False, True],
     "gpu": "h100-sxm and gb200", "release": f"{NEMO_RL} main @ 37cb7de1a (2026-07-09)",
     "recipe": "performance recipes grpo-llama3.1-8b-instruct-2n8g(-async-1off), grpo-qwen3-32b-4n8g / "
               "-8n8g-async-1off, grpo-qwen3-30ba3b-4n8g(-async-1off) and their GB200 4g twins; the same PR sets "
               "policy.train_global_batch_size 2048 (one optimizer step per step)",
     "source": f"{NEMO_RL}/pull/3135 (description; its per-case table is past the stored text)",
     "configs": ["nemo_rl_grpo_llama3.1-8b_2x8xh100.yaml", "nemo_rl_v0.5_grpo_llama3.1-8b_2x8xh100_1off.yaml",
                 "nemo_rl_v0.5_grpo_qwen3-32b_4x8xh100_onpolicy.yaml",
                 "nemo_rl_v0.5_grpo_qwen3-32b_8x8xh100_1off.yaml",
                 "nemo_rl_v0.6_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml",
                 "nemo_rl_v0.6_grpo_qwen3-30b-a3b_4x8xh100_1off.yaml"],
     "published": {"logprob_time_reduction_pct": [41.6, 50.1], "logprob_throughput_gain_pct": [70.4, 100.5],
                   "e2e_throughput_gain_gb200_pct": [7.3, 20.9], "e2e_throughput_gain_h100_pct_min": 5.5}},
]

#: Published NeMo RL timings not priced, with the reason.
NOT_PRICED = [
    {"source": f"{NEMO_RL}/pull/3438", "what": "HybridEP vs AllToAll, matched H100 runs (E2E step, tokens/s/GPU)",
     "reason": "the stored thread text ends at the table's header; the model has no MoE dispatcher switch "
               "(its expert all-to-all is one priced collective)"},
    {"source": f"{NEMO_RL}/pull/4118", "what": "HybridEP vs AllToAll on GB200 (step time tables)",
     "reason": "the stored text ends at the table's header; GB200 MoE runs"},
    {"source": f"{NEMO_RL}/pull/3135", "what": "per-case logprob / E2E table (12 cases)",
     "reason": "only the description's ranges are in the stored text (used in DELTAS)"},
    {"source": f"{NEMO_RL}/pull/3295", "what": "logprob 87.5 -> 42.8 s, step 257.2 -> 205.5 s (generation "
                                             "log-probs reused as prev-logprobs), Qwen3-30B-A3B, 16 B200",
     "reason": "MXFP8 rollout (not BF16), step measured with refit-optimisation flags also on, never merged"},
    {"source": f"{NEMO_RL}/pull/1076", "what": "refit trace: transfer_and_update_weights 0.08 s",
     "reason": "a small functional-test run with no recipe named"},
    {"source": f"{NEMO_RL}/pull/1052", "what": "async step timers: logprob_inference_prep 1.34 s, training_prep "
                                             "1.06 s, data_processing 0.23 s, buffer_sampling 1.38 s",
     "reason": "no recipe, model or cluster named for the run"},
    {"source": f"{NEMO_RL}/pull/638, {NEMO_RL}/pull/449",
     "what": "refit 420 -> 105 -> 55 s (DeepSeek-V3, TP 64); 18 -> 7 s / 430 -> 50 s (16-node ~30B dense / MoE)",
     "reason": "the v0.2-v0.3 gather-and-IPC-handle refit, replaced by the streamed CUDA-IPC refit of v0.4+; "
               "DeepSeek-V3's MLA and an unnamed 30B model"},
    {"source": f"{NEMO_RL}/issues/959", "what": "users' reruns of the v0.3 blog with phases",
     "reason": "the stored thread gives no per-phase numbers beyond what the docs already quote"},
]


def price(config: str, overrides: dict | None = None) -> dict:
    """The model's phases for the validation file ``config`` (a name under benchmarks/validation/) with the
    dotted ``overrides`` set, in seconds per step: ``step``, ``generation`` (actor.generate),
    ``reference`` (reference.infer: forward + weight swap), ``old_log_prob``, ``logprobs`` (the two together),
    ``training`` (train + memory_options), ``transitions`` (the realloc edges: refit, offload, sleep / wake)
    and ``trainer_chain`` (reference + the whole actor.train vertex + transitions: what a 1-step off-policy
    trainer runs per step).

    Raises:
        ConfigError: the file (with the overrides) is not a loadable validation setup.
    """
    cfg = load_yaml(str(VALIDATION / config))
    for key, value in (overrides or {}).items():
        set_dotted(cfg, key, value)
    detail = setup_detail(cfg)
    ph = detail["vertex_phases_s"]
    train = ph["actor.train"]
    reference = sum(ph["reference.infer"].values())
    old = train.get("old_log_prob", 0.0)
    transitions = sum(detail["realloc_s"].values())
    return {"step": detail["step_time_s"], "generation": sum(ph["actor.generate"].values()),
            "reference": reference, "old_log_prob": old, "logprobs": reference + old,
            "training": train.get("train", 0.0) + train.get("memory_options", 0.0),
            "transitions": transitions,
            "trainer_chain": reference + sum(train.values()) + transitions}


def phase_rows() -> list[dict]:
    """:data:`PHASE_ROWS` with ``predicted`` (the model's phases in NeMo RL's timer names) and ``ratio``
    (predicted / published per phase) where the row is priced."""
    out = []
    for row in PHASE_ROWS:
        r = {k: v for k, v in row.items() if k != "overrides"}
        if row["config"] is not None:
            p = price(row["config"], row["overrides"])
            pred = {"step": p["step"], "generation": p["generation"], "logprobs": p["logprobs"],
                    "policy_training": p["training"], "prepare_for_generation": p["transitions"],
                    "logprobs_and_training": p["logprobs"] + p["training"]}
            pub = dict(row["published"])
            pub["logprobs_and_training"] = pub["logprobs"] + pub["policy_training"]
            r["published"] = pub
            r["predicted"] = pred
            r["ratio"] = {k: pred[k] / pub[k] for k in pred if k in pub}
            r["missing_s"] = {k: pub[k] - pred[k] for k in pred if k in pub}
        out.append(r)
    return out


#: An H100 80GB's memory as CUDA reports it (79.1 GiB, docs/calibration-and-validation.md "NeMo RL colocated
#: on-policy"), which vLLM multiplies by ``gpu_memory_utilization``; the preset keeps 80e9 bytes, which the
#: docs find nearly cancels the non-KV memory vLLM also reserves. Used only for a what-if here.
H100_CUDA_TOTAL_BYTES = 79.1 * 2**30


def kv_budget_delta() -> dict:
    """The ``gpu_memory_utilization`` 0.80 -> 0.88 A/B (:data:`DELTAS` [0]) priced: the step and the exposed
    generation (the period less the trainer chain run without the policy log-prob pass, which the recipe's
    ``force_on_policy_ratio`` skips) at both values, against the published exposed generation and the step
    ratio implied by the published E2E tokens/s/GPU (same recipe, same batch: the step scales as its inverse)."""
    d = DELTAS[0]
    pred = []
    for value in d["values"]:
        p = price(d["config"], {d["field"]: value})
        chain = p["trainer_chain"] - p["old_log_prob"]
        pred.append({"value": value, "step": p["step"], "generation": p["generation"],
                     "trainer_chain": chain, "exposed_generation": max(0.0, p["step"] - chain)})
    pub = d["published"]
    pub_step_ratio = pub["e2e_tokens_per_s_per_gpu"][0] / pub["e2e_tokens_per_s_per_gpu"][1]
    pub_exposed_ratio = pub["exposed_generation"][1] / pub["exposed_generation"][0]
    implied = [d["tokens_per_step"] / (t * 256) for t in pub["e2e_tokens_per_s_per_gpu"]]
    physical = [price(d["config"], {d["field"]: v, "hardware.memory_per_gpu": H100_CUDA_TOTAL_BYTES})["step"]
                for v in d["values"]]
    return {"id": d["id"], "predicted": pred, "implied_published_step": implied,
            "what_if_cuda_total_step": physical,
            "step_ratio_at": [p["step"] / s for p, s in zip(pred, implied)],
            "published_step_ratio": pub_step_ratio,
            "predicted_step_ratio": pred[1]["step"] / pred[0]["step"],
            "published_exposed_ratio": pub_exposed_ratio,
            "predicted_exposed_ratio": pred[1]["exposed_generation"] / pred[0]["exposed_generation"],
            "published_exposed_drop_s": pub["exposed_generation"][0] - pub["exposed_generation"][1],
            "predicted_exposed_drop_s": pred[0]["exposed_generation"] - pred[1]["exposed_generation"],
            "predicted_generation_drop_s": pred[0]["generation"] - pred[1]["generation"]}


@contextmanager
def without_old_log_prob():
    """The ``nemo-rl`` profile with ``old_log_prob`` false while the block runs (what
    ``loss_fn.force_on_policy_ratio`` does to a GRPO step from v0.7.0: NeMo RL grpo.py skips ``get_logprobs``
    for the previous log-probs); restored on exit. A benchmark-only switch, used only for a file whose release
    runs the pass whatever the setting (v0.5 / v0.6: :func:`forced_ratio_price`); from v0.7.0 the config's
    ``policy.force_on_policy_ratio`` says it."""
    with framework.overridden_profile("nemo-rl", old_log_prob=False):
        yield


def forced_ratio_price(config: str, overrides: dict | None = None) -> tuple[dict, str]:
    """:func:`price` of ``config`` (with ``overrides``) as the PR's ``force_on_policy_ratio`` runs it: one
    optimizer step per step and no previous-policy log-prob pass, and how the pass was dropped: ``"config"``
    (``policy.force_on_policy_ratio: true``) where the file's ``policy.framework_version`` is a release that
    skips it (:func:`~packplace.placement.model.nemo_rl_releases.release_for`,
    ``forced_ratio_skips_logprob``: v0.7.0 on), else ``"profile swap"`` (:func:`without_old_log_prob`): the
    v0.5 / v0.6 files, whose release still runs the pass with the setting, priced as the PR's later main.

    Raises:
        ConfigError: as :func:`price`.
    """
    cfg = load_yaml(str(VALIDATION / config))
    for key, value in (overrides or {}).items():
        set_dotted(cfg, key, value)
    policy = cfg.get("policy") or {}
    release = release_for(str(policy.get("framework", "none")), policy.get("framework_version"))
    forced = {**(overrides or {}), "training.actor.optimizer_steps": 1}
    if release is not None and release.forced_ratio_skips_logprob:
        return price(config, {**forced, "policy.force_on_policy_ratio": True}), "config"
    with without_old_log_prob():
        return price(config, forced), "profile swap"


def force_on_policy_delta() -> dict:
    """``force_on_policy_ratio`` (:data:`DELTAS` [1]): its ``policy_and_reference_logprobs`` is the reference
    forward (+ weight swap) plus the policy's old-log-prob forward, and the flag drops the second (NeMo RL
    grpo.py: ``skip_prev_logprobs``), so the predicted cut is ``old_log_prob / logprobs`` per recipe, set beside
    the published 41.6-50.1%. The E2E gain is the step rescored with the pass dropped and one optimizer step per
    step (the PR's ``train_global_batch_size`` 2048 = the whole batch; :func:`forced_ratio_price`: the config's
    ``policy.force_on_policy_ratio`` for a v0.7+ file, the profile swap for the v0.5 / v0.6 files, all six
    here), against the published GB200 7.3-20.9% and H100 from 5.5%."""
    d = DELTAS[1]
    cases = []
    for config in d["configs"]:
        p = price(config)
        after, switch = forced_ratio_price(config)
        cases.append({"config": config, "logprobs": p["logprobs"], "old_log_prob": p["old_log_prob"],
                      "predicted_reduction_pct": 100.0 * p["old_log_prob"] / p["logprobs"],
                      "logprob_share_of_step_pct": 100.0 * p["logprobs"] / p["step"],
                      "step_before": p["step"], "step_after": after["step"], "switch": switch,
                      "predicted_e2e_gain_pct": 100.0 * (p["step"] / after["step"] - 1.0)})
    lo, hi = d["published"]["logprob_time_reduction_pct"]
    reductions = [c["predicted_reduction_pct"] for c in cases]
    gains = [c["predicted_e2e_gain_pct"] for c in cases]
    return {"id": d["id"], "cases": cases, "published_reduction_pct": [lo, hi],
            "predicted_reduction_pct": [min(reductions), max(reductions)],
            "published_throughput_gain_pct": d["published"]["logprob_throughput_gain_pct"],
            "predicted_throughput_gain_pct": [100.0 * (1.0 / (1.0 - r / 100.0) - 1.0)
                                              for r in (min(reductions), max(reductions))],
            "predicted_e2e_gain_pct": [min(gains), max(gains)]}


#: H100 pairs from one publication and release: a colocated on-policy run and its 1-step off-policy twin
#: (NeMo RL performance summaries v0.4 / v0.5 / v0.6, published steps in the validation files). Only the
#: Qwen3-32B pair runs the same trainer layout on both sides (Megatron TP 4 x PP 4 x DP 2 on 32 H100).
PAIRS = [
    {"id": "llama3.1-8b v0.4", "onpolicy": "nemo_rl_v0.4_grpo_llama3.1-8b_2x8xh100_onpolicy.yaml",
     "offpolicy": "nemo_rl_v0.4_grpo_llama3.1-8b_2x8xh100_1off.yaml"},
    {"id": "llama3.1-8b v0.5", "onpolicy": "nemo_rl_grpo_llama3.1-8b_2x8xh100.yaml",
     "offpolicy": "nemo_rl_v0.5_grpo_llama3.1-8b_2x8xh100_1off.yaml"},
    {"id": "qwen3-32b v0.5", "onpolicy": "nemo_rl_v0.5_grpo_qwen3-32b_4x8xh100_onpolicy.yaml",
     "offpolicy": "nemo_rl_v0.5_grpo_qwen3-32b_8x8xh100_1off.yaml", "same_trainer": True},
    {"id": "qwen3-30b-a3b v0.5", "onpolicy": "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml",
     "offpolicy": "nemo_rl_v0.5_grpo_qwen3-30b-a3b_4x8xh100_1off.yaml"},
    {"id": "qwen3-30b-a3b v0.6", "onpolicy": "nemo_rl_v0.6_grpo_qwen3-30b-a3b_4x8xh100_onpolicy.yaml",
     "offpolicy": "nemo_rl_v0.6_grpo_qwen3-30b-a3b_4x8xh100_1off.yaml"},
]


def _published_step(config: str) -> float:
    return float(load_yaml(str(VALIDATION / config))["validation"]["published"]["step"])


def onpolicy_split(pair: dict) -> dict:
    """Where an H100 on-policy step's gap lies, from its 1-step off-policy twin (an inference from published
    steps, not a published phase). Where the model says the off-policy trainer bounds the period
    (``trainer_bound``), the published off-policy step times the trainer chain, so ``trainer_ratio`` = predicted
    chain / published step is how fast the model prices that trainer. The on-policy step's trainer work
    (reference + actor.train, no transitions) is assumed priced at the same ratio (exact when the layouts
    match, ``same_trainer``): its shortfall is ``trainer_side_gap_s``; the rest of the on-policy gap falls on
    the synchronous generation and the colocated transitions (``generation_side_gap_s``, and their ratio)."""
    on, off = price(pair["onpolicy"]), price(pair["offpolicy"])
    pub_on, pub_off = _published_step(pair["onpolicy"]), _published_step(pair["offpolicy"])
    out = {"id": pair["id"], "pair": {k: pair[k] for k in ("onpolicy", "offpolicy")},
           "same_trainer": pair.get("same_trainer", False),
           "published": {"onpolicy": pub_on, "offpolicy": pub_off},
           "predicted": {"onpolicy": on, "offpolicy": off},
           "trainer_bound": off["trainer_chain"] >= off["generation"],
           "onpolicy_gap_s": pub_on - on["step"]}
    if not out["trainer_bound"]:
        return out
    trainer_ratio = off["trainer_chain"] / pub_off
    on_trainer = on["trainer_chain"] - on["transitions"]
    trainer_gap = on_trainer * (1.0 / trainer_ratio - 1.0)
    rest = out["onpolicy_gap_s"] - trainer_gap
    gen_side = on["generation"] + on["transitions"]
    out.update(trainer_ratio=trainer_ratio, trainer_side_gap_s=trainer_gap, generation_side_gap_s=rest,
               generation_side_ratio=gen_side / (gen_side + rest))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = parser.parse_args()
    rows = phase_rows()
    for r in rows:
        if "predicted" in r:
            print(f"{r['id']} ({r['gpu']}): " + ", ".join(
                f"{k} {r['predicted'][k]:.1f}/{r['published'][k]:.2f} ({r['ratio'][k]:.2f})" for k in r["ratio"]))
        else:
            print(f"{r['id']} ({r['gpu']}): published {r['published']}; not priced: {r['reason']}")
    kv = kv_budget_delta()
    print(f"\n{kv['id']}: steps implied by the published throughput (v0.6 tokens per step) "
          f"{kv['implied_published_step'][0]:.1f} -> {kv['implied_published_step'][1]:.1f} s; predicted / implied "
          f"{kv['step_ratio_at'][0]:.2f} -> {kv['step_ratio_at'][1]:.2f}")
    print(f"{kv['id']}: what-if with the CUDA total ({H100_CUDA_TOTAL_BYTES / 1e9:.2f} GB) for the preset's 80 GB: "
          f"step {kv['what_if_cuda_total_step'][0]:.1f} -> {kv['what_if_cuda_total_step'][1]:.1f} s")
    print(f"{kv['id']}: predicted step {kv['predicted'][0]['step']:.1f} -> {kv['predicted'][1]['step']:.1f} s "
          f"(x{kv['predicted_step_ratio']:.3f}; published x{kv['published_step_ratio']:.3f}), exposed generation "
          f"{kv['predicted'][0]['exposed_generation']:.1f} -> {kv['predicted'][1]['exposed_generation']:.1f} s "
          f"(x{kv['predicted_exposed_ratio']:.3f}; published 174 -> 137, x{kv['published_exposed_ratio']:.3f})")
    fop = force_on_policy_delta()
    for c in fop["cases"]:
        print(f"  {c['config']}: log-probs {c['logprobs']:.1f} s, old-log-prob {c['old_log_prob']:.1f} s: "
              f"cut {c['predicted_reduction_pct']:.1f}% ({c['logprob_share_of_step_pct']:.1f}% of the step); step "
              f"{c['step_before']:.1f} -> {c['step_after']:.1f} s, E2E +{c['predicted_e2e_gain_pct']:.1f}% "
              f"({c['switch']})")
    print(f"{fop['id']}: predicted cut {fop['predicted_reduction_pct'][0]:.1f}-{fop['predicted_reduction_pct'][1]:.1f}%"
          f", published {fop['published_reduction_pct'][0]}-{fop['published_reduction_pct'][1]}%")
    splits = [onpolicy_split(p) for p in PAIRS]
    print()
    for sp in splits:
        if not sp["trainer_bound"]:
            print(f"{sp['id']}: on-policy gap {sp['onpolicy_gap_s']:.1f} s; the off-policy twin is generation-bound "
                  "in the model: no trainer ratio")
            continue
        print(f"{sp['id']}: on-policy {sp['predicted']['onpolicy']['step']:.1f}/{sp['published']['onpolicy']:.1f} s, "
              f"gap {sp['onpolicy_gap_s']:.1f} s = trainer side {sp['trainer_side_gap_s']:.1f} s (off-policy "
              f"trainer chain at {sp['trainer_ratio']:.2f}) + generation side {sp['generation_side_gap_s']:.1f} s "
              f"(generation + transitions at {sp['generation_side_ratio']:.2f})")
    for n in NOT_PRICED:
        print(f"not priced: {n['source']}: {n['what']}: {n['reason']}")
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        OUT.write_text(json.dumps({"measured_at_commit": commit, "phase_rows": rows, "kv_budget": kv,
                                   "force_on_policy_ratio": fop, "onpolicy_split": splits,
                                   "not_priced": NOT_PRICED}, indent=1) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
