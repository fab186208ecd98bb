"""Counting proofs under the rank rules (:class:`~packplace.balance.rank_rules.CountProof`): every rank holds
whole units, so its sample count is a sum of unit sizes. ``local_batch_size: auto`` raises ``InfeasibleError``
where every count is proven impossible and ``TimeLimitError`` ("not proven", naming the counts) where some
count is undecided; every backend, ``lns`` and ``cpsat`` included, reports the proof as ``infeasible``."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BALANCE_SEARCHING

import packplace
import packplace.balance.reference as reference
from packplace.balance import make_instance
from packplace.balance.rank_rules import CountProof, _subset_sums, unreachable_counts
from packplace.cli import main
from packplace.errors import InfeasibleError, TimeLimitError

#: 18 GRPO prompts of 8 responses on 16 ranks with equal_count: every rank needs 144 / 16 = 9 samples, and
#: whole groups give 0, 8, 16, ... on a rank, never 9 (at any count of bins per rank).
EIGHTS = {"tokens": [100 + i for i in range(144)], "seq_len": 100_000, "data_parallel_size": 16,
          "equal_count": True, "groups": [tuple(range(p * 8, p * 8 + 8)) for p in range(18)]}


def test_subset_sums_are_exact_by_hand():
    assert np.flatnonzero(_subset_sums(np.array([8] * 18), 40)).tolist() == [0, 8, 16, 24, 32, 40]
    # {5, 7, 1}: 0, 1, 5, 6 (5+1), 7, 8 (7+1), 12 (5+7), 13 (all)
    assert np.flatnonzero(_subset_sums(np.array([5, 7, 1]), 20)).tolist() == [0, 1, 5, 6, 7, 8, 12, 13]


def test_count_proof_reasons():
    inst = make_instance(**EIGHTS, local_batch_size=3)
    proof = CountProof.of(inst.packing_columns("tokens"))
    reason = ("each of 16 ranks must hold 9 samples (144 samples, equal_count), but no set of whole units "
              "(groups and single samples, sizes 8) holds 9")
    assert proof.reason(1) == proof.reason(9) == reason
    # m = 10: 160 non-empty bins for 144 samples
    assert proof.reason(10) == "16 ranks x 10 non-empty bins need at least 160 samples, got 144"
    # 16 groups of 9 on 16 ranks: 9 a rank, one group each
    nines = make_instance([1] * 144, seq_len=100, data_parallel_size=16, local_batch_size=2, equal_count=True,
                          groups=[tuple(range(p * 9, p * 9 + 9)) for p in range(16)])
    assert unreachable_counts(nines.packing_columns("tokens")) is None
    # without equal_count a rank may hold any count in [m, n - (D - 1) m]: groups {4, 2} on 2 ranks at m = 3
    # need exactly 3 on each rank; at m = 2 the range [2, 4] holds 2 and 4
    pair = make_instance([1] * 6, seq_len=100, data_parallel_size=2, local_batch_size=2,
                         groups=[(0, 1, 2, 3), (4, 5)])
    proof = CountProof.of(pair.packing_columns("tokens"))
    assert proof.reason(2) is None
    assert proof.reason(3) == ("each of 2 ranks must hold 3 samples (6 samples, 3 non-empty bins per rank), but no "
                               "set of whole units (groups and single samples, sizes 2, 4) holds 3")


def test_auto_with_no_count_that_packs_is_a_proven_infeasible_error():
    with pytest.raises(InfeasibleError) as raised:
        make_instance(**EIGHTS, local_batch_size="auto")
    assert not isinstance(raised.value, TimeLimitError)
    assert str(raised.value) == (
        "local_batch_size: 'auto': no bins per rank in [1, 9] can hold all 144 samples on 16 ranks under the rules "
        "(seq_len 100000, max_samples_per_bin None, equal_count True, 18 groups, local_batch_size any count; "
        "proven: each of 16 ranks must hold 9 samples (144 samples, equal_count), but no set of whole units "
        "(groups and single samples, sizes 8) holds 9)")


def test_auto_with_undecided_counts_says_not_proven_and_names_them(monkeypatch):
    # {3, 3} {2, 2, 2} packs m = 1; with the construction made to dead-end and no exact model allowed, neither
    # m = 1 nor m = 2 is packed or proven impossible
    monkeypatch.setattr(reference, "construct", lambda *args, **kwargs: None)
    monkeypatch.setattr(reference, "EXACT_MAX_BOOLEANS", 0)
    with pytest.raises(TimeLimitError, match=r"; not proven: the exact check could not decide m = 1-2 \(model "
                                             r"over 0 Booleans"):
        make_instance([3, 3, 2, 2, 2], seq_len=6, data_parallel_size=2, local_batch_size="auto")


def test_auto_proven_infeasible_exits_1_on_the_command_line(tmp_path, capsys):
    config = tmp_path / "eights.yaml"
    groups = ", ".join("[" + ", ".join(str(p * 8 + j) for j in range(8)) + "]" for p in range(18))
    lengths = ", ".join(str(t) for t in EIGHTS["tokens"])
    config.write_text(f"seq_len: 100000\ndata_parallel_size: 16\nlocal_batch_size: auto\nequal_count: true\n"
                      f"samples: {{lengths: [{lengths}]}}\ngroups: [{groups}]\n")
    assert main(["balance", "--config", str(config), "--solver", "lpt"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no set of whole units (groups and single samples, sizes 8) holds 9" in err


@pytest.mark.parametrize("solver", BALANCE_SEARCHING)
def test_every_backend_reports_the_counting_proof(solver):
    inst = make_instance(**EIGHTS, local_batch_size=3)
    result = packplace.balance(inst, solver=solver, time_limit_s=5)
    assert result.status == "infeasible" and result.solution is None, (solver, result.message)
    assert "no set of whole units (groups and single samples, sizes 8) holds 9" in result.message


@pytest.mark.parametrize("solver", ["lns", "cpsat"])
def test_lns_and_cpsat_carry_their_starts_feasibility_proof(solver):
    # 3 groups of four 60-token samples on 2 ranks of 6 bins (seq_len 100): counts allow 8 on a rank (two
    # groups, or a group and the 4 singles), but two groups need 8 bins; CP-SAT's feasibility model proves it
    inst = make_instance([60] * 12 + [1] * 4, seq_len=100, data_parallel_size=2, local_batch_size=6,
                         groups=[tuple(range(g * 4, g * 4 + 4)) for g in range(3)])
    assert unreachable_counts(inst.packing_columns("tokens")) is None
    result = packplace.balance(inst, solver=solver, time_limit_s=5)
    assert (result.status, result.solution, result.info["proof"]) == ("infeasible", None, "proven")
    assert result.message.startswith("infeasible, proven by the start: repair: ")
    assert "CP-SAT's feasibility model proved that no packing keeps them" in result.message


def test_every_backend_labels_the_counting_proof_alike():
    """18 groups of 8 on 16 ranks at 3 bins a rank with equal_count: each rank must hold 9 samples, whole
    groups give 8 or 16, so every backend proves it infeasible by counting, and says so with one label."""
    groups = [tuple(range(p * 8, p * 8 + 8)) for p in range(18)]
    inst = make_instance(tokens=[100 + i for i in range(144)], seq_len=100000, data_parallel_size=16,
                         local_batch_size=3, equal_count=True, groups=groups)
    for solver in ("lpt", "repair", "kk", "lns", "cpsat"):
        result = packplace.balance(inst, solver=solver, time_limit_s=5)
        assert (result.status, result.info.get("proof")) == ("infeasible", "counting"), solver
