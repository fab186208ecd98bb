"""Load and validate a placement config (YAML sections ``hardware``, ``models``, ``workload``,
``policy``, ``optimizer``; DESIGN §3) into a :class:`PlacementInstance`.

Every problem is a :class:`~packplace.errors.ConfigError` with a one-line message that starts with
``[section] field``. Bare scientific notation such as ``989e12`` loads as a float (plain PyYAML would
read it as a string).

Range checks beyond types (each documented where its constant is defined): ``flops_per_gpu``,
``memory_per_gpu``, ``memory_bandwidth`` ≥ 1e6; ``gemm_peak_fraction`` and ``decode_bw_eff`` in (0, 1];
``context_length`` and ``generation_length`` ≤ 1e7 tokens; ``batch_size · samples_per_prompt`` ≤ 1e12;
``[optimizer]`` keys limited to :data:`OPTIMIZER_KEYS`, every knob's type and range checked against
:data:`OPTIMIZER_KNOBS` (e.g. ``[optimizer] e_max: must be an integer >= 1, got -5``), and
``staleness_candidates`` only for models the algorithm trains.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packplace.errors import ConfigError
from packplace.placement.engine import BATCHING, DEFAULT_MAX_NUM_SEQS, RolloutEngine
from packplace.placement.graph import ALGORITHMS, StepGraph, build_graph
from packplace.placement.hardware import HARDWARE_DEFAULTS, HARDWARE_REQUIRED, Cluster, Hardware, resolve_preset
from packplace.placement.models import LM_ROLES, ModelSpec
from packplace.placement.workload import Workload
from packplace.shape import from_hf_config, shape_from_mapping
from packplace.yamlio import load_yaml as _shared_load_yaml

#: Model roles each algorithm needs in ``[models]`` (the reference copies the actor).
REQUIRED_ROLES = {"ppo": ("actor", "critic", "reward"), "grpo": ("actor", "reward"), "dpo": ("actor",)}
#: Models whose staleness the optimizer may choose.
STALENESS_KEYS = ("actor", "critic", "ac_share")
#: Staleness keys each algorithm has (``critic`` and the fused ``ac_share`` exist only in PPO).
TRAINABLE = {"ppo": ("actor", "critic", "ac_share"), "grpo": ("actor",), "dpo": ("actor",)}
WORKLOAD_REQUIRED = ("batch_size", "samples_per_prompt", "context_length", "generation_length")
WORKLOAD_OPTIONAL = ("gen_quantiles",)
#: Knobs of the ``[optimizer]`` section other than ``staleness_candidates``: name → (kind, default, meaning).
#: Kinds: ``"int>=1"`` (an integer ≥ 1; an integral float such as ``5e4`` — YAML scientific notation loads
#: as float — is accepted as that integer), ``"float>0"`` (a finite number > 0, stored as float),
#: ``"bool"`` (``true``/``false`` only, not 0/1). Cross-field rule: ``t_min <= t_init``. Every knob is
#: checked at config load (:func:`validate_optimizer_knobs`) and the instance's ``optimizer`` holds all of
#: them with defaults filled, so backends read validated values; keyword overrides of ``packplace.place``
#: go through the same function (:func:`resolve_optimizer_knobs`). The annealing knobs are used by
#: ``solvers/placement/anneal.py`` (its docstring explains them); ``k_eval`` by the candidate table, the
#: search pools and cpsat; ``progress_s`` by anneal and cpsat.
OPTIMIZER_KNOBS: dict[str, tuple[str, Any, str]] = {
    "k_eval": ("int>=1", 8, "candidates per vertex and block shape kept for search"),
    "t_init": ("float>0", 0.30, "anneal: starting temperature (fraction of the current step time)"),
    "t_min": ("float>0", 0.03, "anneal: final temperature (<= t_init)"),
    "t_warm": ("float>0", 0.10, "anneal: reheat temperature of a restart from the best plan"),
    "e_max": ("int>=1", 50_000, "anneal: evaluation budget (distinct plans scored)"),
    "e_struct": ("int>=1", 400, "anneal: proposals per temperature level"),
    "stag_window": ("int>=1", 20, "anneal: plateaus without a new best before a restart"),
    "hard_oom": ("bool", True, "anneal: out-of-memory plans are rejected (false: penalised)"),
    "oom_penalty": ("float>0", 4.0, "anneal: penalty weight when hard_oom is false"),
    "polish": ("bool", True, "anneal: final greedy descent"),
    "progress_s": ("float>0", 3.0, "anneal, cpsat: seconds between progress lines on stderr"),
}
#: Default ``optimizer`` values (every knob of :data:`OPTIMIZER_KNOBS`).
OPTIMIZER_DEFAULTS = {name: default for name, (_, default, _) in OPTIMIZER_KNOBS.items()}
#: Every key the ``[optimizer]`` section may hold: the knobs and ``staleness_candidates``.
OPTIMIZER_KEYS = ("k_eval", "staleness_candidates") + tuple(k for k in OPTIMIZER_KNOBS if k != "k_eval")
#: Hardware figures that must be at least this large (FLOP/s, bytes, bytes/s): smaller values are not a
#: GPU and only make every predicted time astronomically large.
HARDWARE_MINIMUM = {"flops_per_gpu": 1e6, "memory_per_gpu": 1e6, "memory_bandwidth": 1e6}
#: Hardware knobs that are fractions in (0, 1].
HARDWARE_FRACTIONS = ("gemm_peak_fraction", "decode_bw_eff")
#: Upper limits of the workload (tokens, sequences): beyond them the model is meaningless (no GPU holds
#: such a sequence) and they keep the candidate enumeration and the decode sums bounded.
WORKLOAD_MAXIMUM = {"context_length": 10_000_000, "generation_length": 10_000_000}
#: Upper limit of ``batch_size · samples_per_prompt`` (sequences per step).
MAX_SEQUENCES = 10**12


@dataclass(frozen=True, eq=False)
class PlacementInstance:
    """A validated placement problem.

    Attributes:
        cluster: The device grid.
        hardware: Per-GPU figures and the α–β link model.
        models: Role → shape; always contains ``reference`` (= the actor's architecture).
        workload: Batch and response-length distribution.
        algorithm: ``ppo``, ``grpo`` or ``dpo``.
        graph: The step graph of ``algorithm``.
        optimizer: The ``[optimizer]`` section, validated, every knob of :data:`OPTIMIZER_KNOBS` present
            (defaults filled), ``staleness_candidates`` as ``{model: (0, 1, ...)}``.
        source: Where it came from (a path or ``"<dict>"``).
        engine: The rollout engine's batching (``policy.batching``, ``policy.max_num_seqs``).
    """

    cluster: Cluster
    hardware: Hardware
    models: Mapping[str, ModelSpec]
    workload: Workload
    algorithm: str
    graph: StepGraph
    optimizer: Mapping[str, Any]
    source: str = "<dict>"
    engine: RolloutEngine = field(default_factory=RolloutEngine)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_gpus(self) -> int:
        """GPUs in the cluster."""
        return self.cluster.num_gpus

    @property
    def k_eval(self) -> int:
        """Candidates per vertex kept for search."""
        return int(self.optimizer["k_eval"])


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML file with bare scientific notation as floats (:func:`packplace.yamlio.load_yaml`).

    Raises:
        ConfigError: missing file, YAML syntax error, or a top level that is not a mapping.
    """
    data = _shared_load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"config: {str(path)!r} must be a mapping of sections, got {type(data).__name__}")
    return data


def load_config(path: str | Path) -> PlacementInstance:
    """Load and validate a placement YAML config.

    Raises:
        ConfigError: ``[section] field ...`` for the first missing or invalid field.
    """
    return build_instance(load_yaml(path), source=str(path))


def _section(cfg: Mapping[str, Any], name: str, required: bool = True) -> dict[str, Any]:
    if name not in cfg or cfg[name] is None:
        if required:
            raise ConfigError(f"[{name}] Missing required section: '{name}'")
        return {}
    value = cfg[name]
    if not isinstance(value, Mapping):
        raise ConfigError(f"[{name}] must be a mapping, got {type(value).__name__} {value!r}")
    return dict(value)


def _require(section: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if key not in section:
            raise ConfigError(f"[{where}] Missing required field: '{key}'")


def _no_unknown(section: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    for key in section:
        if key not in valid:
            raise ConfigError(f"[{where}] Unknown field: {key!r}; valid fields: {', '.join(valid)}")


def _int(section: Mapping[str, Any], key: str, where: str, minimum: int = 1) -> int:
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ConfigError(f"[{where}] {key}: must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"[{where}] {key}: must be >= {minimum}, got {value!r}")
    return value


def _float(section: Mapping[str, Any], key: str, where: str, *, positive: bool) -> float:
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"[{where}] {key}: must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(f"[{where}] {key}: must be > 0, got {value!r}")
    if not positive and value < 0:
        raise ConfigError(f"[{where}] {key}: must be >= 0, got {value!r}")
    return float(value)


def _hardware(hw: dict[str, Any]) -> tuple[Cluster, Hardware]:
    _no_unknown(hw, HARDWARE_REQUIRED + tuple(HARDWARE_DEFAULTS) + ("preset",), "hardware")
    hw = resolve_preset(hw)
    _require(hw, HARDWARE_REQUIRED, "hardware")
    cluster = Cluster(_int(hw, "racks", "hardware"), _int(hw, "nodes_per_rack", "hardware"),
                      _int(hw, "gpus_per_node", "hardware"))
    values: dict[str, float] = {}
    for key in HARDWARE_REQUIRED[3:]:
        values[key] = _float(hw, key, "hardware", positive=not key.startswith(("alpha", "beta")))
        if key in HARDWARE_MINIMUM and values[key] < HARDWARE_MINIMUM[key]:
            raise ConfigError(f"[hardware] {key}: must be >= {HARDWARE_MINIMUM[key]:g}, got {hw[key]!r}")
    for key, default in HARDWARE_DEFAULTS.items():
        if key in hw:
            values[key] = _float(hw, key, "hardware",
                                 positive=key in HARDWARE_FRACTIONS + ("non_gemm_batch_cal", "host_bandwidth"))
        else:
            values[key] = default
    for key in HARDWARE_FRACTIONS:
        if values[key] > 1:
            raise ConfigError(f"[hardware] {key}: must be in (0, 1], got {hw[key]!r}")
    return cluster, Hardware(**values)


def _model(role: str, spec: Any, source: str) -> ModelSpec:
    """The shape of ``models.<role>``: Hugging Face ``config.json`` field names or the older packplace
    names (:func:`packplace.shape.shape_from_mapping`), or ``{hf_config: path}`` to read a
    ``config.json`` (a relative path is taken from the YAML file's directory). A critic or reward model
    gets a scalar value head instead of the LM head."""
    where = f"models.{role}"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"[{where}] must be a mapping of shape fields, got {spec!r}")
    if "hf_config" in spec:
        if len(spec) != 1:
            raise ConfigError(f"[{where}] hf_config: give either hf_config or shape fields, got {sorted(spec)}")
        path = Path(str(spec["hf_config"]))
        if not path.is_absolute() and source != "<dict>":
            path = Path(source).parent / path
        try:
            shape = from_hf_config(path)
        except ConfigError as exc:
            raise ConfigError(f"[{where}] hf_config: {exc}") from None
    else:
        shape = shape_from_mapping(spec, f"[{where}] ")
    return shape if role in LM_ROLES else shape.value_head()


def _workload(w: dict[str, Any]) -> Workload:
    _no_unknown(w, WORKLOAD_REQUIRED + WORKLOAD_OPTIONAL, "workload")
    _require(w, WORKLOAD_REQUIRED, "workload")
    b, k, s, t = (_int(w, key, "workload") for key in WORKLOAD_REQUIRED)
    for key, value in (("context_length", s), ("generation_length", t)):
        if value > WORKLOAD_MAXIMUM[key]:
            raise ConfigError(f"[workload] {key}: must be <= {WORKLOAD_MAXIMUM[key]:.0e} tokens, got {w[key]!r}")
    if b * k > MAX_SEQUENCES:
        raise ConfigError(f"[workload] batch_size: batch_size * samples_per_prompt = {b * k} sequences per step; "
                          f"must be <= {MAX_SEQUENCES:.0e}")
    quantiles = None
    raw = w.get("gen_quantiles")
    if raw is not None:
        if not isinstance(raw, list) or not raw:
            raise ConfigError(f"[workload] gen_quantiles: must be a non-empty list of [q, tokens], got {raw!r}")
        points = []
        last_q, last_t = 0.0, 0.0
        for item in raw:
            if (not isinstance(item, (list, tuple)) or len(item) != 2
                    or any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in item)):
                raise ConfigError(f"[workload] gen_quantiles: each entry must be [q, tokens], got {item!r}")
            q, tokens = float(item[0]), float(item[1])
            if not (last_q < q <= 1.0):
                raise ConfigError(f"[workload] gen_quantiles: quantiles must increase within (0, 1], got {item!r}")
            if not (last_t <= tokens <= t) or tokens < 1:
                raise ConfigError(f"[workload] gen_quantiles: tokens must be non-decreasing in [1, "
                                  f"generation_length={t}], got {item!r}")
            points.append((q, tokens))
            last_q, last_t = q, tokens
        quantiles = tuple(points)
    return Workload(b, k, s, t, quantiles)


def _engine(policy: dict[str, Any]) -> RolloutEngine:
    batching = policy.get("batching", "continuous")
    if batching not in BATCHING:
        raise ConfigError(f"[policy] batching: unknown {batching!r}; valid: {', '.join(BATCHING)}")
    max_num_seqs = _int(policy, "max_num_seqs", "policy") if "max_num_seqs" in policy else DEFAULT_MAX_NUM_SEQS
    return RolloutEngine(batching, max_num_seqs)


def _knob_value(name: str, value: Any, where: str) -> Any:
    kind = OPTIMIZER_KNOBS[name][0]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"[{where}] {name}: must be true or false, got {value!r}")
        return value
    numeric = not isinstance(value, bool) and isinstance(value, (int, float))
    if kind == "int>=1":
        if numeric and isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not numeric or not isinstance(value, int) or value < 1:
            raise ConfigError(f"[{where}] {name}: must be an integer >= 1, got {value!r}")
        return value
    if not numeric or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"[{where}] {name}: must be a finite number > 0, got {value!r}")
    return float(value)


def validate_optimizer_knobs(values: Mapping[str, Any], base: Mapping[str, Any] | None = None, *,
                             where: str = "optimizer") -> dict[str, Any]:
    """Check knob values against :data:`OPTIMIZER_KNOBS` and merge them over ``base``.

    Args:
        values: ``{knob: value}`` to check (keys outside :data:`OPTIMIZER_KNOBS` are errors).
        base: Already validated knobs the values override (default :data:`OPTIMIZER_DEFAULTS`).
        where: Section name used in messages.

    Returns:
        Every knob, validated and normalised (integral floats → int, numbers → float), ``values`` winning.

    Raises:
        ConfigError: ``[optimizer] e_max: must be an integer >= 1, got -5`` and the like; an unknown knob
            (lists the valid ones); ``t_min`` above ``t_init`` after merging.
    """
    for name in values:
        if name not in OPTIMIZER_KNOBS:
            raise ConfigError(f"[{where}] {name}: unknown optimizer knob; valid: {', '.join(OPTIMIZER_KNOBS)}")
    out = {name: (base or OPTIMIZER_DEFAULTS).get(name, default) for name, default in OPTIMIZER_DEFAULTS.items()}
    for name, value in values.items():
        out[name] = _knob_value(name, value, where)
    if out["t_min"] > out["t_init"]:
        raise ConfigError(f"[{where}] t_min: must be <= t_init ({out['t_init']}), got {out['t_min']!r}")
    return out


def resolve_optimizer_knobs(optimizer: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs of an instance's validated ``optimizer`` section with keyword ``overrides`` applied (each
    override validated by :func:`validate_optimizer_knobs`; the section's values are not re-checked).

    Raises:
        ConfigError: as :func:`validate_optimizer_knobs`.
    """
    return validate_optimizer_knobs(overrides, base=optimizer)


def _optimizer(o: dict[str, Any], algorithm: str) -> dict[str, Any]:
    _no_unknown(o, OPTIMIZER_KEYS, "optimizer")
    out = validate_optimizer_knobs({k: v for k, v in o.items() if k != "staleness_candidates"})
    trainable = TRAINABLE[algorithm]
    stale: dict[str, tuple[int, ...]] = {name: (0,) for name in trainable}
    raw = o.get("staleness_candidates")
    if raw is not None:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"[optimizer] staleness_candidates: must be a mapping, got {raw!r}")
        for name, values in raw.items():
            if name not in STALENESS_KEYS:
                raise ConfigError(f"[optimizer.staleness_candidates] Unknown model {name!r}; valid names: "
                                  f"{', '.join(STALENESS_KEYS)}")
            if (not isinstance(values, list) or not values
                    or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in values)):
                raise ConfigError(f"[optimizer.staleness_candidates] {name}: must be a non-empty list of "
                                  f"integers >= 0, got {values!r}")
            if name not in trainable:
                raise ConfigError(f"[optimizer.staleness_candidates] {name}: {algorithm} has no {name} to make "
                                  f"stale; valid for {algorithm}: {', '.join(trainable)}")
            stale[name] = tuple(sorted(set(values)))
    out["staleness_candidates"] = stale
    return out


def build_instance(config: Mapping[str, Any], *, source: str = "<dict>") -> PlacementInstance:
    """Validate a config mapping (the parsed YAML) and build the instance.

    Raises:
        ConfigError: missing section or field, wrong type or range, unknown algorithm, model role,
            field or staleness key (the message lists the valid ones).
    """
    if not isinstance(config, Mapping):
        raise ConfigError(f"config: must be a mapping of sections, got {type(config).__name__}")
    for key in config:
        if key not in ("hardware", "models", "workload", "policy", "optimizer"):
            raise ConfigError(f"[{key}] Unknown section; valid: hardware, models, workload, policy, optimizer")
    cluster, hardware = _hardware(_section(config, "hardware"))
    policy = _section(config, "policy", required=False)
    _no_unknown(policy, ("algorithm", "batching", "max_num_seqs"), "policy")
    engine = _engine(policy)
    algorithm = policy.get("algorithm", "ppo")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"[policy] algorithm: unknown {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    models_cfg = _section(config, "models")
    required = REQUIRED_ROLES[algorithm]
    if "reference" in models_cfg:
        raise ConfigError("[models] reference: the reference model always has the actor's architecture; "
                          "remove this entry")
    for role in models_cfg:
        if role not in ("actor", "critic", "reward"):
            raise ConfigError(f"[models] Unknown role {role!r}; valid roles: actor, critic, reward")
    _require(models_cfg, required, "models")
    models = {role: _model(role, models_cfg[role], source) for role in required}
    models["reference"] = models["actor"]
    workload = _workload(_section(config, "workload"))
    optimizer = _optimizer(_section(config, "optimizer", required=False), algorithm)
    return PlacementInstance(cluster, hardware, models, workload, algorithm, build_graph(algorithm),
                             optimizer, source, engine)
