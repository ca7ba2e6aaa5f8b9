"""Discovery on a real multi-NUMA kernel: the guest reads back as it was booted.

Runs inside the guest booted with ``harness.STANDARD_TOPOLOGY`` (node0 CPUs 0-1, node1 CPUs
2-3, node2 memory only; distances 0-1=21, 0-2=40, 1-2=30; bochs-displays on node 1 at
0000:21:00.0 and on node 2 at 0000:41:00.0).  Expected values come from the harness's
``GuestTopology`` (what QEMU was told), never from the library.

``pynumabind report --json --no-advise`` runs here too, as a user would run it on a
multi-node machine: its machine section, its check run (one worker per node with CPUs) and
its cross-checks must agree with the booted guest (advise has its own module).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pynumabind import Topology, apply_plan, plan
from pynumabind._os import sysfs as _sysfs
from pynumabind._os.textfile import SysfsReader
from pynumabind.discovery import detect_topology, topology_from_sysfs
from pynumabind.model import Detail

from ...support import libnuma_oracle as oracle
from ...support.sysfs_oracle import read_cpus_per_cpu
from ..harness import GuestTopology
from ._guestlib import (
    ALL_CPUS,
    ALL_NODES,
    NODE1_CPUS,
    PCI_ADDRESS,
    PCI_ADDRESS_NODE2,
    PCI_CLASS,
    PCI_VENDOR,
    REPO_ROOT,
    fresh_page_nodes,
    mempolicy,
    task_affinities,
)

EXTRA_VENDORS = {0x10DE: "nvidia", 0x1002: "amd", PCI_VENDOR: "qemu"}


@pytest.fixture(scope="module", params=["detect", "from_sysfs"])
def topology(request: pytest.FixtureRequest) -> Topology:
    if request.param == "detect":
        return detect_topology(use_nvml=False)
    return topology_from_sysfs("/sys")


def test_nodes_cpus_and_memory_as_booted(topology: Topology, guest_topology: GuestTopology) -> None:
    assert sorted(topology.nodes) == list(range(len(guest_topology.nodes)))
    for node_id, booted in enumerate(guest_topology.nodes):
        node = topology.nodes[node_id]
        assert node.cpus == frozenset(booted.cpu_ids), node_id
        assert node.has_memory
        assert node.memory_total is not None
        # MemTotal is what the kernel kept after its own reservations: a little under the size.
        assert 0.75 * booted.mem_mb * 2**20 < node.memory_total <= booted.mem_mb * 2**20
        assert node.memory_free is not None and 0 < node.memory_free <= node.memory_total
    assert topology.cpu_nodes == (0, 1)
    assert topology.online_cpus == ALL_CPUS
    assert {cpu: topology.node_of_cpu(cpu) for cpu in ALL_CPUS} == {0: 0, 1: 0, 2: 1, 3: 1}


def test_memory_only_node(topology: Topology) -> None:
    node2 = topology.nodes[2]
    assert node2.memory_only and not node2.has_cpus and node2.has_memory
    assert not topology.nodes[0].memory_only and not topology.nodes[1].memory_only


def test_distances_as_booted(topology: Topology, guest_topology: GuestTopology) -> None:
    matrix = [[topology.distance(a, b) for b in range(3)] for a in range(3)]
    assert matrix == guest_topology.distance_matrix()
    assert matrix == [[10, 21, 40], [21, 10, 30], [40, 30, 10]]
    # libnuma agrees (it reads the same SLIT through its own code).
    assert [[oracle.distance(a, b) for b in range(3)] for a in range(3)] == matrix
    # The memory-only node's nearest CPU node is node 1 (30), then node 0 (40).
    assert topology.nearest_cpu_nodes(2) == [(1, 30), (0, 40)]


def test_packages_are_sockets(topology: Topology) -> None:
    """-smp sockets=2,cores=2: each CPU node is its own package."""
    packages = {cpu.id: cpu.package for cpu in topology.cpus.values()}
    assert packages[0] == packages[1] != packages[2] == packages[3]
    assert topology.package_cpus(packages[2]) == NODE1_CPUS


def test_grouped_cpu_read_equals_the_per_cpu_read_on_a_real_kernel() -> None:
    """A real kernel's group lists (package, die, siblings, L3) agree with each CPU's own files."""
    reader = SysfsReader("/sys")
    online = _sysfs._online_cpus(reader, [])
    layout = _sysfs.read_layout("/sys", detail=Detail.NODES)
    node_of = {cpu: n.id for n in layout.nodes.values() for cpu in n.cpus}
    grouped_notes: list = []
    oracle_notes: list = []
    grouped = _sysfs._read_cpus(reader, online, node_of, Detail.FULL, grouped_notes)
    assert grouped == read_cpus_per_cpu(reader, online, node_of, oracle_notes)
    assert grouped_notes == oracle_notes
    assert sorted(grouped) == sorted(ALL_CPUS)


def test_allowed_sets_are_the_whole_guest(topology: Topology) -> None:
    assert topology.allowed_cpus == ALL_CPUS
    assert topology.allowed_mems == ALL_NODES


def test_unknown_pci_vendor_is_not_a_gpu(topology: Topology) -> None:
    """By default the bochs display (vendor 0x1234) is not taken for an accelerator."""
    assert topology.gpus == ()


def _accepting(how: str) -> Topology:
    options = {"gpu_vendors": EXTRA_VENDORS, "pci_classes": [PCI_CLASS]}
    if how == "detect":
        return detect_topology(use_nvml=False, **options)
    return topology_from_sysfs("/sys", **options)


@pytest.mark.parametrize("how", ["from_sysfs", "detect"])
def test_pci_devices_found_when_accepted(how: str) -> None:
    topology = _accepting(how)
    assert [g.pci_bus_id for g in topology.gpus] == [PCI_ADDRESS, PCI_ADDRESS_NODE2]
    on_node1, on_node2 = topology.gpus
    assert (on_node1.index, on_node2.index) == (0, 1)
    assert on_node1.vendor == on_node2.vendor == "qemu"
    assert on_node1.numa_node == 1
    assert on_node1.local_cpus == NODE1_CPUS
    assert on_node1.memory_node is None
    # sysfs puts the second device on the CPU-less node 2 (numa_node 2, empty local_cpulist).
    # Discovery may keep that as its node or move the CPU side to the nearest CPU node, but it
    # must not lose node 2: it is the memory that gpu_memory=True adds.
    assert 2 in (on_node2.numa_node, on_node2.memory_node), on_node2
    assert on_node2.local_cpus <= NODE1_CPUS, on_node2


def test_pci_class_filter_is_exact() -> None:
    """The same vendor with a class the device does not have finds nothing."""
    topology = topology_from_sysfs(
        "/sys", gpu_vendors=EXTRA_VENDORS, pci_classes=["0x0302", "0x1200"]
    )
    assert topology.gpus == ()


def test_plan_for_pci_device_lands_on_node1(pristine: None) -> None:
    topology = _accepting("detect")
    rank_plan = plan(topology, 0)
    assert rank_plan.gpu is not None and rank_plan.gpu_info.pci_bus_id == PCI_ADDRESS
    assert rank_plan.node == 1
    assert rank_plan.cpus == NODE1_CPUS
    assert rank_plan.mems == frozenset({1})
    binding = apply_plan(rank_plan)
    try:
        assert set(task_affinities().values()) == {NODE1_CPUS}
        assert fresh_page_nodes(16) == [1] * 16
        check = binding.verify()
        assert check.ok, check.problems
        assert set(check.page_nodes) == {1}
    finally:
        binding.restore()


def test_plan_for_pci_device_on_memory_only_node(pristine: None) -> None:
    """The discovered device on node 2 runs on node 1 (distance 30 < 40) and, with
    gpu_memory=True, may allocate from its own node 2 as well."""
    topology = _accepting("detect")
    without = plan(topology, 1)
    assert without.gpu is not None and without.gpu_info.pci_bus_id == PCI_ADDRESS_NODE2
    assert (without.node, without.cpus, without.mems) == (1, NODE1_CPUS, frozenset({1}))
    rank_plan = plan(topology, 1, gpu_memory=True)
    assert (rank_plan.node, rank_plan.cpus) == (1, NODE1_CPUS)
    assert rank_plan.mems == frozenset({1, 2}), rank_plan.reasons
    binding = apply_plan(rank_plan, on_error="raise")
    try:
        assert set(task_affinities().values()) == {NODE1_CPUS}
        assert mempolicy() == ("MPOL_PREFERRED_MANY", [1, 2])
        assert fresh_page_nodes(16) == [1] * 16  # the local node of the set comes first
        assert binding.verify().ok
    finally:
        binding.restore()


def test_report_in_the_guest(guest_topology: GuestTopology, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    # The host's root file system is shared: name a record path of this test's own, so that
    # a record the host saved is not compared with the guest.
    env["PYNUMABIND_ADVICE"] = str(tmp_path / "no-record.json")
    done = subprocess.run(
        [sys.executable, "-m", "pynumabind", "report", "--json", "--no-advise"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    document = json.loads(done.stdout)
    sections = document["sections"]
    status = {name: s["status"] for name, s in sections.items()}
    assert status == {**{name: "ok" for name in status}, "advise": "skipped"}
    topology = Topology.from_dict(sections["machine"]["data"]["topology"])
    booted = guest_topology.nodes
    cpu_nodes = [i for i, n in enumerate(booted) if n.cpu_ids]
    assert sorted(topology.nodes) == list(range(len(booted)))
    assert sorted(topology.cpu_nodes) == cpu_nodes
    assert {i: frozenset(topology.nodes[i].cpus) for i in cpu_nodes} == {
        i: frozenset(booted[i].cpu_ids) for i in cpu_nodes
    }
    everything = frozenset(c for n in booted for c in n.cpu_ids)
    assert topology.allowed_cpus == everything
    # One worker per node with CPUs, each bound to its node's CPUs, pages on its node.
    workers = sections["check"]["data"]["workers"]
    assert [(w["rank"], w["ok"]) for w in workers] == [(r, True) for r in range(len(cpu_nodes))]
    verdicts = {(c["name"], c["subject"]): c["verdict"] for c in document["cross_checks"]}
    assert verdicts[("check-run", "machine")] == "agree"
    assert [verdicts[("plan-within-limits", f"rank {r}")] for r in range(len(cpu_nodes))] == [
        "agree"
    ] * len(cpu_nodes)
    assert "disagree" not in verdicts.values()
    kernel = sections["kernel"]["data"]
    balancing = Path("/proc/sys/kernel/numa_balancing").read_text().strip()
    assert kernel["numa_balancing"].endswith(f"({balancing})")
    assert kernel["release"] == os.uname().release
    sys.stdout.write(done.stdout[:2000])
