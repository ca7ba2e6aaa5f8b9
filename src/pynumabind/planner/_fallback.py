"""``fallback="nearest"``: a rank whose GPU's node has no allowed CPU still gets CPUs.

A cpuset (a Slurm job's, a container's) may hold no CPU of the node a GPU
sits on: an A100 PCIe box whose job cpuset is node 0's CPUs, running one
worker per GPU on all eight.  The planner's rule is that a rank is never
silently unbound, so by default (``fallback="error"``) that rank's plan is a
:class:`~pynumabind.errors.PlanError` naming the node, the CPUs wanted and
the allowed ones.  Frameworks kill the worker on that error, and with it the
job, while their own binding would have started it unbound.

``fallback="nearest"`` keeps the rank bound and running instead (pure: a
placement in, a placement out):

* CPUs: the allowed CPUs of the nearest node that has any, by SLIT distance
  from the GPU's node (ties: the lowest id; unknown distances last); every
  CPU mode then works on that node as on the GPU's own;
* memory: the GPU's node when it has memory and is in the allowed mems,
  otherwise the nearest allowed node with memory (as for any node that
  cannot hold memory, :mod:`._memory`);
* one warning per rank, naming the GPU, its node, the allowed CPUs (the
  cpuset) and the node chosen.

It changes nothing for a rank whose GPU's node has an allowed CPU, for a
rank without GPU, for a ``nodes``/``cpus`` override (the user's choice
stands, and so do its errors) and in mode ``none`` (no CPUs are bound).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from .._text import format_ids
from ..model import FALLBACK_WARNING, CpuMode, Topology
from ._place import RankState, gpu_label, node_cpus

__all__ = ["FALLBACK_WARNING", "nearest_allowed_nodes", "place_nearest_allowed"]

#: How the fallback's warning starts (the binder logs such plan warnings at WARNING).


def nearest_allowed_nodes(
    topology: Topology, origin: frozenset[int]
) -> List[Tuple[int, Optional[int]]]:
    """Nodes with an allowed CPU, nearest to any of ``origin`` first (ties: lowest id)."""
    allowed = topology.allowed_cpus
    ranked: List[Tuple[int, Optional[int]]] = []
    for node in topology.cpu_nodes:
        if not topology.nodes[node].cpus & allowed:
            continue
        known = [d for d in (topology.distance(o, node) for o in origin) if d is not None]
        ranked.append((node, min(known) if known else None))
    ranked.sort(key=lambda item: (item[1] is None, item[1] or 0, item[0]))
    return ranked


def _wanted_cpus(topology: Topology, state: RankState, mode: CpuMode) -> frozenset[int]:
    """The CPUs the rank's mode takes from its GPU placement (before the allowed ones).

    As :mod:`._cpus` takes them: in mode ``node`` the GPU's affinity when
    the rank was placed by it, else its nodes' CPUs; mode ``socket`` widens
    those to their packages; the exclusive modes slice the nodes' CPUs.
    """
    by_affinity = state.affinity is not None and mode in (CpuMode.NODE, CpuMode.SOCKET)
    cpus = state.affinity if by_affinity else None
    cpus = node_cpus(topology, state.nodes) if cpus is None else cpus
    if mode is CpuMode.SOCKET:
        packages = {topology.cpus[c].package for c in cpus if c in topology.cpus}
        for package in packages:
            cpus = cpus | topology.package_cpus(package)
    return cpus


def place_nearest_allowed(topology: Topology, state: RankState, mode: CpuMode) -> None:
    """Move a rank whose GPU's placement has no allowed CPU to the nearest node that has.

    Leaves ``state`` alone when the CPUs ``mode`` would take for the GPU
    include an allowed one, when the rank has no GPU or no node, or when no
    node has an allowed CPU (the usual error then says so).
    """
    gpu = state.gpu
    if gpu is None or not state.nodes or state.error is not None:
        return
    if _wanted_cpus(topology, state, mode) & topology.allowed_cpus:
        return
    gpu_nodes = state.nodes
    ranked = nearest_allowed_nodes(topology, gpu_nodes)
    if not ranked:
        return
    best, distance = ranked[0]
    state.memory_nodes = gpu_nodes
    state.nodes = frozenset({best})
    state.primary = best
    state.affinity = None
    state.derived_multi = False
    shown = "unknown" if distance is None else str(distance)
    state.warn(
        f"{FALLBACK_WARNING}{gpu_label(gpu)} is on node(s) {format_ids(gpu_nodes)}, which have "
        f"no CPU in this process's allowed CPUs {format_ids(topology.allowed_cpus)} (its "
        f"cpuset); rank {state.rank} is bound to the nearest node with allowed CPUs, node "
        f"{best} (distance {shown}), and its memory stays on the GPU's node when allowed"
    )
