"""Memory sizes: the machine's ``/proc/meminfo`` and each node's ``nodeN/meminfo`` (shell).

The one reader of both files, for discovery (each node's total and free
memory), the advice record (each node's total) and ``advise`` (what the
kernel can give on a node).  Values are bytes where the kernel prints ``kB``
and plain counts where it prints no unit (``HugePages_Total``).

Errors, translated here once:

* A node's ``meminfo`` is a file of a sysfs tree a user may name, read
  through :class:`~pynumabind._os.textfile.SysfsReader`: absent is ``None``
  (the size is unknown), unreadable or a line that does not parse is a
  :class:`~pynumabind.errors.TopologyError` naming the file -- a wrong size
  would give a wrong plan.
* ``/proc/meminfo`` describes the live machine only, and every fact taken
  from it is optional: a file that cannot be read (or is not a small ASCII
  file) is ``None``, and a line that does not parse is left out.
"""

from __future__ import annotations

import re

from ..errors import TopologyError
from . import PROC_ROOT
from .textfile import SysfsReader, is_live_root, read_ascii

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, Iterable, Optional, Tuple

__all__ = [
    "PROC_MEMINFO",
    "node_meminfo",
    "node_memory_sizes",
    "node_total_free",
    "nodes_meminfo",
    "system_meminfo",
]

#: The live machine's memory, all nodes together.
PROC_MEMINFO = f"{PROC_ROOT}/meminfo"

_NODE_LINE = re.compile(r"\ANode\s+(\d+)\s+([^:\s]+):\s+(\d+)(\s+kB)?\s*\Z")
_SYSTEM_LINE = re.compile(r"\A([^:\s]+):\s+(\d+)(\s+kB)?\s*\Z")


def _node_parts(node: int) -> Tuple[str, ...]:
    return ("devices", "system", "node", f"node{node}", "meminfo")


def node_meminfo(sysfs: SysfsReader, node: int) -> Optional[Dict[str, int]]:
    """Every field of ``nodeN/meminfo`` (``Node 0 MemFree:  3194736 kB``); None when absent.

    Raises:
        TopologyError: the file cannot be read, or a line is not such a
            field of this node.
    """
    parts = _node_parts(node)
    text = sysfs.text(*parts, required=False)
    if text is None:
        return None
    values: Dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _NODE_LINE.match(line.strip())
        if match is None or int(match.group(1)) != node:
            raise TopologyError(f"malformed line {line.strip()!r} in {sysfs.path(*parts)}")
        number = int(match.group(3))
        values[match.group(2)] = number << 10 if match.group(4) else number
    return values


def nodes_meminfo(root: str, nodes: Iterable[int]) -> Dict[int, Optional[Dict[str, int]]]:
    """:func:`node_meminfo` of each of ``nodes`` under the sysfs ``root``, in the order given."""
    sysfs = SysfsReader(root)
    return {node: node_meminfo(sysfs, node) for node in nodes}


def node_total_free(sysfs: SysfsReader, node: int) -> Tuple[Optional[int], Optional[int]]:
    """(MemTotal, MemFree) of a node in bytes; (None, None) when its ``meminfo`` is absent.

    Raises:
        TopologyError: as :func:`node_meminfo`, or the file has no ``MemTotal``.
    """
    values = node_meminfo(sysfs, node)
    if values is None:
        return None, None
    if "MemTotal" not in values:
        raise TopologyError(f"no MemTotal in {sysfs.path(*_node_parts(node))}")
    return values["MemTotal"], values.get("MemFree")


def system_meminfo(path: str = PROC_MEMINFO) -> Optional[Dict[str, int]]:
    """Every field of ``/proc/meminfo`` (``MemAvailable:  8138544 kB``); None when unreadable."""
    try:
        text = read_ascii(path, "meminfo file")
    except (OSError, TopologyError):
        return None
    values: Dict[str, int] = {}
    for line in text.splitlines():
        match = _SYSTEM_LINE.match(line.strip())
        if match is not None:
            number = int(match.group(2))
            values[match.group(1)] = number << 10 if match.group(3) else number
    return values


def node_memory_sizes(root: str, nodes: Iterable[int]) -> Dict[int, Optional[int]]:
    """Each node's ``MemTotal`` in bytes (None when unknown): what an advice record compares.

    A kernel without NUMA (no ``devices/system/node``) has one node 0 of the
    whole machine's memory (``/proc/meminfo``, on the live root only).
    """
    sysfs = SysfsReader(root)
    if sysfs.listdir("devices", "system", "node") is None:
        system = system_meminfo() if is_live_root(root) else None
        total = (system or {}).get("MemTotal")
        return {node: total if node == 0 else None for node in nodes}
    return {node: node_total_free(sysfs, node)[0] for node in nodes}
