"""Shared machinery: YAML loading, the result finalizer, the registry and the front-end checks."""

from __future__ import annotations

import pytest

import packplace
from packplace.balance import make_instance
from packplace.errors import ConfigError
from packplace.result import ERROR, FEASIBLE, OPTIMAL, Proposal, relative_gap
from packplace.run import finalize
from packplace.yamlio import load_yaml, loads_yaml


def test_duplicate_yaml_key_is_an_error_with_its_line():
    with pytest.raises(ConfigError, match=r"duplicate key 'racks' \(line 3\)"):
        loads_yaml("hardware:\n  racks: 1\n  racks: 2\n")


def test_binary_file_is_a_config_error(tmp_path):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_yaml(path)


def _finalize(proposal, objective, bound=0.0):
    return finalize(
        problem="balance", solver="test", proposal=proposal,
        score=lambda solution: (True, objective, "", {}), analytic_bound=bound, params={}, wall_s=0.0,
    )


def test_finalize_withdraws_a_false_optimal_claim():
    result = _finalize(Proposal("x", OPTIMAL, bound=9.0), objective=10.0)
    assert result.status == FEASIBLE and "optimal claim withdrawn" in result.message
    assert result.gap == pytest.approx(0.1)


def test_optimal_only_within_the_reported_tolerance_whatever_the_solver_claims():
    from packplace.result import OPTIMALITY_RTOL
    # a CP-SAT-like claim: objective above the bound by 4.5e-4 relative, within the solver's own tolerance
    scaled = Proposal("x", OPTIMAL, bound=10.0, optimality_tolerance=1e-3)
    result = _finalize(scaled, objective=10.0045)
    assert result.status == FEASIBLE and result.optimality_tolerance == OPTIMALITY_RTOL == 1e-6
    assert "4.50e-04 relative (tolerance 1e-06)" in result.message
    assert result.info["solver_optimal_within"] == 1e-3
    # within the tolerance it is optimal, claimed or not
    assert _finalize(Proposal("x", OPTIMAL, bound=10.0), objective=10.0 * (1 + 0.9e-6)).status == OPTIMAL
    assert _finalize(Proposal("x", FEASIBLE, bound=10.0), objective=10.0 * (1 + 0.9e-6)).status == OPTIMAL
    assert _finalize(Proposal("x", FEASIBLE, bound=10.0), objective=10.0 * (1 + 1.1e-6)).status == FEASIBLE


def test_tiny_costs_are_optimal_only_within_the_relative_tolerance():
    # objectives in cost units may be tiny: 1e-12 of absolute slack must not make them optimal
    assert _finalize(Proposal("x", FEASIBLE, bound=2.9672e-296), objective=2.9678e-296).status == FEASIBLE
    assert _finalize(Proposal("x", OPTIMAL, bound=2.9672e-296), objective=2.9678e-296).status == FEASIBLE
    # a bound above a tiny objective is a false proof, not a rounding
    assert _finalize(Proposal("x", FEASIBLE, bound=3e-296), objective=2e-296).status == ERROR
    # a zero bound (the balance objective's optimum can be 0) takes a rounding residue of 1e-12
    assert _finalize(Proposal("x", FEASIBLE), objective=1e-13, bound=0.0).status == OPTIMAL
    assert _finalize(Proposal("x", FEASIBLE), objective=1e-11, bound=0.0).status == FEASIBLE


def test_lpt_on_costs_scaled_by_a_power_of_two_keeps_its_status():
    tokens = [(37 * i) % 500 + 10 for i in range(400)]
    statuses = set()
    for scale in (1.0, 2.0**-990, 2.0**990):  # exact scalings: the same bins, the same relative gap
        costs = [scale * (t + t * t / 4096) for t in tokens]
        result = packplace.balance(make_instance(tokens, costs, seq_len=65536, data_parallel_size=8), solver="lpt")
        statuses.add((result.status, round(result.gap, 12)))
    assert len(statuses) == 1 and next(iter(statuses))[0] == FEASIBLE


def test_finalize_promotes_only_when_the_bound_proves_it():
    assert _finalize(Proposal("x", FEASIBLE), objective=10.0, bound=10.0).status == OPTIMAL
    # a solver's own looser tolerance does not promote a plain 'feasible'
    loose = Proposal("x", FEASIBLE, bound=9.99, optimality_tolerance=1e-2)
    assert _finalize(loose, objective=10.0).status == FEASIBLE


def test_finalize_rejects_a_bound_above_the_objective_and_a_non_finite_objective():
    assert _finalize(Proposal("x", FEASIBLE, bound=11.0), objective=10.0).status == ERROR
    result = _finalize(Proposal("x", FEASIBLE), objective=float("inf"))
    assert result.status == ERROR and "non-finite objective" in result.message


def test_relative_gap():
    assert relative_gap(10.0, 8.0) == pytest.approx(0.2)
    assert relative_gap(0.0, 0.0) == 0.0
    assert relative_gap(float("inf"), 1.0) == float("inf")


def test_unknown_backend_option_is_a_config_error():
    inst = make_instance([1, 2, 3], seq_len=10, data_parallel_size=2, reference_bins=((0, 1), (2,)))
    with pytest.raises(ConfigError, match="reference: unknown parameter 'foo'"):
        packplace.balance(inst, solver="reference", foo=1)


@pytest.mark.parametrize("limit", [0, -1.0, float("nan"), "10"])
def test_bad_time_limit_is_a_config_error(limit):
    inst = make_instance([1, 2, 3], seq_len=10, data_parallel_size=2)
    with pytest.raises(ConfigError, match="time_limit_s"):
        packplace.balance(inst, solver="lpt", time_limit_s=limit)


def test_registry_lists_both_problems_after_plain_import():
    assert {"reference", "lpt", "repair", "karmarkar_karp", "cpsat"} <= set(packplace.solvers.available("balance"))
    assert {"greedy", "concurrent"} <= set(packplace.solvers.available("placement"))
    assert packplace.solvers.get("balance", "kk").name == "karmarkar_karp"
    with pytest.raises(ConfigError, match="unknown balance solver 'magic'; available: "):
        packplace.solvers.get("balance", "magic")


def test_progress_lines_are_off_in_library_calls_until_switched_on(capsys, monkeypatch):
    from packplace import progress

    monkeypatch.delenv("PACKPLACE_QUIET", raising=False)
    assert not progress.enabled()  # a library call prints nothing by default
    progress.report("anneal: hidden by default")
    with progress.shown():
        progress.report("anneal: visible")
        with progress.quiet():
            progress.report("anneal: hidden")
        with progress.quiet(False):
            progress.report("anneal: still visible")
        monkeypatch.setenv("PACKPLACE_QUIET", "1")
        progress.report("anneal: silenced by the environment")
        monkeypatch.delenv("PACKPLACE_QUIET")
    progress.report("anneal: hidden again")
    err = capsys.readouterr().err
    assert err.splitlines() == ["anneal: visible", "anneal: still visible"]
    assert not progress.enabled()


def test_a_signal_is_reported_as_an_interrupt_not_as_the_time_limit(monkeypatch):
    # CP-SAT stopped by stop_search ends as if at its limit; the front-end knows a signal stopped it
    import signal

    from packplace import interrupt
    from packplace import run as run_module

    real_get = run_module.get

    def fake_get(problem, name):
        spec = real_get(problem, name)

        def solve(instance, run, **params):
            proposal = spec.backend(instance, run, **params)
            interrupt._state.signum = signal.SIGTERM  # what the handler / watcher thread records
            proposal.hit_time_limit = True
            return proposal

        return type(spec)(**{**spec.__dict__, "function": solve, "legacy": False})

    monkeypatch.setattr(interrupt._state, "signum", None)  # restored after the test
    monkeypatch.setattr(run_module, "get", fake_get)
    result = packplace.balance(make_instance([3, 2, 1], seq_len=10, data_parallel_size=2), solver="lpt",
                               time_limit_s=600)
    assert result.interrupted and result.ok
    assert not result.hit_time_limit
    assert "interrupted by SIGTERM" in result.message
