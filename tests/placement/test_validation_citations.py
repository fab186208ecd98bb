"""The DeepSpeed-Chat OPT validation files cite the code of the run they model at the run's commit
(DeepSpeedExamples e468799f, "DeepSpeed Chat Release", 2023-04-11), at the path the file has there: the LoRA
citation had pointed at the repository's head (``dschat/utils/module/lora.py``, a later layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_COMMIT = "e468799f"
LORA_AT_RUN = "applications/DeepSpeed-Chat/training/utils/module/lora.py"
FILES = [*sorted((ROOT / "benchmarks" / "validation").glob("deepspeed_chat_ppo_opt-*.yaml")),
         ROOT / "configs" / "placement" / "published" / "ppo_deepspeed-chat_opt13b_1x8xa100.yaml"]


def _header(path: Path) -> str:
    """The file's leading comment block, its lines joined by spaces."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_lora_citations_are_pinned_to_the_runs_commit(path):
    header = _header(path)
    assert "dschat/utils/module/lora.py" not in header and "DeepSpeedExamples 45b4b71" not in header
    if "lora.py" in header:
        assert f"DeepSpeedExamples {RUN_COMMIT}, the run's commit" in header
        assert f"{LORA_AT_RUN} lines 88-104" in header


def test_the_lora_files_are_the_ones_whose_scripts_train_lora():
    # the 1.3B single-GPU, 13B, 30B and 66B scripts set --actor_lora_dim 128 (the headers say so); each cites lora.py
    citing = {p.name for p in FILES if "lora.py" in _header(p)}
    assert citing == {"deepspeed_chat_ppo_opt-1.3b_1xa100.yaml", "deepspeed_chat_ppo_opt-13b_64xa100.yaml",
                      "deepspeed_chat_ppo_opt-30b_64xa100.yaml", "deepspeed_chat_ppo_opt-30b_8xa100.yaml",
                      "deepspeed_chat_ppo_opt-66b_64xa100.yaml", "ppo_deepspeed-chat_opt13b_1x8xa100.yaml"}
