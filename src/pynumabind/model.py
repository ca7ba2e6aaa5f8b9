"""The values everything else passes around: the machine, and what a rank gets.

Nothing in this module does I/O and nothing here imports discovery, planning
or binding: it is the leaf every other module stands on.  A
:class:`Topology` is built by :mod:`pynumabind.discovery` (sysfs, NVML, KFD,
or a JSON snapshot) and consumed by the pure planner
(:mod:`pynumabind.planner`), which produces :class:`Plan` values that the
binder applies and the CLI prints.  That split is what lets the planner be
tested on thousands of generated machines.

JSON snapshots use canonical cpulists for sets, so they stay readable and
diffable, and :meth:`Topology.from_json` restores exactly what
:meth:`Topology.to_json` wrote.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from .cpulist import format_cpulist, parse_cpulist
from .errors import ConfigError, TopologyError

__all__ = [
    "SCHEMA_VERSION",
    "Cpu",
    "CpuMode",
    "Gpu",
    "MemoryPolicy",
    "NumaNode",
    "Plan",
    "Topology",
]

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node.

    ``cpus`` are the node's *online* CPUs.  A node with no CPUs is
    memory-only (a Grace GPU-memory node, CXL or HBM); a node without memory
    is a CPU-only node.  ``distances`` is the node's SLIT row, keyed by the
    other node's id.
    """

    id: int
    cpus: frozenset[int]
    memory_total: Optional[int] = None  # bytes
    memory_free: Optional[int] = None  # bytes
    has_memory: bool = True
    distances: Mapping[int, int] = field(default_factory=dict, hash=False)

    @property
    def has_cpus(self) -> bool:
        return bool(self.cpus)

    @property
    def memory_only(self) -> bool:
        return self.has_memory and not self.cpus


@dataclass(frozen=True)
class Cpu:
    """One online logical CPU and where it sits.

    ``siblings`` are the SMT threads of its physical core (itself included);
    ``l3`` the CPUs sharing its last-level (L3) cache, the unit AMD calls a
    CCX/CCD; empty when unknown.
    """

    id: int
    node: Optional[int]
    package: int
    core: int
    die: Optional[int] = None
    siblings: frozenset[int] = frozenset()
    l3: frozenset[int] = frozenset()

    @property
    def core_cpus(self) -> frozenset[int]:
        """The CPUs of this CPU's physical core (at least itself)."""
        return self.siblings or frozenset({self.id})


@dataclass(frozen=True)
class Gpu:
    """One accelerator, as this process sees it.

    ``index`` is the ordinal this process uses (after ``CUDA_VISIBLE_DEVICES``
    / ``ROCR_VISIBLE_DEVICES`` and the device order), ``physical_index`` the
    driver's (NVML) index.  ``numa_node`` is ``None`` when unknown (sysfs
    ``numa_node`` of -1 and no NVML answer).  ``memory_node`` is the GPU's own
    CPU-less memory node on coherent systems (GH200/GB200).  ``source`` names
    where ``numa_node`` came from (``"nvml"``, ``"sysfs"``, ``"kfd"`` ...), so
    plans can cite it.
    """

    index: int
    pci_bus_id: str
    vendor: str  # "nvidia", "amd", or "0x...." for others
    numa_node: Optional[int]
    local_cpus: frozenset[int] = frozenset()
    uuid: Optional[str] = None
    model: Optional[str] = None
    memory_node: Optional[int] = None
    physical_index: Optional[int] = None
    source: str = "sysfs"


@dataclass(frozen=True)
class Topology:
    """A machine and the process's place in it.

    ``allowed_cpus``/``allowed_mems`` are what this process may use (its
    affinity mask and cpuset mems); for a foreign machine they default to
    everything online there.  ``notes`` records how discovery went
    (fallbacks, warnings) in human-readable form.
    """

    nodes: Mapping[int, NumaNode]
    cpus: Mapping[int, Cpu]
    gpus: Tuple[Gpu, ...]
    allowed_cpus: frozenset[int]
    allowed_mems: frozenset[int]
    notes: Tuple[str, ...] = ()

    # ------------------------------------------------------------ queries

    @property
    def online_cpus(self) -> frozenset[int]:
        return frozenset(self.cpus)

    @property
    def cpu_nodes(self) -> Tuple[int, ...]:
        """Ids of nodes with at least one online CPU, ascending."""
        return tuple(sorted(n.id for n in self.nodes.values() if n.cpus))

    def node_of_cpu(self, cpu: int) -> Optional[int]:
        info = self.cpus.get(cpu)
        if info is not None and info.node is not None:
            return info.node
        for node in self.nodes.values():
            if cpu in node.cpus:
                return node.id
        return None

    def distance(self, a: int, b: int) -> Optional[int]:
        node = self.nodes.get(a)
        if node is None:
            return None
        value = node.distances.get(b)
        if value is None and a == b:
            return 10
        return value

    def nearest_cpu_nodes(self, node: int) -> List[Tuple[int, Optional[int]]]:
        """CPU-bearing nodes ordered by distance from ``node`` (ties by id).

        Unknown distances sort last.  ``node`` itself comes first when it has
        CPUs (distance to self is the minimum).
        """
        ranked: List[Tuple[int, Optional[int]]] = [
            (other, self.distance(node, other)) for other in self.cpu_nodes
        ]
        ranked.sort(key=lambda item: (item[1] is None, item[1] or 0, item[0] != node, item[0]))
        return ranked

    def package_cpus(self, package: int) -> frozenset[int]:
        return frozenset(c.id for c in self.cpus.values() if c.package == package)

    def replace(self, **changes: Any) -> Topology:
        """A copy with some fields changed (``allowed_cpus=...``)."""
        from dataclasses import replace

        return replace(self, **changes)

    # ------------------------------------------------------------- JSON

    def to_dict(self) -> Dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "nodes": [
                {
                    "id": n.id,
                    "cpus": format_cpulist(n.cpus),
                    "memory_total": n.memory_total,
                    "memory_free": n.memory_free,
                    "has_memory": n.has_memory,
                    "distances": {str(k): v for k, v in sorted(n.distances.items())},
                }
                for n in sorted(self.nodes.values(), key=lambda n: n.id)
            ],
            "cpus": [
                {
                    "id": c.id,
                    "node": c.node,
                    "package": c.package,
                    "core": c.core,
                    "die": c.die,
                    "siblings": format_cpulist(c.siblings),
                    "l3": format_cpulist(c.l3),
                }
                for c in sorted(self.cpus.values(), key=lambda c: c.id)
            ],
            "gpus": [
                {
                    "index": g.index,
                    "pci_bus_id": g.pci_bus_id,
                    "vendor": g.vendor,
                    "numa_node": g.numa_node,
                    "local_cpus": format_cpulist(g.local_cpus),
                    "uuid": g.uuid,
                    "model": g.model,
                    "memory_node": g.memory_node,
                    "physical_index": g.physical_index,
                    "source": g.source,
                }
                for g in self.gpus
            ],
            "allowed_cpus": format_cpulist(self.allowed_cpus),
            "allowed_mems": format_cpulist(self.allowed_mems),
            "notes": list(self.notes),
        }

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        try:
            if data.get("schema") != SCHEMA_VERSION:
                raise TopologyError(
                    f"unsupported topology schema {data.get('schema')!r} "
                    f"(this pynumabind reads schema {SCHEMA_VERSION})"
                )
            nodes = {
                int(n["id"]): NumaNode(
                    id=int(n["id"]),
                    cpus=parse_cpulist(n["cpus"]),
                    memory_total=_opt_int(n.get("memory_total")),
                    memory_free=_opt_int(n.get("memory_free")),
                    has_memory=_typed(n.get("has_memory", True), bool, "has_memory"),
                    distances={int(k): int(v) for k, v in n.get("distances", {}).items()},
                )
                for n in data["nodes"]
            }
            cpus = {
                int(c["id"]): Cpu(
                    id=int(c["id"]),
                    node=_opt_int(c.get("node")),
                    package=int(c["package"]),
                    core=int(c["core"]),
                    die=_opt_int(c.get("die")),
                    siblings=parse_cpulist(c.get("siblings", "")),
                    l3=parse_cpulist(c.get("l3", "")),
                )
                for c in data["cpus"]
            }
            gpus = tuple(
                Gpu(
                    index=int(g["index"]),
                    pci_bus_id=str(g["pci_bus_id"]),
                    vendor=str(g["vendor"]),
                    numa_node=_opt_int(g.get("numa_node")),
                    local_cpus=parse_cpulist(g.get("local_cpus", "")),
                    uuid=_opt_str(g.get("uuid"), "uuid"),
                    model=_opt_str(g.get("model"), "model"),
                    memory_node=_opt_int(g.get("memory_node")),
                    physical_index=_opt_int(g.get("physical_index")),
                    source=str(g.get("source", "snapshot")),
                )
                for g in data.get("gpus", [])
            )
            return cls(
                nodes=nodes,
                cpus=cpus,
                gpus=gpus,
                allowed_cpus=parse_cpulist(data["allowed_cpus"]),
                allowed_mems=parse_cpulist(data["allowed_mems"]),
                notes=tuple(str(n) for n in data.get("notes", [])),
            )
        except TopologyError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TopologyError(f"malformed topology snapshot: {exc!r}") from exc

    @classmethod
    def from_json(cls, text: str) -> Topology:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TopologyError(f"topology snapshot is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise TopologyError("topology snapshot must be a JSON object")
        return cls.from_dict(data)


def _opt_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


def _typed(value: Any, kind: type, key: str) -> Any:
    """``value`` when it is a ``kind``: ``bool("false")`` would read as True."""
    if not isinstance(value, kind):
        raise TopologyError(
            f"malformed topology snapshot: {key} {value!r} is not a {kind.__name__}"
        )
    return value


def _opt_str(value: Any, key: str) -> Optional[str]:
    return None if value is None else str(_typed(value, str, key))


# ------------------------------------------------------------------ plans


_Choice = TypeVar("_Choice", bound=enum.Enum)


def _parse_choice(cls: Type[_Choice], value: object, source: str) -> _Choice:
    """One of ``cls``'s values, or a ConfigError listing them all."""
    try:
        return cls(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in cls)
        raise ConfigError(f"invalid {source} {value!r}; choose one of: {choices}") from None


class CpuMode(str, enum.Enum):
    """How a rank's CPUs are chosen."""

    NODE = "node"  # all allowed CPUs of the device's NUMA node
    SOCKET = "socket"  # all allowed CPUs of the device's package (spans SNC/NPS nodes)
    EXCLUSIVE = "exclusive"  # disjoint whole-core slices among ranks sharing a node
    CORE_COMPLEX = "core-complex"  # like exclusive, split along L3 cache groups
    NONE = "none"  # leave CPU affinity alone

    @classmethod
    def parse(cls, value: str | CpuMode, source: str = "mode") -> CpuMode:
        return _parse_choice(cls, value, source)


class MemoryPolicy(str, enum.Enum):
    """Which memory policy a rank gets."""

    PREFERRED = "preferred"  # local first, spill over instead of OOM
    BIND = "bind"  # strict, like numactl --membind
    INTERLEAVE = "interleave"  # round-robin over the plan's nodes
    LOCAL = "local"  # allocate on the node of the CPU that faults
    NONE = "none"  # leave the memory policy alone

    @classmethod
    def parse(cls, value: str | MemoryPolicy, source: str = "memory policy") -> MemoryPolicy:
        return _parse_choice(cls, value, source)


@dataclass(frozen=True)
class Plan:
    """The binding one rank should get, and why.

    ``cpus`` is ``None`` when CPU affinity is to be left alone (mode
    ``none``, or a device whose node is unknown); otherwise it is a non-empty
    subset of the allowed CPUs.  ``mems`` are the memory-policy nodes (empty
    for ``local`` and ``none``).  ``node`` is the CPU node the rank was placed
    on, ``None`` when unplaced.  ``reasons`` cite each decision's source;
    ``warnings`` are the subset a launcher should surface.
    """

    rank: int
    device: Optional[Gpu]
    cpus: Optional[frozenset[int]]
    mems: frozenset[int]
    policy: MemoryPolicy
    mode: CpuMode = CpuMode.NODE
    node: Optional[int] = None
    reasons: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = field(default=())

    def to_dict(self) -> Dict[str, Any]:
        """The documented JSON form (``pynumabind plan --json``)."""
        device = None
        if self.device is not None:
            gpu = self.device
            device = {
                "index": gpu.index,
                "pci_bus_id": gpu.pci_bus_id,
                "vendor": gpu.vendor,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "numa_node": gpu.numa_node,
                "memory_node": gpu.memory_node,
            }
        return {
            "rank": self.rank,
            "device": device,
            "mode": self.mode.value,
            "node": self.node,
            "cpus": None if self.cpus is None else format_cpulist(self.cpus),
            "mems": format_cpulist(self.mems),
            "policy": self.policy.value,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
        }
