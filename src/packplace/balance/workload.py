"""Workload cost estimation for packed samples.

Packs use document-masked (variable-length) attention, so a sample's attention cost depends on its
own length ``s``, not on the pack's. The model is a :class:`packplace.shape.TransformerShape` (the shape
the placement problem uses too). With L layers, hidden size d, attention width q = heads × head_dim
(which need not equal d, e.g. Qwen3), key/value width d_kv = kv_heads × head_dim, MLP of width d_ff
(3 matrices gated, 2 plain; for a mixture of experts only the ``experts_per_token`` active experts and
the router), vocabulary V, the forward FLOPs of one document of s tokens are

    F_fwd(s) = 2·s·L·(2·d·q + 2·d·d_kv + 3·d·d_ff)   (Q,O projections; K,V projections; gated MLP)
             + 2·L·s²·q                               (QKᵀ and AV, 2·s²·q each, halved by the causal mask)
             + 2·s·d·V                                (LM head)

Training (forward + backward) costs 3·F_fwd, inference F_fwd. Sources: Kaplan et al. 2020,
"Scaling Laws for Neural Language Models" (≈ 2N FLOPs per token forward, 6N for training);
Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (the attention term). Costs may instead be seconds from a calibrated per-sample latency
model ``a + b·s + c·s²`` (:class:`LatencyModel`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from packplace.balance.samples import WorkloadCost
from packplace.errors import ConfigError, show
from packplace.shape import TransformerShape

Mode = Literal["train", "inference"]
MODES = ("train", "inference")


#: The balance problem's model shape is the shared :class:`packplace.shape.TransformerShape`.
ModelShape = TransformerShape


def _factor(mode: str) -> float:
    if mode not in MODES:
        raise ConfigError(f"cost.mode: must be one of {', '.join(MODES)}, got {mode!r}")
    return 3.0 if mode == "train" else 1.0


def sample_cost(tokens: int, shape: ModelShape, mode: Mode = "train") -> WorkloadCost:
    """Workload of one document: ``3·F_fwd(s)`` for training, ``F_fwd(s)`` for inference (FLOPs)."""
    return WorkloadCost(llm=_factor(mode) * shape.forward_flops(tokens))


def padding_cost(shape: ModelShape, mode: Mode = "train") -> Callable[[int], WorkloadCost]:
    """``f(pad_tokens)``: FLOPs spent on the padding of a bin filled up to ``seq_len``.

    Pad tokens pass through every matrix multiply but, with variable-length attention kernels, not
    through attention, so only the linear term counts: ``factor · pad · linear_flops_per_token``.
    """
    per_token = _factor(mode) * shape.linear_flops_per_token()

    def cost(pad_tokens: int) -> WorkloadCost:
        return WorkloadCost(llm=per_token * max(0, pad_tokens))

    return cost


def _callback_name(callback: Any) -> str:
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None)
    return str(name or type(callback).__name__)


class CheckedPaddingCost:
    """A user's ``padding_cost(pad_tokens) -> WorkloadCost`` whose every call is checked: an exception or a
    return that is not a :class:`~packplace.balance.samples.WorkloadCost` becomes one
    :class:`~packplace.errors.ConfigError` line naming the callback (picklable when the callback is).

    Raises:
        ConfigError: ``padding_cost: <name>(<pad>) ...``: raised (type and message cut to 80 characters),
            or returned something else (its type and value; expected a WorkloadCost).
    """

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[int], WorkloadCost]) -> None:
        self.callback = callback

    def __call__(self, pad_tokens: int) -> WorkloadCost:
        name = _callback_name(self.callback)
        try:
            result = self.callback(pad_tokens)
        except ConfigError as exc:
            raise ConfigError(f"padding_cost: {name}({pad_tokens}): {str(exc)[:160]}") from None
        except Exception as exc:  # a user's callback: any error becomes one line naming it
            raise ConfigError(f"padding_cost: {name}({pad_tokens}) raised {type(exc).__name__}: "
                              f"{str(exc)[:80]}") from None
        if not isinstance(result, WorkloadCost):
            raise ConfigError(f"padding_cost: {name}({pad_tokens}) returned {type(result).__name__} {show(result)}; "
                              "expected a WorkloadCost, e.g. WorkloadCost(llm=flops)")
        return result

    def __getstate__(self) -> Any:
        return self.callback

    def __setstate__(self, state: Any) -> None:
        self.callback = state

    def __repr__(self) -> str:
        return f"CheckedPaddingCost({self.callback!r})"


def check_padding_cost(callback: Any, seq_len: int) -> CheckedPaddingCost:
    """``callback`` wrapped in :class:`CheckedPaddingCost` and probed at 0, 1 and ``seq_len`` pad tokens
    (an instance calls it with pad lengths in ``[0, seq_len]``).

    Raises:
        ConfigError: not callable, or a probe raised or returned something other than a WorkloadCost
            (one line naming the callback and the expected return).
    """
    if isinstance(callback, CheckedPaddingCost):
        return callback
    if not callable(callback):
        raise ConfigError(f"padding_cost: must be callable or None, got {show(callback)}")
    checked = CheckedPaddingCost(callback)
    for pad in sorted({0, 1, int(seq_len)}):
        checked(pad)
    return checked


@dataclass(frozen=True)
class LatencyModel:
    """Calibrated per-sample latency ``a + b·s + c·s²`` in seconds (a: s, b: s/token, c: s/token²).

    Raises:
        ConfigError: a negative coefficient.
    """

    a: float = 0.0
    b: float = 0.0
    c: float = 0.0

    def __post_init__(self) -> None:
        for name in ("a", "b", "c"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"cost.latency.{name}: must be a number >= 0, got {value!r}")

    def seconds(self, tokens: int) -> float:
        """Predicted seconds for one document of ``tokens`` tokens."""
        s = float(tokens)
        return self.a + self.b * s + self.c * s * s

    def cost(self, tokens: int) -> WorkloadCost:
        """The latency as a :class:`WorkloadCost` (seconds)."""
        return WorkloadCost(llm=self.seconds(tokens))
