"""What a vLLM engine holds per GPU (:func:`~packplace.placement.model.memory.engine_reservation`,
:func:`~packplace.placement.model.memory.engine_held_bytes`): the whole ``gpu_memory_utilization`` pool plus,
by release, the CUDA context, NCCL's buffers (outside the pool from vLLM 0.11) and the CUDA graphs (outside it
before 0.21). The memory check of a plan never counts an engine below that."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packplace.placement.candidates import CandidateTable, memory_budget
from packplace.placement.model.framework import engine_vllm_release
from packplace.placement.model.memory import (
    VLLM_CUDA_GRAPH_BYTES,
    VLLM_NCCL_BYTES,
    VLLM_NCCL_PP_BYTES,
    VLLM_V0_CUDA_GRAPH_BYTES,
    VLLM_V0_NCCL_BYTES,
    VLLM_V0_NON_TORCH_BYTES,
    VLLM_V0_NON_TORCH_RELEASES,
    EngineReservation,
    engine_held_bytes,
    engine_reservation,
    engine_sleep_kept_bytes,
    weight_bytes,
)
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Strategy
from packplace.placement.task_estimate import MODEL_PRESETS, resolve_model

GIB = 2.0**30
WS = 1.02e9   # the stack's per-process workspace (hardware.memory_workspace default)


def reservation(tp=1, pp=1, generation="v1", release=(0, 11, 2), eager=False, workspace=WS):
    return engine_reservation(tp=tp, pp=pp, engine_generation=generation, vllm_release=release,
                              enforce_eager=eager, workspace=workspace)


def test_the_constants_are_the_logged_figures():
    # github.com/vllm-project/vllm/pull/25359: 78.59 GiB free before NCCL's initialisation, 74.07 after
    assert VLLM_NCCL_BYTES == pytest.approx(4.52 * GIB) == pytest.approx(4_853_313_044.48)
    # github.com/vllm-project/vllm/issues/18136: a V1 capture (vLLM 0.8.4, four TP workers) "took 2.28 GiB", the
    # largest V1 capture logged; above Llama-3.1-8B INT8's 2.02 GiB at TP 1
    # (github.com/vllm-project/vllm/issues/14286) and Maverick's ~1.3 GB
    assert VLLM_CUDA_GRAPH_BYTES == pytest.approx(2_448_131_358.72)
    assert VLLM_CUDA_GRAPH_BYTES >= 2.02 * GIB and VLLM_CUDA_GRAPH_BYTES >= 1.40 * GIB
    # github.com/vllm-project/vllm/issues/15664 (2025-04-11 comment): a V0 engine's capture "took 3.34 GiB",
    # above the V0 model runner's own "1~3 GiB" (vllm/worker/model_runner.py capture_model)
    assert VLLM_V0_CUDA_GRAPH_BYTES == pytest.approx(3_586_297_364.48)


def test_tp_1_and_tp_2_footprints_by_hand_at_vllm_0_11():
    one, two = reservation(tp=1), reservation(tp=2)
    # TP 1: the context/workspace and the graphs outside the pool, nothing inside
    assert one == EngineReservation(0.0, pytest.approx(1.02e9 + 2_448_131_358.72), True)
    # TP 2: NCCL's 4.52 GiB join them (the snapshot follows NCCL's initialisation from 0.11)
    assert two.outside == pytest.approx(1.02e9 + 2_448_131_358.72 + 4_853_313_044.48)
    assert two.outside - one.outside == pytest.approx(4_853_313_044.48)
    # pipeline stages: the last stage's 8.76 GiB (23.56 GiB total - 14.8 GiB free at TP 2 PP 2,
    # github.com/vllm-project/vllm/pull/45517) on every GPU, whatever the TP
    pp_nccl = 23.56 * GIB - 14.8 * GIB
    assert VLLM_NCCL_PP_BYTES == pytest.approx(pp_nccl) == pytest.approx(9_405_978_378.24)
    # that reading is total - free in the worker: its CUDA context is inside it, so the 1.02 GB workspace is not
    # added again (the context's stand-in beside it at one stage): the graphs and 9,405,978,378.24 bytes
    for tp in (1, 2, 8):
        assert reservation(tp=tp, pp=2).outside == pytest.approx(2_448_131_358.72 + pp_nccl)
    assert reservation(tp=2, pp=4).outside - two.outside == pytest.approx(pp_nccl - 4_853_313_044.48 - 1.02e9)
    # never below the log: a workspace larger than the reading would be taken instead
    big = engine_reservation(tp=2, pp=2, engine_generation="v1", vllm_release=(0, 11, 0), enforce_eager=True,
                             workspace=10e9)
    assert big.outside == 10e9 and big.outside > pp_nccl
    # before vLLM 0.11 the stages' NCCL lies inside the pool as TP's does
    assert reservation(tp=2, pp=2, release=(0, 10, 0)).outside == pytest.approx(one.outside)


def test_nccl_inside_the_pool_before_0_11_adds_nothing_outside():
    assert reservation(tp=8, release=(0, 10, 0)).outside == pytest.approx(1.02e9 + 2_448_131_358.72)
    # the pool is the CUDA total's fraction, so NCCL's 4.52 GiB inside it (vLLM's non-torch increase before 0.11)
    # comes out of the KV cache: in_pool, 4,853,313,044.48 bytes, and not also outside
    assert reservation(tp=8, release=(0, 10, 0)).in_pool == pytest.approx(4_853_313_044.48)
    assert reservation(tp=8, release=(0, 11, 0)).outside == pytest.approx(1.02e9 + 2_448_131_358.72 + 4.52 * GIB)
    assert reservation(tp=8, release=(0, 11, 0)).in_pool == 0.0
    # one GPU forms no communicator: nothing inside at any release; a V0 engine's NCCL is inside too, at the V0
    # log's own TP 1 -> TP 2 non-torch growth, 3.58 - 1.79 GiB = 1,921,997,864.96 bytes (github.com/vllm-project/
    # vllm/pull/10511, vLLM 0.6.5), at any TP or PP
    assert reservation(tp=1, release=(0, 10, 0)).in_pool == 0.0
    assert VLLM_V0_NCCL_BYTES == pytest.approx((3.58 - 1.79) * GIB) == pytest.approx(1_921_997_864.96)
    # (vLLM 0.6.3: no other non-torch bytes beyond the workspace; 0.6.5-0.6.x adds 0.84 GiB, tested below)
    for tp, pp in ((2, 1), (8, 1), (2, 2)):
        assert reservation(tp=tp, pp=pp, generation="v0", release=(0, 6, 3)).in_pool == pytest.approx(1_921_997_864.96)
    assert reservation(tp=1, generation="v0", release=(0, 6, 3)).in_pool == 0.0
    # with stages, the last stage's 8.76 GiB inside (9,405,978,378.24 bytes)
    assert reservation(tp=2, pp=2, release=(0, 10, 0)).in_pool == pytest.approx(9_405_978_378.24)
    # an unknown release keeps NCCL outside (the side that never under-counts the GPU), never on both sides
    unknown = reservation(tp=8, release=None)
    assert unknown.in_pool == 0.0 and unknown.outside == pytest.approx(1.02e9 + 2_448_131_358.72 + 4.52 * GIB)


def test_the_graph_term_by_release_and_enforce_eager():
    # captured after the KV cache, outside the pool, until 0.21
    assert reservation(release=(0, 20, 0)).outside == pytest.approx(WS + VLLM_CUDA_GRAPH_BYTES)
    # from 0.21 vLLM subtracts its estimate from the KV cache: inside, not outside
    late = reservation(release=(0, 21, 0))
    assert late.outside == pytest.approx(WS) and late.in_pool == pytest.approx(VLLM_CUDA_GRAPH_BYTES)
    # no graphs at all under enforce_eager, whatever the release
    for release in ((0, 8, 4), (0, 20, 0), (0, 21, 0), None):
        eager = reservation(release=release, eager=True)
        assert eager.outside == pytest.approx(WS) and eager.in_pool == 0.0
    # a V0 engine captures after the cache too (its own, larger logged capture); its NCCL is inside the pool
    assert reservation(tp=2, generation="v0", release=(0, 6, 3)).outside == pytest.approx(1.02e9 + 3_586_297_364.48)
    assert reservation(tp=2, generation="v0", release=(0, 6, 3), eager=True).outside == pytest.approx(1.02e9)


#: Logged captures (docs/calibration-and-validation.md "CUDA graphs by release"): (engine, vLLM, TP, GiB).
LOGGED_CAPTURES = [
    ("v1", (0, 8, 4), 4, 2.28),    # github.com/vllm-project/vllm/issues/18136, "took 2.28 GiB" on 4 workers
    ("v1", (0, 8, 4), 1, 2.02),    # Llama-3.1-8B INT8, github.com/vllm-project/vllm/issues/14286 (0.7.x V1)
    ("v1", (0, 9, 2), 8, 1.40),    # Llama 4 Maverick, github.com/sgl-project/sglang/issues/8538
    ("v0", (0, 6, 3), 1, 3.34),    # 49B GPTQ on an L40S, github.com/vllm-project/vllm/issues/15664
    ("v0", (0, 4, 2), 4, 2.41),    # Yi-1.5-34B, 23,859 - 21,395 MiB, github.com/vllm-project/vllm/issues/7553
]


@pytest.mark.parametrize("generation, release, tp, logged_gib", LOGGED_CAPTURES)
def test_the_graph_term_is_never_below_a_logged_capture(generation, release, tp, logged_gib):
    # the engine's graphs alone: what it holds outside the pool less its context and (from 0.11) NCCL's buffers
    r = reservation(tp=tp, generation=generation, release=release)
    nccl = VLLM_NCCL_BYTES if tp > 1 and generation == "v1" and release >= (0, 11) else 0.0
    graphs = r.outside - WS - nccl
    nccl_inside = 0.0 if tp == 1 or nccl else VLLM_V0_NCCL_BYTES if generation == "v0" else VLLM_NCCL_BYTES
    assert r.in_pool == pytest.approx(nccl_inside) and graphs >= logged_gib * GIB
    # a sleeping engine keeps the same graphs (NCCL and its context besides)
    kept = engine_sleep_kept_bytes(tp=tp, pp=1, engine_generation=generation, enforce_eager=False, workspace=0.0,
                                   own_process=False)
    assert kept - (VLLM_NCCL_BYTES if tp > 1 else 0.0) == pytest.approx(graphs)


def test_the_hand_computed_graph_bytes_of_the_tp_4_and_tp_1_captures():
    # TP 4 at vLLM 0.8.4 (NCCL inside the pool before 0.11): outside = 1.02e9 + 2.28 x 2^30 = 3,468,131,358.72 bytes,
    # of which 2,448,131,358.72 the graphs: at 1.3 GiB (1,395,864,371.2) the logged 2.28 GiB was 1.05 GB under
    assert reservation(tp=4, release=(0, 8, 4)).outside == pytest.approx(3_468_131_358.72)
    assert reservation(tp=4, release=(0, 8, 4)).outside - WS > 2.28 * GIB - 1.0 > 1_395_864_371.2
    # TP 1 at 0.11.2 (NeMo RL v0.5): the same 2.28 GiB, above Llama-3.1-8B INT8's 2.02 GiB = 2,168,958,484.48
    assert reservation(tp=1, release=(0, 11, 2)).outside - WS == pytest.approx(2_448_131_358.72)
    assert 2.02 * GIB == pytest.approx(2_168_958_484.48) and 2.02 * GIB > 1_395_864_371.2
    # a V0 engine keeps its own 3.34 GiB = 3,586,297,364.48, above the V1 term
    assert reservation(tp=4, generation="v0", release=(0, 6, 3)).outside - WS == pytest.approx(3_586_297_364.48)


@pytest.mark.parametrize("framework, version, side", [
    ("openrlhf", "0.2.7", "outside"),    # vLLM 0.4.2, V0
    ("verl", "0.1.0", "outside"),        # vLLM 0.6.3, V0
    ("verl", "0.4.1", "outside"),        # vLLM 0.8.4
    ("verl", "0.6.0", "outside"),        # vLLM 0.8.4 (setup.py <=0.9.1)
    ("verl", "0.6.1", "outside"),        # no release: outside, the side that never under-counts
    ("nemo-rl", "0.3.0", "outside"),     # vLLM 0.9.0
    ("nemo-rl", "0.4.0", "outside"),     # vLLM 0.10.0
    ("nemo-rl", "0.5.0", "outside"),     # vLLM 0.11.2
    ("nemo-rl", "0.6.0", "outside"),     # vLLM 0.17.1
    ("nemo-rl", "0.7.0", "outside"),     # vLLM 0.20.0: the estimate is still opt-in
    ("openrlhf", None, "outside"),       # "0.8.1 and later": no release
])
def test_the_graphs_side_of_the_pool_at_each_pinned_release(framework, version, side):
    from packplace.placement.model.framework import FRAMEWORK_VERSIONS, version_defaults
    entry = version_defaults(framework, version) if version else FRAMEWORK_VERSIONS[framework][-1]
    release = engine_vllm_release(framework, version)
    r = reservation(tp=1, generation=entry.engine_generation, release=release)
    graphs = VLLM_V0_CUDA_GRAPH_BYTES if entry.engine_generation == "v0" else VLLM_CUDA_GRAPH_BYTES
    # every pinned V0 release (0.4.2, 0.6.3, 0.8.0) is outside 0.6.5-0.6.x: nothing inside at TP 1
    assert side == "outside" and r.in_pool == 0.0 and r.outside == pytest.approx(WS + graphs)


def test_v0_non_torch_inside_the_pool_by_hand_and_by_release():
    """vLLM 0.6.5-0.6.x (pull 10511's ``memory_profiling``) logs 1.79 GiB of non-torch memory at TP 1 on an H100,
    counted inside the pool; the KV budget already takes the 1.02e9 B workspace, so ``in_pool`` adds the rest,
    1.79 x 2^30 - 1.02e9 = 901,997,864.96 B (0.84 GiB). An unknown release takes it too (never a cache above vLLM's);
    the other V0 lines' readings (0.35, 0.16, 0.20 GiB) stay within the workspace: nothing. The context stays outside
    (the workspace), so ``outside`` does not change."""
    assert VLLM_V0_NON_TORCH_BYTES == pytest.approx(1.79 * GIB) == pytest.approx(1_921_997_864.96)
    assert VLLM_V0_NON_TORCH_RELEASES == ((0, 6, 5), (0, 7))
    for release in ((0, 6, 5), (0, 6, 6), None):
        r = reservation(tp=1, generation="v0", release=release)
        assert r.in_pool == pytest.approx(901_997_864.96) and r.outside == pytest.approx(
            1.02e9 + VLLM_V0_CUDA_GRAPH_BYTES)
        assert WS + r.in_pool == pytest.approx(1.79 * GIB)
        # with a communicator, V0's NCCL besides: 901,997,864.96 + 1,921,997,864.96 B
        assert reservation(tp=2, generation="v0", release=release).in_pool == pytest.approx(2_823_995_729.92)
    for release in ((0, 4, 2), (0, 6, 4), (0, 7, 0), (0, 8, 0)):
        assert reservation(tp=1, generation="v0", release=release).in_pool == 0.0
    # a workspace above the figure leaves nothing more inside (never negative); the footprint keeps it outside
    big = reservation(tp=1, generation="v0", release=None, workspace=2.5e9)
    assert big.in_pool == 0.0 and big.outside == pytest.approx(2.5e9 + VLLM_V0_CUDA_GRAPH_BYTES)
    # V1 adds nothing: its logged non-torch bytes besides NCCL (0.04-0.43 GiB) stay within the 0.95 GiB workspace
    assert reservation(tp=1, generation="v1", release=None).in_pool == 0.0
    assert WS >= 0.43 * GIB



def test_from_0_21_the_graphs_count_once_inside_the_pool():
    for release in ((0, 21, 0), (0, 23, 1), (1, 0)):
        r = reservation(tp=2, release=release)
        # inside the pool (the KV cache shrinks by them), not also beside it: outside is the context and NCCL only
        assert r.in_pool == pytest.approx(VLLM_CUDA_GRAPH_BYTES)
        assert r.outside == pytest.approx(WS + VLLM_NCCL_BYTES)
    # every release and generation: the graph bytes appear exactly once, inside or outside
    for generation, release in (("v0", (0, 6, 3)), ("v1", (0, 8, 4)), ("v1", (0, 20, 0)), ("v1", (0, 21, 0)),
                                ("v1", None)):
        with_graphs = reservation(tp=1, generation=generation, release=release)
        eager = reservation(tp=1, generation=generation, release=release, eager=True)
        graphs = VLLM_V0_CUDA_GRAPH_BYTES if generation == "v0" else VLLM_CUDA_GRAPH_BYTES
        assert (with_graphs.in_pool + with_graphs.outside) - (eager.in_pool + eager.outside) == pytest.approx(graphs)


def test_an_unknown_release_never_counts_less_than_any_known_one():
    unknown = reservation(tp=4, release=None)
    for release in ((0, 8, 0), (0, 10, 0), (0, 11, 2), (0, 17, 1), (0, 20, 0), (0, 21, 0), (0, 30, 0)):
        known = reservation(tp=4, release=release)
        assert unknown.outside + unknown.in_pool >= known.outside + known.in_pool - 1e-6


def test_a_non_vllm_engine_holds_no_pool():
    none = reservation(generation=None)
    assert none == EngineReservation() and not none.pooled
    assert engine_held_bytes(30e9, 10e9, 48e9, none) == 10e9


def test_held_bytes_by_hand():
    r = EngineReservation(0.0, 7e9, True)
    # the pool (48 GB) less the weights (30 GB) beats a live need of 10 GB: 18 + 7
    assert engine_held_bytes(30e9, 10e9, 48e9, r) == pytest.approx(25e9)
    # a need above the pool stays (the own budget then refuses the candidate)
    assert engine_held_bytes(30e9, 20e9, 48e9, r) == pytest.approx(27e9)


@pytest.mark.parametrize("kwargs, field", [
    (dict(tp=0), "tp"), (dict(pp=0), "pp"), (dict(generation="v2"), "engine_generation"),
    (dict(workspace=-1.0), "workspace"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        reservation(**kwargs)


def test_framework_releases_pin_their_vllm():
    assert engine_vllm_release("nemo-rl", "0.4.0") == (0, 10, 0)
    assert engine_vllm_release("nemo-rl", "0.5.0") == (0, 11, 2)
    assert engine_vllm_release("nemo-rl", "0.6.0") == (0, 17, 1)
    assert engine_vllm_release("nemo-rl", None) == (0, 20, 0)   # the current defaults: the last entry
    assert engine_vllm_release("verl", "0.4.1") == (0, 8, 4)
    assert engine_vllm_release("verl", "0.6.0") == (0, 8, 4)      # setup.py vllm>=0.7.3,<=0.9.1
    assert engine_vllm_release("verl", "0.6.1") is None           # vllm>=0.8.5,<=0.11.0: across 0.11
    assert engine_vllm_release("verl", None) is None
    assert engine_vllm_release("openrlhf", "0.2.7") == (0, 4, 2)
    assert engine_vllm_release("openrlhf", None) is None          # "vllm 0.8.1 and later": unknown
    assert engine_vllm_release("none", None) is None
    assert engine_vllm_release("deepspeed-chat", None) is None


def _instance(version: str, utilization: float = 0.8):
    return build_instance({
        "hardware": {"preset": "h100-sxm", "racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8},
        "models": {"actor": dict(MODEL_PRESETS["llama3.1-8b"]), "reward": "rule"},
        "workload": {"batch_size": 64, "samples_per_prompt": 4, "context_length": 256, "generation_length": 512},
        "policy": {"algorithm": "grpo", "framework": "nemo-rl", "framework_version": version,
                   "gpu_memory_utilization": utilization}})


def _generate(inst, tp: int):
    table = CandidateTable(inst)
    return next(c for c in table.all["actor.generate"]
                if c.strategy == Strategy(8 // tp, 1, tp, 1) and c.extent == (1, 1, 8))


def test_a_candidate_holds_the_pool_and_what_lies_outside_it():
    inst = _instance("0.5.0")
    pool = 0.8 * 79.11 * 2**30     # the h100-sxm preset's CUDA total: 67,954,972,557.31 bytes
    assert memory_budget(inst, "generate") == pytest.approx(pool)
    one, two = _generate(inst, 1), _generate(inst, 2)
    outside_one = 1.02e9 + VLLM_CUDA_GRAPH_BYTES
    assert one.memory_bytes == pytest.approx(pool + outside_one)
    assert two.memory_bytes == pytest.approx(pool + outside_one + VLLM_NCCL_BYTES)
    # the own budget bounds the need inside the pool, not what lies outside it
    assert one.fits and one.budget_bytes <= pool and one.budget_bytes < one.memory_bytes
    assert one.resident_bytes == pytest.approx(weight_bytes(resolve_model("llama3.1-8b"), 1, 1))
    # v0.4 pins vLLM 0.10: NCCL inside the pool, TP 2 holds what TP 1 does
    old = _instance("0.4.0")
    assert _generate(old, 2).memory_bytes == pytest.approx(_generate(old, 1).memory_bytes)


def test_the_release_moves_nccl_across_the_pool_and_nothing_else():
    # vLLM 0.11.2 (NeMo RL v0.5) holds NCCL's 4.52 GiB outside the pool; 0.10 (v0.4) inside it, where it comes
    # out of the KV cache: the need inside the pool grows by it, what the GPU holds shrinks by it, once each
    a, b = _instance("0.5.0"), _instance("0.4.0")
    ca, cb = _generate(a, 2), _generate(b, 2)
    assert cb.budget_bytes - ca.budget_bytes == pytest.approx(VLLM_NCCL_BYTES)
    assert ca.memory_bytes - cb.memory_bytes == pytest.approx(VLLM_NCCL_BYTES)
    assert dataclasses.replace(a.engine, vllm_release=(0, 10, 0)) == b.engine


PRESET_NAMES = sorted(MODEL_PRESETS)


@settings(max_examples=200, deadline=None)
@given(gmu=st.floats(0.05, 0.98), tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2]),
       model=st.sampled_from(PRESET_NAMES), eager=st.booleans(),
       release=st.sampled_from([(0, 8, 4), (0, 10, 0), (0, 11, 2), (0, 17, 1), (0, 20, 0), (0, 21, 0), None]),
       live=st.floats(0.0, 1.0), beside=st.floats(0.0, 80e9), cuda_total=st.floats(80e9, 90e9))
def test_the_footprint_is_never_below_vllms_reservation(gmu, tp, pp, model, eager, release, live, beside,
                                                        cuda_total):
    memory = 80e9
    spec = resolve_model(model)
    weights = weight_bytes(spec, tp, pp)
    r = reservation(tp=tp, pp=pp, release=release, eager=eager)
    pool = gmu * memory
    need = weights + live * max(pool - weights, 0.0)    # any need inside the pool the KV budget allows
    held = weights + engine_held_bytes(weights, need - weights, pool, r)
    # vLLM's documented reservation: the whole fraction, plus what the release holds beside it
    # (with pipeline stages NCCL's logged 8.76 GiB is the GPU's used memory at the snapshot, the context inside)
    outside_nccl = release is None or release >= (0, 11)
    context_nccl = (max(VLLM_NCCL_PP_BYTES, WS) if pp > 1 and outside_nccl else
                    WS + (VLLM_NCCL_BYTES if tp * pp > 1 and outside_nccl else 0.0))
    documented = pool + context_nccl \
        + (VLLM_CUDA_GRAPH_BYTES if not eager and (release is None or release < (0, 21)) else 0.0)
    # a V0 engine: the pool, the workspace and its graphs
    v0 = weights + engine_held_bytes(weights, need - weights, pool, reservation(tp=tp, pp=pp, generation="v0",
                                                                                  release=(0, 6, 5), eager=eager))
    assert v0 >= pool + WS + (0.0 if eager else VLLM_V0_CUDA_GRAPH_BYTES) - 1e-3
    assert held >= documented - 1e-3
    # a verdict "fits" at the package's capacity is a fit on a GPU whose CUDA total is at least it
    if held + beside <= memory:
        assert gmu * cuda_total + (held - pool) + beside <= cuda_total + 1e-3
