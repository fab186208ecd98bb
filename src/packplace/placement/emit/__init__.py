"""A placement plan in an RL framework's own terms: verl config keys, OpenRLHF flags, NeMo RL config keys.

:func:`emit` turns a :class:`~packplace.placement.problem.plan.Plan` of an instance into an :class:`EmittedPlan`:
the framework's settings (``{key: value}``: node and GPU counts, rollout-engine TP, trainer TP/PP and
sharding, micro-batch sizes, colocation or resource pools, samples per prompt, batch sizes) and one
line per plan feature that the framework cannot run as planned (``refusals``: the settings then run
something else, or nothing). ``EmittedPlan.text()`` is the command-line form (Hydra overrides for verl
and NeMo RL, flags for OpenRLHF).

Frameworks (:data:`FRAMEWORKS`): ``verl`` (0.9.1: ``verl/trainer/config/ppo_trainer.yaml`` and
``ppo_megatron_trainer.yaml``; a plan of an older ``policy.framework_version`` in that release's keys,
:func:`~packplace.placement.emit.verl_releases.for_release`), ``openrlhf`` (v0.11.0: ``openrlhf/cli/train_ppo_ray.py``,
``train_dpo.py``; a plan of an older ``policy.framework_version`` in that release's option names,
:func:`~packplace.placement.emit.openrlhf.for_release`), ``nemo-rl`` (v0.7.0:
``examples/configs/grpo_math_1B.yaml`` and siblings). Every key emitted exists in that framework's own default
configuration (verl's and OpenRLHF's at the plan's release): the key lists are test data made from the real files by
``benchmarks/frameworks/make_key_lists.py`` (tests/placement/test_emit.py).
Options: ``framework``. Detail and examples: docs/integrations.md ("Placement plans for frameworks").
"""

from __future__ import annotations

from collections.abc import Callable

from packplace.errors import ConfigError
from packplace.placement.emit.common import EmittedPlan, PlanView
from packplace.placement.emit.nemo_rl import emit_nemo_rl
from packplace.placement.emit.openrlhf import emit_openrlhf
from packplace.placement.emit.verl import emit_verl
from packplace.placement.problem.config import PlacementInstance
from packplace.placement.problem.plan import Plan

#: ``framework`` name -> emitter.
FRAMEWORKS: dict[str, Callable[[PlanView], EmittedPlan]] = {
    "verl": emit_verl, "openrlhf": emit_openrlhf, "nemo-rl": emit_nemo_rl,
}


def emit(instance: PlacementInstance, plan: Plan, framework: str) -> EmittedPlan:
    """The plan as ``framework``'s settings, with a refusal line per feature it cannot run.

    Args:
        instance: The placement instance the plan was made for (batch, models, training options).
        plan: A plan of ``instance`` (e.g. ``packplace.place(instance).solution``).
        framework: One of :data:`FRAMEWORKS`.

    Returns:
        An :class:`EmittedPlan` (``settings``, ``refusals``, ``notes``; ``text()`` for the command line).

    Raises:
        ConfigError: an unknown framework, or a plan without the instance's tasks.
    """
    if framework not in FRAMEWORKS:
        raise ConfigError(f"emit: unknown framework {framework!r}; valid: {', '.join(FRAMEWORKS)}")
    return FRAMEWORKS[framework](PlanView.of(instance, plan, framework))


__all__ = ["FRAMEWORKS", "EmittedPlan", "PlanView", "emit"]
