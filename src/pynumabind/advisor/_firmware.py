"""What the firmware claims, for ``advise`` to show beside what it measured (shell).

The SLIT distances come from the topology discovery read; the HMAT
attributes from :mod:`pynumabind._os.hmat`.  Neither decides anything: the
rule (:func:`pynumabind.advisor.rule.decide`) reads only measurements.
"""

from __future__ import annotations

from .._os import SYSFS_ROOT
from .._os import hmat as _hmat
from ..model import Topology
from ..records.values import Firmware, HmatEntry

__all__ = ["firmware"]


def firmware(topology: Topology, sysfs_root: str = SYSFS_ROOT) -> Firmware:
    """SLIT from the topology, HMAT from ``nodeN/accessK/initiators`` where the kernel shows it."""
    nodes = tuple(sorted(topology.nodes))
    distances = tuple(tuple(topology.distance(a, b) for b in nodes) for a in nodes)
    entries = tuple(
        HmatEntry(
            a.node,
            a.access,
            a.initiators,
            a.read_bandwidth_mbs,
            a.write_bandwidth_mbs,
            a.read_latency_ns,
            a.write_latency_ns,
        )
        for a in _hmat.read_hmat(nodes, sysfs_root)
    )
    return Firmware(nodes, distances, entries, None if entries else _hmat.NO_HMAT)
