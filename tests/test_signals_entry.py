"""Ctrl-C at any moment of the console script, imports included: exit 130 (SIGTERM 143), at most one
line on stderr, never a traceback."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "balance" / "stdlib_llama8b.yaml"
SCRIPT = Path(sys.executable).parent / "packplace"


def test_the_console_script_is_the_early_handler_module():
    assert 'packplace = "packplace_console:main"' in (ROOT / "pyproject.toml").read_text()
    if SCRIPT.exists():
        assert "from packplace_console import main" in SCRIPT.read_text()


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed next to this python")
@pytest.mark.parametrize(("seed", "signum"), [(k, signal.SIGINT) for k in range(6)] + [(6, signal.SIGTERM)])
def test_a_signal_at_a_random_moment_exits_cleanly(tmp_path, seed, signum):
    delay = random.Random(seed).uniform(0.15, 1.5)  # mostly inside the imports (about a second)
    proc = subprocess.Popen([str(SCRIPT), "balance", "--config", str(CONFIG), "--solver", "lpt"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # finished before the signal (a fast machine): nothing to check
        return
    assert proc.returncode == 128 + signum, (delay, err)
    assert "Traceback" not in err and "Error" not in err, err
    assert len(err.strip().splitlines()) <= 1, err


def test_handlers_from_the_module_import_and_ignored_once_the_command_has_finished():
    # Ctrl-C while the rest of the entry module loads (typing took 40 ms) is handled; a signal while the
    # interpreter shuts down after the command cannot turn its exit code 0 into death by SIGINT
    small = ROOT / "configs" / "balance" / "two_way_small.yaml"
    code = ("import signal, sys, packplace_console as c\n"
            "assert signal.getsignal(signal.SIGINT) is c._stop_early, 'not on import'\n"
            f"sys.argv = ['packplace', 'balance', '--config', {str(small)!r}, '--quiet']\n"
            "rc = c.main()\n"
            "print(rc, *(signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 True True"


def test_an_error_a_received_signal_caused_is_the_interruption(monkeypatch, capfd):
    # a signal inside a lazy import's initialisation surfaces as "ImportError: initialization failed";
    # once packplace.interrupt has recorded the signal, the console script exits 128 + 2 with one line
    import importlib

    import packplace_console

    # the modules the console script reads (sys.modules), whatever other tests in this process imported
    cli = importlib.import_module("packplace.cli")
    interrupt = importlib.import_module("packplace.interrupt")

    def broken_by_a_signal(**_: object) -> int:
        monkeypatch.setattr(interrupt._state, "signum", signal.SIGINT)
        raise ImportError("initialization failed")

    monkeypatch.setattr(cli, "main", broken_by_a_signal)
    # no --json document from an earlier in-process command (cli.main clears it; the stand-in does not)
    monkeypatch.setattr(cli, "_written", [])
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert packplace_console.main() == 130
        assert capfd.readouterr().err == "packplace: interrupted by SIGINT\n"
        # without a received signal the error is the error
        monkeypatch.setattr(interrupt._state, "signum", None)
        monkeypatch.setattr(cli, "main", lambda **_: (_ for _ in ()).throw(ImportError("real")))
        with pytest.raises(ImportError, match="real"):
            packplace_console.main()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _early(code: str, *argv: str) -> subprocess.CompletedProcess:
    """Run ``code`` after the console module's import with ``sys.argv`` set to ``argv``."""
    prelude = f"import os, signal, sys\nsys.argv = {['packplace', *argv]!r}\nimport packplace_console as c\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_the_command_line_loads_prints_the_json_error_document(signum):
    import json

    done = _early(f"os.kill(os.getpid(), {int(signum)})\nimport time\ntime.sleep(5)",
                  "balance", "--config", str(CONFIG), "--json")
    assert done.returncode == 128 + signum
    assert json.loads(done.stdout) == {"command": "balance", "error": {
        "type": "Interrupted", "message": f"interrupted by {signal.Signals(signum).name}"}, "exit_code": 128 + signum}
    assert done.stderr == f"packplace: interrupted by {signal.Signals(signum).name}\n"


def test_without_json_an_early_signal_prints_nothing_on_stdout():
    done = _early("os.kill(os.getpid(), signal.SIGINT)\nimport time\ntime.sleep(5)", "balance", "--config",
                  str(CONFIG))
    assert done.returncode == 130 and done.stdout == ""


def test_a_signal_around_the_command_prints_the_json_error_document(monkeypatch, capsys):
    import json

    import packplace.cli as cli
    from packplace import interrupt

    def interrupted_scope():
        raise interrupt.Interrupted(signal.SIGTERM)

    monkeypatch.setattr(cli.outputs, "reading_scope", interrupted_scope)
    assert cli.main(["balance", "--config", str(CONFIG), "--json"]) == 143
    document = json.loads(capsys.readouterr().out)
    assert document == {"command": "balance", "error": {"type": "Interrupted", "message": "interrupted by SIGTERM"},
                        "exit_code": 143}
    assert cli.json_document_written() == 143


def test_ctrl_c_while_the_modules_load_with_json_prints_the_error_document(monkeypatch, capsys):
    import json

    import packplace.cli as cli

    def interrupted_while_loading(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted_while_loading)
    assert cli.main(["place", "--config", "x.yaml", "--json"]) == 130
    assert json.loads(capsys.readouterr().out)["error"]["message"] == "interrupted by SIGINT"


def test_the_console_adds_no_second_document_once_the_command_wrote_its_own():
    import json

    small = ROOT / "configs" / "balance" / "two_way_small.yaml"
    # the command finishes and prints its document; a signal raised afterwards inside main (as a held
    # signal is, once the document is out) keeps the command's exit code and adds nothing
    code = ("import packplace.cli as cli\n"
            "run = cli.main\n"
            "def main_then_signal(argv=None, **kwargs):\n"
            "    code = run(argv, **kwargs)\n"
            "    from packplace import interrupt\n"
            "    interrupt._state.signum = signal.SIGINT\n"
            "    raise interrupt.Interrupted(signal.SIGINT)\n"
            "cli.main = main_then_signal\n"
            "print('exit', c.main(), file=sys.stderr)\n")
    done = _early(code, "balance", "--config", str(small), "--quiet", "--json")
    assert json.loads(done.stdout)["status"] in ("optimal", "feasible")
    assert done.stderr.strip().splitlines()[-1] == "exit 0"
