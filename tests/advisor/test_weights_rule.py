"""Weighted interleave in the advise rule: weights from bandwidth, the sets, the verdict, HMAT.

Pure, as the rule is.  Recorded matrices use the figures of the QEMU guest
the tests boot with an HMAT (node 2, memory only, a quarter of the local
bandwidth by the firmware's claim, the same by TCG's measurement) and of a
one-socket machine with a CXL expander at a quarter of its DRAM's
bandwidth; generated ones check the properties of the weights (range,
reduced, proportional within the stated tolerance, the smallest that are)
and of the verdict (weighted interleave is recommended only where it was
measured to beat local memory by the rule's own test).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Optional, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynumabind._weights import (
    BANDWIDTH_POINTS,
    MAX_WEIGHT,
    MIN_WEIGHT,
    from_bandwidth,
)
from pynumabind.advisor.rule import decide, hmat_disagreements, interleave_cells
from pynumabind.model import MemoryPolicy
from pynumabind.records.values import Firmware, HmatEntry, InterleaveCell, MemoryMatrix

from ..support.advice_builders import matrix, spread

# ------------------------------------------------------------ weights from bandwidth


@pytest.mark.parametrize(
    "bandwidth, weights",
    [
        ({0: 100.0, 2: 100.0}, {0: 1, 2: 1}),  # equal: the guest under TCG
        ({0: 20480.0, 2: 5120.0}, {0: 4, 2: 1}),  # the guest's HMAT figures
        ({0: 3.1, 2: 1.0}, {0: 3, 2: 1}),  # 75.0% for 75.6%: within the tolerance
        ({0: 250.0, 1: 64.0}, {0: 4, 1: 1}),  # 79.6% -> 80%
        ({0: 100.0, 2: 0.01}, {0: 99, 2: 1}),  # a node never gets 0
        ({0: 13.7, 1: 12.1, 2: 3.3}, {0: 8, 1: 7, 2: 2}),
    ],
)
def test_weights_from_recorded_bandwidths(
    bandwidth: Dict[int, float], weights: Dict[int, int]
) -> None:
    assert from_bandwidth(bandwidth) == weights


@pytest.mark.parametrize("bad", [{}, {0: 0.0}, {0: 1.0, 1: -1.0}, {0: math.inf}, {0: math.nan}])
def test_weights_need_positive_finite_bandwidths(bad: Dict[int, float]) -> None:
    with pytest.raises(ValueError):
        from_bandwidth(bad)


bandwidths = st.dictionaries(
    st.integers(min_value=0, max_value=1023),
    st.floats(min_value=0.01, max_value=1e4, allow_nan=False),
    min_size=1,
    max_size=8,
)


def _off(weights: Dict[int, int], bandwidth: Dict[int, float]) -> float:
    """The largest gap, in percentage points, between a node's weight share and bandwidth share."""
    whole, total = sum(weights.values()), sum(bandwidth.values())
    return max(abs(weights[n] / whole - bandwidth[n] / total) * 100 for n in bandwidth)


def _at(top: int, bandwidth: Dict[int, float]) -> Dict[int, int]:
    """The weights at one ``top``, as the module docstring states the rounding (halves up)."""
    fastest = max(bandwidth.values())
    return {
        n: min(MAX_WEIGHT, max(MIN_WEIGHT, math.floor(top * b / fastest + 0.5)))
        for n, b in bandwidth.items()
    }


@given(bandwidths)
def test_weights_are_in_range_reduced_and_name_every_node(bandwidth: Dict[int, float]) -> None:
    weights = from_bandwidth(bandwidth)
    assert list(weights) == sorted(bandwidth)
    assert all(MIN_WEIGHT <= w <= MAX_WEIGHT for w in weights.values())
    divisor = 0
    for w in weights.values():
        divisor = math.gcd(divisor, w)
    assert divisor == 1
    assert weights[max(bandwidth, key=lambda n: (bandwidth[n], -n))] == max(weights.values())


@given(bandwidths)
def test_weights_are_the_smallest_within_the_tolerance(bandwidth: Dict[int, float]) -> None:
    """Within BANDWIDTH_POINTS of the bandwidth shares at the first top that is; else top 255."""
    weights = from_bandwidth(bandwidth)
    fits = [
        top for top in range(1, 256) if _off(_at(top, bandwidth), bandwidth) <= BANDWIDTH_POINTS
    ]
    if fits:
        assert _off(weights, bandwidth) <= BANDWIDTH_POINTS
        expected = _at(fits[0], bandwidth)
    else:
        expected = _at(255, bandwidth)
    divisor = 0
    for w in expected.values():
        divisor = math.gcd(divisor, w)
    assert weights == {n: w // divisor for n, w in sorted(expected.items())}


@given(bandwidths, st.sampled_from([0.25, 0.5, 2.0, 4.0, 1024.0]))
def test_scaling_every_bandwidth_keeps_the_weights(
    bandwidth: Dict[int, float], factor: float
) -> None:
    assert from_bandwidth({n: b * factor for n, b in bandwidth.items()}) == from_bandwidth(
        bandwidth
    )


# ------------------------------------------------------------------------ the sets


def one_socket_cxl(local: float, cxl: float) -> MemoryMatrix:
    """CPU node 0 with its DRAM (node 0) and a CXL expander (node 1, memory only)."""
    full = matrix([[local, cxl]])
    return full


def guest(rel: float = 0.02) -> MemoryMatrix:
    """The HMAT guest under TCG: CPU nodes 0-1 x memory nodes 0-2, every node alike."""
    return matrix([[10.0, 10.0, 10.0], [10.0, 10.0, 10.0]], rel=rel)


def test_one_socket_with_cxl_measures_the_set_weighted_by_bandwidth() -> None:
    (cell,) = interleave_cells(one_socket_cxl(100.0, 25.0), memory_only={1})
    assert (cell.cpu_node, cell.local, dict(cell.weights)) == (0, 0, {0: 4, 1: 1})
    assert cell.predicted == pytest.approx(1.25)
    assert cell.skipped is None and cell.bandwidth is None  # for advise to measure


def test_a_set_that_cannot_gain_the_min_effect_is_not_measured_and_says_why() -> None:
    (cell,) = interleave_cells(one_socket_cxl(100.0, 5.0), memory_only={1})
    assert cell.skipped is not None
    assert "1.05x the local node's" in cell.skipped and "1.10x" in cell.skipped
    # Still given: what the bandwidths say (17:1 is 5.6% for 4.8%, the first top within 1 point).
    assert dict(cell.weights) == {0: 17, 1: 1}


def test_the_guest_gives_each_cpu_node_its_own_memory_and_the_memory_only_node() -> None:
    cells = interleave_cells(guest(), memory_only={2})
    assert [(c.cpu_node, dict(c.weights)) for c in cells] == [(0, {0: 1, 2: 1}), (1, {1: 1, 2: 1})]
    # Every memory node has a weight in some CPU node's set.
    assert set().union(*(c.weights for c in cells)) == {0, 1, 2}


def test_no_memory_only_node_no_set() -> None:
    assert interleave_cells(matrix([[100.0, 50.0], [50.0, 100.0]]), memory_only=()) == ()
    assert interleave_cells(matrix([[12.0]]), memory_only=()) == ()


def test_a_failed_cell_leaves_its_node_out_of_the_set() -> None:
    (cell,) = interleave_cells(matrix([[100.0, None, 30.0]]), memory_only={1, 2})
    assert set(cell.weights) == {0, 2}


# ------------------------------------------------------------------------- verdict


def measured(
    memory: MemoryMatrix,
    memory_only: Sequence[int],
    weighted: Sequence[float],
    local: Optional[Sequence[float]] = None,
    rel: float = 0.02,
) -> MemoryMatrix:
    """``memory`` with each set measured at ``weighted[i]`` (local taken in turn: ``local[i]``)."""
    cells = interleave_cells(memory, memory_only)
    done: List[InterleaveCell] = []
    for i, cell in enumerate(cells):
        done.append(
            replace(
                cell,
                bandwidth=spread(weighted[i], rel),
                local_bandwidth=None if local is None else spread(local[i], rel),
                threads=8,
            )
        )
    return replace(memory, interleave=tuple(done))


def test_weighted_interleave_measured_faster_is_recommended_with_its_weights() -> None:
    memory = measured(one_socket_cxl(100.0, 25.0), [1], weighted=[120.0], local=[100.0])
    rec = decide(memory)
    assert (rec.bind, rec.mode, rec.policy) == (True, "node", "weighted-interleave")
    assert dict(rec.weights or {}) == {0: 4, 1: 1}
    assert "weights 0:4,1:1" in rec.verdict
    assert any("weighted interleave 0:4,1:1 1.20x node 0 (local)" in r for r in rec.reasons)
    options = rec.options()
    assert options.policy is MemoryPolicy.WEIGHTED_INTERLEAVE
    assert dict(options.weights or {}) == {0: 4, 1: 1}


def test_weighted_interleave_predicted_but_not_measured_faster_is_not_recommended() -> None:
    """The prediction only decides what to measure: TCG's equal nodes predict 2x, measure 1x."""
    memory = measured(guest(), [2], weighted=[10.1, 9.9], local=[10.0, 10.0], rel=0.05)
    rec = decide(memory)
    assert rec.policy != "weighted-interleave" and rec.weights is None
    interleaved = [c for c in rec.comparisons if c.better.startswith("weighted interleave")]
    assert len(interleaved) == 2 and not any(c.measurable for c in interleaved)
    assert all(c.text() in rec.reasons for c in interleaved)
    # The weights stay in the advice, per CPU node, for every memory node.
    assert {n for c in memory.interleave for n in c.weights} == {0, 1, 2}


def test_cpu_nodes_that_gain_with_different_sets_get_no_one_policy() -> None:
    memory = measured(guest(), [2], weighted=[15.0, 15.0], local=[10.0, 10.0])
    rec = decide(memory)
    assert (rec.bind, rec.policy, rec.weights) == (False, "none", None)
    assert "weighted interleave does, from CPU nodes 0, 1" in rec.verdict
    assert any("weights='0:1,2:1'" in r and "CPU node 0" in r for r in rec.reasons)
    assert any("weights='1:1,2:1'" in r and "CPU node 1" in r for r in rec.reasons)


def test_without_a_local_figure_taken_in_turn_the_matrix_cell_is_the_local_one() -> None:
    memory = measured(one_socket_cxl(100.0, 25.0), [1], weighted=[130.0], local=None)
    assert decide(memory).policy == "weighted-interleave"
    memory = measured(one_socket_cxl(100.0, 25.0), [1], weighted=[101.0], local=None)
    rec = decide(memory)  # local 4x the CXL node: bind, local memory preferred
    assert (rec.policy, rec.weights) == ("preferred", None)


@given(
    st.floats(min_value=1.0, max_value=1e3),
    st.floats(min_value=0.05, max_value=1.0),
    st.floats(min_value=0.5, max_value=3.0),
    st.floats(min_value=0.0, max_value=0.3),
)
def test_weighted_interleave_only_where_measured_to_beat_local(
    local: float, cxl_share: float, gain: float, rel: float
) -> None:
    memory = measured(
        one_socket_cxl(local, local * cxl_share), [1], [local * gain], [local], rel=rel
    )
    rec = decide(memory)
    (comparison,) = [c for c in rec.comparisons if c.better.startswith("weighted interleave")]
    assert (rec.policy == "weighted-interleave") is comparison.measurable
    if comparison.measurable:
        assert rec.bind and rec.weights == memory.interleave[0].weights
        assert gain >= 1.1 * (1 - rel) / (1 + rel)
    else:
        assert rec.weights is None


# ------------------------------------------------------------------------ HMAT


def guest_hmat() -> Firmware:
    """The HMAT the 6.12 guest's kernel shows (access0 = access1 here: every initiator a CPU)."""
    entries = []
    for access in (0, 1):
        entries += [
            HmatEntry(0, access, (0,), 20480, 20480, 100, 100),
            HmatEntry(1, access, (1,), 20480, 20480, 100, 100),
            HmatEntry(2, access, (1,), 5120, 5120, 300, 300),
        ]
    distances = ((10, 21, 40), (21, 10, 30), (40, 30, 10))
    return Firmware((0, 1, 2), distances, tuple(entries))


def test_hmat_quarter_bandwidth_against_an_equal_measurement_is_noted_with_both_figures() -> None:
    (note,) = hmat_disagreements(guest(), guest_hmat())
    assert note.startswith("HMAT and the measurement disagree from CPU node 1")
    assert "node 2 0.25x the read bandwidth of node 1 (local) (5120 vs 20480 MB/s)" in note
    assert "measured 1.00x (10 vs 10 GB/s" in note


def test_hmat_that_agrees_with_the_measurement_is_not_noted() -> None:
    agreeing = matrix([[10.0, 10.0, 2.5], [10.0, 10.0, 2.5]])
    assert hmat_disagreements(agreeing, guest_hmat()) == ()
    assert hmat_disagreements(guest(), Firmware((0, 1, 2), ())) == ()
    assert hmat_disagreements(None, guest_hmat()) == ()


@given(st.floats(min_value=0.05, max_value=4.0), st.floats(min_value=0.0, max_value=0.3))
def test_a_disagreement_is_noted_only_outside_the_widened_noise_range(
    measured_ratio: float, rel: float
) -> None:
    memory = matrix([[10.0, 10.0, 10.0], [10.0, 10.0, 10.0 * measured_ratio]], rel=rel)
    notes = hmat_disagreements(memory, guest_hmat())
    local, other = memory.bandwidth(1, 1), memory.bandwidth(1, 2)
    assert local is not None and other is not None
    low, high = other.min / local.max, other.max / local.min
    assert bool(notes) is not (low / 1.1 <= 0.25 <= high * 1.1)
