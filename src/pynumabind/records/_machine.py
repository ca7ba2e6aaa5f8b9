"""The machine an advice record was measured on, and what makes a record stale.

Pure: values in, values out, no I/O.  :class:`Machine` is what must still
hold for a record to apply; :func:`machine_of` makes one from a
:class:`~pynumabind.Topology` and the facts read beside it (this machine's
is read by :func:`pynumabind.records._host.this_machine`), and
:func:`staleness` compares two.  The record's JSON holds the machine under
``"machine"`` (:mod:`pynumabind.records._json` writes and reads it).

What makes a record stale
-------------------------
:func:`staleness` compares the record's machine with this one, field by
field; any difference makes the record stale (it does not apply, and the
advised mode falls back to the default plan):

* the **CPU model** (``model name`` of ``/proc/cpuinfo``; compared when both
  sides know it): another processor is another machine;
* the **NUMA nodes**: a node added or removed; a node's CPUs (its *online*
  CPUs: SMT turned off or CPUs taken offline change the threads the
  measurement used); a node's **memory size**, with a tolerance of
  :data:`MEMORY_TOLERANCE` (2%) of the larger: ``MemTotal`` moves by some
  megabytes between boots and kernel versions (pages the kernel and firmware
  reserve, a crash kernel), while a DIMM added or removed changes it by far
  more.  Free memory is not part of the record at all: it changes all the time
  and says nothing about where memory is fast;
* the **SLIT distances**;
* the **GPUs**, by PCI bus id: one added or removed, or a different model in
  the same slot.  The model is what sysfs names (``PCI vendor:device``), so a
  record saved with NVML and read without it still compare;
* the **kernel release** (``uname -r``): a new kernel may place and migrate
  memory differently; measure again after an upgrade.

Not compared: free memory, the process's allowed CPUs and memory nodes (a
worker in a cpuset is still on the same machine), ``CUDA_VISIBLE_DEVICES``
(the record holds every GPU; a worker sees some), load, the time since the
record was saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..cpulist import format_cpulist
from ..model import Topology

__all__ = [
    "MEMORY_TOLERANCE",
    "Machine",
    "MachineGpu",
    "MachineNode",
    "machine_of",
    "staleness",
]

#: A node's memory size may differ by this share of the larger size.
MEMORY_TOLERANCE = 0.02


@dataclass(frozen=True)
class MachineNode:
    """One NUMA node as the record holds it: its online CPUs and memory size (bytes)."""

    id: int
    cpus: frozenset[int]
    memory_bytes: Optional[int]


@dataclass(frozen=True)
class MachineGpu:
    """One GPU of the machine (every GPU, not only the visible ones)."""

    pci_bus_id: str
    model: Optional[str]


@dataclass(frozen=True)
class Machine:
    """What must still hold for a record to apply (see the module docstring).

    ``distances[i][j]`` is the SLIT distance from ``nodes[i]`` to ``nodes[j]``
    (``None``: unknown).
    """

    cpu_model: Optional[str]
    nodes: Tuple[MachineNode, ...]
    distances: Tuple[Tuple[Optional[int], ...], ...]
    gpus: Tuple[MachineGpu, ...]
    kernel: str

    def to_dict(self) -> Dict[str, Any]:
        return {
            "cpu_model": self.cpu_model,
            "nodes": [
                {"id": n.id, "cpus": format_cpulist(n.cpus), "memory_bytes": n.memory_bytes}
                for n in self.nodes
            ],
            "distances": [list(row) for row in self.distances],
            "gpus": [{"pci_bus_id": g.pci_bus_id, "model": g.model} for g in self.gpus],
            "kernel": self.kernel,
        }

    def text(self) -> str:
        """``4 NUMA nodes, 8 GPUs, Intel(R) Xeon(R) ..., kernel 6.8.0``: for messages."""
        cpu = self.cpu_model or "CPU model unknown"
        return (
            f"{len(self.nodes)} NUMA node{'s' if len(self.nodes) != 1 else ''}, "
            f"{len(self.gpus)} GPU{'s' if len(self.gpus) != 1 else ''}, {cpu}, "
            f"kernel {self.kernel}"
        )


def machine_of(
    topology: Topology,
    *,
    cpu_model: Optional[str],
    kernel: str,
    memory_bytes: Optional[Mapping[int, Optional[int]]] = None,
) -> Machine:
    """The :class:`Machine` of ``topology`` (every GPU it lists, by bus id).

    ``memory_bytes`` maps node -> size; default each node's ``memory_total``.
    """
    ids = sorted(topology.nodes)
    sizes = memory_bytes if memory_bytes is not None else {}
    return Machine(
        cpu_model=cpu_model,
        nodes=tuple(
            MachineNode(
                n,
                topology.nodes[n].cpus,
                sizes.get(n) if memory_bytes is not None else topology.nodes[n].memory_total,
            )
            for n in ids
        ),
        distances=tuple(tuple(topology.distance(a, b) for b in ids) for a in ids),
        gpus=tuple(
            MachineGpu(g.pci_bus_id, g.model)
            for g in sorted(topology.gpus, key=lambda g: g.pci_bus_id)
        ),
        kernel=kernel,
    )


def _size(value: Optional[int]) -> str:
    return "unknown" if value is None else f"{value / (1 << 30):.1f} GiB"


def _node_differences(recorded: Machine, current: Machine) -> List[str]:
    out: List[str] = []
    old = {n.id: n for n in recorded.nodes}
    new = {n.id: n for n in current.nodes}
    gone = sorted(set(old) - set(new))
    added = sorted(set(new) - set(old))
    if gone:
        out.append(f"NUMA node(s) {format_cpulist(frozenset(gone))} no longer exist")
    if added:
        out.append(f"NUMA node(s) {format_cpulist(frozenset(added))} are new")
    for node in sorted(set(old) & set(new)):
        before, now = old[node], new[node]
        if before.cpus != now.cpus:
            out.append(
                f"node {node}'s CPUs were {format_cpulist(before.cpus) or 'none'}, "
                f"now {format_cpulist(now.cpus) or 'none'}"
            )
        if _memory_differs(before.memory_bytes, now.memory_bytes):
            out.append(
                f"node {node}'s memory was {_size(before.memory_bytes)}, "
                f"now {_size(now.memory_bytes)}"
            )
    return out


def _memory_differs(before: Optional[int], now: Optional[int]) -> bool:
    """Sizes differ by more than :data:`MEMORY_TOLERANCE` of the larger; unknown: no."""
    if before is None or now is None:
        return False
    return abs(before - now) > MEMORY_TOLERANCE * max(before, now)


def _distance_map(machine: Machine) -> Dict[Tuple[int, int], Optional[int]]:
    ids = [n.id for n in machine.nodes]
    return {(a, b): value for a, row in zip(ids, machine.distances) for b, value in zip(ids, row)}


def _gpu_differences(recorded: Machine, current: Machine) -> List[str]:
    out: List[str] = []
    old = {g.pci_bus_id: g for g in recorded.gpus}
    new = {g.pci_bus_id: g for g in current.gpus}
    for bus in sorted(set(old) - set(new)):
        out.append(f"GPU {bus} ({old[bus].model or 'model unknown'}) was removed")
    for bus in sorted(set(new) - set(old)):
        out.append(f"GPU {bus} ({new[bus].model or 'model unknown'}) was added")
    for bus in sorted(set(old) & set(new)):
        before, now = old[bus].model, new[bus].model
        if before is not None and now is not None and before != now:
            out.append(f"GPU {bus} was a {before}, now a {now}")
    return out


def staleness(recorded: Machine, current: Machine) -> List[str]:
    """Every difference that makes a record of ``recorded`` stale on ``current``; [] if none.

    Each item is one sentence naming what differs, the record's value first
    (see the module docstring for what is compared, and what is not).
    """
    out: List[str] = []
    if (
        recorded.cpu_model is not None
        and current.cpu_model is not None
        and recorded.cpu_model != current.cpu_model
    ):
        out.append(f"the CPU was {recorded.cpu_model!r}, now {current.cpu_model!r}")
    out += _node_differences(recorded, current)
    before, now = _distance_map(recorded), _distance_map(current)
    changed = sorted(k for k in set(before) & set(now) if before[k] != now[k])
    if changed:
        a, b = changed[0]
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        out.append(
            f"the SLIT distance from node {a} to node {b} was {before[(a, b)]}, "
            f"now {now[(a, b)]}{more}"
        )
    out += _gpu_differences(recorded, current)
    if recorded.kernel != current.kernel:
        out.append(f"the kernel was {recorded.kernel}, now {current.kernel}")
    return out
