"""Whole vLLM engines on B200 against H100, one publication running both: the B200 table against a whole engine.

    python benchmarks/blackwell_throughput.py            # print the rows, the pairs and their medians
    python benchmarks/blackwell_throughput.py --write    # also refresh benchmarks/blackwell_throughput.json

The ``b200`` / ``gb200`` component tables are the measured H200 table scaled by achieved per-kernel ratios
(docs/calibration-and-validation.md, "The B200 and GB200 tables, derived from the H200"); nothing there checks
a whole inference engine on Blackwell. This script prices published vLLM runs that ran the same model, the
same vLLM release and the same engine settings on an H100 and on a B200, so each B200 / H100 ratio comes from
one source.

Source: the ML.ENERGY Leaderboard v3.0 (github.com/ml-energy/leaderboard @ 0cd52dab897c5d91a45f4d413038f3b8b4251b0f,
``public/data/models/<model>__<task>.json``; 2026-02-16 data). Runtime vLLM 0.11.1 on both GPUs
(github.com/ml-energy/benchmark @ c1d6557fbf7c7c495749b0fcf649f71774eabde9 ``docs/overview.md``; the
leaderboard v3.0 post, github.com/ml-energy/blog ``docs/posts/ml-energy-leaderboard-v3.0.md``), "NVIDIA H100
80GB HBM3" and "NVIDIA B200" servers; the engine configuration is the same file on both GPUs
(``configs/vllm/<task>/<model>/{H100,B200}/monolithic.config.yaml``: ``async-scheduling``,
``max-num-batched-tokens`` 8,192, bfloat16, ``api-server-count`` 3, ``max-model-len`` 20,480 (chat) / 40,960
(gpqa), Qwen3's reasoning parser and thinking on for gpqa) and ``max_num_seqs`` is the swept knob
(``sweeps.yaml``). The benchmark (``mlenergy/benchmark/llm/benchmark.py``) sends requests at rate inf to
``vllm serve`` and measures a steady state, from when ``max_num_seqs`` requests have their first token to
when all but ``max_num_seqs + 1`` have finished. Published per configuration: ``avg_batch_size`` (running
sequences, from vLLM's metrics), ``median_itl_ms`` (median inter-token latency over the steady state),
``output_throughput_tokens_per_sec`` and the output-length histogram (50 bins). Tasks: ``lm-arena-chat``
(LMArena human-preference conversations; multi-turn prompts concatenate the history; ~400-650 output tokens)
and ``gpqa`` (GPQA Diamond with Qwen3's thinking on: ~7,000-8,300 output tokens).

Pricing (the model's own pieces, as a placement prices a generation vertex on the GPU's component table):
the decode iteration is ``packplace estimate --task decode --framework vllm`` (the component table's kernels,
the bare vLLM profile's 1.4 ms per iteration, V1's host time per running sequence and, on the B200, the KV read at
``vllm_kv_bandwidth_fraction``, which ``benchmarks/blackwell_engine_term.py`` fits to these B200 rows; as
``benchmarks/vllm_offline_throughput.py`` prices its ``vllm`` framing) at the published ``avg_batch_size``
running sequences (what ran) of the steady state's mean cached tokens, ``prompt + E[L²]/(2E[L])`` over the
published output-length histogram; it is set beside the published median inter-token latency. The steady
state's output tokens/s add the prefill of the requests each iteration admits (:func:`steady_throughput`).

Assumption of this script: the mean prompt. ML.ENERGY publishes no input lengths; the rows take 300 tokens
for ``lm-arena-chat`` and 250 for ``gpqa`` (a GPQA question, its four choices and the chat template);
:func:`prompt_sensitivity` reprices the chat pairs at 100 and 1,000 tokens. The script also prices the only BF16
Megatron-Core step times published on B200 (:data:`MOE_TRAINING`, GPT-OSS 120B). None of these is a validation
row; this script sets no knob (the B200 rows size ``vllm_kv_bandwidth_fraction`` through
``benchmarks/blackwell_engine_term.py``). What the table says: docs/calibration-and-validation.md, "Whole engines
on Blackwell: vLLM against ML.ENERGY's B200 and H100 runs".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

import numpy as np

from packplace.placement.model.cost import CostModel
from packplace.placement.model.engine import RolloutEngine
from packplace.placement.model.framework import FRAMEWORKS, VLLM_HOST_SECONDS_PER_SEQUENCE
from packplace.placement.problem.workload import Workload
from packplace.placement.task_estimate import estimate, resolve_hardware, resolve_model
from packplace.shape import from_hf_config

OUT = Path(__file__).with_name("blackwell_throughput.json")
SOURCE = ("github.com/ml-energy/leaderboard @ 0cd52dab897c5d91a45f4d413038f3b8b4251b0f "
          "public/data/models/{file}.json (ML.ENERGY Leaderboard v3.0, vLLM 0.11.1)")
#: Mean prompt tokens taken per task (not published; the module docstring).
PROMPT = {"lm-arena-chat": 300, "gpqa": 250}
#: Qwen3 dense shapes (huggingface.co/Qwen/Qwen3-{8B,14B,32B} config.json).
QWEN3 = {
    "qwen3-8b": {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                 "tie_word_embeddings": False},
    "qwen3-14b": {"model_type": "qwen3", "num_hidden_layers": 40, "hidden_size": 5120, "intermediate_size": 17408,
                  "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                  "tie_word_embeddings": False},
    "qwen3-32b": {"model_type": "qwen3", "num_hidden_layers": 64, "hidden_size": 5120, "intermediate_size": 25600,
                  "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                  "tie_word_embeddings": False},
}
GPU = {"H100": "h100-sxm", "B200": "b200"}

#: Quantiles at which each configuration's published output-length histogram is transcribed.
QUANTILES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
#: Files of SOURCE, by ``(model, task)``.
FILES = {
    ("llama3.1-8b", "lm-arena-chat"): "meta-llama__Llama-3.1-8B-Instruct__lm-arena-chat",
    ("qwen3-8b", "lm-arena-chat"): "Qwen__Qwen3-8B__lm-arena-chat",
    ("qwen3-8b", "gpqa"): "Qwen__Qwen3-8B__gpqa",
    ("qwen3-14b", "lm-arena-chat"): "Qwen__Qwen3-14B__lm-arena-chat",
    ("qwen3-14b", "gpqa"): "Qwen__Qwen3-14B__gpqa",
    ("qwen3-32b", "lm-arena-chat"): "Qwen__Qwen3-32B__lm-arena-chat",
    ("qwen3-32b", "gpqa"): "Qwen__Qwen3-32B__gpqa",
    ("llama3.1-70b", "lm-arena-chat"): "meta-llama__Llama-3.1-70B-Instruct__lm-arena-chat",
}
#: Every dense bf16 configuration of FILES, as published: ``(gpu, tensor_parallel, max_num_seqs,
#: avg_batch_size, avg_output_len, median_itl_ms, output_throughput_tokens_per_sec, the histogram's last edge
#: (the response cap), output tokens at QUANTILES)``; the quantiles are read off the published 50-bin histogram
#: (``output_length_distribution``, linear within a bin).
PUBLISHED = {
    ('llama3.1-8b', 'lm-arena-chat'): [
        ('B200', 1, 8, 7.96, 387.9, 4.57, 1637, 4096, (40, 78, 149, 232, 320, 408, 497, 616, 791, 979, 1548)),
        ('B200', 1, 16, 15.90, 409.0, 5.08, 2751, 4096, (40, 77, 154, 246, 335, 424, 520, 631, 817, 1014, 2111)),
        ('B200', 1, 32, 31.77, 397.8, 6.35, 3810, 4096, (40, 79, 145, 235, 327, 411, 515, 631, 817, 1085, 1784)),
        ('B200', 1, 64, 63.80, 389.7, 9.00, 5589, 4096, (40, 77, 144, 234, 323, 419, 510, 618, 791, 971, 1753)),
        ('B200', 1, 128, 127.54, 395.6, 26.66, 4570, 4096, (41, 81, 147, 231, 328, 422, 514, 619, 820, 1032, 1872)),
        ('B200', 1, 256, 255.23, 399.5, 31.69, 7664, 4096, (39, 75, 153, 238, 324, 416, 512, 616, 806, 1059, 1764)),
        ('B200', 1, 512, 510.55, 396.1, 50.23, 9571, 4096, (40, 78, 149, 235, 328, 422, 514, 622, 797, 1009, 1871)),
        ('B200', 1, 1024, 1021.33, 395.6, 87.12, 10922, 4096, (40, 78, 149, 239, 329, 420, 515, 624, 798, 1031, 1858)),
        ('B200', 1, 2048, 2042.92, 395.6, 124.86, 14799, 4096, (40, 78, 147, 238, 328, 414, 511, 623, 802, 1024, 1856)),
        ('H100', 1, 8, 7.98, 388.7, 7.32, 1070, 4096, (40, 78, 147, 232, 322, 408, 506, 609, 800, 984, 1778)),
        ('H100', 1, 16, 15.95, 404.2, 7.91, 1954, 4096, (39, 77, 150, 239, 340, 426, 520, 626, 808, 1022, 1879)),
        ('H100', 1, 32, 31.91, 390.3, 8.91, 3391, 4096, (38, 75, 150, 237, 328, 417, 514, 621, 802, 993, 1620)),
        ('H100', 1, 64, 63.92, 395.5, 11.50, 5147, 4096, (41, 80, 151, 240, 325, 405, 505, 623, 807, 1045, 2065)),
        ('H100', 1, 96, 95.70, 392.8, 14.08, 6260, 4096, (40, 77, 147, 235, 323, 412, 498, 614, 790, 1024, 1998)),
        ('H100', 1, 128, 127.62, 404.6, 16.48, 7037, 4096, (40, 78, 147, 236, 333, 420, 512, 623, 827, 1048, 1947)),
        ('H100', 1, 192, 191.66, 396.8, 20.91, 8223, 4096, (42, 83, 144, 239, 322, 418, 513, 628, 818, 1041, 1715)),
        ('H100', 1, 256, 255.19, 404.2, 26.13, 9010, 4096, (41, 79, 148, 238, 331, 420, 509, 629, 821, 1078, 1845)),
        ('H100', 1, 384, 383.01, 394.3, 37.70, 9248, 4096, (39, 77, 148, 240, 325, 426, 514, 617, 797, 999, 1907)),
        ('H100', 1, 512, 510.87, 396.7, 47.41, 9806, 4096, (40, 78, 150, 237, 323, 415, 500, 622, 814, 1040, 1818)),
        ('H100', 1, 768, 690.87, 397.4, 62.93, 9603, 4096, (40, 78, 145, 235, 325, 416, 510, 621, 815, 1051, 1947)),
    ],
    ('qwen3-8b', 'lm-arena-chat'): [
        ('B200', 1, 8, 7.95, 638.7, 4.97, 1502, 4096, (47, 103, 208, 348, 521, 688, 861, 1060, 1401, 1753, 2684)),
        ('B200', 1, 16, 15.94, 646.4, 5.78, 2086, 4096, (47, 101, 208, 357, 518, 686, 856, 1094, 1431, 1690, 2603)),
        ('B200', 1, 32, 31.93, 643.2, 10.27, 2673, 4096, (48, 105, 214, 356, 512, 695, 856, 1072, 1406, 1705, 2930)),
        ('B200', 1, 64, 63.83, 642.6, 12.89, 4432, 4096, (46, 101, 208, 356, 526, 695, 859, 1059, 1405, 1705, 2699)),
        ('B200', 1, 128, 127.68, 657.7, 12.08, 9119, 4096, (49, 109, 213, 339, 535, 709, 886, 1085, 1469, 1802, 2766)),
        ('B200', 1, 256, 255.36, 654.4, 20.05, 11463, 4096, (48, 104, 211, 347, 529, 700, 865, 1081, 1427, 1781, 2797)),
        ('B200', 1, 512, 510.98, 655.1, 34.61, 12164, 4096, (47, 100, 210, 351, 524, 691, 856, 1081, 1435, 1802, 2828)),
        ('B200', 1, 1024, 1022.39, 640.7, 79.63, 11809, 4096,
         (47, 102, 204, 341, 524, 688, 863, 1073, 1412, 1747, 2643)),
        ('B200', 1, 1536, 1426.70, 648.7, 91.20, 15100, 4096,
         (48, 105, 210, 352, 526, 695, 864, 1083, 1408, 1757, 2725)),
        ('H100', 1, 8, 7.97, 646.6, 8.20, 962, 4096, (49, 105, 197, 335, 530, 689, 859, 1092, 1411, 1784, 2684)),
        ('H100', 1, 16, 15.96, 660.1, 8.90, 1745, 4096, (48, 104, 216, 357, 523, 696, 870, 1097, 1431, 1752, 3094)),
        ('H100', 1, 32, 31.94, 646.8, 10.57, 2928, 4096, (47, 101, 204, 341, 526, 687, 861, 1087, 1424, 1743, 2848)),
        ('H100', 1, 64, 63.88, 644.5, 13.95, 4315, 4096, (48, 102, 206, 358, 529, 682, 856, 1089, 1392, 1760, 2735)),
        ('H100', 1, 96, 95.82, 642.0, 17.80, 5255, 4096, (49, 105, 212, 361, 518, 666, 842, 1079, 1397, 1705, 2684)),
        ('H100', 1, 128, 127.80, 641.4, 20.70, 5930, 4096, (48, 104, 200, 331, 536, 685, 864, 1087, 1417, 1716, 2370)),
        ('H100', 1, 192, 191.69, 658.6, 26.35, 6932, 4096, (47, 102, 213, 346, 527, 687, 880, 1075, 1465, 1820, 2766)),
        ('H100', 1, 256, 255.49, 654.0, 31.36, 7719, 4096, (49, 107, 212, 349, 532, 689, 855, 1084, 1466, 1782, 2679)),
        ('H100', 1, 384, 382.98, 648.3, 42.68, 8258, 4096, (48, 107, 221, 360, 533, 695, 864, 1075, 1408, 1742, 2694)),
        ('H100', 1, 512, 474.40, 645.1, 47.16, 8535, 4096, (47, 101, 203, 363, 536, 699, 881, 1075, 1414, 1753, 2603)),
    ],
    ('qwen3-8b', 'gpqa'): [
        ('B200', 1, 8, 8.00, 8289.9, 32.50, 251, 32768,
         (2985, 4391, 5761, 7041, 8034, 8993, 9679, 11473, 13236, 15576, 21916)),
        ('B200', 1, 16, 16.00, 8201.7, 37.67, 426, 32768,
         (2802, 4366, 5811, 7030, 7970, 8668, 10348, 11642, 13492, 15368, 18394)),
        ('B200', 1, 32, 31.99, 7911.3, 38.16, 828, 32768,
         (3337, 4355, 5650, 6573, 7470, 8521, 9562, 11230, 13307, 14937, 19672)),
        ('B200', 1, 64, 63.99, 8368.0, 41.42, 1525, 32768,
         (2873, 4334, 5650, 6913, 7757, 8652, 10373, 11918, 13637, 15544, 23194)),
        ('B200', 1, 128, 127.98, 8074.0, 47.58, 2729, 32768,
         (3033, 4046, 5158, 6401, 7477, 8609, 9798, 11709, 14131, 15908, 20312)),
        ('H100', 1, 8, 8.00, 7854.2, 9.70, 818, 32768,
         (2928, 4192, 5487, 6391, 7449, 8422, 9606, 11177, 13147, 14569, 22229)),
        ('H100', 1, 16, 16.00, 7861.3, 11.91, 1345, 32768,
         (3145, 4218, 5527, 6459, 7597, 8701, 9685, 10853, 12998, 15141, 17755)),
        ('H100', 1, 32, 31.99, 8170.4, 16.87, 1917, 32768,
         (2972, 4412, 5532, 6578, 7594, 8553, 9814, 11896, 14160, 15688, 21916)),
        ('H100', 1, 64, 63.28, 8366.6, 26.64, 2510, 32768,
         (3241, 4400, 5541, 6692, 7842, 8814, 9970, 11549, 14042, 18132, 23833)),
        ('H100', 1, 96, 81.99, 8052.4, 27.88, 3117, 32768,
         (2815, 4476, 5483, 6445, 7784, 8852, 10111, 11500, 13211, 14374, 22555)),
    ],
    ('qwen3-14b', 'lm-arena-chat'): [
        ('B200', 1, 8, 7.94, 615.1, 7.16, 1087, 4096, (46, 97, 195, 342, 489, 627, 787, 1036, 1360, 1701, 2694)),
        ('B200', 1, 16, 15.95, 626.8, 7.84, 1913, 4096, (47, 100, 196, 338, 503, 653, 825, 1031, 1407, 1692, 2899)),
        ('B200', 1, 32, 31.91, 604.6, 9.42, 2866, 4096, (47, 99, 190, 332, 502, 633, 807, 1022, 1358, 1648, 2278)),
        ('B200', 1, 64, 63.76, 609.1, 12.73, 4176, 4096, (46, 97, 200, 337, 480, 645, 819, 1014, 1325, 1634, 2571)),
        ('B200', 1, 128, 127.70, 605.9, 19.07, 5787, 4096, (47, 102, 200, 329, 493, 647, 805, 1025, 1319, 1668, 2449)),
        ('B200', 1, 256, 255.57, 623.8, 21.17, 10709, 4096, (47, 100, 192, 332, 495, 660, 816, 1069, 1385, 1736, 2571)),
        ('B200', 1, 512, 511.26, 620.7, 39.12, 11858, 4096, (47, 100, 200, 324, 495, 650, 804, 1031, 1378, 1694, 2776)),
        ('B200', 1, 1024, 1022.02, 613.3, 61.51, 15050, 4096,
         (47, 98, 193, 325, 492, 644, 820, 1033, 1360, 1728, 2483)),
        ('B200', 1, 2048, 2044.59, 613.1, 112.65, 15875, 4096,
         (46, 96, 195, 332, 494, 646, 816, 1026, 1359, 1691, 2464)),
        ('H100', 1, 8, 7.99, 619.5, 12.54, 627, 4096, (48, 102, 200, 316, 474, 639, 810, 1038, 1358, 1683, 2761)),
        ('H100', 1, 16, 15.97, 621.6, 13.34, 1168, 4096, (47, 100, 204, 345, 498, 650, 811, 1053, 1353, 1664, 2612)),
        ('H100', 1, 32, 31.92, 611.4, 15.01, 2023, 4096, (46, 97, 200, 323, 496, 652, 824, 1017, 1351, 1663, 2357)),
        ('H100', 1, 64, 63.84, 617.2, 18.94, 3140, 4096, (47, 100, 201, 328, 498, 645, 816, 1047, 1357, 1666, 2766)),
        ('H100', 1, 96, 95.88, 622.8, 23.50, 3775, 4096, (47, 101, 198, 325, 481, 654, 811, 1021, 1368, 1735, 3063)),
        ('H100', 1, 128, 127.71, 613.5, 26.16, 4474, 4096, (48, 102, 201, 341, 500, 644, 823, 1034, 1381, 1658, 2261)),
        ('H100', 1, 192, 191.66, 612.6, 33.37, 5309, 4096, (47, 100, 203, 335, 495, 644, 824, 1039, 1380, 1668, 2439)),
        ('H100', 1, 256, 253.41, 624.6, 38.40, 5760, 4096, (47, 102, 204, 339, 488, 646, 828, 1048, 1384, 1657, 2735)),
    ],
    ('qwen3-14b', 'gpqa'): [
        ('B200', 1, 8, 8.00, 7026.2, 33.63, 234, 32768,
         (2464, 3441, 4471, 5425, 6413, 7520, 8461, 9621, 12252, 15460, 19467)),
        ('B200', 1, 16, 16.00, 7304.2, 34.79, 462, 32768,
         (2218, 3814, 4889, 5840, 6973, 7967, 9212, 10531, 12079, 13764, 20735)),
        ('B200', 1, 32, 31.99, 6907.3, 30.60, 1010, 32768,
         (2327, 3372, 4649, 5738, 6426, 7282, 8550, 9782, 11140, 13347, 24533)),
        ('B200', 1, 64, 63.99, 6989.5, 36.27, 1742, 32768,
         (2418, 3342, 4350, 5396, 6616, 7719, 8603, 10255, 12031, 12924, 19778)),
        ('B200', 1, 128, 127.99, 7327.0, 48.84, 2800, 32768,
         (2474, 3524, 4630, 5788, 6726, 8033, 9288, 10414, 12829, 15460, 18833)),
        ('H100', 1, 8, 8.00, 6930.4, 14.42, 553, 32768,
         (2393, 3537, 4529, 5634, 6677, 7821, 8778, 10097, 11466, 12829, 16608)),
        ('H100', 1, 16, 16.00, 7432.0, 17.34, 924, 32768,
         (2278, 3461, 4736, 5833, 6921, 8030, 8901, 10162, 12713, 15999, 23905)),
        ('H100', 1, 32, 32.00, 6939.3, 21.55, 1486, 32768,
         (2367, 3297, 4755, 5520, 6629, 7631, 8660, 10072, 12046, 13020, 16291)),
        ('H100', 1, 64, 59.01, 6710.8, 28.07, 2146, 32768,
         (2489, 3153, 4275, 5365, 6634, 7402, 8308, 9800, 11234, 12829, 18833)),
    ],
    ('qwen3-32b', 'lm-arena-chat'): [
        ('B200', 1, 8, 7.97, 645.7, 14.13, 556, 4096, (50, 111, 220, 362, 534, 699, 855, 1112, 1419, 1738, 2425)),
        ('B200', 1, 16, 15.97, 628.7, 15.11, 1025, 4096, (50, 113, 218, 351, 517, 692, 866, 1069, 1397, 1719, 2261)),
        ('B200', 1, 32, 31.90, 633.7, 16.81, 1793, 4096, (48, 109, 222, 366, 528, 700, 869, 1067, 1383, 1705, 2288)),
        ('B200', 1, 64, 63.91, 630.9, 19.58, 3024, 4096, (47, 104, 222, 358, 532, 693, 867, 1071, 1374, 1707, 2357)),
        ('B200', 1, 96, 95.80, 628.6, 21.34, 4102, 4096, (48, 106, 215, 348, 525, 695, 880, 1054, 1371, 1701, 2187)),
        ('B200', 1, 128, 127.78, 634.1, 24.72, 4676, 4096, (48, 107, 220, 366, 521, 689, 870, 1055, 1397, 1727, 2261)),
        ('B200', 1, 192, 191.58, 635.4, 31.64, 5483, 4096, (49, 109, 224, 359, 522, 686, 855, 1063, 1406, 1745, 2209)),
        ('B200', 1, 256, 255.62, 627.5, 36.02, 6444, 4096, (50, 112, 220, 350, 523, 684, 841, 1056, 1405, 1679, 2307)),
        ('B200', 1, 384, 383.35, 635.0, 50.25, 6912, 4096, (48, 108, 223, 361, 523, 696, 866, 1065, 1388, 1707, 2367)),
        ('B200', 1, 512, 455.73, 627.4, 57.58, 6426, 4096, (48, 106, 221, 354, 510, 693, 864, 1065, 1376, 1650, 2192)),
        ('H100', 1, 8, 7.99, 637.7, 25.21, 312, 4096, (50, 110, 214, 358, 510, 688, 864, 1069, 1423, 1708, 2425)),
        ('H100', 2, 8, 7.99, 631.0, 15.06, 522, 4096, (50, 112, 224, 371, 530, 685, 844, 1060, 1369, 1695, 2367)),
        ('H100', 1, 16, 15.97, 625.5, 26.35, 589, 4096, (48, 105, 216, 361, 524, 685, 856, 1065, 1353, 1649, 2307)),
        ('H100', 2, 16, 15.97, 625.6, 16.04, 970, 4096, (51, 112, 218, 340, 506, 679, 848, 1063, 1381, 1689, 2192)),
        ('H100', 1, 32, 29.26, 629.3, 28.81, 961, 4096, (49, 110, 221, 357, 538, 695, 853, 1061, 1392, 1656, 2269)),
        ('H100', 2, 32, 31.94, 641.7, 17.91, 1706, 4096, (51, 113, 223, 366, 530, 706, 873, 1067, 1384, 1703, 2315)),
        ('H100', 2, 64, 63.86, 635.1, 22.45, 2654, 4096, (50, 112, 222, 363, 519, 693, 868, 1083, 1391, 1668, 2307)),
        ('H100', 2, 96, 95.81, 634.9, 26.10, 3356, 4096, (50, 113, 226, 351, 534, 691, 863, 1072, 1389, 1678, 2331)),
        ('H100', 2, 128, 127.84, 624.1, 29.66, 3905, 4096, (51, 113, 219, 357, 522, 690, 858, 1045, 1362, 1668, 2310)),
        ('H100', 2, 192, 191.74, 632.0, 37.02, 4601, 4096, (48, 109, 223, 358, 532, 699, 871, 1054, 1416, 1703, 2249)),
        ('H100', 2, 256, 255.59, 634.5, 44.45, 5155, 4096, (50, 111, 216, 371, 509, 693, 877, 1063, 1392, 1705, 2257)),
        ('H100', 2, 384, 340.19, 627.6, 54.90, 5071, 4096, (49, 109, 222, 357, 526, 700, 865, 1047, 1375, 1666, 2244)),
    ],
    ('qwen3-32b', 'gpqa'): [
        ('B200', 1, 8, 8.00, 7334.4, 44.14, 180, 32768,
         (1975, 2908, 3991, 4717, 6110, 8018, 9242, 11450, 14239, 16368, 29582)),
        ('B200', 1, 16, 15.99, 7041.4, 36.03, 445, 32768,
         (1921, 2973, 3947, 4865, 6110, 7592, 8712, 10777, 13595, 15845, 21904)),
        ('B200', 1, 32, 31.99, 6857.5, 36.59, 860, 32768,
         (2049, 2761, 3625, 4841, 5896, 7040, 8200, 10524, 14256, 15890, 21264)),
        ('B200', 1, 64, 63.98, 7087.6, 41.31, 1513, 32768,
         (1834, 2727, 3732, 4687, 6152, 7379, 9063, 10426, 13617, 16805, 22544)),
        ('B200', 1, 128, 110.90, 7034.6, 44.82, 2483, 32768,
         (2048, 2851, 3785, 4841, 6280, 7480, 8925, 10503, 12764, 15205, 23824)),
        ('H100', 2, 8, 8.00, 6936.0, 16.72, 475, 32768,
         (1911, 2833, 3610, 4489, 6252, 7412, 8510, 10407, 13286, 16155, 22544)),
        ('H100', 2, 16, 16.00, 6906.2, 19.32, 827, 32768,
         (1937, 2979, 4117, 5095, 6176, 7350, 8430, 10279, 12678, 14918, 21258)),
        ('H100', 2, 32, 31.99, 7176.5, 25.27, 1294, 32768,
         (2094, 2999, 4033, 4854, 6079, 7397, 8983, 10327, 13286, 15728, 32135)),
        ('H100', 2, 64, 63.83, 7058.4, 32.28, 2079, 32768,
         (2047, 2801, 3849, 4967, 6181, 7659, 9070, 10524, 13190, 14918, 21264)),
    ],
    ('llama3.1-70b', 'lm-arena-chat'): [
        ('B200', 2, 8, 7.98, 352.0, 16.36, 476, 4096, (33, 64, 113, 193, 278, 371, 463, 574, 746, 931, 1384)),
        ('B200', 2, 16, 15.94, 359.7, 16.78, 911, 4096, (35, 68, 117, 190, 284, 376, 475, 571, 732, 955, 1947)),
        ('B200', 2, 32, 31.93, 346.2, 18.68, 1590, 4096, (34, 67, 117, 191, 283, 381, 475, 581, 737, 925, 1306)),
        ('B200', 2, 64, 63.77, 345.7, 21.75, 2598, 4096, (34, 67, 120, 199, 286, 375, 464, 571, 716, 890, 1548)),
        ('B200', 2, 128, 127.67, 352.8, 27.30, 3978, 4096, (33, 64, 114, 199, 291, 380, 464, 571, 728, 947, 1630)),
        ('B200', 2, 256, 255.28, 361.1, 35.84, 5372, 4096, (34, 66, 116, 194, 289, 381, 481, 583, 738, 909, 1797)),
        ('B200', 2, 512, 510.52, 351.7, 63.74, 7134, 4096, (33, 64, 113, 197, 286, 378, 472, 573, 731, 892, 1620)),
        ('B200', 2, 1024, 1021.48, 350.7, 105.36, 8551, 4096, (34, 65, 116, 200, 290, 380, 472, 571, 736, 920, 1568)),
        ('B200', 2, 1536, 1407.25, 349.5, 134.79, 8682, 4096, (34, 65, 114, 194, 289, 379, 466, 567, 730, 905, 1468)),
        ('B200', 2, 2048, 2041.93, 350.8, 140.47, 10108, 4096, (34, 65, 115, 198, 289, 372, 462, 571, 742, 903, 1493)),
        ('H100', 4, 8, 7.99, 350.0, 16.57, 470, 4096, (33, 64, 110, 198, 292, 375, 469, 582, 744, 902, 1390)),
        ('H100', 4, 16, 15.95, 354.4, 17.70, 863, 4096, (34, 66, 118, 199, 287, 374, 472, 565, 752, 934, 1524)),
        ('H100', 4, 32, 31.88, 350.6, 20.05, 1487, 4096, (35, 67, 117, 195, 295, 393, 477, 569, 729, 902, 1442)),
        ('H100', 4, 64, 63.79, 352.0, 22.43, 2511, 4096, (35, 68, 120, 195, 291, 379, 464, 572, 728, 902, 1466)),
        ('H100', 4, 96, 95.73, 357.5, 25.36, 3244, 4096, (34, 66, 115, 194, 286, 385, 479, 588, 760, 933, 1660)),
        ('H100', 4, 128, 127.61, 358.9, 27.87, 3876, 4096, (34, 65, 118, 205, 292, 378, 472, 579, 761, 952, 1630)),
        ('H100', 4, 192, 191.62, 357.2, 33.70, 4461, 4096, (34, 65, 121, 205, 284, 380, 475, 570, 725, 910, 1620)),
        ('H100', 4, 256, 255.31, 349.0, 39.84, 4915, 4096, (33, 64, 114, 202, 292, 382, 471, 580, 719, 928, 1466)),
        ('H100', 4, 384, 383.02, 363.9, 55.12, 5319, 4096, (35, 68, 119, 197, 298, 395, 476, 591, 754, 934, 1784)),
        ('H100', 4, 512, 510.51, 350.1, 73.89, 5921, 4096, (34, 66, 117, 198, 289, 375, 470, 569, 746, 900, 1490)),
        ('H100', 4, 768, 766.32, 351.4, 103.64, 6507, 4096, (34, 65, 115, 194, 282, 373, 470, 573, 740, 910, 1550)),
        ('H100', 4, 1024, 898.45, 350.8, 105.61, 6827, 4096, (34, 66, 118, 199, 285, 375, 467, 569, 750, 917, 1435)),
    ],
}


def shape_of(model: str):
    """The model's shape: a Qwen3 config of :data:`QWEN3` or a preset name."""
    return from_hf_config(QWEN3[model]) if model in QWEN3 else resolve_model(model)


def workload(requests: int, prompt: int, cap: int, lengths: tuple[int, ...]) -> Workload:
    """``requests`` prompts of ``prompt`` tokens whose responses follow the transcribed quantiles
    (:data:`QUANTILES` → ``lengths``, capped at ``cap``; :class:`Workload`'s piecewise-linear quantile
    function through them).

    Raises:
        ValueError: ``lengths`` does not give one length per quantile.
    """
    if len(lengths) != len(QUANTILES):
        raise ValueError(f"lengths: {len(lengths)} values for {len(QUANTILES)} quantiles")
    return Workload(requests, 1, prompt, cap, tuple(zip(QUANTILES, (float(x) for x in lengths))))


def mean_context(prompt: int, cap: int, lengths: tuple[int, ...]) -> float:
    """Mean cached tokens of a running sequence in a steady state, ``prompt + E[L²]/(2E[L])`` (a sequence runs
    for ``L`` iterations and holds on average half its response), over the response-length distribution of
    :func:`workload` (midpoints of 2,000 equal quantile steps)."""
    w = workload(1, prompt, cap, lengths)
    q = (np.arange(2000) + 0.5) / 2000
    length = np.array([w.quantile(x) for x in q])
    return prompt + float((length**2).mean() / (2.0 * length.mean()))


def steady_throughput(model: str, gpu: str, tp: int, running: float, cap: int, lengths: tuple[int, ...],
                      prompt: int) -> float:
    """Output tokens/s of a steady state of ``B`` = ``running`` sequences (rounded), on the rollout engine's
    pieces: every iteration decodes ``B`` tokens (:func:`iteration_ms` at the steady state's
    :func:`mean_context`) and admits ``B / E[L]`` new requests, whose prompts cost what the engine's prefill
    charges a prompt in a pass of ``B`` prompts (:meth:`~packplace.placement.model.cost.CostModel.prefill_time`
    ``/ B``, as ``generate_time`` prefills the running batch):
    ``B / (t_iteration + (B / E[L]) · t_prefill)``."""
    shape = shape_of(model)
    cluster, hw = resolve_hardware(gpu, None, tp)
    slots = max(1, int(round(running)))
    w = workload(slots, prompt, cap, lengths)
    engine = RolloutEngine(max_num_seqs=slots, max_num_seqs_set=True, gpu_memory_utilization=0.9,
                           host_seconds_per_sequence=VLLM_HOST_SECONDS_PER_SEQUENCE["v1"])
    cost = CostModel(hw, cluster, w, engine, framework=FRAMEWORKS["none"])
    extent = (1, cluster.nodes_per_rack, cluster.gpus_per_node)
    prefill = cost.prefill_time(shape, tp, slots, slots, extent=extent) / slots
    step = iteration_ms(model, gpu, tp, running, mean_context(prompt, cap, lengths)) / 1e3
    return slots / (step + slots / w.mean_response * prefill)


def iteration_ms(model: str, gpu: str, tp: int, running: float, context: float) -> float:
    """The model's V1 decode iteration, ms (``packplace estimate --task decode --framework vllm``)."""
    return estimate(shape_of(model), gpu, "decode", batch=max(1, int(round(running))),
                    context=int(round(context)), tp=tp, framework="vllm").time_s * 1e3


def price_rows() -> list[dict]:
    """Every published configuration with the model's steady-state throughput and decode iteration."""
    out = []
    for (model, task), configs in PUBLISHED.items():
        for gpu, tp, mns, running, mean_out, itl, tokens_s, cap, lengths in configs:
            prompt = PROMPT[task]
            ctx = mean_context(prompt, cap, lengths)
            thr = steady_throughput(model, GPU[gpu], tp, running, cap, lengths, prompt)
            it = iteration_ms(model, GPU[gpu], tp, running, ctx)
            out.append({"model": model, "task": task, "gpu": gpu, "tp": tp, "max_num_seqs": mns,
                        "running": running, "mean_output": mean_out, "mean_context_priced": round(ctx, 1),
                        "published_tokens_per_s": tokens_s, "predicted_tokens_per_s": round(thr, 1),
                        "ratio": round(thr / tokens_s, 3), "published_itl_ms": itl,
                        "predicted_iteration_ms": round(it, 3), "itl_ratio": round(itl / it, 3),
                        "source": SOURCE.format(file=FILES[(model, task)])})
    return out


def pairs(rows: list[dict]) -> list[dict]:
    """B200 / H100 at the same model, task and ``max_num_seqs``: published and predicted throughput ratios
    and their quotient (above 1: the model gives the B200 more gain than was published). The H100 run of the
    same tensor-parallel size where there is one (``matched``), else the H100 run at that ``max_num_seqs``."""
    index = {(r["model"], r["task"], r["gpu"], r["tp"], r["max_num_seqs"]): r for r in rows}
    out = []
    for (model, task, gpu, tp, mns), b in sorted(index.items()):
        if gpu != "B200":
            continue
        h = index.get((model, task, "H100", tp, mns))
        if h is None:
            h = next((r for k, r in sorted(index.items()) if k[:3] == (model, task, "H100") and k[4] == mns), None)
        if h is None:
            continue
        pub = b["published_tokens_per_s"] / h["published_tokens_per_s"]
        pred = b["predicted_tokens_per_s"] / h["predicted_tokens_per_s"]
        out.append({"model": model, "task": task, "max_num_seqs": mns, "tp": f"{b['tp']} / {h['tp']}",
                    "matched": b["tp"] == h["tp"], "published": round(pub, 3), "predicted": round(pred, 3),
                    "predicted_over_published": round(pred / pub, 3)})
    return out


def prompt_sensitivity(rows: list[dict], prompts: tuple[int, ...] = (100, 1000)) -> dict[int, float]:
    """Median predicted / published B200 / H100 throughput ratio of the matched chat pairs when every chat
    prompt is ``p`` tokens instead of :data:`PROMPT`'s."""
    out = {}
    for p in prompts:
        quotients = []
        for pair in pairs(rows):
            if not pair["matched"] or pair["task"] != "lm-arena-chat":
                continue
            got = {}
            for gpu in ("B200", "H100"):
                cfg = next(c for c in PUBLISHED[(pair["model"], pair["task"])]
                           if c[0] == gpu and c[2] == pair["max_num_seqs"])
                got[gpu] = steady_throughput(pair["model"], GPU[gpu], cfg[1], cfg[3], cfg[7], cfg[8], p) / cfg[6]
            quotients.append(got["B200"] / got["H100"])
        out[p] = round(float(statistics.median(quotients)), 3)
    return out


def _spread(values: list[float]) -> list[float]:
    """``[median, min, max, count]`` of ``values``, rounded to 3 digits."""
    return [round(float(statistics.median(values)), 3), round(float(min(values)), 3),
            round(float(max(values)), 3), len(values)]


def summarize(rows: list[dict], prs: list[dict]) -> dict:
    """Medians and ranges: per GPU and task of predicted / published throughput; of the matched pairs'
    predicted / published B200 gain, per task and per model (leave-one-model-out medians)."""
    out: dict = {}
    for gpu in ("H100", "B200"):
        for task in ("lm-arena-chat", "gpqa"):
            r = [x["ratio"] for x in rows if x["gpu"] == gpu and x["task"] == task and x["tp"] == 1]
            if r:
                out[f"{gpu} {task} TP 1 throughput predicted/published"] = _spread(r)
    matched = [p for p in prs if p["matched"]]
    for task in ("lm-arena-chat", "gpqa"):
        q = [p["predicted_over_published"] for p in matched if p["task"] == task]
        out[f"matched pairs {task}: predicted/published B200 gain"] = _spread(q)
    q = [p["predicted_over_published"] for p in matched]
    out["matched pairs, all: predicted/published B200 gain"] = _spread(q)
    for model in sorted({p["model"] for p in matched}):
        rest = [p["predicted_over_published"] for p in matched if p["model"] != model]
        out[f"matched pairs without {model}"] = round(float(statistics.median(rest)), 3)
    return out


#: The only BF16 Megatron-Core pre-training rows published on B200: GPT-OSS 120B (a mixture of experts) in
#: Megatron-Bridge's performance summary (github.com/NVIDIA-NeMo/Megatron-Bridge
#: @ 067f987df03b8355b03192d88d70f1709fedf51a docs/performance-summary-archive.md; its dense B200 rows are FP8,
#: MXFP8 or NVFP4 only), 64 GPUs, GBS 1,280 of
#: 4,096 tokens, no FSDP, TP 1: ``(container, gpu, mbs, pp, ep, tokens/s/GPU)``. The H100 and GB200 rows of the
#: 26.02 container are the same table's. The step model prices a mixture of experts with the knob model
#: (``moe_gemm_peak_fraction``), not the component tables, so these rows cannot size ``megatron_pass_factor``
#: (the dense Megatron-Core passes on a table); they are priced here with
#: ``benchmarks/training_throughput.py``'s ``price``.
MOE_TRAINING = [
    ("26.02", "h100-sxm", 1, 4, 8, 5993),
    ("26.02", "b200", 4, 1, 64, 8047),
    ("26.02.01", "b200", 4, 1, 8, 13722),
    ("26.04", "b200", 4, 1, 8, 13045),
    ("26.04.01", "b200", 4, 1, 8, 13568),
    ("26.02", "gb200", 4, 1, 64, 15784),
]


def moe_training_rows() -> list[dict]:
    """:data:`MOE_TRAINING` priced by ``training_throughput.price`` (the presets as they are): predicted /
    published step seconds (below 1: the model too fast)."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from training_throughput import BRIDGE, Row, price
    out = []
    for container, gpu, mbs, pp, ep, tokens in MOE_TRAINING:
        row = Row("gpt-oss-120b", gpu, 64, "bf16", 1280, mbs, 4096, 1, pp, 1, 1, 1280 * 4096 / (tokens * 64),
                  f"{BRIDGE}, {container} NeMo Container, GPT OSS 120B", ep=ep)
        step = price(row)["step"]
        out.append({"container": container, "gpu": gpu, "mbs": mbs, "pp": pp, "ep": ep,
                    "published_tokens_per_s_per_gpu": tokens, "published_step_s": round(row.step_s, 3),
                    "predicted_step_s": round(step, 3), "ratio": round(step / row.step_s, 3), "source": row.source})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {OUT.name}")
    args = parser.parse_args()
    rows = price_rows()
    print("| model | task | GPU × TP | max_num_seqs | running | published tok/s | predicted | ratio "
          "| median ITL ms | model iteration ms | ITL / iteration |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['task']} | {r['gpu']} × {r['tp']} | {r['max_num_seqs']} | {r['running']:.0f} | "
              f"{r['published_tokens_per_s']:.0f} | {r['predicted_tokens_per_s']:.0f} | {r['ratio']:.2f} | "
              f"{r['published_itl_ms']:.2f} | {r['predicted_iteration_ms']:.2f} | {r['itl_ratio']:.2f} |")
    prs = pairs(rows)
    print("\n| model | task | max_num_seqs | TP B200 / H100 | B200/H100 published | predicted "
          "| predicted / published |")
    print("|---|---|---|---|---|---|---|")
    for p in prs:
        print(f"| {p['model']} | {p['task']} | {p['max_num_seqs']} | {p['tp']} | {p['published']:.2f} | "
              f"{p['predicted']:.2f} | {p['predicted_over_published']:.2f} |")
    summary = summarize(rows, prs)
    print()
    for k, v in summary.items():
        print(f"{k}: {v}")
    sens = prompt_sensitivity(rows)
    print(f"matched chat pairs, predicted/published B200 gain at chat prompts of {list(sens)} tokens: "
          f"{list(sens.values())}")
    moe = moe_training_rows()
    print("\nGPT-OSS 120B BF16 pre-training (Megatron-Bridge), predicted / published step:")
    for m in moe:
        print(f"  {m['container']} {m['gpu']} MBS {m['mbs']} PP {m['pp']} EP {m['ep']}: published "
              f"{m['published_step_s']:.2f} s, predicted {m['predicted_step_s']:.2f} s, ratio {m['ratio']:.2f}")
    if args.write:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        OUT.write_text(json.dumps({"measured_at_commit": commit, "rows": rows, "pairs": prs, "summary": summary,
                                   "prompt_sensitivity": sens,
                                   "moe_training": moe}, indent=1) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
