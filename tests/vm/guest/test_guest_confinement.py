"""A worker confined to node 0 that asks for node 1 gets a clear error, and nothing changes.

Two real confinements, each of a child process of its own (this pytest process stays free):

* a cgroup v2 cpuset (``cpuset.cpus=0-1``, ``cpuset.mems=0``) the child joins itself;
* ``sched_setaffinity(child_pid, {0, 1})`` done by the parent, as ``taskset -p`` would.

Inside, the child asks for node 1 three ways (planner override, a ready plan for node 1, a
memory policy outside ``cpuset.mems``) and reports the errors and its state after each, plus a
positive control (binding within the confinement works).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from ._guestlib import run_python

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP = CGROUP_ROOT / "pynumabind-node0"

_CHILD = """
import json, os, sys
mode = sys.argv[1]
if mode == "cgroup":
    with open(sys.argv[2] + "/cgroup.procs", "w") as handle:
        handle.write(str(os.getpid()))
else:
    sys.stdin.readline()  # the parent sets our affinity, then says go

from pynumabind import (
    MemoryPolicy, Plan, PynumabindError, apply_plan, bind_current_process,
    detect_topology,
)
from pynumabind._os import libnuma as _libnuma

def state():
    policy = _libnuma.get_mempolicy()
    return {"cpus": sorted(os.sched_getaffinity(0)), "policy": policy.kernel_policy}

def attempt(call):
    try:
        binding = call()
    except PynumabindError as exc:
        return {"error": type(exc).__name__, "message": str(exc),
                "is_value_error": isinstance(exc, ValueError), "after": state()}
    out = {"error": None, "partial": binding.partial,
           "skipped": [s.to_dict() for s in binding.skipped], "after": state()}
    binding.restore()
    return out

topology = detect_topology(use_nvml=False)
report = {
    "start": state(),
    "allowed_cpus": sorted(topology.allowed_cpus),
    "allowed_mems": sorted(topology.allowed_mems),
    "override": attempt(lambda: bind_current_process(0, nodes="1", environ={})),
    "plan_for_node1": attempt(lambda: apply_plan(Plan(
        rank=0, gpu_info=None, cpus=frozenset({2, 3}), mems=frozenset({1}),
        policy=MemoryPolicy.PREFERRED, node=1))),
    "mems_outside_raise": attempt(lambda: apply_plan(Plan(
        rank=0, gpu_info=None, cpus=frozenset({0, 1}), mems=frozenset({1}),
        policy=MemoryPolicy.BIND), on_error="raise")),
    "mems_outside_warn": attempt(lambda: apply_plan(Plan(
        rank=0, gpu_info=None, cpus=frozenset({0}), mems=frozenset({1}),
        policy=MemoryPolicy.BIND), on_error="warn")),
}
ok = bind_current_process(0, environ={})
check = ok.verify()
report["within"] = {"cpus": sorted(os.sched_getaffinity(0)), "mems": sorted(ok.plan.mems),
                    "verify_ok": check.ok, "pages": list(check.page_nodes)}
print(json.dumps(report))
"""


@pytest.fixture
def node0_cgroup() -> Iterator[Path]:
    """A cgroup v2 child group limited to node 0's CPUs and memory."""
    control = CGROUP_ROOT / "cgroup.subtree_control"
    if "cpuset" not in (CGROUP_ROOT / "cgroup.controllers").read_text().split():
        pytest.fail("the guest's cgroup2 has no cpuset controller")
    control.write_text("+cpuset")
    GROUP.mkdir(exist_ok=True)
    try:
        (GROUP / "cpuset.cpus").write_text("0-1")
        (GROUP / "cpuset.mems").write_text("0")
        assert (GROUP / "cpuset.cpus.effective").read_text().strip() == "0-1"
        assert (GROUP / "cpuset.mems.effective").read_text().strip() == "0"
        yield GROUP
    finally:
        for pid in (GROUP / "cgroup.procs").read_text().split():
            (CGROUP_ROOT / "cgroup.procs").write_text(pid)  # a straggler: move it out
        GROUP.rmdir()


def _check_confined_report(report: Dict[str, Any], *, cgroup: bool) -> None:
    assert report["start"] == {"cpus": [0, 1], "policy": "MPOL_DEFAULT"}
    assert report["allowed_cpus"] == [0, 1]
    assert report["allowed_mems"] == ([0] if cgroup else [0, 1, 2])

    # 1. The planner refuses node 1: names the node, its CPUs and the allowed ones.
    override = report["override"]
    assert override["error"] == "PlanError" and override["is_value_error"]
    message = override["message"]
    assert "node(s) 1" in message and "2-3" in message and "0-1" in message, message
    assert override["after"] == report["start"]

    # 2. A plan made elsewhere for node 1: the binder refuses and changes nothing.
    for_node1 = report["plan_for_node1"]
    assert for_node1["error"] == "BindError", for_node1
    message = for_node1["message"]
    assert "2-3" in message and "0-1" in message and "nothing was changed" in message, message
    if cgroup:
        assert "pynumabind-node0" in message, message  # names the cpuset that restricts it
    assert for_node1["after"] == report["start"]

    # 3. Memory outside the allowed mems.
    raised, warned = report["mems_outside_raise"], report["mems_outside_warn"]
    if cgroup:
        assert raised["error"] == "BindError", raised
        assert "rolled back" in raised["message"] and "EINVAL" in raised["message"], raised
        assert raised["after"] == report["start"]  # CPUs rolled back too
        assert warned["error"] is None and warned["partial"], warned
        (skipped,) = warned["skipped"]
        assert skipped["what"] == "memory policy" and skipped["errno"] == 22
        assert "cpuset.mems" in skipped["fix"] and "(0" in skipped["fix"], skipped
        assert warned["after"] == {"cpus": [0], "policy": "MPOL_DEFAULT"}  # CPUs kept
    else:  # affinity does not restrict memory: node 1 memory is fine
        assert raised["error"] is None and not raised["partial"], raised
        assert warned["error"] is None and not warned["partial"], warned

    # 4. Within the confinement, binding works.
    within = report["within"]
    assert within["cpus"] == [0, 1] and within["mems"] == [0], within
    assert within["verify_ok"] and set(within["pages"]) == {0}, within


def test_cgroup_cpuset_node0_refuses_node1(node0_cgroup: Path) -> None:
    report = run_python(_CHILD, ["cgroup", str(node0_cgroup)])
    _check_confined_report(report, cgroup=True)


def test_affinity_set_by_parent_refuses_node1() -> None:
    def confine(child: subprocess.Popen[str]) -> None:
        os.sched_setaffinity(child.pid, {0, 1})

    report = run_python(_CHILD, ["affinity"], before_start=confine)
    _check_confined_report(report, cgroup=False)
