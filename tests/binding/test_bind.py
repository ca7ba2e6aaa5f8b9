"""The binder (``apply_plan``/``Binding``) on the real kernel and libnuma.

Binding happens in child processes so the pytest process is never left
bound.  This machine: CPUs 0-1, one NUMA node (0).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from pathlib import Path

import pytest

from pynumabind import binding as binding_module
from pynumabind._os import libnuma as _libnuma
from pynumabind.binding import _apply, _verify
from pynumabind.discovery import detect_topology
from pynumabind.errors import BindError, ConfigError, PlanError
from pynumabind.model import MemoryPolicy, Plan

from ..support import child_cold
from ..support.childproc import run_in_child
from . import child_binding

#: The kernel's weighted-interleave weights (Linux 6.9+; this machine's is 6.18).
WEIGHTS = "/sys/kernel/mm/mempolicy/weighted_interleave"

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 0 not in _libnuma.get_mems_allowed(),
    reason="needs CPUs 0 and 1 and memory node 0",
)


def test_bind_cpu1_node0_reads_back_from_proc_and_get_mempolicy() -> None:
    result, _ = run_in_child(child_binding.bind_cpu1_node0)
    assert result["status"] == "1"
    assert set(result["tasks"].values()) == {"1"}
    assert result["policy"] == ["MPOL_PREFERRED", [0]]
    binding = result["binding"]
    assert binding["policy_read_back"] == {
        "kernel_policy": "MPOL_PREFERRED",
        "nodes": "0",
        "flags": 0,
    }
    assert binding["partial"] is False and binding["skipped"] == []
    assert binding["cpus"] == "1"
    verify = result["verify"]
    assert verify["ok"] is True, verify
    assert verify["memory_checked"] is True
    assert verify["page_nodes"] == [0] * binding_module.VERIFY_PAGES


def test_every_policy_reads_back() -> None:
    result, _ = run_in_child(child_binding.every_policy)
    for policy, mode in (("BIND", "MPOL_BIND"), ("INTERLEAVE", "MPOL_INTERLEAVE")):
        assert result[policy][:3] == [mode, [mode, [0]], True], result[policy]
        assert result[policy][3] == [0] * binding_module.VERIFY_PAGES
        assert result[policy][5] == ["MPOL_DEFAULT", []]
    assert result["LOCAL"][:3] == ["MPOL_LOCAL", ["MPOL_LOCAL", []], True]
    assert result["PREFERRED"][:3] == ["MPOL_PREFERRED", ["MPOL_PREFERRED", [0]], True]
    assert result["NONE"] == [None, ["MPOL_DEFAULT", []], True, False]
    # Weighted interleave (this kernel has it): its split judged over enough pages.
    weighted = ["MPOL_WEIGHTED_INTERLEAVE", ["MPOL_WEIGHTED_INTERLEAVE", [0]], True]
    assert result["WEIGHTED_INTERLEAVE"][:3] == weighted
    weight = int(Path(WEIGHTS, "node0").read_text())  # the kernel's own, read here
    pages = min(max(binding_module.VERIFY_PAGES, _verify.WEIGHTED_CYCLES * weight), 4096)
    assert result["WEIGHTED_INTERLEAVE"][3] == [0] * pages


def test_local_policy_verifies_on_kernels_that_report_it_as_empty_preferred() -> None:
    result, _ = run_in_child(child_binding.local_on_an_old_kernel)
    assert result["verify"]["ok"] is True, result["verify"]
    assert not any("reads back" in note for note in result["notes"]), result["notes"]
    assert result["mempolicy"]["kernel_policy"] == "MPOL_LOCAL"


def test_threads_rebound_pinned_left_and_policy_keepers_listed() -> None:
    result, _ = run_in_child(child_binding.threads_rebound_pinned_left)
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
    result, _ = run_in_child(child_binding.context_manager_restores)
    assert result["inside"] == ["1", ["MPOL_BIND", [0]]]
    assert result["late_inside"] == "1"
    assert result["after"] == ["0-1", ["MPOL_DEFAULT", []], "0-1"]
    assert result["restored"] is True


def test_restore_leaves_a_thread_already_pinned_to_the_bound_cpus_alone() -> None:
    # A thread pinned to exactly the plan's CPUs before the bind was not
    # changed by it; restore() must not mistake it for a thread started
    # after the bind and widen it to the caller's old mask.
    result, _ = run_in_child(child_binding.restore_leaves_a_pinned_thread)
    assert result == {"pinned": "1", "caller": "0-1"}


def test_restore_puts_back_a_thread_started_while_the_bind_scanned() -> None:
    # A thread started during the scan by an already bound thread inherits the
    # bound CPUs; the scan sees it on them, but restore() must still widen it.
    result, _ = run_in_child(child_binding.restore_a_thread_started_during_the_scan)
    assert result == {"seen": True, "inside": "1", "after": "0-1"}


def test_restore_restores_a_previous_non_default_policy() -> None:
    result, _ = run_in_child(child_binding.restore_a_previous_policy)
    assert result == {"inside": ["MPOL_BIND", [0]], "after": ["MPOL_INTERLEAVE", [0]]}


def test_restore_and_verify_from_another_thread() -> None:
    result, _ = run_in_child(child_binding.restore_and_verify_from_another_thread)
    assert "must run on thread" in result["error"]
    assert result["still_bound"] == "1"  # nothing half-restored
    verify = result["verify"]
    assert verify["memory_checked"] is False
    assert any("another thread" in note for note in verify["notes"])


def test_verify_reports_mismatches_without_raising() -> None:
    result, _ = run_in_child(child_binding.verify_reports_mismatches)
    verify = result["verify"]
    assert verify["ok"] is False
    problems = "\n".join(verify["problems"])
    assert f"thread {result['pool']}" in problems and "runs on CPUs 0, expected 1" in problems
    assert "memory policy is MPOL_DEFAULT" in problems


def test_cpus_none_leaves_affinity_alone() -> None:
    result, _ = run_in_child(child_binding.cpus_none_leaves_affinity_alone)
    assert result == {"status": "0", "threads": [], "policy": ["MPOL_BIND", [0]], "ok": True}


def test_migrate_moves_already_allocated_pages() -> None:
    result, _ = run_in_child(child_binding.migrate_moves_pages)
    assert result == {"migrated": True, "not_moved": 0, "nodes": [0], "partial": False}


@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_multiprocessing_workers_are_each_bound(method: str) -> None:
    from .binder_worker import bind_and_report

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
        "gpu_info": None,
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
    # A deliberate no-op, as mode advised's: not_bound says why.
    assert binding.not_bound == "disabled by PYNUMABIND_DISABLE=yes"
    assert binding.verify().ok
    binding.restore()  # nothing to undo
    assert (os.sched_getaffinity(0), _libnuma.get_mempolicy()) == before
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("pynumabind")]
    assert messages == [
        "pynumabind: binding disabled; nothing applied (disabled by PYNUMABIND_DISABLE=yes)"
    ]


def test_one_info_line_per_bind() -> None:
    result, _ = run_in_child(child_binding.one_info_line_per_bind)
    assert result["records"] == [
        [
            "INFO",
            "pynumabind: rank 0 GPU none CPUs 1 memory nodes 0 policy MPOL_PREFERRED "
            "threads 1 bound",
        ]
    ]


def test_kernel_refusal_becomes_a_bind_error_naming_cpus(monkeypatch) -> None:
    """How a (real, see test_cpuset) ThreadAffinityError is reported by apply_plan."""
    from pynumabind._os import threads as _threads

    def refuse(cpus, *, reference=None, max_passes=8, record=None, listed=None):
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
    result, _ = run_in_child(child_binding.unreadable_thread_list)
    assert result["raised"] == "BindError", result
    assert "/nonexistent/task" in result["message"]
    assert "nothing was changed" in result["message"]
    assert result["cpus"] == "0-1" and result["policy"] == ["MPOL_DEFAULT", []]


# ------------------------------------------- end to end: detect, plan, apply


def test_bind_current_process_from_launcher_environment() -> None:
    env = dict(os.environ, LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", PYNUMABIND_MODE="exclusive")
    env.pop("PYNUMABIND_DISABLE", None)
    result, _ = run_in_child(child_binding.bind_from_launcher_environment, env=env)
    assert result["plan"] == result["expected"]
    assert result["plan"]["rank"] == 1 and result["plan"]["mode"] == "exclusive"
    assert result["status"] == result["plan"]["cpus"]
    assert result["verify"] is True


def test_bind_current_process_arguments_win_over_environment() -> None:
    env = dict(os.environ, LOCAL_RANK="1", PYNUMABIND_POLICY="interleave", PYNUMABIND_CPUS="1")
    result, _ = run_in_child(child_binding.arguments_win_over_environment, env=env)
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
        from pynumabind import planner
        from pynumabind.discovery import _environ

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
    assert binding.applied is False and binding.threads == () and binding.kernel_policy is None
    assert binding.verify().ok and binding.verify().notes == (
        "nothing was applied; nothing to verify",
    )
    binding.restore()


def test_import_is_cheap_and_never_pulls_pynvml_or_numpy() -> None:
    result, _ = run_in_child(child_cold.import_pulls_no_pynvml_numpy_torch)
    assert result["loaded"] == []


def test_bind_current_process_passes_interleave_nodes_to_the_planner() -> None:
    result, _ = run_in_child(child_binding.interleave_nodes_reach_the_planner)
    assert result["policy"] == ["MPOL_INTERLEAVE", [0]]
    assert result["mems"] == [0]
    assert result["error"] and "interleave" in result["error"]
    assert result["after"] == ["MPOL_DEFAULT", []]


def test_verify_flags_a_live_thread_the_bind_never_saw() -> None:
    # A thread that escaped the scan (thread churn: it appeared after the last
    # pass) is still on the mask from before the bind.  verify() judges every
    # live thread that is not deliberately pinned, not only the ones it bound.
    result, _ = run_in_child(child_binding.verify_flags_a_thread_the_bind_never_saw)
    assert result["status"][str(result["hidden"])] == "0-1"  # really left behind
    verify = result["verify"]
    assert verify["ok"] is False
    assert any(f"thread {result['hidden']} escaped the binding" in p for p in verify["problems"]), (
        verify
    )


def test_verify_accepts_a_thread_pinned_elsewhere_after_the_bind() -> None:
    # Deliberately pinned (neither the plan's CPUs nor the pre-bind mask): not a problem.
    result, _ = run_in_child(child_binding.verify_accepts_a_thread_pinned_elsewhere)
    assert result["verify"]["ok"] is True, result["verify"]


def test_json_writes_an_empty_id_set_as_the_plan_does() -> None:
    # One form for an empty id set in all JSON: "" (Plan.to_dict), never "-".
    result, _ = run_in_child(child_binding.empty_id_sets_in_json)
    binding, check = result["binding"], result["check"]
    assert binding["plan"]["mems"] == ""
    assert binding["policy_nodes"] == "" and binding["policy_read_back"]["nodes"] == ""
    assert check["ok"] is True, check
    assert (check["mems"], check["page_nodes"]) == ("", "")


def test_restore_in_a_forked_child_is_refused_and_leaves_the_parent_bound() -> None:
    # Thread ids name the parent's threads: a child's restore() must not touch them.
    result, _ = run_in_child(child_binding.restore_in_a_forked_child)
    assert "must run in process" in result["child"] and "forked child" in result["child"]
    assert (result["main"], result["pool"]) == ("1", "1")  # the parent stayed bound
    assert result["restored"] is False
    assert result["after"] == ["0-1", "0-1"]  # and restores in its own process


def test_restores_go_in_reverse_order_of_the_binds() -> None:
    # bind A, bind B, A.restore(), B.restore() used to end with A's policy in
    # force, both saying restored=True.  Now A is refused until B is restored.
    result, _ = run_in_child(child_binding.restores_in_reverse_order)
    assert "newer binding" in result["refused"] and "restore it first" in result["refused"]
    assert result["after_refusal"] == ["1", ["MPOL_INTERLEAVE", [0]], False]
    assert result["after_b"] == ["1", ["MPOL_BIND", [0]]]
    assert result["after_a"] == ["0-1", ["MPOL_DEFAULT", []], True, True]
    assert result["unrelated"] == ["0-1", ["MPOL_DEFAULT", []]]


def test_binds_in_one_process_are_serialised() -> None:
    # Two threads binding at once read each other's half-applied masks as
    # "allowed" and "not pinned"; the second bind waits for the first.
    result, _ = run_in_child(child_binding.binds_are_serialised)
    assert result["b_finished_while_a_inside"] is False
    assert result["both"] == ["a", "b"] and result["status"] == "1"


def test_a_bind_that_leaves_the_calling_thread_unbound_is_an_error() -> None:
    # Someone narrows the caller's own mask while the bind scans: the scan would
    # call the caller "deliberately pinned" and return a binding that is not one.
    result, _ = run_in_child(child_binding.caller_narrowed_during_the_scan)
    assert result["error"] and "calling thread's own mask changed to 0" in result["error"]
    assert result["pool"] == "0-1"  # what the bind had changed was put back
    assert result["policy"] == ["MPOL_DEFAULT", []]


def test_a_scan_that_never_converges_is_a_partial_binding_with_a_skip() -> None:
    result, _ = run_in_child(child_binding.scan_never_converges)
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
    result, _ = run_in_child(child_binding.rescan_time_limit)
    assert result["converged"] is False
    assert result["passes"] < 10 and result["elapsed"] < 3, result


def test_bindings_nobody_holds_leave_no_trace_in_the_restore_stack() -> None:
    # Each journal that changed something enters the stack's index; one whose
    # Binding nobody holds leaves it at the next change of the stack.
    result, _ = run_in_child(child_binding.nobody_holds_leave_no_trace)
    assert result["size"] <= 3, result  # held, and at most the last two
    assert result["held"] and result["last"] and result["cpus"] == 0


def test_str_is_the_one_line_summary_and_repr_stays_short() -> None:
    """``print(binding)`` used to print the dataclass repr, about 1,500 characters."""
    result, _ = run_in_child(child_binding.printed_and_counted)
    assert result["str"] == result["summary"]
    assert result["str"] == (
        "pynumabind: rank 0 GPU none CPUs 1 memory nodes 0 policy MPOL_PREFERRED threads 1 bound"
    )
    assert result["repr"] == (
        "<Binding rank 0 GPU none CPUs 1 memory nodes 0 policy MPOL_PREFERRED threads 1 bound>"
    )


def test_cpu_count_is_the_cpus_the_worker_now_runs_on() -> None:
    result, _ = run_in_child(child_binding.printed_and_counted)
    assert result["count"] == 1  # bound to CPU 1
    # CPUs left alone: every CPU the thread may run on.
    assert result["untouched_count"] == len(result["affinity"]) == 2


def test_cpu_count_of_a_disabled_binding_counts_the_unchanged_affinity() -> None:
    binding = binding_module.bind_current_process(environ={"PYNUMABIND_DISABLE": "1"})
    assert binding.cpu_count == len(os.sched_getaffinity(0))
    assert str(binding) == binding.summary() and "\n" not in str(binding)


def test_the_private_journal_is_no_argument_of_binding() -> None:
    """The reference renders the signature; the undo journal is set after construction."""
    import inspect

    parameters = inspect.signature(binding_module.Binding).parameters
    assert "_undo" not in parameters and "plan" in parameters
    with pytest.raises(TypeError):
        binding_module.Binding(plan=None, applied=False, _undo=None)  # type: ignore[call-arg]


def test_a_second_bind_reads_the_environment_and_the_allowed_cpus_again() -> None:
    # Nothing a bind reads from the process or os.environ is kept between binds:
    # each one here follows a change made after the one before.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    result, _ = run_in_child(
        child_binding.second_bind_reads_environment_and_affinity_again, env=env
    )
    assert result["first"]["policy"] == "preferred" and result["first"]["cpus"] == [0, 1]
    assert result["policy"]["policy"] == "bind" and result["policy"]["kernel"] == "MPOL_BIND"
    assert result["cpus"]["cpus"] == [1] and result["cpus"]["policy"] == "bind"
    assert result["narrowed"]["cpus"] == [0]
    assert result["disabled"]["disabled"] is True and result["disabled"]["rank"] is None
    assert result["launcher"]["rank"] == 0 and result["launcher"]["policy"] == "bind"
