"""Range contracts of config fields: one :class:`Field` per field (type, unit, minimum, maximum, or the
allowed values), checked when a config loads, before any work.

A loader declares its fields in a table (``{name: Field(...)}``) and calls :func:`check_section`, which
rejects unknown keys, fills defaults and returns the normalised values. To add a field, add one row to
the table: the check, the error message and the row of docs/config-reference.md (written by
docs/generate_config_reference.py) follow.

Conventions, the same for every field of both problems:

* ``int``: a Python int, or an integral float (YAML reads ``5e4`` as a float); never a bool.
* ``float``: an int or float, finite; never a bool. Integers beyond float range are out of range, not an
  ``OverflowError``.
* A numpy number counts as the Python one (:func:`plain_number`: ``np.int64(8)`` is 8, ``np.float32(0.5)`` is
  0.5), as a plan read from a mapping takes it; no other number type is converted (``Fraction(2)`` is refused
  as it is not an int or float).
* ``bool``: ``true``/``false`` only (not 0/1, not the string ``"false"``); a numpy boolean counts as the Python
  one (:func:`plain_bool`: ``np.True_`` is true). Like ``True``, ``np.True_`` is not a number: a number field
  refuses it.
* ``enum``: one of ``choices`` exactly.
* ``str``: a string that is not empty or only whitespace (free text: a source, a note, a name).
* ``minimum``/``maximum`` are inclusive unless ``exclusive_minimum``; ``zero_allowed`` additionally
  admits exactly 0 below a positive ``minimum`` (e.g. a cost that is 0 or at least 1e-30).

Messages are one line, ``<label>: must be ..., got <value>`` with the value bounded by
:func:`packplace.errors.show`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from packplace.errors import ConfigError, show

#: Marks a field without a default (it must be given).
REQUIRED = object()


def _fmt(number: float) -> str:
    if isinstance(number, int) or (isinstance(number, float) and number.is_integer() and abs(number) < 1e6):
        return f"{int(number):,}" if abs(number) >= 10_000 else str(int(number))
    return f"{number:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


def plain_number(value: Any) -> Any:
    """``value`` with a numpy number made the Python one: a numpy integer (``np.int64``) the int, a numpy
    floating number (``np.float32``, ``np.float64``) the float; anything else unchanged, for the caller's own
    check: a numpy boolean (not a number), a ``Fraction``, a ``Decimal``, an int too large for a float."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def plain_bool(value: Any) -> Any:
    """``value`` with a numpy boolean (``np.True_``) made the Python one; anything else unchanged, for the
    caller's own check (only where a boolean is asked: a number field refuses ``np.True_`` as it refuses
    ``True``)."""
    return bool(value) if isinstance(value, np.bool_) else value


#: Units a value out of its field's range is shown with (``[hardware] memory_bandwidth: must be a finite number in
#: [1e11, 1e16] (bytes/s), got 3350000.0 bytes/s``): the hardware figures, where a value in other units (MB/s,
#: GB) is the likely mistake.
UNITS_SAID = frozenset({"bytes/s", "FLOP/s", "bytes"})


@dataclass(frozen=True)
class Field:
    """The contract of one config field.

    Attributes:
        kind: ``"int"``, ``"float"``, ``"bool"``, ``"enum"`` or ``"str"``.
        unit: Unit of the value for the config reference (``"tokens"``, ``"bytes"``, ``"FLOP/s"``, ``"s"``, ...).
        minimum, maximum: Inclusive bounds (``None``: unbounded on that side).
        exclusive_minimum: ``minimum`` itself is not allowed (``x > minimum``).
        zero_allowed: Exactly 0 is allowed even below ``minimum``.
        choices: Allowed values of an ``enum``.
        literals: Words a numeric field also accepts as themselves (e.g. ``auto``).
        default: Value when the field is absent (:data:`REQUIRED`: it must be given; ``None``: optional
            without a default).
        meaning: One line for the config reference table.
    """

    kind: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    zero_allowed: bool = False
    choices: tuple[Any, ...] = ()
    literals: tuple[str, ...] = ()
    default: Any = REQUIRED
    meaning: str = ""

    def describe(self) -> str:
        """The allowed values in words, e.g. ``an integer in [1, 2,147,483,647]``."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "enum":
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.kind == "str":
            return "a non-empty string"
        noun = "an integer" if self.kind == "int" else "a finite number"
        low = "-inf" if self.minimum is None else _fmt(self.minimum)
        high = "inf" if self.maximum is None else _fmt(self.maximum)
        opening = "(" if self.exclusive_minimum else "["
        closing = "]" if self.maximum is not None else ")"
        text = f"{noun} in {opening}{low}, {high}{closing}"
        text = ("0 or " + text) if self.zero_allowed else text
        return text + "".join(f" or {word}" for word in self.literals)

    def check(self, value: Any, label: str) -> Any:
        """``value`` normalised (int, float, bool, the enum value or the string), or ConfigError naming
        ``label``."""
        if self.kind == "bool":
            value = plain_bool(value)
            if not isinstance(value, bool):
                raise ConfigError(f"{label}: must be true or false, got {show(value)}")
            return value
        value = plain_number(value)
        wrong = ConfigError(f"{label}: must be {self.describe()}, got {show(value)}")
        if self.kind == "str":
            if not isinstance(value, str) or not value.strip():
                raise wrong
            return value
        if self.kind == "enum":
            if isinstance(value, bool) or not isinstance(value, (str, int)) or value not in self.choices:
                raise wrong
            return value
        if isinstance(value, str) and value in self.literals:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong
        if isinstance(value, float) and not math.isfinite(value):
            raise wrong
        number: int | float = value
        if self.kind == "int":
            if isinstance(value, float):
                if not value.is_integer():
                    raise wrong
                number = int(value)
        elif isinstance(value, int):
            if abs(value) > 1e300:
                raise wrong
            number = float(value)
        if number == 0 and self.zero_allowed:
            return number
        below = self.minimum is not None and (
            number <= self.minimum if self.exclusive_minimum else number < self.minimum
        )
        above = self.maximum is not None and number > self.maximum
        if below or above:
            if self.unit in UNITS_SAID:   # out of range: a figure in other units (MB/s for bytes/s) reads as such
                raise ConfigError(f"{label}: must be {self.describe()} ({self.unit}), got {show(value)} {self.unit}")
            raise wrong
        return number


#: Message formats of :func:`check_section` (``{label}``, ``{where}``, ``{name}``, ``{valid}``).
MISSING = "{label}: missing required field"
UNKNOWN = "{label}: unknown field; valid: {valid}"


def check_section(section: Any, fields: Mapping[str, Field], where: str, *,
                  extra: tuple[str, ...] = (), label: Any = None, missing: str = MISSING,
                  unknown: str = UNKNOWN) -> dict[str, Any]:
    """Check every field of ``section`` against ``fields``.

    Args:
        section: The parsed mapping (anything else is an error).
        fields: ``{name: Field}``; keys outside it and ``extra`` are errors.
        where: Name of the section in messages (``"[hardware]"``, ``"cost.model"``, ...).
        extra: Keys allowed in the section but checked by the caller (left out of the result).
        label: ``label(name) -> str`` for messages (default ``f"{where} {name}"``).
        missing, unknown: Formats of the two structural errors (defaults :data:`MISSING`, :data:`UNKNOWN`).

    Returns:
        ``{name: normalised value}`` for every field of ``fields`` that is given or has a default
        (optional fields without a default and absent are left out).

    Raises:
        ConfigError: not a mapping; an unknown key (the message lists the valid ones); a missing required
            field; a value outside its contract.
    """
    name_of = label or (lambda name: f"{where} {name}")
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: must be a mapping, got {show(section)}")
    valid = tuple(fields) + extra
    for key in section:
        if key not in valid:
            shown = key_shown(key)
            raise ConfigError(unknown.format(label=name_of(shown), where=where, name=shown, valid=", ".join(valid)))
    out: dict[str, Any] = {}
    for name, spec in fields.items():
        if name in section and section[name] is not None:
            out[name] = spec.check(section[name], name_of(name))
        elif spec.default is REQUIRED:
            raise ConfigError(missing.format(label=name_of(name), where=where, name=name))
        elif spec.default is not None:
            out[name] = spec.default
    return out


#: What an unknown key may look like to be quoted in a message: a field name or a typo of one.
_NAME_LIKE = re.compile(r"[A-Za-z0-9_.\- ]{1,60}")


def key_shown(key: Any, quote: bool = False) -> str:
    """An unknown key as a message shows it: as written (``repr`` with ``quote``) when it looks like a field
    name (letters, digits, ``_ . -`` and spaces, at most 60 characters), else described by its type and
    length, so that a file that is not a config at all (a system file named by mistake) never has its text
    repeated."""
    if isinstance(key, str) and _NAME_LIKE.fullmatch(key):
        return repr(key) if quote else key
    if isinstance(key, str):
        return f"(a key of {len(key):,} characters that is not a field name)"
    return f"(a key of type {type(key).__name__})" if not isinstance(key, (int, float, bool)) else show(key)


def check_count(count: int, maximum: int, label: str, what: str) -> None:
    """Refuse a size up front: ``count`` (e.g. GPUs, samples) above ``maximum``, with the estimate.

    Raises:
        ConfigError: ``<label>: <count> <what>; the limit is <maximum>``.
    """
    if count > maximum:
        raise ConfigError(f"{label}: {count:,} {what}; the limit is {maximum:,}")
