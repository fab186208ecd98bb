"""Errors raised by packplace on bad input."""

from __future__ import annotations


class ConfigError(ValueError):
    """An instance or configuration field is missing or invalid.

    The message is one line that names the field (``[section] field`` for YAML configs) and the
    offending value, so that the command line can print it as is and exit with code 2.
    """
