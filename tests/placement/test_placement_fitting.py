"""``greedy``'s memory-first screen (:func:`~packplace.solvers.placement.greedy.screened_plan`) finds a plan of a
layout wherever one fits: the least-memory plan first, else the search of
:mod:`packplace.solvers.placement._fitting`, since a layout's least-memory plan need not fit where another of its
plans does (that module's docstring)."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packplace.placement.evaluator import PlacementEvaluator, get_evaluator
from packplace.placement.problem.config import build_instance
from packplace.placement.problem.plan import Allocation
from packplace.solvers.placement import greedy
from packplace.solvers.placement._common import ORIGIN, assemble_for
from packplace.solvers.placement._fitting import fitting_choice, pareto, plain
from tests.placement.test_placement_memory_first import LLAMA_1B, QWEN_05B, QWEN_15B

GB = 1e9
#: GRPO with a reward model on 2 H100s: actor.generate, reference.infer, reward.infer, actor.train.
GRPO_TWO = {"hardware": {"gpus_per_node": 2, "preset": "h100-sxm"},
            "models": {"actor": LLAMA_1B, "reward": LLAMA_1B},
            "policy": {"algorithm": "grpo"},
            "workload": {"batch_size": 8, "context_length": 128, "generation_length": 256, "samples_per_prompt": 2}}


def _set_memory(table, name: str, extent, terms: list[tuple[float, float]]) -> list:
    """Give ``name``'s feasible candidates of ``extent`` the ``(resident, transient)`` bytes of ``terms`` in
    turn (the last repeated), in the table's lists and key index alike; the patched candidates, in order."""
    patched = {}
    own = [c for c in table.feasible[name] if c.extent == extent]
    for k, c in enumerate(own):
        resident, transient = terms[min(k, len(terms) - 1)]
        patched[c.key] = dataclasses.replace(c, resident_bytes=resident, transient_bytes=transient, kept_bytes=0.0,
                                             pool_bytes=None)
    table.feasible[name] = tuple(patched.get(c.key, c) for c in table.feasible[name])
    table.all[name] = tuple(patched.get(c.key, c) for c in table.all[name])
    table.by_key[name] = {**table.by_key[name], **patched}
    return [patched[c.key] for c in own]


def toy(capacity: float):
    """The module docstring's counterexample on GRPO_TWO, every vertex on both GPUs: the reference forward's
    least-memory candidate X holds 10 GB resident and nothing while it runs, its candidate Y 2 GB resident and 9
    GB while it runs (11 GB in all); the reward forward 9 GB while it runs; the actor nothing."""
    inst = build_instance(GRPO_TWO)
    table = get_evaluator(inst).table
    whole = Allocation(ORIGIN, table.extents[-1])
    x, y, *_ = _set_memory(table, "reference.infer", whole.extent, [(10 * GB, 0.0), (2 * GB, 9 * GB), (10 * GB, GB)])
    _set_memory(table, "reward.infer", whole.extent, [(0.0, 9 * GB)])
    for name in ("actor.generate", "actor.train"):
        _set_memory(table, name, whole.extent, [(0.0, 0.0)])
    ev = PlacementEvaluator(inst, table)
    ev.capacity = capacity
    return ev, dict.fromkeys(inst.graph.names, whole), x, y


def test_the_least_memory_plan_need_not_fit_where_another_does_and_the_screen_finds_that_one():
    ev, blocks, x, y = toy(15 * GB)
    least = {name: (min((c for c in ev.table.feasible[name] if c.extent == b.extent),
                        key=lambda c: (c.memory_bytes, c.time)), b) for name, b in blocks.items()}
    assert least["reference.infer"][0] == x and x.memory_bytes == 10 * GB < y.memory_bytes == 11 * GB
    # X: 10 GB resident + 9 GB the reward forward's run = 19 GB > 15; Y: 2 + max(9, 9) = 11 GB
    assert ev.step_time(assemble_for(ev, least)) == float("inf")
    plan, calls, rescued = greedy.screened_plan(ev, blocks)
    assert rescued and plan is not None and ev.step_time(plan) < float("inf")
    assert dict(plan.vertices)["reference.infer"].strategy == y.strategy
    assert max(ev.vertex_memory(plan).values()) == 11 * GB
    assert calls >= 2   # the least-memory plan, then at least the fallback's leaf


def test_the_fallback_says_no_plan_only_where_none_fits():
    # 11 GB is the least any plan of the toy layout needs: at 10.9 GB nothing fits, and the search says so, complete
    ev, blocks, _, _ = toy(10.9 * GB)
    assert plain(ev)
    choice, calls, complete = fitting_choice(ev, blocks)
    assert (choice, calls, complete) == (None, 0, True)   # the bound cuts every leaf: no evaluator call
    assert greedy.screened_plan(ev, blocks)[0] is None
    # brute force agrees: no combination of the layout's candidates fits
    lists = [[c for c in ev.table.feasible[n] if c.extent == b.extent] for n, b in blocks.items()]
    assert not any(ev.step_time(assemble_for(ev, {n: (c, blocks[n]) for n, c in zip(blocks, combo)})) < float("inf")
                   for combo in itertools.product(*lists))
    # a node cap of 1 cuts the search: not complete
    assert fitting_choice(toy(15 * GB)[0], blocks, max_nodes=1)[2] is False


def test_pareto_drops_the_dominated_candidates_only():
    ev, _, x, y = toy(15 * GB)
    own = [c for c in ev.table.feasible["reference.infer"] if c.extent == x.extent]
    kept = pareto(own, by_layout=False)
    # (10, 0) and (2, 9) trade resident against transient bytes; every (10, 1) is dominated by (10, 0)
    assert {(c.resident_bytes, c.transient_bytes) for c in kept} == {(10 * GB, 0.0), (2 * GB, 9 * GB)}
    assert kept[0] == x and len(kept) == 2


@settings(max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(algorithm=st.sampled_from(["grpo", "dpo"]), actor=st.sampled_from([0, 1, 2]), reward=st.sampled_from([0, 1, 2]),
       preset=st.sampled_from(["h100-sxm", "h200", "a100"]), batch=st.sampled_from([8, 16, 32]),
       generation=st.sampled_from([256, 512, 1024]), gmu=st.sampled_from([0.3, 0.5, 0.7, 0.9]),
       memory=st.sampled_from([None, 24e9, 40e9]))
def test_for_every_layout_if_any_plan_fits_the_screened_plan_fits(algorithm, actor, reward, preset, batch,
                                                                  generation, gmu, memory):
    shapes = (LLAMA_1B, QWEN_05B, QWEN_15B)
    models = {"actor": shapes[actor]}
    if algorithm == "grpo":
        models["reward"] = shapes[reward]
    hardware = {"gpus_per_node": 2, "preset": preset, **({} if memory is None else {"memory_per_gpu": memory})}
    inst = build_instance({"hardware": hardware, "models": models,
                           "policy": {"algorithm": algorithm, "gpu_memory_utilization": gmu},
                           "workload": {"batch_size": batch, "samples_per_prompt": 2, "context_length": 128,
                                        "generation_length": generation}})
    ev = get_evaluator(inst)
    checked = 0
    for blocks in itertools.islice(greedy.memory_first_family(inst, ev.table), 40):
        lists = [[c for c in ev.table.feasible[n] if c.extent == b.extent] for n, b in blocks.items()]
        if not all(lists) or sum(map(len, lists)) > 40 or len(list(itertools.product(*lists))) > 1500:
            continue
        checked += 1
        any_fits = any(ev.step_time(assemble_for(ev, {n: (c, blocks[n]) for n, c in zip(blocks, combo)}))
                       < float("inf") for combo in itertools.product(*lists))
        plan, _, _ = greedy.screened_plan(ev, blocks)
        assert (plan is not None) == any_fits
        assert plan is None or ev.step_time(plan) < float("inf")
