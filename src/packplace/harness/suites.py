"""Benchmark suites: YAML lists of instances (config files or seeded generators) for one problem.

:func:`load_suite` reads a suite (its docstring shows the file format) into a :class:`Suite` of
:class:`InstanceSpec` entries: a config file as is, a config file with ``overrides`` (placement), an
inline config (placement), or a seeded generator of :mod:`packplace.harness.generators` (balance),
expanded over ``seeds``. A suite sets defaults for the comparison (time limit, seed, solvers and
their options, the size above which exact solvers are skipped: :data:`SIZE_LIMIT_KEYS`).
:func:`find_suite` finds shipped suites by name (``packplace compare --suite smoke``).

Every field error is a :class:`~packplace.errors.ConfigError` naming the suite, the entry and the
field (``suite.yaml: instances[3].generator: unknown 'zipf'; valid: ...``).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packplace.balance import config as balance_config
from packplace.contract import check_count, key_shown
from packplace.errors import ConfigError, show
from packplace.outputs import record_input
from packplace.registry import aliases, available
from packplace.yamlio import load_yaml

PROBLEMS = ("balance", "placement", "context_parallel")
#: Per problem, the suite key that caps the instance size for exact solvers (alias of ``max_exact_size``):
#: samples for balance, GPUs for placement, sequences for context_parallel. The adapters of
#: :mod:`packplace.harness.adapters` read it.
SIZE_LIMIT_KEYS = {"balance": "max_exact_samples", "placement": "max_exact_gpus",
                   "context_parallel": "max_exact_sequences"}
BALANCE_GENERATORS = ("uniform", "lognormal", "bimodal", "planted", "corpus")
PLACEMENT_GENERATORS = ()
#: Dynamic context parallelism: the length distributions of
#: :func:`~packplace.harness.generators.generate_context_parallel`.
CONTEXT_PARALLEL_GENERATORS = ("uniform", "lognormal", "bimodal")
GENERATORS = {"balance": BALANCE_GENERATORS, "placement": PLACEMENT_GENERATORS,
              "context_parallel": CONTEXT_PARALLEL_GENERATORS}
#: Most seeds one entry expands over (``seeds: N`` or a list), and most instances in a suite.
MAX_SEEDS = 1_000
MAX_INSTANCES = 10_000
#: Caps on the sizes a generator entry asks for (``params``), checked when the suite is read: samples,
#: ranks and bins (ranks x bins_per_rank) as in a balance config.
GENERATOR_LIMITS = {"n": balance_config.MAX_SAMPLES, "ranks": balance_config.MAX_RANKS,
                    "bins": balance_config.MAX_SAMPLES}
_SUITE_KEYS = {"name", "problem", "description", "time_limit_s", "seed", "solvers", "solver_params",
               "max_exact_size", "max_exact_samples", "max_exact_gpus", "max_exact_sequences", "instances"}
_ENTRY_KEYS = {"name", "generator", "params", "seeds", "solvers", "config", "overrides", "inline", "subsample"}


@dataclass(frozen=True)
class InstanceSpec:
    """How to build one instance of a suite (picklable: it is sent to worker processes).

    Attributes:
        index: Position in the suite (reports keep this order).
        name: Unique label within the suite.
        kind: ``generator``, ``config`` or ``inline``, or ``object`` for an instance passed in directly.
        generator: Generator name (kind ``generator``).
        params: Generator parameters, with ``seed`` filled in from ``seeds:`` expansion.
        config: Absolute path of a config file (kind ``config``).
        overrides: Fields replacing the config's (placement), or the whole config (kind ``inline``).
        solvers: Allow-list of solver names for this instance (``None``: every requested solver).
        instance: The instance object itself (kind ``object``).
    """

    index: int
    name: str
    kind: str
    generator: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    config: str | None = None
    overrides: Mapping[str, Any] | None = None
    solvers: tuple[str, ...] | None = None
    instance: Any = None


@dataclass(frozen=True)
class Suite:
    """A parsed suite (the file format: :func:`load_suite`).

    Attributes:
        name, problem, description: Labels; ``problem`` is ``balance``, ``placement`` or ``context_parallel``.
        instances: The expanded instance specs, in file order.
        time_limit_s: Default per-solver time limit in seconds (``None``: unset).
        seed: Default solver seed (``None``: unset).
        solvers: Default solver list (``None``: all registered).
        solver_params: ``{solver name: {option: value}}`` passed to that backend.
        max_exact_size: Instances larger than this (samples for balance, GPUs for placement) skip
            exact solvers; ``None``: no limit.
        path: The suite file, if it came from one.
    """

    name: str
    problem: str
    instances: tuple[InstanceSpec, ...]
    description: str = ""
    time_limit_s: float | None = None
    seed: int | None = None
    solvers: tuple[str, ...] | None = None
    solver_params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    max_exact_size: int | None = None
    path: str | None = None


def _names(value: Any, where: str) -> tuple[str, ...] | None:
    if value is None or value == "all":
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, Sequence) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: must be 'all' or a non-empty list of solver names, got {value!r}")
    return tuple(value)


def _registered(names: Any, problem: str, where: str) -> None:
    """Refuse a solver name (or alias) in ``names`` that no backend of ``problem`` is registered under: a suite's
    ``solvers``, an entry's ``solvers`` or a ``solver_params`` key had been left out of the comparison without a
    word.

    Raises:
        ConfigError: ``<where>: 'nope' is not a registered <problem> solver; registered: ...``.
    """
    known, alias_of = available(problem), aliases(problem)
    for name in names or ():
        if alias_of.get(name, name) not in known:
            raise ConfigError(f"{where}: {key_shown(name, quote=True)} is not a registered {problem} solver; "
                              f"registered: {', '.join(known)}")


def _expand_seeds(value: Any, where: str) -> list[int]:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: must be a count or a list of integers, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ConfigError(f"{where}: a count must be >= 1, got {value!r}")
        check_count(value, MAX_SEEDS, where, "seeds")
        return list(range(value))
    if isinstance(value, Sequence) and not isinstance(value, str) and value and all(
        isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value
    ):
        check_count(len(value), MAX_SEEDS, where, "seeds")
        return list(value)
    raise ConfigError(f"{where}: must be a count or a non-empty list of integers >= 0 (numpy seeds), got {value!r}")


def _resolve(path: Any, base_dir: Path, where: str) -> str:
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{where}: must be a file path, got {path!r}")
    resolved = (base_dir / path).resolve() if not Path(path).is_absolute() else Path(path)
    if not resolved.exists():
        raise ConfigError(f"{where}: file not found: {str(resolved)!r}")
    if not resolved.is_file():
        raise ConfigError(f"{where}: {str(resolved)!r} is not a regular file")
    record_input(resolved)
    return str(resolved)


def check_name(value: str, where: str) -> str:
    """``value`` unchanged if it holds no control character (C0/C1, DEL, line or paragraph separators),
    which would break a report's lines or a terminal.

    Raises:
        ConfigError: ``<where>: ...`` with the character's code point.
    """
    for ch in value:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            raise ConfigError(f"{where}: contains the control character U+{ord(ch):04X}; names must be printable")
    return value


#: Most memory one balance instance of a suite may be expected to take while it is built and solved, bytes.
MAX_INSTANCE_BYTES = 2**30
#: Upper estimates of that memory per sample and per bin, bytes (the instance's columns and keys plus a
#: heuristic solver's working set; ``compare`` with ``lpt`` on generated instances of 0.2-1M samples:
#: docs/performance.md, "Suite instances and memory").
SAMPLE_BYTES, BIN_BYTES = 700, 300


def check_instance_memory(samples: int, bins: int, where: str) -> None:
    """Refuse a balance instance of ``samples`` samples in ``bins`` bins whose estimated memory
    (:data:`SAMPLE_BYTES` per sample, :data:`BIN_BYTES` per bin) exceeds :data:`MAX_INSTANCE_BYTES`: the
    sample and rank caps alone admit instances of several GB.

    Raises:
        ConfigError: ``<where>: about N GB ...`` naming both counts.
    """
    estimate = SAMPLE_BYTES * samples + BIN_BYTES * bins
    if estimate > MAX_INSTANCE_BYTES:
        raise ConfigError(f"{where}: {samples:,} samples in {bins:,} bins would take about {estimate / 1e9:.1f} GB "
                          f"to build and solve, above the {MAX_INSTANCE_BYTES / 2**30:g} GiB a suite instance may "
                          "take; use fewer samples or ranks")


def _check_generator_sizes(params: Mapping[str, Any], where: str, generator: str | None = None) -> None:
    """Refuse generator sizes (``n``, ``ranks``, ``bins_per_rank``) that are not integers >= 1 or a ``seed``
    that is not an integer >= 0 (bad input, not an instance that fails to build), sizes above
    :data:`GENERATOR_LIMITS`, or whose memory estimate is above :data:`MAX_INSTANCE_BYTES`
    (:func:`check_instance_memory`), or ``n`` below ``ranks`` x ``bins_per_rank`` (every bin is non-empty),
    and of ``generator`` ``planted`` a ``samples_per_rank`` below ``bins_per_rank`` (:func:`_check_planted_sizes`),
    before anything is generated."""
    for key, least in (("n", 1), ("ranks", 1), ("bins_per_rank", 1), ("seed", 0)):
        value = params.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ConfigError(f"{where}.{key}: must be an integer >= {least}, got {show(value)}")

    def count(key: str, default: int = 1) -> int:
        value = params.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) else default

    check_count(count("n"), GENERATOR_LIMITS["n"], f"{where}.n", "samples")
    check_count(count("ranks"), GENERATOR_LIMITS["ranks"], f"{where}.ranks", "ranks")
    check_count(count("ranks") * count("bins_per_rank"), GENERATOR_LIMITS["bins"],
                f"{where}.bins_per_rank", "bins (ranks x bins_per_rank)")
    if "n" in params:
        check_instance_memory(count("n"), count("ranks") * count("bins_per_rank"), where)
    if "n" in params and "ranks" in params:  # corpus without ranks: the config's layout, read when built
        bins = count("ranks") * count("bins_per_rank")
        if count("n") < bins:  # every bin is non-empty (BalanceInstance), so no instance of these sizes builds
            raise ConfigError(f"{where}.n: {count('n')} samples cannot fill the {bins} non-empty bins of ranks "
                              f"{count('ranks')} x bins_per_rank {count('bins_per_rank')}; give n >= {bins} or "
                              f"fewer ranks / bins_per_rank")
    if generator == "planted":
        _check_planted_sizes(params, where, count("bins_per_rank"), count("ranks"))


def _check_planted_sizes(params: Mapping[str, Any], where: str, bins_per_rank: int, ranks: int = 1) -> None:
    """Refuse a ``planted`` entry's ``samples_per_rank`` that is not an integer >= 1, or below ``bins_per_rank``
    (every planted bin holds a piece, so no instance of these sizes builds), its ``n = ranks x samples_per_rank``
    above :data:`GENERATOR_LIMITS`' samples or :data:`MAX_INSTANCE_BYTES` (:func:`check_instance_memory`), or a
    ``fill`` / ``seq_len`` that leaves a bin fewer tokens than the samples it holds (each piece has a token at
    least), when the suite is read; a ``seq_len`` or ``fill`` of the wrong kind is the generator's to refuse."""
    # numpy and the generators load only when a suite has a planted entry
    from packplace.harness.generators import PLANTED_SAMPLES_PER_RANK

    value = params.get("samples_per_rank", PLANTED_SAMPLES_PER_RANK)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}.samples_per_rank: must be an integer >= 1, got {show(value)}")
    if value < bins_per_rank:
        raise ConfigError(f"{where}.samples_per_rank: {value} is below bins_per_rank {bins_per_rank} (every planted "
                          f"bin needs a sample); give samples_per_rank >= {bins_per_rank} or fewer bins_per_rank")
    samples = ranks * value
    check_count(samples, GENERATOR_LIMITS["n"], f"{where}.samples_per_rank", "samples (ranks x samples_per_rank)")
    check_instance_memory(samples, ranks * bins_per_rank, where)
    seq_len, fill = params.get("seq_len"), params.get("fill", 1.0)
    if (isinstance(seq_len, int) and not isinstance(seq_len, bool) and seq_len >= 1 and isinstance(fill, (int, float))
            and not isinstance(fill, bool) and 0 < fill <= 1):
        bin_tokens, most_per_bin = math.floor(fill * seq_len), -(-value // bins_per_rank)
        if bin_tokens < most_per_bin:
            raise ConfigError(f"{where}.fill: {fill} of seq_len {seq_len} leaves {bin_tokens} tokens per bin, fewer "
                              f"than the {most_per_bin} samples of a bin (each takes a token at least); give a "
                              f"larger seq_len or fill, or fewer samples_per_rank")


def _entry_specs(entry: Any, i: int, problem: str, base_dir: Path, src: str, start: int) -> list[InstanceSpec]:
    where = f"{src}: instances[{i}]"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: must be a mapping, got {show(entry)}")
    unknown = sorted(set(entry) - _ENTRY_KEYS, key=str)
    if unknown:
        raise ConfigError(f"{where}.{key_shown(unknown[0])}: unknown field; valid: {', '.join(sorted(_ENTRY_KEYS))}")
    sources = [k for k in ("generator", "config", "inline") if k in entry]
    if len(sources) != 1:
        raise ConfigError(f"{where}: needs exactly one of generator / config / inline, got {sources or 'none'}")
    kind = sources[0]
    if problem == "context_parallel" and kind != "generator":
        raise ConfigError(f"{where}.{kind}: context_parallel suites take generator entries only")
    solvers = _names(entry.get("solvers"), f"{where}.solvers")
    _registered(solvers, problem, f"{where}.solvers")
    params = entry.get("params", {})
    if not isinstance(params, Mapping):
        raise ConfigError(f"{where}.params: must be a mapping, got {show(params)}")
    params = dict(params)
    name = entry.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise ConfigError(f"{where}.name: must be a non-empty string, got {name!r}")

    generator = config = overrides = None
    if kind == "generator":
        generator = entry["generator"]
        valid = GENERATORS[problem]
        if generator not in valid:
            raise ConfigError(
                f"{where}.generator: unknown {problem} generator {generator!r}; valid: {', '.join(valid) or 'none'}"
            )
        _check_generator_sizes(params, f"{where}.params", generator)
        if problem != "placement":   # a misspelt parameter is bad input, not an instance that fails to build
            # numpy and the generators load only when a suite has a generator entry
            from packplace.harness.generators import context_parallel_parameter_names, parameter_names
            valid_params = (parameter_names if problem == "balance" else context_parallel_parameter_names)(generator)
            unknown = sorted(set(params) - valid_params, key=str)
            if unknown:
                raise ConfigError(f"{where}.params.{key_shown(unknown[0])}: unknown parameter of generator "
                                  f"{generator!r}; valid: {', '.join(sorted(valid_params))}")
        if generator == "corpus":
            if "config" not in params:
                raise ConfigError(f"{where}.params.config: the corpus generator needs a config file")
            params["config"] = _resolve(params["config"], base_dir, f"{where}.params.config")
        name = name or generator
    elif kind == "config":
        config = _resolve(entry["config"], base_dir, f"{where}.config")
        name = name or Path(config).stem
    else:
        overrides = entry["inline"]
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"{where}.inline: must be a mapping (a whole config), got {overrides!r}")
        if problem != "placement":
            raise ConfigError(f"{where}.inline: inline configs are for placement suites only")
        name = name or f"inline{i}"
    if "overrides" in entry:
        if problem != "placement" or kind != "config":
            raise ConfigError(f"{where}.overrides: only for placement entries with a config file")
        overrides = entry["overrides"]
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"{where}.overrides: must be a mapping, got {show(overrides)}")
    if "subsample" in entry:
        if problem != "balance" or kind != "config":
            raise ConfigError(f"{where}.subsample: only for balance entries with a config file")
        sub = entry["subsample"]
        if not isinstance(sub, Mapping):
            raise ConfigError(f"{where}.subsample: must be a mapping {{n, seed}}, got {sub!r}")
        kind, generator = "generator", "corpus"
        params = {"config": config, **dict(sub), **params}
        config = None
    if kind == "config" and params:
        raise ConfigError(f"{where}.params: a config entry takes no params (use generator: corpus)")

    seeds = [None] if "seeds" not in entry else _expand_seeds(entry["seeds"], f"{where}.seeds")
    if seeds != [None] and kind != "generator":
        raise ConfigError(f"{where}.seeds: only generator entries expand over seeds")
    check_name(name, f"{where}.name")
    specs = []
    for k, seed in enumerate(seeds):
        p = dict(params)
        label = name
        if seed is not None:
            p["seed"] = seed
            label = f"{name}-s{seed}"
        specs.append(InstanceSpec(start + k, label, kind, generator, p, config, overrides, solvers))
    return specs


def parse_suite(
    data: Any, *, base_dir: str | Path = ".", source: str = "suite", name: str = "", path: str | None = None
) -> Suite:
    """Parse a suite from an already loaded mapping (the format of :func:`load_suite`).

    Raises:
        ConfigError: any bad field, a missing file, duplicate instance names.
    """
    base = Path(base_dir)
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: a suite must be a mapping with 'problem' and 'instances', got {type(data).__name__}"
        )
    unknown = sorted(set(data) - _SUITE_KEYS, key=str)
    if unknown:
        raise ConfigError(f"{source}: {key_shown(unknown[0])}: unknown field; valid: {', '.join(sorted(_SUITE_KEYS))}")
    problem = data.get("problem")
    if problem not in PROBLEMS:
        raise ConfigError(f"{source}: problem: must be one of {', '.join(PROBLEMS)}, got {problem!r}")
    entries = data.get("instances")
    if not isinstance(entries, Sequence) or isinstance(entries, str) or not entries:
        raise ConfigError(f"{source}: instances: must be a non-empty list, got {entries!r}")

    time_limit = data.get("time_limit_s")
    if time_limit is not None and (
        isinstance(time_limit, bool) or not isinstance(time_limit, (int, float))
        or not math.isfinite(time_limit) or time_limit <= 0
    ):
        raise ConfigError(f"{source}: time_limit_s: must be a positive number of seconds, got {time_limit!r}")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"{source}: seed: must be an integer, got {seed!r}")
    solver_params = data.get("solver_params", {}) or {}
    if not isinstance(solver_params, Mapping) or not all(isinstance(v, Mapping) for v in solver_params.values()):
        raise ConfigError(f"{source}: solver_params: must map solver names to option mappings, got {solver_params!r}")
    _registered(solver_params, problem, f"{source}: solver_params")
    solvers = _names(data.get("solvers"), f"{source}: solvers")
    _registered(solvers, problem, f"{source}: solvers")
    size_keys = [k for k in ("max_exact_size", *SIZE_LIMIT_KEYS.values()) if k in data]
    alias = SIZE_LIMIT_KEYS[problem]
    if any(k not in ("max_exact_size", alias) for k in size_keys) or len(size_keys) > 1:
        raise ConfigError(f"{source}: use one of max_exact_size / {alias} for a {problem} suite, got {size_keys}")
    max_exact = data[size_keys[0]] if size_keys else None
    if max_exact is not None and (isinstance(max_exact, bool) or not isinstance(max_exact, int) or max_exact < 0):
        raise ConfigError(f"{source}: {size_keys[0]}: must be an integer >= 0, got {max_exact!r}")

    specs: list[InstanceSpec] = []
    for i, entry in enumerate(entries):
        specs.extend(_entry_specs(entry, i, problem, base, source, len(specs)))
        check_count(len(specs), MAX_INSTANCES, f"{source}: instances", "instances")
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ConfigError(f"{source}: instances: duplicate instance name {spec.name!r}")
        seen.add(spec.name)
    label = data.get("name") or name or Path(source).stem
    check_name(str(label), f"{source}: name")
    return Suite(
        name=str(label), problem=problem, instances=tuple(specs), description=str(data.get("description", "")),
        time_limit_s=time_limit, seed=seed, solvers=solvers,
        solver_params={k: dict(v) for k, v in solver_params.items()}, max_exact_size=max_exact,
        path=path,
    )


def shipped_path(relative: str | Path) -> Path | None:
    """A file that ships with packplace (``configs/...``, ``benchmarks/...``), or ``None``.

    Looked up under the installed package's ``_data`` folder (a wheel installs the checkout's
    ``configs/`` and ``benchmarks/`` there, same layout) and then under the source checkout (an
    editable install or a source tree).
    """
    package = Path(__file__).resolve().parents[1]  # the installed packplace folder
    roots = (package / "_data", Path(__file__).resolve().parents[3])
    for root in roots:
        candidate = root / relative
        if candidate.exists():
            return candidate
    return None


def find_suite(source: str | Path) -> Path:
    """The suite file ``source`` names: the path itself when it exists, else a shipped suite by path
    (``benchmarks/suites/smoke.yaml``) or by name (``smoke``, ``smoke.yaml``), so that
    ``packplace compare --suite smoke`` works from any directory.

    Raises:
        ConfigError: no such file; the message lists the shipped suites.
    """
    path = Path(source)
    if path.is_file():
        return path
    if not path.is_absolute():
        name = path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml"
        for relative in (path, Path("benchmarks/suites") / name):
            shipped = shipped_path(relative)
            if shipped is not None and shipped.is_file():
                return shipped
    folder = shipped_path("benchmarks/suites")
    names = sorted(p.stem for p in folder.glob("*.yaml")) if folder is not None else []
    raise ConfigError(f"suite: file not found: {str(path)!r}"
                      + (f" (shipped suites: {', '.join(names)})" if names else ""))


def load_suite(source: str | Path | Mapping | Suite | Sequence, problem: str | None = None) -> Suite:
    """A :class:`Suite` from a YAML file path, a mapping, a Suite, or a list of instance objects.

    Args:
        source: The suite. A list of already built instances (e.g. ``BalanceInstance`` objects)
            becomes a suite named ``instances`` with one ``object`` spec per instance; ``problem``
            is then required.
        problem: Expected problem; a mismatch with the suite's own is an error.

    A suite file (paths inside it are relative to the suite file's folder)::

        name: balance_tiny                 # label (default: the file's stem)
        problem: balance                   # balance | placement
        description: one line
        time_limit_s: 10                   # default per-solver limit (seconds); compare's argument overrides it
        seed: 0                            # default solver seed; compare's argument overrides it
        solvers: [lpt, repair, cpsat]      # default solver list (absent or "all": every registered one);
                                           # a name no backend is registered under is refused
        solver_params:                     # backend options, per solver name
          cpsat: {num_workers: 1}
        max_exact_size: 40                 # exact solvers are "skipped" on larger instances
                                           # (alias: max_exact_samples for balance, max_exact_gpus for placement)
        instances:
          - name: uniform-small            # balance generator; see packplace.harness.generators
            generator: uniform             # uniform | lognormal | bimodal | planted | corpus
            params: {n: 10, ranks: 2, seq_len: 4096, high: 2048}
            seeds: [1, 2, 3]               # expands to uniform-small-s1, -s2, -s3 (params.seed = s); or a count
            solvers: [lpt, cpsat]          # optional allow-list for this entry
          - config: ../../configs/balance/stdlib.yaml          # a config file as is
          - generator: corpus                                  # a config file subsampled
            params: {config: ../../configs/balance/stdlib.yaml, n: 200, seed: 1}
          - config: ../../configs/placement/grpo.yaml          # placement: a config file ...
            overrides: {hardware: {nodes_per_rack: 4}}         # ... with fields replaced (a generated cluster)
          - inline: {hardware: {...}, models: {...}, ...}      # placement: a whole config in the suite

    Raises:
        ConfigError: unreadable file, bad field, or a problem mismatch.
    """
    if isinstance(source, Suite):
        suite = source
    elif isinstance(source, Mapping):
        suite = parse_suite(source)
    elif isinstance(source, (str, Path)):
        path = find_suite(source)
        suite = parse_suite(load_yaml(path), base_dir=path.resolve().parent, source=str(path), name=path.stem,
                            path=str(path))
    elif isinstance(source, Sequence):
        if problem not in PROBLEMS:
            raise ConfigError(f"problem: a list of instances needs problem in {PROBLEMS}, got {problem!r}")
        if not source:
            raise ConfigError("suite: the list of instances is empty")
        specs = []
        for i, inst in enumerate(source):
            label = check_name(str(getattr(inst, "name", "") or f"instance{i}"), f"instances[{i}].name")
            specs.append(InstanceSpec(i, label if label not in {s.name for s in specs} else f"{label}#{i}",
                                      "object", instance=inst))
        suite = Suite(name="instances", problem=problem, instances=tuple(specs))
    else:
        raise ConfigError(f"suite: expected a file path, a mapping or a list of instances, got {type(source).__name__}")
    if problem is not None and problem != suite.problem:
        raise ConfigError(f"problem: {problem!r} does not match the suite's problem {suite.problem!r}")
    return suite
