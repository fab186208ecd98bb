"""Placement backends; importing this package registers them all."""

from packplace.solvers.placement import concurrent, greedy  # noqa: F401
