"""The pure planner: a :class:`Topology` and a rank in, a :class:`Plan` out.

Nothing here does I/O, reads the environment or logs: every decision is
returned in the plan's ``reasons`` (and the ones a launcher should surface in
``warnings``), so the planner can be run on recorded machines and on
thousands of generated ones.

How a rank is placed
--------------------
1. Its device: ``device=`` if given, else GPU ``rank % len(topology.gpus)``
   (more ranks than GPUs wrap around, with a warning).  Without GPUs, ranks
   are spread evenly, in contiguous blocks, over the NUMA nodes that have
   allowed CPUs; memory-only nodes never get CPU ranks.
2. Its CPU node(s): the GPU's ``numa_node`` when that node has CPUs; when it
   is a CPU-less memory node (Grace/GB200 HBM as NVML reports it) the nodes of
   the GPU's ``local_cpus`` or, without those, the nearest CPU node by SLIT
   distance (ties: lowest id); when the node is unknown, the nodes of
   ``local_cpus``; with neither, the rank is left unbound (``cpus=None``).
3. Its CPUs, by mode: ``node`` (all allowed CPUs of the node, or of the
   GPU's affinity when the rank was placed by it), ``socket``
   (all allowed CPUs of the node's package), ``exclusive`` (disjoint,
   contiguous whole-core slices among the ranks on the same node, balanced to
   within one core; a GPU affinity spanning nodes is narrowed to the node
   holding most of it), ``core-complex`` (the same, but whole L3 groups per
   rank when there are enough, else exclusive within groups) or ``none``.
   Plans never leave the allowed CPUs; an empty intersection is a
   :class:`PlanError`, never a silently unbound worker.
4. Its memory nodes: the nodes of its CPUs (a ``nodes`` override names them
   directly); a node without memory (or whose
   memory is outside the allowed mems) is replaced by the nearest node with
   allowed memory.  ``gpu_memory=True`` adds the GPU's own memory node.
   ``interleave`` uses ``interleave_nodes`` or, by default, these same nodes.

Overrides
---------
``nodes`` and ``cpus`` give every local rank its node(s) or CPUs and win over
detection; they are validated against the machine and the allowed sets.

* ``nodes``: a string, ranks separated by ``;`` when the string contains one
  (``"0-1;2-3"``: each item a node list), else by ``,`` (``"0,0,1,1"``: the
  vLLM form, one node per rank); or a sequence whose items are an ``int``, a
  node-list string or a set of ints.
* ``cpus``: a string with ranks separated by ``;`` (``"0-7;8-15"``: each item
  a cpulist, ``+`` and ``!`` and ``all`` as in numactl); or a sequence whose
  items are cpulist strings or sets of ints.  ``|`` is rejected, so a string
  never has two readings.

With ``nprocs=None`` an override's length is the number of local ranks;
otherwise it must match ``nprocs``.

Consistency
-----------
:func:`plan` computes every rank's placement and returns its own, so rank
``r``'s plan is the same whether it comes from ``plan(r)`` or from
``plan_all()[r]``.  Errors are per rank where they can be: ``plan(r)`` fails
only for its own rank's problems (another rank's node may lie outside this
process's cpuset).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import (
    AbstractSet,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from .cpulist import parse_cpulist, parse_nodelist
from .errors import ConfigError, ListParseError, PlanError, PynumabindError, format_ids
from .model import CpuMode, Gpu, MemoryPolicy, Plan, Topology

__all__ = [
    "MAX_NPROCS",
    "RANK_SEPARATOR",
    "CpusOverride",
    "NodesOverride",
    "parse_cpus_override",
    "parse_nodes_override",
    "plan",
    "plan_all",
]

RANK_SEPARATOR = ";"
MAX_NPROCS = 65536  # local ranks; bounds the work when nprocs comes from the environment

NodesOverride = Union[str, Sequence[Union[int, str, AbstractSet[int]]]]
CpusOverride = Union[str, Sequence[Union[str, AbstractSet[int]]]]

_EXCLUSIVE_MODES = (CpuMode.EXCLUSIVE, CpuMode.CORE_COMPLEX)
_NEEDS_MEMS = (MemoryPolicy.PREFERRED, MemoryPolicy.BIND, MemoryPolicy.INTERLEAVE)


# ------------------------------------------------------------------ overrides


def _split_ranks(text: str, what: str, separator: str) -> List[Tuple[str, int]]:
    """Split an override string into (item, position) pairs."""
    if "|" in text:
        raise ConfigError(
            f"{what} override {text!r}: separate ranks with {RANK_SEPARATOR!r}, not '|'"
        )
    items: List[Tuple[str, int]] = []
    position = 0
    for raw in text.split(separator):
        stripped = raw.strip()
        if not stripped:
            raise ConfigError(
                f"{what} override {text!r}: empty entry for rank {len(items)} "
                f"at position {position}"
            )
        items.append((stripped, position + len(raw) - len(raw.lstrip())))
        position += len(raw) + 1
    return items


def _int_set(value: Iterable[object], what: str, index: int) -> frozenset[int]:
    out = set()
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise ConfigError(f"{what} override entry {index}: {item!r} is not a non-negative id")
        out.add(item)
    return frozenset(out)


def _nonempty_entries(
    entries: List[frozenset[int]], what: str, noun: str
) -> Tuple[frozenset[int], ...]:
    """An override must name at least one rank, and each rank at least one id."""
    for index, entry in enumerate(entries):
        if not entry:
            raise ConfigError(f"{what} override entry {index} names no {noun}")
    if not entries:
        raise ConfigError(f"{what} override is empty")
    return tuple(entries)


def parse_nodes_override(
    value: NodesOverride, *, universe: Optional[AbstractSet[int]] = None
) -> Tuple[frozenset[int], ...]:
    """Per-rank node sets from a ``nodes`` override (see the module docstring).

    ``universe`` (the machine's node ids) enables ``all`` and ``!`` in items.
    Only the syntax is checked here; :func:`plan` checks the nodes exist.
    """
    entries: List[frozenset[int]] = []
    if isinstance(value, str):
        separator = RANK_SEPARATOR if RANK_SEPARATOR in value else ","
        for index, (text, position) in enumerate(_split_ranks(value, "nodes", separator)):
            try:
                entries.append(parse_nodelist(text, universe=universe))
            except ListParseError as exc:
                raise ConfigError(
                    f"nodes override {value!r}: entry for rank {index} at position "
                    f"{position}: {exc}"
                ) from exc
    elif isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        raise ConfigError(
            f"nodes override must be a string or a sequence, not {type(value).__name__}"
        )
    else:
        for index, item in enumerate(value):
            if isinstance(item, int) and not isinstance(item, bool):
                entries.append(_int_set([item], "nodes", index))
            elif isinstance(item, str):
                try:
                    entries.append(parse_nodelist(item, universe=universe))
                except ListParseError as exc:
                    raise ConfigError(f"nodes override entry {index}: {exc}") from exc
            elif isinstance(item, AbstractSet):
                entries.append(_int_set(item, "nodes", index))
            else:
                raise ConfigError(
                    f"nodes override entry {index}: {item!r} is not a node id, "
                    "node list or set of node ids"
                )
    return _nonempty_entries(entries, "nodes", "node")


def parse_cpus_override(
    value: CpusOverride,
    *,
    universe: Optional[AbstractSet[int]] = None,
    allowed: Optional[AbstractSet[int]] = None,
) -> Tuple[frozenset[int], ...]:
    """Per-rank CPU sets from a ``cpus`` override (see the module docstring).

    ``universe`` (online CPUs) enables ``all``/``!``; ``allowed`` enables
    ``+`` (indices into the allowed CPUs), as in numactl.
    """
    entries: List[frozenset[int]] = []
    if isinstance(value, str):
        for index, (text, position) in enumerate(_split_ranks(value, "cpus", RANK_SEPARATOR)):
            try:
                entries.append(parse_cpulist(text, universe=universe, allowed=allowed))
            except ListParseError as exc:
                raise ConfigError(
                    f"cpus override {value!r}: entry for rank {index} at position {position}: {exc}"
                ) from exc
    elif isinstance(value, (bytes, bytearray)) or not isinstance(value, Sequence):
        raise ConfigError(
            f"cpus override must be a string or a sequence, not {type(value).__name__}"
        )
    else:
        for index, item in enumerate(value):
            if isinstance(item, str):
                try:
                    entries.append(parse_cpulist(item, universe=universe, allowed=allowed))
                except ListParseError as exc:
                    raise ConfigError(f"cpus override entry {index}: {exc}") from exc
            elif isinstance(item, AbstractSet):
                entries.append(_int_set(item, "cpus", index))
            else:
                raise ConfigError(
                    f"cpus override entry {index}: {item!r} is not a cpulist string "
                    "or a set of CPU ids"
                )
    return _nonempty_entries(entries, "cpus", "CPU")


# ------------------------------------------------------------ the request


@dataclass(frozen=True)
class _Request:
    """Validated inputs shared by all ranks."""

    nprocs: int
    mode: CpuMode
    policy: MemoryPolicy
    devices: Tuple[Optional[int], ...]  # per-rank index into topology.gpus
    explicit_device: Tuple[bool, ...]
    node_sets: Optional[Tuple[frozenset[int], ...]]
    cpu_sets: Optional[Tuple[frozenset[int], ...]]
    gpu_memory: bool
    interleave_nodes: Optional[frozenset[int]]
    nprocs_reason: str


@dataclass
class _Rank:
    """One rank while it is being planned."""

    rank: int
    device: Optional[Gpu] = None
    nodes: frozenset[int] = frozenset()  # CPU placement nodes; empty = unknown
    primary: Optional[int] = None
    derived_multi: bool = False  # nodes came from a GPU affinity spanning nodes
    affinity: Optional[frozenset[int]] = None  # the GPU's CPU affinity, when placed by it
    gpu_memory_node: Optional[int] = None
    cpus: Optional[frozenset[int]] = None
    reasons: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    error: Optional[PynumabindError] = None

    def warn(self, message: str) -> None:
        self.reasons.append(message)
        self.warnings.append(message)


def _check_int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{what} must be an integer, not {value!r}")
    return value


def _request(
    topology: Topology,
    *,
    nprocs: Optional[int],
    mode: Union[str, CpuMode],
    memory: Union[str, MemoryPolicy],
    nodes: Optional[NodesOverride],
    cpus: Optional[CpusOverride],
    devices: Optional[Sequence[int]],
    gpu_memory: bool,
    interleave_nodes: Union[str, Iterable[int], None],
) -> _Request:
    cpu_mode = CpuMode.parse(mode)
    policy = MemoryPolicy.parse(memory)
    if not isinstance(gpu_memory, bool):
        raise ConfigError(f"gpu_memory must be True or False, not {gpu_memory!r}")
    node_ids = frozenset(topology.nodes)
    node_sets = None if nodes is None else parse_nodes_override(nodes, universe=node_ids)
    cpu_sets = (
        None
        if cpus is None
        else parse_cpus_override(cpus, universe=topology.online_cpus, allowed=topology.allowed_cpus)
    )
    if cpu_sets is not None and cpu_mode is CpuMode.NONE:
        raise ConfigError("a cpus override contradicts mode 'none' (which leaves CPUs alone)")

    lengths = {
        name: len(sets)
        for name, sets in (("nodes", node_sets), ("cpus", cpu_sets))
        if sets is not None
    }
    if nprocs is None:
        if len(set(lengths.values())) > 1:
            raise ConfigError(
                f"the nodes override has {lengths['nodes']} entries but the cpus override "
                f"has {lengths['cpus']}; give one entry per local rank in both"
            )
        if lengths:
            name, count = next(iter(lengths.items()))
            nprocs = count
            reason = f"{count} local ranks: one per entry of the {name} override"
        elif topology.gpus:
            nprocs = len(topology.gpus)
            reason = f"{nprocs} local ranks: one per visible GPU"
        else:
            nprocs = len(_cpu_bearing_nodes(topology))
            reason = (
                f"{nprocs} local ranks: no GPUs, one per NUMA node with allowed CPUs "
                f"({format_ids(frozenset(_cpu_bearing_nodes(topology)))})"
            )
    else:
        nprocs = _check_int(nprocs, "nprocs")
        reason = f"{nprocs} local ranks (given)"
        for name, count in lengths.items():
            separators = f"{RANK_SEPARATOR!r}" + (" or ','" if name == "nodes" else "")
            if count != nprocs:
                raise ConfigError(
                    f"the {name} override has {count} entries but there are {nprocs} local "
                    f"ranks; give exactly one entry per rank (ranks separated by {separators})"
                )
    if nprocs < 1:
        if not topology.gpus and not lengths:
            raise PlanError(
                f"no NUMA node has an allowed CPU (allowed CPUs "
                f"{format_ids(topology.allowed_cpus)}), so there is no rank to place"
            )
        raise ConfigError(f"nprocs must be at least 1, not {nprocs}")
    if nprocs > MAX_NPROCS:
        raise ConfigError(f"nprocs {nprocs} exceeds the limit of {MAX_NPROCS} local ranks")

    gpu_count = len(topology.gpus)
    explicit = [False] * nprocs
    if devices is None:
        per_rank: List[Optional[int]] = [
            r % gpu_count if gpu_count else None for r in range(nprocs)
        ]
    else:
        if (
            isinstance(devices, (str, bytes))
            or not isinstance(devices, Sequence)
            or len(devices) != nprocs
        ):
            raise ConfigError(
                f"devices must be a sequence giving one device index per rank ({nprocs}), "
                f"not {devices!r}"
            )
        per_rank = []
        for r, value in enumerate(devices):
            per_rank.append(_device_index(topology, value))
            explicit[r] = True

    interleave: Optional[frozenset[int]] = None
    if interleave_nodes is not None:
        if policy is not MemoryPolicy.INTERLEAVE:
            raise ConfigError(
                "interleave_nodes is only meaningful with memory='interleave', "
                f"not {policy.value!r}"
            )
        if isinstance(interleave_nodes, str):
            try:
                interleave = parse_nodelist(
                    interleave_nodes, universe=node_ids, allowed=topology.allowed_mems
                )
            except ListParseError as exc:
                raise ConfigError(f"interleave_nodes: {exc}") from exc
        elif isinstance(interleave_nodes, Iterable):
            interleave = _int_set(interleave_nodes, "interleave_nodes", 0)
        else:
            raise ConfigError(
                "interleave_nodes must be a node list string or an iterable of node ids, "
                f"not {interleave_nodes!r}"
            )
        _check_interleave_nodes(topology, interleave)

    return _Request(
        nprocs=nprocs,
        mode=cpu_mode,
        policy=policy,
        devices=tuple(per_rank),
        explicit_device=tuple(explicit),
        node_sets=node_sets,
        cpu_sets=cpu_sets,
        gpu_memory=bool(gpu_memory),
        interleave_nodes=interleave,
        nprocs_reason=reason,
    )


def _device_index(topology: Topology, value: object) -> int:
    index = _check_int(value, "device")
    if not topology.gpus:
        raise ConfigError(f"device {index} requested but this machine shows no GPUs")
    if not 0 <= index < len(topology.gpus):
        raise ConfigError(
            f"device {index} out of range: {len(topology.gpus)} visible GPUs "
            f"(indices 0-{len(topology.gpus) - 1})"
        )
    return index


def _check_interleave_nodes(topology: Topology, wanted: frozenset[int]) -> None:
    if not wanted:
        raise ConfigError("interleave_nodes names no node")
    unknown = wanted - frozenset(topology.nodes)
    if unknown:
        raise PlanError(
            f"interleave_nodes names NUMA node(s) {format_ids(unknown)}, which this machine "
            f"does not have (nodes {format_ids(frozenset(topology.nodes))})"
        )
    memoryless = frozenset(n for n in wanted if not topology.nodes[n].has_memory)
    if memoryless:
        raise PlanError(f"interleave_nodes names node(s) {format_ids(memoryless)} without memory")
    outside = wanted - topology.allowed_mems
    if outside:
        raise PlanError(
            f"interleave_nodes names node(s) {format_ids(outside)} outside the allowed mems "
            f"{format_ids(topology.allowed_mems)} (cpuset.mems)"
        )


def _check_overrides(topology: Topology, request: _Request) -> None:
    """Names in an override must exist on this machine: checked for all ranks."""
    if request.node_sets is not None:
        all_nodes = frozenset(topology.nodes)
        for r, wanted in enumerate(request.node_sets):
            unknown = wanted - all_nodes
            if unknown:
                raise PlanError(
                    f"nodes override for rank {r} names NUMA node(s) {format_ids(unknown)}, "
                    f"which this machine does not have (nodes {format_ids(all_nodes)})"
                )
        for r, wanted in enumerate(request.node_sets):
            if request.mode is not CpuMode.NONE and request.cpu_sets is None:
                cpuless = frozenset(n for n in wanted if not topology.nodes[n].cpus)
                if cpuless:
                    raise PlanError(
                        f"nodes override for rank {r} names node(s) {format_ids(cpuless)}, "
                        f"which have no CPUs (memory-only); CPU nodes are "
                        f"{format_ids(frozenset(topology.cpu_nodes))} (or use mode 'none')"
                    )
    if request.cpu_sets is not None:
        online = topology.online_cpus
        for r, wanted in enumerate(request.cpu_sets):
            offline = wanted - online
            if offline:
                raise PlanError(
                    f"cpus override for rank {r} names CPU(s) {format_ids(offline)}, which are "
                    f"not online (online CPUs: {format_ids(online)})"
                )


# --------------------------------------------------------------- placement


def _cpu_bearing_nodes(topology: Topology) -> List[int]:
    """Nodes with at least one allowed CPU, ascending."""
    return [n for n in topology.cpu_nodes if topology.nodes[n].cpus & topology.allowed_cpus]


def _node_cpus(topology: Topology, nodes: Iterable[int]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for n in nodes:
        node = topology.nodes.get(n)
        if node is not None:
            out |= node.cpus
    return out


def _nodes_of(topology: Topology, cpus: Iterable[int]) -> frozenset[int]:
    found = (topology.node_of_cpu(c) for c in cpus)
    return frozenset(n for n in found if n is not None)


def _primary_node(topology: Topology, nodes: frozenset[int], cpus: AbstractSet[int]) -> int:
    """The node holding most of ``cpus`` (allowed ones first), lowest id on ties."""
    allowed = topology.allowed_cpus

    def key(n: int) -> Tuple[int, int, int]:
        mine = topology.nodes[n].cpus & cpus if n in topology.nodes else frozenset()
        return (-len(mine & allowed), -len(mine), n)

    return min(nodes, key=key)


def _gpu_label(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.pci_bus_id})"


def _place_on_affinity(topology: Topology, state: _Rank, gpu: Gpu, why: str) -> bool:
    """Place a rank on the nodes of its GPU's CPU affinity; False if that says nothing."""
    label = _gpu_label(gpu)
    local = gpu.local_cpus & topology.online_cpus
    nodes = _nodes_of(topology, local)
    if not nodes:
        return False
    state.nodes = nodes
    state.affinity = local
    state.primary = _primary_node(topology, nodes, local)
    state.derived_multi = len(nodes) > 1
    state.reasons.append(
        f"{why}; its CPU affinity {format_ids(gpu.local_cpus)} ({gpu.source}) lies on "
        f"NUMA node(s) {format_ids(nodes)}"
    )
    if len(nodes) > 1:
        state.reasons.append(
            f"{label}'s affinity spans nodes {format_ids(nodes)}; node {state.primary} "
            "holds most of its allowed CPUs"
        )
    return True


def _place_nearest(topology: Topology, state: _Rank, node: int) -> None:
    ranked = topology.nearest_cpu_nodes(node)
    if not ranked:
        state.warn(f"node {node} has no CPUs and the machine has no CPU node to fall back on")
        return
    best, distance = ranked[0]
    state.nodes = frozenset({best})
    state.primary = best
    if distance is None:
        state.warn(
            f"node {node} has no CPUs and its distances are unknown; using the lowest-id "
            f"CPU node {best}"
        )
        return
    text = f"node {node} has no CPUs; nearest CPU node is {best} (distance {distance})"
    ties = [other for other, d in ranked if d == distance]
    if len(ties) > 1:
        text += (
            f"; nodes {format_ids(frozenset(ties))} tie at distance {distance}, the lowest id wins"
        )
    state.reasons.append(text)


def _place_gpu(topology: Topology, state: _Rank, gpu: Gpu) -> None:
    label = _gpu_label(gpu)
    state.gpu_memory_node = gpu.memory_node
    node_id = gpu.numa_node
    if node_id is not None and node_id not in topology.nodes:
        state.warn(
            f"{label} reports NUMA node {node_id} ({gpu.source}), which this machine does "
            "not have; treating its node as unknown"
        )
        node_id = None
    if node_id is not None:
        node = topology.nodes[node_id]
        if node.cpus:
            state.nodes = frozenset({node_id})
            state.primary = node_id
            memory_node = gpu.memory_node
            if memory_node is not None and memory_node != node_id:
                # Discovery already resolved a CPU-less memory node to its
                # CPU node; say so rather than claim the source named it.
                distance = topology.distance(memory_node, node_id)
                state.reasons.append(
                    f"{label}'s memory node {memory_node} has no CPUs; its CPU node is "
                    f"{node_id} (from {gpu.source}, distance "
                    f"{'unknown' if distance is None else distance})"
                )
            else:
                state.reasons.append(f"{label} is on NUMA node {node_id} ({gpu.source} numa_node)")
            return
        if node.has_memory and state.gpu_memory_node is None:
            state.gpu_memory_node = node_id
        what = (
            "a CPU-less memory node (the GPU's own memory, as on Grace/GB200)"
            if node.has_memory
            else "a node with neither CPUs nor memory"
        )
        why = f"{label} is on NUMA node {node_id} ({gpu.source} numa_node), {what}"
        if _place_on_affinity(topology, state, gpu, why):
            return
        state.reasons.append(why)
        _place_nearest(topology, state, node_id)
        return
    why = f"{label} has no NUMA node ({gpu.source} reports none)"
    if _place_on_affinity(topology, state, gpu, why):
        return
    state.warn(f"{why} and no CPU affinity: rank {state.rank} is not CPU-bound (cpus left alone)")


def _place(topology: Topology, request: _Request, rank: int) -> _Rank:
    state = _Rank(rank=rank)
    device = request.devices[rank]
    if device is not None:
        state.device = topology.gpus[device]
        if request.explicit_device[rank]:
            state.reasons.append(f"rank {rank} uses GPU {device} (given)")
        elif request.nprocs > len(topology.gpus):
            sharing = [r for r in range(request.nprocs) if request.devices[r] == device]
            state.warn(
                f"{request.nprocs} ranks for {len(topology.gpus)} GPUs: devices wrap around "
                f"(rank % {len(topology.gpus)}); rank {rank} uses GPU {device}, shared by "
                f"ranks {format_ids(frozenset(sharing))}"
            )
        else:
            state.reasons.append(f"rank {rank} uses GPU {device} (rank order)")
    if request.node_sets is not None:
        wanted = request.node_sets[rank]
        if state.device is not None:
            # Detect only to report the difference and find the GPU's memory
            # node; the detection's own warnings do not apply to an override.
            scratch = _Rank(rank=rank)
            _place_gpu(topology, scratch, state.device)
            state.gpu_memory_node = scratch.gpu_memory_node
            detected = scratch.nodes
            state.reasons.append(
                f"nodes override puts rank {rank} on node(s) {format_ids(wanted)}"
                + (
                    f" instead of the detected {format_ids(detected)}"
                    if detected and detected != wanted
                    else ""
                )
            )
        else:
            state.reasons.append(f"nodes override puts rank {rank} on node(s) {format_ids(wanted)}")
        state.nodes = wanted
        state.derived_multi = False
        state.affinity = None
        state.primary = _primary_node(topology, wanted, _node_cpus(topology, wanted))
        return state
    if state.device is not None:
        _place_gpu(topology, state, state.device)
        return state
    spread = _cpu_bearing_nodes(topology)
    if not spread:
        state.error = PlanError(
            f"no NUMA node has an allowed CPU (allowed CPUs {format_ids(topology.allowed_cpus)})"
        )
        return state
    node = spread[rank * len(spread) // request.nprocs]
    state.nodes = frozenset({node})
    state.primary = node
    state.reasons.append(
        f"no GPUs: {request.nprocs} ranks spread evenly over the nodes with allowed CPUs "
        f"({format_ids(frozenset(spread))}); rank {rank} is on node {node}"
    )
    return state


# -------------------------------------------------------------------- CPUs


def _empty(topology: Topology, state: _Rank, wanted: frozenset[int], what: str) -> PlanError:
    """The never-silently-unbound error: names the node, the CPUs wanted and allowed."""
    return PlanError(
        f"rank {state.rank}: {what}node(s) {format_ids(state.nodes)} have CPUs "
        f"{format_ids(wanted)}, but this process may only use CPUs "
        f"{format_ids(topology.allowed_cpus)} (affinity/cpuset): the intersection is empty"
    )


def _cores(topology: Topology, pool: frozenset[int]) -> List[frozenset[int]]:
    """Physical cores of ``pool`` (SMT siblings together), ordered by lowest CPU."""
    remaining = set(pool)
    cores: List[frozenset[int]] = []
    for cpu in sorted(pool):
        if cpu not in remaining:
            continue
        info = topology.cpus.get(cpu)
        siblings = info.core_cpus if info is not None else frozenset({cpu})
        core = frozenset((siblings & remaining) | {cpu})
        remaining -= core
        cores.append(core)
    return cores


def _balanced(count: int, parts: int) -> List[Tuple[int, int]]:
    """Contiguous [start, end) ranges splitting ``count`` items, sizes within one."""
    base, extra = divmod(count, parts)
    out = []
    start = 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append((start, start + size))
        start += size
    return out


def _union(sets: Iterable[frozenset[int]]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for s in sets:
        out |= s
    return out


def _exclusive(
    cores: List[frozenset[int]], ranks: int, where: str
) -> Tuple[List[frozenset[int]], str, bool]:
    """Split ``cores`` among ``ranks``: disjoint whole cores when there are enough."""
    if len(cores) >= ranks:
        slices = [_union(cores[a:b]) for a, b in _balanced(len(cores), ranks)]
        sizes = sorted({b - a for a, b in _balanced(len(cores), ranks)}, reverse=True)
        return (
            slices,
            (
                f"{where}: {len(cores)} allowed cores split among {ranks} rank(s), "
                f"{'/'.join(map(str, sizes))} whole core(s) each (SMT siblings kept together)"
            ),
            False,
        )
    threads = [cpu for core in cores for cpu in sorted(core)]
    if len(threads) >= ranks:
        slices = [frozenset(threads[a:b]) for a, b in _balanced(len(threads), ranks)]
        return (
            slices,
            (
                f"{where}: more ranks ({ranks}) than allowed cores ({len(cores)}): SMT threads "
                "are split, so ranks share physical cores"
            ),
            True,
        )
    slices = [cores[i * len(cores) // ranks] for i in range(ranks)]
    return (
        slices,
        (f"{where}: more ranks ({ranks}) than allowed CPUs ({len(threads)}): ranks share cores"),
        True,
    )


def _l3_groups(
    topology: Topology, cores: List[frozenset[int]]
) -> Optional[List[List[frozenset[int]]]]:
    """Cores grouped by shared L3, in core order; None when L3 is unknown."""
    groups: Dict[frozenset[int], List[frozenset[int]]] = {}
    for core in cores:
        info = topology.cpus.get(min(core))
        if info is None or not info.l3:
            return None
        groups.setdefault(info.l3, []).append(core)
    return list(groups.values())  # dicts keep insertion (core) order


def _dhondt(weights: List[int], seats: int) -> List[int]:
    """Seats per group, proportional to ``weights`` (highest average, ties by order)."""
    given = [0] * len(weights)
    for _ in range(seats):
        best = max(range(len(weights)), key=lambda i: (weights[i] / (given[i] + 1), -i))
        given[best] += 1
    return given


def _core_complex(
    topology: Topology, cores: List[frozenset[int]], ranks: int, where: str
) -> Tuple[List[frozenset[int]], List[str], bool]:
    groups = _l3_groups(topology, cores)
    if groups is None:
        slices, note, shared = _exclusive(cores, ranks, where)
        return (
            slices,
            [f"{where}: L3 cache groups unknown; falling back to exclusive", note],
            shared,
        )
    described = ", ".join(format_ids(_union(g)) for g in groups)
    if len(groups) >= ranks:
        slices = [_union(_union(g) for g in groups[a:b]) for a, b in _balanced(len(groups), ranks)]
        sizes = sorted({b - a for a, b in _balanced(len(groups), ranks)}, reverse=True)
        return (
            slices,
            [
                f"{where}: {len(groups)} L3 groups ({described}) split among {ranks} rank(s), "
                f"{'/'.join(map(str, sizes))} whole group(s) each"
            ],
            False,
        )
    seats = _dhondt([len(g) for g in groups], ranks)
    slices = []
    notes = [
        f"{where}: fewer L3 groups ({len(groups)}: {described}) than ranks ({ranks}); "
        f"ranks per group {'/'.join(map(str, seats))} (by core count), exclusive within groups"
    ]
    shared = False
    for index, (group, count) in enumerate(zip(groups, seats)):
        if count:
            part, note, group_shared = _exclusive(group, count, f"{where}, L3 group {index}")
            slices.extend(part)
            notes.append(note)
            shared = shared or group_shared
    return slices, notes, shared


def _choose_cpus(topology: Topology, request: _Request, states: List[_Rank]) -> None:
    mode = request.mode
    live = [s for s in states if s.error is None]
    if mode is CpuMode.NONE:
        for s in live:
            s.reasons.append("mode none: CPU affinity left alone")
        return
    allowed = topology.allowed_cpus
    groups: Dict[frozenset[int], List[_Rank]] = {}
    for s in live:
        if request.cpu_sets is not None:
            wanted = request.cpu_sets[s.rank]
            got = wanted & allowed
            if not got:
                s.error = PlanError(
                    f"rank {s.rank}: cpus override {format_ids(wanted)} has no CPU in this "
                    f"process's allowed CPUs {format_ids(allowed)} (affinity/cpuset)"
                )
                continue
            if got != wanted:
                s.warn(
                    f"cpus override for rank {s.rank}: CPU(s) {format_ids(wanted - got)} are "
                    f"outside the allowed CPUs {format_ids(allowed)} and are dropped"
                )
            s.cpus = got
            s.reasons.append(f"cpus override: rank {s.rank} gets CPUs {format_ids(got)}")
            if request.node_sets is None:
                s.nodes = _nodes_of(topology, got)
                s.primary = _primary_node(topology, s.nodes, got) if s.nodes else None
            continue
        if not s.nodes:
            continue  # unknown node: left unbound, already explained
        wanted = _node_cpus(topology, s.nodes)
        if mode is CpuMode.NODE and s.affinity is not None:
            got = s.affinity & allowed
            if not got:
                s.error = PlanError(
                    f"rank {s.rank}: its GPU's CPU affinity {format_ids(s.affinity)} (on "
                    f"node(s) {format_ids(s.nodes)}) has no CPU in this process's allowed "
                    f"CPUs {format_ids(allowed)} (affinity/cpuset)"
                )
                continue
            s.cpus = got
            s.reasons.append(
                f"mode node: the allowed CPUs of the GPU's affinity: {format_ids(got)}"
            )
        elif mode is CpuMode.NODE:
            got = wanted & allowed
            if not got:
                s.error = _empty(topology, s, wanted, "its ")
                continue
            s.cpus = got
            s.reasons.append(
                f"mode node: all allowed CPUs of node(s) {format_ids(s.nodes)}: {format_ids(got)}"
            )
        elif mode is CpuMode.SOCKET:
            source = s.affinity if s.affinity is not None else wanted
            packages = frozenset(topology.cpus[c].package for c in source if c in topology.cpus)
            if not packages:
                got = wanted & allowed
                s.reasons.append(
                    f"mode socket: packages of node(s) {format_ids(s.nodes)} unknown; "
                    "using the node's CPUs"
                )
            else:
                wanted = _union(topology.package_cpus(p) for p in packages)
                got = wanted & allowed
            if not got:
                s.error = _empty(topology, s, wanted, "the package(s) of its ")
                continue
            s.cpus = got
            spanned = _nodes_of(topology, got)
            s.reasons.append(
                f"mode socket: all allowed CPUs of package(s) {format_ids(packages)} "
                f"(node(s) {format_ids(spanned)}): {format_ids(got)}"
            )
        else:
            key = s.nodes
            if s.derived_multi and s.primary is not None:
                key = frozenset({s.primary})
                s.reasons.append(
                    f"mode {mode.value}: slicing one node, the primary node {s.primary} "
                    f"of {format_ids(s.nodes)}"
                )
            groups.setdefault(key, []).append(s)
    if groups:
        _check_disjoint_groups(groups)
        for key, members in sorted(groups.items(), key=lambda kv: min(kv[0])):
            _slice_group(topology, request, key, members)


def _check_disjoint_groups(groups: Mapping[frozenset[int], List[_Rank]]) -> None:
    keys = sorted(groups, key=lambda k: (min(k), sorted(k)))
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if a & b:
                ra, rb = groups[a][0].rank, groups[b][0].rank
                raise ConfigError(
                    "exclusive modes need the ranks' node sets to be equal or disjoint: "
                    f"rank {ra} has nodes {format_ids(a)} and rank {rb} has {format_ids(b)}"
                )


def _slice_group(
    topology: Topology, request: _Request, key: frozenset[int], members: List[_Rank]
) -> None:
    wanted = _node_cpus(topology, key)
    pool = wanted & topology.allowed_cpus
    if not pool:
        for s in members:
            s.error = _empty(topology, s, wanted, "its ")
        return
    where = f"node(s) {format_ids(key)}"
    cores = _cores(topology, pool)
    if request.mode is CpuMode.EXCLUSIVE:
        slices, note, shared = _exclusive(cores, len(members), where)
        notes = [note]
    else:
        slices, notes, shared = _core_complex(topology, cores, len(members), where)
    peers = format_ids(frozenset(s.rank for s in members))
    for position, (s, got) in enumerate(zip(members, slices)):
        s.cpus = got
        s.reasons.extend(notes)
        s.reasons.append(
            f"mode {request.mode.value}: ranks {peers} share {where}; rank {s.rank} is "
            f"number {position} and gets CPUs {format_ids(got)}"
        )
        if shared:
            s.warnings.append(
                f"{where}: {len(members)} ranks but only {len(cores)} allowed core(s): "
                "exclusive slices share physical cores"
            )


# ------------------------------------------------------------------ memory


def _nearest_memory_nodes(topology: Topology, node: int) -> List[Tuple[int, Optional[int]]]:
    """Allowed nodes with memory by distance from ``node``; ties: CPU nodes, then id."""
    candidates = [
        n for n, info in topology.nodes.items() if info.has_memory and n in topology.allowed_mems
    ]
    return sorted(
        ((n, topology.distance(node, n)) for n in candidates),
        key=lambda item: (
            item[1] is None,
            item[1] or 0,
            not topology.nodes[item[0]].cpus,
            item[0],
        ),
    )


def _memory_nodes(topology: Topology, state: _Rank, base: frozenset[int]) -> frozenset[int]:
    out = set()
    for n in sorted(base):
        info = topology.nodes.get(n)
        if info is None:
            continue
        if info.has_memory and n in topology.allowed_mems:
            out.add(n)
            continue
        why = (
            "has no memory (memory-less CPU node)"
            if not info.has_memory
            else f"has memory outside the allowed mems {format_ids(topology.allowed_mems)}"
        )
        ranked = _nearest_memory_nodes(topology, n)
        if not ranked:
            state.warn(f"node {n} {why} and no allowed node has memory")
            continue
        other, distance = ranked[0]
        shown = "unknown" if distance is None else str(distance)
        text = (
            f"node {n} {why}; its memory node is the nearest allowed node with memory, "
            f"{other} (distance {shown})"
        )
        ties = frozenset(m for m, d in ranked if d == distance)
        if len(ties) > 1:
            text += f"; nodes {format_ids(ties)} tie, CPU nodes first, then the lowest id"
        state.reasons.append(text)
        out.add(other)
    return frozenset(out)


def _choose_mems(
    topology: Topology, request: _Request, state: _Rank
) -> Tuple[frozenset[int], MemoryPolicy]:
    policy = request.policy
    if policy is MemoryPolicy.NONE:
        state.reasons.append("memory policy none: left alone")
        return frozenset(), policy
    if policy is MemoryPolicy.LOCAL:
        state.reasons.append("memory policy local: allocate on the node of the faulting CPU")
        return frozenset(), policy
    if policy is MemoryPolicy.INTERLEAVE and request.interleave_nodes is not None:
        mems = request.interleave_nodes
        state.reasons.append(f"memory policy interleave across the given nodes {format_ids(mems)}")
        return mems, policy
    if request.node_sets is not None or state.cpus is None:
        base = state.nodes  # a nodes override names the memory nodes too
    else:
        base = _nodes_of(topology, state.cpus)
    if not base:
        state.warn(
            f"rank {state.rank} has no known node: memory policy left alone instead of "
            f"{policy.value}"
        )
        return frozenset(), MemoryPolicy.NONE
    chosen = set(_memory_nodes(topology, state, base))
    if request.gpu_memory:
        gpu_node = state.gpu_memory_node
        if state.device is None or gpu_node is None:
            state.warn("gpu_memory requested but the GPU has no NUMA memory node of its own")
        elif gpu_node not in topology.nodes or not topology.nodes[gpu_node].has_memory:
            state.warn(f"gpu_memory requested but GPU memory node {gpu_node} has no memory here")
        elif gpu_node not in topology.allowed_mems:
            state.warn(
                f"gpu_memory requested but GPU memory node {gpu_node} is outside the allowed "
                f"mems {format_ids(topology.allowed_mems)}"
            )
        else:
            chosen.add(gpu_node)
            state.reasons.append(f"gpu_memory: adding the GPU's own memory node {gpu_node}")
    if not chosen:
        raise PlanError(
            f"rank {state.rank}: no allowed memory node for node(s) {format_ids(base)} "
            f"(allowed mems {format_ids(topology.allowed_mems)})"
        )
    frozen = frozenset(chosen)
    described = {
        MemoryPolicy.PREFERRED: "preferred (local first, spills over instead of OOM)",
        MemoryPolicy.BIND: "bind (strict)",
        MemoryPolicy.INTERLEAVE: "interleave across the rank's own nodes (the default)",
    }[policy]
    state.reasons.append(f"memory policy {described}: nodes {format_ids(frozen)}")
    return frozen, policy


# -------------------------------------------------------------------- API


def _plan_ranks(topology: Topology, request: _Request) -> List[Union[Plan, PynumabindError]]:
    _check_overrides(topology, request)
    states = [_place(topology, request, r) for r in range(request.nprocs)]
    _choose_cpus(topology, request, states)
    out: List[Union[Plan, PynumabindError]] = []
    for s in states:
        if s.error is not None:
            out.append(s.error)
            continue
        try:
            mems, policy = _choose_mems(topology, request, s)
        except PlanError as exc:
            out.append(exc)
            continue
        node = s.primary
        if s.cpus is not None:
            nodes = _nodes_of(topology, s.cpus)
            if node not in nodes and nodes:
                node = _primary_node(topology, nodes, s.cpus)
        assert s.cpus is None or (s.cpus and s.cpus <= topology.allowed_cpus)
        assert mems <= topology.allowed_mems
        out.append(
            Plan(
                rank=s.rank,
                device=s.device,
                cpus=s.cpus,
                mems=mems,
                policy=policy,
                mode=request.mode,
                node=node,
                reasons=(request.nprocs_reason, *s.reasons),
                warnings=tuple(s.warnings),
            )
        )
    return out


def plan(
    topology: Topology,
    rank: int,
    nprocs: Optional[int] = None,
    mode: Union[str, CpuMode] = "node",
    memory: Union[str, MemoryPolicy] = "preferred",
    *,
    nodes: Optional[NodesOverride] = None,
    cpus: Optional[CpusOverride] = None,
    device: Optional[int] = None,
    gpu_memory: bool = False,
    interleave_nodes: Union[str, Iterable[int], None] = None,
) -> Plan:
    """The plan for local rank ``rank`` of ``nprocs``.

    ``device`` (an index into ``topology.gpus``) overrides this rank's GPU;
    the other ranks keep ``rank % len(gpus)`` when exclusive modes slice a
    node.  Raises :class:`PlanError` or :class:`ConfigError` naming what was
    wrong.
    """
    rank = _check_int(rank, "rank")
    if rank < 0:
        raise PlanError(f"rank must be 0 <= rank, not {rank}")
    base = _request(
        topology,
        nprocs=nprocs,
        mode=mode,
        memory=memory,
        nodes=nodes,
        cpus=cpus,
        devices=None,
        gpu_memory=gpu_memory,
        interleave_nodes=interleave_nodes,
    )
    if rank >= base.nprocs:
        raise PlanError(
            f"rank {rank} out of range: there are {base.nprocs} local ranks "
            f"({base.nprocs_reason}); pass nprocs= to plan more"
        )
    request = base
    if device is not None:
        index = _device_index(topology, device)
        per_rank = list(base.devices)
        explicit = list(base.explicit_device)
        per_rank[rank] = index
        explicit[rank] = True
        request = replace(base, devices=tuple(per_rank), explicit_device=tuple(explicit))
    result = _plan_ranks(topology, request)[rank]
    if isinstance(result, PynumabindError):
        raise result
    return result


def plan_all(
    topology: Topology,
    nprocs: Optional[int] = None,
    mode: Union[str, CpuMode] = "node",
    memory: Union[str, MemoryPolicy] = "preferred",
    *,
    nodes: Optional[NodesOverride] = None,
    cpus: Optional[CpusOverride] = None,
    devices: Optional[Sequence[int]] = None,
    gpu_memory: bool = False,
    interleave_nodes: Union[str, Iterable[int], None] = None,
) -> List[Plan]:
    """Plans for every local rank, in rank order.

    ``devices`` optionally gives each rank's GPU index.  Raises the first
    failing rank's error.
    """
    request = _request(
        topology,
        nprocs=nprocs,
        mode=mode,
        memory=memory,
        nodes=nodes,
        cpus=cpus,
        devices=devices,
        gpu_memory=gpu_memory,
        interleave_nodes=interleave_nodes,
    )
    plans: List[Plan] = []
    for result in _plan_ranks(topology, request):
        if isinstance(result, PynumabindError):
            raise result
        plans.append(result)
    return plans
