"""The binder (``apply_plan``/``Binding``) on the real kernel and libnuma.

Binding happens in child processes so the pytest process is never left
bound.  This machine: CPUs 0-1, one NUMA node (0).
"""

from __future__ import annotations

import logging
import multiprocessing
import os

import pytest

from bindchild import run_child
from pynumabind import _apply, _libnuma
from pynumabind import binding as binding_module
from pynumabind.discovery import detect_topology
from pynumabind.errors import BindError, ConfigError, PlanError
from pynumabind.model import MemoryPolicy, Plan

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0 and 1 and memory node 0",
)

PLAN = """
from pynumabind import _libnuma
from pynumabind.binding import apply_plan
from pynumabind.errors import BindError
from pynumabind.model import MemoryPolicy, Plan
def plan(policy="PREFERRED", cpus=(1,), mems=(0,)):
    return Plan(rank=0, gpu=None, cpus=None if cpus is None else frozenset(cpus),
                mems=frozenset(mems), policy=MemoryPolicy[policy])
def policy_now():
    p = _libnuma.get_mempolicy()
    return [p.mode_name, sorted(p.nodes)]
"""


def test_bind_cpu1_node0_reads_back_from_proc_and_get_mempolicy() -> None:
    result, _ = run_child(
        PLAN
        + """
b = apply_plan(plan())
v = b.verify()
emit({"status": cpus_allowed(), "tasks": task_cpus(), "policy": policy_now(),
      "binding": b.to_dict(), "verify": v.to_dict()})
"""
    )
    assert result["status"] == "1"
    assert set(result["tasks"].values()) == {"1"}
    assert result["policy"] == ["MPOL_PREFERRED", [0]]
    binding = result["binding"]
    assert binding["mempolicy"] == {"mode": "MPOL_PREFERRED", "nodes": "0", "flags": 0}
    assert binding["partial"] is False and binding["skipped"] == []
    assert binding["cpus"] == "1"
    verify = result["verify"]
    assert verify["ok"] is True, verify
    assert verify["memory_checked"] is True
    assert verify["page_nodes"] == [0] * binding_module.VERIFY_PAGES


def test_every_policy_reads_back() -> None:
    result, _ = run_child(
        PLAN
        + """
out = {}
for policy, mems in (("BIND", (0,)), ("INTERLEAVE", (0,)), ("LOCAL", ()), ("PREFERRED", (0,))):
    b = apply_plan(plan(policy, mems=mems))
    v = b.verify()
    out[policy] = [b.policy_name, policy_now(), v.ok, v.page_nodes, list(v.problems)]
    b.restore()
    out[policy].append(policy_now())
b = apply_plan(plan("NONE", mems=()))
out["NONE"] = [b.policy_name, policy_now(), b.verify().ok, b.memory_applied]
emit(out)
"""
    )
    for policy, mode in (("BIND", "MPOL_BIND"), ("INTERLEAVE", "MPOL_INTERLEAVE")):
        assert result[policy][:3] == [mode, [mode, [0]], True], result[policy]
        assert result[policy][3] == [0] * binding_module.VERIFY_PAGES
        assert result[policy][5] == ["MPOL_DEFAULT", []]
    assert result["LOCAL"][:3] == ["MPOL_LOCAL", ["MPOL_LOCAL", []], True]
    assert result["PREFERRED"][:3] == ["MPOL_PREFERRED", ["MPOL_PREFERRED", [0]], True]
    assert result["NONE"] == [None, ["MPOL_DEFAULT", []], True, False]


OLD_KERNEL_LOCAL = """
# Linux < 5.14 (RHEL 8's 4.18, Ubuntu 20.04's 5.4) stores MPOL_LOCAL as
# MPOL_PREFERRED with an empty node mask and get_mempolicy reports it so.
# This kernel is newer: emulate that answer at the libnuma boundary.
real_lib = _libnuma.load()
class OldKernelLib:
    def __getattr__(self, name):
        return getattr(real_lib, name)
    def get_mempolicy(self, mode, mask, maxnode, addr, flags):
        result = real_lib.get_mempolicy(mode, mask, maxnode, addr, flags)
        if result == 0 and mode != _libnuma._ffi().NULL and mode[0] == _libnuma.MPOL_LOCAL:
            mode[0] = _libnuma.MPOL_PREFERRED
        return result
_libnuma._state["lib"] = OldKernelLib()
"""


def test_local_policy_verifies_on_kernels_that_report_it_as_empty_preferred() -> None:
    result, _ = run_child(
        PLAN
        + OLD_KERNEL_LOCAL
        + """
b = apply_plan(plan("LOCAL", mems=()))
v = b.verify()
emit({"notes": list(b.notes), "verify": v.to_dict(), "mempolicy": b.to_dict()["mempolicy"]})
"""
    )
    assert result["verify"]["ok"] is True, result["verify"]
    assert not any("reads back" in note for note in result["notes"]), result["notes"]
    assert result["mempolicy"]["mode"] == "MPOL_LOCAL"


def test_threads_rebound_pinned_left_and_policy_keepers_listed() -> None:
    result, _ = run_child(
        PLAN
        + """
stop = threading.Event()
tids = {}
def worker(name, pin=None):
    if pin is not None:
        os.sched_setaffinity(0, pin)
    tids[name] = threading.get_native_id()
    stop.wait()
ts = [threading.Thread(target=worker, args=("pool",)),
      threading.Thread(target=worker, args=("pinned", {0}))]
for t in ts: t.start()
while len(tids) < 2: time.sleep(0.01)
b = apply_plan(plan())
late = {}
t = threading.Thread(target=lambda: late.update(policy=policy_now(),
                                                cpus=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
out = {"tids": tids, "tasks": task_cpus(), "binding": b.to_dict(), "late": late,
       "left": list(b.threads_left_pinned), "bound": list(b.threads_bound)}
stop.set()
emit(out)
"""
    )
    tids, tasks, binding = result["tids"], result["tasks"], result["binding"]
    assert tasks[str(tids["pool"])] == "1"
    assert tasks[str(tids["pinned"])] == "0"
    assert result["left"] == [tids["pinned"]]
    assert tids["pool"] in result["bound"] and binding["thread_id"] in result["bound"]
    # Both existing threads keep their own memory policy and are listed.
    assert sorted(binding["threads_keeping_policy"]) == sorted(tids.values())
    # A thread started after the bind inherits CPUs and policy.
    assert result["late"] == {"policy": ["MPOL_PREFERRED", [0]], "cpus": [1]}


def test_context_manager_restores_everything() -> None:
    result, _ = run_child(
        PLAN
        + """
stop = threading.Event()
with apply_plan(plan("BIND")) as b:
    inside = [cpus_allowed(), policy_now()]
    late = threading.Thread(target=stop.wait)
    late.start()  # inherits CPU 1
    late_tid = late.native_id
    late_inside = cpus_allowed(f"/proc/self/task/{late_tid}/status")
after = [cpus_allowed(), policy_now(), cpus_allowed(f"/proc/self/task/{late_tid}/status")]
b.restore()  # idempotent
stop.set()
emit({"inside": inside, "late_inside": late_inside, "after": after, "restored": b.restored})
"""
    )
    assert result["inside"] == ["1", ["MPOL_BIND", [0]]]
    assert result["late_inside"] == "1"
    assert result["after"] == ["0-1", ["MPOL_DEFAULT", []], "0-1"]
    assert result["restored"] is True


def test_restore_leaves_a_thread_already_pinned_to_the_bound_cpus_alone() -> None:
    # A thread pinned to exactly the plan's CPUs before the bind was not
    # changed by it; restore() must not mistake it for a thread started
    # after the bind and widen it to the caller's old mask.
    result, _ = run_child(
        PLAN
        + """
stop = threading.Event()
tids = []
def pinned():
    os.sched_setaffinity(0, {1})
    tids.append(threading.get_native_id())
    stop.wait()
t = threading.Thread(target=pinned)
t.start()
while not tids: time.sleep(0.01)
b = apply_plan(plan("NONE", mems=()))
b.restore()
out = {"pinned": cpus_allowed(f"/proc/self/task/{tids[0]}/status"), "caller": cpus_allowed()}
stop.set()
emit(out)
"""
    )
    assert result == {"pinned": "1", "caller": "0-1"}


def test_restore_puts_back_a_thread_started_while_the_bind_scanned() -> None:
    # A thread started during the scan by an already bound thread inherits the
    # bound CPUs; the scan sees it on them, but restore() must still widen it.
    result, _ = run_child(
        PLAN
        + """
from pynumabind import _proc, _threads
stop = threading.Event()
real_list = _proc.list_thread_ids
started = []
def list_and_spawn():
    if not started and os.sched_getaffinity(0) == {1}:  # caller bound: CPU 1 is inherited
        t = threading.Thread(target=stop.wait)
        t.start()
        started.append(t.native_id)
    return real_list()
_proc.list_thread_ids = list_and_spawn
b = apply_plan(plan("NONE", mems=()))
_proc.list_thread_ids = real_list
seen = started[0] in [r.tid for r in b.threads]
inside = cpus_allowed(f"/proc/self/task/{started[0]}/status")
b.restore()
out = {"seen": seen, "inside": inside,
       "after": cpus_allowed(f"/proc/self/task/{started[0]}/status")}
stop.set()
emit(out)
"""
    )
    assert result == {"seen": True, "inside": "1", "after": "0-1"}


def test_restore_restores_a_previous_non_default_policy() -> None:
    result, _ = run_child(
        PLAN
        + """
_libnuma.set_mempolicy(_libnuma.MPOL_INTERLEAVE, {0})
b = apply_plan(plan("BIND"))
inside = policy_now()
b.restore()
emit({"inside": inside, "after": policy_now()})
"""
    )
    assert result == {"inside": ["MPOL_BIND", [0]], "after": ["MPOL_INTERLEAVE", [0]]}


def test_restore_and_verify_from_another_thread() -> None:
    result, _ = run_child(
        PLAN
        + """
b = apply_plan(plan("BIND"))
out = {}
def other():
    try:
        b.restore()
    except BindError as exc:
        out["error"] = str(exc)
    out["verify"] = b.verify().to_dict()
t = threading.Thread(target=other); t.start(); t.join()
out["still_bound"] = cpus_allowed()
emit(out)
"""
    )
    assert "must run on thread" in result["error"]
    assert result["still_bound"] == "1"  # nothing half-restored
    verify = result["verify"]
    assert verify["memory_checked"] is False
    assert any("another thread" in note for note in verify["notes"])


def test_verify_reports_mismatches_without_raising() -> None:
    result, _ = run_child(
        PLAN
        + """
stop = threading.Event()
pool = threading.Thread(target=stop.wait); pool.start()
b = apply_plan(plan("BIND"))
os.sched_setaffinity(pool.native_id, {0})      # someone re-pins a bound thread
_libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)  # and resets the policy
v = b.verify()
stop.set()
emit({"verify": v.to_dict(), "pool": pool.native_id})
"""
    )
    verify = result["verify"]
    assert verify["ok"] is False
    problems = "\n".join(verify["problems"])
    assert f"thread {result['pool']}" in problems and "runs on CPUs 0, expected 1" in problems
    assert "memory policy is MPOL_DEFAULT" in problems


def test_cpus_none_leaves_affinity_alone() -> None:
    result, _ = run_child(
        PLAN
        + """
os.sched_setaffinity(0, {0})
b = apply_plan(plan("BIND", cpus=None))
emit({"status": cpus_allowed(), "threads": b.to_dict()["threads"], "policy": policy_now(),
      "ok": b.verify().ok})
"""
    )
    assert result == {"status": "0", "threads": [], "policy": ["MPOL_BIND", [0]], "ok": True}


def test_migrate_moves_already_allocated_pages() -> None:
    result, _ = run_child(
        PLAN
        + """
import mmap
buf = mmap.mmap(-1, 64 * mmap.PAGESIZE)
for i in range(64):
    buf[i * mmap.PAGESIZE] = 1
b = apply_plan(plan("BIND"), migrate=True)
emit({"migrated": b.migrated, "not_moved": b.pages_not_moved,
      "nodes": sorted(set(_libnuma.page_nodes(buf))), "partial": b.partial})
"""
    )
    assert result == {"migrated": True, "not_moved": 0, "nodes": [0], "partial": False}


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_multiprocessing_workers_are_each_bound(method: str) -> None:
    from binder_worker import bind_and_report

    context = multiprocessing.get_context(method)
    queue = context.Queue()
    workers = [context.Process(target=bind_and_report, args=(cpu, queue)) for cpu in (0, 1)]
    for worker in workers:
        worker.start()
    reports = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    by_cpu = {r.get("cpus"): r for r in reports}
    assert set(by_cpu) == {"0", "1"}, reports
    for report in reports:
        assert report["policy"] == "MPOL_PREFERRED" and report["nodes"] == [0], report
        assert report["verify_ok"] is True
        assert report["pid"] != os.getpid()
    assert os.sched_getaffinity(0) == {0, 1}  # the test process stayed unbound


# ----------------------------------------------- in-process, nothing applied


def _plan(**changes) -> Plan:
    fields = {
        "rank": 0,
        "gpu": None,
        "cpus": frozenset({1}),
        "mems": frozenset({0}),
        "policy": MemoryPolicy.PREFERRED,
    }
    fields.update(changes)
    return Plan(**fields)


def test_invalid_on_error_is_a_config_error_before_anything_happens() -> None:
    with pytest.raises(ConfigError, match="on_error 'ignore'"):
        binding_module.apply_plan(_plan(), on_error="ignore")
    with pytest.raises(ConfigError, match="on_error"):
        binding_module.bind_current_process(0, on_error="explode", environ={})
    assert os.sched_getaffinity(0) == {0, 1}


@pytest.mark.parametrize("policy", [MemoryPolicy.BIND, MemoryPolicy.PREFERRED])
def test_policy_without_nodes_is_a_plan_error(policy: MemoryPolicy) -> None:
    with pytest.raises(PlanError, match="names no memory nodes"):
        binding_module.apply_plan(_plan(policy=policy, mems=frozenset()))
    assert os.sched_getaffinity(0) == {0, 1}


def test_empty_cpu_set_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="empty CPU set"):
        binding_module.apply_plan(_plan(cpus=frozenset()))


@pytest.mark.parametrize(
    ("preferred_many", "mode", "nodes", "noted"),
    [
        (True, _libnuma.MPOL_PREFERRED_MANY, {0, 2}, None),
        (False, _libnuma.MPOL_PREFERRED, {0}, "Linux < 5.15"),
        (None, _libnuma.MPOL_PREFERRED, {0}, "could not be probed"),
    ],
)
def test_preferred_on_several_nodes(monkeypatch, preferred_many, mode, nodes, noted) -> None:
    probed = {_libnuma.MPOL_PREFERRED_MANY: preferred_many}
    monkeypatch.setattr(_libnuma, "supports_mode", probed.__getitem__)
    request = _apply.policy_request(_plan(mems=frozenset({0, 2})))
    got_mode, got_nodes, note = request.mode, request.nodes, request.note
    assert (got_mode, got_nodes) == (mode, frozenset(nodes))
    if noted is None:
        assert note is None
    else:
        assert noted in note and "preferring node 0 only" in note


def test_disabled_by_environment_is_a_logged_no_op(caplog) -> None:
    caplog.set_level(logging.INFO, logger="pynumabind")
    before = os.sched_getaffinity(0), _libnuma.get_mempolicy()
    binding = binding_module.bind_current_process(environ={"PYNUMABIND_DISABLE": "yes"})
    assert binding.disabled and not binding.applied and binding.plan is None
    assert binding.notes == ("disabled by PYNUMABIND_DISABLE=yes",)
    assert binding.verify().ok
    binding.restore()  # nothing to undo
    assert (os.sched_getaffinity(0), _libnuma.get_mempolicy()) == before
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("pynumabind")]
    assert messages == [
        "pynumabind: binding disabled; nothing applied (disabled by PYNUMABIND_DISABLE=yes)"
    ]


def test_one_info_line_per_bind() -> None:
    result, _ = run_child(
        PLAN
        + """
records = []
class Keep(logging.Handler):
    def emit(self, record): records.append((record.levelname, record.getMessage()))
logging.getLogger("pynumabind").addHandler(Keep())
logging.getLogger("pynumabind").setLevel(logging.DEBUG)
apply_plan(plan())
emit({"records": [r for r in records if r[0] != "DEBUG"]})
"""
    )
    assert result["records"] == [
        [
            "INFO",
            "pynumabind: rank 0 GPU none CPUs 1 memory nodes 0 policy MPOL_PREFERRED "
            "threads 1 bound",
        ]
    ]


def test_kernel_refusal_becomes_a_bind_error_naming_cpus(monkeypatch) -> None:
    """How a (real, see test_cpuset) ThreadAffinityError is reported by apply_plan."""
    from pynumabind import _threads

    def refuse(cpus, *, reference=None, max_passes=8, record=None):
        raise _threads.ThreadAffinityError(22, 4242, cpus, (4241,), ())

    monkeypatch.setattr(_threads, "bind_threads", refuse)
    with pytest.raises(BindError) as info:
        binding_module.apply_plan(_plan())
    message = str(info.value)
    assert "cannot bind to CPUs 1" in message and "EINVAL" in message
    assert "may use CPUs 0-1" in message and "nothing was changed" in message
    assert isinstance(info.value.__cause__, _threads.ThreadAffinityError)
    assert _libnuma.get_mempolicy().mode == _libnuma.MPOL_DEFAULT


def test_unreadable_thread_list_is_a_bind_error_and_changes_nothing() -> None:
    # No /proc (a chroot or minimal sandbox): a typed error, not FileNotFoundError.
    result, _ = run_child(
        PLAN
        + """
from pynumabind import _proc, _threads
_proc.TASK_DIR = "/nonexistent/task"
try:
    apply_plan(plan())
    out = {"raised": None}
except Exception as exc:
    out = {"raised": type(exc).__name__, "message": str(exc)}
out["cpus"] = cpus_allowed()
out["policy"] = policy_now()
emit(out)
"""
    )
    assert result["raised"] == "BindError", result
    assert "/nonexistent/task" in result["message"]
    assert "nothing was changed" in result["message"]
    assert result["cpus"] == "0-1" and result["policy"] == ["MPOL_DEFAULT", []]


# ------------------------------------------- end to end: detect, plan, apply


def test_bind_current_process_from_launcher_environment() -> None:
    env = dict(os.environ, LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", PYNUMABIND_MODE="exclusive")
    env.pop("PYNUMABIND_DISABLE", None)
    result, _ = run_child(
        """
import pynumabind
from pynumabind import planner
from pynumabind.discovery import detect_topology
expected = planner.plan(detect_topology(), 1, 2, mode="exclusive")  # before binding
binding = pynumabind.bind_current_process()
emit({"expected": expected.to_dict(), "plan": binding.plan.to_dict(),
      "status": cpus_allowed(), "verify": binding.verify().ok})
""",
        env=env,
    )
    assert result["plan"] == result["expected"]
    assert result["plan"]["rank"] == 1 and result["plan"]["mode"] == "exclusive"
    assert result["status"] == result["plan"]["cpus"]
    assert result["verify"] is True


def test_bind_current_process_arguments_win_over_environment() -> None:
    env = dict(os.environ, LOCAL_RANK="1", PYNUMABIND_MEMORY="interleave", PYNUMABIND_CPUS="1")
    result, _ = run_child(
        """
import pynumabind
binding = pynumabind.bind_current_process(0, memory="bind", cpus="0")
emit({"plan": binding.plan.to_dict(), "policy": binding.policy_name, "status": cpus_allowed()})
""",
        env=env,
    )
    assert result["plan"]["rank"] == 0
    assert result["plan"]["policy"] == "bind" and result["policy"] == "MPOL_BIND"
    assert result["plan"]["cpus"] == "0" and result["status"] == "0"


@pytest.mark.parametrize(
    ("variables", "error", "needles"),
    [
        ({"PYNUMABIND_NODES": "0-"}, ConfigError, ["PYNUMABIND_NODES='0-'"]),
        ({"PYNUMABIND_CPUS": "$(reboot)"}, ConfigError, ["PYNUMABIND_CPUS='$(reboot)'"]),
        ({"PYNUMABIND_NODES": "7"}, PlanError, ["node(s) 7", "nodes from PYNUMABIND_NODES"]),
        ({"PYNUMABIND_CPUS": "1;1;1", "LOCAL_RANK": "0"}, None, []),
    ],
)
def test_bad_environment_overrides_name_their_variable(variables, error, needles) -> None:
    if error is None:  # a valid per-rank form: planned, not applied here
        from pynumabind import _environ, planner

        config = _environ.resolve({"LOCAL_RANK": "0", **variables})
        assert planner.plan_for(detect_topology(), config).cpus == frozenset({1})
        return
    before = os.sched_getaffinity(0), _libnuma.get_mempolicy()
    with pytest.raises(error) as info:
        binding_module.bind_current_process(environ={"LOCAL_RANK": "0", **variables})
    for needle in needles:
        assert needle in str(info.value)
    assert (os.sched_getaffinity(0), _libnuma.get_mempolicy()) == before  # nothing applied


def test_nothing_to_apply_is_not_applied() -> None:
    binding = binding_module.apply_plan(
        _plan(cpus=None, mems=frozenset(), policy=MemoryPolicy.NONE)
    )
    assert binding.applied is False and binding.threads == () and binding.policy_mode is None
    assert binding.verify().ok and binding.verify().notes == (
        "nothing was applied; nothing to verify",
    )
    binding.restore()


def test_import_is_cheap_and_never_pulls_pynvml_or_numpy() -> None:
    result, _ = run_child(
        """
import pynumabind
pynumabind.bind_current_process, pynumabind.apply_plan, pynumabind.Binding
emit({"loaded": sorted(m for m in ("pynvml", "numpy", "torch") if m in sys.modules)})
"""
    )
    assert result["loaded"] == []


def test_bind_current_process_passes_interleave_nodes_to_the_planner() -> None:
    result, _ = run_child(
        PLAN
        + """
from pynumabind import bind_current_process
from pynumabind.errors import ConfigError
b = bind_current_process(0, memory="interleave", interleave_nodes="0", environ={})
out = {"policy": policy_now(), "mems": sorted(b.plan.mems)}
b.restore()
try:
    bind_current_process(0, memory="bind", interleave_nodes="0", environ={})
    out["error"] = None
except ConfigError as exc:
    out["error"] = str(exc)
out["after"] = policy_now()
emit(out)
"""
    )
    assert result["policy"] == ["MPOL_INTERLEAVE", [0]]
    assert result["mems"] == [0]
    assert result["error"] and "interleave" in result["error"]
    assert result["after"] == ["MPOL_DEFAULT", []]


def test_verify_flags_a_live_thread_the_bind_never_saw() -> None:
    # A thread that escaped the scan (thread churn: it appeared after the last
    # pass) is still on the mask from before the bind.  verify() judges every
    # live thread that is not deliberately pinned, not only the ones it bound.
    result, _ = run_child(
        PLAN
        + """
from pynumabind import _proc, _threads
stop = threading.Event()
hidden = threading.Thread(target=stop.wait); hidden.start()
real_list = _proc.list_thread_ids
_proc.list_thread_ids = lambda: [t for t in real_list() if t != hidden.native_id]
b = apply_plan(plan("NONE", mems=()))
_proc.list_thread_ids = real_list
v = b.verify()
status = task_cpus()
stop.set()
emit({"verify": v.to_dict(), "hidden": hidden.native_id, "status": status})
"""
    )
    assert result["status"][str(result["hidden"])] == "0-1"  # really left behind
    verify = result["verify"]
    assert verify["ok"] is False
    assert any(f"thread {result['hidden']} escaped the binding" in p for p in verify["problems"]), (
        verify
    )


def test_verify_accepts_a_thread_pinned_elsewhere_after_the_bind() -> None:
    # Deliberately pinned (neither the plan's CPUs nor the pre-bind mask): not a problem.
    result, _ = run_child(
        PLAN
        + """
stop = threading.Event()
b = apply_plan(plan("NONE", mems=()))
def pin_self():
    os.sched_setaffinity(0, {0})
    stop.wait()
t = threading.Thread(target=pin_self); t.start()
while os.sched_getaffinity(t.native_id) != {0}: time.sleep(0.01)
v = b.verify()
stop.set()
emit({"verify": v.to_dict()})
"""
    )
    assert result["verify"]["ok"] is True, result["verify"]


def test_json_writes_an_empty_id_set_as_the_plan_does() -> None:
    # One form for an empty id set in all JSON: "" (Plan.to_dict), never "-".
    result, _ = run_child(
        PLAN
        + """
from pynumabind import _cli_check
from pynumabind.discovery import detect_topology
b = apply_plan(plan("LOCAL", mems=()))
out = {"binding": b.to_dict()}
b.restore()
snapshot = detect_topology(use_nvml=False).to_json(indent=None)
out["check"] = _cli_check.check_this_process(0, 1, {"memory": "none"}, snapshot).to_dict()
emit(out)
"""
    )
    binding, check = result["binding"], result["check"]
    assert binding["plan"]["mems"] == ""
    assert binding["policy_nodes"] == "" and binding["mempolicy"]["nodes"] == ""
    assert check["ok"] is True, check
    assert (check["mems"], check["page_nodes"]) == ("", "")


def test_restore_in_a_forked_child_is_refused_and_leaves_the_parent_bound() -> None:
    # Thread ids name the parent's threads: a child's restore() must not touch them.
    result, _ = run_child(
        PLAN
        + """
stop = threading.Event()
pool = threading.Thread(target=stop.wait); pool.start()
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
out = {"child": child, "pool": cpus_allowed(f"/proc/self/task/{pool.native_id}/status"),
       "main": cpus_allowed(), "restored": b.restored}
b.restore()
out["after"] = [cpus_allowed(), cpus_allowed(f"/proc/self/task/{pool.native_id}/status")]
stop.set()
emit(out)
"""
    )
    assert "must run in process" in result["child"] and "forked child" in result["child"]
    assert (result["main"], result["pool"]) == ("1", "1")  # the parent stayed bound
    assert result["restored"] is False
    assert result["after"] == ["0-1", "0-1"]  # and restores in its own process


def test_restores_go_in_reverse_order_of_the_binds() -> None:
    # bind A, bind B, A.restore(), B.restore() used to end with A's policy in
    # force, both saying restored=True.  Now A is refused until B is restored.
    result, _ = run_child(
        PLAN
        + """
a = apply_plan(plan("BIND", cpus=(1,)))
b = apply_plan(plan("INTERLEAVE", cpus=(1,)))
out = {}
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
emit(out)
"""
    )
    assert "newer binding" in result["refused"] and "restore it first" in result["refused"]
    assert result["after_refusal"] == ["1", ["MPOL_INTERLEAVE", [0]], False]
    assert result["after_b"] == ["1", ["MPOL_BIND", [0]]]
    assert result["after_a"] == ["0-1", ["MPOL_DEFAULT", []], True, True]
    assert result["unrelated"] == ["0-1", ["MPOL_DEFAULT", []]]


def test_binds_in_one_process_are_serialised() -> None:
    # Two threads binding at once read each other's half-applied masks as
    # "allowed" and "not pinned"; the second bind waits for the first.
    result, _ = run_child(
        PLAN
        + """
from pynumabind import _proc, _threads
real_list = _proc.list_thread_ids
inside, release, b_done = threading.Event(), threading.Event(), threading.Event()
first = threading.get_native_id()
def list_and_pause():
    if threading.get_native_id() == first and not inside.is_set():
        inside.set()
        release.wait(10)
    return real_list()
_proc.list_thread_ids = list_and_pause
bindings = {}
def a():
    bindings["a"] = apply_plan(plan("NONE", mems=()))
def b():
    inside.wait(10)
    bindings["b"] = apply_plan(plan("NONE", mems=()))
    b_done.set()
tb = threading.Thread(target=b); tb.start()
seen = {}
def release_later():
    inside.wait(10)
    seen["b_finished_while_a_inside"] = b_done.wait(0.5)
    release.set()
tr = threading.Thread(target=release_later); tr.start()
a()  # thread A is the main thread; it pauses inside its bind
tb.join(); tr.join()
emit({"b_finished_while_a_inside": seen["b_finished_while_a_inside"],
      "both": sorted(bindings), "status": cpus_allowed()})
"""
    )
    assert result["b_finished_while_a_inside"] is False
    assert result["both"] == ["a", "b"] and result["status"] == "1"


def test_a_bind_that_leaves_the_calling_thread_unbound_is_an_error() -> None:
    # Someone narrows the caller's own mask while the bind scans: the scan would
    # call the caller "deliberately pinned" and return a binding that is not one.
    result, _ = run_child(
        PLAN
        + """
from pynumabind import _proc, _threads
stop = threading.Event()
pool = threading.Thread(target=stop.wait); pool.start()
real_list = _proc.list_thread_ids
def list_after_someone_narrows_the_caller():
    os.sched_setaffinity(0, {0})
    return real_list()
_proc.list_thread_ids = list_after_someone_narrows_the_caller
try:
    apply_plan(plan("BIND"))
    out = {"error": None}
except BindError as exc:
    out = {"error": str(exc)}
_proc.list_thread_ids = real_list
out.update(pool=cpus_allowed(f"/proc/self/task/{pool.native_id}/status"), policy=policy_now())
stop.set()
emit(out)
"""
    )
    assert result["error"] and "calling thread's own mask changed to 0" in result["error"]
    assert result["pool"] == "0-1"  # what the bind had changed was put back
    assert result["policy"] == ["MPOL_DEFAULT", []]


CHURN = """
from pynumabind import _proc, _threads
real_list = _proc.list_thread_ids
fresh = iter(range(2**22 + 1, 2**23))  # above any pid_max: never a real thread
# Every scan finds a thread it has not seen, gone by the time it looks (churn).
_proc.list_thread_ids = lambda: real_list() + [next(fresh)]
"""


def test_a_scan_that_never_converges_is_a_partial_binding_with_a_skip() -> None:
    result, _ = run_child(
        PLAN
        + CHURN
        + """
records = []
class Keep(logging.Handler):
    def emit(self, record): records.append((record.levelname, record.getMessage()))
logging.getLogger("pynumabind").addHandler(Keep())
start = time.monotonic()
b = apply_plan(plan())
elapsed = time.monotonic() - start
try:
    apply_plan(plan(), on_error="raise")
    raised = None
except BindError as exc:
    raised = str(exc)
emit({"binding": b.to_dict(), "elapsed": elapsed, "raised": raised,
      "warnings": [m for level, m in records if level == "WARNING"], "status": cpus_allowed()})
"""
    )
    binding = result["binding"]
    assert binding["threads_converged"] is False
    assert binding["partial"] is True
    assert [s["what"] for s in binding["skipped"]] == ["CPU affinity of late threads"]
    assert "kept appearing" in binding["skipped"][0]["reason"]
    assert "bind first thing in the worker" in binding["skipped"][0]["fix"]
    assert len(result["warnings"]) == 1 and "kept appearing" in result["warnings"][0]
    assert result["elapsed"] < 5
    assert "rolled back" in result["raised"]  # on_error="raise": nothing kept
    assert result["status"] == "1"  # ... of the second bind; the first still holds


def test_a_rescan_stops_at_its_time_limit() -> None:
    result, _ = run_child(
        CHURN
        + """
real_handle_name = _proc.thread_name
def slow_name(tid):
    time.sleep(0.2)
    return real_handle_name(tid)
_proc.thread_name = slow_name
start = time.monotonic()
scan = _threads.bind_threads(frozenset({1}), max_passes=1000, time_limit=0.5)
emit({"elapsed": time.monotonic() - start, "converged": scan.converged, "passes": scan.passes})
"""
    )
    assert result["converged"] is False
    assert result["passes"] < 10 and result["elapsed"] < 3, result


def test_bindings_nobody_holds_leave_no_trace_in_the_restore_stack() -> None:
    # Each journal that changed something enters the stack's index; one whose
    # Binding nobody holds leaves it at the next change of the stack.
    result, _ = run_child(
        PLAN
        + """
import gc
from pynumabind import _apply
tid = threading.get_native_id()
held = apply_plan(plan(cpus=None))
for _ in range(1000):
    apply_plan(plan(cpus=None))
gc.collect()
last = apply_plan(plan(cpus=None))
index = _apply._STACK.policy[tid]
emit({"size": len(index), "held": held._undo.seq in index, "last": last._undo.seq in index,
      "cpus": len(_apply._STACK.cpus)})
"""
    )
    assert result["size"] <= 3, result  # held, and at most the last two
    assert result["held"] and result["last"] and result["cpus"] == 0
