"""Each rank's CPUs, one function per mode.

* ``node``: all allowed CPUs of the rank's node(s), or of its GPU's CPU
  affinity when the rank was placed by it; with ``priority_cores``, only the
  highest-performance cores among them (ACPI CPPC ``highest_perf``: Intel
  priority cores), where they differ -- what vLLM's binding does on such
  Xeons; where they do not (or it is unknown) nothing changes, and the
  reasons say so.
* ``socket``: all allowed CPUs of the package(s) of those CPUs.
* ``exclusive``: disjoint, contiguous whole-core slices among the ranks on
  the same node(s), balanced to within one core (:mod:`._sets`); a GPU
  affinity spanning nodes is narrowed to its primary node, except for GPUs
  whose NUMA node is unknown (a VM whose GPUs report every CPU): the
  affinity is all there is to go on, so their ranks are dealt out over the
  nodes it spans, each to the node with the fewest ranks so far, and slice
  it with the ranks already there.  No node idles while another is packed.
* ``core-complex``: the same, but whole L3 groups per rank when there are
  enough, else exclusive within groups.
* In both exclusive modes, where the cores being sliced differ in highest
  performance, ranks take the highest-performance cores first, in turn
  (:func:`._sets.by_performance`), and the reasons say so.
* ``none``: CPU affinity left alone.

A ``cpus`` override wins over every mode but ``none`` (which it
contradicts).  When it puts a rank on a node other than its GPU's, the plan
warns, and the memory policy follows the CPUs (the nodes the rank will run
on), not the GPU: that is pynumabind's choice; vLLM's binding follows the
GPU instead.  A ``nodes`` override names the memory nodes directly.

Plans never leave the allowed CPUs; an empty intersection is a
:class:`~pynumabind.errors.PlanError`, never a silently unbound worker.
"""

from __future__ import annotations

import functools

from .._text import counted, format_ids, named
from ..errors import ConfigError, PlanError
from ..model import CpuMode, Topology
from ._place import RankState, node_cpus, nodes_of, primary_node, rank_ids

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import AbstractSet, Dict, List, Mapping, Optional, Tuple

__all__ = ["choose_cpus"]

_EXCLUSIVE = (CpuMode.EXCLUSIVE, CpuMode.CORE_COMPLEX)


def _empty(topology: Topology, state: RankState, wanted: frozenset[int], what: str) -> PlanError:
    """The never-silently-unbound error: names the node, the CPUs wanted and allowed."""
    return PlanError(
        f"rank {state.rank}: {what}node(s) {format_ids(state.nodes)} have CPUs "
        f"{format_ids(wanted)}, but this process may only use CPUs "
        f"{format_ids(topology.allowed_cpus)} (affinity/cpuset): the intersection is empty"
    )


def _from_override(
    topology: Topology, state: RankState, wanted: frozenset[int], nodes_given: bool
) -> None:
    allowed = topology.allowed_cpus
    got = wanted & allowed
    if not got:
        state.error = PlanError(
            f"rank {state.rank}: cpus override {format_ids(wanted)} has no CPU in this "
            f"process's allowed CPUs {format_ids(allowed)} (affinity/cpuset)"
        )
        return
    if got != wanted:
        state.warn(
            f"cpus override for rank {state.rank}: CPU(s) {format_ids(wanted - got)} are "
            f"outside the allowed CPUs {format_ids(allowed)} and are dropped"
        )
    state.cpus = got
    state.reasons.append(f"cpus override: rank {state.rank} gets {named('CPU', got)}")
    if not nodes_given:
        gpu_nodes = state.nodes  # where the GPU placed the rank, before the override
        state.nodes = nodes_of(topology, got)
        state.primary = primary_node(topology, state.nodes, got) if state.nodes else None
        off = state.nodes - gpu_nodes
        if state.gpu is not None and gpu_nodes and off:
            state.warn(
                f"cpus override puts rank {state.rank} on node(s) {format_ids(off)}, away from "
                f"its GPU {state.gpu.index} ({state.gpu.pci_bus_id}) on node(s) "
                f"{format_ids(gpu_nodes)}; its memory policy follows the CPUs"
            )


def _priority(topology: Topology, state: RankState) -> None:
    """``priority_cores``: keep only the highest-performance cores of ``state.cpus``."""
    from . import _sets  # here, as in each mode that needs it: mode node's bind never does

    got = state.cpus or frozenset()
    core_list = _sets.cores(got, lambda cpu: _core_of(topology, cpu))
    perfs = _sets.core_perf(core_list, lambda cpu: _perf_of(topology, cpu))
    if perfs is None:
        state.reasons.append(
            "priority_cores: these cores do not differ in highest performance (or the machine "
            "does not say: no acpi_cppc/highest_perf); all of them are used"
        )
        return
    top = _sets.union(_sets.fastest(core_list, perfs))
    state.cpus = top
    state.reasons.append(
        f"priority_cores: only the highest-performance cores (CPPC highest_perf "
        f"{_sets.levels(perfs)}): CPUs {format_ids(top)}"
    )


def _mode_node(topology: Topology, state: RankState, priority_cores: bool = False) -> None:
    _node_cpus(topology, state)
    if priority_cores and state.cpus:
        _priority(topology, state)


def _node_cpus(topology: Topology, state: RankState) -> None:
    allowed = topology.allowed_cpus
    if state.affinity is not None:
        got = state.affinity & allowed
        if not got:
            state.error = PlanError(
                f"rank {state.rank}: its GPU's CPU affinity {format_ids(state.affinity)} (on "
                f"node(s) {format_ids(state.nodes)}) has no CPU in this process's allowed "
                f"CPUs {format_ids(allowed)} (affinity/cpuset)"
            )
            return
        state.cpus = got
        state.reasons.append(
            f"mode node: the allowed CPUs of the GPU's affinity: {format_ids(got)}"
        )
        return
    wanted = node_cpus(topology, state.nodes)
    got = wanted & allowed
    if not got:
        state.error = _empty(topology, state, wanted, "its ")
        return
    state.cpus = got
    state.reasons.append(
        f"mode node: all allowed CPUs of {named('node', state.nodes)}: {format_ids(got)}"
    )


def _mode_socket(topology: Topology, state: RankState) -> None:
    wanted = node_cpus(topology, state.nodes)
    source = state.affinity if state.affinity is not None else wanted
    packages = frozenset(topology.cpus[c].package for c in source if c in topology.cpus)
    if packages:
        from . import _sets

        wanted = _sets.union(topology.package_cpus(p) for p in packages)
    else:
        state.reasons.append(
            f"mode socket: packages of {named('node', state.nodes)} unknown; using the node's CPUs"
        )
    got = wanted & topology.allowed_cpus
    if not got:
        state.error = _empty(topology, state, wanted, "the package(s) of its ")
        return
    state.cpus = got
    state.reasons.append(
        f"mode socket: all allowed CPUs of {named('package', packages)} "
        f"({named('node', nodes_of(topology, got))}): {format_ids(got)}"
    )


def _slice_keys(
    topology: Topology, mode: CpuMode, states: List[RankState]
) -> Dict[int, frozenset[int]]:
    """Each rank's slice key (by rank): the node set it shares with its peers.

    A spanning affinity slices its primary node; but ranks whose GPU's own
    node is unknown, and whose affinity spans nodes, are dealt out over the
    spanned nodes that have allowed CPUs, in rank order, each to the node
    with the fewest ranks so far (ties: lowest id): each lands on one node,
    and no node idles while another is packed.
    """
    keys: Dict[int, frozenset[int]] = {}
    spans: Dict[frozenset[int], List[RankState]] = {}
    for s in states:
        if not (s.derived_multi and s.primary is not None):
            keys[s.rank] = s.nodes
        elif _node_unknown(topology, s):
            spans.setdefault(s.nodes, []).append(s)
        else:
            keys[s.rank] = frozenset({s.primary})
            s.reasons.append(
                f"mode {mode.value}: slicing one node, the primary node {s.primary} "
                f"of {format_ids(s.nodes)}"
            )
    load: Dict[int, int] = {}  # ranks already slicing each single node
    for key in keys.values():
        if len(key) == 1:
            (node,) = key
            load[node] = load.get(node, 0) + 1
    for span, members in spans.items():
        usable = [n for n in sorted(span) if topology.nodes[n].cpus & topology.allowed_cpus]
        primary = members[0].primary  # set: only ranks with a primary reach a span
        targets = usable or [min(span) if primary is None else primary]
        for s in sorted(members, key=lambda m: m.rank):
            node = min(targets, key=lambda n: (load.get(n, 0), n))
            load[node] = load.get(node, 0) + 1
            keys[s.rank] = frozenset({node})
            s.reasons.append(
                f"mode {mode.value}: the GPU's NUMA node is unknown; the ranks sharing its CPU "
                f"affinity are dealt out over its nodes {format_ids(frozenset(targets))}, each "
                f"to the one with the fewest ranks: rank {s.rank} slices node {node}"
            )
    return keys


def _node_unknown(topology: Topology, state: RankState) -> bool:
    gpu = state.gpu
    return gpu is not None and (gpu.numa_node is None or gpu.numa_node not in topology.nodes)


def _check_disjoint_groups(groups: Mapping[frozenset[int], List[RankState]]) -> None:
    keys = sorted(groups, key=lambda k: (min(k), sorted(k)))
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            if a & b:
                ra, rb = groups[a][0].rank, groups[b][0].rank
                raise ConfigError(
                    "exclusive modes need the ranks' node sets to be equal or disjoint: "
                    f"rank {ra} has nodes {format_ids(a)} and rank {rb} has {format_ids(b)}"
                )


def _slices(
    topology: Topology, mode: CpuMode, pool: frozenset[int], ranks: int, where: str
) -> Tuple[List[frozenset[int]], List[str], bool, int]:
    """Per-rank slices of ``pool``, the notes, whether cores are shared, the core count."""
    from . import _sets

    cores = _sets.cores(pool, lambda cpu: _core_of(topology, cpu))
    perf_of = functools.partial(_perf_of, topology)
    if mode is CpuMode.EXCLUSIVE:
        slices, note, shared = _sets.exclusive(cores, ranks, where, perf_of)
        return slices, [note], shared, len(cores)
    groups = _sets.l3_groups(cores, lambda cpu: _l3_of(topology, cpu))
    slices, notes, shared = _sets.core_complex(cores, groups, ranks, where, perf_of)
    return slices, notes, shared, len(cores)


def _core_of(topology: Topology, cpu: int) -> frozenset[int]:
    info = topology.cpus.get(cpu)
    return info.core_cpus if info is not None else frozenset({cpu})


def _perf_of(topology: Topology, cpu: int) -> Optional[int]:
    info = topology.cpus.get(cpu)
    return info.highest_perf if info is not None else None


def _l3_of(topology: Topology, cpu: int) -> frozenset[int]:
    info = topology.cpus.get(cpu)
    return info.l3 if info is not None else frozenset()


def _slice_group(
    topology: Topology, mode: CpuMode, key: frozenset[int], members: List[RankState]
) -> None:
    wanted = node_cpus(topology, key)
    pool = wanted & topology.allowed_cpus
    if not pool:
        for s in members:
            s.error = _empty(topology, s, wanted, "its ")
        return
    where = named("node", key)
    slices, notes, shared, core_count = _slices(topology, mode, pool, len(members), where)
    peers = rank_ids(s.rank for s in members)
    for position, (s, got) in enumerate(zip(members, slices)):
        s.cpus = got
        s.reasons.extend(notes)
        s.reasons.append(
            f"mode {mode.value}: rank {s.rank} alone on {where} gets {named('CPU', got)}"
            if len(members) == 1
            else f"mode {mode.value}: ranks {peers} share {where}; rank {s.rank} is "
            f"number {position} and gets {named('CPU', got)}"
        )
        if shared:
            s.warnings.append(
                f"{where}: {len(members)} ranks but only "
                f"{counted(core_count, 'allowed core')}: exclusive slices share "
                "physical cores"
            )


def _mode_exclusive(
    topology: Topology,
    mode: CpuMode,
    states: List[RankState],
    wanted: Optional[AbstractSet[int]],
) -> None:
    keys = _slice_keys(topology, mode, states)
    groups: Dict[frozenset[int], List[RankState]] = {}
    for s in states:
        groups.setdefault(keys[s.rank], []).append(s)
    _check_disjoint_groups(groups)
    for key, members in sorted(groups.items(), key=lambda kv: min(kv[0])):
        if wanted is None or any(s.rank in wanted for s in members):
            _slice_group(topology, mode, key, members)


def _live(
    states: List[RankState], mode: CpuMode, wanted: Optional[AbstractSet[int]]
) -> List[RankState]:
    """The ranks to give CPUs: without an error, and wanted (all sharing a node when slicing)."""
    live = [s for s in states if s.error is None]
    if wanted is not None and mode not in _EXCLUSIVE:
        live = [s for s in live if s.rank in wanted]
    return live


def choose_cpus(
    topology: Topology,
    mode: CpuMode,
    states: List[RankState],
    *,
    cpu_sets: Optional[Tuple[frozenset[int], ...]],
    nodes_given: bool,
    wanted: Optional[AbstractSet[int]] = None,
    priority_cores: bool = False,
) -> None:
    """Set each live rank's ``cpus`` (or its ``error``) by ``mode``.

    With ``wanted``, only those ranks (and, in the exclusive modes, the
    ranks sharing their node) get CPUs: planning one rank stays
    O(ranks on its node).
    """
    live = _live(states, mode, wanted)
    if mode is CpuMode.NONE:
        for s in live:
            s.reasons.append("mode none: CPU affinity left alone")
        return
    if cpu_sets is not None:
        for s in live:
            _from_override(topology, s, cpu_sets[s.rank], nodes_given)
        return
    placed = [s for s in live if s.nodes]  # unknown node: left unbound, already explained
    if mode in _EXCLUSIVE:
        _mode_exclusive(topology, mode, placed, wanted)
    else:
        for s in placed:
            if mode is CpuMode.NODE:
                _mode_node(topology, s, priority_cores)
            else:
                _mode_socket(topology, s)
