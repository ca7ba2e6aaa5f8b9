"""The kernel's memory tiers: read from sysfs, carried by each node, shown, kept by snapshots.

The recorded guest trees are the real kernels' answers: 6.12 with firmware HMAT made node 2
(memory only, a quarter of the bandwidth) a tier of its own above nodes 0-1; 6.1 without HMAT
put every node in one tier.  This machine's own sysfs is read too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict

import pytest

from pynumabind.discovery import topology_from_sysfs
from pynumabind.errors import TopologyError
from pynumabind.model import Detail, Topology

from ..support.cli_helpers import run_cli

SYSFS_TREES = Path(__file__).resolve().parents[1] / "machines" / "sysfs"
HMAT_TREE = SYSFS_TREES / "qemu-6.12-hmat"
STANDARD_TREE = SYSFS_TREES / "qemu-6.1-standard"
LIVE_TIERS = Path("/sys/devices/virtual/memory_tiering")


def tiers_of(topology: Topology) -> Dict[int, Any]:
    return {n: (node.tier, topology.tier_rank(n)) for n, node in topology.nodes.items()}


def test_the_612_hmat_tree_gives_node_2_a_tier_of_its_own() -> None:
    topology = topology_from_sysfs(str(HMAT_TREE))
    assert tiers_of(topology) == {0: (4, 0), 1: (4, 0), 2: (54, 1)}
    assert topology.nodes[2].memory_only


def test_the_61_tree_has_one_tier_for_every_node() -> None:
    topology = topology_from_sysfs(str(STANDARD_TREE))
    assert tiers_of(topology) == {0: (4, 0), 1: (4, 0), 2: (4, 0)}


def test_a_bind_s_detail_reads_no_tiers() -> None:
    """Modes node and none read at ``Detail.NODES``: no tier, so no tier file is opened."""
    topology = topology_from_sysfs(str(HMAT_TREE), detail=Detail.NODES)
    assert tiers_of(topology) == {0: (None, None), 1: (None, None), 2: (None, None)}


def test_this_machine_s_tiers_are_the_kernel_s() -> None:
    """Read here independently of pynumabind: each ``memory_tierN/nodelist``."""
    topology = topology_from_sysfs("/sys")
    expected: Dict[int, int] = {}
    if LIVE_TIERS.is_dir():
        for entry in LIVE_TIERS.iterdir():
            match = re.fullmatch(r"memory_tier(\d+)", entry.name)
            if match:
                for node in _expand((entry / "nodelist").read_text().strip()):
                    expected[node] = int(match.group(1))
    found = {n: node.tier for n, node in topology.nodes.items() if node.tier is not None}
    assert found == {n: t for n, t in expected.items() if n in topology.nodes}
    if LIVE_TIERS.is_dir():  # a tiering kernel puts every node with memory in a tier
        assert all(n.tier is not None for n in topology.nodes.values() if n.has_memory), found


def _expand(text: str) -> list:
    out = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def _tree(tmp_path: Path, tiers: Dict[str, str]) -> Path:
    """A two-node sysfs tree (node 1 memory only) with the given ``memory_tierN`` nodelists."""
    root = tmp_path / "sys"
    node = root / "devices" / "system" / "node"
    cpu = root / "devices" / "system" / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-1\n")
    files = {
        "online": "0-1",
        "has_memory": "0-1",
        "node0/cpulist": "0-1",
        "node0/distance": "10 20",
        "node1/cpulist": "",
        "node1/distance": "20 10",
        "node0/meminfo": "Node 0 MemTotal: 1024 kB\nNode 0 MemFree: 512 kB\n",
        "node1/meminfo": "Node 1 MemTotal: 2048 kB\nNode 1 MemFree: 1024 kB\n",
    }
    for name, text in files.items():
        (node / name).parent.mkdir(parents=True, exist_ok=True)
        (node / name).write_text(text + "\n")
    for name, nodelist in tiers.items():
        tier = root / "devices" / "virtual" / "memory_tiering" / name
        tier.mkdir(parents=True)
        (tier / "nodelist").write_text(nodelist + "\n")
    return root


def test_no_memory_tiering_directory_means_no_tiers(tmp_path: Path) -> None:
    topology = topology_from_sysfs(str(_tree(tmp_path, {})))
    assert tiers_of(topology) == {0: (None, None), 1: (None, None)}


def test_tiers_rank_by_number_and_other_entries_are_ignored(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"memory_tier72": "1", "memory_tier4": "0"})
    (root / "devices" / "virtual" / "memory_tiering" / "power").mkdir()
    assert tiers_of(topology_from_sysfs(str(root))) == {0: (4, 0), 1: (72, 1)}


def test_a_node_in_two_tiers_is_an_error_naming_both(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"memory_tier4": "0-1", "memory_tier72": "1"})
    both = "node 1 is listed in both memory_tier4 and memory_tier72"
    with pytest.raises(TopologyError, match=both):
        topology_from_sysfs(str(root))


def test_a_malformed_nodelist_is_an_error_naming_the_file(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"memory_tier4": "zero"})
    with pytest.raises(TopologyError, match=r"memory_tier4/nodelist"):
        topology_from_sysfs(str(root))


# ------------------------------------------------------------------ snapshots and show


def test_a_snapshot_keeps_the_tiers() -> None:
    topology = topology_from_sysfs(str(HMAT_TREE))
    data = topology.to_dict()
    assert [n["tier"] for n in data["nodes"]] == [4, 4, 54]
    assert tiers_of(Topology.from_json(topology.to_json())) == tiers_of(topology)


@pytest.mark.parametrize("schema", [1, 2])
def test_a_snapshot_written_before_nodes_had_tiers_loads_with_tiers_unknown(schema: int) -> None:
    data = topology_from_sysfs(str(HMAT_TREE)).to_dict()
    data["schema"] = schema
    if schema == 1:
        del data["visibility"]
    for node in data["nodes"]:
        del node["tier"]
    loaded = Topology.from_dict(data)
    assert tiers_of(loaded) == {0: (None, None), 1: (None, None), 2: (None, None)}
    assert loaded.nodes[2].memory_only and loaded.nodes[0].cpus == frozenset({0, 1})


@pytest.mark.parametrize("bad", ["4", -1, True, 4.0, 1 << 31])
def test_a_snapshot_s_tier_must_be_a_non_negative_integer(bad: Any) -> None:
    data = topology_from_sysfs(str(HMAT_TREE)).to_dict()
    data["nodes"][2]["tier"] = bad
    with pytest.raises(TopologyError, match="memory tier"):
        Topology.from_dict(data)


def test_show_json_gives_node_2_a_tier_of_its_own() -> None:
    result = run_cli({}, "show", "--json", "--sysfs-root", str(HMAT_TREE))
    assert result.returncode == 0, result.stderr
    nodes = json.loads(result.stdout)["topology"]["nodes"]
    assert {n["id"]: n["tier"] for n in nodes} == {0: 4, 1: 4, 2: 54}


def test_show_prints_the_tier_column() -> None:
    result = run_cli({}, "show", "--sysfs-root", str(HMAT_TREE))
    assert result.returncode == 0, result.stderr
    rows = result.stdout.split("NUMA nodes\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # the tier, then HMAT's read figures ("20480 MB/s, 100 ns": tests/cli/test_cli_tiers)
    assert rows[0].split()[-3:] == ["tier", "hmat", "read"]
    nodes = [row.split() for row in rows[1:] if row[:1].isdigit()]
    assert {cells[0]: cells[-5] for cells in nodes} == {"0": "4", "1": "4", "2": "54"}


# ------------------------------------------------------------------ HMAT's figures per node


def _linked(tmp_path: Path) -> Path:
    """The recorded 6.12 tree with its ``initiators/nodeM`` links made (kept in ``SYMLINKS``)."""
    root = tmp_path / "sys"
    shutil.copytree(HMAT_TREE, root)
    for line in (HMAT_TREE / "SYMLINKS").read_text().splitlines():
        link, _, target = line.partition(" -> ")
        if link:
            os.symlink(target, root / link)
    return root


def test_each_node_carries_the_firmware_s_figures_from_its_nearest_cpus(tmp_path: Path) -> None:
    """HMAT as the 6.12 guest's kernel showed it: nodes 0 and 1 at 20480 MB/s and 100 ns from
    their own CPUs, node 2 a quarter of that bandwidth at three times the latency from node 1."""
    topology = topology_from_sysfs(str(_linked(tmp_path)))
    figures = {
        n: (node.access.initiators, node.access.read_bandwidth_mbs, node.access.write_bandwidth_mbs,
            node.access.read_latency_ns, node.access.write_latency_ns)
        for n, node in topology.nodes.items()
        if node.access is not None
    }  # fmt: skip
    assert figures == {
        0: ({0}, 20480, 20480, 100, 100),
        1: ({1}, 20480, 20480, 100, 100),
        2: ({1}, 5120, 5120, 300, 300),
    }
    below = topology_from_sysfs(str(_linked(tmp_path / "again")), detail=Detail.CACHES)
    assert all(node.access is None for node in below.nodes.values())  # a bind reads none


def test_without_hmat_no_node_has_figures(tmp_path: Path) -> None:
    topology = topology_from_sysfs(str(_tree(tmp_path, {"memory_tier4": "0-1"})))
    assert [node.access for node in topology.nodes.values()] == [None, None]
    assert all("access" not in n for n in topology.to_dict()["nodes"])  # written only if known


def test_this_machine_s_figures_are_the_kernel_s() -> None:
    """Read here independently: ``nodeN/access1/initiators`` (none on most machines)."""
    topology = topology_from_sysfs("/sys")
    for n, node in topology.nodes.items():
        base = Path(f"/sys/devices/system/node/node{n}/access1/initiators")
        if not base.is_dir() or not node.has_memory:
            assert node.access is None
            continue
        assert node.access is not None
        assert node.access.read_bandwidth_mbs == int((base / "read_bandwidth").read_text())
        linked = {int(e.name[4:]) for e in base.iterdir() if re.fullmatch(r"node\d+", e.name)}
        assert node.access.initiators == linked


def test_a_snapshot_keeps_the_figures_and_an_older_one_has_none(tmp_path: Path) -> None:
    topology = topology_from_sysfs(str(_linked(tmp_path)))
    data = topology.to_dict()
    assert data["nodes"][2]["access"] == {
        "initiators": "1",
        "read_bandwidth_mbs": 5120,
        "write_bandwidth_mbs": 5120,
        "read_latency_ns": 300,
        "write_latency_ns": 300,
    }
    assert Topology.from_json(topology.to_json()) == topology
    for schema in (1, 2):  # written before nodes carried figures: same schema, none known
        older = json.loads(topology.to_json())
        older["schema"] = schema
        for node in older["nodes"]:
            del node["access"]
        assert all(n.access is None for n in Topology.from_dict(older).nodes.values())


@pytest.mark.parametrize(
    ("field", "bad", "words"),
    [
        ("read_bandwidth_mbs", "5120", "read_bandwidth_mbs"),
        ("read_latency_ns", -1, "read_latency_ns"),
        ("initiators", 1, "access initiators"),
        (None, [1], "access"),
    ],
)
def test_a_snapshot_s_figures_are_checked(tmp_path: Path, field: Any, bad: Any, words: str) -> None:
    data = topology_from_sysfs(str(_linked(tmp_path))).to_dict()
    if field is None:
        data["nodes"][2]["access"] = bad
    else:
        data["nodes"][2]["access"][field] = bad
    with pytest.raises(TopologyError, match=words):
        Topology.from_dict(data)


def test_show_json_carries_node_2_s_figures(tmp_path: Path) -> None:
    result = run_cli({}, "show", "--json", "--sysfs-root", str(_linked(tmp_path)))
    assert result.returncode == 0, result.stderr
    nodes = {n["id"]: n for n in json.loads(result.stdout)["topology"]["nodes"]}
    assert nodes[2]["access"]["read_bandwidth_mbs"] * 4 == nodes[0]["access"]["read_bandwidth_mbs"]
    assert nodes[2]["access"]["initiators"] == "1"
