"""``Binding.restore()`` touches only this process's threads, and costs O(1) per binding.

A bug this guards against: the undo journal set saved masks back by thread id, including
threads of ours that had exited since the bind; thread ids are global and
reused, so an unrelated process that received the id had its affinity
widened.  Now a thread is changed back only while it is still under
``/proc/self/task`` with the start time read when it was bound; the others
are listed in ``Binding.threads_exited_at_restore`` and logged.  And binds
and restores were linear in the bindings in force (so keeping or restoring n
of them was quadratic); the stack is now indexed, which the last tests check
by counting what each operation looks at (no timing: the numbers are in
``python -m benchmarks.stack``).

Everything that binds runs in a child interpreter (``run_in_child``, the
bodies in child_restore.py), so this
process is never left bound.  This machine: CPUs 0-1, one memory node.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from pynumabind._os import libnuma as _libnuma

from ..support.childproc import child_command, run_in_child
from . import child_restore

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0 and 1 and memory node 0",
)


def test_a_bound_thread_that_exited_is_left_alone_and_listed() -> None:
    result, stderr = run_in_child(child_restore.exited_thread_left_alone)
    assert result["bound"] is True
    assert result["exited"] == [result["tid"]] == result["dict"]
    assert result["main"] == [0, 1]  # the live thread was restored
    assert f"restore left alone 1 bound thread(s) that had exited (ids {result['tid']}" in stderr


def test_a_thread_id_now_naming_another_thread_of_ours_is_not_touched() -> None:
    # The id is still under /proc/self/task, but its start time is not the
    # one recorded at bind time: the bound thread exited and the kernel gave
    # its id to a newer one.  Simulated by changing the recorded start time.
    result, _ = run_in_child(child_restore.reused_id_of_our_own_not_touched)
    assert result["recorded"] == result["real"]  # what bind recorded is the thread's start time
    assert result["worker"] == [1]  # left on the bound CPU: not the thread that was bound
    assert result["main"] == [0, 1]
    assert result["exited"] == [result["tid"]]


def test_restore_never_widens_another_process() -> None:
    # A real second process on CPU 1, its pid (a tid of another thread
    # group) written into the journal as if it were one of our bound threads
    # that had exited and whose id the kernel handed to it, with its real
    # start time.  Before the fix restore() set it back to CPUs 0-1.
    other = subprocess.Popen(
        child_command(child_restore.sleep_on_cpu1, alarm=0),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            if os.sched_getaffinity(other.pid) == {1}:
                break
            time.sleep(0.01)
        assert os.sched_getaffinity(other.pid) == {1}
        with open(f"/proc/{other.pid}/stat") as handle:
            text = handle.read()
        start = int(text[text.rfind(")") + 1 :].split()[19])
        result, _ = run_in_child(child_restore.another_process_in_the_journal, other.pid, start)
        assert result["main"] == [0, 1]
        assert os.sched_getaffinity(other.pid) == {1}, "restore() widened another process"
        assert result["exited"] == [other.pid]
    finally:
        other.kill()
        other.wait()


def test_a_thread_started_after_the_bind_is_still_put_back() -> None:
    # The identity check must not stop the documented case: a thread started
    # after the bind inherited the bound CPUs and goes back to the old mask.
    result, _ = run_in_child(child_restore.thread_started_after_the_bind)
    assert result == {"inside": [1], "after": [0, 1], "exited": []}


# ------------------------------------------------------- O(1) per binding


@pytest.mark.parametrize("kind", ["cpus", "policy"], ids=["CPU bindings", "memory-policy bindings"])
def test_bind_and_restore_look_at_a_bounded_part_of_the_stack(kind: str) -> None:
    # n bindings in force, then restored newest first: every restore is
    # checked against the newer bindings.  The old stack walked every
    # journal in force on each bind and each restore (n*n/2 steps here).
    n = 1500
    result, _ = run_in_child(child_restore.bounded_stack_work, kind, n)
    assert result["in_force"] == n  # every binding is in the index...
    assert result["after_binds"] == [0, 0]  # ...and binding looked at none of it
    assert result["refused"] == "BindError"  # the oldest waits for the newer ones
    assert result["walks"] == 0
    assert result["peeked"] <= 2 * n + 2, result  # ~one entry per restore, not n
    assert result["left"] == 0 and result["all_restored"] is True
    assert result["main"] == [0, 1]


def test_bindings_dropped_unrestored_leave_the_index_at_the_next_change() -> None:
    result, _ = run_in_child(child_restore.dropped_bindings_leave_the_index)
    assert result["before"] <= 2  # held (and at most the last one not yet swept)
    assert result["after"] == 2  # held and last
    assert result["left"] == 0 and result["main"] == [0, 1]
