"""The one verifier (``pynumabind.binding._verify``): its pure rules, and its two users agreeing.

``Binding.verify()`` and ``pynumabind check`` must judge by the same rules;
the end-to-end tests here put both in front of a case where a second rule
set would disagree (pages spilled off a nearly full preferred node).
"""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import pages as _pages
from pynumabind.binding import _verify

from ..support.childproc import run_in_child
from . import child_verify

BIND, PREFERRED = _libnuma.MPOL_BIND, _libnuma.MPOL_PREFERRED
INTERLEAVE, LOCAL = _libnuma.MPOL_INTERLEAVE, _libnuma.MPOL_LOCAL
SPILL = _verify.PREFERRED_SPILL_BYTES


def _judge(mode, nodes, found, free=None, allowed=None):
    return _verify.placement_problems(
        mode, frozenset(nodes), tuple(found), free_bytes=free, allowed=allowed
    )


def test_pages_inside_the_nodes_are_fine_for_every_policy() -> None:
    for mode in (BIND, PREFERRED, INTERLEAVE):
        assert _judge(mode, {0, 1}, [0, 1, 0, 1]) == ([], [])
    assert _judge(LOCAL, set(), [0, 1], allowed=frozenset({0, 1})) == ([], [])


def test_preferred_spill_is_a_problem_only_while_the_node_has_free_memory() -> None:
    problems, notes = _judge(PREFERRED, {0}, [1, 1], free=SPILL)
    assert (
        problems == ["pages landed on nodes 1 although the preferred nodes 0 have free memory"]
        and notes == []
    )
    assert _judge(PREFERRED, {0}, [1, 1], free=SPILL - 1) == (
        [],
        ["pages spilled off the preferred nodes, which are nearly full"],
    )
    assert _judge(PREFERRED, {0}, [1], free=None)[0]  # unknown free memory: a problem


def test_bind_interleave_local_and_missing_pages() -> None:
    assert _judge(BIND, {0}, [0, 2])[0] == ["pages landed on nodes 2 outside the bound nodes 0"]
    assert _judge(INTERLEAVE, {0, 1}, [1, 1, 1])[0] == [
        "interleaved pages did not alternate: all on node 1"
    ]
    assert _judge(LOCAL, set(), [0, 3], allowed=frozenset({0}))[0] == [
        "pages landed on nodes [3] outside the allowed memory nodes"
    ]
    assert _judge(BIND, {0}, [0, -errno.ENOENT])[0] == [
        "test pages [1] not present after touching them"
    ]


WEIGHTED = _libnuma.MPOL_WEIGHTED_INTERLEAVE


def test_weighted_interleave_is_judged_by_its_split() -> None:
    def judge(found, weights, runs=None):  # type: ignore[no-untyped-def]
        return _verify.placement_problems(
            WEIGHTED,
            frozenset({0, 2}),
            tuple(found),
            free_bytes=None,
            allowed=None,
            weights=weights,
            run_pages=runs,
        )

    three_to_one = [0, 0, 0, 2] * 20
    assert judge(three_to_one, {0: 3, 2: 1}) == ([], [])
    problems, _ = judge([0, 2] * 40, {0: 3, 2: 1})
    assert problems == [
        "node 0 holds 40 of the 80 pages (50.0%), its weight 3 of 4 asks for 75.0% "
        "(tolerance 5 percentage points)",
        "node 2 holds 40 of the 80 pages (50.0%), its weight 1 of 4 asks for 25.0% "
        "(tolerance 5 percentage points)",
    ]
    # A window that cuts the kernel's run of 3 short: one run of slack.
    assert judge([0, 0, 2, 0, 0, 0, 2], {0: 3, 2: 1}, {0: 3, 2: 1}) == ([], [])
    assert judge([0, 1, 2], {0: 1, 2: 1})[0] == [
        "weighted-interleaved pages landed on nodes 1 outside 0,2"
    ]
    assert judge([0, 2], None) == (
        [],
        ["the split of the pages was not judged: no weights known for it"],
    )


def test_a_page_present_whose_node_is_unknown_is_noted_never_not_present() -> None:
    # What verify() is left with when NUMA balancing hid a test page from move_pages and
    # its frame is not readable (tests/vm/guest/test_guest_memory.py has the real thing).
    for unknown in (_pages.UNLOCATED, _pages.UNSURE):
        problems, notes = _judge(BIND, {0}, [0, unknown, 0])
        assert problems == []
        assert notes == [
            "test pages [1] not judged: present, but automatic NUMA balancing hid their node "
            "from move_pages and reading their frame needs CAP_SYS_ADMIN"
        ]
    assert _judge(BIND, {0}, [2, _pages.UNLOCATED])[0] == [
        "pages landed on nodes 2 outside the bound nodes 0"
    ]


@given(
    mode=st.sampled_from([BIND, PREFERRED, INTERLEAVE, LOCAL]),
    nodes=st.frozensets(st.integers(0, 7), min_size=1),
    found=st.lists(st.integers(-errno.ENOENT, 7), max_size=16),
    free=st.none() | st.integers(0, 2 * SPILL),
)
def test_placement_judgement_is_total_and_pages_on_the_nodes_are_never_a_problem(
    mode, nodes, found, free
) -> None:
    problems, _ = _judge(mode, nodes, found, free, allowed=nodes)
    inside = all(0 <= node and node in nodes for node in found)
    if inside and (mode != INTERLEAVE or len(set(found)) > 1 or len(found) < 2 or len(nodes) < 2):
        assert problems == []
    if any(node < 0 for node in found):
        assert any("not present" in p for p in problems)


def test_thread_rule() -> None:
    cpus, reference = frozenset({1}), frozenset({0, 1})
    masks = {
        10: frozenset({1}),  # bound, still on the plan's CPUs
        11: frozenset({0}),  # bound, re-pinned since
        12: frozenset({0}),  # left pinned by the bind
        13: reference,  # never seen by the bind: escaped
        14: frozenset({0}),  # started later and pinned itself: deliberate
        15: None,  # exited
    }
    problems, checked = _verify.thread_problems(
        cpus, {10: "main", 11: "pool"}, frozenset({12}), reference, masks
    )
    assert problems == [
        "thread 11 (pool) runs on CPUs 0, expected 1",
        "thread 13 escaped the binding: it runs on CPUs 0-1, the mask before binding, expected 1",
    ]
    assert checked == 3


# ------------------------------------------- verify() and check: one verifier


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0-1 and memory node 0",
)
@pytest.mark.parametrize("free", [SPILL // 16, SPILL * 32], ids=["nearly-full", "free"])
def test_check_and_verify_agree_on_preferred_spill(free: int) -> None:
    result, _ = run_in_child(child_verify.check_and_verify_twins, free)
    report, verify = result["report"], result["verify"]
    assert report["ok"] is verify["ok"], result
    assert report["problems"] == verify["problems"], result
    if free < SPILL:
        assert verify["ok"] is True
        assert "pages spilled off the preferred nodes, which are nearly full" in verify["notes"]
        assert report["page_nodes"] == "1"
    else:
        assert verify["problems"] == [
            "pages landed on nodes 1 although the preferred nodes 0 have free memory"
        ]
