"""The output rule: ``-`` is stdout; a device, FIFO or descriptor is written through, never replaced; no
input the command read (config, hf_config model file, a suite's configs) is overwritten; an existing
file keeps its mode; nothing else in the folder is left behind."""

from __future__ import annotations

import json
import os
import select
import shutil
import stat
import threading
from pathlib import Path

import pytest
from conftest import one_line, run_cli

from packplace import outputs
from packplace.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BALANCE = ROOT / "configs" / "balance" / "two_way_small.yaml"
HF_CONFIG = ROOT / "tests" / "data" / "hf_configs" / "qwen2.5-0.5b.json"


def test_out_symlink_to_dev_null_is_written_through_and_the_link_kept(tmp_path, capsys):
    link = tmp_path / "stdout"
    link.symlink_to("/dev/null")
    code, _, err = run_cli(capsys, "balance", "--config", BALANCE, "--out", link)
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]  # no temporary or probe file left


def test_out_symlink_to_a_descriptor_writes_to_that_descriptor(tmp_path, capsys):
    read_end, write_end = os.pipe()
    try:
        link = tmp_path / "out.json"
        link.symlink_to(f"/proc/self/fd/{write_end}")
        code, _, err = run_cli(capsys, "balance", "--config", BALANCE, "--out", link)
        assert code == 0, err
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as reader:
            read_end = -1
            document = json.loads(reader.read())
        assert document["problem"] == "balance" and document["objective"] == 15
        assert link.is_symlink()
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)


def test_out_fifo_is_written_through_and_stays_a_fifo(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader_open = threading.Event()

    def read() -> None:
        # open without waiting for a writer, so the reader is there before the command writes; select
        # wakes on data and on the writer's close (end of file)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        reader_open.set()
        chunks = []
        try:
            while select.select([fd], [], [], 30)[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
        received.append(b"".join(chunks))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert reader_open.wait(30)
    code, _, err = run_cli(capsys, "balance", "--config", BALANCE, "--out", fifo)
    thread.join(10)
    assert code == 0, err
    assert json.loads(received[0])["objective"] == 15
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_out_fifo_without_reader_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="FIFO with no reader"):
        outputs.write_atomic(str(fifo), "{}", "--out")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dash_is_stdout(capsys):
    code, out, err = run_cli(capsys, "balance", "--config", BALANCE, "--out", "-")
    assert code == 0, err
    document = json.loads(out[out.index("{\n"):])
    assert document["objective"] == 15


def test_socket_and_directory_are_refused(tmp_path):
    import socket

    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(ConfigError, match="socket"):
            outputs.check_output_path(str(path), "--out")
    finally:
        server.close()
    with pytest.raises(ConfigError, match="directory"):
        outputs.check_output_path(str(tmp_path), "--out")
    with pytest.raises(ConfigError, match="report folder cannot be standard output"):
        outputs.check_output_dir("-", "--out")


def test_existing_file_keeps_its_mode(tmp_path, capsys):
    target = tmp_path / "result.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    code, _, err = run_cli(capsys, "balance", "--config", BALANCE, "--out", target)
    assert code == 0, err
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert os.stat(target).st_uid == os.geteuid()
    assert json.loads(target.read_text())["objective"] == 15


def hf_balance_config(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "model.json"
    shutil.copy(HF_CONFIG, model)
    config = tmp_path / "c.yaml"
    text = BALANCE.read_text().replace("cost: {kind: given}", f"cost: {{kind: flops, model: {{hf_config: {model}}}}}")
    text = text.replace(", cost: 8}", "}").replace(", cost: 7}", "}").replace(", cost: 6}", "}")
    text = text.replace(", cost: 5}", "}").replace(", cost: 4}", "}")
    config.write_text(text)
    return config, model


def test_out_over_the_hf_config_model_file_is_refused_naming_both(tmp_path, capsys):
    config, model = hf_balance_config(tmp_path)
    before = model.read_bytes()
    code, _, err = run_cli(capsys, "balance", "--config", config, "--out", model)
    line = one_line(err)
    assert code == 2 and "--out" in line and str(model) in line and "input file" in line
    assert model.read_bytes() == before


def test_out_over_a_placement_hf_config_is_refused(tmp_path, capsys):
    placement = ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml"
    model = tmp_path / "llama.json"
    shutil.copy(ROOT / "tests" / "data" / "hf_configs" / "llama-3.2-1b.json", model)
    text = placement.read_text()
    start = text.index("  actor:")
    end = text.index("workload:")
    text = text[:start] + f"  actor: {{hf_config: {model}}}\n" + text[end:]
    config = tmp_path / "p.yaml"
    config.write_text(text)
    before = model.read_bytes()
    code, _, err = run_cli(capsys, "place", "--config", config, "--solver", "greedy", "--out", model)
    line = one_line(err)
    assert code == 2 and str(model) in line and "input file" in line, err
    assert model.read_bytes() == before


def test_compare_plot_over_a_suite_config_is_refused(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    shutil.copy(BALANCE, config)
    suite = tmp_path / "suite.yaml"
    suite.write_text("problem: balance\ninstances:\n  - config: c.yaml\n")
    before = config.read_bytes()
    code, _, err = run_cli(capsys, "compare", "--problem", "balance", "--suite", suite, "--solvers", "lpt", "--quiet",
                       "--plot", config)
    assert code == 2 and str(config) in one_line(err), err
    assert config.read_bytes() == before


def test_recorded_inputs_are_scoped():
    with outputs.reading_scope():
        outputs.record_input("/x/y.yaml")
        assert outputs.recorded_inputs() == ["/x/y.yaml"]
        with pytest.raises(ConfigError, match="input file '/x/y.yaml'"):
            outputs.check_output_path("/x/y.yaml", "--out")
    assert outputs.recorded_inputs() == []
    outputs.record_input("/x/y.yaml")  # outside a scope: nothing kept
    assert outputs.recorded_inputs() == []
