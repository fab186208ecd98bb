"""The installed version of packplace (written once, in ``pyproject.toml``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version


def installed_version() -> str:
    """The version of the installed ``packplace`` distribution, or ``"0+unknown"`` in a source tree
    that was never installed."""
    try:
        return _distribution_version("packplace")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


__version__ = installed_version()
