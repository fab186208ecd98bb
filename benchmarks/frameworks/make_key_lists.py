"""Extract each RL framework's configuration keys from its real files into test data.

``packplace place --emit FRAMEWORK`` writes the framework's own config keys or command-line flags; the
test ``tests/placement/test_emit.py`` checks every emitted key against the lists this script writes, so a
new framework version is one re-run of this script (then the test says which emitted keys it dropped):

* verl: the trainer configs inside the verl wheel (``verl/trainer/config/_generated_ppo_trainer.yaml``
  for the FSDP backend, ``_generated_ppo_megatron_trainer.yaml`` for Megatron: the fully expanded Hydra
  defaults that verl generates and ships), every nested key as a dotted path;
* NeMo RL: the example configs of the repository at a tag (``examples/configs/grpo_math_1B.yaml``,
  ``grpo_math_1B_megatron.yaml``, ``ppo_math_1B.yaml``, ``ppo_math_1B_megatron.yaml``, ``dpo.yaml``), a
  config's ``defaults:`` parent merged in;
* OpenRLHF: the ``argparse`` options of ``openrlhf/cli/train_ppo_ray.py`` and ``train_dpo.py`` at a tag,
  read from the source with :mod:`ast` (nothing is imported), each with whether it is a switch.

Run (the wheel from the package index, the repositories as git directories and a tag or commit):

    pip download --no-deps verl==0.9.1 -d /tmp/verl
    python benchmarks/frameworks/make_key_lists.py --verl-wheel /tmp/verl/verl-0.9.1-py3-none-any.whl \\
        --nemo-rl PATH/TO/NeMo-RL.git --nemo-rl-ref v0.7.0 --openrlhf PATH/TO/OpenRLHF.git --openrlhf-ref v0.11.0

Writes ``tests/data/frameworks/{verl,nemo-rl,openrlhf}.json`` (only the frameworks given). The older verl releases
whose keys the emitter writes by ``policy.framework_version`` (``emit.verl_releases``) are kept one file each,
``verl-<release>.json``: the tags of the repository (``_generated_ppo_trainer.yaml`` /
``_generated_ppo_megatron_trainer.yaml`` where the tag has them, from v0.5.0; before, ``ppo_trainer.yaml`` /
``ppo_megatron_trainer.yaml``, which have no Hydra ``defaults:`` there) and the wheels of the releases the
repository does not tag:

    pip download --no-deps verl==0.7.1 verl==0.8.0 verl==0.9.0 -d /tmp/verl
    python benchmarks/frameworks/make_key_lists.py --verl-repo PATH/TO/verl.git \
        --verl-refs v0.1 v0.2 v0.3.0.post1 v0.4.0 v0.4.1 v0.5.0 v0.6.0 v0.6.1 v0.7.0 \
        --verl-release-wheels /tmp/verl/verl-0.7.1-py3-none-any.whl /tmp/verl/verl-0.8.0-py3-none-any.whl \
        /tmp/verl/verl-0.9.0-py3-none-any.whl The OpenRLHF releases
whose flags the emitter writes by their older names (``emit.openrlhf.FLAT_NAMES``) are kept one file each,
``openrlhf-<tag>.json``, by ``--openrlhf-releases``:

    python benchmarks/frameworks/make_key_lists.py --openrlhf PATH/TO/OpenRLHF.git \
        --openrlhf-releases v0.2.7 v0.5.8 v0.5.9 v0.6.0
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "frameworks"
VERL_CONFIGS = {"fsdp": "verl/trainer/config/_generated_ppo_trainer.yaml",
                "megatron": "verl/trainer/config/_generated_ppo_megatron_trainer.yaml"}
NEMO_RL_CONFIGS = ("grpo_math_1B", "grpo_math_1B_megatron", "grpo_rm_1B", "ppo_math_1B", "ppo_math_1B_megatron", "dpo")
OPENRLHF_SCRIPTS = {"train_ppo_ray": "openrlhf/cli/train_ppo_ray.py", "train_dpo": "openrlhf/cli/train_dpo.py"}


def dotted_keys(tree: Any, prefix: str = "") -> list[str]:
    """Every key of a nested mapping as a dotted path, parents included (``a``, ``a.b``, ...)."""
    keys: list[str] = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            path = f"{prefix}{key}"
            keys.append(path)
            keys += dotted_keys(value, path + ".")
    return keys


def verl(wheel: Path) -> dict[str, Any]:
    """The verl key lists of a wheel, with its version (``verl/version/version``) and sha256."""
    with zipfile.ZipFile(wheel) as archive:
        version = archive.read("verl/version/version").decode().strip()
        configs = {name: sorted(set(dotted_keys(yaml.safe_load(archive.read(member)))))
                   for name, member in VERL_CONFIGS.items()}
    return {"framework": "verl", "version": version,
            "source": f"{wheel.name} (sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}): "
                      + ", ".join(VERL_CONFIGS.values()),
            "configs": configs}


def verl_git(repo: Path, ref: str) -> dict[str, Any]:
    """The verl key lists of the repository at ``ref``: the generated configs where ``ref`` has them, else the
    plain ones (self-contained before v0.5.0: no Hydra ``defaults:``)."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", ref, "verl/trainer/config"],
                            capture_output=True, text=True, check=True).stdout.split()
    paths = {name: path if path in listed else path.replace("_generated_", "")
             for name, path in VERL_CONFIGS.items()}
    configs = {}
    for name, path in paths.items():
        tree = yaml.safe_load(git_show(repo, ref, path))
        if "defaults" in tree:
            raise SystemExit(f"{ref}:{path} has Hydra defaults and no generated form: not read")
        configs[name] = sorted(set(dotted_keys(tree)))
    return {"framework": "verl", "version": ref, "commit": git_commit(repo, ref),
            "source": "github.com/volcengine/verl " + ", ".join(paths.values()), "configs": configs,
            "file": f"verl-{ref}"}


def git_show(repo: Path, ref: str, path: str) -> str:
    """A file of a git repository at ``ref``."""
    return subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def git_commit(repo: Path, ref: str) -> str:
    """The commit ``ref`` names."""
    return subprocess.run(["git", "-C", str(repo), "rev-list", "-n", "1", ref], capture_output=True, text=True,
                          check=True).stdout.strip()


def nemo_rl(repo: Path, ref: str) -> dict[str, Any]:
    """The NeMo RL example configs at ``ref``, each with its ``defaults:`` parent's keys merged in."""
    configs = {}
    for name in NEMO_RL_CONFIGS:
        tree = yaml.safe_load(git_show(repo, ref, f"examples/configs/{name}.yaml"))
        keys = set(dotted_keys(tree))
        parent = tree.get("defaults")
        while isinstance(parent, str):
            parent_tree = yaml.safe_load(git_show(repo, ref, f"examples/configs/{parent}"))
            keys |= set(dotted_keys(parent_tree))
            parent = parent_tree.get("defaults")
        keys.discard("defaults")
        configs[name] = sorted(keys)
    return {"framework": "nemo-rl", "version": ref, "commit": git_commit(repo, ref),
            "source": "github.com/NVIDIA-NeMo/RL examples/configs/{" + ",".join(NEMO_RL_CONFIGS) + "}.yaml",
            "configs": configs}


def argparse_options(source: str) -> dict[str, str]:
    """``{--option: "switch" | "value"}`` of every ``add_argument("--option", ...)`` call in ``source``."""
    options = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            action = next((k.value.value for k in node.keywords if k.arg == "action"
                           and isinstance(k.value, ast.Constant)), None)
            kind = "switch" if action in ("store_true", "store_false") else "value"
            for name in names:
                if name.startswith("--"):
                    options[name] = kind
    return dict(sorted(options.items()))


def openrlhf(repo: Path, ref: str) -> dict[str, Any]:
    """The OpenRLHF command-line options at ``ref``, per training script (``examples/<script>.py`` where ``ref``
    predates the ``openrlhf/cli`` package, before v0.3.6)."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "--name-only", ref], capture_output=True,
                            text=True, check=True).stdout.split()
    paths = {name: path if path in listed else f"examples/{name}.py" for name, path in OPENRLHF_SCRIPTS.items()}
    return {"framework": "openrlhf", "version": ref, "commit": git_commit(repo, ref),
            "source": "github.com/OpenRLHF/OpenRLHF " + ", ".join(paths.values()),
            "configs": {name: argparse_options(git_show(repo, ref, path)) for name, path in paths.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verl-wheel", type=Path, help="a verl wheel (.whl)")
    parser.add_argument("--verl-repo", type=Path, help="a git directory of verl (for --verl-refs)")
    parser.add_argument("--verl-refs", nargs="*", default=[], help="verl tags, written one file each (verl-<tag>.json)")
    parser.add_argument("--verl-release-wheels", type=Path, nargs="*", default=[],
                        help="verl wheels of untagged releases, written one file each (verl-<version>.json)")
    parser.add_argument("--nemo-rl", type=Path, help="a git directory of NeMo RL")
    parser.add_argument("--nemo-rl-ref", default="v0.7.0", help="tag or commit (default v0.7.0)")
    parser.add_argument("--openrlhf", type=Path, help="a git directory of OpenRLHF")
    parser.add_argument("--openrlhf-ref", default="v0.11.0", help="tag or commit (default v0.11.0)")
    parser.add_argument("--openrlhf-releases", nargs="*", default=[],
                        help="older OpenRLHF tags, written one file each (openrlhf-<tag>.json) instead of "
                             "--openrlhf-ref")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    args = parser.parse_args(argv)
    made = []
    if args.verl_wheel:
        made.append(verl(args.verl_wheel))
    for ref in args.verl_refs if args.verl_repo else ():
        made.append(verl_git(args.verl_repo, ref))
    for wheel in args.verl_release_wheels:
        data = verl(wheel)
        made.append(data | {"file": f"verl-{data['version']}"})
    if args.nemo_rl:
        made.append(nemo_rl(args.nemo_rl, args.nemo_rl_ref))
    if args.openrlhf and not args.openrlhf_releases:
        made.append(openrlhf(args.openrlhf, args.openrlhf_ref))
    for ref in args.openrlhf_releases if args.openrlhf else ():
        made.append(openrlhf(args.openrlhf, ref) | {"file": f"openrlhf-{ref}"})
    args.out.mkdir(parents=True, exist_ok=True)
    for data in made:
        path = args.out / f"{data.pop('file', data['framework'])}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        sizes = ", ".join(f"{name} {len(keys)}" for name, keys in data["configs"].items())
        print(f"{path}: {data['framework']} {data['version']}: {sizes}")
    if not made:
        parser.error("give at least one of --verl-wheel, --verl-repo, --verl-release-wheels, --nemo-rl, --openrlhf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
