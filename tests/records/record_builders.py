"""Advice records for the untrusted-record tests: a valid one with every part filled in, and edits.

The record is what ``advise --save`` writes on :func:`two_socket` (two nodes
of 8 CPUs, GPU 0 on node 0, GPU 1 reporting node 1): a memory matrix with
latency and page placement, both GPUs' copies (GPU 1's 1.4x faster from node
0, so the verdict moves it there), the firmware's SLIT and HMAT, the verdict
with its comparisons.  :func:`document` is its JSON as parsed, for tests to
edit; :func:`edited` applies one edit at a JSON path and writes the file.
"""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

from pynumabind.advisor.rule import decide
from pynumabind.model import Topology
from pynumabind.records._json import record_dict
from pynumabind.records._machine import Machine, machine_of
from pynumabind.records.advice import Advice
from pynumabind.records.values import CopyCell, Firmware, HmatEntry, Placement

from ..support.advice_builders import gpu as copies
from ..support.advice_builders import matrix, spread
from ..support.topology_builders import gpu, make_topology

GiB = 1 << 30
KERNEL = "6.8.0-40-generic"
BUSES = ("0000:17:00.0", "0000:b1:00.0")


def two_socket(**changes: Any) -> Topology:
    """Two sockets, GPU 0 on node 0 and GPU 1 on node 1; ``changes`` as ``Topology.replace``."""
    topology = make_topology(
        {0: "0-7", 1: "8-15"},
        distance=lambda a, b: 10 if a == b else 21,
        gpus=[
            gpu(0, 0, bus=BUSES[0], model="PCI 10de:2335"),
            gpu(1, 1, bus=BUSES[1], model="PCI 10de:2335"),
        ],
    )
    return topology.replace(**changes) if changes else topology


def machine(topology: Topology) -> Machine:
    """The fingerprint ``advise --save`` would store on ``topology``."""
    sizes = {n: 256 * GiB if topology.nodes[n].cpus else None for n in topology.nodes}
    return machine_of(topology, cpu_model="Test CPU 9000", kernel=KERNEL, memory_bytes=sizes)


placed = Placement  # where a measurement's pages were


def _pinned_where_copied(cell: CopyCell) -> CopyCell:
    return replace(cell, placement=Placement(cell.cpu_node, {cell.cpu_node: 32}))


def advice() -> Advice:
    """Every part filled in; GPU 1's copies are 1.4x faster from node 0 (a move)."""
    memory = matrix([[100, 60], [60, 100]])
    cells = tuple(
        tuple(
            replace(cell, latency=spread(90.0 + 40 * (i != j)), placement=placed(j, {j: 64, -2: 1}))
            for j, cell in enumerate(row)
        )
        for i, row in enumerate(memory.cells)
    )
    memory = replace(
        memory, cells=cells, latency_overhead=spread(2.0), buffer_bytes=1 << 28,
        llc_bytes=1 << 25, method="STREAM triad, 8 threads", notes=("a note",),
    )  # fmt: skip
    gpus = [
        replace(copies(0, 0, [50, 36], [50, 36]), pci_bus_id=BUSES[0], buffer_bytes=1 << 26),
        replace(copies(1, 1, [50, 35.7], [49, 35]), pci_bus_id=BUSES[1], buffer_bytes=1 << 26),
    ]
    gpus = [replace(g, cells=tuple(map(_pinned_where_copied, g.cells))) for g in gpus]
    firmware = Firmware(
        (0, 1), ((10, 21), (21, 10)), (HmatEntry(0, 0, (0,), 100000, 90000, 80, 85),), None
    )
    recommendation = decide(memory, gpus)
    assert recommendation.bind and recommendation.gpu(1) is not None
    assert recommendation.gpu(1).node == 0 and recommendation.comparisons
    return Advice(memory, tuple(gpus), "measured with test", "test", firmware, recommendation,
                  quick=True, seconds=12.5, notes=("measured in a test",))  # fmt: skip


def document(topology: Optional[Topology] = None) -> Dict[str, Any]:
    """The valid record of :func:`advice` on ``topology`` (default :func:`two_socket`), parsed."""
    recorded = machine(topology or two_socket())
    return json.loads(json.dumps(record_dict(advice(), recorded, "2026-12-03T10:00:00Z", "test")))


def at(data: Any, path: Sequence[Union[str, int]]) -> Any:
    for key in path:
        data = data[key]
    return data


def edited(doc: Dict[str, Any], path: Sequence[Union[str, int]], value: Any) -> Dict[str, Any]:
    """A copy of ``doc`` with the value at ``path`` replaced (:data:`DELETE`: removed)."""
    out = copy.deepcopy(doc)
    parent = at(out, path[:-1])
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


DELETE = object()


def write(path: Path, doc: Dict[str, Any]) -> str:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


Key = Union[str, int]


def paths(data: Any, here: Tuple[Key, ...] = ()) -> Iterator[Tuple[Key, ...]]:
    """Every JSON path in ``data``, containers and leaves, depth first."""
    if here:
        yield here
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths(value, (*here, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from paths(value, (*here, index))
