"""verl's FSDP passes without ``use_remove_padding`` are timed on their padded rows: every dense kernel on
``mb·(S + T)`` positions (``dp_actor.py`` / ``dp_critic.py`` ``_forward_micro_batch``, ``# not using rmpad``, on the
rollout's ``(mb, S + T)`` batch), the attention on each sequence's real tokens (flash_attention_2 unpads through
the attention mask): :meth:`CostModel.padded_row`, :meth:`CostModel.pass_shape`,
:meth:`CostModel.attention_length`. Every number here is the model's own, checked by hand."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
import yaml

from packplace.placement.candidates import cost_model
from packplace.placement.checking.validate import load_setup_mapping
from packplace.placement.model.cost import CostModel
from packplace.placement.model.dp_balance import sequence_costs
from packplace.placement.model.framework import FRAMEWORKS
from packplace.placement.problem.hardware import Cluster
from packplace.placement.problem.workload import Workload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = os.path.join(ROOT, "configs", "placement", "published", "grpo_verl_qwen2-7b_1x8xh100.yaml")
#: Responses uniform on [1, 599] tokens (the quantile function starts at 1 token): mean 300, under the cap of 1,024.
UNIFORM_300 = [[1.0, 599]]
S, T, MEAN = 512, 1024, 300.0
ROW, REAL = S + T, S + MEAN        # 1,536 padded tokens a row; 812 real tokens a sequence on average
PLAN = {
    "actor.generate": {"dp": 4, "pp": 1, "tp": 2, "micro_batch": 1280, "origin": [0, 0, 0], "extent": [1, 1, 8]},
    "reference.infer": {"dp": 8, "pp": 1, "tp": 1, "micro_batch": 40, "origin": [0, 0, 0], "extent": [1, 1, 8]},
    "actor.train": {"dp": 8, "pp": 1, "tp": 1, "micro_batch": 40, "origin": [0, 0, 0], "extent": [1, 1, 8]},
}


def _instance(remove_padding: bool | None, version: str = "0.4.0", sharding: str = "zero3", **policy):
    """verl's GRPO Qwen2-7B example (prompt cap 512, response cap 1,024, 4 optimizer steps) with responses of
    mean 300."""
    with open(SHIPPED) as fh:
        cfg = yaml.safe_load(fh)
    cfg["policy"]["framework_version"] = version
    cfg["policy"].pop("use_remove_padding", None)
    if remove_padding is not None:
        cfg["policy"]["use_remove_padding"] = remove_padding
    cfg["policy"].update(policy)
    cfg["workload"]["gen_quantiles"] = UNIFORM_300
    cfg["training"]["actor"]["sharding"] = sharding
    cfg["validation"] = {"source": "test", "url": "test", "publication": "test", "framework": "verl",
                         "published": {"step": 1.0}, "plan": PLAN}
    return load_setup_mapping(cfg)[0]


def test_the_workload_is_the_hand_check():
    w = _instance(True).workload
    assert (w.context_length, w.generation_length) == (S, T)
    assert w.mean_response == pytest.approx(MEAN, rel=1e-12)
    assert w.train_seq_len == pytest.approx(REAL, rel=1e-12)


@pytest.mark.parametrize("kind", ["train", "logprob"])
def test_padded_pass_runs_rows_of_both_caps_and_attends_over_real_tokens(kind):
    padded, unpadded = _instance(False), _instance(True)
    cp, cu = cost_model(padded), cost_model(unpadded)
    actor = padded.models["actor"]
    assert cp.padded_row(actor, 1, 1) == ROW and cu.padded_row(actor, 1, 1) == 0.0
    # 5,120 sequences over 8 ranks in micro-batches of 40: 16 micro-batches of 40 rows of 1,536 tokens (61,440)
    # against 40 sequences of 812 real tokens (32,480)
    assert cp.pass_shape(actor, kind, 8, 1, 1, 40) == (16, 40 * ROW) == (16, 61_440)
    m, tokens = cu.pass_shape(actor, kind, 8, 1, 1, 40)
    assert m == 16 and tokens == pytest.approx(40 * REAL, rel=1e-12) == 32_480
    # attention per token 812²/1,536 over 61,440 tokens: the unpadded pass's 40·812², unchanged
    s_pad = cp.attention_length(actor, kind, 8, 1, 1, micro_batch=40)
    assert s_pad == pytest.approx(REAL * REAL / ROW, rel=1e-12) == pytest.approx(429.2604, rel=1e-6)
    assert 40 * ROW * s_pad == pytest.approx(40 * REAL ** 2, rel=1e-12)
    assert cu.attention_length(actor, kind, 8, 1, 1, micro_batch=40) == pytest.approx(REAL, rel=1e-12)


def _linear_cost(padded: bool) -> tuple[CostModel, object]:
    """The cost model of the example's actor on a GPU whose GEMMs run at a fixed fraction of peak (no component
    table, no row or inner-dimension roll-off) and whose non-GEMM time is linear in the tokens, so that a pass's
    time is its FLOPs' and its tokens' and nothing else."""
    inst = _instance(False if padded else True)
    hw = replace(inst.hardware, component_table="none", gemm_m_half=0.0, gemm_k_half=0.0,
                 non_gemm_constant=0.0)
    actor = inst.models["actor"]
    cost = CostModel(hw, Cluster(1, 1, 8), inst.workload, framework=FRAMEWORKS["verl"], models={"actor": actor},
                     padded_models=frozenset({"actor"}) if padded else frozenset())
    return cost.for_role("actor"), actor


@pytest.mark.parametrize("train", [True, False])
def test_update_pass_time_scales_with_the_dense_tokens_attention_unchanged(train):
    # one micro-batch's pass = dense part ∝ tokens + attention part ∝ tokens·s. Attention FLOPs per micro-batch,
    # by hand: c·2·L·q·40·812² (c = 3 training, 1 forward), the same padded or not; the rest scales as the dense
    # tokens, 61,440 / 32,480 = 1,536 / 812
    pad, actor = _linear_cost(True)
    unpad, _ = _linear_cost(False)
    hw = pad.hw
    c = 3.0 if train else 1.0
    attention = 16 * c * 2.0 * actor.layers * actor.attention_dim * 40 * REAL ** 2 / (
        hw.flops_per_gpu * hw.gemm_peak_fraction)
    t_pad = pad.pass_time(actor, train, 8, 1, 1, 40, (1, 1, 8), include_update=False)
    t_unpad = unpad.pass_time(actor, train, 8, 1, 1, 40, (1, 1, 8), include_update=False)
    assert (t_pad - attention) / (t_unpad - attention) == pytest.approx(ROW / REAL, rel=1e-9)
    assert ROW / REAL == pytest.approx(1.891626, rel=1e-6)
    # the optimizer step is the same either way
    assert pad.update_time(actor, 8, 1, 1, (1, 1, 8)) == unpad.update_time(actor, 8, 1, 1, (1, 1, 8))


def test_remove_padding_true_is_unchanged():
    # use_remove_padding true (and v0.7.0's unset actor): no padded row, the pass on S + mean response
    for remove_padding, version in ((True, "0.4.0"), (None, "0.7.0")):
        inst = _instance(remove_padding, version)
        cost, actor = cost_model(inst), inst.models["actor"]
        assert cost.padded_row(actor, 1, 1) == 0.0
        m, tokens = cost.pass_shape(actor, "train", 8, 1, 1, 40)
        assert m == 16 and tokens == pytest.approx(40 * REAL, rel=1e-12)
        assert cost.attention_length(actor, "train", 8, 1, 1, micro_batch=40) == inst.workload.train_seq_len


def test_megatron_workers_always_unpad():
    # verl's Megatron workers have no padded path: the real tokens, padded role or not
    inst = _instance(False, sharding="zero1", trainer_backend="megatron")
    cost, actor = cost_model(inst), inst.models["actor"]
    assert cost.padded_row(actor, 1, 2) == 0.0
    assert cost.pass_shape(actor, "train", 4, 1, 2, 40)[1] == pytest.approx(40 * REAL, rel=1e-12)


def test_dynamic_batch_size_splits_by_real_tokens_into_padded_rows():
    # ppo_max_token_len_per_gpu 8,192: a rank's 160 sequences a mini-batch (5,120 / 8 ranks / 4 optimizer steps),
    # 160·812 = 129,920 real tokens, split into ⌈129,920 / 8,192⌉ = 16 micro-batches of 10 rows of 1,536 tokens
    # (15,360), 4 times; memory's largest holds ⌊(8,192 + 1,536)/513⌋ = 18 rows (dynamic_padded_peak_tokens)
    padded = _instance(False, ppo_max_token_len_per_gpu=8192, log_prob_max_token_len_per_gpu=8192)
    unpadded = _instance(True, ppo_max_token_len_per_gpu=8192, log_prob_max_token_len_per_gpu=8192)
    actor = padded.models["actor"]
    cp, cu = cost_model(padded), cost_model(unpadded)
    steps, sequences, m = 4, 160, 16
    assert m == int(np.ceil(sequences * REAL / 8192 - 1e-9))
    assert cp.pass_shape(actor, "train", 8, 1, 1, 40)[0] == cu.pass_shape(actor, "train", 8, 1, 1, 40)[0] == m * steps
    assert cp.pass_shape(actor, "train", 8, 1, 1, 40)[1] == pytest.approx(sequences * ROW / m, rel=1e-12)
    assert cu.pass_shape(actor, "train", 8, 1, 1, 40)[1] == pytest.approx(sequences * REAL / m, rel=1e-12)
    assert cp.attention_length(actor, "train", 8, 1, 1, micro_batch=40) == pytest.approx(REAL * REAL / ROW)
    assert cp.pass_shape(actor, "train", 8, 1, 1, 40)[1] == 10 * ROW == 15_360
    assert cp.peak_pass_tokens(actor, "train", 8, 1, 1, 40) == 18 * ROW


def test_padded_balance_weighs_rows():
    # a padded row costs row·2N for its dense layers and 2·L·l²·q for its own attention
    actor = _instance(False).models["actor"]
    lengths = np.array([600, 1000, 1536])
    got = sequence_costs(actor, lengths, ROW)
    want = ROW * 2.0 * actor.gemm_params + 2.0 * actor.layers * lengths.astype(float) ** 2 * actor.attention_dim
    assert np.allclose(got, want, rtol=1e-12)
    assert np.array_equal(sequence_costs(actor, lengths), lengths * actor.forward_flops_per_token(lengths))


def test_padded_dp_imbalance_is_the_attentions_only():
    # equal dense rows on every rank: the padded passes' imbalance factor is far below the real-token one
    inst = _instance(False)
    from packplace.placement.candidates import vertex_balance
    vb = vertex_balance(inst, "actor.train")
    actor = inst.models["actor"]
    real, rows = vb.factor(actor, 8, 40), vb.factor(actor, 8, 40, ROW)
    assert 1.0 <= rows <= real
    assert rows - 1.0 < 0.5 * (real - 1.0) or real == 1.0


def test_workload_without_quantiles_pads_nothing():
    # every response at the cap: the padded row is the sequence, the pass as the unpadded one
    w = Workload(batch_size=64, samples_per_prompt=1, context_length=S, generation_length=T)
    assert w.train_seq_len == ROW
