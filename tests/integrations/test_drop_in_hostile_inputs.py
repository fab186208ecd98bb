"""Every public drop-in function, each argument replaced by a hostile value (None, a string, a float, NaN, a
nested list, a negative number, an empty list, lists of floats, strings or NaN): the call either succeeds or
raises one ``ValueError`` (``ConfigError``) / ``TypeError`` line that starts with the name of one of the call's
arguments and names the argument at fault — never another exception (``AttributeError``, ``KeyError``, numpy's
or Python's own messages), nor a message about something else. A message may start with another argument
when the fault is between the two (``equal_size: the 3 values of seqlen_list do not split into 2 parts``)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from hyper_parallel_protocol import PackingConstraints, samples_of
from test_megatron_dynamic_cp import _stand_in_data_schedule as _stand_in_dynamic_cp
from test_megatron_scheduler import _stand_in_data_schedule

import packplace.integrations.verl as pv
from packplace.errors import ConfigError, InfeasibleError
from packplace.integrations import megatron_planning as planning
from packplace.integrations import partition
from packplace.integrations.hyper_parallel import PackplaceBalancingAlgorithm
from packplace.integrations.megatron import PackplacePackingScheduler, register, sequence_flops
from packplace.integrations.megatron_dynamic_cp import PackplaceDynamicCPPlanner, PackplaceDynamicCPScheduler, install
from packplace.integrations.micro_batches import micro_batch_partitions

HOSTILE = {
    "None": None,
    "string": "abc",
    "float": 3.5,
    "nan": math.nan,
    "nested": [[1, 2], [3]],
    "negative": -1,
    "empty": [],
    "floats": [3.5, 2.0, 1.25],
    "strings": ["a", "b"],
    "nans": [math.nan, 1.0],
}

_SAMPLES = samples_of([3, 2, 2, 1], [9.0, 4.0, 4.0, 1.0])
_KEYS = [s.key for s in _SAMPLES]
_MASK = {"attention_mask": [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]]}


class _Proto:
    def __init__(self, batch, non_tensor_batch=None, meta_info=None):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch or {}, meta_info or {}

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None):
        return cls(tensors, non_tensors, meta_info)


def _scheduler():
    return PackplacePackingScheduler(9, 1, 2, None)


#: (name, callable, valid keyword arguments, unused)
CALLS = [
    ("partition", partition, {"weights": [3, 1, 2], "k": 2}, {}),
    ("calculate_workload", pv.calculate_workload, {"seqlen_list": [1, 2]}, {}),
    ("workload", pv.workload, {"seqlens": [1, 2]}, {}),
    ("karmarkar_karp", pv.karmarkar_karp, {"seqlen_list": [1, 2, 3, 4], "k_partitions": 2, "equal_size": True}, {}),
    ("greedy_partition", pv.greedy_partition, {"seqlen_list": [1, 2, 3, 4], "k_partitions": 2, "equal_size": False},
     {}),
    ("get_seqlen_balanced_partitions", pv.get_seqlen_balanced_partitions,
     {"seqlen_list": [5, 1, 2, 4], "k_partitions": 2, "equal_size": True}, {}),
    ("log_seqlen_unbalance", pv.log_seqlen_unbalance,
     {"seqlen_list": [1, 2, 3, 4], "partitions": [[0, 3], [1, 2]], "prefix": "g"}, {}),
    ("ceildiv", pv.ceildiv, {"a": 7, "b": 2}, {}),
    ("roundup_divisible", pv.roundup_divisible, {"a": 7, "b": 2}, {}),
    ("rearrange_micro_batches", pv.rearrange_micro_batches,
     {"batch": _MASK, "max_token_len": 4, "num_batches_divided_by": 1, "same_micro_num_in_dp": True,
      "min_num_micro_batch": 1, "use_dynamic_bsz_balance": True, "force_group_size": 1}, {}),
    ("rearrange_micro_batches(lengths)", pv.rearrange_micro_batches, {"batch": [3, 1, 2], "max_token_len": 4}, {}),
    ("required_micro_batches", pv.required_micro_batches, {"lengths": [3, 1, 2], "max_token_len": 4}, {}),
    ("get_reverse_idx", pv.get_reverse_idx, {"idx_map": [1, 0, 2]}, {}),
    ("prepare_dynamic_batch", pv.prepare_dynamic_batch,
     {"data": _Proto({"attention_mask": np.array(_MASK["attention_mask"])}), "max_token_len": 4}, {}),
    ("restore_dynamic_batch", pv.restore_dynamic_batch, {"data": np.arange(4), "batch_idx_list": [[1, 0], [3, 2]]},
     {}),
    ("get_group_balanced_partitions", pv.get_group_balanced_partitions,
     {"seqlen_list": [1, 2, 3, 4], "uid_list": ["a", "a", "b", "b"], "k_partitions": 2}, {}),
    ("micro_batch_partitions", micro_batch_partitions, {"seqlens": [3, 1, 2, 2], "max_token_len": 4, "dp_size": 2},
     {}),
    ("micro_batch_partitions(costs)", micro_batch_partitions,
     {"seqlens": [3, 1, 2, 2], "max_token_len": 4, "dp_size": 2, "costs": [1.0, 2.0, 3.0, 4.0]}, {}),
    ("PackplaceBalancingAlgorithm", PackplaceBalancingAlgorithm, {"solver": "repair", "objective": "makespan"}, {}),
    ("PackplaceBalancingAlgorithm.assign", PackplaceBalancingAlgorithm().assign,
     {"samples": _SAMPLES, "reference_bins": [(_KEYS[0],), (_KEYS[1], _KEYS[2], _KEYS[3])],
      "constraints": PackingConstraints(6), "data_parallel_size": 2, "local_batch_size": 1,
      "objective_group_size": 2}, {}),
    ("PackplaceBalancingAlgorithm.objective", PackplaceBalancingAlgorithm().objective, {"rank_costs": [1.0, 2.0]}, {}),
    ("PackplacePackingScheduler", PackplacePackingScheduler,
     {"max_seqlen_per_dp_cp_rank": 9, "cp_size": 1, "dp_size": 2, "microbatch_group_size_per_vp_stage": None}, {}),
    ("get_groups_and_subsamples", _scheduler().get_groups_and_subsamples,
     {"sample_id_seqlens": list(enumerate([4, 4, 3, 3]))}, {}),
    ("rank_packs", _scheduler().rank_packs, {"seqlens": [4, 4, 3, 3]}, {}),
    ("sequence_flops", sequence_flops, {"seqlens": [4, 4], "hidden_size": 8}, {}),
    ("register", register, {"name": "packplace_hostile", "data_schedule": _stand_in_data_schedule()}, {}),
    ("PackplaceDynamicCPScheduler", PackplaceDynamicCPScheduler,
     {"max_seqlen_per_dp_cp_rank": 4, "cp_size": 2, "dp_size": 2, "microbatch_group_size_per_vp_stage": None,
      "max_num_seqs": None, "min_cp_size": 1, "solver": "greedy", "seed": 0}, {}),
    ("PackplaceDynamicCPScheduler.get_groups_and_subsamples",
     PackplaceDynamicCPScheduler(4, 2, 2, None).get_groups_and_subsamples,
     {"sample_id_seqlens": list(enumerate([8, 4, 3, 2, 2, 1]))}, {}),
    ("PackplaceDynamicCPPlanner", PackplaceDynamicCPPlanner,
     {"max_seqlen_per_dp_cp_rank": 4, "dp_size": 2, "cp_size": 2, "min_cp_size": 1}, {}),
    ("PackplaceDynamicCPPlanner.build_packs", PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2).build_packs,
     {"sequences": [planning.SequenceDescriptor(i, n) for i, n in enumerate([8, 4, 3, 2, 2, 1])],
      "constraints": planning.PackingConstraints(16)}, {}),
    ("PackplaceDynamicCPPlanner.build_plan", PackplaceDynamicCPPlanner(4).build_plan,
     {"packs": [planning.PackDescriptor(i, [i], [n]) for i, n in enumerate([8, 4, 3, 2, 2, 1])],
      "resources": planning.PlacementResources(dp_size=2, cp_size=2)}, {}),
    ("install", install, {"data_schedule": _stand_in_dynamic_cp(), "seed": 0}, {}),
]

#: Errors about an argument may name it by a spelling of its own (``batch['attention_mask']``, ``samples[0]``).
ALIASES = {
    "dp_size": ("data_parallel_size",),
    "options": ("hidden_size", "solver"),
}

CASES = [(label, call, valid, argument, hostile)
         for label, call, valid, _ in CALLS for argument in valid for hostile in HOSTILE
         if (argument, hostile) != ("data_schedule", "None")]   # None: Megatron's own module, imported


@pytest.mark.parametrize("label,call,valid,argument,hostile", CASES,
                         ids=[f"{c[0]}-{c[3]}-{c[4]}" for c in CASES])
def test_a_hostile_argument_is_refused_in_one_line_that_names_it(label, call, valid, argument, hostile):
    kwargs = dict(valid)
    kwargs[argument] = HOSTILE[hostile]
    if label == "register" and argument == "name":
        kwargs["data_schedule"] = _stand_in_data_schedule()
    try:
        call(**kwargs)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert "\n" not in message, message
        starts = tuple(inspect.signature(call).parameters) + ALIASES.get(argument, ())
        shown = f"{label}({argument}={hostile!r}): {type(error).__name__}: {message}"
        assert message.startswith(starts), shown
        assert any(name in message for name in (argument, *ALIASES.get(argument, ()))), shown
    except Exception as error:  # noqa: BLE001 - the point: nothing else may escape
        pytest.fail(f"{label}({argument}={hostile!r}) raised {type(error).__name__}: {error}")


def test_valid_calls_of_the_table_succeed():
    for label, call, valid, _ in CALLS:
        if label == "register":
            continue   # needs Megatron-Core (its own tests use a stand-in module)
        call(**valid)


#: The balance and context-parallel problems' own field names: a drop-in's message names its caller's arguments.
INTERNAL_NAMES = ("seq_len", "oversized_policy", "local_batch_size", "data_parallel_size", "max_samples_per_bin",
                  "equal_count", "max_tokens_per_rank", "context_parallel", "tokens:", "tokens[")

_DCP_SEQUENCES = [planning.SequenceDescriptor(i, n) for i, n in enumerate([17, 4])]
#: (label, call, exception, the message, exactly) — well-formed input no plan can serve.
UNSERVABLE = [
    ("PackplacePackingScheduler: a sequence over the pack cap",
     lambda: _scheduler().get_groups_and_subsamples(list(enumerate([10, 4, 3]))), ConfigError,
     "sample_id_seqlens[0][1]: 10 tokens exceed the cap max_seqlen_per_dp_cp_rank x cp_size = 9 tokens per pack"),
    ("PackplacePackingScheduler.rank_packs: a sequence over the pack cap",
     lambda: _scheduler().rank_packs([10, 4, 3]), ConfigError,
     "seqlens[0]: 10 tokens exceed the cap max_seqlen_per_dp_cp_rank x cp_size = 9 tokens per pack"),
    ("PackplacePackingScheduler: fewer sequences than ranks",
     lambda: PackplacePackingScheduler(9, 1, 4, None).get_groups_and_subsamples(list(enumerate([1, 4, 3]))),
     InfeasibleError, "sample_id_seqlens: 3 sequences cannot give each of dp_size=4 ranks a non-empty pack"),
    # 5 full packs on 2 ranks: one rank would run 3, the other 2
    ("PackplacePackingScheduler: no common pack count",
     lambda: PackplacePackingScheduler(9, 1, 2, None).get_groups_and_subsamples(list(enumerate([9] * 5))),
     InfeasibleError, "sample_id_seqlens: no number of packs per rank in [1, 2] holds all 5 sequences on dp_size=2 "
                      "ranks within the cap max_seqlen_per_dp_cp_rank x cp_size = 9 tokens per pack; proven"),
    ("PackplacePackingScheduler: the VPP multiple past the sequences",
     lambda: PackplacePackingScheduler(9, 1, 2, 4).get_groups_and_subsamples(list(enumerate([9, 9, 1, 1]))),
     InfeasibleError, "microbatch_group_size_per_vp_stage: 4 needs 4 packs per rank here, and 4 packs on each of "
                      "dp_size=2 ranks need at least 8 sequences; sample_id_seqlens has 4"),
    # equal counts put 83 + 18 on one rank, two micro-batches there and one on the other rank
    ("micro_batch_partitions: no common micro-batch count", lambda: micro_batch_partitions([83, 83, 18], 100, 2),
     InfeasibleError, "seqlens: no number of micro-batches per rank in [1, 1] holds all 3 sequences on dp_size=2 "
                      "ranks within the cap max_token_len 100 (equal_size=True); proven"),
    ("micro_batch_partitions: a length past 2^53", lambda: micro_batch_partitions([2**60] * 4, 2**61, 2),
     ConfigError, "seqlens[0]: tokens must be at most 2^53, got 1152921504606846976"),
    ("micro_batch_partitions: no micro-batch may hold a sequence",
     lambda: micro_batch_partitions([3, 3], 100, 2, max_samples_per_micro_batch=0), ConfigError,
     "max_samples_per_micro_batch: must be an integer >= 1, got 0"),
    ("micro_batch_partitions: costs past float64", lambda: micro_batch_partitions([3, 3], 100, 2, costs=[1e308] * 2),
     ConfigError, "costs: the costs sum to more than float64 holds, above the supported 2^1022 (loads and their "
                  "sums must stay finite in float64); rescale them to a smaller unit"),
    ("partition: weights past float64", lambda: partition([1e308] * 3, 2), ConfigError,
     "weights: the costs sum to more than float64 holds, above the supported 2^1022 (loads and their sums must "
     "stay finite in float64); rescale them to a smaller unit"),
    ("PackplacePackingScheduler: a length past 2^53",
     lambda: PackplacePackingScheduler(2**60, 1, 2, None).get_groups_and_subsamples(list(enumerate([2**59] * 4))),
     ConfigError, "sample_id_seqlens[0][1]: tokens must be at most 2^53, got 576460752303423488"),
    ("PackplaceDynamicCPScheduler: a sequence over the whole DP x CP group",
     lambda: PackplaceDynamicCPScheduler(4, 2, 2, None).get_groups_and_subsamples(list(enumerate([17, 3]))),
     InfeasibleError, "sample_id_seqlens: sample 0 has 17 tokens, more than the largest CP group holds (4 ranks x "
                      "max_seqlen_per_dp_cp_rank 4; dp_size x cp_size bound the group)"),
    ("PackplaceDynamicCPPlanner.build_packs: a sequence over the largest group",
     lambda: PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2).build_packs(
         _DCP_SEQUENCES, planning.PackingConstraints(16)), InfeasibleError,
     "sequences: sample 0 has 17 tokens, more than the largest CP group holds (4 ranks x max_seqlen_per_dp_cp_rank "
     "4; dp_size x cp_size and constraints.max_tokens_per_pack bound the group)"),
    ("PackplaceDynamicCPPlanner.build_packs: too few sequences for groups of one rank",
     lambda: PackplaceDynamicCPPlanner(4, dp_size=2, cp_size=2).build_packs(
         [planning.SequenceDescriptor(0, 4)], planning.PackingConstraints(4)), InfeasibleError,
     "sequences: 1 samples cannot fill the 4 ranks of a micro-batch: every CP group runs at least one, and groups "
     "of at most 1 ranks (dp_size x cp_size and constraints.max_tokens_per_pack bound them) need 4"),
    ("PackplaceDynamicCPPlanner.build_plan: a pack over the largest group",
     lambda: PackplaceDynamicCPPlanner(4).build_plan(
         [planning.PackDescriptor(i, [i], [n]) for i, n in enumerate([17, 4])],
         planning.PlacementResources(dp_size=2, cp_size=2)), InfeasibleError,
     "packs: pack 0 has 17 tokens, more than the largest CP group holds (4 ranks x max_seqlen_per_dp_cp_rank 4; "
     "resources.dp_size x resources.cp_size bound the group)"),
]


@pytest.mark.parametrize("label,call,exception,message", UNSERVABLE, ids=[u[0] for u in UNSERVABLE])
def test_input_no_plan_serves_is_refused_in_the_callers_terms(label, call, exception, message):
    with pytest.raises(exception) as caught:
        call()
    assert str(caught.value) == message
    assert not any(name in message for name in INTERNAL_NAMES), message


@pytest.mark.parametrize("dp_size", [0, -1, 2.0, True, "2"])
def test_micro_batch_partitions_names_its_own_dp_size(dp_size):
    # its own argument, not the balance problem's data_parallel_size
    with pytest.raises(ConfigError, match=r"^dp_size: must be an integer >= 1, got "):
        micro_batch_partitions([1, 2, 3], 100, dp_size)


@pytest.mark.parametrize("call", [lambda: partition([1e308, 1e308], 1), lambda: partition([1e308] * 3, 2),
                                  lambda: micro_batch_partitions([3, 3], 100, 2, costs=[1e308] * 2)])
def test_costs_past_float64_are_refused_without_a_numpy_overflow_warning(call):
    """The overflowing float64 sum is only the check's: numpy's RuntimeWarning must not print before the
    ConfigError line (it used to, from the exact-integer check's sum in make_instance)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(ConfigError, match="the costs sum to more than float64 holds"):
            call()
