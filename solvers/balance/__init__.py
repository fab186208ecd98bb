"""Balance backends; importing this package registers them all."""

from packplace.solvers.balance import reference  # noqa: F401
