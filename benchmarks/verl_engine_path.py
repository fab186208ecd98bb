"""verl 0.9.1's own dynamic-batching path with verl's seqlen-balancing module and with packplace installed in its place.

A plain script (no pytest); needs verl 0.9.1 importable with its engine utilities (torch, tensordict,
transformers, peft, ...). For each seed and shape it builds a no-padding TensorDict the way verl's engines
hold a batch (jagged ``input_ids``, ``position_ids``, ``loss_mask``, a (B, j, 3) jagged field, verl's
``use_dynamic_bsz`` / ``max_token_len_per_gpu`` settings), runs ``verl.workers.engine.utils.prepare_micro_batches``
and restores a nested output with ``restore_dynamic_batch``, first with verl's functions, then after
``packplace.integrations.verl.install()``. Checked per batch: TensorDicts and nested tensors come back, every
index once, every micro-batch within the cap, the restored rows equal the original. Printed: batches passed
and the micro-batch counts of both.

Usage:
    python benchmarks/verl_engine_path.py
    python benchmarks/verl_engine_path.py --seeds 5
"""

from __future__ import annotations

import argparse

import torch
import verl.utils.seqlen_balancing as seqlen_balancing
import verl.workers.engine.utils as engine_utils
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu

import packplace.integrations.verl as packplace_verl

SHAPES = ((16, 1024), (64, 2048), (37, 4096), (128, 8192))


def no_padding_batch(seed: int, rows: int, cap: int) -> tuple[TensorDict, list[int]]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(16, cap // 2, (rows,), generator=gen).tolist()
    batch = TensorDict({
        "input_ids": torch.nested.as_nested_tensor([torch.randint(0, 1000, (n,), generator=gen) for n in lengths],
                                                   layout=torch.jagged),
        "position_ids": torch.nested.as_nested_tensor([torch.arange(n) for n in lengths], layout=torch.jagged),
        "loss_mask": torch.nested.as_nested_tensor([torch.ones(n) for n in lengths], layout=torch.jagged),
        "hidden": tu.nested_tensor_from_tensor_list([torch.randn(n, 3, generator=gen) for n in lengths], ragged_idx=1),
    }, batch_size=[rows])
    tu.assign_non_tensor(batch, use_dynamic_bsz=True, max_token_len_per_gpu=cap, sp_size=1)
    return batch, lengths


def check(batch: TensorDict, lengths: list[int], cap: int) -> int:
    micro, idx = engine_utils.prepare_micro_batches(batch)
    assert all(isinstance(part, TensorDict) and part["input_ids"].is_nested for part in micro)
    assert sorted(i for part in idx for i in part) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in part) <= cap for part in idx)
    rows = [row for part in micro for row in part["hidden"].unbind()]
    back = seqlen_balancing.restore_dynamic_batch(torch.nested.as_nested_tensor(rows, layout=torch.jagged), idx)
    assert all(torch.equal(a, b) for a, b in zip(back.unbind(), batch["hidden"].unbind()))
    return len(micro)


def run(label: str, seeds: int) -> list[int]:
    counts = []
    for seed in range(seeds):
        for rows, cap in SHAPES:
            batch, lengths = no_padding_batch(seed, rows, cap)
            try:
                counts.append(check(batch, lengths, cap))
            except Exception as error:  # noqa: BLE001 - reported per batch
                counts.append(-1)
                print(f"{label}: seed {seed}, {rows} rows, cap {cap}: {type(error).__name__}: {error}")
    print(f"{label}: {sum(c > 0 for c in counts)}/{len(counts)} batches passed, {sum(c for c in counts if c > 0)} "
          "micro-batches")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    theirs = run("verl", args.seeds)
    print(f"install(): {len(packplace_verl.install())} functions replaced")
    ours = run("packplace", args.seeds)
    packplace_verl.uninstall()
    pairs = [(o, t) for o, t in zip(ours, theirs) if o > 0 and t > 0]
    print(f"micro-batches: packplace fewer on {sum(o < t for o, t in pairs)}, equal on "
          f"{sum(o == t for o, t in pairs)}, more on {sum(o > t for o, t in pairs)} of {len(pairs)} batches")


if __name__ == "__main__":
    main()
