"""The kernel's memory tiers, as sysfs shows them (shell).

Linux 6.1+ groups the memory nodes into tiers by an abstract distance
(``mm/memory-tiers.c``): ``devices/virtual/memory_tiering/memory_tierN/nodelist``
lists the nodes of tier ``N``, where ``N`` is the abstract distance divided
by the tier's span (DRAM is ``memory_tier4``; slower memory -- CXL, or a node
whose firmware HMAT gives less bandwidth or more latency -- gets a higher
number).  So on one machine a lower tier number is faster memory by the
kernel's estimate; the numbers are not comparable across kernels (the
scaling changed between releases), only their order is.

Every file is optional: a kernel without memory tiering (before 6.1, or
built without it) has no ``memory_tiering`` directory, and then no node has
a tier.  A ``nodelist`` that exists but cannot be read or parsed is a
:class:`~pynumabind.errors.TopologyError` naming it
(:class:`~pynumabind._os.textfile.SysfsReader`), and so is a node the
kernel lists in two tiers.
"""

from __future__ import annotations

from ..errors import TopologyError
from .textfile import SysfsReader, numbered

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict

__all__ = ["node_tiers"]

_BASE = ("devices", "virtual", "memory_tiering")


def node_tiers(sysfs: SysfsReader) -> Dict[int, int]:
    """Node id -> the number of its ``memory_tierN``; empty when the kernel shows no tiers."""
    names = sysfs.listdir(*_BASE)
    if names is None:
        return {}
    tier_of: Dict[int, int] = {}
    for tier in numbered(names, "memory_tier"):
        nodes = sysfs.cpulist(*_BASE, f"memory_tier{tier}", "nodelist", required=False)
        for node in sorted(nodes or ()):
            if node in tier_of:
                raise TopologyError(
                    f"node {node} is listed in both memory_tier{tier_of[node]} and "
                    f"memory_tier{tier} under {sysfs.path(*_BASE)}"
                )
            tier_of[node] = tier
    return tier_of
