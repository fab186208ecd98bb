"""``balance`` and ``place`` print (``--json``) and write (``--out``) the result's own document,
``SolveResult.to_dict()`` with the command's figures under ``report``, so ``SolveResult.from_json`` reads both back."""

import json

import pytest

from packplace.balance.schema import Assignment
from packplace.cli import main
from packplace.placement.problem.plan import Plan
from packplace.result import REPORT_KEY, SolveResult

CASES = [
    (["balance", "--config", "configs/balance/two_way_small.yaml"], "balance", Assignment),
    (["balance", "--config", "configs/balance/stdlib_llama8b.yaml", "--min-gain", "0.02"], "balance", Assignment),
    (["balance", "--config", "configs/context_parallel/sft_long_tail_llama8b_4x8xh200.yaml", "--time-limit", "5"],
     "context_parallel", None),
    (["place", "--config", "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml", "--solver", "greedy"], "placement",
     Plan),
]


@pytest.mark.parametrize("words, problem, solution_type", CASES, ids=["balance", "balance-min-gain", "balance-cp",
                                                                       "place"])
def test_json_and_out_read_back_as_the_result(words, problem, solution_type, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main([*words, "--json", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    written = out.read_text(encoding="utf-8")
    assert json.loads(printed) == json.loads(written)   # --json and --out hold the same document
    for text in (printed, written):
        document = json.loads(text)
        result = SolveResult.from_json(text)
        assert result.problem == problem and result.ok
        if solution_type is not None:
            assert isinstance(result.solution, solution_type)
        # the document is the result's own, with the command's figures under one added key
        assert set(document) - set(result.to_dict()) == {REPORT_KEY}
        assert result.to_dict() == {k: v for k, v in document.items() if k != REPORT_KEY}
        assert result.objective == pytest.approx(document["objective"]) and result.bound == document["bound"]


def test_place_reports_its_figures_under_report(capsys):
    assert main(["place", "--config", "configs/placement/grpo_qwen2.5-7b_2x8xh100.yaml", "--solver", "greedy",
                 "--json", "--quiet"]) == 0
    document = json.loads(capsys.readouterr().out)
    report = document[REPORT_KEY]
    # the step time is the result's objective (seconds), the same name balance uses for its makespan
    assert "step_time_s" not in document and "bound_s" not in document
    vertices = report["vertices"]
    assert set(vertices) == {"actor.generate", "reference.infer", "reward.infer", "actor.train"}
    assert max(v["end_s"] for v in vertices.values()) <= document["objective"] + 1e-9
    assert all(v["gpus"] for v in vertices.values())
    assert report["implausible_step_time"] is False and report["config"].endswith("grpo_qwen2.5-7b_2x8xh100.yaml")


def test_balance_reports_its_figures_under_report(capsys):
    assert main(["balance", "--config", "configs/balance/two_way_small.yaml", "--json", "--quiet"]) == 0
    document = json.loads(capsys.readouterr().out)
    report = document[REPORT_KEY]
    assert max(report["rank_loads"]) == pytest.approx(document["objective"])   # objective makespan: the top load
    assert document["solution"]["ranks"] and report["parameters"]["data_parallel_size"] == len(
        document["solution"]["ranks"])


def test_balance_refuses_a_balance_solver_named_for_a_context_parallel_config(capsys):
    # --solver repair had been replaced by the context_parallel default (greedy) without a word
    config = "configs/context_parallel/sft_long_tail_llama8b_4x8xh200.yaml"
    assert main(["balance", "--config", config, "--solver", "repair", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == ("packplace balance: error: --solver: unknown context_parallel solver "
                                               "'repair'; available: cpsat, greedy, megatron, static")
    assert main(["balance", "--config", config, "--quiet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["solver"] == "greedy"
