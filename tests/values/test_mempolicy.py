"""The policy table (``pynumabind._mempolicy``): a row for every policy, rows that hold together.

The planner, the bind step, buffer placement and the verifier all read a
policy's row; a policy without one would surface only as a KeyError at run
time, so the walk over ``MemoryPolicy`` is here.  ``kernel_request`` is pure
(the kernel probe is passed in), so its fallbacks are tested on any kernel.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional

import pytest

import pynumabind
from pynumabind import _mempolicy
from pynumabind._mempolicy import (
    MODE_NAMES,
    MODE_SINCE,
    MPOL_BIND,
    MPOL_DEFAULT,
    MPOL_INTERLEAVE,
    MPOL_LOCAL,
    MPOL_PREFERRED,
    MPOL_PREFERRED_MANY,
    MPOL_WEIGHTED_INTERLEAVE,
    ONE_NODE_MODES,
    POLICIES,
    PolicyRow,
    row_of_mode,
)
from pynumabind.model import MemoryPolicy

JUDGES = {
    _mempolicy.INSIDE,
    _mempolicy.SPILL,
    _mempolicy.SPREAD,
    _mempolicy.WEIGHTED,
    _mempolicy.ALLOWED,
    None,
}


def test_every_policy_has_a_row_and_every_row_a_policy() -> None:
    missing = [policy.value for policy in MemoryPolicy if policy.value not in POLICIES]
    assert missing == [], f"memory policies without a row in the policy table: {missing}"
    assert set(POLICIES) == {policy.value for policy in MemoryPolicy}
    for name, row in POLICIES.items():
        assert row.policy == name
        assert POLICIES[MemoryPolicy(name)] is row  # a MemoryPolicy is its name


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_each_row_holds_together(name: str) -> None:
    row = POLICIES[name]
    assert row.judge in JUDGES
    assert row.described
    if row.mode is None:  # leaves the policy alone: nothing to set, place or judge
        assert not row.takes_nodes and not row.places and row.judge is None
        return
    assert row.mode in MODE_NAMES
    assert row.takes_nodes or not row.places, "a buffer is placed on nodes"
    assert row.takes_nodes is (row.mode not in _mempolicy.NODELESS_MODES)
    if row.since is not None:  # a newer mode: probed, with a mode every kernel has behind it
        assert row.fallback in MODE_NAMES and row.fallback not in MODE_SINCE
        assert "{nodes}" in row.fallback_said
    else:
        assert row.fallback is None
    assert row.takes_nodes or not row.spreads, "spreading pages needs nodes"
    assert row.spreads or not row.weighted, "weights spread pages over nodes"
    assert (row.judge == _mempolicy.WEIGHTED) is row.weighted, "weights are judged as weights"


def test_the_policies_that_spread_and_the_one_that_takes_weights() -> None:
    spread = [name for name, row in POLICIES.items() if row.spreads]
    weighted = [name for name, row in POLICIES.items() if row.weighted]
    assert spread == ["interleave", "weighted-interleave"]
    assert weighted == ["weighted-interleave"]


def test_a_kernel_mode_names_the_row_it_is_judged_by() -> None:
    for row in POLICIES.values():
        if row.mode is not None:
            assert row_of_mode(row.mode) is row
    assert row_of_mode(MPOL_PREFERRED) is POLICIES["preferred"]  # preferred's fallback
    assert row_of_mode(MPOL_DEFAULT) is None
    assert row_of_mode(99) is None


def test_placing_policies_are_the_rows_that_place() -> None:
    assert _mempolicy.placing_policies() == (
        "bind",
        "preferred",
        "interleave",
        "weighted-interleave",
    )


class Probe:
    """A kernel that answers ``answer`` about every mode, and remembers what it was asked."""

    def __init__(self, answer: Optional[bool]) -> None:
        self.answer = answer
        self.asked: List[int] = []

    def __call__(self, mode: int) -> Optional[bool]:
        self.asked.append(mode)
        return self.answer


def test_modes_every_kernel_has_are_set_as_they_are_without_asking() -> None:
    probe = Probe(False)
    nodes = frozenset({0, 2})
    assert POLICIES["bind"].kernel_request(nodes, probe) == (MPOL_BIND, nodes, None)
    assert POLICIES["interleave"].kernel_request(nodes, probe) == (MPOL_INTERLEAVE, nodes, None)
    assert POLICIES["local"].kernel_request(nodes, probe) == (MPOL_LOCAL, frozenset(), None)
    assert POLICIES["none"].kernel_request(nodes, probe) == (None, frozenset(), None)
    assert probe.asked == []


def test_preferred_on_one_node_is_the_one_node_mode_on_every_kernel() -> None:
    probe = Probe(True)
    assert POLICIES["preferred"].kernel_request(frozenset({1}), probe) == (
        MPOL_PREFERRED,
        frozenset({1}),
        None,
    )
    assert probe.asked == []  # it means the same as MPOL_PREFERRED_MANY there: nothing to probe


def test_preferred_on_several_nodes_needs_preferred_many_and_falls_back_to_the_lowest() -> None:
    nodes = frozenset({1, 3})
    probe = Probe(True)
    assert POLICIES["preferred"].kernel_request(nodes, probe) == (MPOL_PREFERRED_MANY, nodes, None)
    assert probe.asked == [MPOL_PREFERRED_MANY]
    mode, kept, note = POLICIES["preferred"].kernel_request(nodes, Probe(False))
    assert (mode, kept) == (MPOL_PREFERRED, frozenset({1}))
    assert note == (
        "preferred on nodes 1,3 needs MPOL_PREFERRED_MANY and this kernel lacks it "
        "(Linux < 5.15); preferring node 1 only"
    )
    _, _, unknown = POLICIES["preferred"].kernel_request(nodes, Probe(None))
    assert unknown is not None and "it could not be probed; preferring node 1 only" in unknown


def test_weighted_interleave_falls_back_to_interleave_on_every_node() -> None:
    # Weighted interleave (Linux 6.9) falls back to plain interleave over the
    # same nodes, in one note that names the running kernel.
    weighted = POLICIES["weighted-interleave"]
    assert weighted.since == (6, 9) and MPOL_INTERLEAVE not in ONE_NODE_MODES
    assert weighted.judge == _mempolicy.WEIGHTED and weighted.places
    nodes = frozenset({0, 2})
    assert weighted.kernel_request(nodes, Probe(True)) == (MPOL_WEIGHTED_INTERLEAVE, nodes, None)
    mode, kept, note = weighted.kernel_request(nodes, Probe(False), lambda: "6.1.0-31-amd64")
    assert (mode, kept) == (MPOL_INTERLEAVE, nodes)
    assert note == (
        "weighted-interleave on nodes 0,2 needs MPOL_WEIGHTED_INTERLEAVE and this kernel "
        "(Linux 6.1.0-31-amd64) lacks it (Linux < 6.9); interleaving evenly over nodes 0,2 "
        "instead, without weights"
    )
    one = Probe(False)
    assert weighted.kernel_request(frozenset({2}), one)[0] == MPOL_INTERLEAVE
    assert one.asked == [MPOL_WEIGHTED_INTERLEAVE]  # interleave holds many nodes: asked anyway
    assert row_of_mode(MPOL_WEIGHTED_INTERLEAVE) is weighted
    assert row_of_mode(MPOL_INTERLEAVE) is POLICIES["interleave"]  # its own row, not a fallback's


def test_a_row_of_the_same_shape_is_all_a_new_policy_needs() -> None:
    # The table's promise: a policy is a row.  A row built as weighted
    # interleave's is, from the constructor alone, behaves the same.
    again = PolicyRow(
        "weighted-interleave",
        MPOL_WEIGHTED_INTERLEAVE,
        fallback=MPOL_INTERLEAVE,
        fallback_said="interleaving evenly over nodes {nodes} instead, without weights",
        takes_nodes=True,
        places=True,
        judge=_mempolicy.WEIGHTED,
        described="weighted interleave",
        spreads=True,
        weighted=True,
    )
    row = POLICIES["weighted-interleave"]
    nodes = frozenset({1, 3})
    for answer in (True, False, None):
        assert again.kernel_request(nodes, Probe(answer)) == row.kernel_request(
            nodes, Probe(answer)
        )


#: ``MPOL_<mode> = <number>``: a definition of a mode's number.
_MODE_DEFINITION = re.compile(rf"^\s*(?:{'|'.join(MODE_NAMES.values())})\s*=", re.MULTILINE)


def test_the_mode_numbers_are_written_once_in_the_table() -> None:
    package = Path(pynumabind.__file__).parent
    defining = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if _MODE_DEFINITION.search(path.read_text(encoding="utf-8"))
    )
    assert defining == ["_mempolicy.py"]
    assert _MODE_DEFINITION.search("MPOL_BIND = 2\n")  # the scan can find one
