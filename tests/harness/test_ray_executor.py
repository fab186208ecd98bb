"""compare --executor ray: the instances run as Ray tasks on a local Ray (2 CPUs) and the report is the
serial one, error cells included (only wall times differ)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from packplace.cli import main
from packplace.errors import ConfigError
from packplace.harness.comparison import compare
from packplace.yamlio import load_yaml

ROOT = Path(__file__).resolve().parents[2]

# Under pytest-xdist these tests run on one worker, one after another (--dist loadgroup): two workers starting
# a local Ray each at once would race for ports and /tmp/ray's session folder, on 2 CPUs each.
pytestmark = pytest.mark.xdist_group("ray")


def _smoke_with_a_broken_instance() -> dict:
    suite = dict(load_yaml(ROOT / "benchmarks/suites/smoke.yaml"))
    # 4 samples of 90-100 tokens cannot fit in one bin of 100: the instance fails to build in the worker -> error
    # cells (fewer samples than bins is refused when the suite is read)
    suite["instances"] = [*suite["instances"], {"name": "too-many-tokens", "generator": "uniform",
                                                "params": {"n": 4, "ranks": 1, "seq_len": 100, "low": 90,
                                                           "high": 100}, "seeds": [1]}]
    return suite


def test_ray_report_equals_the_serial_report_with_the_same_error_cells():
    pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]' (CI installs it)")
    suite = _smoke_with_a_broken_instance()
    # the same report on a quiet or a loaded machine (the tests run beside each other): a time limit no loaded
    # machine reaches (cpsat ends on its proofs of optimality) and lns's work budget of the smoke suite's 5 s
    # given as a count, so that no cell is cut by the wall clock in one run and not in the other
    suite.update(time_limit_s=600, solver_params={"lns": {"max_neighbourhoods": 12}})
    serial = compare("balance", suite, jobs=1, progress=False)
    on_ray = compare("balance", suite, jobs=2, progress=False, executor="ray")
    assert on_ray.settings["executor"] == "ray" and serial.settings["executor"] == "process"
    assert on_ray.to_json(timings=False) == serial.to_json(timings=False)
    broken = on_ray.rows[-1]
    assert {c.status for c in broken.cells.values()} <= {"error", "skipped"}
    assert "error" in {c.status for c in broken.cells.values()}
    message = next(c.message for c in broken.cells.values() if c.status == "error")
    assert "cannot fit in 1 bins of seq_len 100" in message
    assert all(c.status != "error" for row in on_ray.rows[:-1] for c in row.cells.values())


def test_ray_from_the_command_line_exits_1_on_the_error_cells(tmp_path, capsys):
    pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]' (CI installs it)")
    path = tmp_path / "suite.yaml"
    path.write_text(json.dumps(_smoke_with_a_broken_instance()), encoding="utf-8")  # JSON is YAML
    code = main(["compare", "--problem", "balance", "--suite", str(path), "--executor", "ray", "--jobs", "2",
                 "--solvers", "lpt,repair", "--quiet", "--json"])
    captured = capsys.readouterr()
    assert code == 1 and "2 cell(s) ended in error (first: lpt on too-many-tokens-s1" in captured.err
    assert json.loads(captured.out)["settings"]["executor"] == "ray"


def test_executor_and_address_are_checked_before_running():
    with pytest.raises(ConfigError, match="executor: must be one of process, ray, got 'dask'"):
        compare("balance", "smoke", executor="dask", progress=False)
    with pytest.raises(ConfigError, match="address: a cluster address needs executor 'ray'"):
        compare("balance", "smoke", address="auto", progress=False)


class _RayThatMustNotConnect:
    """A stand-in ``ray`` module: nothing joined yet, and ``init`` (which retries an unreachable GCS for
    minutes) must never run for an address the probe refuses."""

    def __init__(self):
        self.inits = 0

    def is_initialized(self):
        return False

    def init(self, *args, **kwargs):
        self.inits += 1
        raise AssertionError("ray.init ran for an unreachable address")


def _unreachable(monkeypatch):
    """Every TCP connect fails as a host that drops packets does (no real network, no waiting)."""
    from packplace.harness import executors
    tried = []

    def refuse(target, timeout=None):
        tried.append((target, timeout))
        raise TimeoutError("timed out")

    monkeypatch.setattr(executors.socket, "create_connection", refuse)
    fake = _RayThatMustNotConnect()
    monkeypatch.setitem(sys.modules, "ray", fake)
    return tried, fake


def test_an_unreachable_address_is_refused_before_ray_init(monkeypatch, capsys):
    from packplace.harness.executors import RAY_PROBE_TIMEOUT_S
    tried, fake = _unreachable(monkeypatch)
    with pytest.raises(ConfigError, match=r"^address: cannot start or reach Ray at 10\.255\.255\.1:6379: no TCP "
                                          r"connection within 10 s \(TimeoutError: timed out\)$"):
        compare("balance", "smoke", executor="ray", address="10.255.255.1:6379", progress=False)
    assert tried == [(("10.255.255.1", 6379), RAY_PROBE_TIMEOUT_S)] and fake.inits == 0
    code = main(["compare", "--problem", "balance", "--suite", "smoke", "--executor", "ray", "--address",
                 "ray://head.invalid:10001", "--solvers", "repair", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and out["exit_code"] == 2 and out["error"]["type"] == "ConfigError"
    assert out["error"]["message"].startswith("address: cannot start or reach Ray at ray://head.invalid:10001: ")
    assert tried[-1] == (("head.invalid", 10001), RAY_PROBE_TIMEOUT_S) and fake.inits == 0


def test_addresses_ray_resolves_itself_are_not_probed(monkeypatch):
    from packplace.harness.executors import probe_ray_address
    tried, _ = _unreachable(monkeypatch)
    for address in (None, "auto", "local"):
        probe_ray_address(address)
    assert tried == []
