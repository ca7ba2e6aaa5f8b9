"""Discovery reads what the mode needs, and a second bind reuses the layout.

The cheaper reads are checked against the full read on every machine
fixture: same plans, every mode, every rank.  Costs are counted in files
read (``read_ascii`` calls, wherever an ``_os`` reader calls it), never timed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from pynumabind import binding as binding_module
from pynumabind import discovery, planner
from pynumabind._os import caches, meminfo, textfile
from pynumabind._os import pci as _pci
from pynumabind._os import sysfs as _sysfs
from pynumabind.cpulist import parse_cpulist
from pynumabind.errors import PynumabindError, TopologyError
from pynumabind.model import CpuMode, Detail, Topology

from ..support import child_cold
from ..support import sysfs_tree as st
from ..support.childproc import run_in_child
from ..support.sysfs_oracle import read_cpus_per_cpu

MACHINES = st.machine_names()
MODES = [m for m in CpuMode if m is not CpuMode.ADVISED]  # resolved before planning


@pytest.fixture(scope="module", params=MACHINES)
def machine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    desc = st.load_machine(request.param)
    root = str(st.build_sysfs(desc, tmp_path_factory.mktemp(request.param)))
    allowed = {}
    if "allowed_cpus" in desc:
        allowed["allowed_cpus"] = parse_cpulist(desc["allowed_cpus"])
    if "allowed_mems" in desc:
        allowed["allowed_mems"] = parse_cpulist(desc["allowed_mems"])
    return root, allowed, discovery.topology_from_sysfs(root, **allowed)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """Every path discovery opens through ``read_ascii``, in order.

    Patched in every ``_os`` module that holds it (:class:`SysfsReader`'s
    own module and the readers that import the function), so that no reader
    opens a file unseen.
    """
    seen: List[str] = []
    real = textfile.read_ascii

    def counting(path: str, what: str = "sysfs file") -> str:
        seen.append(path)
        return real(path, what)

    for module in (textfile, _pci, meminfo, caches, _sysfs):
        if getattr(module, "read_ascii", None) is real:
            monkeypatch.setattr(module, "read_ascii", counting)
    return seen


@pytest.fixture(autouse=True)
def no_kept_layout():
    discovery.forget_layout()
    yield
    discovery.forget_layout()


def _outcomes(topology: Topology, mode: CpuMode, nprocs: Any) -> List[Any]:
    """Each rank's plan, or its error as (type, message): comparable values."""
    try:
        results = planner.plan_each(topology, nprocs, mode=mode)
    except PynumabindError as exc:
        return [(type(exc).__name__, str(exc))]
    return [(type(r).__name__, str(r)) if isinstance(r, PynumabindError) else r for r in results]


def _rank_counts(topology: Topology) -> List[Any]:
    """The default count, and more ranks than GPUs or CPU nodes (exclusive slices share)."""
    units = len(topology.gpus) or len(topology.cpu_nodes)
    return [None, 1, 2 * units + 1]


@pytest.mark.parametrize("mode", MODES, ids=[m.value for m in MODES])
def test_the_mode_s_detail_plans_exactly_as_the_full_read(machine, mode: CpuMode) -> None:
    root, allowed, full = machine
    detail = discovery.detail_for(mode)
    cheap = discovery.topology_from_sysfs(root, detail=detail, **allowed)
    assert cheap.detail is detail
    for nprocs in _rank_counts(full):
        want = _outcomes(full, mode, nprocs)
        assert _outcomes(cheap, mode, nprocs) == want


def test_each_detail_holds_the_full_read_s_facts_it_names(machine) -> None:
    root, allowed, full = machine
    for detail in Detail:
        cheap = discovery.topology_from_sysfs(root, detail=detail, **allowed)
        assert cheap.gpus == full.gpus
        assert (cheap.allowed_cpus, cheap.allowed_mems) == (full.allowed_cpus, full.allowed_mems)
        assert set(cheap.nodes) == set(full.nodes)
        for n, node in full.nodes.items():
            got = cheap.nodes[n]
            assert (got.cpus, got.has_memory, got.distances) == (
                node.cpus,
                node.has_memory,
                node.distances,
            )
        assert set(cheap.cpus) == set(full.cpus)
        for c, cpu in full.cpus.items():
            got_cpu = cheap.cpus[c]
            assert got_cpu.node == cpu.node
            if detail >= Detail.PACKAGES:
                assert got_cpu.package == cpu.package
            if detail >= Detail.CORES:
                assert (got_cpu.core, got_cpu.core_cpus) == (cpu.core, cpu.core_cpus)
            if detail >= Detail.CACHES:
                assert got_cpu.l3 == cpu.l3
        if detail is Detail.FULL:
            assert cheap == full


def test_a_topology_read_with_less_detail_refuses_to_be_a_snapshot(machine) -> None:
    root, allowed, full = machine
    cheap = discovery.topology_from_sysfs(root, detail=Detail.CORES, **allowed)
    with pytest.raises(TopologyError, match="detail CORES"):
        cheap.to_json()
    assert Topology.from_json(full.to_json()) == full  # the full one still does


def test_every_mode_has_a_detail_and_the_default_mode_is_node() -> None:
    assert {m: discovery.detail_for(m) for m in CpuMode} == {
        CpuMode.NODE: Detail.NODES,
        CpuMode.NONE: Detail.NODES,
        CpuMode.SOCKET: Detail.PACKAGES,
        CpuMode.EXCLUSIVE: Detail.CORES,
        CpuMode.CORE_COMPLEX: Detail.CACHES,
        CpuMode.ADVISED: Detail.NODES,  # the record says node or none
    }
    assert discovery.detail_for(None) is Detail.NODES
    assert discovery.detail_for("core-complex") is Detail.CACHES


# ------------------------------------------------------------ files read


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Tuple[str, Dict[str, Any]]:
    desc = st.load_machine("dgx_h100")
    return str(st.build_sysfs(desc, tmp_path_factory.mktemp("dgx"))), desc


def _count(reads: List[str], root: str, detail: Detail) -> int:
    reads.clear()
    _sysfs.read_layout(root, detail=detail)
    return len(reads)


def _both_reads(root: str) -> Tuple[Any, Any]:
    """(CPUs, notes) from the grouped full read and from the per-CPU oracle."""
    reader = textfile.SysfsReader(root)
    online = _sysfs._online_cpus(reader, [])
    layout = _sysfs.read_layout(root, detail=Detail.NODES)
    node_of = {cpu: n.id for n in layout.nodes.values() for cpu in n.cpus}
    grouped: List[str] = []
    oracle: List[str] = []
    return (
        (_sysfs._read_cpus(reader, online, node_of, Detail.FULL, grouped), grouped),
        (read_cpus_per_cpu(reader, online, node_of, oracle), oracle),
    )


def test_the_grouped_full_read_equals_the_per_cpu_read(machine) -> None:
    root, _, _ = machine
    grouped, oracle = _both_reads(root)
    assert grouped == oracle


def test_the_grouped_full_read_equals_the_per_cpu_read_on_this_machine() -> None:
    grouped, oracle = _both_reads("/sys")
    assert grouped == oracle
    assert grouped[0]  # this machine's CPUs were read, not an empty tree


@pytest.mark.parametrize("strip", ["die_id", "topology"])
def test_the_grouped_full_read_equals_the_per_cpu_read_without_files(
    tmp_path: Path, strip: str
) -> None:
    """Older kernels lack die_id (and die_cpus_list); some lack topology/ and cache/ entirely."""
    root = st.build_sysfs(st.load_machine("dgx_h100"), tmp_path)
    for cpu_dir in (root / "devices" / "system" / "cpu").glob("cpu[0-9]*"):
        topo = cpu_dir / "topology"
        if strip == "die_id" and topo.is_dir():
            (topo / "die_id").unlink()
            (topo / "die_cpus_list").unlink()
        elif strip == "topology":
            shutil.rmtree(topo, ignore_errors=True)
            shutil.rmtree(cpu_dir / "cache", ignore_errors=True)
    grouped, oracle = _both_reads(str(root))
    assert grouped == oracle
    expected = {
        "die_id": "topology/die_id missing: dies unknown",
        "topology": "no topology/ for CPUs 0-223: each is taken as its own core in package 0",
    }[strip]
    assert expected in grouped[1]


def test_reads_grow_with_the_mode_not_with_the_cpus(dgx, reads: List[str]) -> None:
    root, desc = dgx
    nodes = len(desc["nodes"])
    pci = len(desc["gpus"]) + len(desc.get("extra_pci", []))
    cpus = len(st.online_cpus(desc))  # 224: 2 packages, 112 cores, 2 L3 groups
    counts = {d: _count(reads, root, d) for d in Detail}
    # cpu/online, node/online, has_memory; cpulist + distance per node; PCI files
    assert counts[Detail.NODES] <= 3 + 2 * nodes + 5 * pci
    _count(reads, root, Detail.NODES)
    assert not any("/devices/system/cpu/cpu" in p for p in reads)
    # per package: its id, package_cpus_list (absent in the fixture), core_siblings_list
    assert counts[Detail.PACKAGES] == counts[Detail.NODES] + 3 * 2
    # per core: core_id, thread_siblings_list; + the one acpi_cppc probe (none here)
    assert counts[Detail.CORES] == counts[Detail.PACKAGES] + 2 * (cpus // 2) + 1
    assert counts[Detail.CACHES] == counts[Detail.CORES] + 3 * 2  # level, type, list per L3
    # + per node its meminfo; per die its id and die_cpus_list (one die per package here)
    assert counts[Detail.FULL] == counts[Detail.CACHES] + nodes + 2 * 2
    assert counts[Detail.FULL] < 2 * cpus  # the per-CPU read took 7 files per CPU


def test_only_the_full_read_opens_the_memory_tiers(reads: List[str]) -> None:
    """A bind (modes node and none: ``Detail.NODES``) reads no tier file; show and snapshot
    (``FULL``) read one ``nodelist`` per tier, here the 6.12 guest's two tiers."""
    root = str(Path(__file__).resolve().parents[1] / "machines" / "sysfs" / "qemu-6.12-hmat")
    for detail in Detail:
        _count(reads, root, detail)
        tiers = [p for p in reads if "memory_tiering" in p]
        if detail is Detail.FULL:
            assert [p.rsplit("/", 2)[1] for p in tiers] == ["memory_tier4", "memory_tier54"]
        else:
            assert tiers == [], (detail, tiers)


def test_only_tiers_all_makes_a_bind_read_the_tiers(reads: List[str]) -> None:
    """``tiers="all"`` needs each node's tier: the full read, for every mode; without it the
    mode's detail is unchanged.  Then real binds on this machine, counting the files they open:
    without tiers no tier file, with ``tiers="all"`` (argument or ``PYNUMABIND_TIERS``) the
    kernel's ``memory_tiering`` is read and, one node and one tier here, the plan says so."""
    for mode in [None, *MODES]:
        assert discovery.detail_for(mode, tiers="all") is Detail.FULL
        assert discovery.detail_for(mode, tiers="local") is discovery.detail_for(mode)
    live_tiers = os.path.isdir("/sys/devices/virtual/memory_tiering")
    before = os.sched_getaffinity(0)
    try:
        for environ, keywords, tiers_read in (
            ({}, {}, False),
            ({"PYNUMABIND_TIERS": ""}, {}, False),  # blank: unset
            ({}, {"tiers": "all"}, True),
            ({"PYNUMABIND_TIERS": "all"}, {}, True),
        ):
            discovery.forget_layout()
            reads.clear()
            bound = binding_module.bind_current_process(0, nprocs=1, environ=environ, **keywords)
            try:
                opened = [p for p in reads if "memory_tiering" in p]
                assert reads and bool(opened) == (tiers_read and live_tiers), (environ, opened)
                assert bound.plan is not None
                said = [w for w in bound.plan.warnings if w.startswith("tiers all: ")]
                assert len(said) == (1 if tiers_read else 0), bound.plan.warnings
                assert bound.plan.policy.value == "preferred"
            finally:
                bound.restore()
    finally:
        os.sched_setaffinity(0, before)


def test_proc_pci_devices_names_the_gpu_vendors_functions() -> None:
    text = (
        "0000\t80860d57\t0\t0\n"
        "1b00\t10de2330\t10\tfb000000\tnvidia\n"  # bus 0x1b, devfn 0: an H100
        "1c08\t10de22a3\t0\t0\tnvidia\n"  # bus 0x1c, device 1: an NVSwitch, still NVIDIA
        "c100\t100274a1\t0\t0\tamdgpu\n"
        "0010\t1af41042\t0\t0\tvirtio-pci\n"
    )
    slots = _pci.vendor_slots(text, {0x10DE: "nvidia", 0x1002: "amd"})
    assert slots == {(0x1B, 0), (0x1C, 8), (0xC1, 0)}
    assert _pci.vendor_slots("zz\n", {0x10DE: "nvidia"}) is None
    assert _pci._slot("0000:1c:01.0") == (0x1C, 8)


def test_the_live_pci_scan_opens_only_gpu_vendors_functions(
    reads: List[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not os.path.exists(_pci.PROC_PCI_DEVICES):
        pytest.skip("no /proc/bus/pci/devices here")
    functions = os.listdir("/sys/bus/pci/devices")
    layout = _sysfs.read_layout("/sys", detail=Detail.NODES)
    opened = {Path(p).parent.name for p in reads if "/bus/pci/devices/" in p}
    assert opened == {g.pci_bus_id for g in layout.gpus}  # no GPU on this box: none opened
    assert _pci.PROC_PCI_DEVICES in reads
    reads.clear()
    monkeypatch.setattr(_pci, "_proc_vendor_slots", lambda vendors, drivers=None: None)  # masked
    without = _sysfs.read_layout("/sys", detail=Detail.NODES)
    assert without.gpus == layout.gpus
    opened = {Path(p).parent.name for p in reads if "/bus/pci/devices/" in p}
    assert opened == set(functions)  # every function's vendor read instead


# ---------------------------------------------------------------- reuse


def test_a_second_detect_reuses_the_layout_and_rereads_the_allowed_sets(
    dgx, reads: List[str]
) -> None:
    root, _ = dgx
    kwargs: Dict[str, Any] = {"sysfs_root": root, "use_nvml": False, "environ": {}}
    first = discovery.detect_topology(detail=Detail.CORES, reuse=True, **kwargs)
    assert len(reads) > 100
    reads.clear()
    again = discovery.detect_topology(detail=Detail.CORES, reuse=True, **kwargs)
    assert reads == [] and again == first
    less = discovery.detect_topology(detail=Detail.NODES, reuse=True, allowed_cpus={0, 1}, **kwargs)
    assert reads == []  # a kept CORES layout serves NODES
    assert less.allowed_cpus == {0, 1} and first.allowed_cpus == first.online_cpus
    visible = discovery.detect_topology(
        detail=Detail.NODES, reuse=True, **{**kwargs, "environ": {"CUDA_VISIBLE_DEVICES": "3,1"}}
    )
    assert reads == [] and [g.physical_index for g in visible.gpus] == [3, 1]


def test_the_kept_layout_is_not_used_where_it_must_not_be(dgx, reads: List[str]) -> None:
    root, _ = dgx
    kwargs: Dict[str, Any] = {"sysfs_root": root, "use_nvml": False, "environ": {}}
    discovery.detect_topology(detail=Detail.NODES, reuse=True, **kwargs)
    for call in (
        {"detail": Detail.CORES, "reuse": True},  # more than was kept
        {"detail": Detail.NODES, "reuse": False},  # not asked
        {"detail": Detail.FULL, "reuse": True},  # live memory sizes
        {"detail": Detail.NODES, "reuse": True, "gpu_vendors": [0x10DE]},  # own options
    ):
        reads.clear()
        discovery.detect_topology(**call, **kwargs)
        assert reads, call
    reads.clear()
    discovery.detect_topology(detail=Detail.NODES, reuse=True, **{**kwargs, "sysfs_root": "/sys"})
    assert reads  # another root
    reads.clear()
    discovery.forget_layout()
    discovery.detect_topology(detail=Detail.NODES, reuse=True, **kwargs)
    assert reads


def test_a_fork_child_reads_the_layout_again(dgx) -> None:
    root, _ = dgx
    discovery.detect_topology(sysfs_root=root, use_nvml=False, detail=Detail.NODES, reuse=True)
    assert discovery._KEPT.layout is not None
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        os._exit(0 if discovery._KEPT.layout is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert discovery._KEPT.layout is not None  # the parent keeps its own


def test_the_second_bind_reads_no_sysfs_file_but_the_fresh_affinity(reads: List[str]) -> None:
    before = os.sched_getaffinity(0)
    try:
        with binding_module.bind_current_process(0, nprocs=1, environ={}) as first:
            assert reads and first.plan is not None
        reads.clear()
        os.sched_setaffinity(0, {0})
        with binding_module.bind_current_process(0, nprocs=1, environ={}) as second:
            assert reads == []
            assert second.plan is not None and second.plan.cpus == {0}  # allowed re-read
    finally:
        os.sched_setaffinity(0, before)


def test_import_loads_no_pynvml_numpy_json_and_a_bind_no_kfd_nvml_json() -> None:
    # A fresh interpreter that imports only the function (see support/_child.py).
    out, _ = run_in_child(child_cold.modules_after_import_and_bind)
    after_import, after_bind = set(out[0]), set(out[1])
    assert not {"pynvml", "numpy", "json"} & after_import
    assert "pynumabind.binding" in after_bind  # the bind ran
    assert not {"pynvml", "json", "pynumabind._os.kfd", "pynumabind._os.nvml"} & after_bind


def test_a_bare_import_loads_neither_typing_nor_logging() -> None:
    # python -S: no site, no .pth file preloading typing.  The fork handler
    # that needs logging is registered on first use (see _forksafe).
    env = {**os.environ, "PYTHONPATH": str(Path(_sysfs.__file__).parents[2])}
    loaded, _ = run_in_child(child_cold.typing_logging_re_after_import, flags=["-S"], env=env)
    assert loaded == []


def test_the_declarations_load_without_cffi_s_parser() -> None:
    # The loader's symbol check reads _libnuma_build's data; cffi and its C
    # parser (about 10 ms) load only when build_ffi() is called.
    out, _ = run_in_child(child_cold.cffi_after_declarations_then_build)
    assert out == [[], True]


def test_cppc_highest_perf_is_read_once_per_core_and_only_from_cores_up(
    tmp_path: Path, reads: List[str]
) -> None:
    """Intel priority cores: one read per core, and none for mode node."""
    desc = st.load_machine("xeon6_pct_b300")
    root = str(st.build_sysfs(desc, tmp_path))
    cores = len(st.online_cpus(desc)) // 2
    _count(reads, root, Detail.PACKAGES)
    assert not any("acpi_cppc" in p for p in reads)
    _count(reads, root, Detail.CORES)
    assert sum("acpi_cppc/highest_perf" in p for p in reads) == cores
    layout = _sysfs.read_layout(root, detail=Detail.CORES)
    assert {c.highest_perf for c in layout.cpus.values()} == {39, 46}
    assert layout.cpus[3].highest_perf == layout.cpus[131].highest_perf == 46  # siblings
    assert discovery.detail_for("node", priority_cores=True) is Detail.CORES
    assert discovery.detail_for("core-complex", priority_cores=True) is Detail.CACHES
    assert discovery.detail_for("node") is Detail.NODES  # default cost unchanged
