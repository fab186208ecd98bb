"""Argument checks shared by the drop-ins: one ``ConfigError`` line naming the argument (and the element); and
the balance problem's refusals about its own fields re-worded in a drop-in's argument names (:func:`callers_terms`)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packplace.errors import ConfigError, InfeasibleError, show


def number_list(value: Any, field: str, *, integers: bool = False, minimum: float = 0) -> list[Any]:
    """``value`` (a list, tuple, generator, numpy array or torch tensor) as a list of Python numbers.

    Args:
        value: The argument.
        field: Its name in messages.
        integers: Every element must be an integer (integral floats count).
        minimum: Every element must be at least this.

    Raises:
        ConfigError: not a flat sequence; an element that is boolean, non-numeric, non-finite, below
            ``minimum`` or (with ``integers``) fractional — index and value named.
    """
    if getattr(value, "is_nested", False):
        raise ConfigError(f"{field}: must be a flat sequence of numbers, got a nested tensor")
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"{field}: must be a sequence of numbers, got {show(value)}")
    out = list(value)
    if {type(item) for item in out} <= {int} and (not out or min(out) >= minimum):
        return out   # the common case, checked at C speed
    for i, item in enumerate(out):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{field}[{i}]: must be a number, got {show(item)}")
        if isinstance(item, (np.integer, np.floating)):
            item = item.item()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ConfigError(f"{field}[{i}]: must be finite, got {show(item)}")
            if item.is_integer():
                item = int(item)
            elif integers:
                raise ConfigError(f"{field}[{i}]: must be an integer, got {show(item)}")
        if item < minimum:
            raise ConfigError(f"{field}[{i}]: must be >= {minimum:g}, got {show(item)}")
        out[i] = item
    return out


def positive_integer(value: Any, field: str) -> int:
    """``value`` as an int >= 1 (numpy integers accepted, booleans not).

    Raises:
        ConfigError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{field}: must be an integer >= 1, got {show(value)}")
    return int(value)


_OVERSIZED = re.compile(r"sample (?P<key>.+?): (?P<tokens>\d+) tokens exceed seq_len (?P<cap>\d+) "
                        r"\(oversized_policy=.*\)")
#: the balance problem's "no common count" refusal; a proven one may name its counting reason ("; proven: ...")
_AUTO = re.compile(r"local_batch_size: 'auto'(?: with [^:]*)?:? (?:found )?no bins per rank in \[(?P<low>\d+), "
                   r"(?P<high>\d+)\] (?:can hold|that pack) all (?P<n>\d+) samples on (?P<ranks>\d+) ranks under the "
                   r"rules \((?P<rules>.*?)(?P<proven>; proven(?:: .*)?)?\)")
_FEW = re.compile(r"samples: (?P<n>\d+) samples cannot give each of data_parallel_size=(?P<ranks>\d+) ranks a "
                  r"non-empty bin.*")
_SAMPLE = re.compile(r"sample (?P<key>\S+?): (?P<rest>.*)")
_COSTS = re.compile(r"samples: the costs (?P<rest>.*)")


@dataclass(frozen=True)
class BalanceTerms:
    """How a drop-in built on the balance problem names what its messages are about.

    Attributes:
        sequences: The argument holding the lengths (``seqlens``).
        element: Its element of a sample position, e.g. ``"seqlens[{key}]"``.
        cap: The token cap as the caller set it, e.g. ``"max_token_len 100"``.
        ranks: The rank count as the caller set it, e.g. ``"dp_size=2"``.
        unit: What a bin is to the caller, e.g. ``"micro-batch"``.
        count: What is counted per rank, e.g. ``"micro-batches per rank"``.
        rules: Balance field name → the caller's argument (``{"equal_count": "equal_size"}``): shown where the
            message lists the rule with a value other than None, and named where a message is about it.
        costs: The argument the per-sample costs come from (default: ``sequences``).
    """

    sequences: str
    element: str
    cap: str = ""
    ranks: str = ""
    unit: str = "bin"
    count: str = "bins per rank"
    rules: Mapping[str, str] = field(default_factory=dict)
    costs: str | None = None

    def translate(self, message: str) -> str | None:
        """``message`` in the caller's terms, or None when it is not one of the balance problem's messages
        about its own fields (oversized sample, no common bin count, too few samples for the ranks)."""
        found = _OVERSIZED.fullmatch(message)
        if found:
            return (f"{self.element.format(key=found['key'])}: {found['tokens']} tokens exceed the cap "
                    f"{self.cap}")
        found = _AUTO.fullmatch(message)
        if found:
            shown = [f"{caller}={value}" for name, caller in self.rules.items()
                     for value in re.findall(rf"\b{re.escape(name)} (\S+?)(?:,|$)", found["rules"])
                     if value != "None"]
            extra = f" ({', '.join(shown)})" if shown else ""
            proof = "; proven" if found["proven"] else "; not proven: the search stopped"
            return (f"{self.sequences}: no number of {self.count} in [{found['low']}, {found['high']}] holds "
                    f"all {found['n']} sequences on {self.ranks} ranks within the cap {self.cap}{extra}{proof}")
        found = _FEW.fullmatch(message)
        if found:
            return (f"{self.sequences}: {found['n']} sequences cannot give each of {self.ranks} ranks a non-empty "
                    f"{self.unit}")
        found = _COSTS.fullmatch(message)
        if found:
            return f"{self.costs or self.sequences}: the costs {found['rest']}"
        found = _SAMPLE.fullmatch(message)
        if found:
            return f"{self.element.format(key=found['key'])}: {found['rest']}"
        for name, caller in self.rules.items():
            if message.startswith(f"{name}: "):
                return f"{caller}: {message[len(name) + 2:]}"
        return None


@contextmanager
def callers_terms(terms: BalanceTerms) -> Iterator[None]:
    """Re-raise the balance problem's messages about its own fields (``seq_len``, ``local_batch_size``,
    ``oversized_policy``, ``data_parallel_size``) in ``terms``: the same exception type, one line naming the
    caller's arguments; any other error passes unchanged."""
    try:
        yield
    except (ConfigError, InfeasibleError) as error:
        message = terms.translate(str(error))
        if message is None:
            raise
        raise type(error)(message) from None
