"""Every cell of a comparison runs cold: what one solver cached on the instance is not the next one's, so
a cell's result and time do not depend on which solvers ran before it."""

from __future__ import annotations

from pathlib import Path

import packplace
from packplace.balance import make_instance
from packplace.harness import adapters
from packplace.harness.comparison import run_instance
from packplace.harness.suites import InstanceSpec
from packplace.placement import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/placement/dpo_llama3.1-8b_1x8xh100.yaml"


def seen_caches(monkeypatch, adapter) -> list[list[str]]:
    """Record, for each solve the adapter makes, the cache entries its instance already held."""
    seen: list[list[str]] = []
    solve = adapter.solve

    def spy(instance, solver, **kwargs):
        held = getattr(instance, "_cache", None)
        seen.append(sorted(held) if held is not None else sorted(k for k in vars(instance) if k in (
            "_evaluator_shared", "_makespan_bounds")))
        return solve(instance, solver, **kwargs)

    monkeypatch.setattr(adapter, "solve", spy)
    return seen


def test_each_placement_cell_builds_its_own_candidate_table(monkeypatch):
    seen = seen_caches(monkeypatch, adapters.ADAPTERS["placement"])
    spec = InstanceSpec(0, "dpo", "config", config=str(CONFIG))
    outcome = run_instance("placement", spec, ["greedy", "concurrent", "greedy"], None, 0)
    assert all(c.status in ("optimal", "feasible") for c in outcome["cells"])
    assert seen == [[], [], []]  # the old harness handed the second and third solver the first one's table
    first, _, again = outcome["cells"]
    assert again.objective == first.objective and again.status == first.status


def test_a_passed_in_placement_instance_is_not_warmed_by_the_harness(monkeypatch):
    seen = seen_caches(monkeypatch, adapters.ADAPTERS["placement"])
    instance = load_config(str(CONFIG))
    packplace.place(instance, "greedy")  # the caller's own solve warms it
    assert "table" in instance._cache
    run_instance("placement", InstanceSpec(0, "dpo", "object", instance=instance), ["greedy", "concurrent"], None, 0)
    assert seen == [[], []]
    assert "table" in instance._cache  # the caller's instance is left as it was


def test_each_balance_cell_starts_without_the_evaluator_cache(monkeypatch):
    seen = seen_caches(monkeypatch, adapters.ADAPTERS["balance"])
    instance = make_instance(tokens=[2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3)
    outcome = run_instance("balance", InstanceSpec(0, "small", "object", instance=instance), ["lpt", "repair"],
                           None, 0)
    assert seen == [[], []]
    assert [c.objective for c in outcome["cells"]] == [10.0, 10.0]
