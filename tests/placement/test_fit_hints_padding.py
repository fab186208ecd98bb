"""verl's padded rows (``policy.use_remove_padding`` off) under the dynamic batch size: where no plan fits and the
instance re-scored with the key true fits, the refusal says that padding is the cause and names the key; where it
does not, nothing is added."""

from __future__ import annotations

import os
import re

import yaml

from packplace.errors import InfeasibleError
from packplace.placement.api import check_instance
from packplace.placement.candidates import cost_model
from packplace.placement.evaluator import get_table
from packplace.placement.fit_hints import padding_hint, unpad_label, unpadded, with_hints
from packplace.placement.problem.config import build_instance

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, "configs", "placement", "published", "grpo_verl_qwen2-7b_1x8xh100.yaml")
LABEL = ("policy: {use_remove_padding: true} (verl's actor_rollout_ref.model.use_remove_padding; padding is the "
         "cause: each FSDP pass of the actor and reference now runs every sequence as a row padded to "
         "context_length + generation_length, as many rows a micro-batch as its real tokens admit under "
         "ppo_max_token_len_per_gpu / log_prob_max_token_len_per_gpu)")
HINT = (re.escape(f"fits with {LABEL}: step ")
        + r"[0-9.]+ s \(step -[0-9.]+% over the same plan without it, memory aside\)")


def _padded(budget: int = 32768, **policy):
    """verl's GRPO Qwen2-7B example (one node of 8 H100) with ``use_remove_padding`` unset (false at 0.4.0), the
    dynamic batch size at ``budget`` tokens per GPU and a response-length distribution."""
    with open(SHIPPED) as fh:
        cfg = yaml.safe_load(fh)
    cfg["policy"].pop("use_remove_padding")
    cfg["policy"].update(ppo_max_token_len_per_gpu=budget, log_prob_max_token_len_per_gpu=budget, **policy)
    cfg["workload"]["gen_quantiles"] = [[0.5, 250], [0.9, 450], [0.99, 800]]
    return build_instance(cfg)


def test_padded_rows_are_what_does_not_fit():
    """160 sequences a GPU per optimizer step (5,120 / 4 / 8). Padded: a micro-batch of at most 32,768 + 1,536
    real tokens holds at most 34,304 // 513 = 66 rows of 512 + 1,024 tokens: 101,376 tokens, and actor.train fits
    on no block of the 8 GPUs. Unpadded: at most the budget and one longest sequence, 32,768 + 512 + 1,020 (the
    distribution's peak response) = 34,300 tokens, and it fits."""
    inst = _padded()
    fixed = unpadded(inst)
    assert inst.use_remove_padding is None and fixed is not None and fixed.use_remove_padding is True
    actor = inst.models["actor"]
    assert cost_model(inst).peak_pass_tokens(actor, "train", 8, 1, 1, 40) == 66 * 1536 == 101_376
    assert cost_model(fixed).peak_pass_tokens(actor, "train", 8, 1, 1, 40) == 32768 + 512 + 1020 == 34_300
    assert not get_table(inst).feasible["actor.train"] and get_table(fixed).feasible["actor.train"]
    assert unpad_label(inst) == LABEL


def test_the_check_names_the_key_and_the_cause(unhurried):
    try:
        check_instance(_padded(), time_limit_s=unhurried)
    except InfeasibleError as exc:
        text = str(exc)
    else:
        raise AssertionError("the padded instance fits")
    assert text.startswith("[hardware] cluster has 8 GPUs; the smallest feasible plan for actor.train needs 32 ")
    assert re.search(f"; {HINT}$", text), text


def test_the_memory_hints_name_it_first():
    assert re.fullmatch(f"m; {HINT}(; .*)?", with_hints("m", _padded()))


def test_nothing_new_where_unpadding_does_not_fit_either():
    # at 256k tokens a micro-batch even unpadded holds 160 x 1,532 = 245,120 tokens: actor.train's logits alone,
    # 4 B x 152,064 x 245,120 = 149 GB, exceed the 80 GB GPU
    inst = _padded(262_144)
    assert cost_model(unpadded(inst)).peak_pass_tokens(inst.models["actor"], "train", 8, 1, 1, 40) == 160 * 1532
    assert padding_hint(inst) is None


def test_only_where_verl_pads():
    assert unpadded(_padded(use_remove_padding=True)) is None                 # already unpadded
    assert unpadded(_padded(framework_version="0.7.0")) is None              # the 0.7.0 default unpads the actor
    assert unpadded(_padded(framework_version=None)) is not None             # no version: padded, the key exists
