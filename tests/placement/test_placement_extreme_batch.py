"""Extreme placement batches: the candidate table is built within the time limit, and a plan whose step time
is physically absurd is reported and exits 1."""

from __future__ import annotations

import os
import re

import packplace
from packplace.cli import main
from packplace.placement.problem.config import load_config
from packplace.placement.screen.cli import MAX_PLAUSIBLE_STEP_S

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DPO = os.path.join(ROOT, "configs", "placement", "dpo_llama3.1-8b_1x8xh100.yaml")


def config_with_batch(tmp_path, sequences: int) -> str:
    """The shipped 8-GPU DPO config with ``sequences`` sequences (half as many chosen / rejected pairs)."""
    with open(DPO, encoding="utf-8") as handle:
        text = handle.read()
    text = re.sub(r"batch_size: .*", f"batch_size: {sequences // 2}", text)
    path = tmp_path / f"dpo_{sequences}.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_highly_composite_batch_stops_the_table_at_the_limit(tmp_path, capsys):
    # 963,761,198,400 has 6,720 divisors, 5,760 of them even: every one is a micro-batch choice of every
    # strategy (a DPO micro-batch holds whole pairs)
    path = config_with_batch(tmp_path, 963_761_198_400)
    result = packplace.place(load_config(path), "concurrent", time_limit_s=0.05)
    assert result.status == "unknown" and result.hit_time_limit and result.solution is None
    assert "candidate table not built within time_limit_s=0.05" in result.message
    assert "5,760 micro-batch sizes" in result.message
    assert result.info["table_candidates_built"] < 240_000  # the whole table: 2 vertices x 120,000
    assert main(["place", "--config", path, "--time-limit", "0.05"]) == 1
    assert "candidate table not built" in capsys.readouterr().out


def test_an_absurd_step_time_exits_1_and_writes_nothing(tmp_path, capsys, work_clock):
    # on the work clock (deadlines a count of evaluator calls): at 5 s of wall clock a loaded machine had found no
    # plan at all, so no step time to refuse
    path = config_with_batch(tmp_path, 2**39)  # 40 divisors: the table is small, the step is centuries
    out = tmp_path / "plan.json"
    assert main(["place", "--config", path, "--time-limit", "5", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "over the plausibility bound of 604,800 s" in err and "nothing written" in err
    assert not out.exists()
    assert MAX_PLAUSIBLE_STEP_S == 604_800


def test_a_plausible_step_is_untouched(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["place", "--config", DPO, "--time-limit", "5", "--out", str(out)]) == 0
    assert out.exists()
