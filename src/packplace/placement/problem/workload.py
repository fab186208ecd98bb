"""The rollout workload of one RL step and its response-length distribution.

:class:`Workload` holds the batch (``B`` prompts × ``K`` responses, ``S`` prompt tokens, at most ``T``
new tokens) and the response lengths as a piecewise-linear quantile function through the config's
``gen_quantiles`` and ``(1, T)`` (every response ``T`` tokens when none are given). From it come the
mean response, the longest response of a batch, the fraction of sequences still decoding at each step
(:attr:`Workload.active_fraction`), the grid a decode sum runs over (:attr:`Workload.decode_grid`: exact
up to :data:`DECODE_EXACT_STEPS` steps, chunked beyond) and the training sequence length
``S + mean response``. :class:`RuleReward` is a rule-based reward scored on CPU
(``models.reward: rule``): ``seconds_per_sample`` per response over ``workers`` processes, added to
generation. Config fields: :data:`packplace.placement.problem.config.WORKLOAD_FIELDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

#: CPU seconds to score one response with a rule-based reward: an unsourced order-of-magnitude estimate for a
#: regex / symbolic math answer check such as math-verify (no published per-response timing of math-verify was
#: found; set it from a measurement of your verifier). Frameworks score in parallel processes
#: (:attr:`RuleReward.workers`; NeMo RL's math environment: ``env.math.num_workers``, 8 in its GRPO recipes).
RULE_SECONDS_PER_SAMPLE = 0.001

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
        """Longest response in a batch of ``B·K`` (tokens): ``Q(n / (n + 1))``, the expected position of
        the largest of ``n`` uniform order statistics; decode runs until it ends."""
        n = self.sequences
        return max(1, min(self.generation_length, int(np.ceil(self.quantile(n / (n + 1))))))

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
        piecewise-linear quantile function). Without ``gen_quantiles`` it is all ones."""
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

    @property
    def train_seq_len(self) -> float:
        """Tokens per sequence in training and inference passes ``S + mean response`` (packed)."""
        return self.context_length + self.mean_response


@dataclass(frozen=True)
class RuleReward:
    """A rule-based reward (math answer check, unit tests): a CPU step with no GPU model.

    Attributes:
        seconds_per_sample: CPU seconds to score one response (default
            :data:`RULE_SECONDS_PER_SAMPLE`).
        workers: CPU processes scoring in parallel (default 1).
    """

    seconds_per_sample: float = RULE_SECONDS_PER_SAMPLE
    workers: int = 1

    def seconds(self, sequences: int) -> float:
        """Seconds to score ``sequences`` responses: ``sequences · seconds_per_sample / workers``."""
        return sequences * self.seconds_per_sample / self.workers
