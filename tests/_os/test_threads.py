"""Thread-wide CPU affinity (``pynumabind._os.threads``) on the real kernel.

Every test binds inside a child interpreter (see ``childproc``), so the
pytest process keeps its affinity.  This machine has CPUs 0-1.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from pynumabind._os import proc as _proc
from pynumabind._os import threads as _threads

from ..support.childproc import run_in_child
from . import child_threads

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs at least two allowed CPUs (0 and 1)"
)


def test_threads_started_before_the_call_are_rebound_and_pinned_ones_left() -> None:
    result, _ = run_in_child(child_threads.bind_named_threads)
    tids, status = result["tids"], result["status"]
    by_tid = {r["tid"]: r for r in result["results"]}
    assert result["converged"] is True
    # The caller and the three pool threads: bound, as the kernel reports.
    for tid in [result["main"]] + [tids[f"pool-{i}"] for i in range(3)]:
        assert status[str(tid)] == "1"
        assert by_tid[tid]["action"] == "bound"
        assert (by_tid[tid]["before"], by_tid[tid]["after"]) == ("0-1", "1")
    # The thread pinned to CPU 0 before the call: untouched and reported.
    pinned = tids["pinned-0"]
    assert status[str(pinned)] == "0"
    assert by_tid[pinned] == {
        "tid": pinned,
        "name": "pinned-0",
        "before": "0",
        "after": "0",
        "action": "left-pinned",
    }
    assert {by_tid[tids[f"pool-{i}"]]["name"] for i in range(3)} == {"pool-0", "pool-1", "pool-2"}
    assert set(by_tid) == {int(t) for t in status}


def test_restore_threads_puts_back_previous_masks() -> None:
    result, _ = run_in_child(child_threads.restore_named_threads)
    assert result["failed"] == []
    assert len(result["restored"]) == 4  # caller + 3 pool threads, not the pinned one
    pinned = str(result["pinned"])
    for tid, cpus in result["after"].items():
        assert cpus == ("0" if tid == pinned else "0-1")
        assert result["bound"][tid] == ("0" if tid == pinned else "1")


def test_threads_exiting_and_spawning_during_the_scan_are_fine() -> None:
    """A thread factory churns short-lived threads while we bind."""
    result, _ = run_in_child(child_threads.bind_while_threads_churn)
    assert set(result["actions"]) <= {"bound", "exited"}
    assert "bound" in result["actions"]
    # Everything still alive (main thread) ended up on CPU 1.
    assert set(result["status"].values()) == {"1"}


def test_new_thread_after_scan_inherits_from_bound_creator() -> None:
    result, _ = run_in_child(child_threads.new_thread_after_the_scan)
    assert result["cpus"] == [1]


def test_restore_of_an_exited_thread_counts_as_restored() -> None:
    holder = {}
    t = threading.Thread(target=lambda: holder.update(tid=threading.get_native_id()))
    t.start()
    t.join()  # returns slightly before the kernel thread is gone: poll
    deadline = time.monotonic() + 5
    while _proc.thread_affinity(holder["tid"]) is not None:
        assert time.monotonic() < deadline, "thread never exited"
        time.sleep(0.005)
    restored, failed = _threads.restore_threads({holder["tid"]: frozenset({0})})
    assert (restored, failed) == ([holder["tid"]], [])


def test_argument_validation() -> None:
    with pytest.raises(ValueError, match="empty"):
        _threads.bind_threads(frozenset())
    with pytest.raises(ValueError, match="max_passes"):
        _threads.bind_threads(frozenset({0}), max_passes=0)


def test_thread_listing_and_names_match_proc() -> None:
    tids = _proc.list_thread_ids()
    assert threading.get_native_id() in tids
    assert tids == sorted(int(t) for t in os.listdir("/proc/self/task"))
    with open(f"/proc/self/task/{tids[0]}/comm") as handle:
        assert _proc.thread_name(tids[0]) == handle.read().rstrip("\n")
    assert _proc.thread_name(2**22 + 12345) == ""


def test_check_reads_thread_masks_while_a_thread_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reading /proc/self/task/T/status after T exited fails with ESRCH, not
    # ENOENT (measured: ~1 in 600 scans while threads churn).  Open the file,
    # let the thread exit, then let _proc.thread_status_cpus read it.
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    victim = f"/proc/self/task/{thread.native_id}/status"
    real_open = os.open
    opened = []

    def open_then_exit(path, *args, **kwargs):
        fd = real_open(path, *args, **kwargs)
        if path == victim:
            opened.append(path)
            stop.set()
            thread.join()
            time.sleep(0.05)  # join() returns just before the kernel reaps the thread
        return fd

    monkeypatch.setattr(os, "open", open_then_exit)
    masks = _proc.thread_status_cpus()
    monkeypatch.undo()
    assert opened == [victim]  # the file was open before the thread went
    assert thread.native_id not in masks
    assert masks[threading.get_native_id()] == frozenset(os.sched_getaffinity(0))


def test_a_listing_given_serves_the_first_pass_and_later_threads_are_still_found() -> None:
    # A bind lists /proc/self/task once for its journal and hands the listing
    # to the scan, which then lists once less; a thread started after that
    # listing is still bound, and the scan ends only on a listing of its own.
    result, _ = run_in_child(child_threads.bind_with_a_listing_given)
    late, pinned = str(result["late"]), str(result["pinned"])
    assert result["actions"][late] == "bound"
    assert result["status"][late] == "1"
    assert result["actions"][pinned] == "left-pinned"
    assert {v for k, v in result["status"].items() if k != pinned} == {"1"}
    # the given listing, then the pass that finds the late thread, then one that finds none
    assert (result["listings"], result["passes"], result["converged"]) == (2, 2, True)
    # a lone caller with its listing given: converged on the scan's own listing
    assert result["alone"] == [True, 0, 1]
