"""packplace's scheduler for Megatron-Core's sequence-packing slot, against hand-computed schedules and
the benchmark's re-implementation of Megatron's ``dp_balanced``."""

from __future__ import annotations

import enum
import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

from packplace.errors import ConfigError
from packplace.integrations.megatron import PackplacePackingScheduler, register, sequence_flops

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
                             ([(0, 0), (1, 3)], r"^sample_id_seqlens\[0\]\[1\]: must be >= 1, got 0")):
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
