"""The advise decision rule (pynumabind.advisor.rule), on recorded and generated matrices.

Recorded matrices are built from published figures (the numbers the issue
cites); where a source gives one direction or one metric only, the
comment says what was filled in and how.  Generated matrices check the
rule's properties: identical cells never bind, scaling every figure
changes nothing, a clear local advantage always binds.
"""

from __future__ import annotations

from typing import List

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynumabind.advisor.rule import NO_DIFFERENCE, compare, decide
from pynumabind.records.values import Spread

from ..support.advice_builders import gpu, matrix, spread

# ------------------------------------------------------------- recorded


def test_gb200_local_copies_three_times_cross_node_bind_each_gpu_to_its_node() -> None:
    # Pinned D2H ~330 GB/s from the GPU's own Grace vs ~115 GB/s across the
    # C2C link (the published figures).  H2D is taken the same (the
    # source gives D2H); memory bandwidth is set equal on both nodes so that
    # the copies alone decide.
    memory = matrix([[400, 400], [400, 400]])
    gpus = [gpu(0, 0, [330, 115], [330, 115]), gpu(1, 1, [115, 330], [115, 330])]
    rec = decide(memory, gpus)
    assert rec.bind is True
    assert (rec.mode, rec.policy) == ("node", "preferred")
    assert [(g.gpu, g.bind, g.node) for g in rec.per_gpu] == [(0, True, 0), (1, True, 1)]
    text = " ".join(rec.reasons)
    assert "2.87x" in text  # 330 / 115
    assert "memory bandwidth is the same from every node" in text


def test_mi210_copies_equal_from_every_node_no_binding() -> None:
    # An MI210 behind PCIe copies ~28 GB/s whichever node the buffer is on.
    memory = matrix([[100, 98], [99, 100]])
    gpus = [gpu(0, 0, [28.0, 27.8], [28.1, 28.0]), gpu(1, 1, [27.9, 28.0], [28.0, 28.2])]
    rec = decide(memory, gpus)
    assert rec.bind is False
    assert rec.verdict == NO_DIFFERENCE
    assert (rec.mode, rec.policy) == ("none", "none")
    assert all(not g.bind and g.node is None for g in rec.per_gpu)
    assert any("same speed from every node" in r for r in rec.reasons)


def test_dual_socket_remote_half_of_local_binds_memory() -> None:
    rec = decide(matrix([[100, 50], [50, 100]]))
    assert rec.bind is True
    assert (rec.mode, rec.policy) == ("node", "preferred")
    assert rec.per_gpu == ()
    assert any("2.00x" in r and "(local)" in r for r in rec.reasons)
    assert all(c.measurable for c in rec.comparisons)


def test_remote_memory_faster_than_local_is_called_out() -> None:
    rec = decide(matrix([[50, 100], [50, 100]]))
    assert rec.bind is True
    assert any("beats the node's own memory" in r and "CPU node 0" in r for r in rec.reasons)
    assert not any("CPU node 1" in r and "beats" in r for r in rec.reasons)


def test_one_node_nothing_to_compare() -> None:
    rec = decide(matrix([[12.0]]))
    assert rec.bind is False
    assert rec.basis == "nothing to compare"
    assert rec.verdict.startswith(NO_DIFFERENCE)
    assert "nothing remote to compare" in rec.verdict


def test_difference_within_noise_is_no_difference() -> None:
    # 15% apart in the medians, but samples spread +-30% overlap.
    rec = decide(matrix([[100, 85], [85, 100]], rel=0.3))
    assert rec.bind is False
    assert rec.verdict == NO_DIFFERENCE
    assert rec.comparisons and not any(c.measurable for c in rec.comparisons)
    assert all("within noise" in r for r in rec.reasons)


def test_difference_beyond_noise_but_below_min_effect_is_no_difference() -> None:
    rec = decide(matrix([[100, 95], [95, 100]], rel=0.005))
    assert rec.comparisons[0].low > 1.0  # beyond the noise...
    assert rec.bind is False  # ...but 5% < the 10% minimum effect
    assert decide(matrix([[100, 95], [95, 100]], rel=0.005), min_effect=0.03).bind is True


def test_gpu_fastest_from_another_node_than_it_reports_says_so() -> None:
    rec = decide(None, [gpu(0, 0, [10, 25], [10, 25])])
    assert rec.bind is True
    (advice,) = rec.per_gpu
    assert advice.node == 1
    assert any("reports NUMA node 0" in r and "override" in r for r in advice.reasons)


def test_every_measurement_failed_means_no_recommendation() -> None:
    rec = decide(matrix([[None, None], [None, None]]))
    assert rec.bind is False
    assert rec.basis == "no measurements"
    assert NO_DIFFERENCE not in rec.verdict


def test_compare_ratio_and_noise_range() -> None:
    better = Spread(3, 20.0, 19.0, 21.0, 13, 22)
    c = compare("x", ("a", better), ("b", Spread(5, 10.0, 9.0, 11.0, 8, 12)))
    assert (c.ratio, c.n) == (2.0, 3)
    assert c.low == pytest.approx(13 / 12)
    assert c.high == pytest.approx(22 / 8)
    assert c.measurable
    # The same medians, but one slow sample of the better below the worse's best: noise.
    slow = compare("x", ("a", Spread(3, 20.0, 19.0, 21.0, 11, 22)), ("b", better.scaled(0.5)))
    assert slow.ratio == 2.0 and not slow.measurable
    zero = compare("x", ("a", spread(1.0)), ("b", Spread(1, 0.0, 0.0, 0.0, 0.0, 0.0)))
    assert not zero.measurable


# ----------------------------------------------------------- properties

sizes = st.integers(min_value=1, max_value=4)
values = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False)


@st.composite
def grids(draw: st.DrawFn) -> List[List[float]]:
    rows, cols = draw(sizes), draw(sizes)
    return [[draw(values) for _ in range(cols)] for _ in range(rows)]


@given(sizes, sizes, values, st.floats(min_value=0.0, max_value=0.5))
def test_identical_cells_never_bind(rows: int, cols: int, value: float, rel: float) -> None:
    grid = [[value] * cols for _ in range(rows)]
    copies = [gpu(0, 0, [value] * rows, [value] * rows, rel)]
    rec = decide(matrix(grid, rel), copies)
    assert rec.bind is False
    assert NO_DIFFERENCE in rec.verdict


@given(grids(), st.floats(min_value=0.01, max_value=100.0), st.floats(min_value=0.0, max_value=0.3))
def test_scaling_every_figure_changes_nothing(
    grid: List[List[float]], k: float, rel: float
) -> None:
    copies = [gpu(0, None, grid[0], grid[-1], rel)] if len(grid[0]) > 1 else []
    scaled = [[v * k for v in row] for row in grid]
    scaled_copies = [gpu(0, None, scaled[0], scaled[-1], rel)] if copies else []
    a = decide(matrix(grid, rel), copies)
    b = decide(matrix(scaled, rel), scaled_copies)
    assert (a.bind, a.basis) == (b.bind, b.basis)
    assert [(g.bind, g.node) for g in a.per_gpu] == [(g.bind, g.node) for g in b.per_gpu]


@given(sizes.filter(lambda n: n >= 2), values, st.floats(min_value=1.5, max_value=10.0))
def test_clear_local_advantage_always_binds(nodes: int, local: float, factor: float) -> None:
    grid = [[local if i == j else local / factor for j in range(nodes)] for i in range(nodes)]
    rec = decide(matrix(grid, rel=0.05))
    assert rec.bind is True
    assert all(c.better.endswith("(local)") for c in rec.comparisons)


@given(grids(), st.floats(min_value=0.0, max_value=0.5))
def test_verdict_and_reasons_always_say_why(grid: List[List[float]], rel: float) -> None:
    rec = decide(matrix(grid, rel))
    assert rec.reasons
    assert rec.bind == any(c.measurable for c in rec.comparisons)
    if not rec.bind:
        assert NO_DIFFERENCE in rec.verdict
        assert (rec.mode, rec.policy) == ("none", "none")
