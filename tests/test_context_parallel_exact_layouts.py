"""The slot layouts of the exact dynamic-CP model: every signature (groups per class) that aligned blocks
of the allowed sizes can tile the ranks with, each with a tiling that realises it."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from packplace.solvers.context_parallel.cpsat.layouts import TooManyLayouts, slot_layouts


def all_tilings(ranks, sizes, first=0):
    if first == ranks:
        yield ()
        return
    for size in sizes:
        if first % size == 0 and first + size <= ranks:
            for rest in all_tilings(ranks, sizes, first + size):
                yield ((first, size), *rest)


def signature_of(tiling, layouts, class_of):
    counts = Counter((size, class_of(first, size)) for first, size in tiling)
    return tuple(counts[c] for c in layouts.classes)


@pytest.mark.parametrize("ranks, sizes, class_of", [
    (8, (1, 2, 4, 8), lambda first, size: None),
    (16, (1, 2, 4, 8, 16), lambda first, size: size <= 4),
    (12, (1, 3, 4, 6), lambda first, size: first // 4 == (first + size - 1) // 4),  # straddles a 4-GPU node
    (6, (2, 3), lambda first, size: None),
    (4, (4,), lambda first, size: None),
])
def test_signatures_are_exactly_those_of_every_tiling(ranks, sizes, class_of):
    layouts = slot_layouts(ranks, sizes, class_of)
    expected = {signature_of(t, layouts, class_of) for t in all_tilings(ranks, sizes)}
    assert set(layouts.signatures) == expected
    for signature, tiling in layouts.tilings.items():
        assert sum(size for _, size in tiling) == ranks
        assert all(first % size == 0 for first, size in tiling)
        assert [first for first, _ in tiling] == list(itertools.accumulate([0] + [s for _, s in tiling[:-1]]))
        assert signature_of(tiling, layouts, class_of) == signature
    assert layouts.most == tuple(max(s[k] for s in expected) for k in range(len(layouts.classes)))
    assert layouts.fewest_groups == min(sum(s) for s in expected)


def test_powers_of_two_have_the_binary_partitions():
    # 677 aligned tilings of 16 ranks by powers of two, but only the 36 binary partitions of 16 as signatures
    assert sum(1 for _ in all_tilings(16, (1, 2, 4, 8, 16))) == 677
    assert len(slot_layouts(16, (1, 2, 4, 8, 16)).signatures) == 36
    assert len(slot_layouts(64, (1, 2, 4, 8, 16, 32, 64)).signatures) == 1828


def test_no_tiling_and_bad_input():
    assert slot_layouts(6, (4,)).signatures == ()
    with pytest.raises(ValueError, match="ranks"):
        slot_layouts(0, (1,))
    with pytest.raises(ValueError, match="sizes"):
        slot_layouts(4, (0, 1))


def test_too_many_signatures_is_reported(monkeypatch):
    from packplace.solvers.context_parallel.cpsat import layouts

    monkeypatch.setattr(layouts, "MAX_SIGNATURES", 10)
    with pytest.raises(TooManyLayouts):
        layouts.slot_layouts(16, (1, 2, 4, 8, 16))
