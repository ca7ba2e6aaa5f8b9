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
record was saved.  A fact one side does not know (``None``: a CPU model
``/proc/cpuinfo`` does not name, a node's memory size, a GPU's model, the
kernel of a snapshot) is not compared.

Another machine, from a snapshot
--------------------------------
``pynumabind plan --topology OTHER.json --mode advised`` plans for the
snapshot's machine, so it follows that machine's record, not this one's:
:func:`snapshot_machine` is the fingerprint a snapshot (or a recorded sysfs
tree) gives.  A snapshot holds the NUMA nodes, their online CPUs and memory
sizes, the SLIT distances and every GPU by PCI bus id; it holds no CPU model
and no kernel release, and names a GPU's model as NVML does when NVML was
asked (``NVIDIA H100 80GB HBM3``), not as the record does (``PCI
10de:2330``).  So a snapshot's machine has no CPU model, no kernel, and a
GPU model only where it is in the record's form: those are not compared, the
rest is, exactly as above.

The machine type, and the record's file name
--------------------------------------------
A directory of records holds one record per **machine type**
(:mod:`pynumabind.records._paths`).  Two machines are of one type when their
:func:`machine_type` keys are equal: everything :func:`staleness` compares,
exactly -- the CPU model, each node's id and online CPUs, the SLIT
distances, each GPU's PCI bus id and model, the kernel release -- except the
memory sizes, which count by their class (:func:`memory_class`): classes
are 1/36 of a doubling wide (1.94%), narrower than
:data:`MEMORY_TOLERANCE`, so two machines of one type are never stale to
each other, and a machine of another type never gets the same key.  (Two
machines whose sizes differ by less than the tolerance but straddle a class
boundary are of two types: each has its own file, and each file is still
followed by the other machine, since a reader matches by :func:`staleness`,
not by name.)

:func:`record_name` is the file name a record of that type gets: a short,
readable slug of the CPU model, the number of nodes and of GPUs, then 16 hex
digits (64 bits) of the SHA-256 of the key, which tell the types apart:
``intel-xeon-platinum-8480c-2n-8gpu-3f9a1c2b7d4e5a60.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .._text import counted
from ..cpulist import format_cpulist
from ..model import Topology

__all__ = [
    "MEMORY_CLASSES_PER_DOUBLING",
    "MEMORY_TOLERANCE",
    "Machine",
    "MachineGpu",
    "MachineNode",
    "machine_of",
    "machine_type",
    "memory_class",
    "record_name",
    "snapshot_machine",
    "staleness",
]

#: A node's memory size may differ by this share of the larger size.
MEMORY_TOLERANCE = 0.02

#: Memory size classes per doubling: the fewest whose width is within the tolerance.
MEMORY_CLASSES_PER_DOUBLING = math.ceil(1 / math.log2(1 + MEMORY_TOLERANCE))


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
    kernel: Optional[str]

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
            f"{counted(len(self.nodes), 'NUMA node')}, {counted(len(self.gpus), 'GPU')}, {cpu}, "
            f"kernel {self.kernel or 'unknown'}"
        )

    def hardware(self) -> str:
        """``Intel(R) Xeon(R) ..., 2 nodes, 8 GPUs``: the machine without its kernel."""
        cpu = self.cpu_model or "CPU model unknown"
        return f"{cpu}, {counted(len(self.nodes), 'node')}, {counted(len(self.gpus), 'GPU')}"


def machine_of(
    topology: Topology,
    *,
    cpu_model: Optional[str],
    kernel: Optional[str],
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


#: A GPU model as sysfs names it, the form this machine's fingerprint holds.
_SYSFS_GPU_MODEL = re.compile(r"PCI [0-9a-f]{4}:[0-9a-f]{4}")


def snapshot_machine(topology: Topology) -> Machine:
    """The fingerprint of a snapshot's machine: only what a snapshot holds (module docstring).

    No CPU model, no kernel, and a GPU's model only where it has the form a
    record holds (``PCI 10de:2330``): the facts a snapshot lacks are unknown,
    so :func:`staleness` does not compare them.  Pass every GPU of the
    machine (a topology read with ``visible_only=False``).
    """
    found = machine_of(topology, cpu_model=None, kernel=None)
    gpus = tuple(
        g if g.model is None or _SYSFS_GPU_MODEL.fullmatch(g.model) else replace(g, model=None)
        for g in found.gpus
    )
    return replace(found, gpus=gpus)


# ----------------------------------------------------------- machine type


def memory_class(size: Optional[int]) -> Optional[int]:
    """The class of a memory size: ``floor(36 * log2(size))``, exact, in integers.

    Two sizes in one class differ by less than 2**(1/36) - 1 (1.94%) of the
    smaller, so by less than :data:`MEMORY_TOLERANCE` of the larger: never
    stale to each other.  None (unknown) stays None; 0 is class 0.
    """
    if size is None:
        return None
    if size <= 0:
        return 0
    power: int = size**MEMORY_CLASSES_PER_DOUBLING
    return power.bit_length() - 1


def machine_type(machine: Machine) -> str:
    """The machine type's key, as canonical JSON text (see the module docstring).

    Equal for two machines of one type, never equal for two machines that are
    stale to each other.
    """
    key = {
        "cpu_model": machine.cpu_model,
        "nodes": [
            [n.id, format_cpulist(n.cpus), memory_class(n.memory_bytes)]
            for n in sorted(machine.nodes, key=lambda n: n.id)
        ],
        "distances": [list(row) for row in machine.distances],
        "gpus": sorted([g.pci_bus_id, g.model or ""] for g in machine.gpus),
        "kernel": machine.kernel,
    }
    return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


#: Words of a CPU model that say nothing about which CPU it is.
_NOISE_WORDS = frozenset({"cpu", "processor"})


def _cpu_slug(model: Optional[str]) -> str:
    """``intel-xeon-platinum-8480c``: the CPU model in lower-case ASCII words, at most 40."""
    text = re.sub(r"\((?:r|tm|c)\)", " ", (model or "").lower()).split("@")[0]
    words = [w for w in re.split(r"[^a-z0-9]+", text) if w and w not in _NOISE_WORDS]
    slug = "-".join(words)[:40].strip("-")
    return slug or "unknown-cpu"


def record_name(machine: Machine) -> str:
    """The file name of this machine type's record in a directory of records.

    ``<cpu>-<N>n-<G>gpu-<16 hex digits>.json``: a readable slug, then the
    first 64 bits of the SHA-256 of :func:`machine_type` (module docstring).
    ASCII letters, digits and ``-`` only, never starting with ``.``.
    """
    digest = hashlib.sha256(machine_type(machine).encode("ascii")).hexdigest()[:16]
    return (
        f"{_cpu_slug(machine.cpu_model)}-{len(machine.nodes)}n-{len(machine.gpus)}gpu-{digest}.json"
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


def _known_and_differ(before: Optional[str], now: Optional[str]) -> bool:
    """Both sides know the fact, and it differs (an unknown one is not compared)."""
    return before is not None and now is not None and before != now


def staleness(recorded: Machine, current: Machine) -> List[str]:
    """Every difference that makes a record of ``recorded`` stale on ``current``; [] if none.

    Each item is one sentence naming what differs, the record's value first
    (see the module docstring for what is compared, and what is not).
    """
    out: List[str] = []
    if _known_and_differ(recorded.cpu_model, current.cpu_model):
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
    if _known_and_differ(recorded.kernel, current.kernel):
        out.append(f"the kernel was {recorded.kernel}, now {current.kernel}")
    return out
