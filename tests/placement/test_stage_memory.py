"""Pipeline stages in the plan's memory check: a pipelined task is charged the largest resident and the largest
transient bytes over its stages, each taken separately, on every GPU of its block, so that no GPU is charged less
than the exact per-stage count (each stage's own bytes on its own GPUs, pipeline stages outermost in the rank
order) beside any other task."""

from __future__ import annotations

import os
from dataclasses import replace
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packplace.placement.evaluator import PlacementEvaluator, get_evaluator
from packplace.placement.model.memory import stage_peaks, vertex_memory, vertex_stage_memory
from packplace.placement.model.stages import stage_layers
from packplace.placement.problem.config import build_instance, load_yaml
from packplace.shape import TransformerShape

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN_7B = os.path.join(ROOT, "configs", "placement", "grpo_qwen2.5-7b_2x8xh100.yaml")
GB = 1e9


@lru_cache(maxsize=1)
def _evaluator() -> PlacementEvaluator:
    """The shipped GRPO Qwen2.5-7B config on 2x8 H100: actor.generate, reference.infer, reward.infer, actor.train
    (models actor, reference, reward, actor)."""
    return get_evaluator(build_instance(load_yaml(QWEN_7B)))


def _blank(ev: PlacementEvaluator, name: str):
    """A candidate of ``name`` with no bytes at all (to be given hand-made ones)."""
    cand = ev.table.feasible[name][0]
    return replace(cand, resident_bytes=0.0, transient_bytes=0.0, kept_bytes=0.0, stage_bytes=())


def _staged(cand, stages: tuple[tuple[float, float], ...]):
    """``cand`` with ``stages`` per pipeline stage and their peaks, as the table sets them (stage_peaks)."""
    res, tra = stage_peaks(stages)
    return replace(cand, resident_bytes=res, transient_bytes=tra, kept_bytes=0.0,
                   stage_bytes=stages if len(stages) > 1 else ())


def _plan(ev: PlacementEvaluator, train, ref) -> list:
    """actor.train and reference.infer on GPUs 0..3, the other two tasks (no bytes) on GPUs 8..15."""
    return [(_blank(ev, "actor.generate"), 8, 16), (ref, 0, 4), (_blank(ev, "reward.infer"), 8, 16), (train, 0, 4)]


def test_a_stage_with_the_larger_resident_is_never_under_counted():
    # actor.train in 2 stages on GPUs 0..3: stage 0 (30 GB resident, 5 GB transient), stage 1 (20, 20); the
    # reference's 10 GB resident + 25 GB transient on the same GPUs. The worst stage by sum (stage 1, 40 GB) on every
    # GPU gave 20 + 10 + max(20, 25) = 55 GB, under stage 0's GPUs' exact 30 + 10 + max(5, 25) = 65 GB; the peaks
    # (30, 20) give 30 + 10 + max(20, 25) = 65 GB on every GPU
    ev = _evaluator()
    assert ev.names == ("actor.generate", "reference.infer", "reward.infer", "actor.train")
    train = _staged(_blank(ev, "actor.train"), ((30 * GB, 5 * GB), (20 * GB, 20 * GB)))
    ref = _staged(_blank(ev, "reference.infer"), ((10 * GB, 25 * GB),))
    assert (train.resident_bytes, train.transient_bytes) == (30 * GB, 20 * GB)
    assert ev._memory_segments(_plan(ev, train, ref)) == [(0, 4, pytest.approx(65 * GB)), (8, 16, 0.0)]
    # the transient side: the reference's larger transient on its last stage, the trainer's larger resident on its
    # first; exactly 30 + 10 + max(5, 1) = 45 GB on stage 0's GPUs, 20 + 10 + max(20, 30) = 60 GB on stage 1's; the
    # worst stages by sum (20 + 20, 10 + 30) gave 60 GB; the peaks 30 + 10 + 30 = 70 GB (an over-count)
    ref2 = _staged(ref, ((10 * GB, 1 * GB), (10 * GB, 30 * GB)))
    assert ev._memory_segments(_plan(ev, train, ref2)) == [(0, 4, pytest.approx(70 * GB)), (8, 16, 0.0)]


def test_fullest_gpus_names_the_stage_of_each_peak():
    ev = _evaluator()
    train = _staged(_blank(ev, "actor.train"), ((30 * GB, 5 * GB), (20 * GB, 20 * GB)))
    ref = _staged(_blank(ev, "reference.infer"), ((10 * GB, 1 * GB),))
    res = _plan(ev, train, ref)
    ev._resolve = lambda plan: res   # type: ignore[method-assign]
    try:
        cap = f"{ev.capacity / GB:.3g}"
        assert ev.fullest_gpus(None) == (f"GPUs (0, 0, 0)..(0, 0, 3): 60 GB needed while actor.train runs, "
                                         f"{cap} GB available "
                                         "(reference.infer 10 GB resident, actor.train 30 GB resident (pipeline "
                                         "stage 0) + 20 GB while it runs (pipeline stage 1))")
        # the reference's transient the larger: named without a stage (it has one)
        res[1] = (_staged(ref, ((10 * GB, 25 * GB),)), 0, 4)
        assert ev.fullest_gpus(None) == (f"GPUs (0, 0, 0)..(0, 0, 3): 65 GB needed while reference.infer "
                                         f"runs, {cap} GB available "
                                         "(reference.infer 10 GB resident + 25 GB while it runs, "
                                         "actor.train 30 GB resident (pipeline stage 0))")
    finally:
        del ev._resolve


def _exact_bytes(res, vm, g: int) -> float:
    """GPU ``g``'s bytes counted per stage by hand: each task's stage there (stage ``k`` on the ``k``-th of ``pp``
    equal consecutive GPU ranges of its block), per model the largest resident, plus the largest transient."""
    resident: dict[int, float] = {}
    transient = 0.0
    for i, (cand, lo, hi) in enumerate(res):
        if lo <= g < hi:
            stages = cand.stage_bytes or ((cand.resident_bytes, cand.transient_bytes),)
            r, t = stages[(g - lo) // ((hi - lo) // len(stages))]
            resident[vm[i]] = max(resident.get(vm[i], 0.0), r)
            transient = max(transient, t)
    return sum(resident.values()) + transient


_BYTES = st.floats(min_value=0.0, max_value=40.0).map(lambda x: x * GB)


@st.composite
def _placed(draw, ev: PlacementEvaluator, name: str):
    pp = draw(st.sampled_from((1, 2, 4)))
    size = pp * draw(st.sampled_from((1, 2, 4)))
    lo = draw(st.integers(0, 16 - size))
    stages = tuple((draw(_BYTES), draw(_BYTES)) for _ in range(pp))
    return _staged(_blank(ev, name), stages), lo, lo + size


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_every_gpu_holds_at_least_the_exact_per_stage_bytes(data):
    ev = _evaluator()
    # the engine (a hybrid engine inside its trainer's block adds its weights to its transient) left empty
    res = [(_blank(ev, "actor.generate"), 0, 16)]
    res += [data.draw(_placed(ev, name)) for name in ev.names[1:]]
    for lo, hi, used in ev._memory_segments(res):
        for g in range(lo, hi):
            assert used >= _exact_bytes(res, ev.vertex_model, g) - 1e-3
            for cand, a, b in res:
                if a <= g < b:
                    stages = cand.stage_bytes or ((cand.resident_bytes, cand.transient_bytes),)
                    r, t = stages[(g - a) // ((b - a) // len(stages))]
                    assert used >= r + t - 1e-3


@settings(max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_table_candidates_carry_their_stages(data):
    # pipelined candidates of the shipped config: their bytes are their stages' peaks, and with the trainer and the
    # reference on the same block every GPU holds at least the exact per-stage count
    ev = _evaluator()
    piped = {n: [c for c in ev.table.feasible[n] if c.strategy.pp > 1] for n in ("reference.infer", "actor.train")}
    train = data.draw(st.sampled_from(piped["actor.train"]))
    ref = data.draw(st.sampled_from([c for c in piped["reference.infer"] if c.extent == train.extent]))
    for cand in (train, ref):
        assert len(cand.stage_bytes) == cand.strategy.pp
        assert (cand.resident_bytes, cand.transient_bytes) == stage_peaks(cand.stage_bytes)
    n = train.gpus
    res = [(_blank(ev, "actor.generate"), n, 16), (ref, 0, n), (_blank(ev, "reward.infer"), n, 16), (train, 0, n)]
    for lo, hi, used in ev._memory_segments(res):
        for g in range(lo, min(hi, n)):
            assert used >= _exact_bytes(res, ev.vertex_model, g)


def test_vertex_memory_is_the_stage_of_the_largest_sum():
    model = TransformerShape(6, 1024, 4096, 32000)
    kw = dict(dp=2, pp=3, tp=1, micro_batch=2, micro_batches=4, seq_len=512.0, prompt_len=128, live_len=256.0)
    stages = vertex_stage_memory(model, "train", **kw)
    assert len(stages) == 3 == len(stage_layers(model.layers, 3))
    assert vertex_memory(model, "train", **kw) == max(stages, key=lambda s: s[0] + s[1])
    res, tra = stage_peaks(stages)
    assert res == max(r for r, _ in stages) and tra == max(t for _, t in stages)
    # the first stage holds the most micro-batches in flight
    assert stages[0][1] > stages[1][1]
