"""AMD GPUs through the KFD topology."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pynumabind._os.kfd import KFD_TOPOLOGY, read_kfd
from pynumabind.discovery import topology_from_sysfs
from pynumabind.discovery._visible import apply_visibility
from pynumabind.errors import TopologyError

from ..support import sysfs_tree as st


def test_kfd_lists_gpu_agents_in_rocm_order(tmp_path: Path) -> None:
    desc = st.load_machine("mi210_nps4")
    root = st.build_sysfs(desc, tmp_path / "t")
    agents = read_kfd(str(root))
    assert agents is not None
    assert [a.pci_bus_id for a in agents] == [g["bus_id"] for g in desc["gpus"]]
    assert [a.kfd_node for a in agents] == list(range(8, 16))  # 8 CPU agents first
    assert agents[0].uuid == "GPU-" + f"{desc['gpus'][0]['kfd']['unique_id']:016x}"
    assert agents[0].name == "gfx942"


def test_kfd_order_wins_over_pci_order(tmp_path: Path) -> None:
    desc = st.load_machine("mi300x_spr")
    desc["gpus"] = desc["gpus"][4:] + desc["gpus"][:4]  # KFD enumerates socket 1 first
    root = st.build_sysfs(desc, tmp_path / "t")
    topo = topology_from_sysfs(str(root))
    assert [g.pci_bus_id for g in topo.gpus] == [g["bus_id"] for g in desc["gpus"]]
    assert [g.numa_node for g in topo.gpus] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert [g.physical_index for g in topo.gpus] == list(range(8))
    rank0 = apply_visibility(topo, {"ROCR_VISIBLE_DEVICES": "0"}).gpus[0]
    assert (rank0.pci_bus_id, rank0.numa_node) == ("0000:9f:00.0", 1)


def test_without_kfd_amd_gpus_keep_pci_order_with_a_note(tmp_path: Path) -> None:
    desc = st.load_machine("mi300x_spr")
    desc["gpus"] = desc["gpus"][::-1]
    desc["kfd"] = False
    topo = topology_from_sysfs(str(st.build_sysfs(desc, tmp_path / "t")))
    assert [g.pci_bus_id for g in topo.gpus] == sorted(g["bus_id"] for g in desc["gpus"])
    assert all(g.uuid is None for g in topo.gpus)
    assert any("no KFD topology" in n for n in topo.notes)


def test_location_id_decodes_device_and_function(tmp_path: Path) -> None:
    node = tmp_path / KFD_TOPOLOGY / "1"
    node.mkdir(parents=True)
    (node / "gpu_id").write_text("4242\n")
    location = (0xC1 << 8) | (0x1D << 3) | 1
    (node / "properties").write_text(f"simd_count 104\nlocation_id {location}\nunique_id 0\n")
    agents = read_kfd(str(tmp_path))
    assert agents is not None
    assert agents[0].pci_bus_id == "0000:c1:1d.1"  # no 'domain' line (old kernel): 0
    assert agents[0].uuid is None and agents[0].name is None


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("location_id 12 13\n", "malformed line"),
        ("location_id twelve\n", "malformed value"),
        ("simd_count 4\n", "no location_id"),
    ],
)
def test_malformed_kfd_properties_raise(tmp_path: Path, content: str, fragment: str) -> None:
    node = tmp_path / KFD_TOPOLOGY / "0"
    node.mkdir(parents=True)
    (node / "gpu_id").write_text("17\n")
    (node / "properties").write_text(content)
    with pytest.raises(TopologyError, match=fragment) as info:
        read_kfd(str(tmp_path))
    assert "properties" in str(info.value)


def test_kfd_gpu_not_accepted_on_pci_is_noted(tmp_path: Path) -> None:
    desc = st.load_machine("mi300x_spr")
    root = st.build_sysfs(desc, tmp_path / "t")
    # Only accept processing accelerators of another subclass: no PCI GPU,
    # so KFD agents have no PCI function to attach to.
    topo = topology_from_sysfs(str(root), pci_classes=["0x0380"])
    assert topo.gpus == ()
    amd_only = topology_from_sysfs(str(root), gpu_vendors={0x1002: "amd"}, pci_classes=["0x12"])
    assert len(amd_only.gpus) == 8
    # Drop one PCI function from the tree: its KFD agent is reported.
    for leaf in (root / "bus/pci/devices/0000:bf:00.0").iterdir():
        leaf.unlink()
    (root / "bus/pci/devices/0000:bf:00.0").rmdir()
    fewer = topology_from_sysfs(str(root))
    assert len(fewer.gpus) == 7
    assert any("KFD GPU at 0000:bf:00.0" in n for n in fewer.notes)


def test_no_kfd_directory_means_none(tmp_path: Path) -> None:
    assert read_kfd(str(tmp_path)) is None


def test_non_ascii_kfd_properties_are_a_topology_error(tmp_path: Path) -> None:
    node = tmp_path / KFD_TOPOLOGY / "0"
    node.mkdir(parents=True)
    (node / "gpu_id").write_text("17\n")
    (node / "properties").write_bytes(b"location_id 12\nname \xff\xfe\n")
    with pytest.raises(TopologyError, match="not ASCII text") as info:
        read_kfd(str(tmp_path))
    assert "properties" in str(info.value)


def test_kfd_node_names_take_ascii_digits_only(tmp_path: Path) -> None:
    base = tmp_path / KFD_TOPOLOGY
    (base / "\u00b2").mkdir(parents=True)  # '²'.isdigit() is True; int('²') raises
    assert read_kfd(str(tmp_path)) == []


def test_a_fifo_in_the_kfd_tree_does_not_hang(tmp_path: Path) -> None:
    node = tmp_path / KFD_TOPOLOGY / "0"
    node.mkdir(parents=True)
    (node / "gpu_id").write_text("17\n")
    os.mkfifo(node / "properties")
    with pytest.raises(TopologyError, match="not a regular file"):
        read_kfd(str(tmp_path))
