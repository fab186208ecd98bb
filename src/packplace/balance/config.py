"""Balance instances from YAML configs.

Format (every field but ``seq_len``, ``data_parallel_size`` and ``samples`` is optional)::

    name: stdlib-llama8b              # label for reports
    seq_len: 8192                     # tokens per bin (pack)
    data_parallel_size: 16            # D ranks
    local_batch_size: 4               # m non-empty bins per rank (default 1), or auto (fewest feasible)
    equal_count: false                # every rank the same number of samples (within one)
    max_samples_per_bin: 16           # at most this many samples per bin (default: no limit)
    groups: [[a, b], [c, d, e]]       # keys that must share a rank (GRPO prompt, DPO pair)
    objective: makespan               # makespan | balance | rounds
    group_size: 4                     # ranks per synchronous round (rounds objective; default D)
    oversized_policy: error           # error | single
    budgets: {vision_tokens: 4096}    # per-bin limits of named budgets
    cost:                             # how sample costs are obtained (default: kind tokens)
      kind: flops                     # flops (model shape) | latency (a + b·s + c·s² seconds) | tokens | given
      mode: train                     # train (3 × forward) | inference
      model: {layers: 32, hidden_dim: 4096, ffn_dim: 14336, vocab_size: 128256, num_kv_heads: 8, head_dim: 128}
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

``reference: auto`` builds the token-only packing most loaders ship (worst-fit decreasing on tokens,
see :func:`packplace.balance.schema.token_packing_reference`) and keeps it only if it is feasible;
otherwise there is none.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packplace.balance import corpus as corpus_module
from packplace.balance.schema import BalanceInstance, PackingConstraints, Sample, WorkloadCost
from packplace.balance.workload import LatencyModel, ModelShape, padding_cost, sample_cost
from packplace.errors import ConfigError
from packplace.shape import from_hf_config, shape_from_mapping
from packplace.yamlio import load_yaml

TOP_LEVEL = {
    "name", "seq_len", "data_parallel_size", "local_batch_size", "objective", "group_size",
    "oversized_policy", "budgets", "cost", "samples", "reference", "equal_count", "max_samples_per_bin", "groups",
}
COST_KINDS = ("tokens", "flops", "latency", "given")


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{field}: must be a mapping, got {value!r}")
    return value


def _require(section: Mapping[str, Any], key: str, prefix: str = "") -> Any:
    if key not in section:
        raise ConfigError(f"{prefix}{key}: missing required field")
    return section[key]


def _shape(spec: Any) -> ModelShape:
    """The model of ``cost.model``: Hugging Face field names or the older packplace names
    (:func:`packplace.shape.shape_from_mapping`), or ``{hf_config: path/to/config.json}``."""
    spec = _mapping(spec, "cost.model")
    if "hf_config" in spec:
        if len(spec) != 1:
            raise ConfigError(f"cost.model.hf_config: give either hf_config or shape fields, got {sorted(spec)}")
        return from_hf_config(spec["hf_config"])
    return shape_from_mapping(spec, "cost.model.")


def _raw_samples(spec: Any, seq_len: int, capacity: int) -> list[dict[str, Any]]:
    spec = _mapping(spec, "samples")
    given = [k for k in ("lengths", "items", "corpus") if k in spec]
    if len(given) != 1:
        raise ConfigError(f"samples: give exactly one of lengths, items, corpus; got {given or list(spec)}")
    kind = given[0]
    if kind == "lengths":
        lengths = spec["lengths"]
        if not isinstance(lengths, list) or not lengths:
            raise ConfigError(f"samples.lengths: must be a non-empty list of token counts, got {lengths!r}")
        return [{"key": i, "tokens": t} for i, t in enumerate(lengths)]
    if kind == "items":
        items = spec["items"]
        if not isinstance(items, list) or not items:
            raise ConfigError("samples.items: must be a non-empty list of {key, tokens, ...}")
        out = []
        for i, item in enumerate(items):
            item = _mapping(item, f"samples.items[{i}]")
            _require(item, "tokens", f"samples.items[{i}].")
            out.append({"key": item.get("key", i), **{k: v for k, v in item.items() if k != "key"}})
        return out
    corpus = _mapping(spec["corpus"], "samples.corpus")
    name = corpus.get("name", "python_stdlib")
    if name != "python_stdlib":
        raise ConfigError(f"samples.corpus.name: unknown corpus {name!r}; valid: python_stdlib")
    fill = corpus.get("fill", 0.9)
    if not isinstance(fill, (int, float)) or not 0 < fill <= 1:
        raise ConfigError(f"samples.corpus.fill: must be in (0, 1], got {fill!r}")
    documents = corpus_module.split_long(
        corpus_module.stdlib_documents(corpus.get("bytes_per_token", 4.0)), seq_len
    )
    batch = corpus_module.sample_batch(documents, int(fill * capacity), int(corpus.get("seed", 0)))
    return [{"key": d.key, "tokens": d.tokens} for d in batch]


def build_instance(config: Mapping[str, Any], *, source: str = "<dict>") -> BalanceInstance:
    """Build and validate a :class:`BalanceInstance` from a parsed config (format in the module docstring).

    Raises:
        ConfigError: a missing or invalid field, named in the message.
    """
    config = _mapping(config, source)
    unknown = sorted(set(config) - TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown field; valid: {', '.join(sorted(TOP_LEVEL))}")
    seq_len = _require(config, "seq_len")
    ranks = _require(config, "data_parallel_size")
    per_rank = config.get("local_batch_size", 1)
    constraints = PackingConstraints(
        seq_len, config.get("budgets") or {}, config.get("oversized_policy", "error")
    )
    for field, value in (("data_parallel_size", ranks), ("local_batch_size", per_rank)):
        if field == "local_batch_size" and value == "auto":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{field}: must be an integer >= 1{' or auto' if field == 'local_batch_size' else ''}, "
                              f"got {value!r}")
    capacity_bins = ranks * (1 if per_rank == "auto" else per_rank)
    raw = _raw_samples(_require(config, "samples"), seq_len, capacity_bins * seq_len)

    cost_spec = _mapping(config.get("cost") or {"kind": "tokens"}, "cost")
    kind = cost_spec.get("kind", "tokens")
    if kind not in COST_KINDS:
        raise ConfigError(f"cost.kind: must be one of {', '.join(COST_KINDS)}, got {kind!r}")
    mode = cost_spec.get("mode", "train")
    padding = None
    if kind == "flops":
        shape = _shape(_require(cost_spec, "model", "cost."))
        estimate = lambda tokens: sample_cost(tokens, shape, mode)  # noqa: E731
        if cost_spec.get("padding", False):
            padding = padding_cost(shape, mode)
    elif kind == "latency":
        latency = LatencyModel(**_mapping(_require(cost_spec, "latency", "cost."), "cost.latency"))
        estimate = latency.cost
    elif kind == "tokens":
        estimate = lambda tokens: WorkloadCost(llm=float(tokens))  # noqa: E731
    else:
        estimate = None

    samples = []
    for i, item in enumerate(raw):
        tokens = item["tokens"]
        if "cost" in item:
            cost = item["cost"]
        elif estimate is None:
            raise ConfigError(f"samples.items[{i}].cost: missing (cost.kind is 'given')")
        else:
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
                raise ConfigError(f"sample {item['key']!r}: tokens must be an integer >= 1, got {tokens!r}")
            cost = estimate(tokens)
        samples.append(Sample(item["key"], tokens, cost, item.get("budgets") or {}))

    reference = config.get("reference", "auto")
    if reference == "auto":
        reference_bins = "auto"
    elif reference in (None, "none"):
        reference_bins = None
    elif isinstance(reference, list):
        reference_bins = tuple(tuple(b) for b in reference)
    else:
        raise ConfigError(f"reference: must be auto, none or a list of bins, got {reference!r}")

    return BalanceInstance(
        tuple(samples), constraints, ranks, per_rank,
        reference_bins=reference_bins,
        objective=config.get("objective", "makespan"),
        group_size=config.get("group_size"),
        padding_cost=padding,
        equal_count=config.get("equal_count", False),
        max_samples_per_bin=config.get("max_samples_per_bin"),
        groups=config.get("groups") or (),
        name=str(config.get("name", Path(source).stem if source != "<dict>" else "")),
        cost_unit={"flops": "FLOPs", "latency": "s", "tokens": "tokens"}.get(kind, "cost"),
    )


def load_config(path: str | Path) -> BalanceInstance:
    """Load a balance YAML config (see the module docstring). Raises ConfigError on any bad field."""
    return build_instance(load_yaml(path), source=str(path))
