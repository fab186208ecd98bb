"""Drop-in entry points for training frameworks, on top of any packplace balance solver.

No framework is imported: the adapters take and return plain Python lists (and duck-typed objects
for hyper_parallel), so neither torch nor the frameworks are dependencies.

* :func:`partition` — multiway number partitioning: split weights into k non-empty parts with the
  smallest largest part sum (optionally equal part sizes).
* :mod:`packplace.integrations.verl` — ``get_seqlen_balanced_partitions`` (same signature, return
  type and semantics as ``verl.utils.seqlen_balancing``) and ``micro_batch_partitions``
  (dynamic micro-batching of a global batch under a token cap, the same count on every rank).
* :mod:`packplace.integrations.hyper_parallel` — :class:`PackplaceBalancingAlgorithm`, an
  implementation of hyper_parallel's ``BalancingAlgorithm`` protocol
  (``assign(samples, *, reference_bins, constraints, data_parallel_size, local_batch_size)`` and
  ``objective(rank_costs)``).
"""

from __future__ import annotations

from packplace.integrations.partition import partition

__all__ = ["partition"]
