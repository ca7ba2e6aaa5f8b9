"""This process's own state (``pynumabind._os.proc``) on the real kernel.

What each reader returns is checked against a second source (``/proc/uptime``
for a start time, ``sched_getaffinity`` for the status masks, the cgroup file
system for the cpuset); failures are real ones -- an exited thread, a seccomp
filter that denies the call, a missing or malformed file -- and must come back
as the typed errors of :mod:`pynumabind.errors`, naming the path or the call.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

from pynumabind._os import proc as _proc
from pynumabind.errors import NumaSyscallError, ProcessStateError, PynumabindError

from ..support import seccomp_filter

NR_SCHED_GETAFFINITY = 204  # x86-64 (asm/unistd_64.h)
NR_OPENAT = 257


def _exited_thread_id() -> int:
    """The id of a thread of this process that has exited (and been reaped)."""
    holder: Dict[str, int] = {}
    thread = threading.Thread(target=lambda: holder.update(tid=threading.get_native_id()))
    thread.start()
    thread.join()  # returns slightly before the kernel thread is gone: poll
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/self/task/{holder['tid']}"):
        assert time.monotonic() < deadline, "thread never exited"
        time.sleep(0.005)
    return holder["tid"]


def test_an_exited_thread_is_gone_not_an_error() -> None:
    tid = _exited_thread_id()
    assert _proc.thread_affinity(tid) is None
    assert _proc.thread_name(tid) == ""
    assert _proc.thread_start_time(tid) is None
    assert _proc.set_thread_affinity(tid, os.sched_getaffinity(0)) is False
    assert tid not in _proc.list_thread_ids()
    assert tid not in _proc.thread_status_cpus()


def test_a_live_thread_is_read() -> None:
    me = threading.get_native_id()
    assert _proc.thread_affinity(me) == frozenset(os.sched_getaffinity(0))
    assert _proc.set_thread_affinity(me, os.sched_getaffinity(0)) is True
    assert me in _proc.list_thread_ids()
    masks = _proc.thread_status_cpus()
    assert masks[me] == frozenset(os.sched_getaffinity(0))
    assert set(masks) <= set(_proc.list_thread_ids())


def _uptime_ticks() -> float:
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0]) * os.sysconf("SC_CLK_TCK")


def test_thread_start_time_is_when_the_thread_started() -> None:
    # A thread whose name holds ") 1 2 (" must still be parsed after its name.
    libc = ctypes.CDLL(None, use_errno=True)
    found: Dict[str, Any] = {}
    stop = threading.Event()

    def worker() -> None:
        libc.prctl(15, b"x) 1 2 (y", 0, 0, 0)  # PR_SET_NAME
        found["tid"] = threading.get_native_id()
        found["start"] = _proc.thread_start_time(found["tid"])
        stop.wait()

    before = _uptime_ticks()
    thread = threading.Thread(target=worker)
    thread.start()
    while "start" not in found:
        time.sleep(0.001)
    after = _uptime_ticks()
    try:
        assert _proc.thread_name(found["tid"]) == "x) 1 2 (y"
        # /proc/uptime and starttime count from the same boot, in ticks.
        assert before - 2 <= found["start"] <= after + 2
        assert _proc.thread_start_time(found["tid"]) == found["start"]  # stable
        main = _proc.thread_start_time(os.getpid())
        assert main is not None and main <= found["start"]
    finally:
        stop.set()
        thread.join()


def test_a_malformed_stat_or_status_is_a_typed_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_text("7 (name) S 1 2\n")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "stat").write_text("8 (n) " + " ".join(["1"] * 19) + " later 0\n")
    (tmp_path / "7" / "status").write_text("Name:\tx\n")
    monkeypatch.setattr(_proc, "TASK_DIR", str(tmp_path))
    with pytest.raises(ProcessStateError, match="malformed") as info:
        _proc.thread_start_time(7)
    assert info.value.path == f"{tmp_path}/7/stat"
    with pytest.raises(ProcessStateError, match="starttime 'later'"):
        _proc.thread_start_time(8)
    with pytest.raises(ProcessStateError, match="no Cpus_allowed_list") as info:
        _proc.thread_status_cpus()
    assert info.value.path == f"{tmp_path}/7/status"
    with pytest.raises(ProcessStateError, match="no Mems_allowed_list"):
        _proc.status_field("Mems_allowed_list", f"{tmp_path}/7/status")


def test_a_missing_proc_is_a_typed_error_naming_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_proc, "TASK_DIR", "/nonexistent/task")
    with pytest.raises(ProcessStateError) as info:
        _proc.list_thread_ids()
    error = info.value
    assert isinstance(error, PynumabindError) and isinstance(error, OSError)
    assert error.errno == errno.ENOENT and error.path == "/nonexistent/task"
    assert "/nonexistent/task" in str(error) and "ENOENT" in str(error)
    with pytest.raises(ProcessStateError, match="/nonexistent/status"):
        _proc.status_field("Mems_allowed_list", "/nonexistent/status")


def test_allowed_memory_nodes_agree_between_the_syscall_and_status() -> None:
    assert _proc.mems_allowed() == _proc.status_mems_allowed()
    assert _proc.mems_allowed()  # this process may use some node


def test_cpuset_names_this_process_cgroup_and_its_cpus() -> None:
    found = _proc.cpuset()
    if not os.path.exists("/proc/self/cpuset"):
        assert found is None
        return
    with open("/proc/self/cpuset") as handle:
        path = handle.read().strip()
    candidates = [
        f"/sys/fs/cgroup/cpuset{path}/cpuset.effective_cpus",
        f"/sys/fs/cgroup{path}/cpuset.cpus.effective",
    ]
    existing = [c for c in candidates if os.path.exists(c)]
    if not existing:
        assert found is None
        return
    assert found is not None and found[0] == path
    assert frozenset(os.sched_getaffinity(0)) <= found[1]


# ------------------------------------------ real refusals (seccomp, fork child)


def _in_filtered_child(denied: int, err: int, body: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """Run ``body`` in a fork child whose syscall ``denied`` fails with ``err``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            seccomp_filter.install([denied], err)
            out = body()
        except BaseException as exc:  # reported to the parent
            out = {"child_error": repr(exc)}
        os.write(write_end, json.dumps(out).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks))


def _caught(call: Callable[[], object]) -> Dict[str, Any]:
    try:
        return {"value": repr(call())}
    except PynumabindError as exc:
        return {
            "type": type(exc).__name__,
            "oserror": isinstance(exc, OSError),
            "errno": getattr(exc, "errno", None),
            "path": getattr(exc, "path", None),
            "message": str(exc),
        }


needs_seccomp = pytest.mark.skipif(not seccomp_filter.supported(), reason="x86-64 only")


@needs_seccomp
def test_a_denied_sched_getaffinity_is_a_syscall_error_naming_the_thread() -> None:
    me = threading.get_native_id()
    result = _in_filtered_child(
        NR_SCHED_GETAFFINITY,
        errno.EPERM,
        lambda: {
            "thread": _caught(lambda: _proc.thread_affinity(me)),
            "process": _caught(_proc.process_affinity),
        },
    )
    assert result["thread"]["type"] == "NumaSyscallError", result
    assert result["thread"]["errno"] == errno.EPERM and result["thread"]["oserror"]
    assert f"sched_getaffinity(thread {me})" in result["thread"]["message"]
    assert result["process"]["type"] == "NumaSyscallError"
    assert "sched_getaffinity(0)" in result["process"]["message"]


@needs_seccomp
def test_an_unreadable_proc_file_is_a_typed_error_naming_it() -> None:
    # openat denied with EACCES: what an LSM policy masking /proc does.
    me = threading.get_native_id()
    result = _in_filtered_child(
        NR_OPENAT,
        errno.EACCES,
        lambda: {
            "name": _caught(lambda: _proc.thread_name(me)),
            "start": _caught(lambda: _proc.thread_start_time(me)),
            "tids": _caught(_proc.list_thread_ids),
        },
    )
    for key, path in (
        ("name", f"/proc/self/task/{me}/comm"),
        ("start", f"/proc/self/task/{me}/stat"),
        ("tids", "/proc/self/task"),
    ):
        got = result[key]
        assert got["type"] == "ProcessStateError", result
        assert got["errno"] == errno.EACCES and got["oserror"]
        assert got["path"] == path and path in got["message"] and "EACCES" in got["message"]


def test_thread_affinity_error_is_a_pynumabind_error_carrying_errno() -> None:
    from pynumabind._os.threads import ThreadAffinityError

    error = ThreadAffinityError(errno.EINVAL, 42, frozenset({1}), (41,), ())
    assert isinstance(error, NumaSyscallError) and isinstance(error, PynumabindError)
    assert isinstance(error, OSError) and error.errno == errno.EINVAL
    assert "sched_setaffinity(thread 42, CPUs 1) failed: EINVAL" in str(error)
