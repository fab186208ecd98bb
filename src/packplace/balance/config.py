"""Balance instances from YAML configs (:func:`load_config`, :func:`build_instance` for a parsed dict).

The YAML format is documented with :func:`load_config`. Every field has a range contract
(:data:`FIELDS`, :data:`COST_FIELDS`, :data:`LATENCY_FIELDS`, :data:`CORPUS_FIELDS`,
:data:`ITEM_FIELDS`; docs/config-reference.md lists them; ``cost.model`` is checked by
:func:`packplace.shape.shape_from_mapping`), checked when the config loads and before any work:
unknown fields are errors at every level (including ``cost``, ``samples.items[]`` and
``samples.corpus``), booleans are ``true``/``false`` only, sample keys are strings or integers, and
sizes are bounded up front (:data:`MAX_SAMPLES` samples and bins).

``reference: auto`` builds the token-only packing most loaders ship (worst-fit decreasing on tokens,
see :func:`packplace.balance.reference.token_packing_reference`) and keeps it only if it is feasible;
otherwise there is none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from packplace.balance import corpus as corpus_module
from packplace.balance.instance import check_reference_bins
from packplace.balance.samples import SampleTable
from packplace.balance.schema import (
    BalanceInstance,
    PackingConstraints,
    Sample,
    WorkloadCost,
    check_group_size_use,
)
from packplace.balance.workload import LatencyModel, ModelShape, padding_cost, sample_cost
from packplace.context_parallel.instance import OBJECTIVES as CONTEXT_PARALLEL_OBJECTIVES
from packplace.context_parallel.instance import ContextParallelInstance
from packplace.context_parallel.instance import make_instance as make_context_parallel_instance
from packplace.contract import Field, check_count, check_section, key_shown
from packplace.errors import ConfigError, show, show_kind
from packplace.shape import from_hf_config, shape_from_mapping
from packplace.yamlio import load_yaml

#: Most samples (and most bins, ``data_parallel_size · local_batch_size``) a config may describe.
MAX_SAMPLES = 10_000_000
#: Most corpus documents after splitting at ``seq_len`` (the corpus is built in memory before sampling).
MAX_CORPUS_DOCUMENTS = 1_000_000
#: Largest token count of a sample or a bin (int32; sums over :data:`MAX_SAMPLES` stay far inside int64).
MAX_TOKENS = 2**31 - 1
#: Largest data-parallel size (ranks).
MAX_RANKS = 2**20
#: Sample costs are 0 or in [MIN_COST, MAX_COST] (cost units): sums over :data:`MAX_SAMPLES` samples stay
#: finite and CP-SAT's integer scaling stays representable.
MIN_COST, MAX_COST = 1e-30, 1e30
#: Largest budget limit or per-sample budget usage.
MAX_BUDGET = 1e15
#: Largest integer sample key (JSON and int64 arrays hold it exactly).
MAX_KEY = 2**63 - 1
COST_KINDS = ("tokens", "flops", "latency", "given")

#: Top-level scalar fields (``name``, ``budgets``, ``cost``, ``samples``, ``reference`` are structured).
FIELDS: dict[str, Field] = {
    "seq_len": Field("int", "tokens", 1, MAX_TOKENS, meaning="tokens per bin (pack)"),
    "data_parallel_size": Field("int", "ranks", 1, MAX_RANKS, meaning="D, data-parallel ranks"),
    "local_batch_size": Field("int", "bins", 1, MAX_SAMPLES, literals=("auto",), default=1,
                              meaning="m, non-empty bins per rank; auto: the fewest feasible; or a rule "
                                      "mapping (`local_batch_size` rules)"),
    "equal_count": Field("bool", default=False, meaning="every rank the same number of samples (within one)"),
    "max_samples_per_bin": Field("int", "samples", 1, MAX_SAMPLES, default=None,
                                 meaning="at most this many samples per bin; default no limit"),
    "objective": Field("enum", choices=("makespan", "balance", "rounds", "lockstep"), default="makespan",
                       meaning="what the solvers minimise"),
    "group_size": Field("int", "ranks", 1, MAX_RANKS, default=None,
                        meaning="ranks per synchronous round (rounds objective); divides D; default D"),
    "oversized_policy": Field("enum", choices=("error", "single"), default="error",
                              meaning="a sample longer than seq_len: error, or alone in its own bin"),
}
#: ``local_batch_size`` as a mapping: ``auto`` among the counts these rules allow.
LOCAL_BATCH_SIZE_FIELDS: dict[str, Field] = {
    "multiple_of": Field("int", "bins", 1, MAX_SAMPLES, default=1,
                         meaning="m is a multiple of this (virtual pipeline stages of an interleaved schedule)"),
    "at_least": Field("int", "bins", 1, MAX_SAMPLES, default=1,
                      meaning="m is at least this (pipeline stages, so that the pipeline fills)"),
}
STRUCTURED = ("name", "budgets", "cost", "samples", "reference", "groups")
TOP_LEVEL = set(FIELDS) | set(STRUCTURED)
COST_FIELDS: dict[str, Field] = {
    "kind": Field("enum", choices=COST_KINDS, default="tokens", meaning="how sample costs are obtained"),
    "mode": Field("enum", choices=("train", "inference"), default="train",
                  meaning="train = 3 x forward FLOPs (kind flops)"),
    "padding": Field("bool", default=False, meaning="charge padding FLOPs of each bin (kind flops only)"),
}
LATENCY_FIELDS: dict[str, Field] = {
    "a": Field("float", "s", MIN_COST, 1e6, zero_allowed=True, default=0.0, meaning="seconds per sample"),
    "b": Field("float", "s/token", MIN_COST, 1e6, zero_allowed=True, default=0.0, meaning="seconds per token"),
    "c": Field("float", "s/token^2", MIN_COST, 1e6, zero_allowed=True, default=0.0,
               meaning="seconds per token squared"),
}
CORPUS_FIELDS: dict[str, Field] = {
    "name": Field("enum", choices=("python_stdlib",), default="python_stdlib", meaning="the corpus"),
    "bytes_per_token": Field("float", "bytes/token", 1, 64, default=4.0,
                             meaning="tokens of a document = ceil(bytes / bytes_per_token)"),
    "fill": Field("float", "", 0, 1, exclusive_minimum=True, default=0.9,
                  meaning="take documents until this share of D*m*seq_len tokens is filled; m is the "
                          "smallest count local_batch_size allows (1 for auto, the rule's least multiple)"),
    "seed": Field("int", "", 0, 2**32 - 1, default=0, meaning="document sampling seed"),
}
ITEM_FIELDS: dict[str, Field] = {
    "tokens": Field("int", "tokens", 1, MAX_TOKENS, meaning="sample length"),
}
#: Top-level fields of a dynamic context-parallel config (one with a ``context_parallel`` section).
CONTEXT_PARALLEL_TOP_FIELDS: dict[str, Field] = {
    "seq_len": Field("int", "tokens", 1, MAX_TOKENS, default=None,
                     meaning="with context_parallel: the default of context_parallel.max_tokens_per_rank"),
    "data_parallel_size": Field("int", "ranks", 1, MAX_RANKS, meaning="D, data-parallel groups"),
    "objective": Field("enum", choices=CONTEXT_PARALLEL_OBJECTIVES, default="step_time",
                       meaning="with context_parallel: step_time (sum over micro-batches of the slowest CP group), "
                               "makespan or balance"),
}
#: The ``context_parallel`` section: its presence makes the config a dynamic-CP instance
#: (:mod:`packplace.context_parallel`).
CONTEXT_PARALLEL_FIELDS: dict[str, Field] = {
    "max": Field("int", "ranks", 1, MAX_RANKS,
                 meaning="C, the run's CP size: D x C ranks (sizes may exceed it, up to D x C)"),
    "min": Field("int", "ranks", 1, MAX_RANKS, default=None,
                 meaning="smallest CP size (Megatron's min_dynamic_context_parallel_size); default 1, or the "
                         "smallest of sizes"),
    "max_tokens_per_rank": Field("int", "tokens", 1, MAX_TOKENS, default=None,
                                 meaning="token cap per rank: a group of c ranks holds c times it (Megatron's "
                                         "max_seqlen_per_dp_cp_rank); default seq_len, else no cap"),
    "micro_batches": Field("int", "micro-batches", 1, MAX_SAMPLES, default=None,
                           meaning="lockstep micro-batches every rank runs; default free (the solver's choice)"),
    "gpus_per_node": Field("int", "GPUs", 1, 1024, default=8,
                           meaning="ranks per node: a group inside one node exchanges KV over NVLink"),
}
#: The ``cost`` section of a dynamic-CP config (:mod:`packplace.context_parallel.cost`).
CONTEXT_PARALLEL_COST_FIELDS: dict[str, Field] = {
    "kind": Field("enum", choices=("workload", "flops"), default="workload",
                  meaning="workload: Megatron-Core's s^2/c per rank (cost units of token^2); flops: the model's "
                          "compute and ring-attention KV exchange in seconds (needs model)"),
    "mode": Field("enum", choices=("train", "inference"), default="train",
                  meaning="train = forward and backward (kind flops)"),
    "hardware": Field("str", default="h200", meaning="GPU preset of the FLOP/s and link figures (kind flops)"),
    "flops_per_s": Field("float", "FLOP/s", 0, 1e21, exclusive_minimum=True, default=None,
                         meaning="sustained FLOP/s per rank; default the preset's datasheet x GEMM efficiency"),
    "overlap": Field("bool", default=True, meaning="ring steps overlap the KV transfer with attention (kind flops)"),
}
#: A sample cost (``samples.items[].cost`` or one component of a cost mapping).
COST_VALUE = Field("float", "cost units", MIN_COST, MAX_COST, zero_allowed=True)
#: A budget limit or usage.
BUDGET_VALUE = Field("float", "budget units", 0, MAX_BUDGET)


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{field}: must be a mapping, got {show(value)}")
    return value


def _label(prefix: str) -> Callable[[str], str]:
    return lambda name: f"{prefix}{name}"


def _check_key(key: Any, field: str) -> str | int:
    """A sample key: a string (at most 1,000 characters) or an integer within int64."""
    if isinstance(key, str) and len(key) <= 1000:
        return key
    if isinstance(key, int) and not isinstance(key, bool) and -MAX_KEY <= key <= MAX_KEY:
        return key
    raise ConfigError(f"{field}: a sample key must be a string or an integer in [-2^63+1, 2^63-1], got {show(key)}")


def _budgets(value: Any, field: str) -> dict[str, float]:
    value = _mapping(value, field)
    out = {}
    for name, limit in value.items():
        if not isinstance(name, str):
            raise ConfigError(f"{field}: budget names must be strings, got {show(name)}")
        out[name] = BUDGET_VALUE.check(limit, f"{field}.{name}")
    return out


def _cost_value(value: Any, field: str) -> float | dict[str, float]:
    if isinstance(value, Mapping):
        out = {}
        for name, component in value.items():
            if not isinstance(name, str):
                raise ConfigError(f"{field}: cost component names must be strings, got {show(name)}")
            out[name] = COST_VALUE.check(component, f"{field}.{name}")
        return out
    number: float = COST_VALUE.check(value, field)
    return number


def _list(value: Any, field: str, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{field}: must be a non-empty list of {what}, got {show(value)}")
    check_count(len(value), MAX_SAMPLES, field, "entries")
    return value


def _shape(spec: Any) -> ModelShape:
    """The model of ``cost.model``: Hugging Face field names or the older packplace names
    (:func:`packplace.shape.shape_from_mapping`), or ``{hf_config: path/to/config.json}``."""
    spec = _mapping(spec, "cost.model")
    if "hf_config" in spec:
        if len(spec) != 1:
            raise ConfigError("cost.model.hf_config: give either hf_config or shape fields, got "
                              f"{show(sorted(spec, key=str))}")
        if not isinstance(spec["hf_config"], str) or not spec["hf_config"]:
            raise ConfigError("cost.model.hf_config: must be the path of a config.json, got "
                              f"{show(spec['hf_config'])}")
        return from_hf_config(spec["hf_config"])
    return shape_from_mapping(spec, "cost.model.")


def _raw_samples(spec: Any, seq_len: int, capacity: int) -> list[dict[str, Any]] | np.ndarray:
    """The samples of the ``samples`` section: one checked mapping per sample, or for plain ``lengths``
    the token counts as one checked int64 column (:func:`_length_column`)."""
    spec = _mapping(spec, "samples")
    given = [k for k in ("lengths", "items", "corpus") if k in spec]
    if len(given) != 1:
        raise ConfigError(f"samples: give exactly one of lengths, items, corpus; got {show(given or list(spec))}")
    unknown = [k for k in spec if k not in given]
    if unknown:
        raise ConfigError(f"samples.{key_shown(unknown[0])}: unknown field; valid: lengths, items, corpus")
    kind = given[0]
    if kind == "lengths":
        lengths = _list(spec["lengths"], "samples.lengths", "token counts")
        column = _length_column(lengths)
        if column is not None:
            return column
        tokens = ITEM_FIELDS["tokens"]
        return [{"key": i, "tokens": tokens.check(t, f"samples.lengths[{i}]")} for i, t in enumerate(lengths)]
    if kind == "items":
        items = _list(spec["items"], "samples.items", "{key, tokens, cost, budgets}")
        out = []
        for i, item in enumerate(items):
            where = f"samples.items[{i}]"
            checked = check_section(item, ITEM_FIELDS, where, extra=("key", "cost", "budgets"),
                                    label=_label(f"{where}."))
            sample: dict[str, Any] = {"key": _check_key(item.get("key", i), f"{where}.key"), **checked}
            if item.get("cost") is not None:
                sample["cost"] = _cost_value(item["cost"], f"{where}.cost")
            if item.get("budgets") is not None:
                sample["budgets"] = _budgets(item["budgets"], f"{where}.budgets")
            out.append(sample)
        return out
    corpus = check_section(spec["corpus"], CORPUS_FIELDS, "samples.corpus", label=_label("samples.corpus."))
    documents = corpus_module.stdlib_documents(corpus["bytes_per_token"])
    pieces = sum(-(-d.tokens // seq_len) for d in documents)
    check_count(pieces, MAX_CORPUS_DOCUMENTS, "samples.corpus", f"documents after splitting at seq_len {seq_len}")
    documents = corpus_module.split_long(documents, seq_len)
    batch = corpus_module.sample_batch(documents, int(corpus["fill"] * capacity), corpus["seed"])
    return [{"key": d.key, "tokens": d.tokens} for d in batch]


def _length_column(lengths: list[Any]) -> np.ndarray | None:
    """``samples.lengths`` as an int64 array (n,) when every entry is a plain integer within the ``tokens``
    field's range (a few numpy passes instead of one checked object per sample), else None: the
    per-entry checks then name the first entry at fault."""
    if set(map(type, lengths)) != {int}:
        return None
    try:
        column = np.asarray(lengths, dtype=np.int64)
    except OverflowError:
        return None
    field = ITEM_FIELDS["tokens"]
    low, high = field.minimum, field.maximum
    if low is None or high is None or not low <= int(column.min()) <= int(column.max()) <= high:
        return None
    return column


def _table_of_lengths(column: np.ndarray, estimate: Callable[[int], WorkloadCost] | None) -> SampleTable:
    """The samples of ``samples.lengths`` (keys 0..n-1) as columns; each distinct length's cost is
    estimated once (the same :class:`WorkloadCost` a per-sample estimate gives).

    Raises:
        ConfigError: ``cost.kind`` is ``given`` (lengths carry no costs).
    """
    if estimate is None:
        raise ConfigError("samples.items[0].cost: missing (cost.kind is 'given')")
    values, inverse = np.unique(column, return_inverse=True)
    costs = [estimate(int(t)) for t in values.tolist()]
    llm = np.fromiter((c.llm for c in costs), dtype=np.float64, count=len(costs))[inverse]
    other = [costs[j].other for j in inverse.tolist()] if any(c.other for c in costs) else None
    return SampleTable(tuple(range(len(column))), column, llm, other)


def _cost_model(spec: Any) -> tuple[Callable[[int], WorkloadCost] | None, Any, str]:
    """``(estimate, padding, unit)`` from the ``cost`` section (``estimate`` None for kind ``given``)."""
    spec = {} if spec is None else spec
    cost = check_section(spec, COST_FIELDS, "cost", extra=("model", "latency"), label=_label("cost."))
    kind = cost["kind"]
    for section, owner in (("model", "flops"), ("latency", "latency")):
        if section in spec and kind != owner:
            raise ConfigError(f"cost.{section}: only used with kind {owner}, but kind is {kind!r}")
    for name in ("padding", "mode"):
        if name in spec and kind != "flops":
            raise ConfigError(f"cost.{name}: only used with kind flops, but kind is {kind!r}")
    padding = None
    unit = {"flops": "FLOPs", "latency": "s", "tokens": "tokens"}.get(kind, "cost")
    if kind == "flops":
        if "model" not in spec:
            raise ConfigError("cost.model: missing required field")
        shape = _shape(spec["model"])
        mode = cost["mode"]
        if cost["padding"]:
            padding = padding_cost(shape, mode)
        return (lambda tokens: sample_cost(tokens, shape, mode)), padding, unit
    if kind == "latency":
        if "latency" not in spec:
            raise ConfigError("cost.latency: missing required field")
        latency = LatencyModel(**check_section(spec["latency"], LATENCY_FIELDS, "cost.latency",
                                               label=_label("cost.latency.")))
        return latency.cost, None, unit
    if kind == "tokens":
        return (lambda tokens: WorkloadCost(llm=float(tokens))), None, unit
    return None, None, unit


def _reference(reference: Any) -> Any:
    if reference == "auto":
        return "auto"
    if reference is None or reference == "none":
        return None
    if not isinstance(reference, list):
        raise ConfigError(f"reference: must be auto, none or a list of bins, got {show(reference)}")
    return _key_lists(reference, "reference", "bins", "one list per bin")


def _key_lists(value: list[Any], field: str, unit: str, hint: str) -> tuple[tuple[str | int, ...], ...]:
    """A list of lists of sample keys (``reference`` bins, ``groups``), each key checked; errors name
    ``field[i]``."""
    check_count(len(value), MAX_SAMPLES, field, unit)
    out = []
    for index, keys in enumerate(value):
        if not isinstance(keys, list):
            raise ConfigError(f"{field}[{index}]: must be a list of sample keys ({hint}), got {show(keys)}")
        out.append(tuple(_check_key(key, f"{field}[{index}]") for key in keys))
    return tuple(out)


def _groups(groups: Any) -> tuple[tuple[str | int, ...], ...]:
    """``groups``: a list of lists of sample keys (each group shares a rank)."""
    if groups is None:
        return ()
    if not isinstance(groups, list):
        raise ConfigError(f"groups: must be a list of groups (lists of sample keys), got {show(groups)}")
    return _key_lists(groups, "groups", "groups", "one list per group")


def build_instance(config: Mapping[str, Any], *, source: str = "<dict>") -> BalanceInstance:
    """Build and validate a :class:`BalanceInstance` from a parsed config (format in :func:`load_config`).

    Every field is checked against its contract before any sample is built or any cost computed.

    Raises:
        ConfigError: a missing or invalid field, named in the message.
    """
    if not isinstance(config, Mapping):  # the document's type only: a file that is no config is not quoted
        raise ConfigError(f"{source}: must be a mapping of fields, got {show_kind(config)}")
    if is_context_parallel(config):
        raise ConfigError("context_parallel: this config describes a dynamic context-parallel instance; load it "
                          "with packplace.balance.load_context_parallel_config (packplace balance reads both)")
    per_rank_rule = config.get("local_batch_size")
    if isinstance(per_rank_rule, Mapping):
        per_rank_rule = check_section(per_rank_rule, LOCAL_BATCH_SIZE_FIELDS, "local_batch_size",
                                      label=_label("local_batch_size."))
        config = {key: value for key, value in config.items() if key != "local_batch_size"}
    fields = check_section(config, FIELDS, source, extra=STRUCTURED, label=str)
    seq_len, ranks = fields["seq_len"], fields["data_parallel_size"]
    per_rank: Any = per_rank_rule if isinstance(per_rank_rule, dict) else fields["local_batch_size"]  # int, auto, rule
    if isinstance(per_rank, dict):
        bins_per_rank = -(-per_rank["at_least"] // per_rank["multiple_of"]) * per_rank["multiple_of"]
    else:
        bins_per_rank = 1 if per_rank == "auto" else per_rank
    check_count(ranks * bins_per_rank, MAX_SAMPLES, "local_batch_size",
                f"bins (data_parallel_size {ranks} x local_batch_size {per_rank})")
    name = config.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"name: must be a string, got {show(name)}")
    budgets = _budgets(config["budgets"], "budgets") if config.get("budgets") is not None else {}
    constraints = PackingConstraints(seq_len, budgets, fields["oversized_policy"])
    estimate, padding, unit = _cost_model(config.get("cost"))
    reference_bins = _reference(config.get("reference", "auto"))
    raw = _raw_samples(config["samples"] if "samples" in config else _missing("samples"), seq_len,
                       ranks * bins_per_rank * seq_len)

    samples: list[Sample] | SampleTable = [] if isinstance(raw, list) else _table_of_lengths(raw, estimate)
    for i, item in enumerate(raw if isinstance(raw, list) else ()):
        tokens = item["tokens"]
        if "cost" in item and estimate is not None:   # one unit per instance: the model's or the items'
            raise ConfigError(f"samples.items[{i}].cost: read only with cost.kind 'given', but cost.kind is "
                              f"{(config.get('cost') or {}).get('kind', 'tokens')!r} (costs in {unit}); set "
                              "cost.kind: given to use the items' costs, or remove them")
        if "cost" in item:
            cost = item["cost"]
        elif estimate is None:
            raise ConfigError(f"samples.items[{i}].cost: missing (cost.kind is 'given')")
        else:
            cost = estimate(tokens)
        samples.append(Sample(item["key"], tokens, cost, item.get("budgets") or {}))  # type: ignore[union-attr]

    check_group_size_use(fields["objective"], fields.get("group_size"))
    try:
        return check_reference_bins(BalanceInstance(
            samples if isinstance(samples, SampleTable) else tuple(samples), constraints, ranks, per_rank,
            reference_bins=reference_bins,
            objective=fields["objective"],
            group_size=fields.get("group_size"),
            padding_cost=padding,
            equal_count=fields["equal_count"],
            max_samples_per_bin=fields.get("max_samples_per_bin"),
            groups=_groups(config.get("groups")),
            name=str(name if name is not None else (Path(source).stem if source != "<dict>" else "")),
            cost_unit=unit,
        ))
    except ConfigError as exc:  # the config's field is `reference:`, the instance's reference_bins
        text = str(exc)
        if text.startswith("reference_bins:"):
            raise ConfigError("reference:" + text.removeprefix("reference_bins:")) from None
        raise


def _context_parallel_cost(spec: Any) -> Any:
    """The ``cost`` section of a dynamic-CP config as :func:`~packplace.context_parallel.cost_from_mapping`'s
    input (None: Megatron's workload function)."""
    spec = {} if spec is None else spec
    cost = check_section(spec, CONTEXT_PARALLEL_COST_FIELDS, "cost", extra=("model",), label=_label("cost."))
    if cost["kind"] == "workload":
        extra = sorted(str(k) for k in spec if k != "kind")
        if extra:
            raise ConfigError(f"cost.{extra[0]}: only used with kind flops, but kind is 'workload'")
        return None
    if "model" not in spec:
        raise ConfigError("cost.model: missing required field (kind flops)")
    mapping = {"model": _shape(spec["model"]), "hardware": cost["hardware"], "mode": cost["mode"],
               "overlap": cost["overlap"]}
    if cost.get("flops_per_s") is not None:
        mapping["flops_per_s"] = cost["flops_per_s"]
    return mapping


def _context_parallel_sizes(value: Any) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ConfigError(f"context_parallel.sizes: must be a non-empty list of CP sizes, got {show(value)}")
    size = CONTEXT_PARALLEL_FIELDS["max"]
    return [size.check(v, f"context_parallel.sizes[{i}]") for i, v in enumerate(value)]


#: Balance fields a dynamic-CP config does not take, with what replaces them.
_NOT_CONTEXT_PARALLEL = {
    "local_batch_size": "the micro-batches are context_parallel.micro_batches",
    "equal_count": "CP groups hold any number of sequences",
    "max_samples_per_bin": "CP groups hold any number of sequences",
    "group_size": "CP groups are chosen per micro-batch",
    "oversized_policy": "a sequence longer than the full group holds is infeasible",
    "budgets": "the caps are context_parallel.max_tokens_per_rank",
    "reference": "there is no reference grouping for CP groups",
    "groups": "sequences are placed one by one",
}


def build_context_parallel_instance(config: Mapping[str, Any], *, source: str = "<dict>") -> ContextParallelInstance:
    """Build a dynamic context-parallel instance from a parsed config with a ``context_parallel`` section
    (format in :func:`load_config`; fields :data:`CONTEXT_PARALLEL_TOP_FIELDS`, :data:`CONTEXT_PARALLEL_FIELDS`,
    :data:`CONTEXT_PARALLEL_COST_FIELDS`).

    Raises:
        ConfigError: a missing or invalid field, or a balance field that does not apply (named, with what
            replaces it).
        InfeasibleError: a sequence no allowed CP group holds; too few sequences for ``micro_batches``.
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"{source}: must be a mapping of fields, got {show_kind(config)}")
    for field, instead in _NOT_CONTEXT_PARALLEL.items():
        if field in config:
            raise ConfigError(f"{field}: not used with context_parallel ({instead})")
    fields = check_section(config, CONTEXT_PARALLEL_TOP_FIELDS, source, label=str,
                           extra=("name", "context_parallel", "cost", "samples"))
    section = _mapping(config["context_parallel"], "context_parallel")
    cp = check_section(section, CONTEXT_PARALLEL_FIELDS, "context_parallel", extra=("sizes",),
                       label=_label("context_parallel."))
    label = config.get("name")
    if label is not None and not isinstance(label, str):
        raise ConfigError(f"name: must be a string, got {show(label)}")
    dp = fields["data_parallel_size"]
    cap = cp.get("max_tokens_per_rank", fields.get("seq_len"))
    sizes = _context_parallel_sizes(section.get("sizes"))
    check_count(dp * cp["max"], MAX_RANKS, "context_parallel.max", f"ranks (data_parallel_size {dp} x max {cp['max']})")
    cost = _context_parallel_cost(config.get("cost"))
    spec = _mapping(config["samples"] if "samples" in config else _missing("samples"), "samples")
    if "corpus" in spec and cap is None:
        raise ConfigError("samples.corpus: needs context_parallel.max_tokens_per_rank (or seq_len) to size the batch")
    largest = (max(sizes) if sizes else cp["max"]) * (cap or 1)
    raw = _raw_samples(spec, largest, dp * cp["max"] * (cap or 1) * cp.get("micro_batches", 1))
    if isinstance(raw, np.ndarray):
        tokens: Any = raw
        keys: Any = None
    else:
        for i, item in enumerate(raw):
            for extra in ("cost", "budgets"):
                if extra in item:
                    raise ConfigError(f"samples.items[{i}].{extra}: not used with context_parallel (group times "
                                      "come from the cost section)")
        tokens = [item["tokens"] for item in raw]
        keys = [item["key"] for item in raw]
    mapping: dict[str, Any] = {"max": cp["max"], "gpus_per_node": cp["gpus_per_node"]}
    for key, value in (("sizes", sizes), ("min", cp.get("min")), ("max_tokens_per_rank", cap),
                       ("micro_batches", cp.get("micro_batches"))):
        if value is not None:
            mapping[key] = value
    return make_context_parallel_instance(tokens, keys=keys, dp=dp, context_parallel=mapping, cost=cost,
                                          objective=fields["objective"])


def is_context_parallel(config: Any) -> bool:
    """A parsed config with a ``context_parallel`` section (a dynamic-CP instance)."""
    return isinstance(config, Mapping) and config.get("context_parallel") is not None


def load_any_config(path: str | Path) -> BalanceInstance | ContextParallelInstance:
    """:func:`load_config`, or for a config with a ``context_parallel`` section
    :func:`load_context_parallel_config` (what ``packplace balance`` reads)."""
    config = load_yaml(path)
    if is_context_parallel(config):
        return build_context_parallel_instance(config, source=str(path))
    return build_instance(config, source=str(path))


def load_context_parallel_config(path: str | Path) -> ContextParallelInstance:
    """Load a dynamic context-parallel config (a balance config with a ``context_parallel`` section; format
    in :func:`load_config`).

    Raises:
        ConfigError: any bad field (named); the config has no ``context_parallel`` section.
        InfeasibleError: :func:`build_context_parallel_instance`'s.
    """
    config = load_yaml(path)
    if not is_context_parallel(config):
        raise ConfigError(f"context_parallel: missing required section in {path} (a balance config without it "
                          "loads with load_config)")
    return build_context_parallel_instance(config, source=str(path))


def _missing(field: str) -> Any:
    raise ConfigError(f"{field}: missing required field")


def load_config(path: str | Path) -> BalanceInstance:
    """Load a balance YAML config into a validated :class:`BalanceInstance`.

    Format (every field but ``seq_len``, ``data_parallel_size`` and ``samples`` is optional)::

        name: stdlib-llama8b              # label for reports
        seq_len: 8192                     # tokens per bin (pack)
        data_parallel_size: 16            # D ranks
        local_batch_size: 4               # m non-empty bins per rank (default 1), or auto (fewest feasible)
                                          # or {multiple_of: 2, at_least: 4}: auto among those counts
        equal_count: false                # every rank the same number of samples (within one)
        max_samples_per_bin: 16           # at most this many samples per bin (default: no limit)
        groups: [[a, b], [c, d, e]]       # keys that must share a rank (GRPO prompt, DPO pair)
        objective: makespan               # makespan | balance | rounds
        group_size: 4                     # ranks per synchronous round (rounds objective; default D)
        oversized_policy: error           # error | single
        budgets: {vision_tokens: 4096}    # per-bin limits of named budgets
        cost:                             # how sample costs are obtained (default: kind tokens)
          kind: flops                     # flops (model shape) | latency (a + b·s + c·s² s) | tokens | given
          mode: train                     # train (3 × forward) | inference
          model: {layers: 32, hidden_dim: 4096, ffn_dim: 14336, vocab_size: 128256,
                  num_kv_heads: 8, head_dim: 128}
          latency: {a: 0.0, b: 1.0e-6, c: 1.0e-10}
          padding: false                  # charge padding FLOPs of each bin (kind flops only)
        samples:                          # exactly one of:
          lengths: [512, 2048, ...]       #   token counts, keys 0..n-1
          items:                          #   explicit samples (cost required when cost.kind is given)
            - {key: a, tokens: 512, cost: 1.0, budgets: {vision_tokens: 256}}
          corpus:                         #   real lengths: the Python standard library (see balance.corpus)
            name: python_stdlib
            bytes_per_token: 4
            fill: 0.9                     #   take documents until this share of D·m·seq_len is filled
            seed: 0
        reference: auto                   # auto | none | explicit rank-major list of bins of keys

    With a ``context_parallel`` section the config is a dynamic context-parallel instance instead
    (:func:`load_context_parallel_config`; ``packplace balance`` reads both)::

        name: sft-long-tail
        data_parallel_size: 8             # D data-parallel groups
        context_parallel:
          max: 8                          # C: D x C ranks, CP groups of the allowed sizes tile them
          sizes: [1, 2, 4, 8]             # default: the powers of two in [min, max]; each divides D x C
          min: 1
          max_tokens_per_rank: 8192       # a group of c ranks holds c x this (default seq_len, else no cap)
          micro_batches: 4                # default: free
          gpus_per_node: 8
        objective: step_time              # step_time | makespan | balance
        cost:                             # default kind workload: Megatron-Core's s^2/c per rank
          kind: flops                     # the model's compute and ring-attention KV exchange, seconds
          model: {layers: 32, hidden_dim: 4096, ...}
          hardware: h200                  # preset of FLOP/s and NVLink / network figures
        samples: {lengths: [1024, 32768, ...]}   # or items (key, tokens) or corpus

    Raises:
        ConfigError: any bad field (the message names it), a ``reference`` that is not a feasible
            assignment, and every instance-level error of :class:`BalanceInstance`.
        InfeasibleError: the instance-level proofs of :class:`BalanceInstance`.
    """
    return build_instance(load_yaml(path), source=str(path))
