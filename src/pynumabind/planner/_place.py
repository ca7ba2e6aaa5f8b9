"""Where each rank goes: its GPU and its CPU node(s).

This module is the one owner of GPU locality.  Discovery records what each
source said about a GPU (``numa_node`` and its ``source``, ``local_cpus``,
``memory_node``); deciding which CPU node a rank on that GPU uses happens
only here, in :func:`place_gpu`:

* ``numa_node`` names a node with CPUs: that node.  When the GPU also has a
  different ``memory_node`` (discovery saw a CPU-less memory node and named
  the CPU node), the reason says so.
* ``numa_node`` names a CPU-less node (a Grace/GB200 HBM node as NVML
  reports it): that node becomes the GPU's memory node; the rank goes to the
  nodes of the GPU's ``local_cpus`` or, without those, to the nearest CPU node
  by SLIT distance (ties: lowest id).
* ``numa_node`` unknown (or naming a node the machine lacks): the nodes of
  ``local_cpus``; with neither, the rank is left unbound (``cpus=None``).
  Either way every affected rank's plan carries a *warning* (not only a
  reason) naming the GPU by index and bus id.

A GPU affinity that spans nodes keeps every node, and records the node that
holds most of its allowed CPUs as the primary one (exclusive modes slice
only that one).
"""

from __future__ import annotations

from .._text import counted, format_ids
from ..errors import PlanError, PynumabindError
from ..model import Gpu, Topology

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import AbstractSet, Dict, Iterable, List, Mapping, Optional, Tuple

__all__ = [
    "RankState",
    "cpu_bearing_nodes",
    "node_cpus",
    "nodes_of",
    "place_gpu",
    "primary_node",
]


class RankState:
    """One rank while it is being planned (mutable: the planner's steps fill it in).

    * ``gpu``: the rank's GPU, if any;
    * ``nodes``: its CPU placement nodes (empty: unknown), ``primary`` the
      one exclusive modes slice; ``derived_multi``: they came from a GPU
      affinity spanning nodes; ``affinity``: the GPU's CPU affinity, when
      placed by it;
    * ``gpu_memory_node``: the GPU's own memory node; ``memory_nodes``: the
      nodes memory is placed for, when not those of its CPUs (fallback
      nearest);
    * ``cpus``, ``reasons``, ``warnings``, ``error``: what the planner found.
    """

    def __init__(self, rank: int, gpu: Optional[Gpu] = None) -> None:
        self.rank = rank
        self.gpu = gpu
        self.nodes: frozenset[int] = frozenset()
        self.primary: Optional[int] = None
        self.derived_multi = False
        self.affinity: Optional[frozenset[int]] = None
        self.gpu_memory_node: Optional[int] = None
        self.cpus: Optional[frozenset[int]] = None
        self.memory_nodes: Optional[frozenset[int]] = None
        self.reasons: List[str] = []
        self.warnings: List[str] = []
        self.error: Optional[PynumabindError] = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"RankState({fields})"

    def warn(self, message: str) -> None:
        self.reasons.append(message)
        self.warnings.append(message)


# ------------------------------------------------------ topology lookups


def cpu_bearing_nodes(topology: Topology) -> List[int]:
    """Nodes with at least one allowed CPU, ascending."""
    return [n for n in topology.cpu_nodes if topology.nodes[n].cpus & topology.allowed_cpus]


def node_cpus(topology: Topology, nodes: Iterable[int]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for n in nodes:
        node = topology.nodes.get(n)
        if node is not None:
            out |= node.cpus
    return out


def nodes_of(topology: Topology, cpus: Iterable[int]) -> frozenset[int]:
    found = (topology.node_of_cpu(c) for c in cpus)
    return frozenset(n for n in found if n is not None)


def primary_node(topology: Topology, nodes: frozenset[int], cpus: AbstractSet[int]) -> int:
    """The node holding most of ``cpus`` (allowed ones first), lowest id on ties."""
    allowed = topology.allowed_cpus

    def key(n: int) -> Tuple[int, int, int]:
        mine = topology.nodes[n].cpus & cpus if n in topology.nodes else frozenset()
        return (-len(mine & allowed), -len(mine), n)

    return min(nodes, key=key)


def gpu_label(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.pci_bus_id})"


# ------------------------------------------------------------ GPU locality


def _place_on_affinity(topology: Topology, state: RankState, gpu: Gpu, why: str) -> bool:
    """Place a rank on the nodes of its GPU's CPU affinity; False if that says nothing."""
    local = gpu.local_cpus & topology.online_cpus
    nodes = nodes_of(topology, local)
    if not nodes:
        return False
    state.nodes = nodes
    state.affinity = local
    state.primary = primary_node(topology, nodes, local)
    state.derived_multi = len(nodes) > 1
    state.reasons.append(
        f"{why}; its CPU affinity {format_ids(gpu.local_cpus)} ({gpu.source}) lies on "
        f"NUMA node(s) {format_ids(nodes)}"
    )
    if len(nodes) > 1:
        state.reasons.append(
            f"{gpu_label(gpu)}'s affinity spans nodes {format_ids(nodes)}; node {state.primary} "
            "holds most of its allowed CPUs"
        )
    return True


def _place_nearest(topology: Topology, state: RankState, node: int) -> None:
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


def _place_on_cpu_node(topology: Topology, state: RankState, gpu: Gpu, node_id: int) -> None:
    state.nodes = frozenset({node_id})
    state.primary = node_id
    memory_node = gpu.memory_node
    if memory_node is not None and memory_node != node_id:
        # Discovery already resolved a CPU-less memory node to its CPU node;
        # say so rather than claim the source named it.
        distance = topology.distance(memory_node, node_id)
        state.reasons.append(
            f"{gpu_label(gpu)}'s memory node {memory_node} has no CPUs; its CPU node is "
            f"{node_id} (from {gpu.source}, distance "
            f"{'unknown' if distance is None else distance})"
        )
    else:
        state.reasons.append(f"{gpu_label(gpu)} is on NUMA node {node_id} ({gpu.source} numa_node)")


def _place_on_cpuless_node(topology: Topology, state: RankState, gpu: Gpu, node_id: int) -> None:
    node = topology.nodes[node_id]
    if node.has_memory and state.gpu_memory_node is None:
        state.gpu_memory_node = node_id
    what = (
        "a CPU-less memory node (the GPU's own memory, as on Grace/GB200)"
        if node.has_memory
        else "a node with neither CPUs nor memory"
    )
    why = f"{gpu_label(gpu)} is on NUMA node {node_id} ({gpu.source} numa_node), {what}"
    if _place_on_affinity(topology, state, gpu, why):
        return
    state.reasons.append(why)
    _place_nearest(topology, state, node_id)


def place_gpu(topology: Topology, state: RankState, gpu: Gpu) -> None:
    """Decide the CPU node(s) of a rank on ``gpu`` (see the module docstring)."""
    state.gpu_memory_node = gpu.memory_node
    node_id = gpu.numa_node
    if node_id is not None and node_id not in topology.nodes:
        state.warn(
            f"{gpu_label(gpu)} reports NUMA node {node_id} ({gpu.source}), which this machine "
            "does not have; treating its node as unknown"
        )
        node_id = None
    if node_id is not None and topology.nodes[node_id].cpus:
        _place_on_cpu_node(topology, state, gpu, node_id)
    elif node_id is not None:
        _place_on_cpuless_node(topology, state, gpu, node_id)
    else:
        why = f"{gpu_label(gpu)} has no NUMA node ({gpu.source} reports none)"
        if _place_on_affinity(topology, state, gpu, why):
            # A warning, not only a reason: the binder logs warnings at WARNING.
            state.warnings.append(
                f"{gpu_label(gpu)}'s NUMA node is unknown ({gpu.source} reports none); rank "
                f"{state.rank} is placed by the GPU's CPU affinity alone, node(s) "
                f"{format_ids(state.nodes)}"
            )
        else:
            state.warn(
                f"{why} and no CPU affinity: rank {state.rank} is not CPU-bound (cpus left alone)"
            )


def require_known_node(topology: Topology, state: RankState) -> None:
    """``require_node``: a GPU whose NUMA node is unknown fails its rank's plan.

    So does a rank left without a GPU because visible-device variables hide
    every GPU of the machine (:meth:`Topology.hidden_gpus_warning`).
    """
    hidden = topology.hidden_gpus_warning()
    if hidden is not None:
        state.error = PlanError(
            f"rank {state.rank}: {hidden}, and require_node is set "
            "(require_node=True or PYNUMABIND_REQUIRE_NODE=1)"
        )
        return
    gpu = state.gpu
    if gpu is None or (gpu.numa_node is not None and gpu.numa_node in topology.nodes):
        return
    state.error = PlanError(
        f"rank {state.rank}: {gpu_label(gpu)} has no known NUMA node ({gpu.source} reports "
        f"{'none' if gpu.numa_node is None else gpu.numa_node}) and require_node is set "
        "(require_node=True or PYNUMABIND_REQUIRE_NODE=1)"
    )


# ------------------------------------------------------------------ ranks


def rank_ids(ranks: Iterable[int]) -> str:
    """Rank ids as a cpulist, cut short past 60 characters (65,536 ranks stay one line)."""
    ids = frozenset(ranks)
    text = format_ids(ids)
    if len(text) <= 60:
        return text
    cut = text.rfind(",", 0, 48)
    return f"{text[:cut]},... ({len(ids)} ranks)"


def sharing_ranks(gpus: Tuple[Optional[int], ...]) -> Dict[int, str]:
    """For each GPU index, the ranks that use it (:func:`rank_ids`), in one pass."""
    users: Dict[int, List[int]] = {}
    for rank, gpu in enumerate(gpus):
        if gpu is not None:
            users.setdefault(gpu, []).append(rank)
    return {gpu: rank_ids(ranks) for gpu, ranks in users.items()}


def _choose_gpu(
    state: RankState,
    topology: Topology,
    *,
    gpu: Optional[int],
    explicit: bool,
    nprocs: int,
    shared_by: Mapping[int, str],
) -> None:
    if gpu is None:
        return
    rank = state.rank
    state.gpu = topology.gpus[gpu]
    if explicit:
        state.reasons.append(f"rank {rank} uses GPU {gpu} (given)")
    elif nprocs > len(topology.gpus):
        state.warn(
            f"{nprocs} ranks for {len(topology.gpus)} GPUs: GPUs wrap around "
            f"(rank % {len(topology.gpus)}); rank {rank} uses GPU {gpu}, shared by "
            f"ranks {shared_by[gpu]}"
        )
    else:
        state.reasons.append(f"rank {rank} uses GPU {gpu} (rank order)")


def _place_on_override(topology: Topology, state: RankState, wanted: frozenset[int]) -> None:
    rank = state.rank
    if state.gpu is not None:
        # Detect only to report the difference and find the GPU's memory
        # node; the detection's own warnings do not apply to an override.
        scratch = RankState(rank=rank)
        place_gpu(topology, scratch, state.gpu)
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
    state.primary = primary_node(topology, wanted, node_cpus(topology, wanted))


def _place_without_gpu(topology: Topology, state: RankState, nprocs: int) -> None:
    spread = cpu_bearing_nodes(topology)
    if not spread:
        state.error = PlanError(
            f"no NUMA node has an allowed CPU (allowed CPUs {format_ids(topology.allowed_cpus)})"
        )
        return
    hidden = topology.hidden_gpus_warning()
    if hidden is not None:
        state.warn(hidden)
    node = spread[state.rank * len(spread) // nprocs]
    state.nodes = frozenset({node})
    state.primary = node
    state.reasons.append(
        f"no GPUs: {counted(nprocs, 'rank')} spread evenly over the nodes "
        "with allowed CPUs "
        f"({format_ids(frozenset(spread))}); rank {state.rank} is on node {node}"
    )


def place(
    topology: Topology,
    rank: int,
    *,
    nprocs: int,
    gpu: Optional[int],
    explicit_gpu: bool,
    shared_by: Mapping[int, str],
    node_set: Optional[frozenset[int]],
) -> RankState:
    """Rank ``rank``'s GPU and CPU node(s): a nodes override, its GPU, or an even spread.

    ``shared_by`` is :func:`sharing_ranks` of every rank's GPU, computed
    once for all ranks.
    """
    state = RankState(rank=rank)
    _choose_gpu(
        state,
        topology,
        gpu=gpu,
        explicit=explicit_gpu,
        nprocs=nprocs,
        shared_by=shared_by,
    )
    if node_set is not None:
        _place_on_override(topology, state, node_set)
    elif state.gpu is not None:
        place_gpu(topology, state, state.gpu)
    else:
        _place_without_gpu(topology, state, nprocs)
    return state
