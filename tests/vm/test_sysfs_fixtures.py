"""The sysfs trees recorded from the guests (``tests/machines/sysfs/``) and their comparison.

No QEMU here: these read the committed trees.  That each tree still matches its guest is
checked by the guest session that records it (``test_guest_suite.py``), on every run.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict

import pytest

from pynumabind.discovery import topology_from_sysfs

from .harness import HMAT_TOPOLOGY, STANDARD_TOPOLOGY, format_cpulist
from .sysfs_record import (
    FIXTURES_DIR,
    README_FILE,
    SYMLINKS_FILE,
    differences,
    load_fixture,
    materialize,
    mem_total_kb,
    record,
    write_fixture,
)
from .test_guest_suite import SESSIONS

HMAT_FIXTURE = FIXTURES_DIR / "qemu-6.12-hmat"
STANDARD_FIXTURE = FIXTURES_DIR / "qemu-6.1-standard"
NODE = "devices/system/node"


def test_every_recording_session_has_its_tree_committed() -> None:
    names = [s.sysfs_fixture for s in SESSIONS if s.sysfs_fixture]
    assert sorted(names) == ["qemu-6.1-standard", "qemu-6.12-hmat"]
    for name in names:
        path = FIXTURES_DIR / name
        assert (path / README_FILE).is_file() and (path / SYMLINKS_FILE).is_file(), path
        assert not [p for p in path.rglob("*") if p.is_symlink()], "links belong in SYMLINKS"


@pytest.mark.parametrize("fixture", [STANDARD_FIXTURE, HMAT_FIXTURE], ids=lambda p: p.name)
def test_the_tree_reads_as_the_booted_topology(fixture: Path, tmp_path: Path) -> None:
    """pynumabind's own discovery reads the recorded tree as the guest's machine."""
    root = materialize(fixture, tmp_path / "sys")
    topology = topology_from_sysfs(str(root), allowed_cpus={0, 1, 2, 3}, allowed_mems={0, 1, 2})
    assert sorted(topology.nodes) == [0, 1, 2]
    for i, node in enumerate(STANDARD_TOPOLOGY.nodes):
        assert topology.nodes[i].cpus == frozenset(node.cpu_ids)
        assert dict(topology.nodes[i].distances) == dict(
            enumerate(STANDARD_TOPOLOGY.distance_matrix()[i])
        )
        total = topology.nodes[i].memory_total
        assert total is not None and 0.75 * node.mem_mb * 2**20 < total <= node.mem_mb * 2**20
    assert {cpu.package for cpu in topology.cpus.values()} == {0, 1}


def test_the_612_hmat_tree_has_the_tiers_and_access_attributes() -> None:
    data = load_fixture(HMAT_FIXTURE)
    files: Dict[str, str] = data["files"]
    assert files["devices/virtual/memory_tiering/memory_tier4/nodelist"] == "0-1\n"
    assert files["devices/virtual/memory_tiering/memory_tier54/nodelist"] == "2\n"
    assert [p for p in files if "memory_tiering" in p] == [
        "devices/virtual/memory_tiering/memory_tier4/nodelist",
        "devices/virtual/memory_tiering/memory_tier54/nodelist",
    ]
    for target in range(3):
        links = {(i, t): link for (i, t), link in HMAT_TOPOLOGY.hmat.items() if t == target}
        best = min(links, key=lambda it: links[it].latency_ns)
        for access in ("access0", "access1"):
            base = f"{NODE}/node{target}/{access}/initiators"
            linked = {k: v for k, v in data["symlinks"].items() if k.startswith(base + "/")}
            assert linked == {f"{base}/node{best[0]}": f"../../../node{best[0]}"}
            for kind in ("read", "write"):
                assert int(files[f"{base}/{kind}_latency"]) == links[best].latency_ns
                assert int(files[f"{base}/{kind}_bandwidth"]) == links[best].bandwidth_mib_s
    assert files[f"{NODE}/node2/access0/initiators/read_bandwidth"] == "5120\n"
    weights = sorted(p for p in files if p.startswith("kernel/mm/mempolicy/"))
    assert weights == [f"kernel/mm/mempolicy/weighted_interleave/node{i}" for i in range(3)]
    assert all(files[w] == "1\n" for w in weights)  # the kernel's default weight
    assert files[f"{NODE}/has_cpu"] == format_cpulist((0, 1)) + "\n"


def test_the_61_tree_has_one_tier_and_no_hmat_or_weights() -> None:
    data = load_fixture(STANDARD_FIXTURE)
    files: Dict[str, str] = data["files"]
    tiers = {p: t for p, t in files.items() if "memory_tiering" in p}
    assert tiers == {"devices/virtual/memory_tiering/memory_tier4/nodelist": "0-2\n"}
    assert not [p for p in files if "/access" in p or p.startswith("kernel/mm/mempolicy")]
    assert data["symlinks"] == {}


def _with_mem_total(meminfo: str, kb: int) -> str:
    total = mem_total_kb(meminfo)
    return meminfo.replace(f"{total} kB", f"{kb} kB", 1).replace("MemFree:", "MemFree:  1")


def test_differences_compare_files_exactly_and_memtotal_loosely() -> None:
    base = load_fixture(HMAT_FIXTURE)
    assert differences(base, base) == []
    live: Dict[str, Any] = copy.deepcopy(base)
    node0, node1 = f"{NODE}/node0/meminfo", f"{NODE}/node1/meminfo"
    total0, total1 = (mem_total_kb(live["files"][n]) for n in (node0, node1))
    moved = 46 << 10  # the kernel image's ~45 MB, on node 0 this time
    live["files"][node0] = _with_mem_total(live["files"][node0], total0 + moved)
    live["files"][node1] = _with_mem_total(live["files"][node1], total1 - moved)
    assert differences(base, live) == []  # free memory moves, and a node's total a little
    live["files"][node0] = _with_mem_total(live["files"][node0], total0 // 2)
    live["files"][f"{NODE}/node2/access0/initiators/read_bandwidth"] = "20480\n"
    del live["files"][f"{NODE}/node1/cpulist"]
    live["symlinks"] = {}
    found = differences(base, live)
    assert len(found) == 5, found
    assert any(f"node0/meminfo: MemTotal {total0 // 2} kB" in d for d in found)
    assert any(d.startswith("MemTotal of all nodes") for d in found)
    assert any("read_bandwidth: '20480\\n', recorded '5120\\n'" in d for d in found)
    assert any("node1/cpulist: recorded, missing now" in d for d in found)
    assert any(d.startswith("symlinks: {}") for d in found)


def test_a_record_round_trips_through_the_fixture_format(tmp_path: Path) -> None:
    tree = materialize(HMAT_FIXTURE, tmp_path / "sys")
    again = record(str(tree))  # the recorder, run over the materialized tree
    assert differences(load_fixture(HMAT_FIXTURE), again) == []
    write_fixture(again, tmp_path / "copy", "readme\n")
    assert load_fixture(tmp_path / "copy") == again
