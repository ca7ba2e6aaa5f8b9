"""Child bodies of binding/test_bind.py: each binds a fresh interpreter and reports.

Run through :func:`childproc.run_in_child`, so the pytest process is never
left bound.  Each function returns what its test asserts on.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import proc as _proc
from pynumabind._os import threads as _threads
from pynumabind.binding import apply_plan
from pynumabind.errors import BindError
from pynumabind.model import MemoryPolicy, Plan

from ..support.childstate import cpus_allowed, task_cpus, thread_cpus


def plan(
    policy: str = "PREFERRED", cpus: Optional[Iterable[int]] = (1,), mems: Iterable[int] = (0,)
) -> Plan:
    return Plan(
        rank=0,
        gpu_info=None,
        cpus=None if cpus is None else frozenset(cpus),
        mems=frozenset(mems),
        policy=MemoryPolicy[policy],
    )


def policy_now() -> List[Any]:
    p = _libnuma.get_mempolicy()
    return [p.kernel_policy, sorted(p.nodes)]


class _Keep(logging.Handler):
    """Keeps (level, message) of every record of the pynumabind logger."""

    def __init__(self) -> None:
        super().__init__()
        self.records: List[Tuple[str, str]] = []
        logging.getLogger("pynumabind").addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage()))


def bind_cpu1_node0() -> Dict[str, Any]:
    b = apply_plan(plan())
    v = b.verify()
    return {
        "status": cpus_allowed(),
        "tasks": task_cpus(),
        "policy": policy_now(),
        "binding": b.to_dict(),
        "verify": v.to_dict(),
    }


def every_policy() -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    cases: Tuple[Tuple[str, Tuple[int, ...]], ...] = (
        ("BIND", (0,)),
        ("INTERLEAVE", (0,)),
        ("LOCAL", ()),
        ("PREFERRED", (0,)),
    )
    for policy, mems in cases:
        b = apply_plan(plan(policy, mems=mems))
        v = b.verify()
        out[policy] = [b.kernel_policy, policy_now(), v.ok, v.page_nodes, list(v.problems)]
        b.restore()
        out[policy].append(policy_now())
    b = apply_plan(plan("NONE", mems=()))
    out["NONE"] = [b.kernel_policy, policy_now(), b.verify().ok, b.memory_applied]
    b = apply_plan(plan("WEIGHTED_INTERLEAVE", mems=(0,)))
    v = b.verify()
    out["WEIGHTED_INTERLEAVE"] = [b.kernel_policy, policy_now(), v.ok, v.page_nodes]
    b.restore()
    return out


class OldKernelLib:
    """Linux < 5.14 (RHEL 8's 4.18, Ubuntu 20.04's 5.4) stores MPOL_LOCAL as
    MPOL_PREFERRED with an empty node mask and get_mempolicy reports it so.
    This kernel is newer: emulate that answer at the libnuma boundary."""

    def __init__(self, real_lib: Any) -> None:
        self.real_lib = real_lib

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real_lib, name)

    def get_mempolicy(self, mode: Any, mask: Any, maxnode: Any, addr: Any, flags: Any) -> int:
        result: int = self.real_lib.get_mempolicy(mode, mask, maxnode, addr, flags)
        if result == 0 and mode != _libnuma._ffi().NULL and mode[0] == _libnuma.MPOL_LOCAL:
            mode[0] = _libnuma.MPOL_PREFERRED
        return result


def local_on_an_old_kernel() -> Dict[str, Any]:
    _libnuma._state["lib"] = OldKernelLib(_libnuma.load())
    b = apply_plan(plan("LOCAL", mems=()))
    v = b.verify()
    read_back = b.to_dict()["policy_read_back"]
    return {"notes": list(b.notes), "verify": v.to_dict(), "mempolicy": read_back}


def threads_rebound_pinned_left() -> Dict[str, Any]:
    stop = threading.Event()
    tids: Dict[str, int] = {}

    def worker(name: str, pin: Optional[Iterable[int]] = None) -> None:
        if pin is not None:
            os.sched_setaffinity(0, pin)
        tids[name] = threading.get_native_id()
        stop.wait()

    ts = [
        threading.Thread(target=worker, args=("pool",)),
        threading.Thread(target=worker, args=("pinned", {0})),
    ]
    for t in ts:
        t.start()
    while len(tids) < 2:
        time.sleep(0.01)
    b = apply_plan(plan())
    late: Dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: late.update(policy=policy_now(), cpus=sorted(os.sched_getaffinity(0)))
    )
    t.start()
    t.join()
    out = {
        "tids": tids,
        "tasks": task_cpus(),
        "binding": b.to_dict(),
        "late": late,
        "left": list(b.threads_left_pinned),
        "bound": list(b.threads_bound),
    }
    stop.set()
    return out


def context_manager_restores() -> Dict[str, Any]:
    stop = threading.Event()
    with apply_plan(plan("BIND")) as b:
        inside = [cpus_allowed(), policy_now()]
        late = threading.Thread(target=stop.wait)
        late.start()  # inherits CPU 1
        late_tid = late.native_id
        assert late_tid is not None
        late_inside = thread_cpus(late_tid)
    after = [cpus_allowed(), policy_now(), thread_cpus(late_tid)]
    b.restore()  # idempotent
    stop.set()
    return {"inside": inside, "late_inside": late_inside, "after": after, "restored": b.restored}


def restore_leaves_a_pinned_thread() -> Dict[str, Any]:
    stop = threading.Event()
    tids: List[int] = []

    def pinned() -> None:
        os.sched_setaffinity(0, {1})
        tids.append(threading.get_native_id())
        stop.wait()

    t = threading.Thread(target=pinned)
    t.start()
    while not tids:
        time.sleep(0.01)
    b = apply_plan(plan("NONE", mems=()))
    b.restore()
    out = {"pinned": thread_cpus(tids[0]), "caller": cpus_allowed()}
    stop.set()
    return out


def restore_a_thread_started_during_the_scan() -> Dict[str, Any]:
    stop = threading.Event()
    real_list = _proc.list_thread_ids
    started: List[int] = []

    def list_and_spawn() -> List[int]:
        if not started and os.sched_getaffinity(0) == {1}:  # caller bound: CPU 1 is inherited
            t = threading.Thread(target=stop.wait)
            t.start()
            assert t.native_id is not None
            started.append(t.native_id)
        return real_list()

    _proc.list_thread_ids = list_and_spawn
    b = apply_plan(plan("NONE", mems=()))
    _proc.list_thread_ids = real_list
    seen = started[0] in [r.tid for r in b.threads]
    inside = thread_cpus(started[0])
    b.restore()
    out = {"seen": seen, "inside": inside, "after": thread_cpus(started[0])}
    stop.set()
    return out


def restore_a_previous_policy() -> Dict[str, Any]:
    _libnuma.set_mempolicy(_libnuma.MPOL_INTERLEAVE, {0})
    b = apply_plan(plan("BIND"))
    inside = policy_now()
    b.restore()
    return {"inside": inside, "after": policy_now()}


def restore_and_verify_from_another_thread() -> Dict[str, Any]:
    b = apply_plan(plan("BIND"))
    out: Dict[str, Any] = {}

    def other() -> None:
        try:
            b.restore()
        except BindError as exc:
            out["error"] = str(exc)
        out["verify"] = b.verify().to_dict()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    out["still_bound"] = cpus_allowed()
    return out


def verify_reports_mismatches() -> Dict[str, Any]:
    stop = threading.Event()
    pool = threading.Thread(target=stop.wait)
    pool.start()
    assert pool.native_id is not None
    b = apply_plan(plan("BIND"))
    os.sched_setaffinity(pool.native_id, {0})  # someone re-pins a bound thread
    _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)  # and resets the policy
    v = b.verify()
    stop.set()
    return {"verify": v.to_dict(), "pool": pool.native_id}


def cpus_none_leaves_affinity_alone() -> Dict[str, Any]:
    os.sched_setaffinity(0, {0})
    b = apply_plan(plan("BIND", cpus=None))
    return {
        "status": cpus_allowed(),
        "threads": b.to_dict()["threads"],
        "policy": policy_now(),
        "ok": b.verify().ok,
    }


def migrate_moves_pages() -> Dict[str, Any]:
    buf = mmap.mmap(-1, 64 * mmap.PAGESIZE)
    for i in range(64):
        buf[i * mmap.PAGESIZE] = 1
    b = apply_plan(plan("BIND"), migrate=True)
    return {
        "migrated": b.migrated,
        "not_moved": b.pages_not_moved,
        "nodes": sorted(set(_libnuma.page_nodes(buf))),
        "partial": b.partial,
    }


def one_info_line_per_bind() -> Dict[str, Any]:
    keep = _Keep()
    logging.getLogger("pynumabind").setLevel(logging.DEBUG)
    apply_plan(plan())
    return {"records": [r for r in keep.records if r[0] != "DEBUG"]}


def unreadable_thread_list() -> Dict[str, Any]:
    # No /proc (a chroot or minimal sandbox): a typed error, not FileNotFoundError.
    _proc.TASK_DIR = "/nonexistent/task"
    out: Dict[str, Any]
    try:
        apply_plan(plan())
        out = {"raised": None}
    except Exception as exc:
        out = {"raised": type(exc).__name__, "message": str(exc)}
    out["cpus"] = cpus_allowed()
    out["policy"] = policy_now()
    return out


def bind_from_launcher_environment() -> Dict[str, Any]:
    import pynumabind
    from pynumabind import planner
    from pynumabind.discovery import detect_topology

    # before binding; the count's reason names the variable it came from
    options = pynumabind.Options(
        rank=1, nprocs=2, mode="exclusive", nprocs_source="LOCAL_WORLD_SIZE"
    )
    expected = planner.plan(detect_topology(), options=options)
    binding = pynumabind.bind_current_process()
    assert binding.plan is not None
    return {
        "expected": expected.to_dict(),
        "plan": binding.plan.to_dict(),
        "status": cpus_allowed(),
        "verify": binding.verify().ok,
    }


def arguments_win_over_environment() -> Dict[str, Any]:
    import pynumabind

    binding = pynumabind.bind_current_process(0, policy="bind", cpus="0")
    assert binding.plan is not None
    return {
        "plan": binding.plan.to_dict(),
        "policy": binding.kernel_policy,
        "status": cpus_allowed(),
    }


def interleave_nodes_reach_the_planner() -> Dict[str, Any]:
    from pynumabind import bind_current_process
    from pynumabind.errors import ConfigError

    b = bind_current_process(0, policy="interleave", interleave_nodes="0", environ={})
    assert b.plan is not None
    out: Dict[str, Any] = {"policy": policy_now(), "mems": sorted(b.plan.mems)}
    b.restore()
    try:
        bind_current_process(0, policy="bind", interleave_nodes="0", environ={})
        out["error"] = None
    except ConfigError as exc:
        out["error"] = str(exc)
    out["after"] = policy_now()
    return out


def verify_flags_a_thread_the_bind_never_saw() -> Dict[str, Any]:
    stop = threading.Event()
    hidden = threading.Thread(target=stop.wait)
    hidden.start()
    real_list = _proc.list_thread_ids
    _proc.list_thread_ids = lambda: [t for t in real_list() if t != hidden.native_id]
    b = apply_plan(plan("NONE", mems=()))
    _proc.list_thread_ids = real_list
    v = b.verify()
    status = task_cpus()
    stop.set()
    return {"verify": v.to_dict(), "hidden": hidden.native_id, "status": status}


def verify_accepts_a_thread_pinned_elsewhere() -> Dict[str, Any]:
    stop = threading.Event()
    b = apply_plan(plan("NONE", mems=()))

    def pin_self() -> None:
        os.sched_setaffinity(0, {0})
        stop.wait()

    t = threading.Thread(target=pin_self)
    t.start()
    assert t.native_id is not None
    while os.sched_getaffinity(t.native_id) != {0}:
        time.sleep(0.01)
    v = b.verify()
    stop.set()
    return {"verify": v.to_dict()}


def empty_id_sets_in_json() -> Dict[str, Any]:
    from pynumabind.cli import _check
    from pynumabind.discovery import detect_topology

    b = apply_plan(plan("LOCAL", mems=()))
    out = {"binding": b.to_dict()}
    b.restore()
    snapshot = detect_topology(use_nvml=False).to_json(indent=None)
    out["check"] = _check.check_this_process(0, 1, {"policy": "none"}, snapshot).to_dict()
    return out


def restore_in_a_forked_child() -> Dict[str, Any]:
    stop = threading.Event()
    pool = threading.Thread(target=stop.wait)
    pool.start()
    assert pool.native_id is not None
    b = apply_plan(plan("NONE", mems=()))  # CPUs only: no thread check to hide behind
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            b.restore()
            message = "restored"
        except BindError as exc:
            message = str(exc)
        os.write(write, message.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode()
    out: Dict[str, Any] = {
        "child": child,
        "pool": thread_cpus(pool.native_id),
        "main": cpus_allowed(),
        "restored": b.restored,
    }
    b.restore()
    out["after"] = [cpus_allowed(), thread_cpus(pool.native_id)]
    stop.set()
    return out


def restores_in_reverse_order() -> Dict[str, Any]:
    a = apply_plan(plan("BIND", cpus=(1,)))
    b = apply_plan(plan("INTERLEAVE", cpus=(1,)))
    out: Dict[str, Any] = {}
    try:
        a.restore()
        out["refused"] = None
    except BindError as exc:
        out["refused"] = str(exc)
    out["after_refusal"] = [cpus_allowed(), policy_now(), a.restored]
    b.restore()
    out["after_b"] = [cpus_allowed(), policy_now()]
    a.restore()
    out["after_a"] = [cpus_allowed(), policy_now(), a.restored, b.restored]
    # Bindings that change nothing in common restore in any order.
    c = apply_plan(plan("NONE", cpus=(1,), mems=()))
    d = apply_plan(plan("BIND", cpus=None))
    c.restore()
    d.restore()
    out["unrelated"] = [cpus_allowed(), policy_now()]
    return out


def binds_are_serialised() -> Dict[str, Any]:
    real_list = _proc.list_thread_ids
    inside, release, b_done = threading.Event(), threading.Event(), threading.Event()
    first = threading.get_native_id()

    def list_and_pause() -> List[int]:
        if threading.get_native_id() == first and not inside.is_set():
            inside.set()
            release.wait(10)
        return real_list()

    _proc.list_thread_ids = list_and_pause
    bindings: Dict[str, Any] = {}

    def a() -> None:
        bindings["a"] = apply_plan(plan("NONE", mems=()))

    def b() -> None:
        inside.wait(10)
        bindings["b"] = apply_plan(plan("NONE", mems=()))
        b_done.set()

    tb = threading.Thread(target=b)
    tb.start()
    seen: Dict[str, bool] = {}

    def release_later() -> None:
        inside.wait(10)
        seen["b_finished_while_a_inside"] = b_done.wait(0.5)
        release.set()

    tr = threading.Thread(target=release_later)
    tr.start()
    a()  # thread A is the main thread; it pauses inside its bind
    tb.join()
    tr.join()
    return {
        "b_finished_while_a_inside": seen["b_finished_while_a_inside"],
        "both": sorted(bindings),
        "status": cpus_allowed(),
    }


def caller_narrowed_during_the_scan() -> Dict[str, Any]:
    stop = threading.Event()
    pool = threading.Thread(target=stop.wait)
    pool.start()
    assert pool.native_id is not None
    real_list = _proc.list_thread_ids

    def list_after_someone_narrows_the_caller() -> List[int]:
        os.sched_setaffinity(0, {0})
        return real_list()

    _proc.list_thread_ids = list_after_someone_narrows_the_caller
    out: Dict[str, Any]
    try:
        apply_plan(plan("BIND"))
        out = {"error": None}
    except BindError as exc:
        out = {"error": str(exc)}
    _proc.list_thread_ids = real_list
    out.update(pool=thread_cpus(pool.native_id), policy=policy_now())
    stop.set()
    return out


def churn() -> None:
    """Every scan finds a thread it has not seen, gone by the time it looks."""
    real_list = _proc.list_thread_ids
    fresh = iter(range(2**22 + 1, 2**23))  # above any pid_max: never a real thread
    _proc.list_thread_ids = lambda: [*real_list(), next(fresh)]


def scan_never_converges() -> Dict[str, Any]:
    churn()
    keep = _Keep()
    start = time.monotonic()
    b = apply_plan(plan())
    elapsed = time.monotonic() - start
    raised: Optional[str]
    try:
        apply_plan(plan(), on_error="raise")
        raised = None
    except BindError as exc:
        raised = str(exc)
    return {
        "binding": b.to_dict(),
        "elapsed": elapsed,
        "raised": raised,
        "warnings": [m for level, m in keep.records if level == "WARNING"],
        "status": cpus_allowed(),
    }


def rescan_time_limit() -> Dict[str, Any]:
    churn()
    real_thread_name = _proc.thread_name

    def slow_name(tid: int) -> Any:
        time.sleep(0.2)
        return real_thread_name(tid)

    _proc.thread_name = slow_name
    start = time.monotonic()
    scan = _threads.bind_threads(frozenset({1}), max_passes=1000, time_limit=0.5)
    return {
        "elapsed": time.monotonic() - start,
        "converged": scan.converged,
        "passes": scan.passes,
    }


def nobody_holds_leave_no_trace() -> Dict[str, Any]:
    import gc

    from pynumabind.binding import _apply

    tid = threading.get_native_id()
    held = apply_plan(plan(cpus=None))
    for _ in range(1000):
        apply_plan(plan(cpus=None))
    gc.collect()
    last = apply_plan(plan(cpus=None))
    index = _apply._STACK.policy[tid]
    assert held._undo is not None and last._undo is not None
    return {
        "size": len(index),
        "held": held._undo.seq in index,
        "last": last._undo.seq in index,
        "cpus": len(_apply._STACK.cpus),
    }


def printed_and_counted() -> Dict[str, Any]:
    """``str``, ``repr`` and ``cpu_count`` of a bind to CPU 1, and of one leaving CPUs alone."""
    one = apply_plan(plan())
    shown = {"str": str(one), "summary": one.summary(), "repr": repr(one), "count": one.cpu_count}
    one.restore()
    os.sched_setaffinity(0, {0, 1})
    untouched = apply_plan(plan("BIND", cpus=None))
    shown["untouched_count"] = untouched.cpu_count
    shown["affinity"] = sorted(os.sched_getaffinity(0))
    return shown


def second_bind_reads_environment_and_affinity_again() -> Dict[str, Any]:
    """Binds in one process, each after a change: os.environ and the affinity are read anew."""
    import pynumabind

    out: Dict[str, Any] = {}
    for key in ("PYNUMABIND_POLICY", "PYNUMABIND_CPUS", "PYNUMABIND_DISABLE", "LOCAL_RANK"):
        os.environ.pop(key, None)

    def bind(label: str, rank: Optional[int] = 0) -> None:
        b = pynumabind.bind_current_process(rank)
        plan = b.plan
        out[label] = {
            "disabled": b.disabled,
            "rank": None if plan is None else plan.rank,
            "policy": None if plan is None else plan.policy.value,
            "cpus": None if plan is None or plan.cpus is None else sorted(plan.cpus),
            "kernel": b.kernel_policy,
        }
        b.restore()

    bind("first")
    os.environ["PYNUMABIND_POLICY"] = "bind"
    bind("policy")
    os.environ["PYNUMABIND_CPUS"] = "1"
    bind("cpus")
    del os.environ["PYNUMABIND_CPUS"]
    os.sched_setaffinity(0, {0})  # the allowed CPUs shrink between binds
    bind("narrowed")
    os.sched_setaffinity(0, {0, 1})
    os.environ["PYNUMABIND_DISABLE"] = "1"
    bind("disabled")
    del os.environ["PYNUMABIND_DISABLE"]
    os.environb[b"LOCAL_RANK"] = b"0"  # set through the bytes view: the same environment
    bind("launcher", rank=None)
    return out
