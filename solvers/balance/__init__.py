"""Balance backends; importing this package registers them all."""

from packplace.solvers.balance import (
    cpsat,  # noqa: F401
    karmarkar_karp,  # noqa: F401
    lns,  # noqa: F401
    lpt,  # noqa: F401
    reference,  # noqa: F401
    repair,  # noqa: F401
)
