"""Interleave weights as values (``pynumabind._weights``): reading, comparing, judging, runs.

Pure functions, so every rule is tested here on plain values; the layout of a
buffer's runs is property-tested over generated ranges, weights and page sizes.
"""

from __future__ import annotations

from typing import Dict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynumabind import _weights
from pynumabind._weights import (
    MAX_RUNS,
    MIN_HUGE_CYCLES,
    check_weights,
    exact_shares,
    format_weights,
    kernel_difference,
    parse_weights,
    proportional,
    split_problems,
    weighted_runs,
)
from pynumabind.errors import ConfigError, ListParseError

PAGE = 4096
HUGE = 2 << 20

# ------------------------------------------------------------------ reading


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0:3,2:1", {0: 3, 2: 1}),
        ("2:1,0:3", {0: 3, 2: 1}),
        (" 0 : 3 ,\t2:1\n", {0: 3, 2: 1}),
        ("1023:255", {1023: 255}),
        ("5:1", {5: 1}),
        ("007:010", {7: 10}),  # decimal, as every list of the package
    ],
)
def test_weights_text_reads(text: str, expected: Dict[int, int]) -> None:
    assert parse_weights(text) == expected
    assert list(parse_weights(text)) == sorted(expected)  # ascending by node


@pytest.mark.parametrize(
    ("text", "token", "position", "words"),
    [
        ("0:0", "0", 2, "weight out of range (from 1 to 255)"),
        ("0:256", "256", 2, "weight out of range"),
        ("0:3,2", "2", 4, "expected NODE:WEIGHT"),
        ("0:3,,2:1", "", 4, "empty weights item"),
        ("0:3,", "", 4, "empty weights item"),
        ("0:-1", "-1", 2, "expected ASCII digits"),
        ("x:1", "x", 0, "invalid node id"),
        ("1024:1", "1024", 0, "node id out of range (at most 1023)"),
        ("0:3,0:1", "0:1", 4, "node 0 is given twice"),
        ("0:1.5", "1.5", 2, "invalid weight"),
        ("0:\u0663", "\u0663", 2, "expected ASCII digits"),  # an Arabic-Indic 3
        ("0:3 2:1", "3 2:1", 2, "invalid weight"),  # items are separated by commas
        ("", "", 0, "no weights"),
        ("  ", "  ", 0, "no weights"),
    ],
)
def test_bad_weights_text_names_the_token_and_its_position(
    text: str, token: str, position: int, words: str
) -> None:
    with pytest.raises(ListParseError) as caught:
        parse_weights(text)
    assert caught.value.token == token
    assert caught.value.position == position
    assert words in str(caught.value)


def test_weights_mapping_is_checked_entry_by_entry() -> None:
    assert check_weights({2: 1, 0: 3}) == {0: 3, 2: 1}
    assert list(check_weights({2: 1, 0: 3})) == [0, 2]
    assert check_weights("0:3") == {0: 3}

    class Index:  # a numpy integer is one of these
        def __index__(self) -> int:
            return 4

    assert check_weights({Index(): Index()}) == {4: 4}
    for bad, words in [
        ({}, "names no node"),
        ({0: 0}, "node 0's weight 0 is not an integer from 1 to 255"),
        ({0: 256}, "weight 256"),
        ({0: True}, "weight True"),
        ({0: 1.0}, "weight 1.0"),
        ({True: 1}, "True is not a node id"),
        ({-1: 1}, "-1 is not a node id (0 to 1023)"),
        ({"0": 1}, "'0' is not a node id"),
    ]:
        with pytest.raises(ConfigError, match=r"^weights: |^weights names"):
            check_weights(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError) as caught:
            check_weights(bad, "--weights")  # type: ignore[arg-type]
        assert words in str(caught.value) and "--weights" in str(caught.value)
    with pytest.raises(ConfigError, match=r"must map node ids to weights"):
        check_weights([(0, 3)])  # type: ignore[arg-type]


@given(st.dictionaries(st.integers(0, 1023), st.integers(1, 255), min_size=1, max_size=8))
def test_format_and_parse_are_inverse(weights: Dict[int, int]) -> None:
    text = format_weights(weights)
    assert parse_weights(text) == dict(sorted(weights.items()))
    assert check_weights(weights) == parse_weights(text)


# ---------------------------------------------------------------- comparing


def test_proportional_weights_split_alike() -> None:
    assert proportional({0: 3, 2: 1}, {0: 6, 2: 2})
    assert not proportional({0: 3, 2: 1}, {0: 1, 2: 1})
    assert not proportional({0: 1}, {0: 1, 2: 1})  # another node: another split
    assert proportional({5: 7}, {5: 1})  # one node: every weight is all of it


def test_kernel_difference_names_both_and_reads_missing_weights_as_one() -> None:
    assert kernel_difference({0: 3, 2: 1}, {0: 3, 1: 9, 2: 1}) is None  # node 1 not in the policy
    assert kernel_difference({0: 1, 2: 1}, {0: None, 2: None}) is None  # unshown: 1
    assert kernel_difference({0: 3, 2: 1}, {0: 1, 2: 1}) == (
        "requested weights 0:3,2:1, but the kernel's system-wide weights for these nodes "
        "are 0:1,2:1"
    )
    assert kernel_difference({0: 3, 2: 1}, {0: 3}) is None  # node 2 at the kernel's 1
    assert kernel_difference({0: 3, 2: 1}, {0: 1}) is not None


@given(
    st.integers(0, 10**6),
    st.dictionaries(st.integers(0, 64), st.integers(1, 255), min_size=1, max_size=6),
)
def test_exact_shares_sum_up_and_stay_within_one(total: int, weights: Dict[int, int]) -> None:
    shares = exact_shares(total, weights)
    whole = sum(weights.values())
    assert sum(shares.values()) == total
    for node, weight in weights.items():
        assert abs(shares[node] * whole - total * weight) < whole  # within one page


# ------------------------------------------------------------------ judging


def test_a_split_within_five_points_passes_and_one_beyond_fails() -> None:
    weights = {0: 3, 2: 1}
    assert split_problems(weights, {0: 750, 2: 250}) == ()
    assert split_problems(weights, {0: 799, 2: 201}) == ()  # 79.9%: 4.9 points
    assert split_problems(weights, {0: 800, 2: 200}) == ()  # 5 points exactly
    problems = split_problems(weights, {0: 810, 2: 190})
    assert problems == (
        "node 0 holds 810 of the 1000 pages (81.0%), its weight 3 of 4 asks for 75.0% "
        "(tolerance 5 percentage points)",
        "node 2 holds 190 of the 1000 pages (19.0%), its weight 1 of 4 asks for 25.0% "
        "(tolerance 5 percentage points)",
    )
    assert split_problems(weights, {}) == ()  # nothing counted: nothing to judge
    assert split_problems(weights, {5: 10}) == ()  # pages elsewhere are judged elsewhere


def test_the_tolerance_widens_to_one_run_for_a_short_count() -> None:
    # 6 pages over the kernel's runs of 3 and 1 pages can be 5 and 1: a run cut short.
    weights = {0: 3, 2: 1}
    assert split_problems(weights, {0: 5, 2: 1}) != ()
    assert split_problems(weights, {0: 5, 2: 1}, {0: 3, 2: 1}) == ()
    problems = split_problems(weights, {0: 16}, {0: 3, 2: 1})
    assert len(problems) == 2 and problems[1].endswith("or one run, 1 page)")


# ----------------------------------------------------------------- layout


def _check_layout(start: int, pages: int, weights: Dict[int, int], huge: int) -> None:
    length = pages * PAGE
    layout = weighted_runs(start, length, weights, page=PAGE, huge=huge)
    runs = layout.runs
    # The runs tile the range, in order, each on one node of the weights.
    assert runs[0].start == start
    assert all(a.start + a.length == b.start for a, b in zip(runs, runs[1:]))
    assert runs[-1].start + runs[-1].length == start + length
    assert all(r.length > 0 and r.length % PAGE == 0 and r.node in weights for r in runs)
    assert all(a.node != b.node for a, b in zip(runs, runs[1:]))  # merged when adjacent
    # Each node gets exactly its share of the pages.
    assert layout.pages(PAGE) == {n: c for n, c in exact_shares(pages, weights).items() if c}
    # Bounded: each run is a mapping of its own.
    assert len(runs) <= MAX_RUNS + 2 * len(weights)
    # No run longer than its node's run (but where one node alone is left).
    run_pages = layout.run_pages(weights)
    for run in runs[:-1]:
        assert run.length // PAGE <= run_pages[run.node]
    # Huge-page runs: boundaries on huge pages, but for the last cycle's.
    if layout.grain_pages > 1:
        assert layout.grain_pages * PAGE == huge
        assert layout.pages_per_point % layout.grain_pages == 0
        off = [r.start for r in runs[1:] if r.start % huge]
        assert len(off) <= 2 * len(weights)


@settings(max_examples=300, deadline=None)
@given(
    start_page=st.integers(0, 1 << 20),
    pages=st.integers(1, 1 << 16),
    weights=st.dictionaries(st.integers(0, 7), st.integers(1, 255), min_size=1, max_size=4),
    huge=st.sampled_from([0, PAGE, HUGE, 64 * PAGE]),
)
def test_runs_tile_the_range_and_give_each_node_its_share(
    start_page: int, pages: int, weights: Dict[int, int], huge: int
) -> None:
    _check_layout(start_page * PAGE, pages, weights, huge)


def test_a_64_mib_buffer_at_3_to_1_is_runs_of_whole_huge_pages() -> None:
    pages = (64 << 20) // PAGE
    aligned = weighted_runs(1 << 30, 64 << 20, {0: 3, 2: 1}, page=PAGE, huge=HUGE)
    assert aligned.grain_pages == HUGE // PAGE and aligned.pages_per_point == HUGE // PAGE
    assert [(r.length // HUGE, r.node) for r in aligned.runs] == [(3, 0), (1, 2)] * 8
    assert aligned.pages(PAGE) == {0: pages * 3 // 4, 2: pages // 4}
    # Not aligned to a huge page: the first run is cut short to reach one.
    shifted = weighted_runs((1 << 30) + 5 * PAGE, 64 << 20, {0: 3, 2: 1}, page=PAGE, huge=HUGE)
    assert shifted.runs[0].length == 3 * HUGE - 5 * PAGE
    assert all(r.start % HUGE == 0 for r in shifted.runs[1:-2])
    assert shifted.pages(PAGE) == {0: pages * 3 // 4, 2: pages // 4}
    _check_layout((1 << 30) + 5 * PAGE, pages, {0: 3, 2: 1}, HUGE)


def test_small_buffers_and_no_huge_pages_use_page_runs_within_the_run_bound() -> None:
    small = weighted_runs(0, 16 * PAGE, {0: 3, 2: 1}, page=PAGE, huge=HUGE)
    assert small.grain_pages == 1 and small.pages_per_point == 1
    assert [(r.length // PAGE, r.node) for r in small.runs] == [(3, 0), (1, 2)] * 4
    # Below MIN_HUGE_CYCLES cycles of huge runs, pages (bounded by MAX_RUNS).
    below = (HUGE // PAGE) * 4 * MIN_HUGE_CYCLES - 1
    assert weighted_runs(0, below * PAGE, {0: 3, 2: 1}, page=PAGE, huge=HUGE).grain_pages == 1
    big = weighted_runs(0, 1 << 30, {0: 1, 1: 1}, page=PAGE, huge=0)
    assert len(big.runs) == MAX_RUNS and big.pages_per_point == 1024
    with pytest.raises(ValueError):
        weighted_runs(1, PAGE, {0: 1}, page=PAGE)
    with pytest.raises(ValueError):
        weighted_runs(0, 0, {0: 1}, page=PAGE)


def test_the_module_states_its_tolerance_and_bounds() -> None:
    doc = _weights.__doc__ or ""
    assert "TOLERANCE_POINTS" in doc and "MAX_RUNS" in doc and "MIN_HUGE_CYCLES" in doc
    assert _weights.TOLERANCE_POINTS == 5
