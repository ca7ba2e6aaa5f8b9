"""What the firmware's HMAT claims about each memory node, as sysfs shows it (shell).

``devices/system/node/nodeN/accessK/initiators/`` exists for a memory node
the firmware's HMAT describes: access class 0 from the nearest initiators of
any kind, class 1 from the nearest CPUs.  It lists those initiators as
``nodeM`` links beside ``read_bandwidth``/``write_bandwidth`` (MB/s) and
``read_latency``/``write_latency`` (ns).  ``advise`` reports these for
comparison only; nothing is planned from them.  Discovery's full read
(:mod:`.sysfs`) puts class 1 on each node (``NumaNode.access``), for ``show``
and snapshots.

Every file is optional: most machines have none, nor does a VM unless its
firmware describes one (QEMU's ``-machine hmat=on`` with ``-numa hmat-lb``: the
recorded tree ``tests/machines/sysfs/qemu-6.12-hmat`` and the guest of that name).
An absent class is ``None`` and an absent value is ``None``; a file that
exists but cannot be read is a :class:`~pynumabind.errors.TopologyError`
naming it (:class:`~pynumabind._os.textfile.SysfsReader`).
"""

from __future__ import annotations

from .._record import record
from . import SYSFS_ROOT
from .textfile import SysfsReader, numbered

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Iterable, List, Optional, Tuple

__all__ = ["ACCESS_CLASSES", "CPU_ACCESS", "NO_HMAT", "NodeAccess", "node_access", "read_hmat"]

#: The access classes the kernel shows: 0 (any initiator) and 1 (CPUs).
ACCESS_CLASSES = (0, 1)
#: The class measured from the nearest CPUs: what a process's memory sees.
CPU_ACCESS = 1

#: Why a machine shows no HMAT attributes, as ``advise`` reports it.
NO_HMAT = "the kernel exposes no HMAT attributes here (nodeN/access0/initiators absent)"


@record(frozen=True)
class NodeAccess:
    """One access class of one memory node: its nearest initiators and their performance.

    A record (:mod:`pynumabind._record`), not a dataclass: a full-detail
    discovery, as ``pynumabind exec --no-nvml`` makes, reads HMAT, and
    ``dataclasses`` would load ``inspect`` with it.
    """

    node: int
    access: int
    initiators: Tuple[int, ...]
    read_bandwidth_mbs: Optional[int]
    write_bandwidth_mbs: Optional[int]
    read_latency_ns: Optional[int]
    write_latency_ns: Optional[int]

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        node: int,
        access: int,
        initiators: Tuple[int, ...],
        read_bandwidth_mbs: Optional[int],
        write_bandwidth_mbs: Optional[int],
        read_latency_ns: Optional[int],
        write_latency_ns: Optional[int],
    ) -> None:
        self.__dict__.update(
            node=node,
            access=access,
            initiators=initiators,
            read_bandwidth_mbs=read_bandwidth_mbs,
            write_bandwidth_mbs=write_bandwidth_mbs,
            read_latency_ns=read_latency_ns,
            write_latency_ns=write_latency_ns,
        )


def node_access(sysfs: SysfsReader, node: int, access: int) -> Optional[NodeAccess]:
    """Access class ``access`` of memory node ``node``; None when sysfs shows none."""
    base = ("devices", "system", "node", f"node{node}", f"access{access}", "initiators")
    names = sysfs.listdir(*base)
    if names is None:
        return None

    def value(name: str) -> Optional[int]:
        return sysfs.integer(*base, name, required=False)

    return NodeAccess(
        node,
        access,
        tuple(numbered(names, "node")),
        value("read_bandwidth"),
        value("write_bandwidth"),
        value("read_latency"),
        value("write_latency"),
    )


def read_hmat(nodes: Iterable[int], root: str = SYSFS_ROOT) -> List[NodeAccess]:
    """Every access class sysfs shows for ``nodes``, by node then class."""
    sysfs = SysfsReader(root)
    found: List[NodeAccess] = []
    for node in sorted(nodes):
        for access in ACCESS_CLASSES:
            entry = node_access(sysfs, node, access)
            if entry is not None:
                found.append(entry)
    return found
