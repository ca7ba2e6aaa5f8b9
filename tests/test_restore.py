"""``Binding.restore()`` touches only this process's threads, and costs O(1) per binding.

Issue 25: the undo journal set saved masks back by thread id, including
threads of ours that had exited since the bind; thread ids are global and
reused, so an unrelated process that received the id had its affinity
widened.  Now a thread is changed back only while it is still under
``/proc/self/task`` with the start time read when it was bound; the others
are listed in ``Binding.threads_exited_at_restore`` and logged.  And binds
and restores were linear in the bindings in force (so keeping or restoring n
of them was quadratic); the stack is now indexed, which the last tests check
by counting what each operation looks at (no timing: the numbers are in
``python -m benchmarks.stack``).

Everything that binds runs in a child interpreter (``run_child``), so this
process is never left bound.  This machine: CPUs 0-1, one memory node.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from bindchild import run_child

from pynumabind import _libnuma

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0 and 1 and memory node 0",
)

PLAN = """
from pynumabind import _apply, _proc
from pynumabind.binding import apply_plan
from pynumabind.model import MemoryPolicy, Plan
def plan(cpus=(1,), policy="NONE", mems=()):
    return Plan(rank=0, gpu=None, cpus=None if cpus is None else frozenset(cpus),
                mems=frozenset(mems), policy=MemoryPolicy[policy])
def cpu_undo(binding):
    return next(r for r in binding._undo.records if isinstance(r, _apply.CpuUndo))
def affinity(tid):
    return sorted(os.sched_getaffinity(tid))
def gone(thread):
    # join() returns a moment before the kernel thread is gone: wait for that.
    tid = thread.native_id
    thread.join()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/self/task/{tid}") and time.monotonic() < deadline:
        time.sleep(0.001)
"""


def test_a_bound_thread_that_exited_is_left_alone_and_listed() -> None:
    result, stderr = run_child(
        PLAN
        + """
logging.basicConfig(level=logging.INFO)
stop = threading.Event()
worker = threading.Thread(target=stop.wait)
worker.start()
tid = worker.native_id
b = apply_plan(plan())
bound = tid in b.threads_bound
stop.set()
gone(worker)
b.restore()
emit({"bound": bound, "tid": tid, "exited": list(b.threads_exited_at_restore),
      "main": affinity(0), "dict": b.to_dict()["threads_exited_at_restore"]})
"""
    )
    assert result["bound"] is True
    assert result["exited"] == [result["tid"]] == result["dict"]
    assert result["main"] == [0, 1]  # the live thread was restored
    assert f"restore left alone 1 bound thread(s) that had exited (ids {result['tid']}" in stderr


def test_a_thread_id_now_naming_another_thread_of_ours_is_not_touched() -> None:
    # The id is still under /proc/self/task, but its start time is not the
    # one recorded at bind time: the bound thread exited and the kernel gave
    # its id to a newer one.  Simulated by changing the recorded start time.
    result, _ = run_child(
        PLAN
        + """
stop = threading.Event()
worker = threading.Thread(target=stop.wait)
worker.start()
tid = worker.native_id
b = apply_plan(plan())
undo = cpu_undo(b)
recorded = undo.masks.starts[tid]
undo.masks.starts[tid] = recorded + 1
b.restore()
emit({"recorded": recorded, "real": _proc.thread_start_time(tid), "worker": affinity(tid),
      "main": affinity(0), "exited": list(b.threads_exited_at_restore), "tid": tid})
stop.set()
worker.join()
"""
    )
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
        [sys.executable, "-c", "import os, sys; os.sched_setaffinity(0, {1}); sys.stdin.read()"],
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
        result, _ = run_child(
            PLAN
            + f"""
b = apply_plan(plan())
undo = cpu_undo(b)
undo.masks[{other.pid}] = frozenset({{0, 1}})
getattr(undo.masks, "starts", {{}})[{other.pid}] = {start}
b.restore()
emit({{"main": affinity(0), "exited": list(getattr(b, "threads_exited_at_restore", ()))}})
"""
        )
        assert result["main"] == [0, 1]
        assert os.sched_getaffinity(other.pid) == {1}, "restore() widened another process"
        assert result["exited"] == [other.pid]
    finally:
        other.kill()
        other.wait()


def test_a_thread_started_after_the_bind_is_still_put_back() -> None:
    # The identity check must not stop the documented case: a thread started
    # after the bind inherited the bound CPUs and goes back to the old mask.
    result, _ = run_child(
        PLAN
        + """
b = apply_plan(plan())
stop = threading.Event()
late = threading.Thread(target=stop.wait)
late.start()
inside = affinity(late.native_id)
b.restore()
after = affinity(late.native_id)
emit({"inside": inside, "after": after, "exited": list(b.threads_exited_at_restore)})
stop.set()
late.join()
"""
    )
    assert result == {"inside": [1], "after": [0, 1], "exited": []}


# ------------------------------------------------------- O(1) per binding

COUNTING = """
class Counting(dict):
    # A stack index that counts what is looked at: entries read from its end,
    # and every walk over all of it.
    peeked = 0
    walks = 0
    def __reversed__(self):
        for key in dict.__reversed__(self):
            Counting.peeked += 1
            yield key
    def __iter__(self):
        Counting.walks += 1
        return dict.__iter__(self)
    def keys(self):
        Counting.walks += 1
        return dict.keys(self)
    def values(self):
        Counting.walks += 1
        return dict.values(self)
    def items(self):
        Counting.walks += 1
        return dict.items(self)
"""


@pytest.mark.parametrize("kind", ["cpus", "policy"], ids=["CPU bindings", "memory-policy bindings"])
def test_bind_and_restore_look_at_a_bounded_part_of_the_stack(kind: str) -> None:
    # n bindings in force, then restored newest first: every restore is
    # checked against the newer bindings.  The old stack walked every
    # journal in force on each bind and each restore (n*n/2 steps here).
    n = 1500
    result, _ = run_child(
        PLAN
        + COUNTING
        + f"""
kind, n = {kind!r}, {n}
stack = _apply._STACK
tid = threading.get_native_id()
if kind == "cpus":
    stack.cpus = Counting()
    make = lambda: plan()
else:
    stack.policy[tid] = Counting()
    make = lambda: plan(cpus=None, policy="PREFERRED", mems=(0,))
bindings = []
for _ in range(n):
    bindings.append(apply_plan(make()))
index = stack.cpus if kind == "cpus" else stack.policy[tid]
in_force = len(index)
after_binds = (Counting.peeked, Counting.walks)
refused = None
try:
    bindings[0].restore()
except Exception as exc:
    refused = type(exc).__name__
for b in reversed(bindings):
    b.restore()
emit({{"in_force": in_force, "after_binds": after_binds, "refused": refused,
      "peeked": Counting.peeked, "walks": Counting.walks,
      "left": len(stack.cpus) + len(stack.policy.get(tid, {{}})),
      "all_restored": all(b.restored for b in bindings), "main": affinity(0)}})
"""
    )
    assert result["in_force"] == n  # every binding is in the index...
    assert result["after_binds"] == [0, 0]  # ...and binding looked at none of it
    assert result["refused"] == "BindError"  # the oldest waits for the newer ones
    assert result["walks"] == 0
    assert result["peeked"] <= 2 * n + 2, result  # ~one entry per restore, not n
    assert result["left"] == 0 and result["all_restored"] is True
    assert result["main"] == [0, 1]


def test_bindings_dropped_unrestored_leave_the_index_at_the_next_change() -> None:
    result, _ = run_child(
        PLAN
        + """
import gc
stack = _apply._STACK
held = apply_plan(plan())
for _ in range(500):
    apply_plan(plan())  # dropped at once: no longer restorable, no longer in force
gc.collect()
size_before = len(stack.cpus)
last = apply_plan(plan())
size_after = len(stack.cpus)
last.restore()
held.restore()  # the dropped ones do not block it
emit({"before": size_before, "after": size_after, "main": affinity(0), "left": len(stack.cpus)})
"""
    )
    assert result["before"] <= 2  # held (and at most the last one not yet swept)
    assert result["after"] == 2  # held and last
    assert result["left"] == 0 and result["main"] == [0, 1]
