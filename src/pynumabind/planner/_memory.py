"""Each rank's memory nodes and policy.

The memory nodes are the nodes of the rank's CPUs (a ``nodes`` override names
them directly; ``fallback="nearest"`` names the GPU's node(s), see
:mod:`._fallback`).  A node without memory, or whose memory is outside the
allowed mems, is replaced by the nearest allowed node with memory (ties: CPU
nodes first, then the lowest id).  ``gpu_memory=True`` adds the GPU's own
memory node.  ``interleave`` uses ``interleave_nodes`` or, by default, these
same nodes; so does ``weighted-interleave``, whose ``weights`` (when given)
name its nodes instead, for every rank (checked against ``interleave_nodes``
and the machine in :mod:`._request`).  A policy that takes no nodes
(``local``, ``none``) gets none.  Whether a policy takes nodes, spreads or
takes weights, and how a reason names it, is its row in the policy table
(:mod:`pynumabind._mempolicy`); the rules here pick the nodes.
"""

from __future__ import annotations

from .._mempolicy import POLICIES, PolicyRow
from .._text import format_ids, named
from ..errors import PlanError
from ..model import MemoryPolicy, Topology
from ._place import RankState, nodes_of

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import List, Mapping, Optional, Tuple

__all__ = ["choose_mems", "own_memory_nodes"]


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


def _substitute(topology: Topology, state: RankState, n: int) -> Optional[int]:
    """The nearest allowed node with memory for node ``n``, which cannot be used itself."""
    why = (
        "has no memory (memory-less CPU node)"
        if not topology.nodes[n].has_memory
        else f"has memory outside the allowed mems {format_ids(topology.allowed_mems)}"
    )
    ranked = _nearest_memory_nodes(topology, n)
    if not ranked:
        state.warn(f"node {n} {why} and no allowed node has memory")
        return None
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
    return other


def _memory_nodes(topology: Topology, state: RankState, base: frozenset[int]) -> frozenset[int]:
    out = set()
    for n in sorted(base):
        info = topology.nodes.get(n)
        if info is None:
            continue
        if info.has_memory and n in topology.allowed_mems:
            out.add(n)
            continue
        other = _substitute(topology, state, n)
        if other is not None:
            out.add(other)
    return frozenset(out)


def _gpu_memory_node(topology: Topology, state: RankState) -> Optional[int]:
    """The GPU's own memory node when it can be added, else None with a warning."""
    gpu_node = state.gpu_memory_node
    if state.gpu is None or gpu_node is None:
        state.warn("gpu_memory requested but the GPU has no NUMA memory node of its own")
    elif gpu_node not in topology.nodes or not topology.nodes[gpu_node].has_memory:
        state.warn(f"gpu_memory requested but GPU memory node {gpu_node} has no memory here")
    elif gpu_node not in topology.allowed_mems:
        state.warn(
            f"gpu_memory requested but GPU memory node {gpu_node} is outside the allowed "
            f"mems {format_ids(topology.allowed_mems)}"
        )
    else:
        state.reasons.append(f"gpu_memory: adding the GPU's own memory node {gpu_node}")
        return gpu_node
    return None


def _weights_reason(
    row: PolicyRow, nodes: frozenset[int], weights: Optional[Mapping[int, int]]
) -> str:
    """How a weighted policy's weights take effect, for the plan's reasons."""
    if weights is None:
        return (
            f"{row.policy} without weights: a process follows the kernel's system-wide "
            f"weights for {named('node', nodes)} (read when it binds)"
        )
    from .._weights import format_weights  # a weighted plan's only: a bind in mode node never

    return (
        f"weights {format_weights(weights)} (given): a buffer (bind_memory) is placed by "
        "them exactly; a process's policy follows the kernel's system-wide weights, which "
        "the bind compares with them and reports when they differ"
    )


def _given_nodes(
    row: PolicyRow,
    interleave_nodes: Optional[frozenset[int]],
    weights: Optional[Mapping[int, int]],
) -> Optional[frozenset[int]]:
    """The nodes the options name for the policy (weights, else interleave_nodes), or None."""
    if row.weighted and weights is not None:
        return frozenset(weights)
    if row.spreads and interleave_nodes is not None:
        return interleave_nodes
    return None


def _base_nodes(topology: Topology, state: RankState, nodes_given: bool) -> frozenset[int]:
    """The nodes the rank's memory nodes start from (before substitutes and gpu_memory)."""
    if nodes_given or state.cpus is None:
        return state.nodes  # a nodes override names the memory nodes too
    if state.memory_nodes is not None:
        return state.memory_nodes  # fallback nearest: the GPU's node(s), when allowed
    return nodes_of(topology, state.cpus)


def own_memory_nodes(
    topology: Topology,
    state: RankState,
    *,
    policy: MemoryPolicy,
    gpu_memory: bool,
    nodes_given: bool,
) -> Optional[frozenset[int]]:
    """The rank's own memory nodes: its nodes' memory (or substitutes), and gpu_memory's node.

    None when the rank has no known node (warned: its ``policy`` is left
    alone); a PlanError when none of them can be used.
    """
    base = _base_nodes(topology, state, nodes_given)
    if not base:
        state.warn(
            f"rank {state.rank} has no known node: memory policy left alone instead of "
            f"{policy.value}"
        )
        return None
    chosen = set(_memory_nodes(topology, state, base))
    if gpu_memory:
        gpu_node = _gpu_memory_node(topology, state)
        if gpu_node is not None:
            chosen.add(gpu_node)
    if not chosen:
        raise PlanError(
            f"rank {state.rank}: no allowed memory node for node(s) {format_ids(base)} "
            f"(allowed mems {format_ids(topology.allowed_mems)})"
        )
    return frozenset(chosen)


def choose_mems(
    topology: Topology,
    state: RankState,
    *,
    policy: MemoryPolicy,
    interleave_nodes: Optional[frozenset[int]],
    gpu_memory: bool,
    nodes_given: bool,
    weights: Optional[Mapping[int, int]] = None,
) -> Tuple[frozenset[int], MemoryPolicy]:
    """The rank's memory nodes and the policy actually planned (``none`` when no node is known)."""
    row = POLICIES[policy]
    if not row.takes_nodes:
        state.reasons.append(f"memory policy {row.described}")
        return frozenset(), policy
    given = _given_nodes(row, interleave_nodes, weights)
    if given is not None:
        state.reasons.append(
            f"memory policy {policy.value} across the given nodes {format_ids(given)}"
        )
        if row.weighted:
            state.reasons.append(_weights_reason(row, given, weights))
        return given, policy
    frozen = own_memory_nodes(
        topology, state, policy=policy, gpu_memory=gpu_memory, nodes_given=nodes_given
    )
    if frozen is None:
        return frozenset(), MemoryPolicy.NONE
    state.reasons.append(f"memory policy {row.described}: {named('node', frozen)}")
    if row.weighted:
        state.reasons.append(_weights_reason(row, frozen, None))
    return frozen, policy
