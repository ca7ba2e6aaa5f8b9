"""NVML discovery against a fake pynvml fed from the recorded machines.

Uses ``tests/support/fake_nvml.py``, as the report's tests do;
``.ci/nvml_oldest.py`` (CI, and ``tox -e nvml-oldest``) runs this file again
against the oldest nvidia-ml-py that ``pyproject.toml`` allows, with
``PYNUMABIND_EXPECT_NVML_PY`` naming it, so the floor is tested and not just
declared.

A recorded machine's sysfs tree is built once per module (``trees``): the
tests only read it, and the fixture checks at the end that none changed it.
A test that changes a tree, or builds one from a changed description, builds
its own under ``tmp_path``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pynvml as real_pynvml
import pytest

from pynumabind._os import nvml as _nvml
from pynumabind.cpulist import parse_cpulist
from pynumabind.discovery import detect_topology
from pynumabind.errors import ConfigError
from pynumabind.model import Topology

from ..support import child_cold, fake_nvml
from ..support import sysfs_tree as st
from ..support.childproc import run_in_child

NVIDIA_MACHINES = [
    name
    for name in st.machine_names()
    if any(g["vendor"] == "0x10de" for g in st.load_machine(name)["gpus"])
]


Trees = Callable[[str], Path]


def _fingerprint(root: Path) -> List[Tuple[str, int, int]]:
    """Every path under ``root`` with its size and mtime: what a change would touch."""
    seen = []
    for here, dirs, files in os.walk(root):
        for entry in dirs + files:
            path = os.path.join(here, entry)
            info = os.lstat(path)
            seen.append((os.path.relpath(path, root), info.st_size, info.st_mtime_ns))
    return sorted(seen)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trees]:
    """``trees(name)``: the recorded machine's sysfs tree, built on first use in this module."""
    built: Dict[str, Path] = {}
    prints: Dict[str, List[Tuple[str, int, int]]] = {}

    def tree(name: str) -> Path:
        if name not in built:
            built[name] = st.build_sysfs(name, tmp_path_factory.mktemp(name) / name)
            prints[name] = _fingerprint(built[name])
        return built[name]

    yield tree
    changed = [name for name, root in built.items() if _fingerprint(root) != prints[name]]
    assert not changed, f"a test changed the shared sysfs tree(s) {changed}: build your own"


def detect(root: Path, **kw: Any) -> Topology:
    kw.setdefault("environ", {})
    return detect_topology(sysfs_root=str(root), **kw)


def setup(trees: Trees, monkeypatch: pytest.MonkeyPatch, name: str, **fake_kw: Any):
    desc = st.load_machine(name)
    root = trees(name)
    fake = fake_nvml.install_fake_nvml(monkeypatch, desc, **fake_kw)
    return desc, root, fake


@pytest.mark.parametrize("name", NVIDIA_MACHINES)
def test_every_nvidia_machine_matches_its_source(
    trees: Trees, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    desc, root, fake = setup(trees, monkeypatch, name)
    topo = detect(root)
    # A GPU a device cgroup denies (NO_PERMISSION) is not one this process can use.
    opened = [
        (want, spec)
        for want, spec in zip(st.gpu_expectations(desc), desc["gpus"])
        if not spec["nvml"].get("no_permission")
    ]
    assert len(topo.gpus) == len(opened)
    for gpu, (want, spec) in zip(topo.gpus, opened):
        assert gpu.pci_bus_id == spec["bus_id"]
        assert gpu.uuid == spec["uuid"] and gpu.model == spec["model"]
        assert gpu.memory_node == want["memory_node"]
        if want["numa_node"] is not None:
            assert gpu.numa_node == want["numa_node"]
            assert gpu.source == "nvml"
    assert fake.init_count == fake.shutdown_count == 1
    # Every wrapper _nvml uses is in the installed nvidia-ml-py (so in the floor,
    # when the suite runs against the oldest allowed release: tox -e nvml-oldest).
    assert not [n for n in topo.notes if " wrapper: " in n]


def test_nvml_calls_use_node_scope_and_sized_masks(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")
    topo = detect(root)
    assert "nvmlDeviceGetCpuAffinityWithinScope" in fake.calls
    assert "nvmlDeviceGetCpuAffinity" not in fake.calls
    assert topo.gpus[4].local_cpus == parse_cpulist("56-111,168-223")
    assert [g.physical_index for g in topo.gpus] == list(range(8))


def test_old_driver_without_scope_call_uses_plain_cpu_affinity(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100", no_scope_api=True)
    topo = detect(root)
    assert "nvmlDeviceGetCpuAffinity" in fake.calls
    assert topo.gpus[0].local_cpus == parse_cpulist("0-55,112-167")


def test_nvml_order_differs_from_pci_order(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    order = [7, 6, 5, 4, 3, 2, 1, 0]
    desc, root, _fake = setup(trees, monkeypatch, "dgx_h100", order=order)
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


def test_uuid_visible_devices_through_nvml(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    desc, root, _fake = setup(trees, monkeypatch, "dgx_a100_nps4")
    gpu5, gpu2 = desc["gpus"][5]["uuid"], desc["gpus"][2]["uuid"]
    topo = detect(root, environ={"CUDA_VISIBLE_DEVICES": f"{gpu5},{gpu2[:12]}"})
    assert [(g.physical_index, g.numa_node) for g in topo.gpus] == [(5, 7), (2, 1)]


def test_mig_uuid_resolved_through_nvml(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    desc = st.load_machine("dgx_a100_nps4")
    mig = "MIG-5c6a4c66-1d27-5a13-b4b5-8f0a6e2f3e51"
    _d, root, fake = setup(trees, monkeypatch, "dgx_a100_nps4", mig={mig: desc["gpus"][6]["uuid"]})
    topo = detect(root, environ={"CUDA_VISIBLE_DEVICES": mig})
    assert [(g.physical_index, g.numa_node) for g in topo.gpus] == [(6, 5)]
    assert "nvmlDeviceGetDeviceHandleFromMigDeviceHandle" in fake.calls
    unknown = detect(root, environ={"CUDA_VISIBLE_DEVICES": "MIG-0000"})
    assert unknown.gpus == ()
    assert any("MIG-0000" in n for n in unknown.notes)


def test_grace_memory_node_and_cpu_node(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    _desc, root, _fake = setup(trees, monkeypatch, "gb200_nvl_tray")
    topo = detect(root)
    assert [(g.numa_node, g.memory_node) for g in topo.gpus] == [(0, 2), (0, 10), (1, 18), (1, 26)]
    for gpu in topo.gpus:
        assert gpu.numa_node in topo.cpu_nodes  # never a CPU-less node to bind CPUs to
        assert topo.nodes[gpu.memory_node].memory_only


def test_grace_cpu_node_from_cpu_affinity_then_distance(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    desc = st.load_machine("gh200_quad")
    root = trees("gh200_quad")
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
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    desc, root, _fake = setup(trees, monkeypatch, "a100_pcie_slurm_cgroup")
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
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, _fake = setup(trees, monkeypatch, "rtx4090_nps4")
    topo = detect(root)
    assert topo.gpus[4].local_cpus == parse_cpulist("112-127,240-254")
    assert [g.numa_node for g in topo.gpus] == [3, 2, 1, 0, 7, 6, 5, 4]


def test_container_sees_fewer_gpus_than_sysfs(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, _fake = setup(trees, monkeypatch, "dgx_h100", order=[5, 1])
    topo = detect(root)
    assert [g.pci_bus_id for g in topo.gpus] == ["0000:ab:00.0", "0000:2a:00.0"]
    assert sum("not enumerated by NVML" in n for n in topo.notes) == 6


def test_sysfs_and_nvml_disagreeing_is_noted(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    desc = st.load_machine("dgx_h100")
    root = trees("dgx_h100")
    desc["gpus"][0]["nvml"]["memory_affinity"] = "1"
    desc["gpus"][0]["nvml"]["cpu_affinity"] = "56-111,168-223"
    fake_nvml.install_fake_nvml(monkeypatch, desc)
    topo = detect(root)
    assert topo.gpus[0].numa_node == 1
    assert any("sysfs numa_node says 0" in n for n in topo.notes)


def test_numa_less_kernel_single_gpu(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    _desc, root, _fake = setup(trees, monkeypatch, "single_gpu_no_numa")
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
    trees: Trees, monkeypatch: pytest.MonkeyPatch, code: int, text: str
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_a100_nps4", init_error=code)
    topo = detect(root)
    assert [g.numa_node for g in topo.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert all(g.source == "sysfs" and g.uuid is None for g in topo.gpus)
    assert any("NVML unavailable" in n and text in n for n in topo.notes)
    assert fake.shutdown_count == 0
    with pytest.raises(_nvml.NvmlUnavailable):
        _nvml.query()


def test_missing_pynvml_falls_back_to_sysfs(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    root = trees("dgx_h100")
    fake_nvml.hide_pynvml(monkeypatch)
    topo = detect(root)
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert any("not importable" in n for n in topo.notes)


def test_uuids_need_nvml(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    desc = st.load_machine("dgx_h100")
    root = trees("dgx_h100")
    fake_nvml.hide_pynvml(monkeypatch)
    # Without NVML no UUID is known.  CUDA (which asks the driver) does see
    # the GPU, so planning as if there were none would bind to a node that
    # need not be the GPU's: the entry is an error, as a MIG UUID is.
    with pytest.raises(ConfigError, match="no GPU UUID is known"):
        detect(root, environ={"CUDA_VISIBLE_DEVICES": desc["gpus"][3]["uuid"]})


def test_nvml_not_touched_without_nvidia_gpus_or_when_disabled(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "mi300x_spr")
    detect(root)
    assert fake.calls == []
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")
    topo = detect(root, use_nvml=False)
    assert fake.calls == []
    assert any("use_nvml=False" in n for n in topo.notes)


def test_per_device_errors_are_noted_not_fatal(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")

    def lost(handle: Any) -> str:
        raise real_pynvml.NVMLError(real_pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(fake.module, "nvmlDeviceGetName", lost)
    topo = detect(root)
    assert len(topo.gpus) == 8 and topo.gpus[0].model == "PCI 10de:2330"
    assert any("nvmlDeviceGetName failed: GPU is lost" in n for n in topo.notes)
    assert fake.init_count == fake.shutdown_count == 1


def test_query_reports_raw_nvml_view(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    _desc, _root, fake = setup(trees, monkeypatch, "gb200_nvl_tray")
    report = _nvml.query(cpu_words=3, node_words=1)
    first = report.devices[0]
    assert first.pci_bus_id == "0008:01:00.0"
    assert first.memory_affinity == parse_cpulist("0,3-9,11-17")
    assert first.numa_node_id == 2
    assert fake.init_count == fake.shutdown_count == 1


def test_import_pynumabind_does_not_import_pynvml() -> None:
    loaded, _ = run_in_child(child_cold.pynvml_after_importing_discovery, timeout=60)
    assert loaded == [], "pynvml imported eagerly"


def test_container_without_pci_sysfs_uses_nvml_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    desc = st.load_machine("dgx_a100_nps4")
    root = st.build_sysfs(desc, tmp_path / "t")  # its own: this test removes a part
    fake = fake_nvml.install_fake_nvml(monkeypatch, desc)
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


def test_old_pynvml_returning_bytes(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    desc, root, _fake = setup(trees, monkeypatch, "dgx_h100", bytes_strings=True)
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
    """NOT_SUPPORTED from NVML says nothing against sysfs."""
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


# ------------------------------------------- the fake offers what nvidia-ml-py offers


def test_fake_refuses_a_function_the_real_module_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-ml-py 12.535.x has no nvmlDeviceGetNumaNodeId: neither may the fake."""
    desc = st.load_machine("gb200_nvl_tray")
    if hasattr(real_pynvml, "nvmlDeviceGetNumaNodeId"):
        assert "nvmlDeviceGetNumaNodeId" in fake_nvml.FakeNvml(desc).provided
        monkeypatch.delattr(real_pynvml, "nvmlDeviceGetNumaNodeId")
    fake = fake_nvml.install_fake_nvml(monkeypatch, desc)
    assert not hasattr(fake.module, "nvmlDeviceGetNumaNodeId")
    assert fake.refused == ["nvmlDeviceGetNumaNodeId"]


def test_a_pynvml_without_the_numa_wrapper_is_noted(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the floor the HBM nodes were lost silently; now one note says so."""
    if hasattr(real_pynvml, "nvmlDeviceGetNumaNodeId"):
        monkeypatch.delattr(real_pynvml, "nvmlDeviceGetNumaNodeId")
    _desc, root, fake = setup(trees, monkeypatch, "gb200_nvl_tray")
    report = _nvml.query(cpu_words=3, node_words=1)
    assert all(d.numa_node_id is None for d in report.devices)
    wanted = "has no nvmlDeviceGetNumaNodeId wrapper: GPU memory nodes (Grace/GB200 HBM)"
    assert [n for n in report.notes if wanted in n] == [
        n for n in report.notes if f"nvidia-ml-py>={_nvml.NVML_PY_FLOOR}" in n
    ]
    assert sum(wanted in n for n in report.notes) == 1  # once, not once per GPU
    assert sum(wanted in n for n in detect(root).notes) == 1
    assert "nvmlDeviceGetNumaNodeId" not in fake.calls


def test_the_declared_floor_is_the_one_the_library_names() -> None:
    import re

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        pytest.skip("not run from a source checkout (no pyproject.toml)")
    pins = re.findall(r'"nvidia-ml-py>=([0-9.]+)"', pyproject.read_text(encoding="utf-8"))
    assert pins == [_nvml.NVML_PY_FLOOR]


def _release(version: str) -> Tuple[int, ...]:
    assert all(part.isdigit() for part in version.split(".")), f"not a release: {version!r}"
    return tuple(int(part) for part in version.split("."))


def test_the_pynvml_under_test_is_the_nvidia_ml_py_expected() -> None:
    """The imported ``pynvml`` belongs to an nvidia-ml-py the floor allows, and,
    with ``PYNUMABIND_EXPECT_NVML_PY`` set (the nvml-oldest run), to exactly that
    release: a run meant for the floor cannot pass on another version."""
    from importlib import metadata

    where = Path(real_pynvml.__file__).resolve()
    owners = [
        dist
        for dist in metadata.distributions()
        if (dist.metadata["Name"] or "").lower().replace("_", "-") == "nvidia-ml-py"
        and any(Path(str(dist.locate_file(f))).resolve() == where for f in dist.files or ())
    ]
    assert len(owners) == 1, f"pynvml at {where} belongs to {len(owners)} nvidia-ml-py installs"
    version = owners[0].version
    expected = os.environ.get("PYNUMABIND_EXPECT_NVML_PY")
    if expected:
        assert version == expected, f"pynvml at {where} is nvidia-ml-py {version}, not {expected}"
    assert _release(version) >= _release(_nvml.NVML_PY_FLOOR), (version, _nvml.NVML_PY_FLOOR)


def test_fake_rejects_a_signature_unlike_the_real_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def nvmlDeviceGetCpuAffinity(handle: Any) -> None:  # a wrapper with one parameter less
        return None

    monkeypatch.setattr(real_pynvml, "nvmlDeviceGetCpuAffinity", nvmlDeviceGetCpuAffinity)
    with pytest.raises(TypeError, match=r"nvmlDeviceGetCpuAffinity\(handle, cpuSetSize\)"):
        fake_nvml.FakeNvml(st.load_machine("dgx_h100"))


def test_fake_knows_every_nvml_function_the_library_calls() -> None:
    """A new call in _nvml without a fake for it would pass as 'missing wrapper'."""
    import re

    source = Path(_nvml.__file__).read_text(encoding="utf-8")
    called = set(re.findall(r"\b(nvml[A-Z][A-Za-z]+)\b", source))
    fake = fake_nvml.FakeNvml(st.load_machine("dgx_h100"))
    assert called, "no NVML function found in _nvml.py"
    assert called <= set(fake.provided) | set(fake.refused), called - set(fake.provided)
    known = fake.provided + fake.refused
    assert set(fake.provided) == {n for n in known if hasattr(real_pynvml, n)}


# ------------------------------------------------ NVML once per process


def test_a_second_discovery_does_not_ask_nvml_again(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")
    first = detect(root)
    asked = list(fake.calls)
    second = detect(root, environ={"CUDA_VISIBLE_DEVICES": "3,1"})
    assert fake.calls == asked  # not even nvmlInit
    assert fake.init_count == fake.shutdown_count == 1
    assert [g.pci_bus_id for g in second.gpus] == [
        first.gpus[3].pci_bus_id,
        first.gpus[1].pci_bus_id,
    ]
    assert detect(root) == first


def test_nvml_asks_each_gpu_once_per_call_it_needs(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")
    detect(root)
    per_gpu = [
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetCpuAffinityWithinScope",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMemoryAffinity",
    ]
    if hasattr(real_pynvml, "nvmlDeviceGetNumaNodeId"):
        per_gpu.append("nvmlDeviceGetNumaNodeId")
    want = {"nvmlInit": 1, "nvmlDeviceGetCount": 1, "nvmlShutdown": 1}
    want.update({call: 8 for call in per_gpu})
    assert {c: fake.calls.count(c) for c in set(fake.calls)} == want


def test_a_call_the_driver_lacks_is_asked_once_and_noted(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    _desc, root, fake = setup(
        trees, monkeypatch, "gb200_nvl_tray", driver_lacks=["nvmlDeviceGetNumaNodeId"]
    )
    topo = detect(root)
    assert fake.calls.count("nvmlDeviceGetNumaNodeId") == 1  # not once per GPU
    assert [n for n in topo.notes if "nvmlDeviceGetNumaNodeId" in n] == [
        "the driver's NVML has no nvmlDeviceGetNumaNodeId (FunctionNotFound): "
        "GPU memory nodes (Grace/GB200 HBM) are not asked of NVML"
    ]


def test_unavailable_nvml_is_not_looked_for_again(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = real_pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100", init_error=code)
    first = detect(root)
    assert detect(root) == first
    assert fake.calls == ["nvmlInit"]
    with pytest.raises(_nvml.NvmlUnavailable, match="Library Not Found"):
        _nvml.query()
    assert fake.calls == ["nvmlInit"]


def test_new_mig_devices_are_resolved_without_asking_the_gpus_again(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    desc = st.load_machine("dgx_a100_nps4")
    mig1 = "MIG-5c6a4c66-1d27-5a13-b4b5-8f0a6e2f3e51"
    mig2 = "MIG-0d2b3c4e-1111-2222-3333-444455556666"
    mig = {mig1: desc["gpus"][6]["uuid"], mig2: desc["gpus"][1]["uuid"]}
    _d, root, fake = setup(trees, monkeypatch, "dgx_a100_nps4", mig=mig)
    assert [g.physical_index for g in detect(root).gpus] == list(range(8))
    asked = len(fake.calls)
    topo = detect(root, environ={"CUDA_VISIBLE_DEVICES": f"{mig1},{mig2}"})
    assert [(g.physical_index, g.numa_node) for g in topo.gpus] == [(6, 5), (1, 3)]
    resolve = [
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "nvmlDeviceGetUUID",
    ]
    assert fake.calls[asked:] == ["nvmlInit", *resolve, *resolve, "nvmlShutdown"]
    asked = len(fake.calls)
    assert detect(root, environ={"CUDA_VISIBLE_DEVICES": mig2}).gpus[0].physical_index == 1
    assert fake.calls[asked:] == []
    assert fake.init_count == fake.shutdown_count == 2


def test_other_mask_sizes_ask_again(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    _desc, _root, fake = setup(trees, monkeypatch, "gb200_nvl_tray")
    small = _nvml.query(cpu_words=3, node_words=1)
    assert _nvml.query(cpu_words=3, node_words=1) == small and fake.init_count == 1
    assert _nvml.query(cpu_words=4, node_words=1) == small and fake.init_count == 2
    _nvml.forget()
    assert _nvml.query(cpu_words=4, node_words=1) == small and fake.init_count == 3
    assert fake.init_count == fake.shutdown_count


def test_a_fork_child_asks_nvml_itself(trees: Trees, monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import os

    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")
    parent = detect(root)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report, then leave without running pytest's exit handlers
        try:
            child = detect(root)
            said = {"inits": fake.init_count, "same": child == parent}
            os.write(write, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = json.loads(pipe.read() or "{}")
    os.waitpid(pid, 0)
    assert said == {"inits": 2, "same": True}  # the parent's one, then the child's own
    assert fake.init_count == 1
    assert detect(root) == parent and fake.init_count == 1


# ------------------------------------------------ every NVML failure stays typed


def _raiser(error: BaseException) -> Any:
    def raising(*args: Any) -> Any:
        raise error

    return raising


FAILURES = {
    "NVMLError": lambda: real_pynvml.NVMLError(real_pynvml.NVML_ERROR_UNKNOWN),
    "OSError": lambda: OSError(5, "Input/output error"),
    "RuntimeError": lambda: RuntimeError("binding bug"),
    "UnicodeDecodeError": lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize("call", fake_nvml.FakeNvml(st.load_machine("dgx_h100")).provided)
def test_any_failure_of_any_nvml_call_is_a_note_or_unavailable(
    trees: Trees, monkeypatch: pytest.MonkeyPatch, call: str, failure: str
) -> None:
    desc = st.load_machine("dgx_a100_nps4")
    mig = "MIG-5c6a4c66-1d27-5a13-b4b5-8f0a6e2f3e51"
    root = trees("dgx_a100_nps4")
    fake = fake_nvml.install_fake_nvml(
        monkeypatch,
        desc,
        mig={mig: desc["gpus"][6]["uuid"]},
        no_scope_api=call == "nvmlDeviceGetCpuAffinity",  # so that the legacy call is made
    )
    monkeypatch.setattr(fake.module, call, _raiser(FAILURES[failure]()))
    if call.startswith("nvmlSystem"):  # the report's version calls: discovery makes none
        answer = _nvml.versions()  # never raises for a failed answer
        if call == "nvmlSystemGetCudaDriverVersion":  # its _v2 answers first
            assert answer.cuda_driver == "12.4" and not answer.notes
        else:
            assert any(n.startswith(f"{call} failed: ") for n in answer.notes), answer
        assert fake.init_count == fake.shutdown_count == 1
        return
    unusable = call in ("nvmlInit", "nvmlDeviceGetCount")
    # Without NVML a MIG UUID is a ConfigError (only NVML can resolve it): ask for
    # one only where NVML itself is usable.
    visible = "0" if unusable else f"0,{mig}"
    topo = detect(root, environ={"CUDA_VISIBLE_DEVICES": visible})  # never raises
    if unusable:
        assert any(n.startswith(f"NVML unavailable ({call} failed: ") for n in topo.notes)
        assert [(g.source, g.numa_node) for g in topo.gpus] == [("sysfs", 3)]
    elif call != "nvmlShutdown":
        assert any(call in n or "does not know MIG device" in n for n in topo.notes), topo.notes
    inits = fake.init_count
    assert inits == (0 if call == "nvmlInit" else 1)
    # The same answer again, from what this process learnt.
    assert detect(root, environ={"CUDA_VISIBLE_DEVICES": visible}) == topo
    assert fake.init_count == inits


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        ("nvmlDeviceGetCpuAffinityWithinScope", "not a mask"),
        ("nvmlDeviceGetCpuAffinityWithinScope", [-1]),
        ("nvmlDeviceGetCpuAffinityWithinScope", None),
        ("nvmlDeviceGetMemoryAffinity", [1 << 70]),
        ("nvmlDeviceGetNumaNodeId", "two"),
        ("nvmlDeviceGetUUID", b"\xff\xfe"),
        ("nvmlDeviceGetName", b"\xc3"),
    ],
)
def test_an_unusable_answer_is_a_note_not_a_traceback(
    trees: Trees, monkeypatch: pytest.MonkeyPatch, call: str, answer: Any
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")
    if not hasattr(fake.module, call):
        pytest.skip(f"the installed nvidia-ml-py has no {call}")
    monkeypatch.setattr(fake.module, call, lambda *args: answer)
    topo = detect(root)
    assert len(topo.gpus) == 8
    assert sum(f"{call} gave an unusable answer" in n for n in topo.notes) == 8
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize("bus_id", [None, "zz:00.0", b"\xff"])
def test_an_unusable_pci_id_skips_that_gpu_with_a_note(
    trees: Trees, monkeypatch: pytest.MonkeyPatch, bus_id: Any
) -> None:
    _desc, root, fake = setup(trees, monkeypatch, "dgx_h100")
    real_info = fake.module.nvmlDeviceGetPciInfo

    def nvmlDeviceGetPciInfo(handle: Any) -> Any:
        info = real_info(handle)
        if handle.index == 2:
            info.busId = info.busIdLegacy = bus_id
        return info

    monkeypatch.setattr(fake.module, "nvmlDeviceGetPciInfo", nvmlDeviceGetPciInfo)
    topo = detect(root)
    assert any(n.startswith("NVML GPU 2: nvmlDeviceGetPciInfo failed (") for n in topo.notes)
    assert len(topo.gpus) == 7


def test_a_module_that_is_not_nvidia_ml_py_is_unavailable(
    trees: Trees, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    root = trees("dgx_h100")
    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))
    topo = detect(root)
    assert any("is not nvidia-ml-py's (no NVMLError)" in n for n in topo.notes)
    assert [g.numa_node for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


# ------------------------------------------- what discovery tried, logged (show -v, -vv)


def _logged(caplog: pytest.LogCaptureFixture, level: int) -> List[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pynumabind.discovery" and r.levelno == level
    ]


def test_discovery_logs_each_source_and_what_nvml_said(
    trees: Trees, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _desc, root, _fake = setup(trees, monkeypatch, "dgx_h100")
    with caplog.at_level(logging.DEBUG, logger="pynumabind"):
        detect(root, environ={"CUDA_VISIBLE_DEVICES": "5,1"})
    info = _logged(caplog, logging.INFO)
    assert info[0].startswith(f"discovery: sysfs {root} (read): 2 NUMA nodes, 224 CPUs online")
    assert info[1] == (
        "discovery: PCI: 8 GPUs among the display and accelerator functions "
        "(8 NVIDIA, 0 AMD, 0 Intel)"
    )
    assert "discovery: KFD (AMD's order and UUIDs): not needed: no AMD GPU" in info
    assert "discovery: NVML: asked (sysfs lists 8 NVIDIA GPU(s)): 8 GPUs" in info
    assert info[-1].startswith(
        "discovery: visibility: CUDA_VISIBLE_DEVICES='5,1': 2 of 8 GPUs seen: 0: 0000:ab:00.0"
    )
    debug = _logged(caplog, logging.DEBUG)
    assert sum(line.startswith("discovery: sysfs GPU ") for line in debug) == 8
    assert sum(line.startswith("discovery: NVML GPU ") for line in debug) == 8
    assert sum(line.startswith("discovery: sysfs node ") for line in debug) == 2


def test_discovery_logs_why_nvml_gave_nothing(
    trees: Trees, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _desc, root, _fake = setup(
        trees, monkeypatch, "dgx_h100", init_error=real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    )
    with caplog.at_level(logging.INFO, logger="pynumabind"):
        detect(root)
        detect(root, use_nvml=False)
    nvml = [line for line in _logged(caplog, logging.INFO) if "NVML:" in line]
    assert nvml[0].startswith("discovery: NVML: asked (sysfs lists 8 NVIDIA GPU(s)): unavailable:")
    assert nvml[1] == "discovery: NVML: not asked: use_nvml=False (the CLI's --no-nvml)"
    assert not _logged(caplog, logging.DEBUG)  # INFO only: no details


def test_discovery_logs_nothing_unless_asked(
    trees: Trees, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _desc, root, _fake = setup(trees, monkeypatch, "dgx_h100")
    with caplog.at_level(logging.WARNING, logger="pynumabind"):
        detect(root)
    assert not [r for r in caplog.records if r.name == "pynumabind.discovery"]
