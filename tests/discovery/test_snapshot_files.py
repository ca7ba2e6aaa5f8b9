"""Snapshots are untrusted input: bounded, typed, checked, and every error names the file."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path
from typing import Any, Callable, Dict

import pytest

from pynumabind.discovery import load_topology
from pynumabind.errors import TopologyError
from pynumabind.model import MAX_SNAPSHOT_CHARS, Topology


def snapshot(cpus: int = 4) -> Dict[str, Any]:
    """A small valid snapshot: one node with ``cpus`` CPUs and one GPU."""
    return {
        "schema": 1,
        "nodes": [
            {
                "id": 0,
                "cpus": f"0-{cpus - 1}",
                "memory_total": 1 << 30,
                "memory_free": 1 << 29,
                "has_memory": True,
                "distances": {"0": 10},
            }
        ],
        "cpus": [
            {"id": c, "node": 0, "package": 0, "core": c, "die": None, "siblings": str(c), "l3": ""}
            for c in range(cpus)
        ],
        "gpus": [
            {
                "index": 0,
                "pci_bus_id": "0000:07:00.0",
                "vendor": "nvidia",
                "numa_node": 0,
                "local_cpus": f"0-{cpus - 1}",
                "uuid": None,
                "model": None,
                "memory_node": None,
                "physical_index": 0,
                "source": "sysfs",
            }
        ],
        "allowed_cpus": f"0-{cpus - 1}",
        "allowed_mems": "0",
        "notes": [],
    }


def write(tmp_path: Path, data: object, name: str = "snap.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_a_valid_snapshot_loads(tmp_path: Path) -> None:
    topo = load_topology(write(tmp_path, snapshot()))
    assert topo.online_cpus == {0, 1, 2, 3} and topo.gpus[0].local_cpus == {0, 1, 2, 3}
    assert Topology.from_json(topo.to_json()) == topo


def test_not_json_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "{not json")
    with pytest.raises(TopologyError, match="not valid JSON") as info:
        load_topology(path)
    assert path in str(info.value)


def test_a_malformed_snapshot_names_the_file(tmp_path: Path) -> None:
    data = snapshot()
    data["cpus"][0]["package"] = "zero"
    path = write(tmp_path, data)
    with pytest.raises(TopologyError, match="package") as info:
        load_topology(path)
    assert path in str(info.value)


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(TopologyError, match="not a regular file") as info:
        load_topology(str(fifo))
    assert str(fifo) in str(info.value)


def test_dev_zero_behind_a_symlink_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(TopologyError, match="not a regular file"):
        load_topology(str(link))


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=str(tmp_path)):
        load_topology(str(tmp_path))


def test_the_bytes_read_are_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(MAX_SNAPSHOT_CHARS + 1)  # sparse: costs no disk
    with pytest.raises(TopologyError, match="larger than") as info:
        load_topology(str(big))
    assert str(big) in str(info.value)


def test_deep_nesting_is_a_topology_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    with pytest.raises(TopologyError, match="nested too deeply") as info:
        load_topology(path)
    assert path in str(info.value)


BAD_IDS = [-5, 10**18, 1.5, True, "3", None]


@pytest.mark.parametrize("value", BAD_IDS, ids=repr)
@pytest.mark.parametrize(
    "put",
    [
        lambda d, v: d["nodes"][0].__setitem__("id", v),
        lambda d, v: d["cpus"][1].__setitem__("id", v),
        lambda d, v: d["cpus"][1].__setitem__("core", v),
        lambda d, v: d["gpus"][0].__setitem__("index", v),
        lambda d, v: d["nodes"][0]["distances"].__setitem__("0", v),
    ],
    ids=["node id", "cpu id", "core", "gpu index", "distance"],
)
def test_every_id_is_a_non_negative_int_within_kernel_limits(
    put: Callable[[Dict[str, Any], Any], None], value: Any
) -> None:
    data = snapshot()
    put(data, value)
    with pytest.raises(TopologyError, match="malformed topology snapshot"):
        Topology.from_dict(data)


def test_an_overflowing_float_is_a_topology_error() -> None:
    text = json.dumps(snapshot()).replace('"numa_node": 0', '"numa_node": 1e400')
    with pytest.raises(TopologyError, match="numa_node"):
        Topology.from_json(text)


def test_optional_ids_may_be_null() -> None:
    data = snapshot()
    data["gpus"][0]["numa_node"] = None
    assert Topology.from_dict(data).gpus[0].numa_node is None


def test_a_cpu_listed_twice_is_an_error() -> None:
    data = snapshot()
    data["cpus"][1]["id"] = 0
    with pytest.raises(TopologyError, match="listed twice"):
        Topology.from_dict(data)


def test_sets_are_intersected_with_the_snapshots_own_cpus_and_nodes() -> None:
    data = snapshot()
    data["cpus"] = [c for c in data["cpus"] if c["id"] != 2]  # CPU 2 is not listed
    data["nodes"].append(
        {"id": 3, "cpus": "", "has_memory": True, "distances": {"0": 20, "3": 10, "7": 5}}
    )
    data["allowed_mems"] = "0-3"  # nodes 1 and 2 are not listed
    topo = Topology.from_dict(data)
    assert topo.nodes[0].cpus == {0, 1, 3}
    assert topo.gpus[0].local_cpus == topo.allowed_cpus == {0, 1, 3}
    assert topo.allowed_mems == {0, 3}
    assert dict(topo.nodes[3].distances) == {0: 20, 3: 10}


def test_ids_beyond_the_snapshots_own_are_an_error_not_an_expansion() -> None:
    data = snapshot(cpus=100)
    for cpu in data["cpus"]:
        cpu["siblings"] = "0-65535"
    tracemalloc.start()
    try:
        with pytest.raises(TopologyError, match="siblings"):
            Topology.from_json(json.dumps(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20


def test_a_huge_id_only_widens_lists_to_the_snapshots_own_cpus() -> None:
    """A CPU 65535 makes every id legal; each list still keeps only listed CPUs.

    20 lists, not more: each of ~65,000 ids takes some 4 MiB while it is a set,
    so keeping them would pass the bound below by far, and tracemalloc makes
    each list cost 0.1 s to parse (100 lists took 10 s of the suite).
    """
    data = snapshot(cpus=20)
    data["cpus"].append(dict(data["cpus"][0], id=65535, siblings="65535"))
    for cpu in data["cpus"][:20]:
        cpu["siblings"] = f"{cpu['id']}-65535"  # 20 different lists of ~65,000 ids
    text = json.dumps(data)
    assert len(text) < 16_000
    tracemalloc.start()
    try:
        topo = Topology.from_json(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert topo.cpus[0].siblings == topo.online_cpus  # 21 ids, not 65,536
    assert peak < 32 << 20


def test_distinct_lists_cannot_add_up_past_the_budget() -> None:
    data = snapshot(cpus=2000)
    for cpu in data["cpus"]:
        cpu["l3"] = f"{cpu['id']}-1999"  # 2,000 different lists: ~2 million ids in all
    with pytest.raises(TopologyError, match="far more ids"):
        Topology.from_json(json.dumps(data))


def test_identical_lists_are_parsed_once_and_shared() -> None:
    data = snapshot(cpus=64)
    for cpu in data["cpus"]:
        cpu["l3"] = "0-63"
    topo = Topology.from_dict(data)
    assert len({id(c.l3) for c in topo.cpus.values()}) == 1
