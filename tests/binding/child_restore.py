"""Child bodies of binding/test_restore.py: each binds a fresh interpreter and reports.

Run through :func:`childproc.run_in_child`, so the pytest process is never
left bound.  Each function returns what its test asserts on.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

from pynumabind._os import proc as _proc
from pynumabind.binding import Binding, _apply, apply_plan
from pynumabind.model import MemoryPolicy, Plan


def plan(
    cpus: Optional[Iterable[int]] = (1,), policy: str = "NONE", mems: Iterable[int] = ()
) -> Plan:
    return Plan(
        rank=0,
        gpu_info=None,
        cpus=None if cpus is None else frozenset(cpus),
        mems=frozenset(mems),
        policy=MemoryPolicy[policy],
    )


def cpu_undo(binding: Binding) -> Any:
    assert binding._undo is not None
    return next(r for r in binding._undo.records if isinstance(r, _apply.CpuUndo))


def affinity(tid: int) -> List[int]:
    return sorted(os.sched_getaffinity(tid))


def gone(thread: threading.Thread) -> None:
    # join() returns a moment before the kernel thread is gone: wait for that.
    tid = thread.native_id
    thread.join()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/self/task/{tid}") and time.monotonic() < deadline:
        time.sleep(0.001)


def exited_thread_left_alone() -> Dict[str, Any]:
    logging.basicConfig(level=logging.INFO)
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    tid = worker.native_id
    assert tid is not None
    b = apply_plan(plan())
    bound = tid in b.threads_bound
    stop.set()
    gone(worker)
    b.restore()
    return {
        "bound": bound,
        "tid": tid,
        "exited": list(b.threads_exited_at_restore),
        "main": affinity(0),
        "dict": b.to_dict()["threads_exited_at_restore"],
    }


def reused_id_of_our_own_not_touched() -> Dict[str, Any]:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    tid = worker.native_id
    assert tid is not None
    b = apply_plan(plan())
    undo = cpu_undo(b)
    recorded = undo.masks.starts[tid]
    undo.masks.starts[tid] = recorded + 1
    b.restore()
    result = {
        "recorded": recorded,
        "real": _proc.thread_start_time(tid),
        "worker": affinity(tid),
        "main": affinity(0),
        "exited": list(b.threads_exited_at_restore),
        "tid": tid,
    }
    stop.set()
    worker.join()
    return result


def another_process_in_the_journal(pid: str, start: str) -> Dict[str, Any]:
    b = apply_plan(plan())
    undo = cpu_undo(b)
    undo.masks[int(pid)] = frozenset({0, 1})
    getattr(undo.masks, "starts", {})[int(pid)] = int(start)
    b.restore()
    return {"main": affinity(0), "exited": list(getattr(b, "threads_exited_at_restore", ()))}


def thread_started_after_the_bind() -> Dict[str, Any]:
    b = apply_plan(plan())
    stop = threading.Event()
    late = threading.Thread(target=stop.wait)
    late.start()
    assert late.native_id is not None
    inside = affinity(late.native_id)
    b.restore()
    after = affinity(late.native_id)
    result = {"inside": inside, "after": after, "exited": list(b.threads_exited_at_restore)}
    stop.set()
    late.join()
    return result


class Counting(dict):  # type: ignore[type-arg]
    """A stack index that counts what is looked at: entries read from its end,
    and every walk over all of it."""

    peeked = 0
    walks = 0

    def __reversed__(self) -> Iterator[Any]:
        for key in dict.__reversed__(self):
            Counting.peeked += 1
            yield key

    def __iter__(self) -> Iterator[Any]:
        Counting.walks += 1
        return dict.__iter__(self)

    def keys(self) -> Any:
        Counting.walks += 1
        return dict.keys(self)

    def values(self) -> Any:
        Counting.walks += 1
        return dict.values(self)

    def items(self) -> Any:
        Counting.walks += 1
        return dict.items(self)


def bounded_stack_work(kind: str, count: str) -> Dict[str, Any]:
    n = int(count)
    stack = _apply._STACK
    tid = threading.get_native_id()
    make: Callable[[], Plan]
    if kind == "cpus":
        stack.cpus = Counting()
        make = plan
    else:
        stack.policy[tid] = Counting()

        def make() -> Plan:
            return plan(cpus=None, policy="PREFERRED", mems=(0,))

    bindings = [apply_plan(make()) for _ in range(n)]
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
    return {
        "in_force": in_force,
        "after_binds": after_binds,
        "refused": refused,
        "peeked": Counting.peeked,
        "walks": Counting.walks,
        "left": len(stack.cpus) + len(stack.policy.get(tid, {})),
        "all_restored": all(b.restored for b in bindings),
        "main": affinity(0),
    }


def dropped_bindings_leave_the_index() -> Dict[str, Any]:
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
    return {
        "before": size_before,
        "after": size_after,
        "main": affinity(0),
        "left": len(stack.cpus),
    }


def sleep_on_cpu1() -> None:
    """The other process of test_restore_never_widens_another_process."""
    os.sched_setaffinity(0, {1})
    sys.stdin.read()
