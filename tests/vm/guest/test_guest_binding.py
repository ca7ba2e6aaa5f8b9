"""The binder on a real multi-NUMA kernel: CPUs, memory policies, migration, restore.

Runs inside the guest booted with ``harness.STANDARD_TOPOLOGY``.  Tests that bind this pytest
process undo it with ``Binding.restore()`` and the ``pristine`` fixture fails them if anything
was left behind; tests that need a process of their own (spawned workers, ``pynumabind exec``)
start one.  Every expectation is checked against the kernel (``sched_getaffinity`` per thread,
``get_mempolicy``, ``move_pages``), not against the library's report alone.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from pynumabind import (
    Gpu,
    MemoryPolicy,
    Plan,
    Topology,
    apply_plan,
    bind_current_process,
    plan,
    plan_all,
)
from pynumabind.discovery import detect_topology

from ._guestlib import (
    ALL_CPUS,
    NODE0_CPUS,
    NODE1_CPUS,
    REPO_ROOT,
    Sleepers,
    fresh_page_nodes,
    mempolicy,
    page_nodes,
    spawned_bind_worker,
    status_field,
    task_affinities,
    touch_pages,
)

pytestmark = pytest.mark.usefixtures("pristine")


@pytest.fixture(scope="module")
def topology() -> Topology:
    return detect_topology(use_nvml=False)


# ------------------------------------------------------------------ node 1, all threads


def test_bind_to_node1_moves_every_thread(topology: Topology) -> None:
    free = Sleepers(3)  # a thread pool started before the bind
    pinned = Sleepers(1, pin=frozenset({0}))  # deliberately pinned by someone else
    try:
        assert set(free.affinities().values()) == {ALL_CPUS}
        binding = bind_current_process(0, topology=topology, nodes="1", environ={})
        try:
            assert binding.plan is not None and binding.plan.cpus == NODE1_CPUS
            # The kernel's view of every thread: the caller and the early pool are on node 1.
            assert set(free.affinities().values()) == {NODE1_CPUS}
            assert frozenset(os.sched_getaffinity(0)) == NODE1_CPUS
            assert status_field("Cpus_allowed_list") == "2-3"
            # The pinned thread is left alone and reported as such.
            assert pinned.affinities() == {pinned.tids[0]: frozenset({0})}
            assert binding.threads_left_pinned == tuple(pinned.tids)
            assert set(free.tids) <= set(binding.threads_bound)
            # A thread started after the bind inherits it.
            late = Sleepers(1)
            assert set(late.affinities().values()) == {NODE1_CPUS}
            late.stop()
            # Memory: preferred on node 1, pages there.
            assert mempolicy() == ("MPOL_PREFERRED", [1])
            check = binding.verify()
            assert check.ok, check.problems
            assert check.memory_checked and set(check.page_nodes) == {1}
            assert check.threads_checked >= 4
        finally:
            binding.restore()
        assert binding.restored
        assert set(free.affinities().values()) == {ALL_CPUS}
        assert pinned.affinities() == {pinned.tids[0]: frozenset({0})}
        assert mempolicy() == ("MPOL_DEFAULT", [])
    finally:
        free.stop()
        pinned.stop()


def test_rank_and_policy_from_launcher_environment() -> None:
    """torchrun-style variables choose the rank; PYNUMABIND_POLICY the policy."""
    environ = {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "PYNUMABIND_POLICY": "bind"}
    binding = bind_current_process(environ=environ)
    try:
        assert binding.plan is not None and binding.plan.rank == 1
        assert frozenset(os.sched_getaffinity(0)) == NODE1_CPUS
        assert mempolicy() == ("MPOL_BIND", [1])
        assert fresh_page_nodes(16) == [1] * 16
    finally:
        binding.restore()


# ------------------------------------------------------------------ memory policies


def _manual_plan(cpus: frozenset[int], mems: frozenset[int], policy: MemoryPolicy) -> Plan:
    """A plan the planner would not make (CPUs and memory on different nodes): it separates
    what the memory policy does from where first-touch allocation would put pages anyway."""
    return Plan(rank=0, gpu_info=None, cpus=cpus, mems=mems, policy=policy)


@pytest.mark.parametrize(
    ("policy", "cpus", "mems", "kernel_mode"),
    [
        (MemoryPolicy.PREFERRED, NODE0_CPUS, frozenset({1}), "MPOL_PREFERRED"),
        (MemoryPolicy.BIND, NODE0_CPUS, frozenset({1}), "MPOL_BIND"),
        (MemoryPolicy.BIND, NODE1_CPUS, frozenset({2}), "MPOL_BIND"),  # memory-only node
    ],
    ids=["preferred-remote", "bind-remote", "bind-memory-only-node"],
)
def test_policy_puts_pages_on_the_named_node(
    policy: MemoryPolicy, cpus: frozenset[int], mems: frozenset[int], kernel_mode: str
) -> None:
    (target,) = mems
    local = 0 if cpus == NODE0_CPUS else 1
    assert target != local  # else first touch alone would pass the test
    binding = apply_plan(_manual_plan(cpus, mems, policy), on_error="raise")
    try:
        assert mempolicy() == (kernel_mode, [target])
        assert frozenset(os.sched_getaffinity(0)) == cpus
        assert fresh_page_nodes(32) == [target] * 32
        check = binding.verify()
        assert check.ok, check.problems
    finally:
        binding.restore()
    # Back to the default policy: first touch is local again.
    assert mempolicy() == ("MPOL_DEFAULT", [])


def test_local_policy_follows_the_cpu() -> None:
    binding = apply_plan(
        _manual_plan(NODE1_CPUS, frozenset(), MemoryPolicy.LOCAL), on_error="raise"
    )
    try:
        assert mempolicy()[0] == "MPOL_LOCAL"
        assert fresh_page_nodes(16) == [1] * 16
        assert binding.verify().ok
    finally:
        binding.restore()


@pytest.mark.parametrize("nodes", [frozenset({0, 1}), frozenset({0, 1, 2})], ids=["0-1", "0-2"])
def test_interleave_alternates(topology: Topology, nodes: frozenset[int]) -> None:
    rank_plan = plan(topology, 0, nodes="1", policy="interleave", interleave_nodes=sorted(nodes))
    assert rank_plan.policy is MemoryPolicy.INTERLEAVE and rank_plan.mems == nodes
    binding = apply_plan(rank_plan, on_error="raise")
    try:
        assert mempolicy() == ("MPOL_INTERLEAVE", sorted(nodes))
        pages = 60
        found = fresh_page_nodes(pages)
        assert set(found) == nodes, found
        # Round robin: every node gets its share, and consecutive pages mostly differ (page
        # tables allocated on the way also take turns, so not every step alternates).
        for node in nodes:
            assert found.count(node) >= pages // len(nodes) // 2, found
        changes = sum(a != b for a, b in zip(found, found[1:]))
        assert changes >= (pages - 1) * 2 // 3, found
        check = binding.verify()
        assert check.ok, check.problems
    finally:
        binding.restore()


# ------------------------------------------------------------------ migration


def test_weighted_interleave_falls_back_to_interleave_with_one_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Linux 6.1 has no MPOL_WEIGHTED_INTERLEAVE (6.9): plain interleave over the same nodes."""
    assert os.uname().release.startswith("6.1.")
    caplog.set_level("INFO", logger="pynumabind")
    binding = bind_current_process(
        0, nprocs=1, mode="none", policy="weighted-interleave", weights={0: 3, 1: 1}, environ={}
    )
    try:
        assert mempolicy() == ("MPOL_INTERLEAVE", [0, 1])
        assert binding.kernel_policy == "MPOL_INTERLEAVE" and binding.policy_nodes == {0, 1}
        fallback = (
            "weighted-interleave on nodes 0-1 needs MPOL_WEIGHTED_INTERLEAVE and this kernel "
            f"(Linux {os.uname().release}) lacks it (Linux < 6.9); interleaving evenly over "
            "nodes 0-1 instead, without weights"
        )
        assert binding.notes.count(fallback) == 1, binding.notes
        # The only other note is about this process's other threads, which keep their policy:
        # pytest's faulthandler_timeout watchdog (tests/vm/test_guest_suite.py) is one.
        others = [n for n in binding.notes if n != fallback]
        assert len(os.listdir("/proc/self/task")) > 1 or not others, binding.notes
        assert all("that already existed keep their memory policy" in n for n in others), others
        assert binding.kernel_weights is None and binding.weights_mismatch is None
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        check = binding.verify()  # judged as the interleave it is
        assert check.ok, check
        assert set(check.page_nodes) == {0, 1}
    finally:
        binding.restore()


def test_migrate_moves_pages_from_node0_to_node1(topology: Topology) -> None:
    first = apply_plan(plan(topology, 0, nodes="0", policy="bind"), on_error="raise")
    try:
        region = touch_pages(64)
        assert page_nodes(region) == [0] * 64
    finally:
        first.restore()
    try:
        second = apply_plan(
            plan(topology, 0, nodes="1", policy="bind"), migrate=True, on_error="raise"
        )
        try:
            assert second.migrated
            assert second.pages_not_moved == 0
            # The pages touched under the node-0 binding now live on node 1.
            assert page_nodes(region) == [1] * 64
            assert fresh_page_nodes(16) == [1] * 16
            assert second.verify().ok
        finally:
            second.restore()
    finally:
        region.close()


def test_without_migrate_pages_stay(topology: Topology) -> None:
    first = apply_plan(plan(topology, 0, nodes="0", policy="bind"), on_error="raise")
    try:
        region = touch_pages(16)
    finally:
        first.restore()
    try:
        second = apply_plan(plan(topology, 0, nodes="1", policy="bind"), on_error="raise")
        try:
            assert not second.migrated and second.pages_not_moved is None
            assert page_nodes(region) == [0] * 16
        finally:
            second.restore()
    finally:
        region.close()


# ------------------------------------------------------------------ GPU on a memory-only node


@pytest.mark.parametrize(
    ("numa_node", "memory_node"),
    [(2, None), (1, 2)],
    ids=["sysfs-style-numa_node-2", "nvml-style-memory_node-2"],
)
def test_gpu_on_memory_only_node_gets_nearest_cpu_node(
    topology: Topology, numa_node: int, memory_node: Any
) -> None:
    """A Grace-style GPU whose memory is node 2 runs on node 1 (distance 30 < 40)."""
    gpu = Gpu(
        index=0,
        pci_bus_id="0000:21:00.0",
        vendor="nvidia",
        numa_node=numa_node,
        local_cpus=frozenset(),  # what sysfs says for a device on a CPU-less node
        memory_node=memory_node,
        source="test",
    )
    machine = topology.replace(gpus=(gpu,))
    rank_plan = plan(machine, 0, gpu_memory=True)
    assert rank_plan.node == 1
    assert rank_plan.cpus == NODE1_CPUS
    assert rank_plan.mems == frozenset({1, 2})
    if numa_node == 2:
        assert any("distance 30" in reason for reason in rank_plan.reasons), rank_plan.reasons
    binding = apply_plan(rank_plan, on_error="raise")
    try:
        assert set(task_affinities().values()) == {NODE1_CPUS}
        mode, nodes = mempolicy()
        assert nodes == [1, 2]
        assert mode == "MPOL_PREFERRED_MANY"  # kernel >= 5.15
        # Preferred-many takes the local node first when it is in the set.
        assert fresh_page_nodes(16) == [1] * 16
        check = binding.verify()
        assert check.ok, check.problems
    finally:
        binding.restore()


def test_bind_to_gpu_memory_node_puts_pages_on_node2(topology: Topology) -> None:
    gpu = Gpu(index=0, pci_bus_id="0000:21:00.0", vendor="nvidia", numa_node=2, source="test")
    rank_plan = plan(topology.replace(gpus=(gpu,)), 0, policy="bind", gpu_memory=True)
    assert rank_plan.mems == frozenset({1, 2})
    # MPOL_BIND over {1, 2}: allowed on either; the local node 1 first.
    binding = apply_plan(rank_plan, on_error="raise")
    try:
        assert mempolicy() == ("MPOL_BIND", [1, 2])
        assert set(fresh_page_nodes(16)) <= {1, 2}
    finally:
        binding.restore()


def test_bind_current_process_passes_gpu_memory_to_the_planner(topology: Topology) -> None:
    """The one-call API reaches the GPU's own memory node too (gpu_memory=True)."""
    gpu = Gpu(index=0, pci_bus_id="0000:21:00.0", vendor="nvidia", numa_node=2, source="test")
    binding = bind_current_process(
        0,
        topology=topology.replace(gpus=(gpu,)),
        policy="bind",
        gpu_memory=True,
        on_error="raise",
        environ={},
    )
    try:
        assert binding.plan is not None and binding.plan.mems == frozenset({1, 2})
        assert mempolicy() == ("MPOL_BIND", [1, 2])
        assert set(task_affinities().values()) == {NODE1_CPUS}
    finally:
        binding.restore()


# ------------------------------------------------------------------ exclusive, 4 workers


def test_exclusive_four_ranks_spawned_workers(topology: Topology) -> None:
    plans = plan_all(topology, nprocs=4, mode="exclusive", policy="bind")
    cpu_sets = [p.cpus for p in plans]
    assert all(cpus for cpus in cpu_sets)
    assert sum(len(c or ()) for c in cpu_sets) == len(frozenset().union(*cpu_sets))  # disjoint
    assert [p.node for p in plans] == [0, 0, 1, 1]
    assert [p.mems for p in plans] == [frozenset({n}) for n in (0, 0, 1, 1)]

    context = multiprocessing.get_context("spawn")
    workers = []
    for rank in range(4):
        receive, send = context.Pipe(duplex=False)
        process = context.Process(target=spawned_bind_worker, args=(rank, 4, send))
        process.start()
        send.close()
        workers.append((process, receive))
    reports: List[Dict[str, Any]] = []
    try:
        for _process, receive in workers:
            assert receive.poll(180), "a spawned worker did not report"
            reports.append(receive.recv())
    finally:
        for process, _ in workers:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    assert [w.exitcode for w, _ in workers] == [0, 0, 0, 0]
    for expected, report in zip(plans, reports):
        assert "error" not in report, report
        wanted = sorted(expected.cpus or ())
        node = expected.node
        assert report["plan_cpus"] == wanted, report
        assert report["plan_mems"] == [node]
        assert {tuple(c) for c in report["tasks"].values()} == {tuple(wanted)}, report
        assert report["early"] == wanted and report["late"] == wanted
        assert tuple(report["mempolicy"]) == ("MPOL_BIND", [node])
        assert report["pages"] == [node] * 16
        assert report["verify_ok"], report["verify_problems"]
    assert len({r["pid"] for r in reports}) == 4


# ------------------------------------------------------------------ pynumabind exec

_EXEC_CHILD = """
import json, os
import mmap
from pynumabind._os import libnuma as _libnuma
region = mmap.mmap(-1, 16 * mmap.PAGESIZE)
for i in range(16):
    region[i * mmap.PAGESIZE] = 1
policy = _libnuma.get_mempolicy()
tasks = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
print(json.dumps({"cpus": sorted(os.sched_getaffinity(0)), "tasks": tasks,
                  "policy": [policy.kernel_policy, sorted(policy.nodes)],
                  "pages": _libnuma.page_nodes(region)}))
"""


def test_exec_binds_the_child() -> None:
    argv = [
        sys.executable, "-m", "pynumabind", "exec", "--json",
        "--rank", "0", "--nodes", "1", "--policy", "bind",
        "--", sys.executable, "-c", _EXEC_CHILD,
    ]  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False
    )
    assert proc.returncode == 0, proc.stderr
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    assert child["cpus"] == [2, 3]
    assert {tuple(c) for c in child["tasks"].values()} == {(2, 3)}
    assert child["policy"] == ["MPOL_BIND", [1]]  # set_mempolicy survives execve
    assert child["pages"] == [1] * 16
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["applied"] and report["cpus"] == "2-3" and report["memory_applied"]
