"""Row selection for the verl drop-ins: the rows of a batch field, whatever container holds it.

verl's dynamic batching selects micro-batch rows from a ``TensorDict`` whose fields are dense
tensors, jagged nested tensors (the no-padding layout, ``torch.nested`` with ``layout=torch.jagged``),
``NonTensorStack`` (one Python object per row) or ``NonTensorData`` (one value for the whole batch),
and from a ``DataProto``'s ``non_tensor_batch`` (numpy object arrays). Nested tensors cannot be
fancy-indexed (``aten.index.Tensor`` is not implemented for them), so their rows are unbound and
re-packed with the same ragged dimension. torch and tensordict are imported only when such a value
comes in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def is_torch_tensor(value: Any) -> bool:
    """True for a ``torch.Tensor`` (nested ones included), without importing torch."""
    return any(cls.__module__.startswith("torch") and cls.__name__ == "Tensor" for cls in type(value).__mro__)


def is_tensordict(value: Any) -> bool:
    """True for a tensordict ``TensorDictBase`` (TensorDict and its subclasses), without importing it."""
    return any(cls.__name__ == "TensorDictBase" and cls.__module__.startswith("tensordict")
               for cls in type(value).__mro__)


def _is_non_tensor(value: Any) -> bool:
    """True for tensordict's ``NonTensorData`` / ``NonTensorStack`` (both TensorDict-like, indexed as a whole)."""
    return any(cls.__name__ in ("NonTensorData", "NonTensorStack") and cls.__module__.startswith("tensordict")
               for cls in type(value).__mro__)


def nested_from_rows(rows: Sequence[Any], template: Any) -> Any:
    """A nested tensor of ``rows`` (1 or more tensors) with ``template``'s layout and ragged dimension."""
    import torch  # reason: optional; only reached with a torch nested tensor

    if template.layout != torch.jagged:
        return torch.nested.as_nested_tensor(list(rows), layout=template.layout)
    ragged = getattr(template, "_ragged_idx", 1)
    if rows[0].dim() == 1:
        return torch.nested.as_nested_tensor(list(rows), layout=torch.jagged)
    values = torch.cat(list(rows), dim=ragged - 1)
    lengths = torch.tensor([row.shape[ragged - 1] for row in rows], dtype=torch.long, device=values.device)
    offsets = torch.zeros(len(rows) + 1, dtype=torch.long, device=values.device)
    torch.cumsum(lengths, dim=0, out=offsets[1:])
    out = torch.nested.nested_tensor_from_jagged(values=values, offsets=offsets)
    out._ragged_idx = ragged
    return out


def take_rows(value: Any, index: Sequence[int]) -> Any:
    """Rows ``index`` (in that order) of one batch field, in the field's own container type.

    Dense torch tensors and numpy arrays: fancy indexing (the index moved to the tensor's device);
    nested tensors: unbind, pick, re-pack (:func:`nested_from_rows`); a TensorDict: every field
    (:func:`select_tensordict`); ``NonTensorStack``/``NonTensorData``: their own indexing (a
    ``NonTensorData`` keeps its value); a mapping: per key; anything else indexable: a list.
    """
    if is_torch_tensor(value):
        if value.is_nested:
            unbound = value.unbind()
            return nested_from_rows([unbound[i] for i in index], value)
        import torch  # reason: optional; only reached with a torch tensor

        return value[torch.as_tensor(list(index), dtype=torch.long, device=value.device)]
    if _is_non_tensor(value):
        import torch  # reason: optional; only reached with tensordict's non-tensor values

        return value[torch.as_tensor(list(index), dtype=torch.long)] if value.shape else value
    if is_tensordict(value):
        return select_tensordict(value, index)
    if isinstance(value, Mapping):
        return {key: take_rows(field, index) for key, field in value.items()}
    if hasattr(value, "shape") and hasattr(value, "__getitem__"):   # numpy arrays
        return value[np.asarray(index, dtype=np.int64)]
    return [value[i] for i in index]


def select_tensordict(batch: Any, index: Sequence[int]) -> Any:
    """A new TensorDict of rows ``index`` of ``batch``: every field by :func:`take_rows`, the
    batch size's first dimension ``len(index)``, the device kept."""
    from tensordict import TensorDict  # reason: optional; only reached with a TensorDict

    fields = {key: take_rows(field, index) for key, field in batch.items()}
    size = [len(index), *batch.batch_size[1:]]
    return TensorDict(fields, batch_size=size, device=batch.device)


__all__ = ["is_tensordict", "is_torch_tensor", "nested_from_rows", "select_tensordict", "take_rows"]
