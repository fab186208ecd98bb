"""Text-level fuzzing of the command line: mutated text of every kind of input file, and special files.

The families (:data:`FAMILIES`): the shipped configs (``balance`` with ``lpt``, ``place`` with ``greedy``,
``--time-limit 2 --quiet``), a Hugging Face ``config.json`` read through ``hf_config:`` (``place``), a
validation file (``validate``), a measured file with its validation config (``calibrate``), a suite
(``compare``) and a baseline (``bench``). Each input runs through :func:`packplace.cli.main` in-process.
The mutations work on the text, not on parsed dicts: truncation,
scalar type swaps, huge numbers (up to 5,000 digits), YAML tags (``!!python/object``, ``!!binary``,
custom), anchors and aliases (undefined, self-referencing, small alias bombs), control characters,
broken indentation, duplicated and deleted lines. Special inputs: a FIFO, ``/dev/null``, ``/dev/zero``,
a directory, a missing path, symbolic links to each, an output path that is the config itself.
JSON inputs get their own mutations (:func:`mutate_json`: a value swapped for a string, a list, a 5,000-digit
integer, a lone surrogate escape; a key deleted; the text cut) and the validation and measured files
hostile values under their keys (:func:`mutate_mapping`).
Asserted for every input: no exception leaves ``main`` (no traceback); an exit code of 0, 1 or 2; exit 2
with exactly one ``packplace <command>: error: ...`` line on stderr; the run ends within
:data:`HANG_BOUND_S` (a hang is counted, not waited for); the input file is never changed,
``/dev/null`` stays a character device, and what was printed is valid UTF-8 (a terminal's encoding).
``benchmarks/fuzz_sweep.py`` runs the sweep at scale in worker processes (memory, files touched).
The default run takes :data:`DEFAULT_SAMPLE` inputs; the
``slow`` sweep takes :data:`SWEEP_SIZE` and prints the counts.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import os
import random
import re
import signal
import stat
from pathlib import Path

import pytest

from packplace.cli import main

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "configs" / "balance").glob("*.yaml")) + sorted(
    (ROOT / "configs" / "placement").glob("*.yaml"))
#: Seconds after which one input counts as a hang (the alarm stops it).
HANG_BOUND_S = 30
DEFAULT_SAMPLE = 40
SWEEP_SIZE = 5000
ERROR_LINE = re.compile(r"^packplace (balance|place|validate|calibrate|compare|bench): error: ")

SWAPS = ["[]", "{}", "null", "~", "true", "no", "'text'", '"x\\u0000y"', "1e400", "-1", "0", "-0", ".nan", ".inf",
         "-.inf", "0x7fffffff", "0o17", "1_000", "12:30:00", "2001-12-14", "3.5", "[1, [2, [3]]]", "{a: {b: c}}",
         "!!str 5", "''", "' '", "|\n  block", ">-\n  folded", "? complex\n: key"]
TAGS = ["!!python/object:os.system", "!!python/name:os.system", "!!binary", "!custom", "!!timestamp", "!!set",
        "!!omap", "!!float", "!!int", "!<tag:yaml.org,2002:str>", "!!map", "!!seq"]
CONTROL = ["\x00", "\x01", "\x07", "\x08", "\x0b", "\x0c", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\ufeff", "\r",
           "\t", "\ud7ff", "\U0001f600", "\xa0"]
NUMBER = re.compile(r"(?<![\w.])\d+(\.\d+)?(?![\w.])")
SCALAR = re.compile(r"(:\s+)([^\s#{}\[\],][^#\n]*?)(\s*(#.*)?)$", re.M)


class Hang(BaseException):
    """Raised by the alarm when one input runs past :data:`HANG_BOUND_S`."""


def _mutate_once(text: str, rng: random.Random) -> str:
    kind = rng.choice(["truncate", "swap", "huge", "tag", "anchor", "control", "indent", "lines", "bomb", "dup_key"])
    lines = text.splitlines(keepends=True) or [""]
    if kind == "truncate":
        return text[: rng.randrange(len(text) + 1)]
    if kind == "swap":
        spots = list(SCALAR.finditer(text))
        if spots:
            m = rng.choice(spots)
            return text[: m.start(2)] + rng.choice(SWAPS) + text[m.end(2):]
    if kind == "huge":
        spots = list(NUMBER.finditer(text))
        if spots:
            m = rng.choice(spots)
            digits = rng.choice([20, 40, 310, 400, 4301, 5000])
            value = rng.choice(["9" * digits, "-" + "9" * digits, "1e" + "9" * min(digits, 12),
                                "0." + "0" * digits + "1"])
            return text[: m.start()] + value + text[m.end():]
    if kind == "tag":
        spots = list(SCALAR.finditer(text))
        if spots:
            m = rng.choice(spots)
            return text[: m.start(2)] + rng.choice(TAGS) + " " + text[m.start(2):]
    if kind == "anchor":
        spots = list(SCALAR.finditer(text))
        if len(spots) >= 2:
            a, b = sorted(rng.sample(spots, 2), key=lambda m: m.start())
            alias = rng.choice(["*x", "*undefined", "*x"])
            return (text[: a.start(2)] + "&x " + text[a.start(2): b.start(2)] + alias + text[b.end(2):])
    if kind == "control":
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(CONTROL) * rng.choice([1, 1, 3, 100]) + text[at:]
    if kind == "indent":
        i = rng.randrange(len(lines))
        lines[i] = rng.choice([" ", "   ", "\t", ""]) + lines[i].lstrip(" ") if rng.random() < 0.5 else " " + lines[i]
        return "".join(lines)
    if kind == "lines":
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            del lines[i]
        else:
            lines.insert(i, lines[i])
        return "".join(lines)
    if kind == "bomb":
        bomb = "".join(f"b{k}: &b{k} [{', '.join([f'*b{k - 1}'] * 9)}]\n" if k else "b0: &b0 [lol]\n"
                       for k in range(rng.choice([3, 6, 9])))
        return bomb + text if rng.random() < 0.5 else text + "\n" + bomb
    if kind == "dup_key":
        keys = re.findall(r"^(\w+):", text, re.M)
        if keys:
            return text + f"\n{rng.choice(keys)}: {rng.choice(SWAPS)}\n"
    return text + rng.choice(["\n---\nsecond: document\n", "\n...\n", "\n%YAML 1.1\n", "\n@reserved\n", "\n`x`\n"])


def mutate(text: str, rng: random.Random) -> str:
    """One to three random text mutations of ``text``."""
    for _ in range(rng.choice([1, 1, 2, 3])):
        text = _mutate_once(text, rng)
    return text


SPECIALS = ["fifo", "dev_null", "dev_zero", "directory", "missing", "link_fifo", "link_zero", "link_missing",
            "empty", "bad_utf8", "utf16", "out_is_config", "out_dev_null"]

HF_CONFIGS = sorted((ROOT / "tests" / "data" / "hf_configs").glob("*.json"))
VALIDATION = sorted((ROOT / "benchmarks" / "validation").glob("*.yaml"))
CALIBRATION_CONFIG = ROOT / "benchmarks" / "validation" / "qwen2.5-7b_vllm_batch1_1xa100.yaml"
MEASURED = sorted((ROOT / "benchmarks" / "calibration").glob("*.measured.yaml"))
SMOKE_SUITE = ROOT / "benchmarks" / "suites" / "smoke.yaml"
#: The placement config whose actor is read from a mutated ``config.json`` (family ``hf_config``).
HF_PLACEMENT = re.sub(r"(?ms)^  actor:.*?(?=^workload:)", "  actor:\n    hf_config: model.json\n",
                      (ROOT / "configs" / "placement" / "dpo_llama3.1-8b_1x8xh100.yaml").read_text(encoding="utf-8"))
#: A two-instance balance suite (family ``baseline``: ``bench`` against a mutated baseline written for it).
TINY_SUITE = """name: tiny
problem: balance
time_limit_s: 1
seed: 0
solvers: [lpt, karmarkar_karp]
instances:
  - name: uniform-n6-D2
    generator: uniform
    params: {n: 6, ranks: 2, seq_len: 8192, low: 100, high: 2000}
    seeds: [7]
  - name: lognormal-n8-D2
    generator: lognormal
    params: {n: 8, ranks: 2, seq_len: 4096}
    seeds: [7]
"""
#: Families of inputs and their shares of the sweep: the shipped configs (``config``), a Hugging Face
#: ``config.json`` read by a placement config, a validation file (``validate``), a measured file and its
#: validation config (``calibrate``), a suite (``compare``) and a baseline (``bench``).
FAMILIES = {"config": 0.55, "hf_config": 0.12, "validation": 0.1, "measured": 0.1, "suite": 0.08, "baseline": 0.05}
JSON_SWAPS = ['"text"', "[]", "{}", "null", "true", "false", "-1", "0", "0.5", "1e400", "-1e400", "9" * 5000,
              "-" + "9" * 400, '"\\ud800"', '"\\u0000"', "[[1]]", '{"a": 1}', "16777217", "1.5", "[1, 2]"]
#: Values the mutations put in a YAML mapping of the validation and measured files (hostile shapes).
HOSTILE_VALUES = ["{actor: 0.5}", "[[generation]]", "{true: 1}", "{1: 2}", "{dp: 2}", "1048576", "0.5", "[]",
                  "{actor.generate: {dp: 2}}", "{generation: [[x]]}", "{? [a]: 1}"]


def mutate_json(text: str, rng: random.Random) -> str:
    """One to three mutations of a JSON object's text: a value swapped for a hostile one (a string, a list,
    a 5,000-digit integer, a lone surrogate, ...), a key deleted or made boolean-like, or the text cut."""
    import json  # noqa: PLC0415 - only the JSON families need it

    for _ in range(rng.choice([1, 1, 2, 3])):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        kind = rng.choice(["swap", "swap", "swap", "delete", "truncate", "text"]) if isinstance(data, dict) else "text"
        if kind in ("swap", "delete") and isinstance(data, dict) and data:
            holder = data
            if rng.random() < 0.3:  # one level down (a result row of a baseline, a text_config)
                inner = [v for v in data.values() if isinstance(v, dict) and v]
                holder = rng.choice(inner) if inner else data
            key = rng.choice(list(holder))
            if kind == "delete":
                del holder[key]
                text = json.dumps(data, indent=1)
            else:
                holder[key] = "@@SWAP@@"
                text = json.dumps(data, indent=1).replace('"@@SWAP@@"', rng.choice(JSON_SWAPS))
        elif kind == "truncate":
            text = text[: rng.randrange(len(text) + 1)]
        else:
            text = _mutate_once(text, rng)
    return text


def mutate_mapping(text: str, rng: random.Random) -> str:
    """:func:`mutate`, or a hostile value put under one of the YAML keys of ``text`` (half each)."""
    if rng.random() < 0.5:
        return mutate(text, rng)
    spots = list(SCALAR.finditer(text)) + list(re.finditer(r"(:\s*)(\{[^\n]*\}|\[[^\n]*\])()$", text, re.M))
    if not spots:
        return mutate(text, rng)
    m = rng.choice(spots)
    return text[: m.start(2)] + rng.choice(HOSTILE_VALUES + SWAPS) + text[m.end(2):]


def make_case(index: int, seed: int = 0) -> dict:
    """Input ``index`` of the sweep: its family, command, source file, the input text (or special kind) and
    the texts of the files it reads besides (``extra``: name -> text)."""
    rng = random.Random(f"{seed}:{index}")
    family = rng.choices(list(FAMILIES), weights=list(FAMILIES.values()))[0]
    special = rng.choice(SPECIALS) if rng.random() < 0.1 else None
    case = {"index": index, "family": family, "special": special, "extra": {}}
    if family == "config":
        source = rng.choice(SHIPPED)
        case["command"] = "balance" if source.parent.name == "balance" else "place"
        text = source.read_text(encoding="utf-8")
        mutated = lambda: mutate(text, rng)  # noqa: E731
    elif family == "hf_config":
        source = rng.choice(HF_CONFIGS)
        case["command"] = "place"
        text = source.read_text(encoding="utf-8")
        mutated = lambda: mutate_json(text, rng)  # noqa: E731
    elif family == "validation":
        source = rng.choice(VALIDATION)
        case["command"] = "validate"
        text = source.read_text(encoding="utf-8")
        mutated = lambda: mutate_mapping(text, rng)  # noqa: E731
    elif family == "measured":
        source = rng.choice(MEASURED)
        case["command"] = "calibrate"
        text = source.read_text(encoding="utf-8")
        mutated = lambda: mutate_mapping(text, rng)  # noqa: E731
        config_text = CALIBRATION_CONFIG.read_text(encoding="utf-8")
        case["extra"]["validation.yaml"] = mutate_mapping(config_text, rng) if rng.random() < 0.3 else config_text
    elif family == "suite":
        source = SMOKE_SUITE
        case["command"] = "compare"
        text = source.read_text(encoding="utf-8")
        mutated = lambda: mutate_mapping(text, rng)  # noqa: E731
    else:
        source = SMOKE_SUITE
        case["command"] = "bench"
        text = _tiny_baseline()
        mutated = lambda: mutate_json(text, rng)  # noqa: E731
        case["extra"]["suite.yaml"] = TINY_SUITE
    case["source"] = source.name
    case["text"] = "" if special not in ("out_is_config", "out_dev_null", None) else mutated()
    return case


_BASELINE: list[str] = []


def _tiny_baseline() -> str:
    """The baseline ``bench --update`` writes for :data:`TINY_SUITE` (computed once per process)."""
    if not _BASELINE:
        import tempfile  # noqa: PLC0415 - only the baseline family needs it

        with tempfile.TemporaryDirectory() as folder:
            suite = Path(folder) / "suite.yaml"
            suite.write_text(TINY_SUITE, encoding="utf-8")
            baseline = Path(folder) / "baseline.json"
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                main(["bench", "--suite", str(suite), "--baseline", str(baseline), "--update", "--quiet"])
            _BASELINE.append(baseline.read_text(encoding="utf-8"))
    return _BASELINE[0]


#: The file name each family's mutated input gets (a placement config reads ``model.json`` beside it).
INPUT_NAME = {"config": "config.yaml", "hf_config": "model.json", "validation": "validation.yaml",
              "measured": "measured.yaml", "suite": "suite.yaml", "baseline": "baseline.json"}


def _prepare(case: dict, folder: Path) -> tuple[str, str]:
    """Create the case's input path in ``folder`` (and the files it reads besides); returns (input path,
    output path)."""
    family = case.get("family", "config")
    config = folder / INPUT_NAME[family]
    out = str(folder / ("report" if family == "suite" else "out.json"))
    for name, text in case.get("extra", {}).items():
        (folder / name).write_bytes(text.encode("utf-8", "surrogatepass"))
    if family == "hf_config":
        (folder / "config.yaml").write_text(HF_PLACEMENT, encoding="utf-8")
    special = case["special"]
    if special == "fifo":
        os.mkfifo(config)
    elif special in ("dev_null", "dev_zero"):
        config = Path("/dev/null" if special == "dev_null" else "/dev/zero")
    elif special == "directory":
        config.mkdir()
    elif special == "missing":
        pass
    elif special and special.startswith("link_"):
        target = {"link_fifo": folder / "fifo", "link_zero": Path("/dev/zero"),
                  "link_missing": folder / "nothing"}[special]
        if special == "link_fifo":
            os.mkfifo(target)
        os.symlink(target, config)
    elif special == "empty":
        config.write_bytes(b"")
    elif special == "bad_utf8":
        config.write_bytes(b"name: \xff\xfe\x80 bad\nseq_len: 100\n")
    elif special == "utf16":
        config.write_bytes("name: x\n".encode("utf-16"))
    else:
        config.write_bytes(case["text"].encode("utf-8", "surrogatepass"))
        if special == "out_is_config":
            out = str(config)
        elif special == "out_dev_null":
            out = "/dev/null"
    return str(config), out


def argv_of(case: dict, config: str, out: str, folder: Path) -> list[str]:
    """The command line of one case (short limits, ``--quiet``)."""
    family = case.get("family", "config")
    if family == "config":
        solver = "lpt" if case["command"] == "balance" else "greedy"
        return [case["command"], "--config", config, "--solver", solver, "--time-limit", "2", "--quiet", "--out", out]
    if family == "hf_config":
        return ["place", "--config", str(folder / "config.yaml"), "--solver", "greedy", "--time-limit", "2",
                "--quiet", "--out", out]
    if family == "validation":
        return ["validate", config, "--quiet"]
    if family == "measured":
        return ["calibrate", "--config", str(folder / "validation.yaml"), "--measured", config, "--quiet"]
    if family == "suite":
        return ["compare", "--problem", "balance", "--suite", config, "--time-limit", "0.2", "--jobs", "1",
                "--quiet", "--out", out]
    return ["bench", "--suite", str(folder / "suite.yaml"), "--baseline", config, "--jobs", "1", "--quiet"]


def _alarm(signum, frame):
    raise Hang()


def run_case(case: dict, folder: Path) -> dict:
    """Run one input through ``main``; the outcome with the checks' verdicts."""
    config, out = _prepare(case, folder)
    regular = os.path.isfile(config) and not os.path.islink(config)
    before = hashlib.sha256(Path(config).read_bytes()).hexdigest() if regular else None
    argv = argv_of(case, config, out, folder)
    stdout, stderr = io.StringIO(), io.StringIO()
    outcome = {"index": case["index"], "source": case["source"], "special": case["special"], "code": None,
               "traceback": None, "hang": False}
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_BOUND_S)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            outcome["code"] = main(argv)
    except Hang:
        outcome["hang"] = True
    except BaseException as exc:  # noqa: BLE001 - every escape is what the sweep counts
        outcome["traceback"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    err_lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
    outcome["stderr"] = err_lines
    outcome["one_line"] = outcome["code"] != 2 or (len(err_lines) == 1 and bool(ERROR_LINE.match(err_lines[0])))
    outcome["bad_code"] = outcome["code"] not in (0, 1, 2) and not outcome["hang"] and not outcome["traceback"]
    outcome["input_changed"] = regular and hashlib.sha256(Path(config).read_bytes()).hexdigest() != before
    outcome["dev_null_ok"] = stat.S_ISCHR(os.stat("/dev/null").st_mode)
    try:  # a terminal or a pipe takes UTF-8: a lone surrogate in the output would crash the real print
        (stdout.getvalue() + stderr.getvalue()).encode("utf-8")
        outcome["encodable"] = True
    except UnicodeEncodeError:
        outcome["encodable"] = False
    return outcome


def problems(outcome: dict) -> list[str]:
    """The checks one outcome fails (empty: it passed)."""
    found = []
    if outcome["traceback"]:
        found.append(f"traceback {outcome['traceback']}")
    if outcome["hang"]:
        found.append("hang")
    if outcome["bad_code"]:
        found.append(f"exit {outcome['code']}")
    if not outcome["one_line"]:
        found.append(f"exit 2 without one error line: {outcome['stderr'][:3]}")
    if outcome["input_changed"]:
        found.append("input overwritten")
    if not outcome["dev_null_ok"]:
        found.append("/dev/null replaced")
    if not outcome.get("encodable", True):
        found.append("unencodable output (a lone surrogate)")
    return found


@pytest.mark.parametrize("index", range(DEFAULT_SAMPLE))
def test_a_mutated_or_special_input_is_an_answer_or_one_error_line(index, tmp_path):
    case = make_case(index)
    outcome = run_case(case, tmp_path)
    assert not problems(outcome), (case["source"], case["special"], case["text"][:300], outcome)


@pytest.mark.parametrize("special", SPECIALS)
def test_every_special_input(special, tmp_path):
    first = next(i for i in range(100) if make_case(i)["family"] == "config")
    case = {**make_case(first), "special": special}
    if special not in ("out_is_config", "out_dev_null"):
        case["text"] = ""
    outcome = run_case(case, tmp_path)
    assert not problems(outcome), outcome
    if special not in ("out_is_config", "out_dev_null"):
        assert outcome["code"] == 2, outcome


@pytest.mark.slow
def test_sweep_of_5000_text_inputs(tmp_path):
    counts: collections.Counter = collections.Counter()
    failures = []
    for index in range(SWEEP_SIZE):
        folder = tmp_path / str(index)
        folder.mkdir()
        outcome = run_case(make_case(index, seed=1), folder)
        counts[f"exit {outcome['code']}"] += 1
        found = problems(outcome)
        for problem in found:
            counts[problem.split(" ")[0]] += 1
        if found:
            failures.append((index, outcome["source"], outcome["special"], found))
    print(f"\ntext fuzz sweep: {SWEEP_SIZE} inputs; " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    assert not failures, failures[:20]


@pytest.mark.parametrize("value", ["!!set [a, b]", "!!timestamp nope", "!!null 3", "!!str [1]", "!!omap {a: 1}"])
def test_a_tag_on_a_value_it_cannot_take_is_one_error_line(value, tmp_path, capsys):
    # found by the sweep: PyYAML's constructors raise TypeError/AttributeError/KeyError on these
    config = tmp_path / "config.yaml"
    config.write_text(f"seq_len: {value}\n", encoding="utf-8")
    assert main(["balance", "--config", str(config), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ERROR_LINE.match(err[0]), err


def test_a_huge_seq_len_with_a_padding_cost_allocates_no_table_of_that_size(tmp_path, capsys):
    # found by the sweep: lpt tabulated pad(k) for every k <= seq_len in one array (16 GiB at 2^31 - 1)
    text = (ROOT / "configs" / "balance" / "multimodal_budgets.yaml").read_text(encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(re.sub(r"seq_len: \d+", "seq_len: 0x7fffffff", text), encoding="utf-8")
    assert main(["balance", "--config", str(config), "--solver", "lpt", "--time-limit", "2", "--quiet"]) == 0
    assert "feasible" in capsys.readouterr().out
