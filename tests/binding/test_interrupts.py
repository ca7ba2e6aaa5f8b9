"""Never half-bound: a KeyboardInterrupt at any moment of a bind or a restore.

A real SIGINT raises where CPython checks for pending signals: on entering a
Python function, on a loop's jump back, and right after a C call returned (so
after ``sched_setaffinity`` or ``set_mempolicy`` took effect).  Firing real
signals at random moments finds the bad ones only by luck; instead the child
raises ``KeyboardInterrupt`` deterministically at the k-th such point inside
pynumabind (a profile and a trace function find those points), for every k
until the bind completes untouched.  Each time the
process must be either bound (a Binding came back) or exactly as before.
"""

from __future__ import annotations

import os

import pytest

from pynumabind._os import libnuma as _libnuma

from ..support.childproc import run_in_child
from . import child_interrupts

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0 and 1 and memory node 0",
)

BIND_CALLS = ("apply_plan", "bind_current_process")


@pytest.mark.parametrize("call", BIND_CALLS)
def test_interrupt_at_every_point_of_a_bind_leaves_it_bound_or_untouched(call: str) -> None:
    result, _ = run_in_child(child_interrupts.interrupt_every_point_of_a_bind, call)
    assert result["bad"] == [], result
    # Every point up to the last one really was interrupted (hundreds of them),
    # but for a rare one the interpreter swallowed (see child_interrupts.Interrupter).
    assert result["lost"] == [], result
    assert result["interrupted"] + result["swallowed"] == result["points"] >= 300, result
    assert result["swallowed"] <= 2, result


def test_interrupted_restore_can_be_finished_by_calling_it_again() -> None:
    result, _ = run_in_child(child_interrupts.interrupt_every_point_of_a_restore)
    assert result["bad"] == [], result
    assert result["lost"] == [], result
    assert result["interrupted"] + result["swallowed"] == result["points"] >= 50, result
    assert result["swallowed"] <= 2, result
