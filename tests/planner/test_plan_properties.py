"""Hypothesis invariants of the planner over generated machines."""

from __future__ import annotations

from typing import Dict, List, Optional, Union

from hypothesis import given
from hypothesis import strategies as st

from pynumabind import _mempolicy
from pynumabind.errors import ConfigError, PlanError
from pynumabind.model import MemoryPolicy, Plan, Topology
from pynumabind.planner import plan, plan_all

from ..support.topology_builders import topologies

MODES = ["node", "socket", "exclusive", "core-complex", "none"]
POLICIES = [policy.value for policy in MemoryPolicy]  # every one: the planner takes them all

Outcome = Union[Plan, Exception]


def default_nprocs(topo: Topology) -> int:
    if topo.gpus:
        return len(topo.gpus)
    return sum(1 for n in topo.cpu_nodes if topo.nodes[n].cpus & topo.allowed_cpus)


def outcomes(topo: Topology, n: int, **kw: object) -> List[Outcome]:
    out: List[Outcome] = []
    for r in range(n):
        try:
            out.append(plan(topo, r, **kw))  # type: ignore[arg-type]
        except (PlanError, ConfigError) as exc:
            out.append(exc)
    return out


def cores_of(topo: Topology, cpus: frozenset[int]) -> List[frozenset[int]]:
    """Physical cores within ``cpus`` (the test's own grouping)."""
    seen: Dict[frozenset[int], None] = {}
    for c in sorted(cpus):
        seen.setdefault(topo.cpus[c].core_cpus & cpus, None)
    return list(seen)


def check_plan(topo: Topology, p: Plan, mode: str, detected: bool = True) -> None:
    if p.cpus is not None:
        assert p.cpus, "a CPU binding is never empty"
        assert p.cpus <= topo.allowed_cpus
    else:
        assert mode == "none" or p.warnings, "an unbound rank always says why"
    assert p.mems <= topo.allowed_mems
    assert all(topo.nodes[n].has_memory for n in p.mems)
    if _mempolicy.POLICIES[p.policy].takes_nodes:
        assert p.mems
    else:
        assert p.mems == frozenset()
    if mode == "none":
        assert p.cpus is None
    gpu = p.gpu_info
    if detected and gpu is not None and gpu.numa_node in topo.nodes:
        node_cpus = topo.nodes[gpu.numa_node].cpus  # type: ignore[index]
        local = node_cpus & topo.allowed_cpus
        if local and mode in ("node", "exclusive", "core-complex"):
            assert p.cpus is not None and p.cpus <= node_cpus
            assert p.node == gpu.numa_node
        if local and mode == "node":
            assert p.cpus == local
        if local and mode == "socket":
            assert p.cpus is not None and local <= p.cpus


@given(
    topo=topologies(),
    mode=st.sampled_from(MODES),
    policy=st.sampled_from(POLICIES),
    nprocs=st.one_of(st.none(), st.integers(1, 10)),
    gpu_memory=st.booleans(),
)
def test_plans_are_valid_consistent_and_deterministic(
    topo: Topology, mode: str, policy: str, nprocs: Optional[int], gpu_memory: bool
) -> None:
    kw = dict(nprocs=nprocs, mode=mode, policy=policy, gpu_memory=gpu_memory)
    n = nprocs if nprocs is not None else default_nprocs(topo)
    each = outcomes(topo, n, **kw)
    try:
        everyone: Optional[List[Plan]] = plan_all(topo, **kw)  # type: ignore[arg-type]
    except (PlanError, ConfigError):
        everyone = None
        assert any(isinstance(o, Exception) for o in each)
    else:
        assert everyone == each, "plan(r) must equal plan_all()[r]"
        assert plan_all(topo, **kw) == everyone  # type: ignore[arg-type]
        # Same machine, maps built in the opposite order: same plans.
        shuffled = topo.replace(
            nodes=dict(reversed(list(topo.nodes.items()))),
            cpus=dict(reversed(list(topo.cpus.items()))),
        )
        assert plan_all(shuffled, **kw) == everyone  # type: ignore[arg-type]
    for r, o in enumerate(each):
        gpu = topo.gpus[r % len(topo.gpus)] if topo.gpus else None
        wanted = frozenset()
        if gpu is not None and gpu.numa_node in topo.nodes:
            wanted = topo.nodes[gpu.numa_node].cpus  # type: ignore[index]
            if mode == "socket":
                packages = {topo.cpus[c].package for c in wanted}
                wanted = frozenset(c for c in topo.cpus if topo.cpus[c].package in packages)
        if mode != "none" and wanted and not wanted & topo.allowed_cpus:
            assert isinstance(o, PlanError), "a GPU node outside the cpuset is an error"
            assert f"node(s) {gpu.numa_node}" in str(o)
        if isinstance(o, Plan):
            assert o.rank == r
            check_plan(topo, o, mode)
            if not topo.gpus:
                node = topo.nodes[o.node]  # type: ignore[index]
                assert node.cpus & topo.allowed_cpus, "memory-only nodes get no CPU ranks"


@given(
    topo=topologies(),
    mode=st.sampled_from(MODES),
    data=st.data(),
    nprocs=st.one_of(st.none(), st.integers(1, 6)),
)
def test_weights_name_every_ranks_memory_nodes(
    topo: Topology, mode: str, data: st.DataObject, nprocs: Optional[int]
) -> None:
    """Weighted interleave with weights: every rank's memory is the weights' nodes, as given;
    a weight on a node that cannot hold memory is the planner's error, never a plan."""
    nodes = sorted(topo.nodes)
    chosen = data.draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=4, unique=True))
    weights = {n: data.draw(st.integers(1, 255)) for n in chosen}
    usable = all(topo.nodes[n].has_memory and n in topo.allowed_mems for n in chosen)
    kw = dict(nprocs=nprocs, mode=mode, policy="weighted-interleave", weights=weights)
    try:
        plans = plan_all(topo, **kw)  # type: ignore[arg-type]
    except (PlanError, ConfigError) as exc:
        if not usable:
            assert "weights= names" in str(exc)
        return
    assert usable, "weights on a node without allowed memory were planned"
    for p in plans:
        check_plan(topo, p, mode)
        assert p.policy is MemoryPolicy.WEIGHTED_INTERLEAVE
        assert p.mems == frozenset(weights) and p.weights == weights
        assert p.to_dict()["weights"] == {str(n): w for n, w in sorted(weights.items())}
    # Without weights the same policy takes the plan's own nodes, and no weights.
    try:
        plain = plan_all(topo, nprocs=nprocs, mode=mode, policy="weighted-interleave")
    except (PlanError, ConfigError):
        return
    assert all(p.weights is None for p in plain)
    interleaved = plan_all(topo, nprocs=nprocs, mode=mode, policy="interleave")
    assert [p.mems for p in plain] == [p.mems for p in interleaved]


@given(
    topo=topologies(),
    mode=st.sampled_from(["exclusive", "core-complex"]),
    nprocs=st.one_of(st.none(), st.integers(1, 12)),
)
def test_exclusive_slices_are_disjoint_whole_cores(
    topo: Topology, mode: str, nprocs: Optional[int]
) -> None:
    try:
        plans = plan_all(topo, nprocs=nprocs, mode=mode)
    except (PlanError, ConfigError):
        return
    by_node: Dict[int, List[Plan]] = {}
    for p in plans:
        if p.cpus is not None:
            assert p.node is not None and p.cpus <= topo.nodes[p.node].cpus
            by_node.setdefault(p.node, []).append(p)
    enough = all(
        len(members) <= len(cores_of(topo, topo.nodes[n].cpus & topo.allowed_cpus))
        for n, members in by_node.items()
    )
    if not enough:
        return
    bound = [p for p in plans if p.cpus is not None]
    for i, a in enumerate(bound):
        for b in bound[i + 1 :]:
            assert not (a.cpus and b.cpus and a.cpus & b.cpus), (a.rank, b.rank)
        assert a.cpus is not None
        for c in a.cpus:
            assert topo.cpus[c].core_cpus & topo.allowed_cpus <= a.cpus, "SMT siblings together"
    if mode == "exclusive":
        for n, members in by_node.items():
            counts = [len(cores_of(topo, p.cpus)) for p in members if p.cpus is not None]
            assert max(counts) - min(counts) <= 1, "balanced to within one core"
            # Contiguous: each slice is a run of the node's cores in order.
            order = cores_of(topo, topo.nodes[n].cpus & topo.allowed_cpus)
            positions = {c: i for i, core in enumerate(order) for c in core}
            for p in members:
                assert p.cpus is not None
                idx = sorted({positions[c] for c in p.cpus})
                assert idx == list(range(idx[0], idx[-1] + 1))


@st.composite
def with_overrides(draw: st.DrawFn) -> tuple:
    topo = draw(topologies())
    n = draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["nodes", "cpus", "both"]))
    nodes = None
    cpus = None
    ids = sorted(topo.nodes)
    if kind in ("nodes", "both"):
        nodes = [draw(st.sampled_from([*ids, 99])) for _ in range(n)]
    if kind in ("cpus", "both"):
        online = [*sorted(topo.cpus), 9999]
        cpus = [
            frozenset(draw(st.sets(st.sampled_from(online), min_size=1, max_size=4)))
            for _ in range(n)
        ]
    return topo, nodes, cpus


@given(
    case=with_overrides(),
    mode=st.sampled_from(MODES),
    policy=st.sampled_from(POLICIES),
)
def test_overrides_are_validated_and_respected(case: tuple, mode: str, policy: str) -> None:
    topo, nodes, cpus = case
    n = len(nodes if nodes is not None else cpus)
    kw = dict(mode=mode, policy=policy, nodes=nodes, cpus=cpus)
    each = outcomes(topo, n, **kw)
    try:
        everyone = plan_all(topo, **kw)  # type: ignore[arg-type]
    except (PlanError, ConfigError):
        assert any(isinstance(o, Exception) for o in each)
    else:
        assert everyone == each
    for r, o in enumerate(each):
        if nodes is not None and nodes[r] not in topo.nodes:
            assert isinstance(o, ConfigError) or (isinstance(o, PlanError) and "99" in str(o))
        if not isinstance(o, Plan):
            continue
        check_plan(topo, o, mode, detected=False)
        if cpus is not None:
            assert o.cpus == cpus[r] & topo.allowed_cpus
        elif nodes is not None and o.cpus is not None and mode != "socket":
            assert o.cpus <= topo.nodes[nodes[r]].cpus
