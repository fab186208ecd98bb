"""Errors raised by packplace on bad input, and the bounded value display their messages use."""

from __future__ import annotations

import reprlib
from typing import Any


class ConfigError(ValueError):
    """An instance or configuration field is missing or invalid.

    The message is one line that names the field (``[section] field`` for YAML configs) and the
    offending value, so that the command line can print it as is and exit with code 2.
    """


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 6


def show(value: Any) -> str:
    """``repr(value)`` bounded in length and depth (:mod:`reprlib`): at most 6 items per container, 3
    levels, 60 characters per string, so that a huge or deeply shared value never floods a message."""
    text = _REPR.repr(value)
    return text if len(text) <= 200 else text[:197] + "..."
