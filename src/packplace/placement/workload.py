"""The rollout workload of one RL step and its response-length distribution."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


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

    @cached_property
    def active_fraction(self) -> np.ndarray:
        """Fraction of sequences still decoding at decode step ``t = 1 .. max_response`` (shape
        ``(max_response,)``): ``1 − F(t − 1)`` with ``F`` the response-length CDF (the inverse of the
        piecewise-linear quantile function). Without ``gen_quantiles`` it is all ones."""
        qs, ts = self._quantile_points
        steps = np.arange(self.max_response, dtype=float)  # t - 1
        if ts[0] == ts[-1]:
            return np.ones(self.max_response)
        cdf = np.interp(steps, ts, qs, left=0.0, right=1.0)
        return np.clip(1.0 - cdf, 0.0, 1.0)

    @property
    def train_seq_len(self) -> float:
        """Tokens per sequence in training and inference passes ``S + mean response`` (packed)."""
        return self.context_length + self.mean_response
