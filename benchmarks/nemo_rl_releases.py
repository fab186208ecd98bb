"""What-if: the NeMo RL rows of ``benchmarks/validation/`` scored with their release's settings.

The step model does not apply a NeMo RL release yet; :mod:`packplace.placement.model.nemo_rl_releases`
holds what each release does differently (the v0.4 optimizer round trip around the log-prob passes of a
trainer that does not share its GPUs with the engine, the v0.4 unfused SwiGLU of the Qwen models). This
script applies them to each NeMo RL file with its release (``policy.framework_version`` where the config
sets it, else the one its ``validation.source`` names, "NeMo RL v0.4 ...") and the Hugging Face
architecture its name says (``qwen3``: ``Qwen3ForCausalLM``, or ``Qwen3MoeForCausalLM`` with routed
experts; ``llama``: ``LlamaForCausalLM``), scores the file's plan in sample, and prints the predicted step
before and after::

    python benchmarks/nemo_rl_releases.py
    python benchmarks/nemo_rl_releases.py --cross-validate   # also leave-one-publication-out (minutes)

It wraps the candidate builder's part function (``packplace.placement.candidates._parts``) for the run
with :func:`~packplace.placement.model.nemo_rl_releases.release_train_parts` on the training vertex: the
training part times the release's SwiGLU factor and, on a plan whose trainer and engine use different
GPUs, a part ``optimizer_offload``. That is what the step model computes once the config names the
release (``policy.framework_version``).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
from contextlib import contextmanager

from packplace.placement import candidates
from packplace.placement.checking.calibrate import DEFAULT_SCOPED_KNOBS, parse_scoped_knobs
from packplace.placement.checking.crossval import cross_validate, load_setups
from packplace.placement.checking.validate import load_setup, predict
from packplace.placement.model.nemo_rl_releases import release_for, release_train_parts

VALIDATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "validation")


def release_of(instance, section: dict) -> str | None:
    """The file's release: its ``policy.framework_version`` when the config has that field, else the one its
    validation ``source`` names ("NeMo RL v0.4 ..."); ``None`` when neither does."""
    version = getattr(instance, "framework_version", None)
    if version:
        return str(version)
    match = re.search(r"NeMo RL v(\d+\.\d+)", str(section.get("source", "")))
    return match.group(1) if match else None


def architecture_of(setup: str, model) -> str:
    """The Hugging Face architecture of a validation file's actor (module docstring): the model family its
    name says (``qwen3`` or ``llama``), MoE when the shape has routed experts."""
    if "qwen3" in setup:
        return "Qwen3MoeForCausalLM" if model.is_moe else "Qwen3ForCausalLM"
    if "llama" in setup:
        return "LlamaForCausalLM"
    raise ValueError(f"{setup}: no model family in the name")


@contextmanager
def releases_applied(settings: dict[str, tuple]):
    """Wrap the part function for the instances whose ``source`` is a key of ``settings``
    (``{source: (release, architecture, split)}``)."""
    parts_fn, cost_fn = candidates._parts, candidates.cost_model

    def cost_model(instance, cluster=None, hardware=None):
        cost = cost_fn(instance, cluster, hardware)
        cost.release_whatif = settings.get(instance.source)
        cost.training_whatif = instance.training
        return cost

    def parts(cost, model, kind, options, strategy, *args, **kwargs):
        out = parts_fn(cost, model, kind, options, strategy, *args, **kwargs)
        found = getattr(cost, "release_whatif", None)
        if found is None or kind != "train":
            return out
        release, architecture, split = found
        return release_train_parts(cost, release, model, architecture, strategy.dp, strategy.pp, strategy.tp, out,
                                   shares_engine_gpus=not split, options=options)

    candidates._parts, candidates.cost_model = parts, cost_model
    try:
        yield
    finally:
        candidates._parts, candidates.cost_model = parts_fn, cost_fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cross-validate", action="store_true")
    args = ap.parse_args()
    paths = sorted(glob.glob(os.path.join(VALIDATION, "*.yaml")))
    settings: dict[str, tuple] = {}
    for path in paths:
        if not os.path.basename(path).startswith("nemo_rl"):
            continue
        instance, plan, section = load_setup(path)
        version = release_of(instance, section)
        release = release_for(instance.framework, version)
        if release is None:
            continue
        blocks = {name: vp.allocation for name, vp in plan.vertices}
        split = blocks.get("actor.generate") != blocks.get("actor.train")
        settings[instance.source] = (release,
                                     architecture_of(os.path.basename(path), instance.models["actor"]), split)
    rows = []
    for path in paths:
        instance, plan, section = load_setup(path)
        if instance.source not in settings:
            continue
        before = predict(instance, plan, section)[0]["step"]
        with releases_applied(settings):
            instance, plan, section = load_setup(path)
            after = predict(instance, plan, section)[0]["step"]
        published = float(section["published"]["step"])
        release, architecture, split = settings[instance.source]
        rows.append((os.path.basename(path)[:-5], release.version, architecture, split, published, before, after))
    print(f"{'setup':52s} {'rel':>4s} {'architecture':20s} {'split':>5s} {'published':>9s} "
          f"{'before':>7s} {'after':>7s} {'ratio':>11s}")
    for name, version, architecture, split, published, before, after in rows:
        print(f"{name:52s} {version:>4s} {architecture:20s} {str(split):>5s} {published:9.1f} {before:7.1f} "
              f"{after:7.1f} {before / published:5.2f}->{after / published:4.2f}")
    if args.cross_validate:
        knobs = parse_scoped_knobs(",".join(DEFAULT_SCOPED_KNOBS))
        for label, applied in (("before", False), ("after", True)):
            if applied:
                with releases_applied(settings):
                    result = cross_validate(load_setups(paths, {}), knobs)
            else:
                result = cross_validate(load_setups(paths, {}), knobs)
            summary = result["summary"]["out_of_sample"]
            pairs = [p for p in result["pairs"] if p.get("out_of_sample_ratio") is not None]
            within = sum(0.8 <= p["out_of_sample_ratio"] <= 1.25 for p in pairs)
            ordered = sum(bool(p["out_of_sample_order_ok"]) for p in pairs)
            print(f"{label}: out of sample {summary['runs']} runs, median {summary['median']:.2f}, "
                  f"{summary['within_0.8-1.25']:.0%} within 0.8-1.25, {summary['within_0.67-1.5']:.0%} within "
                  f"0.67-1.5, {summary['out_of_memory']} over memory; pairs {within}/{len(pairs)} within, "
                  f"{ordered}/{len(pairs)} ordered")


if __name__ == "__main__":
    main()
