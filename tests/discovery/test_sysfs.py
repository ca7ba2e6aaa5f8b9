"""The sysfs reader: kernel formats, degradation, errors, allowed sets, the live machine."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hyp_st

from pynumabind._os import libnuma as _libnuma
from pynumabind._os import pci as _pci
from pynumabind._os.pci import normalize_bus_id
from pynumabind.cpulist import format_cpulist, parse_cpulist
from pynumabind.discovery import detect_topology, topology_from_sysfs
from pynumabind.discovery import topology_from_sysfs as read_topology
from pynumabind.errors import ConfigError, TopologyError
from pynumabind.model import Topology
from pynumabind.planner import plan

from ..support import libnuma_oracle as oracle
from ..support import root_setup
from ..support import sysfs_tree as st
from ..support.childproc import run_in_child
from . import child_discovery


def tree(tmp_path: Path, name: str, **changes: object) -> Path:
    desc = st.load_machine(name)
    desc.update(changes)
    return st.build_sysfs(desc, tmp_path / name)


# ------------------------------------------------------------- bus ids


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("00000000:07:00.0", "0000:07:00.0"),
        ("00000000:DB:00.0", "0000:db:00.0"),
        ("0000:db:00.0", "0000:db:00.0"),
        ("00000009:01:00.0", "0009:01:00.0"),
        ("0018:01:00.0", "0018:01:00.0"),
        ("07:00.0", "0000:07:00.0"),
        ("0000:10:1C.0", "0000:10:1c.0"),
    ],
)
def test_bus_ids_are_normalized(raw: str, want: str) -> None:
    assert normalize_bus_id(raw) == want


@pytest.mark.parametrize(
    "raw", ["", "GPU-1", "0000:07:00", "0000:07:00.8", "1:2:3:4.0", "0:0:20.0"]
)
def test_malformed_bus_ids_are_rejected(raw: str) -> None:
    with pytest.raises(TopologyError):
        normalize_bus_id(raw)


# The grammar the hand-written reader (pci._bdf) replaced, written out here as
# the regular expression it was: the two must agree on every string.
BUS_ID_GRAMMAR = re.compile(
    r"\A(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\Z"
)


@given(
    hyp_st.text(alphabet="0123456789abcdefABCDEFgx:.\n ", max_size=20)
    | hyp_st.from_regex(BUS_ID_GRAMMAR, fullmatch=True)
)
def test_the_bus_id_reader_is_the_grammar(text: str) -> None:
    match = BUS_ID_GRAMMAR.match(text)
    want = None if match is None else (match.group(1) or "", *match.group(2, 3, 4))
    assert _pci._bdf(text) == want


# --------------------------------------------------------- node details


def test_sparse_node_ids_map_distance_columns_by_online_order(tmp_path: Path) -> None:
    root = tree(tmp_path, "sparse_nodes")
    row = (root / "devices/system/node/node8/distance").read_text()
    assert row == "40 10\n"  # two columns: node 0 and node 8
    topo = topology_from_sysfs(str(root))
    assert topo.distance(8, 0) == 40 and topo.distance(8, 8) == 10
    assert topo.distance(0, 1) is None
    assert [g.numa_node for g in topo.gpus] == [0, 8]


def test_memoryless_cpu_nodes(tmp_path: Path) -> None:
    topo = topology_from_sysfs(str(tree(tmp_path, "threadripper_memless")))
    assert [topo.nodes[n].has_memory for n in range(4)] == [False, True, True, False]
    assert topo.nodes[0].cpus == parse_cpulist("0-5,24-29")
    assert topo.nodes[0].memory_total == 0
    assert topo.allowed_mems == {1, 2}
    assert topo.cpu_nodes == (0, 1, 2, 3)


def test_cpu_less_memory_nodes_on_grace(tmp_path: Path) -> None:
    topo = topology_from_sysfs(str(tree(tmp_path, "gb200_nvl_tray")))
    assert topo.cpu_nodes == (0, 1)
    assert topo.nodes[2].memory_only and topo.nodes[2].memory_total == 190464 * 2**20
    assert not topo.nodes[3].has_memory and not topo.nodes[3].cpus
    assert topo.allowed_mems == {0, 1, 2, 10, 18, 26}
    assert topo.distance(2, 0) == 80 and topo.distance(2, 1) == 120
    assert topo.distance(2, 10) == 255
    assert [n for n, _ in topo.nearest_cpu_nodes(18)] == [1, 0]


def test_offline_cpus_are_dropped_from_nodes(tmp_path: Path) -> None:
    root = tree(tmp_path, "rtx4090_nps4")
    # The fixture lists CPU 255 in node 7's cpulist, as some kernels do.
    assert (root / "devices/system/node/node7/cpulist").read_text() == "112-127,240-255\n"
    topo = topology_from_sysfs(str(root))
    assert 255 not in topo.cpus and 255 not in topo.nodes[7].cpus
    assert topo.cpus[127].siblings == {127}  # its SMT sibling 255 is offline
    assert 255 not in topo.allowed_cpus


def test_kernel_without_numa_is_one_node_with_a_note(tmp_path: Path) -> None:
    topo = topology_from_sysfs(str(tree(tmp_path, "single_gpu_no_numa")))
    assert list(topo.nodes) == [0]
    assert topo.nodes[0].cpus == parse_cpulist("0-7")
    assert any("kernel without NUMA" in n for n in topo.notes)
    assert topo.gpus[0].numa_node is None
    assert any("numa_node -1" in n for n in topo.notes)


def test_missing_cache_and_die_information_degrades_with_notes(tmp_path: Path) -> None:
    topo = topology_from_sysfs(str(tree(tmp_path, "dgx_h100", l3=None, die_id=False)))
    assert all(c.l3 == frozenset() for c in topo.cpus.values())
    assert all(c.die is None for c in topo.cpus.values())
    assert any("no L3 cache information" in n for n in topo.notes)
    assert any("die_id missing" in n for n in topo.notes)
    # Everything else is intact.
    assert topo.cpus[5].siblings == {5, 117}


def test_missing_topology_directory_degrades(tmp_path: Path) -> None:
    root = tree(tmp_path, "sparse_nodes")
    shutil.rmtree(root / "devices/system/cpu/cpu3/topology")
    topo = topology_from_sysfs(str(root))
    assert topo.cpus[3].core == 3 and topo.cpus[3].package == 0
    assert any("no topology/ for CPUs 3" in n for n in topo.notes)


def test_missing_cpu_online_file_falls_back_to_per_cpu_flags(tmp_path: Path) -> None:
    root = tree(tmp_path, "rtx4090_nps4")
    (root / "devices/system/cpu/online").unlink()
    topo = topology_from_sysfs(str(root))
    assert topo.online_cpus == parse_cpulist("0-254")
    assert any("cpu/online missing" in n for n in topo.notes)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("relative", "content", "fragment"),
    [
        ("devices/system/node/node8/distance", "40 x\n", "malformed distance row"),
        ("devices/system/node/node8/distance", "40 10 10\n", "expected 2 numbers"),
        ("devices/system/node/node0/cpulist", "0-7,zz\n", "malformed list"),
        ("devices/system/node/node0/meminfo", "Node 0 MemTotal: lots\n", "malformed line"),
        ("devices/system/cpu/cpu7/topology/core_id", "seven\n", "malformed number"),
        ("devices/system/cpu/online", "0-\n", "malformed list"),
        ("bus/pci/devices/0004:04:00.0/class", "display\n", "malformed number"),
    ],
)
def test_malformed_files_raise_naming_the_file(
    tmp_path: Path, relative: str, content: str, fragment: str
) -> None:
    root = tree(tmp_path, "sparse_nodes")
    (root / relative).write_text(content)
    with pytest.raises(TopologyError) as info:
        topology_from_sysfs(str(root))
    assert fragment in str(info.value)
    assert relative in str(info.value)


def test_a_missing_required_node_file_raises(tmp_path: Path) -> None:
    root = tree(tmp_path, "dgx_h100")
    (root / "devices/system/node/node1/cpulist").unlink()
    with pytest.raises(TopologyError, match=r"missing sysfs file .*node1/cpulist"):
        topology_from_sysfs(str(root))


def test_unreadable_file_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EACCES/EIO on a file that must be read: an error naming it, not a guess."""
    root = tree(tmp_path, "sparse_nodes")
    target = str(root / "devices/system/node/node0/cpulist")
    real_open = os.open

    def guarded(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path) == target:  # root ignores chmod 000: deny it here
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)
    with pytest.raises(TopologyError, match=r"cannot read sysfs file .*node0/cpulist: Permission"):
        topology_from_sysfs(str(root))


def test_a_directory_in_place_of_a_file_raises(tmp_path: Path) -> None:
    root = tree(tmp_path, "dgx_h100")
    path = root / "devices/system/node/node0/cpulist"
    path.unlink()
    path.mkdir()
    with pytest.raises(TopologyError, match=r"node0/cpulist"):
        topology_from_sysfs(str(root))


def test_a_superscript_cache_index_is_not_a_number(tmp_path: Path) -> None:
    root = tree(tmp_path, "dgx_h100")
    (root / "devices/system/cpu/cpu0/cache/index\u00b2").mkdir()  # '²'.isdigit() is True
    topo = topology_from_sysfs(str(root))
    assert topo.cpus[0].l3


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-null-is-not-regular"])
def test_special_files_in_a_sysfs_tree_are_refused_without_hanging(
    tmp_path: Path, kind: str
) -> None:
    root = tree(tmp_path, "dgx_h100")
    path = root / "devices/system/node/node0/cpulist"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero" if kind == "dev-zero" else "/dev/null")
    with pytest.raises(TopologyError, match="node0/cpulist is not a regular file"):
        topology_from_sysfs(str(root))


def test_an_oversized_sysfs_file_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path, "dgx_h100")
    path = root / "devices/system/node/node0/distance"
    with open(path, "wb") as handle:
        handle.truncate((1 << 20) + 1)
    with pytest.raises(TopologyError, match="node0/distance is larger than"):
        topology_from_sysfs(str(root))


def test_a_cpu_in_two_nodes_is_inconsistent(tmp_path: Path) -> None:
    root = tree(tmp_path, "dgx_h100")
    (root / "devices/system/node/node1/cpulist").write_text("55-111,168-223\n")
    with pytest.raises(TopologyError, match="CPU 55 is listed in both node 0 and node 1"):
        topology_from_sysfs(str(root))


def test_empty_root_raises(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="no CPU information"):
        topology_from_sysfs(str(tmp_path))


# ----------------------------------------------------------- PCI choice


def test_nvswitch_is_not_a_gpu(tmp_path: Path) -> None:
    topo = topology_from_sysfs(str(tree(tmp_path, "dgx_h100")))
    assert "0000:05:00.0" not in [g.pci_bus_id for g in topo.gpus]
    assert len(topo.gpus) == 8


def test_caller_can_accept_another_vendor_and_class(tmp_path: Path) -> None:
    """What the QEMU test does: a non-GPU device on node 1 accepted as a GPU."""
    desc = st.load_machine("sparse_nodes")
    desc["extra_pci"] = [
        {
            "bus_id": "0000:00:05.0",
            "vendor": "0x1af4",
            "device": "0x1000",
            "class": "0x020000",
            "numa_node": 8,
        },
    ]
    root = st.build_sysfs(desc, tmp_path / "vm")
    assert [g.pci_bus_id for g in topology_from_sysfs(str(root)).gpus] == [
        "0004:04:00.0",
        "0035:03:00.0",
    ]
    topo = topology_from_sysfs(str(root), gpu_vendors={0x1AF4: "virtio"}, pci_classes=["0x0200"])
    assert [(g.pci_bus_id, g.vendor, g.numa_node) for g in topo.gpus] == [
        ("0000:00:05.0", "virtio", 8)
    ]
    assert topo.gpus[0].local_cpus == parse_cpulist("8-15,24-31")
    both = topology_from_sysfs(str(root), gpu_vendors=[0x10DE, 0x1AF4], pci_classes=("0x03", 0x02))
    assert [g.vendor for g in both.gpus] == ["0x1af4", "nvidia", "nvidia"]


@pytest.mark.parametrize("bad", ["0x3", "display", "0x0302000"])
def test_bad_class_filters_are_rejected(tmp_path: Path, bad: str) -> None:
    with pytest.raises(TopologyError, match="PCI class"):
        topology_from_sysfs(str(tree(tmp_path, "sparse_nodes")), pci_classes=[bad])


@pytest.mark.parametrize(
    "options",
    [
        {"gpu_vendors": {"0x10de": "nvidia"}},  # ValueError from int()
        {"gpu_vendors": ["0x10de"]},
        {"gpu_vendors": 0x10DE},  # TypeError: not iterable
        {"pci_classes": [None]},  # AttributeError
        {"pci_classes": [0x1000000]},  # matched nothing, silently
        {"pci_classes": [-1]},
    ],
)
def test_bad_vendor_and_class_filters_are_topology_errors(tmp_path: Path, options: dict) -> None:
    with pytest.raises(TopologyError, match="PCI"):
        topology_from_sysfs(str(tree(tmp_path, "sparse_nodes")), **options)


@pytest.mark.parametrize(
    "options",
    [
        {"allowed_cpus": 5},  # TypeError: not iterable
        {"allowed_cpus": ["a"]},  # ValueError from int()
        {"allowed_cpus": [1.5]},  # int() truncated it to CPU 1
        {"allowed_mems": [-1]},  # kept as a "node that does not exist"
        {"allowed_cpus": [True]},
    ],
)
def test_bad_allowed_sets_are_config_errors(tmp_path: Path, options: dict) -> None:
    with pytest.raises(ConfigError, match="allowed_"):
        topology_from_sysfs(str(tree(tmp_path, "dgx_h100")), **options)


def test_allowed_sets_as_strings_are_lists_not_characters(tmp_path: Path) -> None:
    """``"12"`` used to be iterated as characters: CPUs {1, 2}."""
    root = str(tree(tmp_path, "dgx_h100"))
    topo = topology_from_sysfs(root, allowed_cpus="12,100-101", allowed_mems="1")
    assert topo.allowed_cpus == {12, 100, 101} and topo.allowed_mems == {1}


def test_gpu_local_cpus_come_from_pci_local_cpulist(tmp_path: Path) -> None:
    topo = topology_from_sysfs(str(tree(tmp_path, "dgx_a100_nps4")))
    assert topo.gpus[0].local_cpus == parse_cpulist("48-63,176-191")


# ---------------------------------------------------------- allowed sets


def test_foreign_root_defaults_to_everything_and_parameters_override(tmp_path: Path) -> None:
    root = str(tree(tmp_path, "dgx_h100"))
    topo = topology_from_sysfs(root)
    assert topo.allowed_cpus == topo.online_cpus and topo.allowed_mems == {0, 1}
    narrowed = topology_from_sysfs(root, allowed_cpus=range(8), allowed_mems=[1])
    assert narrowed.allowed_cpus == set(range(8)) and narrowed.allowed_mems == {1}


def test_allowed_cpus_outside_online_are_dropped_with_a_note(tmp_path: Path) -> None:
    root = str(tree(tmp_path, "rtx4090_nps4"))
    topo = topology_from_sysfs(root, allowed_cpus=[250, 255], allowed_mems=[7, 9])
    assert topo.allowed_cpus == {250} and topo.allowed_mems == {7}
    assert any("255 are not online" in n for n in topo.notes)
    assert any("9 do not exist" in n for n in topo.notes)


def test_environ_applies_visibility(tmp_path: Path) -> None:
    root = str(tree(tmp_path, "dgx_a100_nps4"))
    topo = read_topology(root, environ={"CUDA_VISIBLE_DEVICES": "6,2"})
    assert [(g.index, g.physical_index, g.numa_node) for g in topo.gpus] == [(0, 6, 5), (1, 2, 1)]


# ----------------------------------------------------------- live machine


def _status_list(key: str) -> frozenset[int]:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return parse_cpulist(line.split(":", 1)[1].strip())
    raise AssertionError(f"{key} missing from /proc/self/status")


def test_live_machine_agrees_with_libnuma_and_proc() -> None:
    topo = detect_topology(use_nvml=False, environ={})
    for node in topo.nodes.values():
        assert node.cpus == oracle.node_to_cpus(node.id)
        for other in topo.nodes:
            assert topo.distance(node.id, other) == oracle.distance(node.id, other)
        if node.has_memory:
            total, free = _libnuma.node_memory(node.id)
            assert node.memory_total == total
            assert node.memory_free is not None
            assert abs(node.memory_free - free) < max(256 * 2**20, free // 10)
    assert topo.allowed_cpus == _status_list("Cpus_allowed_list")
    assert topo.allowed_mems == _status_list("Mems_allowed_list")
    assert topo.online_cpus == parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    for cpu in topo.cpus.values():
        assert oracle.node_of_cpu(cpu.id) == cpu.node


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2 or 1 not in os.sched_getaffinity(0), reason="needs CPU 1"
)
def test_live_allowed_cpus_are_read_fresh_after_setaffinity() -> None:
    """libnuma snapshots the mask at load; detect() must see the change."""
    report, _ = run_in_child(child_discovery.allowed_cpus_after_setaffinity, timeout=60)
    assert report == {"allowed": [1], "status": "1"}


def test_live_allowed_cpus_follow_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert topology_from_sysfs("/sys").allowed_cpus == {min(before)}
    finally:
        os.sched_setaffinity(0, before)
    assert topology_from_sysfs("/sys").allowed_cpus == frozenset(before)


def test_gpu_on_a_cpu_less_node_is_recorded_as_found_and_planned_nearest(tmp_path: Path) -> None:
    desc = st.load_machine("gh200_single")
    desc["gpus"][0]["numa_node"] = 1  # firmware placing the GPU on its HBM node
    topo = topology_from_sysfs(str(st.build_sysfs(desc, tmp_path / "t")))
    # Discovery records the fact; the HBM node is also the GPU's memory node
    # (as NVML discovery does), so that gpu_memory=True can add it; the QEMU
    # guest test checks the same on a real kernel.
    assert (topo.gpus[0].numa_node, topo.gpus[0].memory_node) == (1, 1)
    assert any("numa_node 1 has no CPUs" in n for n in topo.notes)
    # The planner, the one owner of the decision, binds the nearest CPU node.
    placed = plan(topo, 0)
    assert (placed.node, placed.cpus) == (0, topo.nodes[0].cpus)
    assert plan(topo, 0, gpu_memory=True).mems == {0, 1}


# ------------------------------------------------- generated machines


@hyp_st.composite
def machines(draw: hyp_st.DrawFn) -> dict:
    """Random small machines: sparse ids, CPU-less and memory-less nodes, offline CPUs."""
    count = draw(hyp_st.integers(1, 5))
    ids = sorted(draw(hyp_st.sets(hyp_st.integers(0, 15), min_size=count, max_size=count)))
    cores = [draw(hyp_st.integers(0, 3)) for _ in ids]
    if not any(cores):
        cores[0] = 1
    total = sum(cores)
    smt = draw(hyp_st.booleans())
    nodes, base = [], 0
    for index, (node_id, n) in enumerate(zip(ids, cores)):
        cpus = set(range(base, base + n))
        if smt:
            cpus |= {c + total for c in cpus}
        base += n
        memory = draw(hyp_st.sampled_from([0, 1024, 4096]))
        nodes.append(
            {
                "id": node_id,
                "cpus": format_cpulist(cpus),
                "package": index // 2,
                "memory_mb": memory,
                "free_mb": memory // 2,
            }
        )
    every = set(range(2 * total if smt else total))
    offline = (
        draw(hyp_st.sets(hyp_st.sampled_from(sorted(every - {0})))) if len(every) > 1 else set()
    )
    matrix = [[10] * count for _ in ids]
    for a in range(count):
        for b in range(a + 1, count):
            matrix[a][b] = matrix[b][a] = draw(hyp_st.integers(11, 255))
    gpus = []
    for k in range(draw(hyp_st.integers(0, 3))):
        # Any node, CPU-less ones too (CXL, firmware naming the GPU's HBM node).
        numa = draw(hyp_st.sampled_from([-1, *ids]))
        gpu = {
            "bus_id": f"0000:{0x10 + k:02x}:00.0",
            "vendor": "0x10de",
            "device": "0x2330",
            "class": "0x030200",
            "model": "X",
            "uuid": f"GPU-{k}",
            "numa_node": numa,
        }
        if numa >= 0:  # the kernel's local_cpulist is its node's CPUs (none: empty)
            gpu["local_cpulist"] = nodes[ids.index(numa)]["cpus"]
        gpus.append(gpu)
    return {
        "name": "generated",
        "provenance": ["hypothesis"],
        "online_cpus": format_cpulist(every - offline),
        "smt_offset": total if smt else None,
        "l3": draw(hyp_st.sampled_from(["node", "package", None])),
        "nodes": nodes,
        "distances": {"matrix": matrix},
        "gpus": gpus,
    }


@settings(max_examples=40, deadline=None)
@given(machines())
def test_generated_machines_read_back_exactly(desc: dict) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        topo = topology_from_sysfs(str(st.build_sysfs(desc, scratch)))
    online = parse_cpulist(desc["online_cpus"])
    table = st.node_distances(desc)
    assert sorted(topo.nodes) == sorted(n["id"] for n in desc["nodes"])
    for node in desc["nodes"]:
        got = topo.nodes[node["id"]]
        assert got.cpus == parse_cpulist(node["cpus"]) & online
        assert got.has_memory == bool(node["memory_mb"])
        assert dict(got.distances) == table[node["id"]]
    facts = st.cpu_facts(desc)
    assert set(topo.cpus) == set(facts) == online
    for cpu, fact in facts.items():
        got_cpu = topo.cpus[cpu]
        assert (got_cpu.node, got_cpu.package, got_cpu.core) == (fact.node, fact.package, fact.core)
        assert (got_cpu.siblings, got_cpu.l3) == (fact.siblings, fact.l3)
    with_cpus = {n["id"] for n in desc["nodes"] if parse_cpulist(n["cpus"]) & online}

    memory = {n["id"] for n in desc["nodes"] if n["memory_mb"]}

    def nearest(numa: int) -> int:
        return min(with_cpus, key=lambda other: (table[numa][other], other))

    # Discovery records the kernel's numa_node as it is, even when every CPU
    # of that node is offline (then it is also the memory node, if it has
    # memory); the planner alone picks the nearest node with online CPUs.
    want = [(g["bus_id"], g["numa_node"] if g["numa_node"] >= 0 else None) for g in desc["gpus"]]
    assert [(g.pci_bus_id, g.numa_node) for g in topo.gpus] == want
    for gpu in topo.gpus:
        cpu_less = gpu.numa_node is not None and gpu.numa_node not in with_cpus
        assert gpu.memory_node == (gpu.numa_node if cpu_less and gpu.numa_node in memory else None)
        if cpu_less and with_cpus and not gpu.local_cpus:
            placed = plan(topo, gpu.index, nprocs=len(topo.gpus), mode="node", policy="none")
            assert placed.node == nearest(gpu.numa_node), placed.reasons
    assert topo.allowed_mems == {n["id"] for n in desc["nodes"] if n["memory_mb"]}
    assert Topology.from_json(topo.to_json()) == topo


CPUSET = Path("/sys/fs/cgroup/cpuset")


@pytest.mark.skipif(
    not (CPUSET / "cpuset.cpus").exists() or os.geteuid() != 0 or 1 not in os.sched_getaffinity(0),
    reason="needs root, a cgroup v1 cpuset hierarchy and CPU 1",
)
def test_live_cpuset_restriction_is_seen(tmp_path: Path) -> None:
    """A real cpuset (cpus 1, mems 0): what a container or Slurm job gives a worker."""
    root_setup.refused(f"creating a cgroup v1 cpuset group under {CPUSET}")
    group = CPUSET / f"pynumabind-discovery-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpuset.cpus").write_text("1")
        first_mem = min(parse_cpulist((CPUSET / "cpuset.mems").read_text().strip()))
        (group / "cpuset.mems").write_text(str(first_mem))
        report, _ = run_in_child(child_discovery.allowed_sets_in_cpuset, group, timeout=60)
    finally:
        group.rmdir()
    assert report["cpus"] == [1]
    assert report["mems"] == [first_mem]


def test_negative_die_id_means_unknown(tmp_path: Path) -> None:
    # The kernel prints the same id for every CPU of a die, -1 when firmware gave none.
    root = tree(tmp_path, "sparse_nodes")
    for die_id in (root / "devices/system/cpu").glob("cpu*/topology/die_id"):
        die_id.write_text("-1\n")
    cpus = topology_from_sysfs(str(root)).cpus
    assert cpus and all(cpu.die is None for cpu in cpus.values())


def test_live_mems_fall_back_to_proc_status_without_libnuma(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pynumabind.errors import LibnumaUnavailableError

    def unavailable() -> frozenset:
        raise LibnumaUnavailableError("libnuma.so.1 not found (test)")

    monkeypatch.setattr(_libnuma, "get_mems_allowed", unavailable)
    topo = topology_from_sysfs("/sys")
    assert topo.allowed_mems == _status_list("Mems_allowed_list")
    assert any("using Mems_allowed_list" in n for n in topo.notes)


def test_missing_meminfo_and_has_memory_are_noted(tmp_path: Path) -> None:
    root = tree(tmp_path, "threadripper_memless")
    (root / "devices/system/node/has_memory").unlink()
    (root / "devices/system/node/node2/meminfo").unlink()
    topo = topology_from_sysfs(str(root))
    # Without has_memory, MemTotal decides: 0 kB means no memory.
    assert [topo.nodes[n].has_memory for n in range(4)] == [False, True, True, False]
    assert topo.nodes[2].memory_total is None
    assert any("node2/meminfo missing" in n for n in topo.notes)
