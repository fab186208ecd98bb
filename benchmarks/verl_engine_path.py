"""verl 0.9.1's own balancing paths with verl's seqlen-balancing module and with packplace installed in its place.

A plain script (no pytest); needs verl 0.9.1 importable with its engine utilities (torch, tensordict,
transformers, peft, ...). For each seed and shape it builds a no-padding TensorDict the way verl's engines
hold a batch (jagged ``input_ids``, ``position_ids``, ``loss_mask``, a (B, j, 3) jagged field, verl's
``use_dynamic_bsz`` / ``max_token_len_per_gpu`` settings), runs ``verl.workers.engine.utils.prepare_micro_batches``
and restores a nested output with ``restore_dynamic_batch``, first with verl's functions, then after
``packplace.integrations.verl.install()``. Checked per batch: TensorDicts and nested tensors come back, every
index once, every micro-batch within the cap, the restored rows equal the original. Printed: batches passed
and the micro-batch counts of both.

Then the trainer's rank balancing, ``RayPPOTrainer._balance_batch`` (a stub trainer with 4 data-parallel ranks;
64 samples of 100 to 4,000 valid tokens, uids in groups of 4) with and without ``use_prefix_grouper``: the
heaviest rank's workload (verl's proxy ``24576·s + s²``) with verl's module and with packplace's, every sample
once, and with the prefix grouper every uid on one rank.

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


class _StubTrainer:
    """What ``_balance_batch`` reads of a trainer: the actor worker group and its data-parallel size."""

    actor_rollout_wg = None

    def __init__(self, use_prefix_grouper: bool) -> None:
        self.use_prefix_grouper = use_prefix_grouper

    def _get_dp_size(self, worker_group: object, role: str) -> int:
        return 4


def trainer_balance(use_prefix_grouper: bool, seed: int) -> tuple[int, bool]:
    """(heaviest rank workload, every sample once and every uid on one rank) of verl's ``_balance_batch``."""
    import numpy as np
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    gen = torch.Generator().manual_seed(seed)
    valid = torch.randint(100, 4000, (64,), generator=gen)
    mask = (torch.arange(4096)[None, :] < valid[:, None]).long()
    rows = torch.arange(64)[:, None].expand(64, 4096).clone()
    batch = DataProto.from_dict({"attention_mask": mask, "input_ids": rows},
                                {"uid": np.array([f"u{i // 4}" for i in range(64)], dtype=object)})
    RayPPOTrainer._balance_batch(_StubTrainer(use_prefix_grouper), batch, {})
    order = batch.batch["input_ids"][:, 0].tolist()
    ranks = [order[r * 16:(r + 1) * 16] for r in range(4)]
    loads = [sum(24576 * int(valid[i]) + int(valid[i]) ** 2 for i in rank) for rank in ranks]
    together = all(len({i // 4 for i in rank}) * 4 == len(rank) for rank in ranks)
    valid_answer = sorted(order) == list(range(64)) and (together or not use_prefix_grouper)
    return max(loads), valid_answer


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
    for grouped in (False, True):
        ratios = []
        for seed in range(args.seeds):
            theirs_load, theirs_valid = trainer_balance(grouped, seed)
            packplace_verl.install()
            ours_load, ours_valid = trainer_balance(grouped, seed)
            packplace_verl.uninstall()
            assert theirs_valid and ours_valid
            ratios.append(ours_load / theirs_load)
        ratios.sort()
        print(f"trainer balance ({'prefix grouper' if grouped else 'equal_size'}): heaviest rank packplace / verl "
              f"median {ratios[len(ratios) // 2]:.4f}, worst {ratios[-1]:.4f}, best {ratios[0]:.4f} "
              f"over {len(ratios)} seeds")


if __name__ == "__main__":
    main()
