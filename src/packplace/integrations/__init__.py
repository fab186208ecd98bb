"""Drop-in entry points for training frameworks, on top of any packplace balance solver.

No framework is imported: the adapters take and return plain Python lists (and duck-typed objects
for hyper_parallel), so neither torch nor the frameworks are dependencies.

* :func:`partition` — multiway number partitioning: split weights into k non-empty parts with the
  smallest largest part sum (optionally equal part sizes).
* :mod:`packplace.integrations.verl` — verl 0.9.1's ``get_seqlen_balanced_partitions``,
  ``rearrange_micro_batches`` and ``get_reverse_idx`` (same signatures and return shapes as
  ``verl.utils.seqlen_balancing``), never worse than verl's answers, and ``micro_batch_partitions``
  (:mod:`packplace.integrations.micro_batches`: dynamic micro-batching of a whole global batch).
* :mod:`packplace.integrations.hyper_parallel` — :class:`PackplaceBalancingAlgorithm`, an
  implementation of hyper_parallel's ``BalancingAlgorithm`` protocol, never worse than its default
  algorithm (:mod:`packplace.integrations.hyper_parallel_lpt`).
* :mod:`packplace.integrations.megatron` — :class:`PackplacePackingScheduler`, a Megatron-Core
  sequence-packing scheduler (the slot of ``dp_balanced``) that balances FLOPs under the token cap.

Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

from packplace.integrations.partition import partition

__all__ = ["partition"]
