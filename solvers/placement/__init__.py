"""Placement backends; importing this package registers them all."""

from packplace.solvers.placement import anneal, concurrent, cpsat, greedy  # noqa: F401
