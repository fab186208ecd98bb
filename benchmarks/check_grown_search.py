"""Wall time of ``check_instance``'s search for the smallest grown cluster (``api._smallest_whole_cluster``) on
verl configs that no grown size fits, with and without the proof that verl's rollout fits beside no trainer
block of the same size (:func:`~packplace.placement.whole_plan.colocation_shortfall`), and whether the verdict
is the same.

Run: ``python benchmarks/check_grown_search.py [--gmu 0.64 0.8] [--mode both|off|on]``.

Case: the toy GRPO of ``tests/placement/test_vllm_start_refusal.py`` on verl 0.3.0 (Llama-3.1-8B actor and
reference, a 4-layer reward model, 16 prompts x 2 samples of 128 + 128 tokens) on one node of 8 GPUs of 8 GB,
at each ``--gmu`` (``policy.gpu_memory_utilization``; from 0.64 vLLM starts the engine): actor.train needs 24
GPUs, so the check grows the cluster (16 to 512 GPUs) and runs the ``concurrent`` solver on each size its
table does not rule out. ``off`` switches the proof off (``colocation_shortfall`` returns None: the code
before it), ``on`` keeps it; the limit is 600 s (never reached). Columns: wall and CPU seconds (the CPU's
steadier on a loaded machine), the sizes the solver ran on (``solves``), and the message's tail from "no whole
plan found".
"""

from __future__ import annotations

import argparse
import time

import packplace.placement.api as api
from packplace.errors import InfeasibleError
from packplace.placement.problem.config import build_instance

HW = dict(racks=1, nodes_per_rack=1, gpus_per_node=8, flops_per_gpu=1e15, memory_per_gpu=8e9,
          memory_bandwidth=2e12, alpha_coll_g=1e-6, beta_coll_g=3e-12, alpha_coll_n=5e-6, beta_coll_n=2e-11,
          alpha_coll_r=8e-6, beta_coll_r=2.5e-11, alpha_p2p_g=2e-6, beta_p2p_g=2.5e-12, alpha_p2p_n=5e-6,
          beta_p2p_n=2e-11, alpha_p2p_r=8e-6, beta_p2p_r=2.4e-11, decode_step_overhead=0.0,
          memory_workspace=0.0)


def config(gmu: float) -> dict:
    """The verl 0.3.0 toy at ``gpu_memory_utilization`` ``gmu`` (``_verl_toy`` of the tests)."""
    actor = dict(layers=32, hidden_dim=4096, ffn_dim=14336, vocab_size=128256, num_kv_heads=8)
    reward = dict(layers=4, hidden_dim=512, ffn_dim=1024, vocab_size=1000, head_dim=64)
    return {"hardware": dict(HW), "models": {"actor": actor, "reward": reward},
            "workload": dict(batch_size=16, samples_per_prompt=2, context_length=128, generation_length=128),
            "policy": {"algorithm": "grpo", "gpu_memory_utilization": gmu, "framework": "verl",
                       "framework_version": "0.3.0"}}


def run(gmu: float, proof: bool) -> tuple[float, float, list[int], str]:
    """Wall and CPU seconds (``time.process_time``) of one ``check_instance`` call, the grown sizes the concurrent
    solver ran on (each once: ``solve_placement`` is entered more than once per size), the message's tail."""
    solves: list[int] = []
    real_solve, real_proof = api.solve_placement, api.colocation_shortfall

    def counted(instance, *args, **kwargs):
        solves.append(instance.cluster.num_gpus)
        return real_solve(instance, *args, **kwargs)

    api.solve_placement = counted
    api.colocation_shortfall = real_proof if proof else (lambda table: None)
    try:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            verdict = api.check_instance(build_instance(config(gmu)), time_limit_s=600.0).message
        except InfeasibleError as exc:
            verdict = str(exc)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        api.solve_placement, api.colocation_shortfall = real_solve, real_proof
    at = verdict.find("no whole plan found")
    return seconds, cpu, sorted(set(solves)), verdict[at:at + 160] if at >= 0 else verdict[:160]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gmu", type=float, nargs="+", default=[0.64, 0.8])
    parser.add_argument("--mode", choices=("both", "off", "on"), default="both")
    args = parser.parse_args()
    modes = {"both": (False, True), "off": (False,), "on": (True,)}[args.mode]
    for gmu in args.gmu:
        for proof in modes:
            seconds, cpu, solves, tail = run(gmu, proof)
            print(f"gmu {gmu:g} proof {'on ' if proof else 'off'} {seconds:7.1f} s wall {cpu:7.1f} s CPU  "
                  f"solves {solves}  {tail}",
                  flush=True)


if __name__ == "__main__":
    main()
