"""The third, fourth and fifth held-out sets of published runs (``benchmarks/validation_holdout3``,
``benchmarks/validation_holdout4``, ``benchmarks/validation_holdout5``) load and keep their sources.

Only that the files are well formed is asserted (``load_setup`` parses a file and checks its plan's layout
rules without pricing it): the sets are frozen and never tuned on, so no test predicts, asserts or records a
figure for them (their READMEs state the rule).
"""

from __future__ import annotations

import os
import re

import pytest

from packplace.placement.checking.validate import load_setup, pairs_of, publication, validation_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Each set's folder name, the runs its README lists and the pairs its files declare.
SETS = {"validation_holdout3": (10, 5), "validation_holdout4": (15, 9), "validation_holdout5": (6, 5)}
FILES = {name: validation_files(os.path.join(ROOT, "benchmarks", name)) for name in SETS}
ALL_FILES = [path for name in SETS for path in FILES[name]]
HOLDOUT4_FILES = FILES["validation_holdout4"]
HOLDOUT5_FILES = FILES["validation_holdout5"]


def _name(path: str) -> str:
    return os.path.basename(path)[: -len(".yaml")]


@pytest.mark.parametrize("name", SETS)
def test_the_set_has_the_runs_its_readme_lists(name):
    with open(os.path.join(ROOT, "benchmarks", name, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    listed = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.MULTILINE))
    assert listed == {_name(path) for path in FILES[name]}
    assert len(FILES[name]) == SETS[name][0]


@pytest.mark.parametrize("path", ALL_FILES, ids=_name)
def test_each_file_loads_with_its_source_row_and_a_published_step(path):
    _, _, section = load_setup(path)
    assert section["source"] and section["url"].startswith("https://")
    assert publication(section) != section["source"]  # an explicit publication, not the source text
    assert section["published"]["step"] > 0
    with open(path, encoding="utf-8") as fh:
        header = fh.read().split("\nhardware:", 1)[0]
    assert header.startswith("# ") and 'row "' in header   # the quoted table row
    assert "Inferred, and how:" in header


@pytest.mark.parametrize("name", SETS)
def test_every_declared_pair_names_a_file_of_the_same_publication(name):
    by_setup = {_name(path): load_setup(path)[2] for path in FILES[name]}
    declared = [(setup, pair["setup"]) for setup, section in by_setup.items() for pair in pairs_of(section)]
    assert len(declared) == SETS[name][1]
    for setup, partner in declared:
        assert partner in by_setup
        assert publication(by_setup[setup]) == publication(by_setup[partner])


@pytest.mark.parametrize("path", HOLDOUT4_FILES, ids=_name)
def test_each_holdout4_file_runs_the_v07_release_its_recipe_names(path):
    """Every row of the fourth set is a v0.7 row: the config names NeMo RL 0.7.0, and force_on_policy_ratio
    follows the recipe (every v0.7.0 recipe taken sets it but the 8-step off-policy one, whose
    train_global_batch_size is 512)."""
    instance, _, section = load_setup(path)
    assert instance.framework == "nemo-rl" and instance.framework_version == "0.7.0"
    assert section["url"].endswith("/docs/about/performance-summary.md")
    assert instance.force_on_policy_ratio == (not _name(path).endswith("_8off"))
    assert instance.training["actor"].optimizer_steps == (4 if _name(path).endswith("_8off") else 1)


@pytest.mark.parametrize("path", HOLDOUT5_FILES, ids=_name)
def test_each_holdout5_file_is_its_lambda_log_transcribed(path):
    """Every row of the fifth set is one of Lambda's DeepSpeed-Chat step-3 logs: the figure is the log's quoted
    ``Execution time: T seconds for 10 steps`` over 10, and the quoted ``Throughput`` is 16 prompts x GPUs x
    10 / T (a transcription check of the header, no prediction); the plan puts every model on every GPU of the
    cluster the file name gives (``NxGxGPU``) at 16 sequences per GPU, as the command line quoted does."""
    import yaml

    instance, plan, section = load_setup(path)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    nodes, per_node, gpu = re.search(r"_(\d+)x(\d+)x(a100|h100)$", _name(path)).groups()
    gpus = int(nodes) * int(per_node)
    assert yaml.safe_load(text)["hardware"]["preset"] == {"a100": "a100-80gb-sxm", "h100": "h100-sxm"}[gpu]
    assert instance.num_gpus == gpus and instance.cluster.nodes_per_rack == int(nodes)
    seconds = float(re.search(r'"Execution time: ([0-9.]+) seconds for 10 steps"', text).group(1))
    throughput = float(re.search(r'"Throughput:\n# ([0-9.]+) samples/sec"', text).group(1))
    assert section["published"] == {"step": pytest.approx(seconds / 10, abs=1e-9)}
    assert 16 * gpus * 10 / seconds == pytest.approx(throughput, abs=5e-5)
    assert section["url"].startswith("https://github.com/LambdaLabsML/DeepSpeedExamples/blob/7770cecf")
    assert instance.framework == "deepspeed-chat" and instance.workload.batch_size == 16 * gpus
    assert (instance.workload.context_length, instance.workload.generation_length) == (256, 256)
    assert instance.training["actor"].lora_rank == 128 and instance.training["critic"].lora_rank == 0
    assert {t.sharding for t in instance.training.values()} == {"zero3"}
    assert all(t.optimizer_steps == 1 for t in instance.training.values())
    vertices = plan.by_vertex()
    assert len(vertices) == 6
    for vertex in vertices.values():
        s = vertex.strategy
        assert (s.dp, s.tp, s.pp, s.ep, vertex.micro_batch) == (gpus, 1, 1, 1, 16)
        assert vertex.allocation.origin == (0, 0, 0) and vertex.allocation.extent == (1, int(nodes), 8)
    partners = [pair["setup"] for pair in pairs_of(section)]
    assert partners == ([] if _name(path).endswith("_1x8xh100") else ["lambda_deepspeed_chat_ppo_opt-13b_1x8xh100"])
