"""The planner's set algorithms on plain ints: no Topology involved."""

from __future__ import annotations

from typing import AbstractSet, List

from hypothesis import given
from hypothesis import strategies as st

from pynumabind.planner._sets import (
    balanced,
    by_performance,
    core_complex,
    core_perf,
    cores,
    dhondt,
    exclusive,
    fastest,
    l3_groups,
    union,
)


def smt2(cpu: int) -> AbstractSet[int]:
    """Two threads per core: CPU c and c + 8 (as Linux numbers them on x86)."""
    return {cpu % 8, cpu % 8 + 8}


def fs(*ids: int) -> frozenset[int]:
    return frozenset(ids)


def test_cores_keep_siblings_together_in_lowest_cpu_order() -> None:
    assert cores({0, 1, 8, 9, 2}, smt2) == [fs(0, 8), fs(1, 9), fs(2)]


def test_cores_without_sibling_information_are_single_cpus() -> None:
    assert cores({3, 1}, lambda cpu: set()) == [fs(1), fs(3)]


def test_balanced_sizes_differ_by_at_most_one_larger_first() -> None:
    assert balanced(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert balanced(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]


@given(st.integers(0, 500), st.integers(1, 50))
def test_balanced_covers_everything_contiguously(count: int, parts: int) -> None:
    ranges = balanced(count, parts)
    assert len(ranges) == parts and ranges[0][0] == 0 and ranges[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [b - a for a, b in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_exclusive_gives_whole_cores_when_there_are_enough() -> None:
    slices, note, shared = exclusive([fs(0, 8), fs(1, 9), fs(2, 10)], 2, "node 0")
    assert slices == [fs(0, 8, 1, 9), fs(2, 10)] and not shared
    assert note.startswith("node 0: 3 allowed cores split among 2 ranks, 2/1 whole cores each")


def test_one_rank_gets_everything_and_the_note_says_so_in_its_own_words() -> None:
    perf = {0: 10, 8: 10, 1: 5, 9: 5}.__getitem__  # unequal: the performance branch for >1
    slices, note, shared = exclusive([fs(0, 8), fs(1, 9)], 1, "node 0", perf)
    assert slices == [fs(0, 8, 1, 9)] and not shared
    assert note == "node 0: the one rank gets every allowed core (2)"
    groups = [[fs(0), fs(1)], [fs(2), fs(3)]]
    slices, notes, shared = core_complex([fs(0), fs(1), fs(2), fs(3)], groups, 1, "node 0")
    assert slices == [fs(0, 1, 2, 3)] and not shared
    assert notes == ["node 0: the one rank gets every L3 group (2: 0-1, 2-3)"]


def test_exclusive_splits_smt_threads_then_shares_cores() -> None:
    slices, _, shared = exclusive([fs(0, 8), fs(1, 9)], 3, "x")
    assert slices == [fs(0, 8), fs(1), fs(9)] and shared
    slices, note, shared = exclusive([fs(0)], 3, "x")
    assert slices == [fs(0)] * 3 and shared and "ranks share cores" in note


def test_l3_groups_in_core_order_and_unknown_l3() -> None:
    l3 = {0: fs(0, 1), 1: fs(0, 1), 2: fs(2, 3), 3: fs(2, 3)}
    assert l3_groups([fs(0), fs(1), fs(2), fs(3)], l3.__getitem__) == [
        [fs(0), fs(1)],
        [fs(2), fs(3)],
    ]
    assert l3_groups([fs(0), fs(4)], lambda cpu: l3.get(cpu, frozenset())) is None


def test_dhondt_is_proportional_with_ties_to_the_first_group() -> None:
    assert dhondt([8, 8, 4], 5) == [2, 2, 1]
    assert dhondt([3, 3], 1) == [1, 0]
    assert dhondt([1], 0) == [0]


@given(st.lists(st.integers(1, 64), min_size=1, max_size=8), st.integers(0, 100))
def test_dhondt_gives_every_seat(weights: List[int], seats: int) -> None:
    assert sum(dhondt(weights, seats)) == seats


def test_core_complex_whole_groups_when_enough() -> None:
    groups = [[fs(0), fs(1)], [fs(2), fs(3)], [fs(4), fs(5)]]
    slices, notes, shared = core_complex(union_cores(groups), groups, 2, "n")
    assert slices == [fs(0, 1, 2, 3), fs(4, 5)] and not shared
    assert notes == ["n: 3 L3 groups (0-1, 2-3, 4-5) split among 2 ranks, 2/1 whole groups each"]


def test_core_complex_seats_ranks_by_core_count_then_slices_within_groups() -> None:
    groups = [[fs(0), fs(1), fs(2), fs(3)], [fs(4), fs(5)]]
    slices, notes, shared = core_complex(union_cores(groups), groups, 3, "n")
    assert slices == [fs(0, 1), fs(2, 3), fs(4, 5)] and not shared
    assert "ranks per group 2/1 (by core count)" in notes[0]
    assert notes[1].startswith("n, L3 group 0: 4 allowed cores split among 2 ranks")


def test_core_complex_without_groups_falls_back_to_exclusive() -> None:
    slices, notes, _ = core_complex([fs(0), fs(1)], None, 2, "n")
    assert slices == [fs(0), fs(1)]
    assert notes[0] == "n: L3 cache groups unknown; falling back to exclusive"


@given(st.integers(1, 40), st.integers(1, 40))
def test_exclusive_slices_are_disjoint_when_cores_suffice(core_count: int, ranks: int) -> None:
    core_list = [fs(c, c + 100) for c in range(core_count)]
    slices, _, shared = exclusive(core_list, ranks, "n")
    assert len(slices) == ranks
    if core_count >= ranks:
        assert not shared and union(slices) == union(core_list)
        assert sum(len(s) for s in slices) == len(union(core_list))


def union_cores(groups: List[List[frozenset[int]]]) -> List[frozenset[int]]:
    return [core for group in groups for core in group]


# ------------------------------------------- priority cores


@st.composite
def cores_with_perf(draw: st.DrawFn) -> tuple:
    """Whole cores (1 or 2 threads) with a highest_perf each, and a rank count."""
    count = draw(st.integers(1, 40))
    smt = draw(st.booleans())
    core_list = [fs(c, c + 100) if smt else fs(c) for c in range(count)]
    perfs = draw(st.lists(st.sampled_from([30, 39, 46]), min_size=count, max_size=count))
    ranks = draw(st.integers(1, count))
    return core_list, perfs, ranks


@given(cores_with_perf())
def test_ranks_take_the_highest_performance_cores_first_in_turn(drawn: tuple) -> None:
    core_list, perfs, ranks = drawn
    slices = by_performance(core_list, perfs, ranks)
    # every core given out, once, whole; sizes balanced's (larger first)
    assert sorted(map(min, (c for s in slices for c in core_list if c <= s))) == sorted(
        map(min, core_list)
    )
    assert sum(map(len, slices)) == len(union(core_list))
    per_core = len(core_list[0])
    sizes = [len(s) // per_core for s in slices]
    assert sizes == [b - a for a, b in balanced(len(core_list), ranks)]
    # at or above any performance level, every rank holds its share within one core
    perf_of_core = {min(c): p for c, p in zip(core_list, perfs)}
    for level in set(perfs):
        held = [
            sum(1 for cpu in s if cpu in perf_of_core and perf_of_core[cpu] >= level)
            for s in slices
        ]
        assert max(held) - min(held) <= 1
    # a rank never holds a slower core while a faster one went to a rank with more cores
    best = [max(perf_of_core[c] for c in s if c in perf_of_core) for s in slices]
    assert best == sorted(best, reverse=True)


@given(cores_with_perf())
def test_exclusive_with_performance_changes_nothing_when_cores_are_equal(drawn: tuple) -> None:
    core_list, _, ranks = drawn
    equal = exclusive(core_list, ranks, "node 0", lambda cpu: 39)
    assert equal == exclusive(core_list, ranks, "node 0")
    unknown = exclusive(core_list, ranks, "node 0", lambda cpu: None)
    assert unknown == exclusive(core_list, ranks, "node 0")


def test_exclusive_deals_priority_cores_out_and_says_so() -> None:
    core_list = [fs(c) for c in range(8)]
    perf = {0: 39, 1: 46, 2: 39, 3: 39, 4: 39, 5: 46, 6: 39, 7: 39}
    slices, note, shared = exclusive(core_list, 2, "node 0", perf.get)
    assert slices == [fs(1, 0, 3, 6), fs(5, 2, 4, 7)] and not shared
    assert note == (
        "node 0: 8 allowed cores differ in highest performance (CPPC highest_perf 46 (2 "
        "cores), 39 (6 cores)): the 2 ranks take the highest-performance cores first, "
        "in turn, 4 whole cores each"
    )


def test_core_perf_needs_every_core_known_and_a_difference() -> None:
    core_list = [fs(0, 8), fs(1, 9)]
    assert core_perf(core_list, {0: 46, 8: 46, 1: 39, 9: 39}.get) == [46, 39]
    assert core_perf(core_list, {0: 46, 8: 46, 1: 39}.get) is None  # 9 unknown
    assert core_perf(core_list, lambda cpu: 39) is None
    assert core_perf(core_list, None) is None
    assert fastest(core_list, [46, 39]) == [fs(0, 8)]


def test_core_complex_within_groups_takes_priority_cores_first() -> None:
    core_list = [fs(c) for c in range(4)]
    groups = [core_list]  # one L3 group, two ranks: exclusive within it
    perf = {0: 39, 1: 39, 2: 46, 3: 46}
    slices, notes, _ = core_complex(core_list, groups, 2, "node 0", perf.get)
    assert slices == [fs(2, 0), fs(3, 1)]
    assert "take the highest-performance cores first" in notes[1]
