"""Every recorded machine loads from its generated sysfs tree and matches its description."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynumabind.cpulist import parse_cpulist
from pynumabind.discovery import topology_from_sysfs
from pynumabind.errors import TopologyError
from pynumabind.model import Topology

from ..support import sysfs_tree as st

MACHINES = st.machine_names()


@pytest.fixture(scope="module", params=MACHINES)
def machine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    desc = st.load_machine(request.param)
    root = st.build_sysfs(desc, tmp_path_factory.mktemp(request.param))
    allowed = {}
    if "allowed_cpus" in desc:
        allowed["allowed_cpus"] = parse_cpulist(desc["allowed_cpus"])
    if "allowed_mems" in desc:
        allowed["allowed_mems"] = parse_cpulist(desc["allowed_mems"])
    return desc, root, topology_from_sysfs(str(root), **allowed)


def test_the_expected_machines_are_described() -> None:
    wanted = {
        "dgx_h100",
        "dgx_a100_nps4",
        "gb200_nvl_tray",
        "gh200_single",
        "gh200_quad",
        "mi210_nps4",
        "mi300x_spr",
        "rtx4090_nps4",
        "threadripper_memless",
        "single_gpu_no_numa",
        "sparse_nodes",
        "a100_pcie_slurm_cgroup",
    }
    assert wanted <= set(MACHINES)
    for name in MACHINES:
        desc = st.load_machine(name)
        assert desc["name"] == name
        assert desc["provenance"], f"{name} must say where its facts come from"


def test_nodes_match(machine) -> None:
    desc, _root, topo = machine
    online = parse_cpulist(desc["online_cpus"])
    if desc.get("numa_sysfs", True):
        assert sorted(topo.nodes) == sorted(n["id"] for n in desc["nodes"])
    for node in desc["nodes"]:
        got = topo.nodes[node["id"]]
        assert got.cpus == parse_cpulist(node["cpus"]) & online
        if node.get("memory_mb") is not None:
            assert got.memory_total == node["memory_mb"] * 1024 * 1024
            assert got.memory_free == node["free_mb"] * 1024 * 1024
            assert got.has_memory == (node["memory_mb"] > 0)


def test_distances_match(machine) -> None:
    desc, _root, topo = machine
    if not desc.get("numa_sysfs", True):
        assert topo.distance(0, 0) == 10
        return
    table = st.node_distances(desc)
    for a, row in table.items():
        assert dict(topo.nodes[a].distances) == row


def test_cpus_match(machine) -> None:
    desc, _root, topo = machine
    facts = st.cpu_facts(desc)
    assert topo.online_cpus == parse_cpulist(desc["online_cpus"])
    assert set(topo.cpus) == set(facts)
    for cpu, fact in facts.items():
        got = topo.cpus[cpu]
        assert (got.node, got.package, got.core, got.die) == (
            fact.node,
            fact.package,
            fact.core,
            fact.die,
        )
        assert got.siblings == fact.siblings
        assert got.l3 == fact.l3


def test_gpus_match(machine) -> None:
    desc, _root, topo = machine
    gpus = desc["gpus"]
    assert len(topo.gpus) == len(gpus)
    # Driver order: KFD order for AMD (description order), PCI order otherwise.
    for got, want in zip(topo.gpus, gpus):
        assert got.pci_bus_id == want["bus_id"]
        names = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}
        assert got.vendor == names[want["vendor"]]
        expected_node = want["numa_node"] if want["numa_node"] >= 0 else None
        assert got.numa_node == expected_node
    # Sysfs alone already gives the source's NUMA node for every GPU whose
    # PCI numa_node is a CPU node (all but Grace machines' memory nodes).
    for got, expect in zip(topo.gpus, st.gpu_expectations(desc)):
        assert got.numa_node == expect["numa_node"]
    for gpu in topo.gpus:
        if gpu.vendor == "amd":
            want = next(g for g in gpus if g["bus_id"] == gpu.pci_bus_id)
            assert gpu.uuid is not None and gpu.uuid.lower() == want["uuid"].lower()


def test_allowed_sets(machine) -> None:
    desc, _root, topo = machine
    online = parse_cpulist(desc["online_cpus"])
    want_cpus = parse_cpulist(desc["allowed_cpus"]) if "allowed_cpus" in desc else online
    assert topo.allowed_cpus == want_cpus
    if "allowed_mems" in desc:
        assert topo.allowed_mems == parse_cpulist(desc["allowed_mems"])
    elif desc.get("numa_sysfs", True):
        assert topo.allowed_mems == {n["id"] for n in desc["nodes"] if n.get("memory_mb")}


def test_json_round_trip_is_exact(machine) -> None:
    _desc, _root, topo = machine
    again = Topology.from_json(topo.to_json())
    assert again == topo
    assert again.to_json() == topo.to_json()


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("gpus", "uuid", 5),
        ("gpus", "model", ["H100"]),
        ("nodes", "has_memory", "false"),
    ],
)
def test_snapshot_fields_of_the_wrong_type_are_a_topology_error(
    tmp_path: Path, section: str, key: str, value: object
) -> None:
    """A hand-edited snapshot must fail on load, not later in the planner.

    ``uuid: 5`` used to load and then raise AttributeError from
    ``apply_visibility`` on a ``GPU-`` entry; ``has_memory: "false"`` was
    read as True.
    """
    topo = topology_from_sysfs(str(st.build_sysfs("dgx_h100", tmp_path / "m")))
    data = topo.to_dict()
    data[section][0][key] = value
    with pytest.raises(TopologyError, match=key):
        Topology.from_dict(data)


# --------------------------------------------- cross-checks with raw sources


def test_gh200_quad_distance_rows_are_the_published_ones() -> None:
    """Rows 0-5 as printed by ``numactl -H`` in numactl/numactl#224."""
    published = {
        0: [10, 40, 40, 40] + [80] * 8 + [120] * 24,
        1: [40, 10, 40, 40] + [120] * 8 + [80] * 8 + [120] * 16,
        2: [40, 40, 10, 40] + [120] * 16 + [80] * 8 + [120] * 8,
        3: [40, 40, 40, 10] + [120] * 24 + [80] * 8,
        4: [80, 120, 120, 120, 10] + [255] * 31,
        5: [80, 120, 120, 120, 255, 10] + [255] * 30,
    }
    table = st.node_distances(st.load_machine("gh200_quad"))
    for node, row in published.items():
        assert [table[node][b] for b in range(36)] == row


def test_dgx_a100_node_masks_are_the_nccl_dump(tmp_path: Path) -> None:
    """The NCCL topology dump of nccl#1505 prints these masks for numaid 0 and 7."""
    root = st.build_sysfs("dgx_a100_nps4", tmp_path)
    node = root / "devices" / "system" / "node"
    assert (node / "node0" / "cpumap").read_text().strip() == (
        "00000000,00000000,00000000,0000ffff,00000000,00000000,00000000,0000ffff"
    )
    assert (node / "node7" / "cpumap").read_text().strip() == (
        "ffff0000,00000000,00000000,00000000,ffff0000,00000000,00000000,00000000"
    )


def test_mi300x_node_masks_are_the_rccl_dump(tmp_path: Path) -> None:
    """topo_8p_940.xml prints these affinity masks for numaid 0 and 1."""
    root = st.build_sysfs("mi300x_spr", tmp_path)
    node = root / "devices" / "system" / "node"
    assert (node / "node0" / "cpumap").read_text().strip() == (
        "00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff"
    )
    assert (node / "node1" / "cpumap").read_text().strip() == (
        "ffffffff,ffffff00,00000000,0000ffff,ffffffff,ff000000,00000000"
    )


def test_mi210_numactl_h_is_reproduced() -> None:
    """Sizes and the distance matrix of the ROCm blog's ``numactl -H``."""
    desc = st.load_machine("mi210_nps4")
    sizes = [n["memory_mb"] for n in desc["nodes"]]
    assert sizes == [64306, 64502, 64502, 64447, 64502, 64502, 64502, 64492]
    table = st.node_distances(desc)
    assert [table[0][b] for b in range(8)] == [10, 12, 12, 12, 32, 32, 32, 32]
    assert [table[5][b] for b in range(8)] == [32, 32, 32, 32, 12, 10, 12, 12]
