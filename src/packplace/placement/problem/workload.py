"""The rollout workload of one RL step and its response-length distribution.

:class:`Workload` holds the batch (``B`` prompts × ``K`` responses, ``S`` prompt tokens, at most ``T``
new tokens) and the response lengths as a piecewise-linear quantile function through the config's
``gen_quantiles`` and ``(1, T)`` (every response ``T`` tokens when none are given). From it come the
mean response, the expected longest response of a batch (the decode's iterations,
:attr:`Workload.max_response`), the fraction of sequences still decoding at each step
(:attr:`Workload.active_fraction`), the grid a decode sum runs over (:attr:`Workload.decode_grid`: exact
up to :data:`DECODE_EXACT_STEPS` steps, chunked beyond) and the training sequence length
``S + mean response``, or, for a pass that pads each micro-batch of ``m`` sequences to its longest, ``S`` plus
the expected longest of ``m`` responses (:meth:`Workload.padded_seq_len`, :func:`expected_longest`).
:class:`RuleReward` is a rule-based reward scored on CPU (``models.reward: rule``): ``seconds_per_sample`` per
response of its ``verifier`` over ``workers`` processes, added to generation (or overlapping a stream that scores
each response as it finishes).
Config fields: :data:`packplace.placement.problem.config.WORKLOAD_FIELDS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

#: CPU seconds to score one response, per rule verifier (``models.reward: {kind: rule, verifier: ...}``): the
#: mean over 800 sampled chain-of-thought responses of Qwen2.5-Math-Instruct to 100 MATH test problems
#: (github.com/QwenLM/Qwen2.5-Math, evaluation/data/eval_rm_maj_example/math_cot_100.jsonl; 1,163 characters on
#: average), each response's fastest of 3 calls, timed by ``benchmarks/rewards/rule_reward_cost.py`` (its JSON
#: beside it; the arithmetic in docs/calibration-and-validation.md, "The rule reward's cost per response"):
#:
#: * ``math-verify``: NeMo RL's math environment (``HFVerifyWorker.verify``, nemo_rl/environments/
#:   math_environment.py, v0.4.0-v0.6.0, ``env.math.math_verify_impl: hf_math_verify``): math-verify 0.8.0's
#:   ``math_metric`` with gold ``LatexExtractionConfig`` and prediction ``ExprExtractionConfig`` +
#:   ``LatexExtractionConfig``, on the gold answer in ``\boxed{}``.
#: * ``math-verify-parse``: ``verify(parse(boxed gold), parse(response))`` with math-verify's default
#:   extraction (UniRL's ``MathVerifyRewardScorer``, unirl/reward/local/mathverify.py).
#: * ``dapo``: verl's DAPO rule (``verl/utils/reward_score/math_dapo.py`` ``compute_score``: the ``Answer:``
#:   regex and string normalisation on the response's last 300 characters), which verl's
#:   ``default_compute_score`` picks for the ``math_dapo`` / ``aime*`` data sources; its time does not grow
#:   with the response.
#:
#: math-verify's time grows with the response (the benchmark's joined responses); the per-response mean is
#: charged at the benchmark's length.
RULE_VERIFIER_SECONDS: dict[str, float] = {"math-verify": 7.3e-4, "math-verify-parse": 5.6e-4, "dapo": 2.4e-5}

#: The verifier a framework's math recipes score with when the config names none: NeMo RL's math environment
#: defaults to math-verify (``math_verify_impl: hf_math_verify`` in examples/configs/grpo_math_1B.yaml,
#: v0.4.0-v0.6.0); verl's DAPO scripts (e.g. verl/experimental/fully_async_policy/shell/dapo_7b_math_fsdp2_64_64.sh:
#: ``reward_model.reward_manager=dapo`` on dapo-math-17k, data source ``math_dapo``) score with
#: ``math_dapo.compute_score``. Any other framework: :data:`DEFAULT_RULE_VERIFIER`.
FRAMEWORK_RULE_VERIFIER: dict[str, str] = {"nemo-rl": "math-verify", "verl": "dapo"}

#: The verifier of a framework without an entry in :data:`FRAMEWORK_RULE_VERIFIER`: math-verify, the costlier
#: of the measured answer checks (a rule reward is never priced below the common symbolic check).
DEFAULT_RULE_VERIFIER = "math-verify"

#: Seconds per response of :data:`DEFAULT_RULE_VERIFIER` (kept as the name older code imports).
RULE_SECONDS_PER_SAMPLE = RULE_VERIFIER_SECONDS[DEFAULT_RULE_VERIFIER]


def rule_verifier_for(framework: str | None) -> str:
    """The rule verifier ``framework`` scores math answers with when the config names none
    (:data:`FRAMEWORK_RULE_VERIFIER`, else :data:`DEFAULT_RULE_VERIFIER`)."""
    return FRAMEWORK_RULE_VERIFIER.get(framework or "", DEFAULT_RULE_VERIFIER)


def _quantile_arrays(qs, ts) -> tuple[np.ndarray, np.ndarray]:
    """A piecewise-linear quantile function's points as float arrays ``(q, t)``, each of shape ``(k,)``, k ≥ 2.

    Raises:
        ValueError: points of unequal lengths, not 1-D, or fewer than 2.
    """
    q = np.asarray(qs, dtype=float)
    t = np.asarray(ts, dtype=float)
    if q.shape != t.shape or q.ndim != 1 or len(q) < 2:
        raise ValueError(f"qs and ts must be 1-D of one length (at least 2), got {q.shape} and {t.shape}")
    return q, t


def expected_longest(qs, ts, m: int) -> float:
    """Expected largest of ``m`` independent draws from the distribution whose quantile function is piecewise
    linear through the points ``(qs[i], ts[i])`` (``qs`` non-decreasing from 0 to 1; a repeated ``q`` is a jump:
    an atom), exactly: the largest of ``m`` draws is ``Q(U)`` with ``U`` of density ``m·u^(m−1)`` on [0, 1]
    (the ``m``-th order statistic of uniforms), so ``E = ∫ Q(u)·m·u^(m−1) du``; on a segment where
    ``Q(u) = a + b·u`` that is ``a·[u^m] + b·m/(m+1)·[u^(m+1)]`` between its ends. ``m = 1``: the mean.

    Raises:
        ValueError: ``m`` below 1, or points of unequal lengths.
    """
    if int(m) != m or m < 1:
        raise ValueError(f"m (sequences per micro-batch) must be an integer of at least 1, got {m!r}")
    q, t = _quantile_arrays(qs, ts)
    u0, u1, t0, t1 = q[:-1], q[1:], t[:-1], t[1:]
    width = u1 - u0
    keep = width > 0.0
    u0, u1, t0, t1, width = u0[keep], u1[keep], t0[keep], t1[keep], width[keep]
    slope = (t1 - t0) / width
    level = t0 - slope * u0
    m = int(m)
    total = level * (u1 ** m - u0 ** m) + slope * m / (m + 1.0) * (u1 ** (m + 1) - u0 ** (m + 1))
    return float(np.sum(total))


#: ``z`` of the window of a binomial's terms that :func:`expected_order_statistics` sums: ``z·σ + z² + 1`` ranks
#: either side of the mean, beyond which a tail is taken as exactly 0 or 1; Bernstein's inequality bounds the mass
#: dropped on each side by ``exp(−z²/4)`` = ``exp(−49)`` < 1e-21 (a cost bound: the window spans ``O(√n)`` ranks,
#: not ``n``).
_TAIL_SIGMAS = 14.0


def _rank_tails(n: int, u: float, extra: int) -> np.ndarray:
    """``I_u(i + extra, n − i + 1)`` for ``i = 1..n`` (the regularised incomplete beta of integer arguments):
    the probability that at least ``i + extra`` of ``n + extra`` uniform draws fall at or below ``u``, the
    binomial upper tail ``P(Bin(n + extra, u) ≥ i + extra)``. The binomial's probabilities within
    :data:`_TAIL_SIGMAS` of its mean come from the ratio of consecutive terms,
    ``p(j)/p(j − 1) = (m − j + 1)/j · u/(1 − u)``, normalised over that window; beyond it a tail is 0 or 1."""
    if u <= 0.0:
        return np.zeros(n)
    if u >= 1.0:
        return np.ones(n)
    m = n + extra
    reach = _TAIL_SIGMAS * float(np.sqrt(m * u * (1.0 - u))) + _TAIL_SIGMAS ** 2 + 1.0
    lo, hi = max(0, int(np.ceil(m * u - reach))), min(m, int(np.floor(m * u + reach)))
    j = np.arange(lo + 1, hi + 1, dtype=float)
    log_p = np.concatenate([[0.0], np.cumsum(np.log((m - j + 1.0) / j) + (np.log(u) - np.log1p(-u)))])
    p = np.exp(log_p - log_p.max())
    upper = np.cumsum((p / p.sum())[::-1])[::-1]   # P(J ≥ lo + t), t = 0..hi − lo
    k = np.arange(1, n + 1) + extra
    return np.where(k <= lo, 1.0, np.where(k > hi, 0.0, upper[np.clip(k - lo, 0, hi - lo)]))


def expected_order_statistics(qs, ts, n: int) -> np.ndarray:
    """Expected order statistics ``E[X_(i:n)]``, ``i = 1..n`` (shape ``(n,)``), of ``n`` independent draws from
    the distribution whose quantile function ``Q`` is piecewise linear through the points ``(qs[k], ts[k])``
    (``qs`` non-decreasing from 0 to 1; a repeated ``q`` is a jump, an atom), exactly.

    The ``i``-th smallest of ``n`` draws is ``Q(U_(i))``, ``U_(i)`` the ``i``-th of ``n`` uniforms, whose density
    is the Beta density ``f_i(u) = u^(i−1)·(1 − u)^(n−i) / B(i, n − i + 1)`` (David & Nagaraja, *Order
    Statistics*, 3rd ed., §3.1), so ``E[X_(i:n)] = ∫ Q(u)·f_i(u) du``. On a segment where
    ``Q(u) = t0 + b·(u − u0)`` between ``u0`` and ``u1`` that is ``t0·[I_u(i, n − i + 1)] +
    b·(i/(n + 1)·[I_u(i + 1, n − i + 1)] − u0·[I_u(i, n − i + 1)])`` (``I`` the regularised incomplete beta,
    ``u·f_i(u) = i/(n + 1)·f_{i+1}`` of ``n + 1`` draws; ``I_u(i, n − i + 1)`` is the probability that at least ``i``
    of ``n`` uniforms fall below ``u``, a binomial tail, :func:`_rank_tails`); a zero-width segment (an atom's
    jump) adds nothing.

    Properties: ``Σ_i f_i = n``, so the values sum to ``n`` times the mean; the last is
    :func:`expected_longest` of ``n``; ``n = 1`` gives the mean; they are non-decreasing and lie in
    ``[Q(0), Q(1)]`` (clipped there against rounding).

    Raises:
        ValueError: ``n`` below 1, or points of unequal lengths.
    """
    if int(n) != n or n < 1:
        raise ValueError(f"n (draws) must be an integer of at least 1, got {n!r}")
    q, t = _quantile_arrays(qs, ts)
    n = int(n)
    ranks = np.arange(1, n + 1, dtype=float) / (n + 1.0)
    breaks = np.unique(q).tolist()
    own = {u: _rank_tails(n, u, 0) for u in breaks}     # I_u(i, n − i + 1)
    next_ = {u: _rank_tails(n, u, 1) for u in breaks}   # I_u(i + 1, n − i + 1)
    values = np.zeros(n)
    for u0, u1, t0, t1 in zip(q[:-1].tolist(), q[1:].tolist(), t[:-1].tolist(), t[1:].tolist(), strict=True):
        if u1 <= u0:
            continue
        mass = own[u1] - own[u0]
        values += t0 * mass
        if t1 != t0:
            values += (t1 - t0) / (u1 - u0) * (ranks * (next_[u1] - next_[u0]) - u0 * mass)
    return np.clip(values, float(t.min()), float(t.max()))


#: Decode steps kept one by one by :attr:`Workload.decode_grid`; longer generations are chunked.
DECODE_EXACT_STEPS = 16384


@dataclass(frozen=True)
class Workload:
    """One step's batch.

    Attributes:
        batch_size: Prompts per step ``B``.
        samples_per_prompt: Responses per prompt ``K`` (GRPO group size; 2 for DPO chosen/rejected).
        context_length: Prompt tokens ``S``.
        generation_length: Maximum new tokens ``T``.
        gen_quantiles: Response-length distribution as ``((q, tokens), ...)``: a fraction ``q`` of the
            responses has at most ``tokens`` tokens; ``None`` means every response has ``T`` tokens.
            The quantile function is piecewise linear through ``(0, 1)``, the given points and
            ``(1, T)`` (a long tail reaching the cap).
    """

    batch_size: int
    samples_per_prompt: int
    context_length: int
    generation_length: int
    gen_quantiles: tuple[tuple[float, float], ...] | None = None

    @property
    def sequences(self) -> int:
        """Sequences per step ``B·K``."""
        return self.batch_size * self.samples_per_prompt

    @cached_property
    def _quantile_points(self) -> tuple[np.ndarray, np.ndarray]:
        T = float(self.generation_length)
        if not self.gen_quantiles:
            return np.array([0.0, 1.0]), np.array([T, T])
        qs = [0.0] + [float(q) for q, _ in self.gen_quantiles]
        ts = [1.0] + [float(t) for _, t in self.gen_quantiles]
        if qs[-1] < 1.0:
            qs.append(1.0)
            ts.append(T)
        return np.array(qs), np.array(ts)

    def quantile(self, q: float) -> float:
        """Response length (tokens) at quantile ``q`` ∈ [0, 1]."""
        qs, ts = self._quantile_points
        return float(np.interp(q, qs, ts))

    def quantiles(self, q: np.ndarray) -> np.ndarray:
        """Response lengths (tokens, float) at the quantiles ``q`` (array in [0, 1], same shape)."""
        qs, ts = self._quantile_points
        return np.interp(q, qs, ts)

    @cached_property
    def mean_response(self) -> float:
        """Mean response length (tokens): the integral of the quantile function (trapezoid rule)."""
        qs, ts = self._quantile_points
        return float(np.sum((ts[1:] + ts[:-1]) * 0.5 * np.diff(qs)))

    @cached_property
    def max_response(self) -> int:
        """Decode iterations of the step (tokens of its longest response): :meth:`longest_response` of its
        ``n = B·K`` responses, ``E[longest of n]`` rounded up, in ``[1, T]``. A batch that decodes until its
        last response ends runs, on average, as many iterations as its expected longest response (the
        iteration count is ``Σ_t P(longest ≥ t) = E[longest]``); ``Q(n/(n + 1))``, ``Q`` at the expected
        position of the largest draw, falls short of it where ``Q`` is convex at the top (a long tail:
        Jensen's inequality) and is equal where ``Q`` is linear there (the uniform on ``[a, b]``: both
        ``a + (b − a)·n/(n + 1)``)."""
        return self.longest_response(self.sequences)

    def longest_response(self, m: int) -> int:
        """Decode iterations of a batch of ``m`` responses that runs until its longest ends (a static batch
        decoding to its last response): :meth:`expected_max_response` of ``m`` rounded up, at least 1 and at
        most ``T``; the one definition of a batch's decode length. Every response at the cap (no
        ``gen_quantiles``): ``T``."""
        expected = self.expected_max_response(m)
        return max(1, min(self.generation_length, int(np.ceil(expected - 1e-9))))

    @cached_property
    def peak_response(self) -> int:
        """Longest response (tokens) a training or forward pass's memory is sized for: the larger of
        :attr:`max_response` (``E[longest of n]``, rounded up) and ``Q(n/(n + 1))`` rounded up, at most
        ``T``. Every micro-batch of a step is drawn from its ``n`` responses, so the expected longest of a
        micro-batch of ``m ≤ n`` (:meth:`padded_seq_len`, what a padded pass's time pays) never exceeds it,
        nor does the decode's longest; ``Q(n/(n + 1))`` is kept as a floor where ``Q`` is concave at the top
        (there ``E[longest of n]`` is the smaller), so that memory is never sized below what it was."""
        n = self.sequences
        position = max(1, min(self.generation_length, int(np.ceil(self.quantile(n / (n + 1))))))
        return max(self.max_response, position)

    def response_sum(self, m: int, group: int, tail: float) -> int:
        """Tokens the responses of a micro-batch of ``m`` sequences exceed with probability at most ``tail``
        (:func:`response_sum_bound` on this workload's quantile function and cap ``T``; every response at
        ``T`` without ``gen_quantiles``: ``m·T``), at most ``m`` times :attr:`peak_response`, the bound of
        ``m`` sequences at the step's longest response. Errors: :func:`response_sum_bound`'s."""
        qs, ts = self._quantile_points
        bound = response_sum_bound((tuple(qs.tolist()), tuple(ts.tolist())), self.generation_length, m, group,
                                   tail)
        return min(bound, m * self.peak_response)

    def _active_at(self, steps: np.ndarray) -> np.ndarray:
        """``1 − F(t − 1)`` at decode steps ``t`` (float array), ``F`` the response-length CDF."""
        qs, ts = self._quantile_points
        if ts[0] == ts[-1]:
            return np.ones(len(steps))
        cdf = np.interp(steps - 1.0, ts, qs, left=0.0, right=1.0)
        return np.clip(1.0 - cdf, 0.0, 1.0)

    @cached_property
    def active_fraction(self) -> np.ndarray:
        """Fraction of sequences still decoding at decode step ``t = 1 .. max_response`` (shape
        ``(max_response,)``): ``1 − F(t − 1)`` with ``F`` the response-length CDF (the inverse of the
        piecewise-linear quantile function). Without ``gen_quantiles`` it is all ones. Its sum is
        ``E[min(⌈X⌉, max_response)]`` (``⌈X⌉ ≥ t`` exactly when ``X > t − 1``): every response's tokens, one
        longer than the decode's iterations cut at them, so a longer decode adds only its tail's tokens and
        the sum never exceeds ``E[⌈X⌉] < mean + 1``."""
        return self._active_at(np.arange(1, self.max_response + 1, dtype=float))

    @cached_property
    def decode_grid(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(steps, weight, active)``, each of shape ``(n,)``, over which a decode cost is summed as
        ``Σ weight·f(steps, active)``. Up to :data:`DECODE_EXACT_STEPS` decode steps: every step
        ``t = 1..max_response`` with weight 1 and ``active = active_fraction`` (exact). Beyond: that many
        equal chunks of consecutive steps, each represented by its middle step and weighted by its length
        (midpoint rule), so the cost of a decode sum is bounded for any ``generation_length``."""
        T = self.max_response
        if T <= DECODE_EXACT_STEPS:
            steps = np.arange(1, T + 1, dtype=float)
            return steps, np.ones(T), self.active_fraction
        edges = np.round(np.linspace(0, T, DECODE_EXACT_STEPS + 1))
        weight = np.diff(edges)
        steps = (edges[:-1] + 1 + edges[1:]) / 2  # chunk covers t = edges[i]+1 .. edges[i+1]
        return steps, weight, self._active_at(steps)

    def expected_max_response(self, m: int) -> float:
        """Expected longest response (tokens) of ``m`` drawn from the response-length distribution
        (:func:`expected_longest` of the quantile function); ``m = 1``: :attr:`mean_response`."""
        qs, ts = self._quantile_points
        return expected_longest(qs, ts, m)

    def padded_seq_len(self, m: int) -> float:
        """Tokens per sequence of a pass that pads each micro-batch of ``m`` sequences to its longest: the
        prompt ``S`` (one length: its left padding adds nothing) plus :meth:`expected_max_response`, never
        below :attr:`train_seq_len`."""
        return max(self.train_seq_len, self.context_length + self.expected_max_response(m))

    @property
    def train_seq_len(self) -> float:
        """Tokens per sequence in training and inference passes ``S + mean response`` (packed)."""
        return self.context_length + self.mean_response


#: Equal-probability cells the response-length distribution is cut into for :func:`response_sum_bound`; each
#: cell is charged its upper end, so the discretised distribution dominates the true one.
SUM_CELLS = 4096
#: Token bins of :func:`response_sum_bound`'s arithmetic: lengths are rounded up to multiples of
#: ``⌈T / SUM_BINS⌉`` tokens (never down), which bounds the convolutions' size for any cap ``T``.
SUM_BINS = 512


def _sum_of_draws(pmf: np.ndarray, count: int) -> np.ndarray:
    """Probability mass of the sum of ``count`` ≥ 1 independent draws of ``pmf`` (bins, shape ``(k,)``), by
    repeated squaring with FFT convolutions; shape ``(count·(k − 1) + 1,)``, negatives of rounding clipped."""
    from scipy.signal import fftconvolve  # start-up time: scipy loads only when a sum of responses is priced
    out, power = None, pmf
    while count:
        if count & 1:
            out = power if out is None else np.clip(fftconvolve(out, power), 0.0, None)
        count >>= 1
        if count:
            power = np.clip(fftconvolve(power, power), 0.0, None)
    assert out is not None
    return out


def _scaled(pmf: np.ndarray, factor: int) -> np.ndarray:
    """The mass of ``factor·X`` for ``X`` of ``pmf`` over the same bins (mass at every ``factor``-th bin)."""
    out = np.zeros(factor * (len(pmf) - 1) + 1)
    out[::factor] = pmf
    return out


@lru_cache(maxsize=4096)
def response_sum_bound(points: tuple[tuple[float, ...], tuple[float, ...]], cap: int, m: int, group: int,
                       tail: float) -> int:
    """Tokens that the responses of ``m`` sequences of one micro-batch exceed with probability at most ``tail``:
    the ``1 − tail`` quantile of their sum, on the response-length distribution through ``points`` (the
    quantile function's ``(q, t)`` knots, :class:`Workload`) with cap ``cap``, rounded up, at most ``m·cap``.

    The ``m`` sequences are taken in groups of ``group`` responses to one prompt (GRPO's ``K``, which verl
    keeps adjacent: ``ray_trainer.py`` ``batch.repeat(repeat_times=rollout.n, interleave=True)``), each group's
    lengths comonotonic (all ``group`` at one draw: the coupling that maximises their sum in convex order, so
    lengths correlated within a prompt are never under-counted), the groups independent. ``m`` split into
    ``⌊m/c⌋`` whole groups plus a remainder (``c = min(group, m)``) majorises any other split over group
    boundaries, so the sum ``c·ΣX_j + r·X`` is the largest in convex order. The distribution is discretised
    to :data:`SUM_CELLS` cells, each at its upper quantile, on bins of ``⌈cap / SUM_BINS⌉`` tokens rounded up:
    both only raise the bound.

    Raises:
        ValueError: ``m`` or ``group`` below 1, or ``tail`` outside ``(0, 1)``.
    """
    from scipy.signal import fftconvolve  # start-up time: scipy loads only when a sum of responses is priced
    if m < 1 or group < 1 or not 0.0 < tail < 1.0:
        raise ValueError(f"response_sum_bound: m {m!r} and group {group!r} must be at least 1 and tail {tail!r} "
                         f"in (0, 1)")
    width = max(1, math.ceil(cap / SUM_BINS))
    qs, ts = np.asarray(points[0], dtype=float), np.asarray(points[1], dtype=float)
    values = np.interp(np.arange(1, SUM_CELLS + 1) / SUM_CELLS, qs, ts)
    bins = np.ceil(values / width - 1e-9).astype(int)
    pmf = np.bincount(bins, minlength=math.ceil(cap / width) + 1) / SUM_CELLS
    c = min(group, m)
    whole, rest = divmod(m, c)
    total = _scaled(_sum_of_draws(pmf, whole), c)
    if rest:
        total = np.clip(fftconvolve(total, _scaled(pmf, rest)), 0.0, None)
    above = np.cumsum(total[::-1])[::-1]        # above[i]: mass at bin i or higher
    over = np.nonzero(above[1:] <= tail)[0]    # first i whose mass strictly above it is at most tail
    index = int(over[0]) if len(over) else len(total) - 1
    return int(min(m * cap, index * width))


@dataclass(frozen=True)
class RuleReward:
    """A rule-based reward (math answer check, unit tests): a CPU step with no GPU model.

    Attributes:
        seconds_per_sample: CPU seconds to score one response (default: the verifier's
            :data:`RULE_VERIFIER_SECONDS`).
        workers: CPU processes scoring in parallel (default 1; NeMo RL: ``env.math.num_workers``).
        verifier: The answer check (a key of :data:`RULE_VERIFIER_SECONDS`).
    """

    seconds_per_sample: float = RULE_SECONDS_PER_SAMPLE
    workers: int = 1
    verifier: str = DEFAULT_RULE_VERIFIER

    def seconds(self, sequences: int) -> float:
        """Seconds to score ``sequences`` responses at once after generation, split evenly over the workers:
        ``sequences · seconds_per_sample / workers``."""
        return sequences * self.seconds_per_sample / self.workers

    def streamed_seconds(self, sequences: int, generation_seconds: float) -> float:
        """Seconds the reward adds to a rollout that scores each response as soon as it is generated, one
        response per call on one lane, while the others still decode: the last response's score, or the
        lane's backlog when scoring the ``sequences`` takes longer than the ``generation_seconds`` it
        overlaps: ``max(seconds_per_sample, sequences · seconds_per_sample − generation_seconds)``.

        Source: NeMo RL's asynchronous rollout (nemo_rl/experience/rollouts.py
        ``run_sample_multi_turn_rollout``, v0.4.0-v0.6.0; the async GRPO trajectory collector,
        nemo_rl/algorithms/async_utils.py, runs one such rollout per prompt group) calls ``calculate_rewards``
        on each sample's single-sample batch right after its generation; the math environment is one Ray
        actor whose ``step`` hands that one response to one ``HFVerifyWorker`` and waits (``ray.get``), so
        the calls are scored one at a time.
        """
        return max(self.seconds_per_sample, sequences * self.seconds_per_sample - generation_seconds)
