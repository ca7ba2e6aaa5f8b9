"""NVML discovery against a fake pynvml fed from the recorded machines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml as real_pynvml
import pytest

import fake_nvml
import sysfs_tree as st
from pynumabind import _nvml
from pynumabind.cpulist import parse_cpulist
from pynumabind.discovery import detect_topology
from pynumabind.errors import ConfigError
from pynumabind.model import Topology

NVIDIA_MACHINES = [
    name
    for name in st.machine_names()
    if any(g["vendor"] == "0x10de" for g in st.load_machine(name)["gpus"])
]


def detect(root: Path, **kw: Any) -> Topology:
    kw.setdefault("environ", {})
    return detect_topology(sysfs_root=str(root), **kw)


def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, **fake_kw: Any):
    desc = st.load_machine(name)
    root = st.build_sysfs(desc, tmp_path / name)
    fake = fake_nvml.install_fake_nvml(monkeypatch, desc, **fake_kw)
    return desc, root, fake


@pytest.mark.parametrize("name", NVIDIA_MACHINES)
def test_every_nvidia_machine_matches_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    desc, root, fake = setup(tmp_path, monkeypatch, name)
    topo = detect(root)
    expect = st.gpu_expectations(desc)
    assert len(topo.gpus) == len(desc["gpus"])
    for gpu, want, spec in zip(topo.gpus, expect, desc["gpus"]):
        assert gpu.pci_bus_id == spec["bus_id"]
        assert gpu.uuid == spec["uuid"] and gpu.model == spec["model"]
        assert gpu.memory_node == want["memory_node"]
        if want["numa_node"] is not None:
            assert gpu.numa_node == want["numa_node"]
            assert gpu.source == "nvml"
    assert fake.init_count == fake.shutdown_count == 1


def test_nvml_calls_use_node_scope_and_sized_masks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(tmp_path, monkeypatch, "dgx_h100")
    topo = detect(root)
    assert "nvmlDeviceGetCpuAffinityWithinScope" in fake.calls
    assert "nvmlDeviceGetCpuAffinity" not in fake.calls
    assert topo.gpus[4].local_cpus == parse_cpulist("56-111,168-223")
    assert [g.physical_index for g in topo.gpus] == list(range(8))


def test_old_driver_without_scope_call_uses_plain_cpu_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(tmp_path, monkeypatch, "dgx_h100", no_scope_api=True)
    topo = detect(root)
    assert "nvmlDeviceGetCpuAffinity" in fake.calls
    assert topo.gpus[0].local_cpus == parse_cpulist("0-55,112-167")


def test_nvml_order_differs_from_pci_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order = [7, 6, 5, 4, 3, 2, 1, 0]
    desc, root, _fake = setup(tmp_path, monkeypatch, "dgx_h100", order=order)
    topo = detect(root)
    assert [g.pci_bus_id for g in topo.gpus] == [desc["gpus"][i]["bus_id"] for i in order]
    assert [g.numa_node for g in topo.gpus] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert [g.physical_index for g in topo.gpus] == list(range(8))
    # Sysfs alone would list them in PCI order; PCI_BUS_ID order restores it.
    pci = detect(root, environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert [g.pci_bus_id for g in pci.gpus] == [g["bus_id"] for g in desc["gpus"]]
    assert [g.physical_index for g in pci.gpus] == order
    # Rank 0 with CUDA_VISIBLE_DEVICES=0 is NVML's GPU 0, which is on node 1.
    assert detect(root, environ={"CUDA_VISIBLE_DEVICES": "0"}).gpus[0].numa_node == 1


def test_uuid_visible_devices_through_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    desc, root, _fake = setup(tmp_path, monkeypatch, "dgx_a100_nps4")
    gpu5, gpu2 = desc["gpus"][5]["uuid"], desc["gpus"][2]["uuid"]
    topo = detect(root, environ={"CUDA_VISIBLE_DEVICES": f"{gpu5},{gpu2[:12]}"})
    assert [(g.physical_index, g.numa_node) for g in topo.gpus] == [(5, 7), (2, 1)]


def test_mig_uuid_resolved_through_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    desc = st.load_machine("dgx_a100_nps4")
    mig = "MIG-5c6a4c66-1d27-5a13-b4b5-8f0a6e2f3e51"
    _d, root, fake = setup(
        tmp_path, monkeypatch, "dgx_a100_nps4", mig={mig: desc["gpus"][6]["uuid"]}
    )
    topo = detect(root, environ={"CUDA_VISIBLE_DEVICES": mig})
    assert [(g.physical_index, g.numa_node) for g in topo.gpus] == [(6, 5)]
    assert "nvmlDeviceGetDeviceHandleFromMigDeviceHandle" in fake.calls
    unknown = detect(root, environ={"CUDA_VISIBLE_DEVICES": "MIG-0000"})
    assert unknown.gpus == ()
    assert any("MIG-0000" in n for n in unknown.notes)


def test_grace_memory_node_and_cpu_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _desc, root, _fake = setup(tmp_path, monkeypatch, "gb200_nvl_tray")
    topo = detect(root)
    assert [(g.numa_node, g.memory_node) for g in topo.gpus] == [(0, 2), (0, 10), (1, 18), (1, 26)]
    for gpu in topo.gpus:
        assert gpu.numa_node in topo.cpu_nodes  # never a CPU-less node to bind CPUs to
        assert topo.nodes[gpu.memory_node].memory_only


def test_grace_cpu_node_from_cpu_affinity_then_distance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desc = st.load_machine("gh200_quad")
    root = st.build_sysfs(desc, tmp_path / "t")
    for gpu in desc["gpus"]:
        gpu["nvml"]["memory_affinity"] = ""
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    assert [g.numa_node for g in detect(root).gpus] == [0, 1, 2, 3]
    for gpu in desc["gpus"]:
        gpu["nvml"]["cpu_affinity"] = ""
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    topo = detect(root)
    # Only the memory node is known: the nearest Grace (distance 80) is chosen.
    assert [(g.numa_node, g.memory_node) for g in topo.gpus] == [(0, 4), (1, 12), (2, 20), (3, 28)]
    assert any("no CPU affinity" in n for n in topo.notes)


def test_cgroup_hiding_a_node_empties_nvml_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desc, root, _fake = setup(tmp_path, monkeypatch, "a100_pcie_slurm_cgroup")
    topo = detect(
        root,
        allowed_cpus=parse_cpulist(desc["allowed_cpus"]),
        allowed_mems=parse_cpulist(desc["allowed_mems"]),
    )
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.gpus[5].local_cpus == parse_cpulist("28-55,84-111")
    assert topo.gpus[0].local_cpus == parse_cpulist("0-15,56-71")
    assert topo.allowed_cpus == parse_cpulist("0-15,56-71")
    assert any("GPU 4" in n and "no CPU affinity" in n for n in topo.notes)


def test_offline_cpu_missing_from_nvml_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, _fake = setup(tmp_path, monkeypatch, "rtx4090_nps4")
    topo = detect(root)
    assert topo.gpus[4].local_cpus == parse_cpulist("112-127,240-254")
    assert [g.numa_node for g in topo.gpus] == [3, 2, 1, 0, 7, 6, 5, 4]


def test_container_sees_fewer_gpus_than_sysfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, _fake = setup(tmp_path, monkeypatch, "dgx_h100", order=[5, 1])
    topo = detect(root)
    assert [g.pci_bus_id for g in topo.gpus] == ["0000:ab:00.0", "0000:2a:00.0"]
    assert sum("not enumerated by NVML" in n for n in topo.notes) == 6


def test_sysfs_and_nvml_disagreeing_is_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desc = st.load_machine("dgx_h100")
    root = st.build_sysfs(desc, tmp_path / "t")
    desc["gpus"][0]["nvml"]["memory_affinity"] = "1"
    desc["gpus"][0]["nvml"]["cpu_affinity"] = "56-111,168-223"
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    topo = detect(root)
    assert topo.gpus[0].numa_node == 1
    assert any("sysfs numa_node says 0" in n for n in topo.notes)


def test_numa_less_kernel_single_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _desc, root, _fake = setup(tmp_path, monkeypatch, "single_gpu_no_numa")
    topo = detect(root)
    # NVML says NOT_SUPPORTED for the NUMA id; its CPU affinity lies in node 0,
    # the only node, so the GPU gets node 0 from NVML.
    assert (topo.gpus[0].numa_node, topo.gpus[0].source) == (0, "nvml")


# --------------------------------------------------------- fallbacks


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (real_pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    ],
)
def test_init_failure_falls_back_to_sysfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, text: str
) -> None:
    _desc, root, fake = setup(tmp_path, monkeypatch, "dgx_a100_nps4", init_error=code)
    topo = detect(root)
    assert [g.numa_node for g in topo.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert all(g.source == "sysfs" and g.uuid is None for g in topo.gpus)
    assert any("NVML unavailable" in n and text in n for n in topo.notes)
    assert fake.shutdown_count == 0
    with pytest.raises(_nvml.NvmlUnavailable):
        _nvml.query()


def test_missing_pynvml_falls_back_to_sysfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = st.build_sysfs("dgx_h100", tmp_path / "t")
    fake_nvml.hide_pynvml(monkeypatch)
    topo = detect(root)
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert any("not importable" in n for n in topo.notes)


def test_uuids_need_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    desc = st.load_machine("dgx_h100")
    root = st.build_sysfs(desc, tmp_path / "t")
    fake_nvml.hide_pynvml(monkeypatch)
    # Without NVML no UUID is known.  CUDA (which asks the driver) does see
    # the GPU, so planning as if there were none would bind to a node that
    # need not be the GPU's: the entry is an error, as a MIG UUID is.
    with pytest.raises(ConfigError, match="no GPU UUID is known"):
        detect(root, environ={"CUDA_VISIBLE_DEVICES": desc["gpus"][3]["uuid"]})


def test_nvml_not_touched_without_nvidia_gpus_or_when_disabled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(tmp_path, monkeypatch, "mi300x_spr")
    detect(root)
    assert fake.calls == []
    _desc, root, fake = setup(tmp_path, monkeypatch, "dgx_h100")
    topo = detect(root, use_nvml=False)
    assert fake.calls == []
    assert any("use_nvml=False" in n for n in topo.notes)


def test_per_device_errors_are_noted_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(tmp_path, monkeypatch, "dgx_h100")

    def lost(handle: Any) -> str:
        raise real_pynvml.NVMLError(real_pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(fake.module, "nvmlDeviceGetName", lost)
    topo = detect(root)
    assert len(topo.gpus) == 8 and topo.gpus[0].model == "PCI 10de:2330"
    assert any("nvmlDeviceGetName failed: GPU is lost" in n for n in topo.notes)
    assert fake.init_count == fake.shutdown_count == 1


def test_query_reports_raw_nvml_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _desc, _root, fake = setup(tmp_path, monkeypatch, "gb200_nvl_tray")
    report = _nvml.query(cpu_words=3, node_words=1)
    first = report.devices[0]
    assert first.pci_bus_id == "0008:01:00.0"
    assert first.memory_affinity == parse_cpulist("0,3-9,11-17")
    assert first.numa_node_id == 2
    assert fake.init_count == fake.shutdown_count == 1


def test_import_pynumabind_does_not_import_pynvml() -> None:
    code = (
        "import sys, pynumabind\n"
        "pynumabind.Topology\n"
        "from pynumabind import discovery, _nvml, _sysfs, _visible, _kfd\n"
        "assert 'pynvml' not in sys.modules, 'pynvml imported eagerly'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_container_without_pci_sysfs_uses_nvml_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    _desc, root, fake = setup(tmp_path, monkeypatch, "dgx_a100_nps4")
    shutil.rmtree(root / "bus")
    topo = detect(root)
    assert [g.numa_node for g in topo.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert all(g.source == "nvml" for g in topo.gpus)
    assert fake.init_count == 1


def test_extra_device_kind_through_detect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The QEMU test's path: a virtio NIC on node 8 accepted as the accelerator."""
    desc = st.load_machine("sparse_nodes")
    desc["gpus"] = []
    desc["extra_pci"] = [
        {
            "bus_id": "0000:00:04.0",
            "vendor": "0x1af4",
            "device": "0x1000",
            "class": "0x020000",
            "numa_node": 0,
        },
        {
            "bus_id": "0000:00:05.0",
            "vendor": "0x1af4",
            "device": "0x1000",
            "class": "0x020000",
            "numa_node": 8,
        },
    ]
    root = st.build_sysfs(desc, tmp_path / "vm")
    fake = fake_nvml.install_fake_nvml(monkeypatch, desc)
    topo = detect(
        root,
        gpu_vendors={0x1AF4: "virtio"},
        pci_classes=["0x0200"],
        environ={"CUDA_VISIBLE_DEVICES": "1"},
    )
    assert [(g.index, g.physical_index, g.numa_node) for g in topo.gpus] == [(0, 1, 8)]
    assert fake.calls == []  # no NVIDIA device: NVML is not loaded


def test_old_pynvml_returning_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    desc, root, _fake = setup(tmp_path, monkeypatch, "dgx_h100", bytes_strings=True)
    topo = detect(root)
    assert topo.gpus[2].uuid == desc["gpus"][2]["uuid"]
    assert topo.gpus[2].model == "NVIDIA H100 80GB HBM3"
    assert topo.gpus[2].pci_bus_id == "0000:3a:00.0"


@pytest.mark.parametrize("memory_affinity", ["", "0-1"])
def test_an_affinity_spanning_nodes_does_not_invent_a_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory_affinity: str
) -> None:
    """A GPU without proximity (sysfs numa_node -1) has every CPU as NVML affinity.

    Taking the lowest-id node of that tie placed every GPU on node 0 and
    cited NVML for it; the node is unknown, and the planner then uses the
    affinity itself.
    """
    desc = st.load_machine("dgx_h100")
    for gpu in desc["gpus"]:
        gpu["numa_node"] = -1
        gpu.pop("local_cpulist", None)
        gpu["nvml"] = {"cpu_affinity": desc["online_cpus"], "memory_affinity": memory_affinity}
    root = st.build_sysfs(desc, tmp_path / "t")
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    topo = detect(root)
    assert [g.numa_node for g in topo.gpus] == [None] * len(desc["gpus"])
    assert all(g.local_cpus == topo.online_cpus for g in topo.gpus)


def test_a_socket_wide_affinity_defers_to_the_pci_numa_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The legacy call (no scope API) gives the socket's CPUs: on SNC/NPS that
    is several nodes, and the PCI function's numa_node is the exact one."""
    desc = st.load_machine("dgx_a100_nps4")
    socket = {n["id"]: n["package"] for n in desc["nodes"]}
    for gpu in desc["gpus"]:
        package = socket[gpu["numa_node"]]
        cpus = ",".join(n["cpus"] for n in desc["nodes"] if n["package"] == package)
        gpu["nvml"] = {"cpu_affinity": cpus, "memory_affinity": ""}
    root = st.build_sysfs(desc, tmp_path / "t")
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    topo = detect(root)
    assert [g.numa_node for g in topo.gpus] == desc["expect"]["gpu_numa_nodes"]


@pytest.mark.parametrize(
    ("name", "first_mems"), [("gb200_nvl_tray", {0, 2}), ("gh200_quad", {0, 4})]
)
def test_numa_id_not_supported_keeps_the_sysfs_memory_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, first_mems: set
) -> None:
    """Issue 13 item 1: NOT_SUPPORTED from NVML says nothing against sysfs."""
    from pynumabind.planner import plan_all

    desc = st.load_machine(name)
    for gpu in desc["gpus"]:
        # The kernel puts each GPU on its HBM node, whose local_cpulist is empty;
        # this driver answers nvmlDeviceGetNumaNodeId with NOT_SUPPORTED.
        gpu["numa_node"] = gpu["nvml"].pop("numa_node_id")
        gpu["local_cpulist"] = ""
    root = st.build_sysfs(desc, tmp_path / "t")
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    with_nvml = detect(root)
    without = detect(root, use_nvml=False)
    hbm = [g["numa_node"] for g in desc["gpus"]]
    assert [g.memory_node for g in with_nvml.gpus] == hbm
    assert [g.memory_node for g in without.gpus] == hbm
    assert any("memory node" in n and "from sysfs numa_node" in n for n in with_nvml.notes)
    plans = plan_all(with_nvml, gpu_memory=True)
    assert plans[0].mems == first_mems
    assert [p.mems for p in plans] == [p.mems for p in plan_all(without, gpu_memory=True)]
    assert [p.cpus for p in plans] == [p.cpus for p in plan_all(without, gpu_memory=True)]
