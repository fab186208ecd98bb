"""The typed library surface: entry points, serialisers, the registry listing, errors, version."""

from __future__ import annotations

import inspect
import json
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import BALANCE_SOLVERS

import packplace
from packplace.balance import Assignment, make_instance, plan_balance
from packplace.cli import main
from packplace.errors import ConfigError, InfeasibleError, PackplaceError
from packplace.placement import load_config as load_placement
from packplace.result import SolveResult

ROOT = Path(__file__).resolve().parents[1]


def test_balance_is_the_entry_point_and_the_subpackage_still_imports():
    assert isinstance(packplace.balance, packplace.BalanceEntry) and callable(packplace.balance)
    assert list(inspect.signature(packplace.balance).parameters)[:2] == ["instance", "solver"]
    from packplace.balance.schema import BalanceInstance  # the subpackage's own names stay importable

    inst = make_instance(tokens=[2, 6, 3, 3, 2, 9, 4], seq_len=10, data_parallel_size=3)
    assert isinstance(inst, BalanceInstance)
    result = packplace.balance(inst, solver="cpsat", time_limit_s=10, seed=0)
    assert (result.status, result.objective, result.bound) == ("optimal", 10.0, 10.0)


def test_placement_public_names_import_from_the_package_and_the_former_module_paths():
    import packplace.placement.config as former_config  # the paths from before the folders
    from packplace.placement import Plan, load_config
    from packplace.placement.plan import Plan as FormerPlan
    from packplace.placement.problem import config, plan

    assert former_config is config and load_config is config.load_config is former_config.load_config
    assert Plan is FormerPlan is plan.Plan
    inst = load_config(ROOT / "configs/placement/dpo_llama3.1-8b_1x8xh100.yaml")
    assert isinstance(inst, former_config.PlacementInstance) and inst.num_gpus == 8


def test_old_module_style_attribute_access_still_works_and_warns_once_per_name(monkeypatch):
    import packplace.balance as old_style  # binds the entry point: it forwards the subpackage's names

    monkeypatch.setattr(packplace.BalanceEntry, "_warned", set())
    assert old_style is packplace.balance
    with pytest.warns(DeprecationWarning) as caught:
        assert old_style.make_instance is make_instance
        assert old_style.make_instance is make_instance  # the second read does not warn again
        assert old_style.plan_balance is plan_balance
        assert old_style.schema.BalanceInstance.__name__ == "BalanceInstance"
        assert old_style.api.solve_balance(make_instance([1, 2], seq_len=5, data_parallel_size=1)).ok
    names = [str(w.message).split(":")[0] for w in caught if issubclass(w.category, DeprecationWarning)]
    assert names == ["packplace.balance.make_instance", "packplace.balance.plan_balance"]  # submodules: no warning
    assert all("0.3.0" in str(w.message) for w in caught)
    assert "use 'from packplace.balance import make_instance'" in str(caught[0].message)
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        old_style.missing  # noqa: B018
    with pytest.raises(AttributeError):
        old_style._private  # noqa: B018


def test_moved_schema_names_warn_once_and_name_their_new_module(monkeypatch):
    import packplace.balance.schema as schema
    from packplace.balance import instance, reference

    monkeypatch.setattr(schema, "_WARNED", set())
    with pytest.warns(DeprecationWarning, match="import it from packplace.balance.instance") as caught:
        from packplace.balance.schema import make_instance as again
        from packplace.balance.schema import make_instance as old_make_instance
    assert old_make_instance is instance.make_instance is again
    assert len([w for w in caught if issubclass(w.category, DeprecationWarning)]) == 1
    for name in ("worst_fit_bins", "token_packing_reference", "default_reference_bins"):
        with pytest.warns(DeprecationWarning, match="0.3.0; import it from packplace.balance.reference"):
            assert getattr(schema, name) is getattr(reference, name)
    with pytest.raises(ImportError):
        from packplace.balance.schema import no_such_name  # noqa: F401


def test_registry_aliases_are_public_and_copied():
    assert packplace.solvers.aliases("balance") == {"kk": "karmarkar_karp"}
    assert packplace.solvers.aliases("placement") == {}
    packplace.solvers.aliases("balance")["x"] = "lpt"  # a copy: the registry is unchanged
    assert "x" not in packplace.solvers.aliases("balance")
    with pytest.raises(ConfigError, match="problem: unknown 'packing'"):
        packplace.solvers.aliases("packing")


def test_the_registry_discovers_every_public_solver_module():
    import pkgutil
    import sys

    for problem in ("balance", "placement"):
        packplace.solvers.available(problem)
        package = sys.modules[f"packplace.solvers.{problem}"]
        public = [m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")]
        assert public and all(f"packplace.solvers.{problem}.{name}" in sys.modules for name in public)
        source = Path(package.__file__).read_text(encoding="utf-8")
        assert "import" not in source.split('"""')[-1]  # the package itself is docstring-only


def test_package_ships_py_typed():
    assert (Path(packplace.__file__).parent / "py.typed").is_file()


def test_version_is_the_installed_distributions():
    assert packplace.__version__ == version("packplace")
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'version = "{packplace.__version__}"' in text


def test_available_without_a_problem_lists_every_problem():
    every = packplace.solvers.available()
    assert set(every) == {"balance", "placement", "context_parallel"}
    assert every["balance"] == BALANCE_SOLVERS == sorted(every["balance"])
    assert {"cpsat", "karmarkar_karp", "lns", "lpt", "reference", "repair"} <= set(every["balance"])
    assert every["placement"] == packplace.solvers.available("placement")
    assert {"greedy", "concurrent", "anneal", "cpsat"} <= set(every["placement"])
    with pytest.raises(ConfigError, match="problem: unknown 'packing'"):
        packplace.solvers.available("packing")


def test_balance_result_round_trips_through_json():
    inst = make_instance(tokens=[2, 6, 3, 3, 2, 9, 4], seq_len=12, data_parallel_size=3, keys=list("abcdefg"))
    result = packplace.balance(inst, solver="repair")
    assert result.ok
    text = result.to_json()
    data = json.loads(text)
    assert data["solution"]["local_batch_size"] == 1 and len(data["solution"]["ranks"]) == 3
    assert data["gap"] == result.gap and data["objective"] == result.objective
    back = SolveResult.from_json(text)
    assert back.solution == result.solution and isinstance(back.solution, Assignment)
    assert (back.status, back.objective, back.bound, back.solver) == (result.status, result.objective,
                                                                       result.bound, result.solver)
    assert back.to_dict() == result.to_dict()


def test_mixed_keys_and_unsolved_results_round_trip():
    inst = make_instance(tokens=[3, 3, 4], seq_len=10, data_parallel_size=1, keys=["a", 7, "c"])
    result = packplace.balance(inst, solver="lpt")
    back = SolveResult.from_json(result.to_json())
    assert back.solution == result.solution
    unsolved = SolveResult("balance", "lpt", None, float("inf"), 3.0, "unknown", message="dead end")
    data = unsolved.to_dict()
    assert data["objective"] is None and data["gap"] is None and data["solution"] is None
    again = SolveResult.from_json(unsolved.to_json())
    assert again.objective == float("inf") and again.status == "unknown" and again.message == "dead end"
    stopped = SolveResult("balance", "lpt", None, float("inf"), 3.0, "unknown", interrupted=True)
    assert stopped.to_dict()["interrupted"] is True and stopped.to_dict()["hit_time_limit"] is False
    assert SolveResult.from_json(stopped.to_json()).interrupted is True


def test_placement_result_round_trips_through_json():
    inst = load_placement(ROOT / "configs/placement/dpo_llama3.1-8b_1x8xh100.yaml")
    result = packplace.place(inst, "greedy")
    back = SolveResult.from_json(result.to_json(indent=2))
    assert back.solution == result.solution
    assert back.objective == result.objective and back.info["step_time_s"] == result.info["step_time_s"]


def test_malformed_result_json_is_a_config_error():
    with pytest.raises(ConfigError, match="result: not valid JSON"):
        SolveResult.from_json("{")
    with pytest.raises(ConfigError, match="missing 'status'"):
        SolveResult.from_json('{"problem": "balance"}')
    with pytest.raises(ConfigError, match="assignment: malformed"):
        SolveResult.from_json(json.dumps({"problem": "balance", "status": "feasible", "objective": 1, "bound": 1,
                                          "solution": {"ranks": [[[1]], [[2], [3]]], "local_batch_size": 1}}))


def test_every_result_type_serialises_with_to_dict_and_to_json():
    inst = make_instance([5, 5, 5, 5], costs=[9, 9, 1, 1], seq_len=10, data_parallel_size=2,
                         reference_bins=((0, 1), (2, 3)))
    plan = plan_balance(inst, solver="repair", min_relative_gain=0.02)
    assert json.loads(plan.to_json()) == plan.to_dict()
    assert plan.to_dict()["bins"] == [[[0, 2]], [[1, 3]]]
    report = packplace.compare("balance", [inst], solvers="lpt,repair", jobs=1, progress=False)
    assert json.loads(report.to_json())["solvers"] == ["lpt", "repair"] == report.to_dict()["solvers"]


def test_errors_form_one_hierarchy():
    assert issubclass(ConfigError, PackplaceError) and issubclass(InfeasibleError, PackplaceError)
    assert not issubclass(InfeasibleError, ConfigError) and not issubclass(ConfigError, InfeasibleError)
    with pytest.raises(InfeasibleError, match="18 tokens cannot fit in 2 bins"):
        make_instance([6, 6, 6], seq_len=8, data_parallel_size=2)
    with pytest.raises(ConfigError, match="seq_len"):
        make_instance([6, 6, 6], seq_len=0, data_parallel_size=2)


def test_cli_exit_codes_tell_bad_input_from_infeasible(tmp_path, capsys):
    infeasible = tmp_path / "full.yaml"
    infeasible.write_text("seq_len: 8\ndata_parallel_size: 2\nsamples: {lengths: [6, 6, 6]}\n", encoding="utf-8")
    assert main(["balance", "--config", str(infeasible)]) == 1
    assert capsys.readouterr().err.startswith("packplace balance: infeasible: samples: 18 tokens cannot fit")
    bad = tmp_path / "bad.yaml"
    bad.write_text("seq_len: 0\ndata_parallel_size: 2\nsamples: {lengths: [6, 6, 6]}\n", encoding="utf-8")
    assert main(["balance", "--config", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("packplace balance: error: ")


def test_balance_wall_s_is_the_whole_call(monkeypatch):
    # the reference-bin check before the backend counts in wall_s, as the time limit counts it
    import time as clock

    import packplace.balance.api as balance_api

    real = balance_api.ensure_reference_bins_checked

    def slow_check(instance):
        clock.sleep(0.05)
        return real(instance)

    monkeypatch.setattr(balance_api, "ensure_reference_bins_checked", slow_check)
    result = packplace.balance(make_instance([3, 2, 1], seq_len=10, data_parallel_size=2), solver="lpt")
    assert result.ok and result.wall_s >= 0.05


def test_result_json_claiming_a_solution_without_one_is_refused():
    for status in ("feasible", "optimal"):
        text = json.dumps({"problem": "balance", "status": status, "objective": 15, "bound": 15, "solution": None})
        with pytest.raises(ConfigError, match=f"^result: status '{status}' claims a solution, but solution is null "
                                              r"\(a result without one is 'unknown', 'infeasible' or 'error'\)$"):
            SolveResult.from_json(text)   # had read back as a result whose .ok is True and .solution None
    for status in ("unknown", "infeasible", "error"):
        back = SolveResult.from_json(json.dumps({"problem": "placement", "status": status, "objective": None,
                                                 "bound": None, "solution": None}))
        assert back.status == status and back.solution is None and not back.ok
