"""CPU restrictions for real: a cgroup v1 cpuset, and an affinity mask from the parent.

A worker asking for CPUs it may not use must get a clear error naming the
CPUs wanted and allowed, with nothing left changed -- never a silently
unbound or half-bound worker.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import uuid

import pytest

from bindchild import PRELUDE, TESTS_DIR, run_child

CPUSET_ROOT = "/sys/fs/cgroup/cpuset"

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1 to confine a child to CPU 0"
)


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


@pytest.fixture
def cpuset0():
    """A real cgroup v1 cpuset with cpus=0, mems=0; removed afterwards."""
    if not os.path.isdir(CPUSET_ROOT):
        pytest.skip(f"no cgroup v1 cpuset hierarchy at {CPUSET_ROOT}")
    path = f"{CPUSET_ROOT}/pynumabind-test-{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(path)
    except OSError as exc:
        pytest.skip(f"cgroup cpuset not writable here ({path}: {exc.strerror})")
    try:
        _write(f"{path}/cpuset.cpus", "0")
        _write(f"{path}/cpuset.mems", "0")
        yield path
    finally:
        # Tasks must leave before rmdir; our children have exited by now, but wait a bit.
        for _ in range(100):
            try:
                os.rmdir(path)
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                time.sleep(0.05)
        else:
            pytest.fail(f"could not remove test cpuset {path}")


def _run_in_cpuset(cpuset: str, code: str) -> dict:
    """Start a child, move it into ``cpuset``, then let it run ``code``."""
    import json

    source = PRELUDE.format(tests=TESTS_DIR) + "sys.stdin.readline()\n" + code
    proc = subprocess.Popen(
        [sys.executable, "-c", source],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _write(f"{cpuset}/cgroup.procs", str(proc.pid))
        stdout, stderr = proc.communicate("go\n", timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert proc.returncode == 0 and lines, f"child failed:\n{stdout}\n{stderr}"
    return json.loads(lines[-1])


APPLY_CPU1 = """
from pynumabind.binding import apply_plan
from pynumabind.errors import BindError
from pynumabind.model import MemoryPolicy, Plan
plan = Plan(rank=0, gpu=None, cpus=frozenset({wanted}), mems=frozenset({{0}}),
            policy=MemoryPolicy.BIND)
out = {{"cpuset": open("/proc/self/cpuset").read().strip(), "before": cpus_allowed()}}
try:
    apply_plan(plan, on_error="warn")
    out["error"] = None
except BindError as exc:
    out["error"] = str(exc)
from pynumabind import _libnuma
out.update(after=cpus_allowed(), policy=_libnuma.get_mempolicy().mode_name)
emit(out)
"""


def test_cpuset_forbids_the_cpu(cpuset0: str) -> None:
    result = _run_in_cpuset(cpuset0, APPLY_CPU1.format(wanted="{1}"))
    name = cpuset0[len(CPUSET_ROOT) :]
    assert result["cpuset"] == name
    assert result["before"] == "0"
    error = result["error"]
    assert error is not None
    assert "cannot bind to CPUs 1" in error
    assert "may use CPUs 0" in error
    assert f"cpuset {name} allows 0" in error
    assert result["after"] == "0"  # unchanged
    assert result["policy"] == "MPOL_DEFAULT"  # memory untouched too


def test_cpuset_that_would_narrow_the_request_is_refused(cpuset0: str) -> None:
    result = _run_in_cpuset(cpuset0, APPLY_CPU1.format(wanted="{0, 1}"))
    assert "cannot bind to CPUs 0-1" in result["error"]
    assert result["after"] == "0" and result["policy"] == "MPOL_DEFAULT"


def test_kernel_einval_on_one_thread_rolls_back_the_others(cpuset0: str) -> None:
    """The kernel itself refuses (EINVAL) for one thread, after another was bound.

    cgroup v1 places threads individually: a worker thread moves itself into
    the CPU-0 cpuset while the caller stays in the root cpuset (CPUs 0-1) but
    restricts its own mask to CPU 0, so both threads look "not pinned".  Binding
    to CPU 1 succeeds for the caller, then the kernel refuses it for the
    confined thread: the caller must be put back.
    """
    code = f"""
from pynumabind import _threads
stop = threading.Event()
moved = threading.Event()
def confined():
    with open({cpuset0 + "/tasks"!r}, "w") as handle:
        handle.write(str(threading.get_native_id()))
    moved.set()
    stop.wait()
os.sched_setaffinity(0, {{0}})
t = threading.Thread(target=confined); t.start(); moved.wait()
out = {{"main": threading.get_native_id(), "confined": t.native_id, "before": task_cpus()}}
try:
    _threads.bind_threads(frozenset({{1}}))
except _threads.ThreadAffinityError as exc:
    out.update(errno=exc.errno, tid=exc.tid, rolled_back=list(exc.rolled_back),
               failures=list(exc.restore_failures), message=str(exc))
out["after"] = task_cpus()
stop.set()
emit(out)
"""
    result, _ = run_child(code)
    main, confined = str(result["main"]), str(result["confined"])
    assert result["before"] == {main: "0", confined: "0"}
    assert result["errno"] == errno.EINVAL and result["tid"] == result["confined"]
    assert result["rolled_back"] == [result["main"]]  # had been bound to CPU 1
    assert result["failures"] == []
    assert "CPUs 1" in result["message"] and "EINVAL" in result["message"]
    assert result["after"] == result["before"]


def test_affinity_mask_from_the_parent_is_respected() -> None:
    def confine() -> None:
        os.sched_setaffinity(0, {0})

    result, _ = run_child(APPLY_CPU1.format(wanted="{1}"), preexec_fn=confine)
    assert result["before"] == "0"
    error = result["error"]
    assert error is not None
    assert "cannot bind to CPUs 1" in error and "CPUs 1 are not allowed here" in error
    assert "may use CPUs 0" in error and "affinity mask 0" in error
    assert result["after"] == "0"
    assert result["policy"] == "MPOL_DEFAULT"
