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
:meth:`Topology.to_json` wrote.  A snapshot read back is untrusted input
(``--topology`` names any file): its size is bounded
(:data:`MAX_SNAPSHOT_CHARS`), deep nesting is a :class:`TopologyError`, not
a RecursionError, every id must be a non-negative int within the kernel's
limits, every set is kept within the snapshot's own CPUs and nodes, and the
ids all its lists hold together are bounded (see :class:`_Snapshot`), and a
GPU's ``numa_node``/``memory_node`` must be one of its nodes.  Schema 2 adds
``visibility`` (:attr:`Topology.visibility`: which visible-device settings
filtered the GPU list, null for the whole machine); schema 1 is still read.
Each node's ``tier`` (:attr:`NumaNode.tier`, the kernel's memory tier) is a
field added within schema 2, as the rule at :data:`SCHEMA_VERSION` has it: a
snapshot without it (written before nodes carried a tier) reads with every
tier unknown (``None``), and one that has it still reads in a pynumabind
that ignores it.  Each node's ``access`` (:attr:`NumaNode.access`, the
firmware HMAT's figures from its nearest CPUs) is another such field, written
only where known: a snapshot without it reads with no figures.
An optional ``denied_gpus`` cpulist names the GPUs the driver listed but the
process could not open (:attr:`Topology.denied_gpus`).

A :class:`Topology` says how much of the CPU layout it holds
(:class:`Detail`): the binding path reads only what its CPU mode needs
(:func:`pynumabind.discovery.detail_for`), and such a topology refuses to
become a snapshot (:meth:`Topology.to_dict`), so it is never written or
shown as complete by mistake.  The snapshot format has no field for it:
snapshots are always complete.
"""

from __future__ import annotations

import collections.abc as _abc
import enum

from ._record import FACTORY, field, record
from ._record import replace as _replace
from .cpulist import DEFAULT_MAX_ID, format_cpulist, parse_cpulist
from .errors import ConfigError, ListParseError, TopologyError

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

__all__ = [
    "SCHEMA_VERSION",
    "Cpu",
    "CpuMode",
    "Detail",
    "Gpu",
    "MemoryAccess",
    "MemoryPolicy",
    "NumaNode",
    "Plan",
    "Topology",
]

#: The version of every JSON document pynumabind writes: the snapshot, the
#: ``--json`` output of show, plan, check and exec, and ``advise --json``
#: (``Advice.to_dict()``).  One number for the package, so a reader never
#: wonders which counter a document follows.  It goes up by one when any of
#: those documents changes incompatibly (a field removed or renamed, or its
#: meaning changed); a new field does not change it.  2: "device"/"devices"
#: became "gpu"/"gpus" in plans and check workers, the snapshot gained
#: ``visibility``, and advise (1 until then) joined the one number.  Since then
#: ``advise --json`` and the advice record count on their own (3: weighted
#: interleave weights; :data:`pynumabind.records._json.RECORD_SCHEMA`).
SCHEMA_VERSION = 2

#: How a plan's warning starts when ``fallback="nearest"`` placed the rank away
#: from its GPU's node: the planner writes it, the binder logs such warnings.
#: A value here, so that the bind path needs no planner module to recognise it.
FALLBACK_WARNING = "fallback nearest: "
#: Snapshot schemas this pynumabind reads.  1: no ``visibility`` field (read as
#: ``None``; such a file may list only the GPUs visible when it was taken, which
#: is why visible-device entries are matched by physical index: see ``discovery._visible``).
READ_SCHEMAS = (1, 2)

#: The variables that decide which GPUs a process sees, and in what order.
VISIBILITY_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
    "ONEAPI_DEVICE_SELECTOR",
)


class Detail(enum.IntEnum):
    """How much of the CPU layout a :class:`Topology` holds; each level holds the ones below.

    Every level holds the nodes (CPUs, distances, which have memory), the
    online CPUs with their node, the GPUs and the allowed sets.  Below
    ``FULL``, a :class:`Cpu` field the level does not read holds the value
    sysfs gives a CPU without ``topology/`` (package 0, its own core, no
    siblings, no L3, no die) and nodes have no memory sizes, so use a
    topology only for what its level covers (:func:`discovery.detail_for
    <pynumabind.discovery.detail_for>` maps each CPU mode to the level it
    needs).
    """

    NODES = 1  # enough for modes node and none
    PACKAGES = 2  # + each CPU's package: mode socket
    CORES = 3  # + SMT siblings, core ids, CPPC highest_perf: mode exclusive, node's priority_cores
    CACHES = 4  # + L3 groups: mode core-complex
    FULL = 5  # + dies, node memory sizes, memory tiers and HMAT figures: all show prints


@record(frozen=True)
class MemoryAccess:
    """What the firmware's HMAT says of a memory node, from its nearest CPUs.

    The kernel's access class 1, the one seen from CPUs: the CPU nodes
    nearest the memory (``initiators``), and the bandwidth (MB/s) and latency
    (ns) they see, each ``None`` where the kernel shows none.  They
    are the firmware's claims, not measurements (``pynumabind advise``
    measures; the kernel ranks memory tiers from them).
    """

    initiators: frozenset[int]
    read_bandwidth_mbs: Optional[int] = None
    write_bandwidth_mbs: Optional[int] = None
    read_latency_ns: Optional[int] = None
    write_latency_ns: Optional[int] = None

    def __init__(
        self,
        initiators: frozenset[int],
        read_bandwidth_mbs: Optional[int] = None,
        write_bandwidth_mbs: Optional[int] = None,
        read_latency_ns: Optional[int] = None,
        write_latency_ns: Optional[int] = None,
    ) -> None:
        self.__dict__.update(
            initiators=initiators,
            read_bandwidth_mbs=read_bandwidth_mbs,
            write_bandwidth_mbs=write_bandwidth_mbs,
            read_latency_ns=read_latency_ns,
            write_latency_ns=write_latency_ns,
        )


#: :class:`MemoryAccess`'s figures, by their snapshot names.
ACCESS_FIGURES = (
    "read_bandwidth_mbs",
    "write_bandwidth_mbs",
    "read_latency_ns",
    "write_latency_ns",
)


@record(frozen=True)
class NumaNode:
    """One NUMA node.

    ``cpus`` are the node's *online* CPUs.  A node with no CPUs is
    memory-only (a Grace GPU-memory node, CXL or HBM); a node without memory
    is a CPU-only node.  ``distances`` is the node's SLIT row, keyed by the
    other node's id.

    ``tier`` is the number ``N`` of the kernel's ``memory_tierN`` holding the
    node (Linux 6.1+, ``devices/virtual/memory_tiering``).  What a user can
    rely on: on one machine a lower number is faster memory by the kernel's
    abstract distance (DRAM is tier 4; CXL, or memory that firmware HMAT
    calls slower, is higher), and nodes with the same number are one tier.
    The numbers themselves are the kernel's and may differ across kernel
    releases for the same hardware; :meth:`Topology.tier_rank` gives the
    order (0 = fastest).  ``None`` when not known: a node without memory, a
    kernel without memory tiers, a topology read below ``Detail.FULL``
    (a bind does not read tiers), or a snapshot written before nodes carried
    a tier.

    ``access`` is what the firmware's HMAT says of the node's memory from its
    nearest CPUs (:class:`MemoryAccess`); ``None`` for a node without memory,
    where the firmware has no HMAT (most machines), below ``Detail.FULL``,
    or in a snapshot written before nodes carried it.
    """

    id: int
    cpus: frozenset[int]
    memory_total: Optional[int] = None  # bytes
    memory_free: Optional[int] = None  # bytes
    has_memory: bool = True
    distances: Mapping[int, int] = field(default_factory=dict, hash=False)
    tier: Optional[int] = None
    access: Optional[MemoryAccess] = None

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        id: int,
        cpus: frozenset[int],
        memory_total: Optional[int] = None,
        memory_free: Optional[int] = None,
        has_memory: bool = True,
        distances: Mapping[int, int] = FACTORY,
        tier: Optional[int] = None,
        access: Optional[MemoryAccess] = None,
    ) -> None:
        self.__dict__.update(
            id=id,
            cpus=cpus,
            memory_total=memory_total,
            memory_free=memory_free,
            has_memory=has_memory,
            distances={} if distances is FACTORY else distances,
            tier=tier,
            access=access,
        )

    @property
    def has_cpus(self) -> bool:
        return bool(self.cpus)

    @property
    def memory_only(self) -> bool:
        return self.has_memory and not self.cpus


@record(frozen=True)
class Cpu:
    """One online logical CPU and where it sits.

    ``siblings`` are the SMT threads of its physical core (itself included);
    ``l3`` the CPUs sharing its last-level (L3) cache, the unit AMD calls a
    CCX/CCD; empty when unknown.  ``highest_perf`` is the core's ACPI CPPC
    highest performance (``acpi_cppc/highest_perf``), ``None`` when the
    machine does not say; where a node's cores differ in it (Intel priority
    cores, PCT; hybrid parts) the exclusive modes give the higher ones out
    first.
    """

    id: int
    node: Optional[int]
    package: int
    core: int
    die: Optional[int] = None
    siblings: frozenset[int] = frozenset()
    l3: frozenset[int] = frozenset()
    highest_perf: Optional[int] = None

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        id: int,
        node: Optional[int],
        package: int,
        core: int,
        die: Optional[int] = None,
        siblings: frozenset[int] = frozenset(),
        l3: frozenset[int] = frozenset(),
        highest_perf: Optional[int] = None,
    ) -> None:
        self.__dict__.update(
            id=id,
            node=node,
            package=package,
            core=core,
            die=die,
            siblings=siblings,
            l3=l3,
            highest_perf=highest_perf,
        )

    @property
    def core_cpus(self) -> frozenset[int]:
        """The CPUs of this CPU's physical core (at least itself)."""
        return self.siblings or frozenset({self.id})


@record(frozen=True)
class Gpu:
    """One accelerator, as this process sees it.

    ``index`` is the ordinal this process uses (after ``CUDA_VISIBLE_DEVICES``
    / ``ROCR_VISIBLE_DEVICES`` and the device order), ``physical_index`` the
    driver's (NVML) index.  The locality fields are facts as the sources
    reported them (:mod:`pynumabind.discovery` says exactly which source, in
    which order); deciding a rank's CPUs from them is the planner's job.
    ``numa_node`` is the node a source names, ``None`` when unknown (sysfs
    ``numa_node`` of -1 and no NVML answer); it is a CPU-less node only when
    no source names one with CPUs.  ``memory_node`` is a CPU-less memory node
    a source names for the GPU (its own HBM on GH200/GB200).  ``source``
    names where ``numa_node`` came from (``"nvml"``, ``"sysfs"``), so plans
    can cite it.
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

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        index: int,
        pci_bus_id: str,
        vendor: str,
        numa_node: Optional[int],
        local_cpus: frozenset[int] = frozenset(),
        uuid: Optional[str] = None,
        model: Optional[str] = None,
        memory_node: Optional[int] = None,
        physical_index: Optional[int] = None,
        source: str = "sysfs",
    ) -> None:
        self.__dict__.update(
            index=index,
            pci_bus_id=pci_bus_id,
            vendor=vendor,
            numa_node=numa_node,
            local_cpus=local_cpus,
            uuid=uuid,
            model=model,
            memory_node=memory_node,
            physical_index=physical_index,
            source=source,
        )


@record(frozen=True)
class Topology:
    """A machine and the process's place in it.

    ``allowed_cpus``/``allowed_mems`` are what this process may use (its
    affinity mask and cpuset mems); for a foreign machine they default to
    everything online there.  ``notes`` records how discovery went
    (fallbacks, warnings) in human-readable form.  ``detail`` says how much
    of the CPU layout was read (:class:`Detail`); only a ``FULL`` one can be
    snapshotted.

    ``visibility`` is ``None`` when ``gpus`` lists every GPU of the machine
    (what ``pynumabind snapshot`` records).  Once visible-device variables
    have hidden some GPUs, it holds the (variable, value) pairs of
    :data:`VISIBILITY_VARIABLES` that were set then: ``gpus`` is a filtered,
    renumbered list, and visibility is never applied to it a second time
    (:func:`pynumabind.apply_visibility` accepts it only under the very
    same settings).

    ``denied_gpus`` holds the driver (physical) indices of GPUs the driver
    lists but this process may not open: NVML's NO_PERMISSION under a device
    cgroup (Slurm's ``ConstrainDevices``).  They are not in ``gpus``, and
    CUDA does not count them: an index in ``CUDA_VISIBLE_DEVICES`` counts the
    GPUs this process can open, so with ``denied_gpus`` known, index entries
    are positions among ``gpus`` (see :mod:`pynumabind.discovery._visible`).
    """

    nodes: Mapping[int, NumaNode]
    cpus: Mapping[int, Cpu]
    gpus: Tuple[Gpu, ...]
    allowed_cpus: frozenset[int]
    allowed_mems: frozenset[int]
    notes: Tuple[str, ...] = ()
    detail: Detail = Detail.FULL
    visibility: Optional[Tuple[Tuple[str, str], ...]] = None
    denied_gpus: frozenset[int] = frozenset()

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        nodes: Mapping[int, NumaNode],
        cpus: Mapping[int, Cpu],
        gpus: Tuple[Gpu, ...],
        allowed_cpus: frozenset[int],
        allowed_mems: frozenset[int],
        notes: Tuple[str, ...] = (),
        detail: Detail = Detail.FULL,
        visibility: Optional[Tuple[Tuple[str, str], ...]] = None,
        denied_gpus: frozenset[int] = frozenset(),
    ) -> None:
        self.__dict__.update(
            nodes=nodes,
            cpus=cpus,
            gpus=gpus,
            allowed_cpus=allowed_cpus,
            allowed_mems=allowed_mems,
            notes=notes,
            detail=detail,
            visibility=visibility,
            denied_gpus=denied_gpus,
        )

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

    def tier_rank(self, node: int) -> Optional[int]:
        """The rank of ``node``'s memory tier among this machine's tiers: 0 is the fastest.

        Ranks count the distinct ``tier`` numbers of the topology's nodes
        (:class:`NumaNode`), lowest first; ``None`` when the node's tier is not
        known (see :class:`NumaNode`).
        """
        found = self.nodes.get(node)
        if found is None or found.tier is None:
            return None
        return sorted({n.tier for n in self.nodes.values() if n.tier is not None}).index(found.tier)

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

    def hidden_gpus_warning(self) -> Optional[str]:
        """The warning when visible-device variables hide every GPU of the machine, else None."""
        if self.gpus or not self.visibility:
            return None
        settings = ", ".join(f"{name}={value!r}" for name, value in self.visibility)
        return (
            f"{settings} selects none of this machine's GPUs: ranks are planned as on a "
            "machine without GPUs"
        )

    def package_cpus(self, package: int) -> frozenset[int]:
        return frozenset(c.id for c in self.cpus.values() if c.package == package)

    def replace(self, **changes: Any) -> Topology:
        """A copy with some fields changed (``allowed_cpus=...``)."""
        return _replace(self, **changes)

    # ------------------------------------------------------------- JSON

    def to_dict(self) -> Dict[str, Any]:
        """The snapshot form; a topology read with less than full detail refuses."""
        if self.detail is not Detail.FULL:
            raise TopologyError(
                f"this topology was read with detail {self.detail.name} (what a bind needs), "
                "not in full: detect it with detail=Detail.FULL to snapshot or show it"
            )
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
                    "tier": n.tier,
                    **({} if n.access is None else {"access": _access_dict(n.access)}),
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
                    **({} if c.highest_perf is None else {"highest_perf": c.highest_perf}),
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
            "visibility": None if self.visibility is None else dict(self.visibility),
            **({"denied_gpus": format_cpulist(self.denied_gpus)} if self.denied_gpus else {}),
            "notes": list(self.notes),
        }

    def to_json(self, indent: Optional[int] = 2) -> str:
        import json  # here, not at the top: the binding path never needs it

        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        """The topology a snapshot dict describes; every field is checked (see the module)."""
        if not isinstance(data, _abc.Mapping):
            raise TopologyError("topology snapshot must be a JSON object")
        schema = data.get("schema")
        if isinstance(schema, bool) or schema not in READ_SCHEMAS:
            raise TopologyError(
                f"unsupported topology schema {schema!r} "
                f"(this pynumabind reads schemas {', '.join(map(str, READ_SCHEMAS))})"
            )
        try:
            return _Snapshot(data).topology()
        except TopologyError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TopologyError(f"malformed topology snapshot: {exc!r}") from exc

    @classmethod
    def from_json(cls, text: str) -> Topology:
        if len(text) > MAX_SNAPSHOT_CHARS:
            raise TopologyError(
                f"topology snapshot is {len(text)} characters; at most {MAX_SNAPSHOT_CHARS} "
                "are read"
            )
        import json

        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TopologyError(f"topology snapshot is not valid JSON: {exc}") from exc
        except RecursionError:
            raise TopologyError("topology snapshot is nested too deeply to be one") from None
        if not isinstance(data, dict):
            raise TopologyError("topology snapshot must be a JSON object")
        return cls.from_dict(data)


# --------------------------------------------------------------- snapshots

#: The most characters a snapshot may have: a 8,192-CPU machine writes about 1 MB.
MAX_SNAPSHOT_CHARS = 16 << 20
#: Kernel limits: CPU ids below CONFIG_NR_CPUS (cpulist's default bound), node
#: ids below MAX_NUMNODES (NODES_SHIFT is at most 10), other ids C ints.
MAX_CPU_ID = DEFAULT_MAX_ID
MAX_NODE_ID = (1 << 10) - 1
MAX_INT = (1 << 31) - 1
MAX_BYTES = (1 << 64) - 1
#: The largest driver GPU index a snapshot's ``denied_gpus`` may name.
MAX_GPU_INDEX = 4095


def _int(value: Any, what: str, limit: int) -> int:
    """``value`` when it is an int from 0 to ``limit``: no bool, float or string."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise TopologyError(
            f"malformed topology snapshot: {what} {value!r} is not an integer from 0 to {limit}"
        )
    return value


def _opt(value: Any, what: str, limit: int) -> Optional[int]:
    return None if value is None else _int(value, what, limit)


def _typed(value: Any, kind: type, key: str) -> Any:
    """``value`` when it is a ``kind``: ``bool("false")`` would read as True."""
    if not isinstance(value, kind):
        raise TopologyError(
            f"malformed topology snapshot: {key} {value!r} is not a {kind.__name__}"
        )
    return value


def _opt_str(value: Any, key: str) -> Optional[str]:
    return None if value is None else str(_typed(value, str, key))


def _access_dict(access: MemoryAccess) -> Dict[str, Any]:
    """A node's HMAT figures in the snapshot: its initiators as a node list."""
    out: Dict[str, Any] = {"initiators": format_cpulist(access.initiators)}
    out.update((name, getattr(access, name)) for name in ACCESS_FIGURES)
    return out


class _Snapshot:
    """Reads one snapshot dict as untrusted input.

    Rules: every id is a non-negative int within the kernel's limits (no
    bool, no float); every set of CPUs or nodes is intersected with the CPUs
    and nodes the snapshot itself lists; an id list naming ids above the
    largest the snapshot lists is an error, so no list expands past the
    snapshot's own size; identical lists are parsed once and shared; and the
    ids kept across all distinct lists are bounded by :attr:`budget`, so a
    few kilobytes cannot claim hundreds of megabytes.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        entries = (_typed(data["nodes"], list, "nodes"), _typed(data["cpus"], list, "cpus"))
        self.node_ids = self._ids(entries[0], "node id", MAX_NODE_ID)
        self.cpu_ids = self._ids(entries[1], "CPU id", MAX_CPU_ID)
        self.budget = 64 * (len(self.cpu_ids) + len(self.node_ids)) + 65536
        self.parsed: Dict[Tuple[str, str], frozenset[int]] = {}

    @staticmethod
    def _ids(entries: List[Any], what: str, limit: int) -> frozenset[int]:
        ids = [_int(_typed(e, dict, what)["id"], what, limit) for e in entries]
        if len(set(ids)) != len(ids):
            raise TopologyError(f"malformed topology snapshot: a {what} is listed twice")
        return frozenset(ids)

    def ids(self, text: Any, what: str, kind: str = "cpu") -> frozenset[int]:
        """An id list of the snapshot, within its own CPUs (or nodes)."""
        key = (kind, _typed(text, str, what))
        cached = self.parsed.get(key)
        if cached is not None:
            return cached
        known = self.cpu_ids if kind == "cpu" else self.node_ids
        try:
            parsed = parse_cpulist(text, max_id=max(known, default=0))
        except ListParseError as exc:
            raise TopologyError(f"malformed topology snapshot: {what}: {exc}") from exc
        kept = parsed & known
        self.budget -= len(kept)
        if self.budget < 0:
            raise TopologyError(
                "malformed topology snapshot: its id lists hold far more ids than its "
                f"{len(self.cpu_ids)} CPUs and {len(self.node_ids)} nodes can"
            )
        self.parsed[key] = kept
        return kept

    def node(self, entry: Mapping[str, Any]) -> NumaNode:
        distances = _typed(entry.get("distances", {}), dict, "distances")
        row = {}
        for key, value in distances.items():
            other = int(key) if key.isascii() and key.isdigit() and len(key) < 6 else -1
            if other in self.node_ids:
                row[other] = _int(value, "distance", MAX_INT)
        return NumaNode(
            id=entry["id"],
            cpus=self.ids(entry["cpus"], "node cpus"),
            memory_total=_opt(entry.get("memory_total"), "memory_total", MAX_BYTES),
            memory_free=_opt(entry.get("memory_free"), "memory_free", MAX_BYTES),
            has_memory=_typed(entry.get("has_memory", True), bool, "has_memory"),
            distances=row,
            tier=_opt(entry.get("tier"), "memory tier", MAX_INT),  # absent: written before tiers
            access=self.access(entry.get("access")),  # absent: unknown, or written before
        )

    def access(self, entry: Any) -> Optional[MemoryAccess]:
        if entry is None:
            return None
        entry = _typed(entry, dict, "access")
        figures = {name: _opt(entry.get(name), name, MAX_INT) for name in ACCESS_FIGURES}
        initiators = self.ids(entry.get("initiators", ""), "access initiators", kind="node")
        return MemoryAccess(initiators=initiators, **figures)

    def cpu(self, entry: Mapping[str, Any]) -> Cpu:
        return Cpu(
            id=entry["id"],
            node=_opt(entry.get("node"), "CPU node", MAX_NODE_ID),
            package=_int(entry["package"], "package", MAX_INT),
            core=_int(entry["core"], "core", MAX_INT),
            die=_opt(entry.get("die"), "die", MAX_INT),
            siblings=self.ids(entry.get("siblings", ""), "siblings"),
            l3=self.ids(entry.get("l3", ""), "l3"),
            highest_perf=_opt(entry.get("highest_perf"), "highest_perf", MAX_INT),
        )

    def gpu(self, entry: Mapping[str, Any]) -> Gpu:
        return Gpu(
            index=_int(entry["index"], "GPU index", MAX_CPU_ID),
            pci_bus_id=_typed(entry["pci_bus_id"], str, "pci_bus_id"),
            vendor=_typed(entry["vendor"], str, "vendor"),
            numa_node=_opt(entry.get("numa_node"), "numa_node", MAX_NODE_ID),
            local_cpus=self.ids(entry.get("local_cpus", ""), "local_cpus"),
            uuid=_opt_str(entry.get("uuid"), "uuid"),
            model=_opt_str(entry.get("model"), "model"),
            memory_node=_opt(entry.get("memory_node"), "memory_node", MAX_NODE_ID),
            physical_index=_opt(entry.get("physical_index"), "physical_index", MAX_CPU_ID),
            source=_typed(entry.get("source", "snapshot"), str, "source"),
        )

    def topology(self) -> Topology:
        data = self.data
        nodes = {n.id: n for n in map(self.node, data["nodes"])}
        cpus = {c.id: c for c in map(self.cpu, data["cpus"])}
        gpus = tuple(self.gpu(_typed(g, dict, "gpu")) for g in data.get("gpus", []))
        notes = _typed(data.get("notes", []), list, "notes")
        node_ids = self.node_ids
        for g in gpus:
            for what, node in (("numa_node", g.numa_node), ("memory_node", g.memory_node)):
                if node is not None and node not in node_ids:
                    raise TopologyError(
                        f"malformed topology snapshot: GPU {g.index} ({g.pci_bus_id}) has "
                        f"{what} {node}, which is not one of its nodes ({format_cpulist(node_ids)})"
                    )
        return Topology(
            nodes=nodes,
            cpus=cpus,
            gpus=gpus,
            allowed_cpus=self.ids(data["allowed_cpus"], "allowed_cpus"),
            allowed_mems=self.ids(data["allowed_mems"], "allowed_mems", kind="node"),
            notes=tuple(_typed(n, str, "note") for n in notes),
            visibility=self.visibility(data.get("visibility")),
            denied_gpus=self.denied(data.get("denied_gpus", ""), gpus),
        )

    @staticmethod
    def denied(value: Any, gpus: Tuple[Gpu, ...]) -> frozenset[int]:
        """The ``denied_gpus`` field: physical indices of GPUs not in ``gpus``."""
        try:
            denied = parse_cpulist(_typed(value, str, "denied_gpus"), max_id=MAX_GPU_INDEX)
        except ListParseError as exc:
            raise TopologyError(f"malformed topology snapshot: denied_gpus: {exc}") from exc
        listed = denied & {g.physical_index for g in gpus}
        if listed:
            raise TopologyError(
                f"malformed topology snapshot: denied_gpus names GPU {min(listed)}, "
                "which its gpus list as one this process can open"
            )
        return denied

    @staticmethod
    def visibility(value: Any) -> Optional[Tuple[Tuple[str, str], ...]]:
        """The ``visibility`` field: null, or an object of visible-device variables."""
        if value is None:
            return None
        pairs = _typed(value, dict, "visibility").items()
        for name, text in pairs:
            if name not in VISIBILITY_VARIABLES:
                raise TopologyError(
                    f"malformed topology snapshot: visibility names {name!r}, not one of "
                    f"{', '.join(VISIBILITY_VARIABLES)}"
                )
            _typed(text, str, f"visibility {name}")
        return tuple(sorted(pairs, key=lambda p: VISIBILITY_VARIABLES.index(p[0])))


# ------------------------------------------------------------------ plans


if TYPE_CHECKING:  # pragma: no cover
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
    # Follow the advice record (pynumabind advise --save): resolved into one of
    # the modes above, and a memory policy, before the planner runs
    # (pynumabind.records.store.resolve_advised); the planner itself refuses it.
    ADVISED = "advised"

    @classmethod
    def parse(cls, value: str | CpuMode, source: str = "mode") -> CpuMode:
        return _parse_choice(cls, value, source)


class MemoryPolicy(str, enum.Enum):
    """Which memory policy a rank gets.

    What each one does -- the kernel mode it sets, the fallback on a kernel
    without that mode, whether it takes nodes and can place a buffer, how
    ``verify()`` judges it -- is its row in the policy table,
    ``pynumabind._mempolicy.POLICIES``.
    """

    PREFERRED = "preferred"  # local first, spill over instead of OOM
    BIND = "bind"  # strict, like numactl --membind
    INTERLEAVE = "interleave"  # round-robin over the plan's nodes
    # In proportion to a weight per node: the kernel's system-wide weights for a
    # process or thread, exactly the requested ones for a buffer (Linux 6.9+;
    # plain interleave before); see pynumabind._weights.
    WEIGHTED_INTERLEAVE = "weighted-interleave"
    LOCAL = "local"  # allocate on the node of the CPU that faults
    NONE = "none"  # leave the memory policy alone

    @classmethod
    def parse(cls, value: str | MemoryPolicy, source: str = "memory policy") -> MemoryPolicy:
        return _parse_choice(cls, value, source)


@record(frozen=True)
class Plan:
    """The binding one rank should get, and why.

    ``cpus`` is ``None`` when CPU affinity is to be left alone (mode
    ``none``, or a device whose node is unknown); otherwise it is a non-empty
    subset of the allowed CPUs.  ``mems`` are the memory-policy nodes (empty
    for ``local`` and ``none``).  ``node`` is the CPU node the rank was placed
    on, ``None`` when unplaced.  ``reasons`` cite each decision's source;
    ``warnings`` are the subset a launcher should surface.  ``rank`` is the
    local rank, ``None`` for a union plan (one process driving several GPUs,
    or bound to the GPUs it sees), whose visible GPU indices are ``gpus``
    (empty for a one-rank plan).  ``gpu_info`` describes the rank's GPU (for
    a union, the GPU when there is only one) and ``gpu`` is its index: a
    ``gpu`` is always an index, as in :class:`~pynumabind.Options` and
    :func:`~pynumabind.bind_memory`.  ``weights`` are the requested
    interleave weights (node -> weight) of a ``weighted-interleave`` plan,
    its ``mems`` being their nodes; ``None`` when none were given (a
    process's weighted interleave then follows the kernel's system-wide
    weights) and for every other policy.
    """

    rank: Optional[int]
    gpu_info: Optional[Gpu]
    cpus: Optional[frozenset[int]]
    mems: frozenset[int]
    policy: MemoryPolicy
    mode: CpuMode = CpuMode.NODE
    node: Optional[int] = None
    reasons: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = field(default=())
    gpus: Tuple[int, ...] = ()
    weights: Optional[Mapping[int, int]] = field(default=None, hash=False)

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        rank: Optional[int],
        gpu_info: Optional[Gpu],
        cpus: Optional[frozenset[int]],
        mems: frozenset[int],
        policy: MemoryPolicy,
        mode: CpuMode = CpuMode.NODE,
        node: Optional[int] = None,
        reasons: Tuple[str, ...] = (),
        warnings: Tuple[str, ...] = (),
        gpus: Tuple[int, ...] = (),
        weights: Optional[Mapping[int, int]] = None,
    ) -> None:
        self.__dict__.update(
            rank=rank,
            gpu_info=gpu_info,
            cpus=cpus,
            mems=mems,
            policy=policy,
            mode=mode,
            node=node,
            reasons=reasons,
            warnings=warnings,
            gpus=gpus,
            weights=weights,
        )

    @property
    def gpu(self) -> Optional[int]:
        """The index of the rank's GPU (``gpu_info.index``), or ``None``."""
        return None if self.gpu_info is None else self.gpu_info.index

    def to_dict(self) -> Dict[str, Any]:
        """The documented JSON form (``pynumabind plan --json``)."""
        device = None
        if self.gpu_info is not None:
            gpu = self.gpu_info
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
            "gpu": self.gpu,
            "gpu_info": device,
            "mode": self.mode.value,
            "node": self.node,
            "cpus": None if self.cpus is None else format_cpulist(self.cpus),
            "mems": format_cpulist(self.mems),
            "policy": self.policy.value,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "gpus": list(self.gpus),
            "weights": None
            if self.weights is None
            else {str(n): w for n, w in sorted(self.weights.items())},
        }
