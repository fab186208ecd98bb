"""packplace's scheduler for Megatron-Core's sequence-packing slot, against hand-computed schedules and
the benchmark's re-implementation of Megatron's ``dp_balanced``."""

from __future__ import annotations

import enum
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from packplace.balance import rank_rules, reference
from packplace.errors import ConfigError
from packplace.integrations import megatron
from packplace.integrations.megatron import PackplacePackingScheduler, construction_count, register, sequence_flops

_SPEC = importlib.util.spec_from_file_location(
    "megatron_dp_balanced", Path(__file__).resolve().parents[2] / "benchmarks" / "megatron_dp_balanced.py")
dp_balanced = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(dp_balanced)


def _rank_flops(groups, lengths, cp_size=1, hidden=1):
    flops = sequence_flops(lengths, hidden)
    costs = dp_balanced.micro_costs(groups, flops, cp_size)
    return [sum(rank) for rank in costs]


def test_dp_balanced_reimplementation_on_a_hand_case():
    # cap 9, dp 2: next fit gives [0, 1] (4 + 4; + 3 > 9), [2, 3, 4] (3 + 3 + 2; + 2 > 9), [5] -> 3 packs; to reach a
    # multiple of 2 the last pack holding two or more ([2, 3, 4]) gives its last sample a pack of its own.
    groups = dp_balanced.dp_balanced_groups(list(enumerate([4, 4, 3, 3, 2, 2])), 9, 1, 2)
    assert groups == [[[0, 1], [2, 3]], [[5], [4]]]


def test_packplace_balances_flops_where_next_fit_does_not():
    # FLOPs 6s + s^2 (h = 1): 4 -> 40, 3 -> 27, 2 -> 16; total 166. One pack per rank {4, 3, 2} (9 tokens) is
    # 83 | 83, the optimum. dp_balanced (above): rank 0 packs [0, 1] + [5] = 80 + 16 = 96, rank 1 54 + 16 = 70.
    lengths = [4, 4, 3, 3, 2, 2]
    scheduler = PackplacePackingScheduler(9, 1, 2, None, hidden_size=1)
    groups = scheduler.get_groups_and_subsamples(list(enumerate(lengths)))
    assert len(groups) == 1 and _rank_flops(groups, lengths) == [83.0, 83.0]
    theirs = dp_balanced.dp_balanced_groups(list(enumerate(lengths)), 9, 1, 2)
    assert max(_rank_flops(theirs, lengths)) == 96.0


def test_layout_matches_megatron_with_context_parallel_and_virtual_pipeline():
    # dp 2, cp 2, 4 ranks per micro-batch; CP ranks 2r and 2r+1 share DP rank r's pack. Cap 5 * 2 = 10 tokens
    # per pack; 8 sequences of 5 tokens need 4 packs; with a VPP group of 2 each rank holds 2 packs.
    scheduler = PackplacePackingScheduler(5, 2, 2, 2, hidden_size=1)
    groups = scheduler.get_groups_and_subsamples([(100 + i, 5) for i in range(8)])
    assert len(groups) == 2 and all(len(g) == 4 for g in groups)
    assert all(g[0] == g[1] and g[2] == g[3] for g in groups)
    packs = [g[j] for g in groups for j in (0, 2)]
    assert sorted(i for p in packs for i in p) == list(range(8)) and all(len(p) == 2 for p in packs)
    # each rank runs its heaviest pack first (all equal here: ties by member list)
    assert scheduler.get_required_sample_keys()[-2:] == ["original_seq_len", "padded_seq_len"]


def test_packs_per_rank_round_up_to_the_virtual_pipeline_group():
    # 6 sequences of 4 tokens, cap 10, dp 1: 3 packs of two suffice; a VPP group of 2 makes it 4.
    scheduler = PackplacePackingScheduler(10, 1, 1, 2, hidden_size=1)
    groups = scheduler.get_groups_and_subsamples(list(enumerate([4] * 6)))
    assert len(groups) == 4
    assert all(sum(4 for _ in g[0]) <= 10 for g in groups)


def test_bad_arguments_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="dp_size: must be an integer >= 1"):
        PackplacePackingScheduler(10, 1, 0, None)
    with pytest.raises(ConfigError, match="tokens"):
        PackplacePackingScheduler(10, 1, 1, None).get_groups_and_subsamples([(0, 11)])


def test_entries_that_are_not_id_length_pairs_or_bad_lengths_are_refused_in_one_line():
    scheduler = PackplacePackingScheduler(8, 1, 1, None)
    for entries, message in (([4, 3], r"sample_id_seqlens\[0\]: must be a \(sample id, sequence length\) pair, got 4"),
                             ([(0, "x"), (1, 3)], r"^sample_id_seqlens\[0\]\[1\]: must be a number, got 'x'"),
                             ([(0, 4.5), (1, 3)], r"^sample_id_seqlens\[0\]\[1\]: must be an integer, got 4\.5"),
                             ([(0, -1), (1, 3)], r"^sample_id_seqlens\[0\]\[1\]: must be >= 0, got -1"),
                             ([(5, 1), (6, 2), (5, 3)], r"^sample_id_seqlens\[2\]\[0\]: duplicate sample id 5 \(also "
                                                        r"sample_id_seqlens\[0\]\[0\]\)$"),
                             ([([1], 1), (2, 2)], r"^sample_id_seqlens\[0\]\[0\]: a sample id must be hashable, ")):
        with pytest.raises(ConfigError, match=message):
            scheduler.get_groups_and_subsamples(entries)
    assert scheduler.get_groups_and_subsamples([(7, 4), (9, 3)]) == [[[0, 1]]]


def _stand_in_data_schedule():
    """Megatron-Core's scheduler registry as ``data_schedule.py`` has it: an Enum of names, ``scheduler_map``,
    ``BasePackingScheduler`` (the constructor's four arguments) and ``DpBalancedScheduler`` (whose ``run``
    calls ``get_groups_and_subsamples``)."""
    module = types.ModuleType("megatron.core.datasets.data_schedule")

    class BasePackingScheduler:
        def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage):
            self.max_seqlen_per_dp_cp_rank, self.cp_size, self.dp_size = max_seqlen_per_dp_cp_rank, cp_size, dp_size
            self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage

    class DpBalancedScheduler(BasePackingScheduler):
        def get_groups_and_subsamples(self, sample_id_seqlens):
            return "megatron's own"

        def run(self, sample_id_seqlens):
            return self.get_groups_and_subsamples(sample_id_seqlens)

    class PackingSchedulerEnum(enum.Enum):
        DP_BALANCED = "dp_balanced"

    module.BasePackingScheduler, module.DpBalancedScheduler = BasePackingScheduler, DpBalancedScheduler
    module.PackingSchedulerEnum = PackingSchedulerEnum
    module.scheduler_map = {PackingSchedulerEnum.DP_BALANCED: DpBalancedScheduler}
    return module


def test_register_adds_a_scheduler_name_and_keeps_megatrons_own():
    module = _stand_in_data_schedule()
    names = module.PackingSchedulerEnum
    member = register(data_schedule=module, hidden_size=1)
    # Megatron's lookup: PackingSchedulerEnum[config.sequence_packing_scheduler.upper()]
    assert names["PACKPLACE"] is member and names("packplace") is member and names.PACKPLACE is member
    assert [m.name for m in names] == ["DP_BALANCED", "PACKPLACE"]
    assert module.scheduler_map[names.DP_BALANCED] is module.DpBalancedScheduler
    scheduler = module.scheduler_map[member](9, 1, 2, None)
    assert isinstance(scheduler, module.DpBalancedScheduler) and isinstance(scheduler, PackplacePackingScheduler)
    assert scheduler.run(list(enumerate([4, 4, 3, 3, 2, 2]))) == [[[0, 2, 4], [1, 3, 5]]]   # Megatron's run, ours
    assert module.scheduler_map[names.DP_BALANCED](9, 1, 2, None).run([]) == "megatron's own"
    assert register(data_schedule=module, hidden_size=1) is member     # the same call again changes nothing
    assert len(module.scheduler_map) == 2


def test_register_refuses_megatrons_names_bad_names_and_options_in_one_line():
    module = _stand_in_data_schedule()
    with pytest.raises(ConfigError, match="^name: 'dp_balanced' is already Megatron's scheduler DP_BALANCED"):
        register("dp_balanced", data_schedule=module)
    with pytest.raises(ConfigError, match="^name: must be a Python identifier, got 'my scheduler'"):
        register("my scheduler", data_schedule=module)
    with pytest.raises(ConfigError, match="^options: unknown option 'hidden'"):
        register(data_schedule=module, hidden=4096)
    register(data_schedule=module)
    with pytest.raises(ConfigError, match="^name: 'packplace' is already"):
        register(data_schedule=module, solver="lpt")   # the same name with other options: refused, not replaced
    assert module.scheduler_map[module.PackingSchedulerEnum.DP_BALANCED] is module.DpBalancedScheduler


def _recipe(marker):
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()
    after = text[text.index(f"<!-- recipe: {marker} -->"):]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_docs_megatron_recipe_runs_as_written(monkeypatch):
    try:
        importlib.import_module("megatron.core.datasets.data_schedule").PackingSchedulerEnum  # noqa: B018
    except (ImportError, AttributeError):
        # Megatron-Core (with its packing schedulers) is not installed: the recipe runs on the stand-in
        module = _stand_in_data_schedule()
        for name in ("megatron", "megatron.core", "megatron.core.datasets"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(_recipe("megatron-register"), "docs/integrations.md", "exec"), {})


def _each_key_once(groups, n, cp_size=1):
    """Every sample position in exactly one pack of one DP rank (the CP ranks of a DP rank share its pack)."""
    packs = [group[j] for group in groups for j in range(0, len(group), cp_size)]
    assert sorted(i for pack in packs for i in pack) == list(range(n))
    return packs


def _batch(seed, n, cap):
    import random
    rng = random.Random(seed)
    return [(1000 + i, rng.randint(1, cap)) for i in range(n)]


def test_the_pack_count_is_decided_without_cpsat_or_the_clock(monkeypatch, work_clock):
    # local_batch_size="auto" ran an exact CP-SAT check (seconds on small batches) before the backend's deadline
    # started; the scheduler's count comes from the construction alone: a CP-SAT call here would raise
    def no_exact(*args, **kwargs):
        raise AssertionError("the count decision ran CP-SAT")

    monkeypatch.setattr(reference, "exact_packing", no_exact)
    monkeypatch.setattr(rank_rules, "exact_packing", no_exact)
    batch = _batch(5, 120, 8192)
    first = PackplacePackingScheduler(4096, 2, 4, 2, time_limit_s=0.2)
    groups = first.get_groups_and_subsamples(batch)
    packs = _each_key_once(groups, len(batch), cp_size=2)
    assert all(sum(batch[i][1] for i in pack) <= 8192 for pack in packs)
    tokens = np.array([length for _, length in batch])
    per_rank = construction_count(tokens, 8192, 4, 2)
    assert len(groups) == per_rank and per_rank % 2 == 0
    # the same batch gives a fresh scheduler (another rank) and a second call the same plan (the work clock: the
    # limit falls at the same point of the search on any machine; repair finishes well within it)
    again = PackplacePackingScheduler(4096, 2, 4, 2, time_limit_s=0.2)
    assert again.get_groups_and_subsamples(batch) == groups == first.get_groups_and_subsamples(batch)
    assert not first.last_result.hit_time_limit and first.last_result.info["fallback"] is None


def test_construction_count_on_hand_cases():
    # 6 sequences of 4 tokens, cap 10, one rank: two a pack, 3 packs; with a multiple of 2, 4
    assert construction_count(np.array([4] * 6), 10, 1) == 3
    assert construction_count(np.array([4] * 6), 10, 1, 2) == 4
    # 5 full packs on 2 ranks: 3 per rank would need 6 sequences, so no count (the exact check proves it)
    assert construction_count(np.array([9] * 5), 9, 2) is None
    # a sequence above the cap: none (make_instance names it)
    assert construction_count(np.array([11, 1]), 10, 1) is None


def test_a_cold_first_call_falls_back_instead_of_raising(work_clock, monkeypatch):
    # a fresh rank's first call imports the solvers inside the backend's time limit; a stand-in import of 1 s
    # on the work clock against a limit of 0.05 s stops repair before it places a sample. The scheduler falls back
    # on lpt run to completion (deterministic) and flags the cut, where it raised RuntimeError.
    import packplace.run as run_module
    original, calls = run_module.get, []

    def cold_get(problem, name):
        if not calls:
            work_clock.now += 1.0
        calls.append(name)
        return original(problem, name)

    monkeypatch.setattr(run_module, "get", cold_get)
    lengths = [4000, 3000, 100, 2000, 500, 700]
    scheduler = PackplacePackingScheduler(4096, 1, 2, None, time_limit_s=0.05)
    groups = scheduler.get_groups_and_subsamples(list(enumerate(lengths)))
    packs = _each_key_once(groups, len(lengths))
    assert all(sum(lengths[i] for i in pack) <= 4096 for pack in packs)
    result = scheduler.last_result
    assert calls[0] == "repair" and result.hit_time_limit and result.info["fallback"] in megatron.FALLBACK_SOLVERS
    assert "repair found no assignment" in result.message
    # lpt's plan is a function of the batch: a warm call with fallback forced gives the same groups
    monkeypatch.setattr(run_module, "get", original)
    warm = PackplacePackingScheduler(4096, 1, 2, None, solver=result.info["fallback"])
    assert warm.get_groups_and_subsamples(list(enumerate(lengths))) == groups


def test_zero_length_sequences_are_placed_as_megatron_places_them():
    # Megatron's next fit packs a zero-length sequence with the sequence before it (0 + its tokens fit), and an
    # all-zero batch on 2 ranks splits into [[0], [1]]: every key exactly once
    scheduler = PackplacePackingScheduler(8, 1, 2, None, hidden_size=1)
    assert scheduler.get_groups_and_subsamples([(0, 0), (1, 0)]) == [[[0], [1]]]
    # (Megatron's own pass asserts "Not enough samples to move" on this batch: it splits packs after the first only)
    with pytest.raises(ValueError, match="Not enough samples to move"):
        dp_balanced.dp_balanced_groups([(0, 0), (1, 0)], 8, 1, 2)
    assert dp_balanced.dp_balanced_groups([(0, 0), (1, 5), (2, 0), (3, 4), (4, 0)], 8, 1, 2) == [[[0, 1, 2], [3, 4]]]
    # 5 + 4 tokens need a pack each on 2 ranks; zero-length 0 goes beside 1 (the first sequence after it),
    # 2 beside 1 (the one before it), 4 beside 3
    groups = scheduler.get_groups_and_subsamples([(0, 0), (1, 5), (2, 0), (3, 4), (4, 0)])
    assert groups == [[[0, 1, 2], [3, 4]]]
    # fewer sequences of positive length than packs: each alone, zero-length ones fill the rest (VPP group 2:
    # 2 packs a rank); 4 is left over and goes beside 3
    groups = PackplacePackingScheduler(8, 1, 2, 2, hidden_size=1).get_groups_and_subsamples(
        list(enumerate([3, 0, 6, 0, 0])))
    packs = _each_key_once(groups, 5)
    assert sorted(packs) == [[0], [1], [2], [3, 4]]
    assert groups[0] == [[2], [0]]   # heaviest first: 6 on rank 0, 3 on rank 1
    # a sequence over the cap is refused on that path too (it had no instance to check it)
    with pytest.raises(ConfigError, match=r"^sample_id_seqlens\[0\]\[1\]: 10 tokens exceed the cap "
                                          r"max_seqlen_per_dp_cp_rank x cp_size = 8 tokens per pack$"):
        scheduler.get_groups_and_subsamples([(0, 10), (1, 0), (2, 0)])


def test_a_plan_the_clock_cut_is_replaced_by_the_deterministic_fallback(monkeypatch):
    # Megatron schedules the batch on every rank: a plan the time limit cut depends on each rank's load, so the
    # scheduler returns lpt's (run to completion) instead. Stand-in: repair's answer flagged as cut by the clock.
    import dataclasses
    original = megatron.solve_balance

    def cut_repair(instance, solver, **kwargs):
        result = original(instance, solver, **kwargs)
        return dataclasses.replace(result, hit_time_limit=True) if solver == "repair" else result

    batch = _batch(7, 40, 4096)
    lpt_groups = PackplacePackingScheduler(4096, 1, 4, None, solver="lpt", time_limit_s=5.0) \
        .get_groups_and_subsamples(batch)
    monkeypatch.setattr(megatron, "solve_balance", cut_repair)
    scheduler = PackplacePackingScheduler(4096, 1, 4, None, time_limit_s=5.0)
    assert scheduler.get_groups_and_subsamples(batch) == lpt_groups
    assert scheduler.last_result.info["fallback"] == "lpt" and scheduler.last_result.hit_time_limit
    assert "repair was cut by the time limit" in scheduler.last_result.message
    # without a limit the flag is the backend's own work budget, not the clock: repair's answer stays
    unlimited = PackplacePackingScheduler(4096, 1, 4, None)
    unlimited.get_groups_and_subsamples(batch)
    assert unlimited.last_result.info["fallback"] is None and unlimited.last_result.solver == "repair"


@pytest.mark.parametrize("limit", [-1, 0, 0.0, float("nan"), float("inf"), True])
def test_a_time_limit_that_is_not_a_positive_finite_number_is_refused(limit):
    """Both schedulers refuse it when built (it had been taken and run into the fallback); None is no limit."""
    from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPScheduler
    for scheduler in (PackplacePackingScheduler, PackplaceDynamicCPScheduler):
        with pytest.raises(ConfigError, match=rf"^time_limit_s: must be a positive number of seconds, got {limit!r}$"):
            scheduler(100, 1, 2, None, time_limit_s=limit)
    unlimited = PackplacePackingScheduler(100, 1, 2, None, time_limit_s=None)
    groups = unlimited.get_groups_and_subsamples([(0, 50), (1, 60), (2, 40), (3, 50)])
    assert sorted(i for mb in groups for pack in mb for i in pack) == [0, 1, 2, 3]
    assert not unlimited.last_result.info.get("fallback")
