"""The readers of ``_os`` for memory, the CPU, caches and HMAT, against real files.

Each reader is run on this machine's own ``/proc`` and ``/sys`` (one NUMA
node, a real kernel) and compared with the file read here independently, on
the sysfs trees the tests build from recorded machines, and on small trees
and files that break one rule each: a malformed line, a missing file, a file
that is no regular file, a file larger than any reader may take.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pynumabind._os import SYSFS_ROOT, caches, cpuinfo, hmat, meminfo, textfile
from pynumabind._os.textfile import SysfsReader
from pynumabind.cpulist import parse_cpulist
from pynumabind.errors import TopologyError

from ..support import sysfs_tree as st

NODE0 = Path(SYSFS_ROOT, "devices/system/node/node0")


def _kb_fields(text: str, skip: int) -> Dict[str, int]:
    """``Name: N kB`` lines, split by hand (``skip`` leading words: 2 for ``Node 0``)."""
    out = {}
    for line in text.splitlines():
        words = line.split()[skip:]
        if len(words) == 3 and words[2] == "kB":
            out[words[0].rstrip(":")] = int(words[1]) * 1024
    return out


# -------------------------------------------------------------- /proc/meminfo


def test_system_meminfo_is_this_machines() -> None:
    found = meminfo.system_meminfo()
    assert found is not None
    expected = _kb_fields(Path(meminfo.PROC_MEMINFO).read_text(), 0)
    # MemFree and friends move between two reads; the sizes do not.
    assert found["MemTotal"] == expected["MemTotal"]
    assert found["MemTotal"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGESIZE")
    assert set(expected) <= set(found)
    assert 0 < found["MemAvailable"] <= found["MemTotal"]
    # A field without a unit is a count, not kilobytes.
    assert found["HugePages_Total"] == int(
        next(
            line.split()[1]
            for line in Path(meminfo.PROC_MEMINFO).read_text().splitlines()
            if line.startswith("HugePages_Total:")
        )
    )


def test_system_meminfo_skips_bad_lines_and_is_none_when_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:  16 kB\nnot a field\nMemFree: lots kB\nHugePages_Total:  3\n")
    assert meminfo.system_meminfo(str(path)) == {"MemTotal": 16 << 10, "HugePages_Total": 3}
    assert meminfo.system_meminfo(str(tmp_path / "none")) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert meminfo.system_meminfo(str(fifo)) is None  # refused, never waited on
    path.write_bytes(b"MemTotal: 16 kB\n\xff\n")
    assert meminfo.system_meminfo(str(path)) is None


# ------------------------------------------------------------ node meminfo


def test_node_meminfo_is_this_machines_node() -> None:
    found = meminfo.node_meminfo(SysfsReader(SYSFS_ROOT), 0)
    assert found is not None
    expected = _kb_fields((NODE0 / "meminfo").read_text(), 2)
    assert found["MemTotal"] == expected["MemTotal"]
    assert set(expected) <= set(found)
    total, free = meminfo.node_total_free(SysfsReader(SYSFS_ROOT), 0)
    assert total == found["MemTotal"] and free is not None and 0 < free <= total
    # One node: all of the machine's memory is node 0's.
    system = meminfo.system_meminfo() or {}
    assert total <= system["MemTotal"]
    assert meminfo.node_memory_sizes(SYSFS_ROOT, [0]) == {0: total}
    assert meminfo.nodes_meminfo(SYSFS_ROOT, [0])[0] is not None


@pytest.mark.parametrize("name", st.machine_names())
def test_node_meminfo_of_every_recorded_machine(name: str, tmp_path: Path) -> None:
    desc = st.load_machine(name)
    root = str(st.build_sysfs(desc, tmp_path / name))
    nodes = [n["id"] for n in desc["nodes"]]
    sizes = meminfo.node_memory_sizes(root, nodes)
    for node in desc["nodes"]:
        mb = node.get("memory_mb")
        if not desc.get("numa_sysfs", True):
            # No devices/system/node, and not the live machine: nothing known.
            assert sizes[node["id"]] is None
            continue
        assert sizes[node["id"]] == (None if mb is None else mb << 20)
        fields = meminfo.node_meminfo(SysfsReader(root), node["id"])
        if mb is None:
            assert fields is None
        else:
            assert fields is not None
            assert fields["MemFree"] == node.get("free_mb", 0) << 20
            assert fields["HugePages_Total"] == 0  # a count: no kB to scale


def test_node_meminfo_errors_name_the_file(tmp_path: Path) -> None:
    here = tmp_path / "devices/system/node/node1"
    here.mkdir(parents=True)
    reader = SysfsReader(str(tmp_path))
    assert meminfo.node_meminfo(reader, 1) is None
    assert meminfo.node_total_free(reader, 1) == (None, None)
    (here / "meminfo").write_text("Node 1 MemFree:  8 kB\n")
    assert meminfo.node_meminfo(reader, 1) == {"MemFree": 8 << 10}
    with pytest.raises(TopologyError, match=r"no MemTotal in .*node1/meminfo"):
        meminfo.node_total_free(reader, 1)
    (here / "meminfo").write_text("Node 0 MemTotal:  8 kB\n")  # another node's line
    with pytest.raises(TopologyError, match=r"malformed line 'Node 0 .*node1/meminfo"):
        meminfo.node_meminfo(reader, 1)
    (here / "meminfo").write_text("Node 1 MemTotal:  lots\n")
    with pytest.raises(TopologyError, match="malformed line"):
        meminfo.node_meminfo(reader, 1)
    (here / "meminfo").unlink()
    os.mkfifo(here / "meminfo")
    with pytest.raises(TopologyError, match="not a regular file"):
        meminfo.node_meminfo(reader, 1)


# ------------------------------------------------------------ /proc/cpuinfo


def _first_entry_by_hand() -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in Path(cpuinfo.PROC_CPUINFO).read_text().split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        out.setdefault(key.strip().lower(), value.strip())
    return out


def test_cpuinfo_is_this_machines_first_cpu() -> None:
    expected = _first_entry_by_hand()
    found = cpuinfo.first_entry()
    assert found == expected
    model = cpuinfo.cpu_model()
    if "model name" in expected:
        assert model == expected["model name"][: cpuinfo.MODEL_CHARS]
    assert cpuinfo.hypervisor() == ("hypervisor" in expected.get("flags", "").split())


def test_cpuinfo_arm_model_missing_file_and_special_files(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n"
        "CPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"
        "processor\t: 1\nmodel name\t: not the first CPU\nflags\t: hypervisor\n"
    )
    assert cpuinfo.cpu_model(str(path)) == "CPU implementer 0x41 part 0xd0c"
    assert cpuinfo.hypervisor(str(path)) is False  # the second entry is not read
    assert cpuinfo.cpu_model(str(tmp_path / "none")) is None
    assert cpuinfo.hypervisor(str(tmp_path / "none")) is False
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert cpuinfo.first_entry(str(fifo)) is None


def test_cpuinfo_reads_a_bounded_start_of_a_huge_file(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    flags = "flags\t\t: " + " ".join(f"f{i}" for i in range(300)) + " hypervisor\n"
    with open(path, "w") as handle:
        handle.write("processor\t: 0\nmodel name\t: " + "M" * 500 + "\n" + flags)
        handle.write("x\t: y\n" * 400_000)  # 2.4 MB and no blank line
    assert cpuinfo.cpu_model(str(path)) == "M" * cpuinfo.MODEL_CHARS
    assert cpuinfo.hypervisor(str(path))  # a flags line is kept whole
    text = textfile.read_head(str(path), cpuinfo.ENTRY_BYTES, "cpuinfo file")
    assert len(text) == cpuinfo.ENTRY_BYTES
    assert len(cpuinfo.first_entry(str(path)) or {}) <= cpuinfo.ENTRY_LINES


# ------------------------------------------------------------------ caches


def _llc_by_hand(cpu: int) -> Optional[tuple]:
    base = Path(SYSFS_ROOT, f"devices/system/cpu/cpu{cpu}/cache")
    best = None
    for index in sorted(base.glob("index*")):
        kind = (index / "type").read_text().strip()
        if kind == "Instruction":
            continue
        level = int((index / "level").read_text())
        size = (index / "size").read_text().strip()
        assert size.endswith("K"), size  # what this kernel prints
        found = (level, int(size[:-1]) << 10, (index / "shared_cpu_list").read_text().strip())
        best = found if best is None or found[:2] > best[:2] else best
    return best


def test_caches_are_this_machines() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    best = _llc_by_hand(cpus[0])
    if best is None:
        pytest.skip("this kernel describes no caches")
    level, size, shared = best
    reader = SysfsReader(SYSFS_ROOT)
    assert caches.cpu_llc(reader, cpus[0]) == (size, frozenset(parse_cpulist(shared)))
    online = frozenset(parse_cpulist(Path(SYSFS_ROOT, "devices/system/cpu/online").read_text()))
    l3 = caches.l3_group(reader, cpus[0], online)
    assert l3 == (frozenset(parse_cpulist(shared)) & online if level == 3 else None)
    distinct = {_llc_by_hand(c)[2]: _llc_by_hand(c)[1] for c in online}  # type: ignore[index]
    assert caches.llc_bytes(sorted(online)) == sum(distinct.values())


def test_llc_sums_distinct_last_level_caches(tmp_path: Path) -> None:
    def cache(cpu: int, index: int, level: int, kind: str, size: str, *, shared: str) -> None:
        path = tmp_path / f"devices/system/cpu/cpu{cpu}/cache/index{index}"
        path.mkdir(parents=True)
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (path / name).write_text(f"{text}\n")
        (path / "shared_cpu_list").write_text(f"{shared}\n")

    for cpu in range(4):
        cache(cpu, 0, 1, "Instruction", "64M", shared=str(cpu))  # never counted
        cache(cpu, 1, 2, "Unified", "1M", shared=str(cpu))
        cache(cpu, 2, 3, "Unified", "16384K", shared="0-1" if cpu < 2 else "2-3")
    assert caches.llc_bytes([0, 1, 2, 3], str(tmp_path)) == 32 << 20
    assert caches.llc_bytes([0, 1], str(tmp_path)) == 16 << 20
    assert caches.llc_bytes([7], str(tmp_path)) is None
    reader = SysfsReader(str(tmp_path))
    assert caches.l3_group(reader, 1, frozenset(range(4))) == {0, 1}
    assert caches.l3_group(reader, 1, frozenset({1, 2})) == {1}  # online CPUs only
    assert caches.l3_group(reader, 7, frozenset(range(8))) is None
    assert [caches.cache_size(t) for t in ("512", "32K\n", "1M", "2G", "1KB", "x", "²K")] == [
        512,
        32 << 10,
        1 << 20,
        2 << 30,
        1 << 10,
        None,
        None,
    ]


@pytest.mark.parametrize("name", ["dgx_h100", "mi300x_spr", "threadripper_memless"])
def test_l3_groups_of_recorded_machines(name: str, tmp_path: Path) -> None:
    desc = st.load_machine(name)
    root = str(st.build_sysfs(desc, tmp_path / name))
    reader = SysfsReader(root)
    facts = st.cpu_facts(desc)
    online = frozenset(facts)
    for cpu, fact in facts.items():
        assert caches.l3_group(reader, cpu, online) == (fact.l3 or None), cpu
    assert caches.llc_bytes(sorted(online), root) is None  # the trees record no sizes


# -------------------------------------------------------------------- HMAT


def test_hmat_of_this_machine_is_what_sysfs_shows() -> None:
    shown = [
        (0, access)
        for access in hmat.ACCESS_CLASSES
        if (NODE0 / f"access{access}" / "initiators").is_dir()
    ]
    assert [(a.node, a.access) for a in hmat.read_hmat([0])] == shown


def test_hmat_reads_each_access_class(tmp_path: Path) -> None:
    def access(node: int, k: int, initiators: List[str], **values: int) -> None:
        base = tmp_path / f"devices/system/node/node{node}/access{k}/initiators"
        base.mkdir(parents=True)
        for name in initiators:
            (base / name).mkdir()
        for name, value in values.items():
            (base / name).write_text(f"{value}\n")

    access(1, 0, ["node0", "node2", "node²"], read_bandwidth=51200, read_latency=250)
    access(1, 1, ["node0"], write_bandwidth=25600, write_latency=300)
    access(3, 1, [])
    found = hmat.read_hmat([3, 1, 0], str(tmp_path))
    assert [(a.node, a.access, a.initiators) for a in found] == [
        (1, 0, (0, 2)),
        (1, 1, (0,)),
        (3, 1, ()),
    ]
    assert (found[0].read_bandwidth_mbs, found[0].write_bandwidth_mbs) == (51200, None)
    assert (found[1].write_latency_ns, found[1].read_latency_ns) == (300, None)
    assert hmat.read_hmat([0, 1], str(tmp_path / "none")) == []
    (tmp_path / "devices/system/node/node1/access0/initiators/read_latency").write_text("x\n")
    with pytest.raises(TopologyError, match=r"malformed number 'x' in .*access0/initiators"):
        hmat.read_hmat([1], str(tmp_path))
