"""Child bodies of _os/test_threads.py: thread-wide affinity in a fresh interpreter."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from pynumabind._os import threads as _threads

from ..support.childstate import task_cpus


def name_self(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: what /proc/.../comm shows


def named_threads() -> Tuple[threading.Event, Dict[str, int]]:
    """Three pool threads and one pinned to CPU 0, each named; (stop, tids)."""
    stop = threading.Event()
    tids: Dict[str, int] = {}

    def worker(name: str, pin: Optional[Iterable[int]] = None) -> None:
        name_self(name)
        if pin is not None:
            os.sched_setaffinity(0, pin)
        tids[name] = threading.get_native_id()
        stop.wait()

    threads = [threading.Thread(target=worker, args=(f"pool-{i}",)) for i in range(3)]
    threads.append(threading.Thread(target=worker, args=("pinned-0", {0})))
    for t in threads:
        t.start()
    while len(tids) < 4:
        time.sleep(0.01)
    return stop, tids


def bind_named_threads() -> Dict[str, Any]:
    stop, tids = named_threads()
    scan = _threads.bind_threads(frozenset({1}))
    status = task_cpus()
    stop.set()
    return {
        "tids": tids,
        "main": threading.get_native_id(),
        "status": status,
        "results": [r.to_dict() for r in scan.results],
        "converged": scan.converged,
    }


def restore_named_threads() -> Dict[str, Any]:
    stop, tids = named_threads()
    scan = _threads.bind_threads(frozenset({1}))
    bound = task_cpus()
    restored, failed = _threads.restore_threads(scan.changed())
    after = task_cpus()
    stop.set()
    return {
        "bound": bound,
        "after": after,
        "restored": restored,
        "failed": failed,
        "pinned": tids["pinned-0"],
    }


def bind_while_threads_churn() -> Dict[str, Any]:
    """A thread factory churns short-lived threads while we bind."""
    stop = threading.Event()

    def short() -> None:
        time.sleep(0.001)

    def churn() -> None:
        while not stop.is_set():
            ts = [threading.Thread(target=short) for _ in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

    churners = [threading.Thread(target=churn) for _ in range(2)]
    for c in churners:
        c.start()
    time.sleep(0.05)
    scans = [_threads.bind_threads(frozenset({1})) for _ in range(20)]
    stop.set()
    for c in churners:
        c.join()
    status = task_cpus()
    return {
        "actions": sorted({r.action.value for s in scans for r in s.results}),
        "status": status,
        "passes": max(s.passes for s in scans),
    }


def new_thread_after_the_scan() -> Dict[str, List[int]]:
    _threads.bind_threads(frozenset({1}))
    seen: Dict[str, List[int]] = {}
    t = threading.Thread(target=lambda: seen.update(cpus=sorted(os.sched_getaffinity(0))))
    t.start()
    t.join()
    return seen


def _scan_counting_listings(cpus: frozenset, listed: List[int]) -> Tuple[Any, int]:
    """``bind_threads(cpus, listed=listed)``, and how many listings it made itself."""
    from pynumabind._os import proc as _proc

    real_list = _proc.list_thread_ids
    calls: List[List[int]] = []

    def counted() -> List[int]:
        calls.append(real_list())
        return calls[-1]

    _proc.list_thread_ids = counted
    try:
        return _threads.bind_threads(cpus, listed=listed), len(calls)
    finally:
        _proc.list_thread_ids = real_list


def bind_with_a_listing_given() -> Dict[str, Any]:
    """``listed`` serves the first pass; a thread started after it is found by the next.

    The listing given is made while one pool thread runs; a second starts
    after it (and before the call), inheriting the unbound mask.  Also a
    lone caller with its own listing given: the scan still lists once itself.
    """
    from pynumabind._os import proc as _proc

    stop, tids = named_threads()
    listed = _proc.list_thread_ids()
    late = threading.Thread(target=stop.wait)
    late.start()
    scan, listings = _scan_counting_listings(frozenset({1}), listed)
    status = task_cpus()
    stop.set()
    late.join()
    for t in threading.enumerate():
        if t is not threading.current_thread():
            t.join()
    os.sched_setaffinity(0, {0, 1})
    # A joined thread can stay listed in /proc/self/task a moment longer (Python's join
    # returns before the kernel reaps it): wait until the caller is alone there.
    gone_by = time.monotonic() + 10
    while len(_proc.list_thread_ids()) > 1 and time.monotonic() < gone_by:
        time.sleep(0.001)
    alone, alone_listings = _scan_counting_listings(frozenset({1}), _proc.list_thread_ids())
    return {
        "late": late.native_id,
        "status": status,
        "actions": {r.tid: r.action.value for r in scan.results},
        "listings": listings,
        "passes": scan.passes,
        "converged": scan.converged,
        "alone": [alone.converged, alone.passes, alone_listings],
        "pinned": tids["pinned-0"],
    }
