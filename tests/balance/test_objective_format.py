"""The balance solvers' messages print objectives in full (``packplace.table.format_objective``): ``3,000,003``,
not ``:.6g``'s ``3e+06``, which hid the unit that decides ``optimal`` against an integral bound; whole values read
back exactly, fractions within a relative 5e-9, in messages and in the tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import packplace
from packplace.balance import make_instance
from packplace.harness.report import fmt_number
from packplace.table import FULL_INTEGER_LIMIT, format_number, format_objective, render_table

# two ranks of one bin: the bound 3,000,002, the best split 3,000,003 (tests/balance/test_balance_exact_optimal.py)
INTEGER = [3_000_000, 1_000_000, 1_000_001, 1_000_002]


@pytest.mark.parametrize("value, text", [
    (3_000_003.0, "3,000,003"), (3_000_003, "3,000,003"), (np.float64(1_559_886.0), "1,559,886"), (0.0, "0"),
    (-5.0, "-5"), (12.0, "12"), (2.0 ** 53, "9,007,199,254,740,992"),
    (1_234_567.891, "1,234,567.89"), (0.123456789012, "0.123456789"), (3_000_001.75, "3,000,001.75"),
    (1e-7, "1e-07"), (math.inf, "inf"), (-math.inf, "-inf"), (math.nan, "nan"),
])
def test_format_objective(value, text):
    assert format_objective(value) == text


@pytest.mark.parametrize("value, text", [
    # 2**53 + 2 = 9,007,199,254,740,994 is a float too (even), but 2**53 + 1 is not: an int prints exactly
    (2 ** 53 + 1, "9,007,199,254,740,993"), (2 ** 53 + 2, "9,007,199,254,740,994"),
    (-(2 ** 60) - 1, "-1,152,921,504,606,846,977"),
    (10 ** 20 + 7, "100,000,000,000,000,000,007"), (np.int64(2 ** 62 + 1), "4,611,686,018,427,387,905"), (0, "0"),
])
def test_format_objective_prints_ints_exactly(value, text):
    assert format_objective(value) == text


@pytest.mark.parametrize("value", [True, False, np.bool_(True)])
def test_format_objective_refuses_bools(value):
    with pytest.raises(ValueError, match=r"format_objective: value must be a number, got the bool (np\.)?(True|False)"):
        format_objective(value)


@pytest.mark.parametrize("value, text", [
    # 9 significant digits would print 4e+09, 1e+09, 123,456,790, 100,000 and 2: exponent form or an integer
    (4_000_000_000.5, "4,000,000,000.5"), (999_999_999.6, "999,999,999.6"), (123_456_789.5, "123,456,789.5"),
    (-123_456_789.5, "-123,456,789.5"), (99_999.99999999, "99,999.99999999"), (1.99999999999, "1.99999999999"),
    # 1e15 + 0.5 is a float (its spacing there is 0.125); 0.1 + 0.2 keeps the 9 digits' 0.3
    (1e15 + 0.5, "1,000,000,000,000,000.5"), (0.1 + 0.2, "0.3"), (np.float64(4_000_000_000.5), "4,000,000,000.5"),
])
def test_format_objective_never_hides_a_fraction(value, text):
    assert format_objective(value) == text
    assert "e" not in text and "." in text


@pytest.mark.parametrize("value, shown", [(None, "None"), ("3", "'3'"), (b"3", "b'3'"), ([1.0], r"\[1\.0\]")])
def test_format_objective_refuses_non_numbers(value, shown):
    with pytest.raises(ValueError, match=rf"format_objective: value must be a number, got {shown}$"):
        format_objective(value)


def test_lns_prints_its_start_objective_in_full():
    instance = make_instance([3, 1, 1, 1], INTEGER, seq_len=10, data_parallel_size=2, local_batch_size=1)
    result = packplace.balance(instance, solver="lns", seed=0)
    assert result.objective == 3_000_003
    assert "start (3,000,003)" in result.message and "e+06" not in result.message


def test_cpsat_logs_its_start_objective_in_full():
    instance = make_instance([3, 1, 1, 1], INTEGER, seq_len=10, data_parallel_size=2, local_batch_size=1)
    result = packplace.balance(instance, solver="cpsat", seed=0)
    assert any(line.endswith("objective 3,000,003") for line in result.log)


def test_cpsat_counting_refusal_prints_half_the_bin_in_full():
    # three samples over half of a 3,000,000-token bin, two bins: no assignment (it had read seq_len/2 = 1.5e+06)
    instance = make_instance([1_500_001] * 3, seq_len=3_000_000, data_parallel_size=2)
    result = packplace.balance(instance, solver="cpsat")
    assert result.status == "infeasible"
    assert "3 samples have more than seq_len/2 = 1,500,000 tokens, only 2 bins" in result.message


@pytest.mark.parametrize("value, text", [
    # past 2**53 every float is an integer: its digits in full (had been 1.1529215e+18 and 9.00719925e+15, the
    # same text for 2**60 and 2**60 + 256)
    (2.0 ** 60, "1,152,921,504,606,846,976"), (2.0 ** 60 + 256, "1,152,921,504,606,847,232"),
    (2.0 ** 53 + 2, "9,007,199,254,740,994"), (-(2.0 ** 62), "-4,611,686,018,427,387,904"),
    (np.float64(1e20), "100,000,000,000,000,000,000"),
    # from 1e21 the shortest exponent form that reads back as the same float
    (1e21, "1e+21"), (2.0 ** 100, "1.2676506002282294e+30"), (-1e300, "-1e+300"),
    # below 1e-4: significant digits in exponent form, at most 9, trailing zeros dropped
    (3.2e-05, "3.2e-05"), (1.23456789012e-05, "1.23456789e-05"), (-5e-324, "-4.94065646e-324"),
])
def test_format_objective_whole_floats_past_2_53_and_small_fractions(value, text):
    assert format_objective(value) == text


def _read_back(text: str) -> float:
    return float(text.replace(",", ""))


#: A fraction's text reads back within this relative error: half a unit of the 9th significant digit.
READ_BACK_RTOL = 5e-9


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_format_objective_reads_back(value):
    text = format_objective(value)
    assert _read_back(text) == pytest.approx(value, rel=READ_BACK_RTOL, abs=0.0)
    if value.is_integer():
        if abs(value) < FULL_INTEGER_LIMIT:
            assert "e" not in text and int(text.replace(",", "")) == int(value)   # the float's value, exactly
        else:
            assert _read_back(text) == value                                      # the same float
    elif abs(value) >= 1e-4:
        assert "e" not in text and "." in text                                    # never as an integer


@given(st.integers(min_value=-(10 ** 40), max_value=10 ** 40))
def test_format_objective_prints_every_int_exactly(value):
    text = format_objective(value)
    assert int(text.replace(",", "")) == value
    assert text.lstrip("-").replace(",", "").isdigit() and all(len(g) == 3 for g in text.lstrip("-").split(",")[1:])


def test_tables_print_objectives_whole():
    # the compare / bench cells and notes (fmt_number), and the balance summary's objective and bound columns
    assert fmt_number(123_456.7) == "123,456.7" and fmt_number(2.0 ** 60) == "1,152,921,504,606,846,976"
    assert fmt_number(None) == "-" and fmt_number(math.inf) == "-" and fmt_number(3.2e-05) == "3.2e-05"
    table = render_table(["solver", "objective", "bound"], [["lpt", 123_456.7, 2.0 ** 60], ["kk", None, 1.5]],
                         objectives=(1, 2))
    assert table.splitlines()[2].split() == ["lpt", "123,456.7", "1,152,921,504,606,846,976"]
    assert table.splitlines()[3].split() == ["kk", "-", "1.5"]
    # other cells keep 6 significant digits, but never an exponent past the units (999,999.5 had been 1e+06)
    assert format_number(999_999.5) == "999,999.5" and format_number(123_456.7) == "123457"
