"""The model's ZeRO-3 / FSDP training step against published FSDP2 training throughput (torchtitan).

    python benchmarks/fsdp_training_throughput.py [--json OUT] [--markdown]

Reads ``benchmarks/fsdp_training_throughput.json`` (each published row with its exact setup and
source: model, GPUs, FSDP and TP degrees, local batch, sequence length, activation checkpointing,
``torch.compile``) and prices each row's step with the placement model's training vertex on ``zero3``
weights, the path NeMo RL's DTensor, verl's FSDP and the DeepSpeed trainers take
(:func:`packplace.placement.candidates.vertex_parts`: the forward and backward passes, the per-micro-batch
all-gathers and reduce-scatters with their exposed edges, the Adam update). One micro-batch of
``local_batch`` sequences per step (torchtitan accumulates no gradients in these runs). Tokens per second
per GPU as torchtitan logs them: ``local_batch·seq_len/tp`` over the step.

Kernels: an eager run is priced with the Hugging Face eager inventory (``hf``: 39 kernels per Llama layer
forward, every one at least the host's issue time), a compiled run with the fused inventory
(``megatron``: the norm, RoPE, SwiGLU and residual each one kernel, 13 per layer forward), which stands in
for what Inductor emits for a compiled block (the same GEMMs and attention, the elementwise chains fused);
both columns are printed for every row.

Activation checkpointing as torchtitan runs it (``torchtitan/parallelisms/parallelize_llama.py`` @ 9dec370):
``full`` recomputes each block's forward (the model's ``recompute: full``); ``selective_op`` saves the
outputs of the matmuls and of the attention except every second ``mm`` of a block (``wk``, ``wo`` and
``w3`` of ``wq, wk, wv, wo, w1, w3, w2``) and recomputes every other op: here the kernels of those three
GEMMs and of every elementwise op of the layer's forward (with a component table; without one, the three
GEMMs' share of the layer's forward FLOPs times the model's full recompute).

The H100 rows ran on Grand Teton hosts (HBM2e at 2.4 TB/s, 500 W): priced on the ``h100-sxm`` preset with
that bandwidth and 96 GB, at the SXM datasheet's 989 TFLOP/s and, as a bound, at the NVL's 835 (torchtitan:
the real peak "is between SXM and NVL"). Ratios are predicted / published step time
(``published tokens/s ÷ predicted tokens/s``), the convention of ``packplace validate``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from packplace.placement.candidates import _parts
from packplace.placement.model import components as C
from packplace.placement.model import cost as cost_module
from packplace.placement.model.cost import CostModel
from packplace.placement.model.memory import TrainingOptions
from packplace.placement.problem.hardware import Cluster, Hardware, resolve_preset
from packplace.placement.problem.plan import Strategy
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import resolve_model

HERE = Path(__file__).resolve().parent
DATA = HERE / "fsdp_training_throughput.json"
#: GEMMs of a torchtitan Llama block's forward, in issue order (``wq, wk, wv, wo, w1, w3, w2``), that per-op
#: selective checkpointing recomputes: every second ``mm`` (``wk``, ``wo``, ``w3``).
OP_SAC_RECOMPUTED = (False, True, False, True, False, True, False)


class FusedKernels(CostModel):
    """A cost model whose trainer passes run the fused kernel inventory (a compiled block) of a PyTorch-native
    trainer: its training passes at the rate fraction of the Hugging Face kernels'."""

    def pass_kernels(self, pp: int, tp: int, ep: int = 1) -> str:
        return "megatron"

    def train_rate_fraction(self, model, pp: int, tp: int, ep: int = 1, lora_rank: int = 0) -> float:
        return CostModel(self.hw, self.cluster, self.workload).train_rate_fraction(model, pp, tp, ep, lora_rank)


def hardware(spec: dict, flops: float | None = None) -> Hardware:
    """The row's hardware: the preset with the row's overrides (and ``flops_per_gpu`` when given)."""
    fields = {k: v for k, v in resolve_preset({"preset": spec["preset"]}).items()
              if k not in ("racks", "nodes_per_rack", "gpus_per_node")}
    fields.update(spec.get("overrides", {}))
    if "megatron_pass_factor" in fields:   # the fused inventory stands for Inductor's kernels, not Megatron-Core's
        fields["megatron_pass_factor"] = 1.0
    if flops is not None:
        fields["flops_per_gpu"] = flops
    return Hardware(**fields)


def model_of(name: str, models: dict):
    """A preset name, or a shape from the data file's ``models`` (Hugging Face config fields)."""
    if name in models:
        return resolve_model({k: v for k, v in models[name].items() if k != "source"})
    return resolve_model(name)


def op_sac_seconds(cost: CostModel, model, tokens: float, seq: float, tp: int, fused: bool,
                   full_recompute: float) -> float:
    """Seconds per micro-batch of torchtitan's per-op selective recompute over every layer (module docstring)."""
    table = cost.components_for(model)
    if table is None:
        gemm = [2.0 * model.hidden_dim * w for w in (model.attention_dim, model.kv_dim, model.kv_dim,
                                                      model.attention_dim)]
        gemm = [gemm[0], gemm[1], gemm[2], gemm[3]] + [2.0 * model.hidden_dim * model.ffn_dim] * 3
        share = sum(g for g, r in zip(gemm, OP_SAC_RECOMPUTED) if r) / cost.forward_flops_per_token(model, seq) \
            * model.layers
        return share * full_recompute
    if fused:
        q, kv, f = model.attention_dim / tp, model.kv_dim / tp, model.ffn_dim / tp
        ops = C.megatron_layer_forward(model, tokens, seq, tp)
        shares = {(tokens, model.hidden_dim, q + 2 * kv): kv / (q + 2 * kv), (tokens, q, model.hidden_dim): 1.0,
                  (tokens, model.hidden_dim, 2 * f): 0.5, (tokens, f, model.hidden_dim): 0.0}
        seconds = sum(table.eager_seconds([op]) * shares.get(op[1:], 0.0) for op in ops if op[0] == "gemm")
    else:
        ops = C.layer_forward(model, tokens, seq, tp)
        gemms = [op for op in ops if op[0] == "gemm"]
        seconds = sum(table.eager_seconds([op]) for op, r in zip(gemms, OP_SAC_RECOMPUTED) if r)
    seconds += table.eager_seconds([op for op in ops if op[0] == "ew"])
    return model.layers * seconds / rate_fraction(cost, model, tp)


def rate_fraction(cost: CostModel, model, tp: int) -> float:
    """The fraction of the table's rates the cost model's training passes run at (1 where the installed
    packplace has no such fraction)."""
    method = getattr(cost, "train_rate_fraction", None)
    return method(model, 1, tp) if method is not None else 1.0


def pass_breakdown(cost: CostModel, model, tokens: float, seq: float, tp: int, fused: bool) -> dict[str, float]:
    """One micro-batch's forward + backward kernels by kind, seconds (component tables only): ``gemm``,
    ``attention``, ``elementwise`` (each kernel's own time plus the per-kernel GPU time) and ``host``
    (what the host's issue time adds over the GPU time of the kernels shorter than it)."""
    table = cost.components_for(model)
    if table is None:
        return {}
    if fused:
        fwd = C.megatron_layer_forward(model, tokens, seq, tp)
        bwd = C.megatron_layer_backward(model, tokens, seq, tp)
    else:
        fwd = C.layer_forward(model, tokens, seq, tp)
        bwd = C.backward(fwd)
    head = C.head_kernels(model, tokens, tp, "loss", fused_norm=fused) + C.head_backward(model, tokens, tp, False,
                                                                                         fused_norm=fused)
    out = {"gemm": 0.0, "attention": 0.0, "elementwise": 0.0, "host": 0.0, "kernels": 0.0}
    for ops, count in ((fwd + bwd, model.layers), (head, 1)):
        for op in ops:
            gpu = table.kernel_gpu_s + table.kernel_seconds(op)
            kind = {"gemm": "gemm", "attn": "attention"}.get(op[0], "elementwise")
            out[kind] += count * gpu
            out["host"] += count * max(0.0, table.kernel_issue_s - gpu)
            out["kernels"] += count
    return out


def price(row: dict, document: dict, fused: bool, flops: float | None = None) -> dict:
    """The row's predicted step: parts (seconds), step seconds and tokens/s/GPU."""
    spec = document["hardware"][row["hardware"]]
    hw = hardware(spec, flops)
    model = model_of(row["model"], document["models"])
    gpus, dp, tp, lbs, seq = row["gpus"], row["dp"], row["tp"], row["local_batch"], row["seq_len"]
    per_node = min(8, gpus)
    nodes = gpus // per_node
    extent = (1, nodes, per_node)
    cost = (FusedKernels if fused else CostModel)(hw, Cluster(1, nodes, per_node), Workload(lbs * dp, 1, seq - 1, 1))
    strategy = Strategy(dp, 1, tp, 1)

    def parts(recompute: str) -> dict[str, float]:
        options = TrainingOptions(sharding="zero3", recompute=recompute, fsdp_size=row.get("fsdp_size", 0))
        return _parts(cost, model, "train", options, strategy, lbs, extent, False, False, False, None, None)

    base = parts("none")
    full = parts("full")["memory_options"] - base["memory_options"]
    tokens = float(lbs * seq)
    recompute = {"none": 0.0, "full": full,
                 "selective_op": op_sac_seconds(cost, model, tokens, seq, tp, fused, full)}[row["ac"]]
    step = sum(base.values()) + recompute
    collectives = base["memory_options"]
    return {"step_s": step, "tps_per_gpu": lbs * seq / tp / step,
            "parts": {"passes_and_update": base["train"], "fsdp_exposed": collectives, "recompute": recompute,
                      "overhead": base.get("overhead", 0.0)},
            "kernels": pass_breakdown(cost, model, tokens, seq, tp, fused),
            "table": cost.components_for(model) is not None}


def table_rows(document: dict) -> list[dict]:
    """The rows a component table prices (the GPU types :data:`~packplace.placement.model.cost.PYTORCH_TRAIN_FRACTION`
    is fitted on)."""
    return [row for row in document["rows"] if price(row, document, fused=row["compile"])["table"]]


def ratio_at(row: dict, document: dict, fraction: float) -> float:
    """Predicted / published step time of ``row`` with the training rate fraction set to ``fraction``."""
    saved = cost_module.PYTORCH_TRAIN_FRACTION
    cost_module.PYTORCH_TRAIN_FRACTION = fraction
    try:
        return row["published_tps"] / price(row, document, fused=row["compile"])["tps_per_gpu"]
    finally:
        cost_module.PYTORCH_TRAIN_FRACTION = saved


def held_out(document: dict, key: str) -> list[tuple[str, float, float]]:
    """Each table row priced with the fraction fitted without the rows sharing its ``key`` (``id``: leave one
    row out; ``model``: leave one model out): the fraction is the median predicted / published step time of
    the other rows at fraction 1 (:data:`~packplace.placement.model.cost.PYTORCH_TRAIN_FRACTION`'s rule).
    ``[(row id, fitted fraction, ratio)]``."""
    rows = table_rows(document)
    at_one = {row["id"]: ratio_at(row, document, 1.0) for row in rows}
    out = []
    for row in rows:
        fraction = statistics.median(at_one[r["id"]] for r in rows if r[key] != row[key])
        out.append((row["id"], fraction, ratio_at(row, document, fraction)))
    return out


def spread(ratios: list[float]) -> str:
    """``median (min-max), n`` of ``ratios``."""
    if not ratios:
        return "none"
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), n={len(ratios)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--json", help="write the rows with their predictions to this file")
    parser.add_argument("--markdown", action="store_true", help="print the rows as a Markdown table")
    args = parser.parse_args()
    document = json.loads(Path(args.data).read_text())
    out = []
    for row in document["rows"]:
        matched = price(row, document, fused=row["compile"])
        other = price(row, document, fused=not row["compile"])
        bound = document["hardware"][row["hardware"]].get("flops_bound_nvl")
        low = price(row, document, fused=row["compile"], flops=bound) if bound else None
        out.append({**row, "predicted": matched, "other_kernels": other, "nvl_flops": low,
                    "ratio": row["published_tps"] / matched["tps_per_gpu"],
                    "ratio_other_kernels": row["published_tps"] / other["tps_per_gpu"],
                    "ratio_nvl_flops": row["published_tps"] / low["tps_per_gpu"] if low else None})
    if args.markdown:
        print("| row | compile | AC | published tok/s/GPU | predicted | ratio | other kernels | at NVL FLOP/s |")
        print("|---|---|---|---|---|---|---|---|")
    else:
        print(f"{'row':<34} {'comp':>4} {'AC':>12} {'published':>9} {'predicted':>9} {'ratio':>6} "
              f"{'other':>6} {'NVL':>6}  parts (s)")
    for r in out:
        nvl = f"{r['ratio_nvl_flops']:.2f}" if r["ratio_nvl_flops"] else "-"
        if args.markdown:
            print(f"| {r['id']} | {'yes' if r['compile'] else 'no'} | {r['ac']} | {r['published_tps']:g} | "
                  f"{r['predicted']['tps_per_gpu']:.0f} | {r['ratio']:.2f} | {r['ratio_other_kernels']:.2f} | {nvl} |")
        else:
            parts = ", ".join(f"{k} {v:.3f}" for k, v in r["predicted"]["parts"].items() if v)
            print(f"{r['id']:<34} {'yes' if r['compile'] else 'no':>4} {r['ac']:>12} {r['published_tps']:>9g} "
                  f"{r['predicted']['tps_per_gpu']:>9.0f} {r['ratio']:>6.2f} {r['ratio_other_kernels']:>6.2f} "
                  f"{nvl:>6}  {parts}")
    print()
    table = [r["ratio"] for r in out if r["predicted"]["table"]]
    knobs = [r["ratio"] for r in out if not r["predicted"]["table"]]
    print("predicted / published step time, median (min-max):")
    print(f"  component-table rows (H100): {spread(table)}")
    print(f"    eager {spread([r['ratio'] for r in out if r['predicted']['table'] and not r['compile']])}, "
          f"compiled {spread([r['ratio'] for r in out if r['predicted']['table'] and r['compile']])}")
    print(f"    at the NVL FLOP/s bound: {spread([r['ratio_nvl_flops'] for r in out if r['ratio_nvl_flops']])}")
    print(f"  efficiency-knob rows (A100): {spread(knobs)}")
    print(f"  every row: {spread([r['ratio'] for r in out])}")
    by_id = {r["id"]: r for r in out}
    for bound in document.get("fp8_bounds", []):
        bf16 = by_id.get(bound.get("bf16_row", ""))
        if bf16 is not None:   # a BF16 step is slower than the FP8 one: published FP8 / predicted BF16 > 1
            predicted = bf16["predicted"]["tps_per_gpu"]
            print(f"  FP8 bound {bound['id']}: published FP8 {bound['published_tps']:g} / predicted BF16 "
                  f"{predicted:.0f} = {bound['published_tps'] / predicted:.2f}")
    if hasattr(cost_module, "PYTORCH_TRAIN_FRACTION"):
        rows = table_rows(document)
        at_one = [ratio_at(row, document, 1.0) for row in rows]
        print(f"  component-table rows at fraction 1: {spread(at_one)}; fitted fraction (their median) "
              f"{statistics.median(at_one):.4f}, shipped {cost_module.PYTORCH_TRAIN_FRACTION}")
        for key, label in (("id", "leave one row out"), ("model", "leave one model out")):
            fits = held_out(document, key)
            print(f"  {label}: fraction {min(f for _, f, _ in fits):.3f}-{max(f for _, f, _ in fits):.3f}, "
                  f"held-out ratio {spread([r for _, _, r in fits])}")
    if args.json:
        Path(args.json).write_text(json.dumps({"data": str(Path(args.data).name), "rows": out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
