"""Seeded generators of balance instances for the harness.

Every generator is a pure function of its arguments: the same parameters and ``seed`` give the same
instance (numpy ``default_rng(seed)``), on every machine.

* :func:`sample_lengths` — token lengths from a truncated ``uniform``, ``lognormal`` or ``bimodal``
  distribution (:data:`DISTRIBUTIONS` with their defaults).
* :func:`cost_function` — sample costs ``tokens``, ``attention`` or ``flops`` (:data:`COSTS`) from the
  workload model of :mod:`packplace.balance.workload` (default shape Llama-3.1-8B).
* :func:`generate_balance` — an instance of drawn lengths with the strided reference grouping.
* :func:`corpus_instance` — a config's instance, subsampled and re-laid out.
* :func:`planted_balance` — a perfect packing cut into samples, with its planted layout and (for
  linear costs or replicated ranks) its known optimum.
* :func:`generate_context_parallel` — a dynamic context-parallel instance of drawn lengths (default a
  long-tailed 1K-32K mix) on ``dp × max_cp`` ranks, costed for a model on a hardware preset.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from packplace.balance.config import load_config
from packplace.balance.evaluator import BalanceEvaluator
from packplace.balance.instance import check_reference_bins
from packplace.balance.reference import default_reference_bins
from packplace.balance.schema import BalanceInstance, PackingConstraints, Sample
from packplace.balance.workload import ModelShape, sample_cost
from packplace.errors import ConfigError

#: Distribution name → its parameters and their defaults.
DISTRIBUTIONS: dict[str, dict[str, float]] = {
    "uniform": {"low": 1, "high": None},  # high defaults to max_tokens
    "lognormal": {"mu": 7.49, "sigma": 1.56},
    "bimodal": {"short_mu": 5.5, "short_sigma": 0.6, "long_mu": 8.3, "long_sigma": 0.4, "long_fraction": 0.2},
}

COSTS = ("tokens", "attention", "flops")

#: Llama-3.1-8B (Meta 2024, "The Llama 3 Herd of Models", Table 3).
LLAMA_31_8B = {"layers": 32, "hidden_dim": 4096, "ffn_dim": 14336, "vocab_size": 128256, "num_kv_heads": 8,
               "head_dim": 128}

_MAX_REDRAW_ROUNDS = 10_000


def _int_param(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return value


def _float_param(value: Any, name: str, *, positive: bool = False, unit: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name}: must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise ConfigError(f"{name}: must be > 0, got {value!r}")
    if unit and not 0 <= value <= 1:
        raise ConfigError(f"{name}: must be in [0, 1], got {value!r}")
    return float(value)


def sample_lengths(
    distribution: str,
    n: int,
    *,
    seed: int = 0,
    min_tokens: int = 1,
    max_tokens: int,
    **params: float,
) -> np.ndarray:
    """Draw ``n`` token lengths from a named distribution, truncated to a range.

    Length distributions (``tokens`` per sample, integers in ``[min_tokens, max_tokens]``,
    ``max_tokens`` defaulting to ``seq_len``; draws outside the range are redrawn, i.e. the
    distribution is *truncated*, not clipped, so no artificial spike forms at ``seq_len``):

    * ``uniform`` — uniform integers in ``[low, high]``.
    * ``lognormal`` — ``exp(N(mu, sigma²))``, a long right tail. Default ``mu = 7.49``, ``sigma = 1.56``
      are the maximum-likelihood fit (mean and standard deviation of ``ln tokens``) to
      the real corpus packplace ships (``packplace.balance.corpus``: the 598 source files of the CPython
      3.11 standard library, tokens estimated as bytes/4; median 2,492 tokens, 99th percentile 27k,
      maximum 189k). No published dataset statistics are used; the fit is to that corpus.
    * ``bimodal`` — a mixture of two lognormals: a short mode (``short_mu``, ``short_sigma``; default
      median e^5.5 ≈ 245 tokens, chat turns / instructions) and a long mode (``long_mu``,
      ``long_sigma``; default median e^8.3 ≈ 4k tokens, documents / long reasoning traces) with
      ``long_fraction`` of samples in the long mode (default 0.2). These defaults are **illustrative**,
      chosen to show the hard case for greedy packing (a few long samples dominating rank loads), not
      fitted to a dataset.

    Args:
        distribution: ``uniform``, ``lognormal`` or ``bimodal``.
        n: Number of samples.
        seed: numpy ``default_rng`` seed.
        min_tokens, max_tokens: Inclusive range of the lengths (draws outside it are redrawn).
        **params: The distribution's parameters (see :data:`DISTRIBUTIONS`); missing ones take defaults.

    Returns:
        int64 array of shape (n,), every value in ``[min_tokens, max_tokens]``.

    Raises:
        ConfigError: unknown distribution or parameter, bad value, or a range that holds no draw.
    """
    if distribution not in DISTRIBUTIONS:
        raise ConfigError(f"distribution: unknown {distribution!r}; valid: {', '.join(DISTRIBUTIONS)}")
    n = _int_param(n, "n")
    min_tokens = _int_param(min_tokens, "min_tokens")
    max_tokens = _int_param(max_tokens, "max_tokens")
    if max_tokens < min_tokens:
        raise ConfigError(f"max_tokens: {max_tokens} is below min_tokens {min_tokens}")
    defaults = DISTRIBUTIONS[distribution]
    unknown = sorted(set(params) - set(defaults), key=str)
    if unknown:
        raise ConfigError(
            f"{distribution}.{unknown[0]}: unknown parameter; valid: {', '.join(defaults)}"
        )
    p = {**defaults, **params}
    rng = np.random.default_rng(seed)

    if distribution == "uniform":
        low = _int_param(p["low"], "uniform.low")
        high = max_tokens if p["high"] is None else _int_param(p["high"], "uniform.high")
        if high < low:
            raise ConfigError(f"uniform.high: {high} is below low {low}")
        low, high = max(low, min_tokens), min(high, max_tokens)
        if high < low:
            raise ConfigError(
                f"uniform: [low, high] does not meet [min_tokens, max_tokens] = [{min_tokens}, {max_tokens}]"
            )
        return rng.integers(low, high, size=n, endpoint=True, dtype=np.int64)

    if distribution == "lognormal":
        mu = _float_param(p["mu"], "lognormal.mu")
        sigma = _float_param(p["sigma"], "lognormal.sigma", positive=True)

        def draw(k: int) -> np.ndarray:
            return rng.lognormal(mu, sigma, size=k)
    else:
        short = (_float_param(p["short_mu"], "bimodal.short_mu"),
                 _float_param(p["short_sigma"], "bimodal.short_sigma", positive=True))
        long = (_float_param(p["long_mu"], "bimodal.long_mu"),
                _float_param(p["long_sigma"], "bimodal.long_sigma", positive=True))
        fraction = _float_param(p["long_fraction"], "bimodal.long_fraction", unit=True)

        def draw(k: int) -> np.ndarray:
            is_long = rng.random(size=k) < fraction
            values = rng.lognormal(short[0], short[1], size=k)
            values[is_long] = rng.lognormal(long[0], long[1], size=int(is_long.sum()))
            return values

    out = np.empty(0, dtype=np.int64)
    for _ in range(_MAX_REDRAW_ROUNDS):
        drawn = np.rint(draw(max(n - out.size, 16))).astype(np.int64)
        kept = drawn[(drawn >= min_tokens) & (drawn <= max_tokens)]
        out = np.concatenate([out, kept])[:n]
        if out.size == n:
            return out
    raise ConfigError(
        f"{distribution}: almost no draws fall in [min_tokens, max_tokens] = [{min_tokens}, {max_tokens}]; "
        f"adjust the parameters or the range"
    )


def cost_function(cost: str = "tokens", model: Mapping[str, int] | None = None) -> Callable[[int], float]:
    """``f(tokens) -> llm cost`` for a cost name of :data:`COSTS`.

    Costs (``cost=``), all from the token count ``s``:

    * ``tokens`` — ``cost = s`` (linear workload).
    * ``attention`` — a super-linear proxy in token-equivalents: ``cost = s + s²/s₀`` with
      ``s₀ = linear_flops_per_token / (2·L·d)``, the length at which the attention term of the workload model
      equals the matmul term (Llama-3.1-8B shape by default: s₀ = 57,256 tokens). It is
      ``F_fwd(s) / linear_flops_per_token`` of :mod:`packplace.balance.workload`.
    * ``flops`` — ``3·F_fwd(s)`` training FLOPs of :func:`packplace.balance.workload.sample_cost`
      (numbers ~1e9–1e15, which exercise the exact solver's integer scaling).

    The model shape for ``attention``/``flops`` is ``model={layers, hidden_dim, ffn_dim, vocab_size,
    num_kv_heads, head_dim}``; default Llama-3.1-8B (32 layers, hidden 4096, FFN 14336, vocab 128256,
    8 KV heads of 128; Meta, "The Llama 3 Herd of Models", 2024, Table 3).

    Raises:
        ConfigError: unknown cost name or a bad model shape.
    """
    if cost not in COSTS:
        raise ConfigError(f"cost: unknown {cost!r}; valid: {', '.join(COSTS)}")
    if cost == "tokens":
        return float
    shape_fields = dict(LLAMA_31_8B if model is None else model)
    try:
        shape = ModelShape(**shape_fields)
    except TypeError as exc:
        raise ConfigError(f"model: {exc}") from None
    if cost == "flops":
        return lambda s: sample_cost(int(s), shape, "train").llm
    per_token = shape.linear_flops_per_token()
    return lambda s: shape.forward_flops(int(s)) / per_token


def strided_reference(tokens: np.ndarray, keys: list, ranks: int, bins_per_rank: int, seq_len: int):
    """The strided sampler grouping (sample i → bin i mod D·m) if every bin fits ``seq_len``, else None."""
    bins = ranks * bins_per_rank
    totals = np.bincount(np.arange(len(keys)) % bins, weights=tokens, minlength=bins)
    if len(keys) < bins or totals.max() > seq_len:
        return None
    return default_reference_bins(keys, ranks, bins_per_rank)


def generate_balance(
    distribution: str,
    *,
    n: int,
    ranks: int,
    seq_len: int,
    bins_per_rank: int = 1,
    seed: int = 0,
    objective: str = "makespan",
    group_size: int | None = None,
    cost: str = "tokens",
    model: Mapping[str, int] | None = None,
    min_tokens: int = 1,
    max_tokens: int | None = None,
    name: str = "",
    **params: float,
) -> BalanceInstance:
    """A balance instance with ``n`` samples drawn from ``distribution``.

    Args:
        distribution: ``uniform``, ``lognormal`` or ``bimodal`` (parameters in ``**params``).
        n: Number of samples (keys 0..n-1).
        ranks: D, data-parallel ranks.
        seq_len: Token capacity of a bin.
        bins_per_rank: m, bins (micro-batches) per rank.
        seed: Random seed of the lengths.
        objective: ``makespan``, ``balance``, ``rounds`` or ``lockstep``; ``group_size`` g for ``rounds``.
        cost: ``tokens``, ``attention`` or ``flops`` (:func:`cost_function`); ``model`` the shape for the latter two.
        min_tokens, max_tokens: Range of lengths (``max_tokens`` defaults to ``seq_len``).
        name: Label of the instance.

    Returns:
        A validated :class:`BalanceInstance`. Its ``reference_bins`` is the strided grouping a
        distributed sampler gives (sample i to bin i mod D·m) when every such bin fits ``seq_len``,
        else ``None`` (the ``reference`` solver then reports ``unknown``).

    Raises:
        ConfigError: bad parameter, or lengths whose total exceeds the D·m·seq_len capacity.
    """
    seq_len = _int_param(seq_len, "seq_len")
    ranks = _int_param(ranks, "ranks")
    bins_per_rank = _int_param(bins_per_rank, "bins_per_rank")
    max_tokens = seq_len if max_tokens is None else _int_param(max_tokens, "max_tokens")
    lengths = sample_lengths(distribution, n, seed=seed, min_tokens=min_tokens, max_tokens=max_tokens, **params)
    price = cost_function(cost, model)
    keys = list(range(n))
    samples = tuple(Sample(k, int(t), price(int(t))) for k, t in zip(keys, lengths))
    reference = strided_reference(lengths, keys, ranks, bins_per_rank, seq_len)
    return check_reference_bins(BalanceInstance(
        samples, PackingConstraints(seq_len), ranks, bins_per_rank, reference_bins=reference,
        objective=objective, group_size=group_size, name=name or f"{distribution}-n{n}-D{ranks}-s{seed}",
    ))


def corpus_instance(
    config: str | Path,
    *,
    n: int | None = None,
    seed: int = 0,
    ranks: int | None = None,
    bins_per_rank: int | None = None,
    objective: str | None = None,
    group_size: int | None = None,
    name: str = "",
) -> BalanceInstance:
    """The instance of a balance config file, optionally subsampled and re-laid out.

    Args:
        config: Path of a balance YAML config (loaded by ``packplace.balance.config.load_config``).
        n: Keep a seeded random subset of ``n`` samples (input order preserved); ``None`` keeps all.
        seed: Seed of the subset (numpy ``default_rng``).
        ranks, bins_per_rank, objective, group_size: Overrides of the config's layout and objective.
        name: Label (default: the config's name, with ``-n{n}-s{seed}`` when subsampled).

    When samples are dropped or the layout changes, the config's ``reference_bins`` no longer apply;
    the strided grouping replaces them where it fits (see :func:`strided_reference`). Costs and the
    padding cost are the config's.

    Raises:
        ConfigError: the config's own errors, ``n`` larger than the corpus, or an infeasible layout.
    """
    base = load_config(config)
    samples = base.samples
    changed = False
    if n is not None:
        n = _int_param(n, "n")
        if n > len(samples):
            raise ConfigError(f"n: {n} exceeds the {len(samples)} samples of {str(config)!r}")
        if n < len(samples):
            chosen = np.sort(np.random.default_rng(seed).choice(len(samples), size=n, replace=False))
            samples = tuple(samples[i] for i in chosen)
            changed = True
    layout = {
        "data_parallel_size": base.data_parallel_size if ranks is None else _int_param(ranks, "ranks"),
        "local_batch_size": (
            base.local_batch_size if bins_per_rank is None else _int_param(bins_per_rank, "bins_per_rank")
        ),
    }
    changed = changed or layout["data_parallel_size"] != base.data_parallel_size
    changed = changed or layout["local_batch_size"] != base.local_batch_size
    reference = base.reference_bins
    if changed:
        tokens = np.array([s.tokens for s in samples], dtype=np.int64)
        reference = strided_reference(tokens, [s.key for s in samples], layout["data_parallel_size"],
                                      layout["local_batch_size"], base.constraints.seq_len)
    new_objective = base.objective if objective is None else objective
    if group_size is None:
        group = base.group_size if layout["data_parallel_size"] == base.data_parallel_size else None
    else:
        group = group_size
    label = name or (base.name or Path(config).stem) + (f"-n{n}-s{seed}" if n is not None else "")
    return check_reference_bins(dataclasses.replace(
        base, samples=samples, reference_bins=reference, objective=new_objective, group_size=group,
        name=label, **layout,
    ))


@dataclasses.dataclass(frozen=True)
class PlantedBalance:
    """A planted instance with its planted layout (see :func:`planted_balance`).

    Attributes:
        instance: The :class:`BalanceInstance` (samples in shuffled order, keys 0..n-1).
        bins: The planted layout: D·m bins of keys, rank-major (rank r owns bins r·m … r·m + m − 1);
            every bin holds exactly ``bin_tokens`` tokens.
        bin_tokens: F = floor(fill · seq_len), the tokens of every planted bin.
        optimum: The known optimum of the instance's objective (the evaluator's objective of
            :attr:`bins`, equal to its analytic lower bound) when every planted rank load is equal,
            i.e. for ``cost = tokens`` or ``replicate``; ``None`` otherwise.
    """

    instance: BalanceInstance
    bins: tuple[tuple[int, ...], ...]
    bin_tokens: int
    optimum: float | None


def _cut(rng: np.random.Generator, total: int, pieces: int) -> np.ndarray:
    """``pieces`` positive integers summing to ``total``: cuts at distinct uniform points of 1..total-1."""
    if pieces == 1:
        return np.array([total], dtype=np.int64)
    cuts = np.sort(rng.choice(total - 1, size=pieces - 1, replace=False) + 1)
    return np.diff(np.concatenate(([0], cuts, [total]))).astype(np.int64)


#: Pieces per rank of a ``planted`` instance when a suite entry gives no ``samples_per_rank``.
PLANTED_SAMPLES_PER_RANK = 4


def planted_balance(
    *,
    ranks: int,
    seq_len: int,
    bins_per_rank: int = 1,
    samples_per_rank: int = PLANTED_SAMPLES_PER_RANK,
    fill: float = 1.0,
    replicate: bool = False,
    seed: int = 0,
    objective: str = "makespan",
    group_size: int | None = None,
    cost: str = "tokens",
    model: Mapping[str, int] | None = None,
    name: str = "",
) -> PlantedBalance:
    """A perfect packing cut into samples, with its planted layout and known optimum.

    Planted instances (:func:`planted_balance`, generator name ``planted``) are tight packings whose
    optimum is known by construction: every one of the D·m bins is filled to exactly
    ``F = floor(fill · seq_len)`` tokens and cut into pieces at uniformly drawn distinct cut points
    (each piece at least one token); the pieces, shuffled, are the samples. Rank r's planted bins are
    ``r·m … r·m + m − 1``, holding ``samples_per_rank`` pieces split as evenly as possible over its m bins
    (which bins get the extra piece is drawn). With ``replicate`` every rank receives a copy of rank 0's
    pieces. The planted layout gives every rank the same load, hence it is optimal and equal to the
    evaluator's analytic lower bound (Σc/D for ``makespan``, Σc/g for ``rounds``, 0 for ``balance``),
    whenever

    * ``cost = tokens`` (each rank carries m·F tokens), or
    * ``replicate`` is set (identical rank multisets; any cost).

    Otherwise (a non-linear cost on distinct pieces) the planted layout is only a feasible packing and
    :attr:`PlantedBalance.optimum` is ``None``.

    Args:
        ranks: D, data-parallel ranks.
        seq_len: Token capacity of a bin.
        bins_per_rank: m, bins per rank.
        samples_per_rank: Pieces per rank (n = D · samples_per_rank), at least m.
        fill: Share of ``seq_len`` every planted bin holds, in (0, 1]: F = floor(fill · seq_len) tokens.
        replicate: Give every rank a copy of rank 0's pieces (optimum known for any cost).
        seed: numpy ``default_rng`` seed of the cuts, the piece split and the shuffle.
        objective, group_size: The instance's objective (``makespan``, ``balance``, ``rounds``, ``lockstep``).
        cost, model: Cost of a sample from its tokens (:func:`cost_function`).
        name: Label (default ``planted-D{D}m{m}k{samples_per_rank}-f{fill}-{cost}-s{seed}``).

    Returns:
        A :class:`PlantedBalance`; the same arguments give the same instance on every machine.

    Raises:
        ConfigError: a bad parameter, ``samples_per_rank`` below m, or more pieces in a bin than F tokens.
    """
    ranks = _int_param(ranks, "ranks")
    seq_len = _int_param(seq_len, "seq_len")
    bins_per_rank = _int_param(bins_per_rank, "bins_per_rank")
    samples_per_rank = _int_param(samples_per_rank, "samples_per_rank")
    fill = _float_param(fill, "fill", positive=True, unit=True)
    if not isinstance(replicate, bool):
        raise ConfigError(f"replicate: must be true or false, got {replicate!r}")
    if samples_per_rank < bins_per_rank:
        raise ConfigError(
            f"samples_per_rank: {samples_per_rank} is below bins_per_rank {bins_per_rank} (every bin needs a sample)"
        )
    bin_tokens = math.floor(fill * seq_len)
    most_per_bin = -(-samples_per_rank // bins_per_rank)
    if bin_tokens < most_per_bin:
        raise ConfigError(
            f"fill: {fill} leaves {bin_tokens} tokens per bin, fewer than the {most_per_bin} samples of a bin"
        )
    price = cost_function(cost, model)
    rng = np.random.default_rng(seed)

    def rank_pieces() -> list[np.ndarray]:
        counts = np.full(bins_per_rank, samples_per_rank // bins_per_rank)
        counts[rng.choice(bins_per_rank, size=samples_per_rank % bins_per_rank, replace=False)] += 1
        return [_cut(rng, bin_tokens, int(c)) for c in counts]

    layout = [rank_pieces()] * ranks if replicate else [rank_pieces() for _ in range(ranks)]
    pieces = np.concatenate([piece for rank in layout for piece in rank])
    bin_of_piece = np.repeat(np.arange(ranks * bins_per_rank),
                             [len(piece) for rank in layout for piece in rank])
    n = len(pieces)
    order = rng.permutation(n)  # sample key k is piece order[k]
    tokens = pieces[order]
    key_bins: list[list[int]] = [[] for _ in range(ranks * bins_per_rank)]
    for key, piece in enumerate(order):
        key_bins[int(bin_of_piece[piece])].append(key)
    bins = tuple(tuple(b) for b in key_bins)
    price_of = {int(t): price(int(t)) for t in np.unique(tokens)}
    keys = list(range(n))
    samples = tuple(Sample(k, int(t), price_of[int(t)]) for k, t in zip(keys, tokens))
    label = name or f"planted-D{ranks}m{bins_per_rank}k{samples_per_rank}-f{fill:g}-{cost}-s{seed}"
    instance = check_reference_bins(BalanceInstance(
        samples, PackingConstraints(seq_len), ranks, bins_per_rank,
        reference_bins=strided_reference(tokens, keys, ranks, bins_per_rank, seq_len),
        objective=objective, group_size=group_size, name=label,
    ))
    optimum = None
    if cost == "tokens" or replicate:
        optimum = BalanceEvaluator(instance).objective(bins)
    return PlantedBalance(instance, bins, bin_tokens, optimum)


def context_parallel_parameter_names(generator: str) -> frozenset[str]:
    """The ``params`` a context-parallel suite entry of generator ``generator`` (a length distribution of
    :data:`DISTRIBUTIONS`) may give: the keyword arguments of :func:`generate_context_parallel` and the
    distribution's own.

    Raises:
        ConfigError: an unknown generator.
    """
    if generator not in DISTRIBUTIONS:
        raise ConfigError(f"generator: unknown {generator!r}; valid: {', '.join(DISTRIBUTIONS)}")
    names = {n for n, p in inspect.signature(generate_context_parallel).parameters.items()
             if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}
    return frozenset((names - {"name", "distribution"}) | set(DISTRIBUTIONS[generator]))


def parameter_names(generator: str) -> frozenset[str]:
    """The ``params`` a suite entry of balance generator ``generator`` may give (keyword arguments of
    :func:`generate_balance` plus the distribution's own, of :func:`planted_balance` or of
    :func:`corpus_instance`; ``name`` comes from the entry).

    Raises:
        ConfigError: an unknown generator.
    """
    functions = {"planted": planted_balance, "corpus": corpus_instance}
    if generator not in DISTRIBUTIONS and generator not in functions:
        raise ConfigError(f"generator: unknown {generator!r}; valid: {', '.join([*DISTRIBUTIONS, *functions])}")
    function = functions.get(generator, generate_balance)
    names = {n for n, p in inspect.signature(function).parameters.items()
             if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}
    names -= {"name", "distribution"}
    if generator == "corpus":
        names.add("config")
    return frozenset(names | set(DISTRIBUTIONS.get(generator, {})))


def generate_context_parallel(
    distribution: str = "lognormal",
    *,
    n: int,
    dp: int,
    max_cp: int,
    seed: int = 0,
    min_tokens: int = 1024,
    max_tokens: int = 32768,
    max_tokens_per_rank: int | None = None,
    sizes: list[int] | None = None,
    gpus_per_node: int = 8,
    micro_batches: int | None = None,
    model: Mapping[str, int] | None = None,
    hardware: str = "h200",
    overlap: bool = True,
    objective: str = "step_time",
    name: str | None = None,
    **params: float,
) -> Any:
    """A dynamic context-parallel instance (:class:`packplace.context_parallel.ContextParallelInstance`).

    Lengths: ``n`` draws of :func:`sample_lengths` (``distribution`` and its ``params``) truncated to
    ``[min_tokens, max_tokens]`` (default 1K-32K: a long-context SFT mix; with the default lognormal, the
    corpus fit, most sequences are short and a few long). Ranks: ``dp × max_cp``, ``gpus_per_node`` per node.
    Token cap per rank: ``max_tokens_per_rank``, default ``⌈max_tokens / max_cp⌉`` (the smallest cap
    under which the longest possible sequence fits the largest group). Cost: the CP group time of ``model``
    (default Llama-3.1-8B, :data:`LLAMA_31_8B`) trained on the ``hardware`` preset
    (:func:`packplace.context_parallel.cost_from_preset`), ring exchange overlapped unless ``overlap`` is
    False. ``sizes``, ``micro_batches``, ``objective``: as :func:`packplace.context_parallel.make_instance`.
    ``name`` is accepted for the harness and not stored.

    Raises:
        ConfigError: a bad parameter (named); InfeasibleError: no plan exists (a sequence no group holds,
            too few sequences for ``micro_batches``).
    """
    # imported here: the dynamic-CP package loads only when a suite asks for such an instance
    from packplace.context_parallel import make_instance as make_context_parallel

    tokens = sample_lengths(distribution, n, seed=seed, min_tokens=min_tokens, max_tokens=max_tokens, **params)
    max_cp = _int_param(max_cp, "max_cp")
    cap = -(-int(max_tokens) // max_cp) if max_tokens_per_rank is None else max_tokens_per_rank
    context: dict[str, Any] = {"max": max_cp, "max_tokens_per_rank": cap, "gpus_per_node": gpus_per_node}
    if sizes is not None:
        context["sizes"] = sizes
    if micro_batches is not None:
        context["micro_batches"] = micro_batches
    shape = dict(LLAMA_31_8B if model is None else model)
    return make_context_parallel(tokens, dp=dp, context_parallel=context, objective=objective,
                                 cost={"model": shape, "hardware": hardware, "overlap": overlap})
