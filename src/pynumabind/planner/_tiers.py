"""``tiers="all"``: a rank's memory over its own nodes and the nearest slower memory tier.

Plain node binding is the default (``tiers="local"``, or not given).  With
``tiers="all"`` each rank's memory policy is weighted interleave over:

* **its own memory nodes**, the ones any plan gives it
  (:func:`._memory.own_memory_nodes`: the nodes of its CPUs, a substitute for
  a node without memory, the GPU's memory node under ``gpu_memory``); and
* **the tier nodes**: memory-only nodes (memory, no CPUs) in the allowed
  mems, that are no GPU's own memory node (a Grace/GB200 HBM node is
  ``gpu_memory``'s to add), whose memory tier (:attr:`NumaNode.tier
  <pynumabind.model.NumaNode.tier>`, the kernel's ``memory_tierN``) is slower
  -- a higher number -- than the tier of every own node.  Of those, the
  nearest: by SLIT distance from the nearest own node, a node at an unknown
  distance after every known one.  Ties: the faster tier (the lower number)
  first; then every node of that tier at that distance is taken (two CXL
  expanders equally near a socket are both used), so the choice never
  depends on a node id.

Weights, in this order:

1. the ``weights`` given (``{0: 3, 1: 3, 2: 1}``): each rank takes the
   weights of its own nodes (a weight for a node of another rank is that
   rank's; a node of the rank without a weight is a PlanError naming it);
2. none given: the plan carries no weights, and the process follows the
   kernel's system-wide weights, read when it binds
   (:func:`pynumabind.binding._apply.policy_request`, through
   :mod:`pynumabind._os.weights`): that is what ``MPOL_WEIGHTED_INTERLEAVE``
   does, Linux having no per-task weights.  The kernel's weights are 1 for
   every node unless set (equal); in its ``auto`` mode (Linux 6.16+) the
   kernel derives them from HMAT's bandwidth itself.  pynumabind computes no
   weights of its own from HMAT for a process: its policy could not carry
   them (a bind would only report them as differing from the kernel's).

When nothing can be added -- no node has a known tier (a kernel without
memory tiering, a snapshot written before nodes carried a tier), the rank's
own nodes have no known tier, or no allowed memory-only node is in a slower
tier -- the rank gets the plan it would get without ``tiers``: the policy
given, else ``weighted-interleave`` over the weights' nodes when weights are
given, else ``preferred``; and one warning says why.

What does not go with ``tiers="all"`` is refused before any rank is planned
(:mod:`._request`): another policy given explicitly (``bind``,
``preferred``...: ``tiers="all"`` *is* weighted interleave) and
``interleave_nodes`` (both would name the nodes).
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Tuple

from .._text import format_ids, named
from ..errors import PlanError
from ..model import Detail, MemoryPolicy, Topology
from ._memory import own_memory_nodes
from ._place import RankState

__all__ = ["TIERS_WARNING", "choose_tier_mems", "tier_nodes"]

#: How the warning starts when ``tiers="all"`` has nothing to add for a rank.
TIERS_WARNING = "tiers all: "

_Key = Tuple[bool, int, int]


def _slowest_own_tier(topology: Topology, own: frozenset[int]) -> Optional[int]:
    """The highest tier number among ``own``; None when any of them has no known tier."""
    tiers = [topology.nodes[n].tier for n in own]
    if any(t is None for t in tiers):
        return None
    return max(t for t in tiers if t is not None)


def _distance(topology: Topology, own: frozenset[int], node: int) -> Optional[int]:
    """SLIT distance from the nearest of ``own`` to ``node``; None when no distance is known."""
    known = [d for d in (topology.distance(n, node) for n in own) if d is not None]
    return min(known) if known else None


def _slower_memory_only(topology: Topology, slowest: int) -> List[Tuple[int, int]]:
    """(node, tier) of the allowed memory-only nodes, no GPU's, in a tier above ``slowest``."""
    gpu_nodes = frozenset(g.memory_node for g in topology.gpus if g.memory_node is not None)
    return [
        (n, info.tier)
        for n, info in topology.nodes.items()
        if info.memory_only
        and n in topology.allowed_mems
        and n not in gpu_nodes
        and info.tier is not None
        and info.tier > slowest
    ]


def tier_nodes(topology: Topology, own: frozenset[int]) -> Tuple[frozenset[int], str]:
    """The tier nodes for a rank whose own memory nodes are ``own`` (see the module docstring).

    Returns the nodes (empty: none) and, for the reasons, why these (or why none).
    """
    if all(info.tier is None for info in topology.nodes.values()):
        below = "" if topology.detail is Detail.FULL else ", or a topology read below Detail.FULL"
        return frozenset(), (
            "no memory tiers are known here (a kernel without memory tiering, or a "
            f"snapshot written before nodes carried a tier{below})"
        )
    slowest = _slowest_own_tier(topology, own)
    if slowest is None:
        unknown = frozenset(n for n in own if topology.nodes[n].tier is None)
        return frozenset(), f"the memory tier of {named('node', unknown)} is not known"
    ranked: List[Tuple[_Key, int]] = []
    for n, tier in _slower_memory_only(topology, slowest):
        distance = _distance(topology, own, n)
        ranked.append(((distance is None, distance or 0, tier), n))
    if not ranked:
        return frozenset(), (
            f"no allowed memory-only node is in a memory tier slower than "
            f"{named('node', own)}'s (tier {slowest})"
        )
    best = min(key for key, _ in ranked)
    chosen = frozenset(n for key, n in ranked if key == best)
    far_unknown, distance, tier = best
    far = "at an unknown distance" if far_unknown else f"at distance {distance}"
    return chosen, (
        f"the nearest slower memory tier's memory-only {named('node', chosen)} "
        f"(tier {tier}, {far}; {named('node', own)}: tier {slowest})"
    )


def _rank_weights(
    state: RankState, mems: frozenset[int], weights: Optional[Mapping[int, int]]
) -> Optional[Mapping[int, int]]:
    """The given weights of ``mems``; a node without one is a PlanError."""
    if weights is None:
        state.reasons.append(
            f"weighted interleave without weights: a process follows the kernel's system-wide "
            f"weights for {named('node', mems)} (read when it binds; 1 each unless set)"
        )
        return None
    missing = mems - frozenset(weights)
    if missing:
        raise PlanError(
            f"rank {state.rank}: tiers all spreads its memory over {named('node', mems)}, "
            f"but the weights give none for {named('node', missing)}; give a weight for "
            "each node a rank spreads over"
        )
    from .._weights import format_weights  # a weighted plan's only

    mine = {n: weights[n] for n in sorted(mems)}
    state.reasons.append(
        f"weights {format_weights(mine)} (given): a buffer (bind_memory) is placed by them "
        "exactly; a process's policy follows the kernel's system-wide weights, which the bind "
        "compares with them and reports when they differ"
    )
    return mine


def choose_tier_mems(
    topology: Topology,
    state: RankState,
    *,
    gpu_memory: bool,
    nodes_given: bool,
    weights: Optional[Mapping[int, int]],
) -> Optional[Tuple[frozenset[int], MemoryPolicy, Optional[Mapping[int, int]]]]:
    """The rank's memory nodes, policy and weights under ``tiers="all"``.

    None when there is nothing to add: the rank's reasons and warnings are
    as they were, plus one warning saying why, and the caller plans it as
    without tiers.
    """
    marks = len(state.reasons), len(state.warnings)
    policy = MemoryPolicy.WEIGHTED_INTERLEAVE
    own = own_memory_nodes(
        topology, state, policy=policy, gpu_memory=gpu_memory, nodes_given=nodes_given
    )
    if own is None:
        return frozenset(), MemoryPolicy.NONE, None
    added, why = tier_nodes(topology, own)
    if not added:
        del state.reasons[marks[0] :], state.warnings[marks[1] :]
        state.warn(f"{TIERS_WARNING}{why}: memory planned as without tiers")
        return None
    mems = own | added
    state.reasons.append(
        f"tiers all: memory policy weighted-interleave over {named('node', own)} and {why}: "
        f"nodes {format_ids(mems)}"
    )
    return mems, policy, _rank_weights(state, mems, weights)
