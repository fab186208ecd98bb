"""Drop-in entry points for training frameworks, on top of any packplace balance solver.

No framework is imported at module level: the adapters take and return plain Python lists (and
duck-typed objects for hyper_parallel), and torch / tensordict are imported only when tensors come
in, so neither torch nor the frameworks are dependencies.

* :func:`partition` — multiway number partitioning: split weights into k non-empty parts with the
  smallest largest part sum (optionally equal part sizes).
* :mod:`packplace.integrations.verl` — every public function of verl 0.9.1's
  ``verl.utils.seqlen_balancing`` (same signatures and return types, TensorDicts and nested tensors
  included), never worse than verl's answers, ``install()`` / ``uninstall()`` to patch verl in place,
  and ``micro_batch_partitions`` (:mod:`packplace.integrations.micro_batches`: dynamic micro-batching
  of a whole global batch).
* :mod:`packplace.integrations.hyper_parallel` — :class:`PackplaceBalancingAlgorithm`, an
  implementation of hyper_parallel's ``BalancingAlgorithm`` protocol, never worse than its default
  algorithm (:mod:`packplace.integrations.hyper_parallel_lpt`).
* :mod:`packplace.integrations.megatron` — :class:`PackplacePackingScheduler`, a Megatron-Core
  sequence-packing scheduler that balances FLOPs under the token cap, and ``register()`` adding it
  under a new scheduler name next to Megatron's ``dp_balanced``.
* :mod:`packplace.integrations.megatron_dynamic_cp` — Megatron-Core's dynamic context parallelism:
  :class:`PackplaceDynamicCPScheduler` for its ``default_dynamic_cp`` slot (``install()`` / ``uninstall()``)
  and :class:`PackplaceDynamicCPPlanner` for its CPU-only planning contract, whose classes
  :mod:`packplace.integrations.megatron_planning` has without torch.

Every public function refuses bad arguments with one :class:`~packplace.errors.ConfigError` line
naming the argument.

Performance: docs/performance.md (Integrations).
"""

from __future__ import annotations

from packplace.integrations.partition import partition

__all__ = ["partition"]
