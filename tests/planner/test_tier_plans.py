"""``tiers="all"``: each rank's memory over its own nodes and the nearest slower memory tier.

The recorded 6.12 guest with firmware HMAT is the real kernel's answer (nodes 0-1 DRAM in
``memory_tier4``, node 2 memory only in ``memory_tier54``); this machine's own sysfs (one node,
one tier) has nothing to add.  Generated machines with generated tiers hold the rule's
invariants (the rule itself: ``pynumabind.planner._tiers``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from pynumabind import Options
from pynumabind.discovery import topology_from_sysfs
from pynumabind.discovery._environ import resolve
from pynumabind.errors import ConfigError, PlanError
from pynumabind.model import Detail, MemoryPolicy, NumaNode, Plan, Topology
from pynumabind.planner import local_ranks, plan, plan_all

from ..support.topology_builders import gb200_tray, gpu, make_topology, topologies

HMAT_TREE = Path(__file__).resolve().parents[1] / "machines" / "sysfs" / "qemu-6.12-hmat"
WEIGHTED = MemoryPolicy.WEIGHTED_INTERLEAVE
NOTHING = "tiers all: "


@pytest.fixture(scope="module")
def hmat() -> Topology:
    return topology_from_sysfs(str(HMAT_TREE))


def test_a_rank_on_node_0_interleaves_over_node_0_and_the_slow_node_2(hmat: Topology) -> None:
    first, second = plan_all(hmat, nprocs=2, tiers="all")
    assert (first.node, first.mems, first.policy, first.weights) == (0, {0, 2}, WEIGHTED, None)
    assert (second.node, second.mems, second.policy) == (1, {1, 2}, WEIGHTED)
    assert first.warnings == second.warnings == ()
    said = (
        "tiers all: memory policy weighted-interleave over node 0 and the nearest slower "
        "memory tier's memory-only node 2 (tier 54, at distance 40; node 0: tier 4): nodes 0,2"
    )
    assert said in first.reasons
    assert any("follows the kernel's system-wide weights for nodes 0,2" in r for r in first.reasons)
    assert first.to_dict()["policy"] == "weighted-interleave"


def test_tiers_local_and_not_given_are_today_s_plan(hmat: Topology) -> None:
    today = plan_all(hmat, nprocs=2)
    assert plan_all(hmat, nprocs=2, tiers="local") == today
    assert plan_all(hmat, nprocs=2, tiers="LOCAL") == today
    preferred = MemoryPolicy.PREFERRED
    assert [(p.mems, p.policy) for p in today] == [({0}, preferred), ({1}, preferred)]


def test_given_weights_give_each_rank_its_own_nodes_weights(hmat: Topology) -> None:
    first, second = plan_all(hmat, nprocs=2, tiers="all", weights={0: 3, 1: 5, 2: 1})
    assert first.weights == {0: 3, 2: 1} and second.weights == {1: 5, 2: 1}
    assert "weights 0:3,2:1 (given)" in " ".join(first.reasons)
    same = plan(hmat, 0, nprocs=2, tiers="all", policy="weighted-interleave", weights="0:3,2:1")
    assert same == first
    with pytest.raises(PlanError, match=r"rank 1: .* the weights give none for node 1"):
        plan(hmat, 1, nprocs=2, tiers="all", weights={0: 3, 2: 1})


def test_a_process_driving_two_gpus_gets_the_union_and_both_nodes_weights(hmat: Topology) -> None:
    """Two GPUs added to the recorded machine, one on node 0 and one on node 1."""
    two = hmat.replace(gpus=(gpu(0, 0), gpu(1, 1)))
    union = plan(two, gpus=[0, 1], tiers="all", weights={0: 3, 1: 3, 2: 1})
    assert (union.mems, union.policy) == ({0, 1, 2}, WEIGHTED)
    assert union.weights == {0: 3, 1: 3, 2: 1}
    assert plan(two, gpus=[0, 1], tiers="all").weights is None


@pytest.mark.parametrize("policy", ["bind", "preferred", "interleave", "local", "none"])
def test_another_policy_given_is_a_config_error_naming_both(hmat: Topology, policy: str) -> None:
    with pytest.raises(ConfigError) as caught:
        plan(hmat, 0, nprocs=2, tiers="all", policy=policy)
    assert str(caught.value).startswith(
        f"tiers='all' spreads memory by weighted interleave over the tiers, which contradicts "
        f"policy={policy!r}"
    )


def test_interleave_nodes_with_tiers_all_is_a_config_error(hmat: Topology) -> None:
    with pytest.raises(ConfigError, match="picks each rank's memory nodes itself"):
        plan(hmat, 0, nprocs=2, tiers="all", interleave_nodes="0,2")


@pytest.mark.parametrize("bad", ["some", "", "al l", 1, True])
def test_a_bad_tiers_value_is_a_config_error_naming_it(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"invalid tiers .*; choose one of: local, all"):
        Options(tiers=bad)  # type: ignore[arg-type]


def test_the_environment_gives_tiers_and_is_named(hmat: Topology) -> None:
    options = resolve({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "PYNUMABIND_TIERS": " ALL\n"})
    assert options.tiers == "all" and options.from_environment("tiers") == "PYNUMABIND_TIERS"
    assert plan(hmat, options=options).mems == {0, 2}
    for blank in ("", " ", "\t\n"):  # a template's blank: unset, by the one rule
        assert resolve({"LOCAL_RANK": "0", "PYNUMABIND_TIERS": blank}).tiers is None
    given = resolve({"LOCAL_RANK": "0", "PYNUMABIND_TIERS": "all"}, Options(tiers="local"))
    assert given.tiers == "local" and given.from_environment("tiers") is None  # arguments win
    with pytest.raises(ConfigError, match=r"invalid PYNUMABIND_TIERS='every'; choose one of"):
        resolve({"LOCAL_RANK": "0", "PYNUMABIND_TIERS": "every"})
    env = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "PYNUMABIND_TIERS": "all"}
    with pytest.raises(ConfigError) as caught:
        plan(hmat, options=resolve(dict(env, PYNUMABIND_POLICY="bind")))
    assert str(caught.value).startswith(
        "PYNUMABIND_TIERS=all spreads memory by weighted interleave over the tiers, which "
        "contradicts PYNUMABIND_POLICY=bind"
    )
    assert "tiers from PYNUMABIND_TIERS" in str(caught.value)


def test_this_machine_has_no_slower_tier_so_the_plan_is_plain_with_one_warning() -> None:
    """Read from this machine's sysfs: one node (0), so nothing slower to spread over."""
    live = topology_from_sysfs("/sys")
    ranks = len(live.cpu_nodes)
    for p, plain in zip(plan_all(live, tiers="all"), plan_all(live)):
        assert (p.mems, p.policy, p.weights) == (plain.mems, MemoryPolicy.PREFERRED, None)
        assert len(p.warnings) == len(plain.warnings) + 1
        (said,) = [w for w in p.warnings if w.startswith(NOTHING)]
        assert said.endswith(": memory planned as without tiers")
    assert ranks >= 1


def test_no_known_tier_says_so_and_weights_keep_their_plain_meaning() -> None:
    """A snapshot written before nodes carried a tier (the GB200 tray example has none)."""
    tray = gb200_tray()
    assert all(n.tier is None for n in tray.nodes.values())
    p = plan(tray, 0, tiers="all")
    assert p.policy is MemoryPolicy.PREFERRED
    assert p.warnings[-1] == (
        "tiers all: no memory tiers are known here (a kernel without memory tiering, or a "
        "snapshot written before nodes carried a tier): memory planned as without tiers"
    )
    weighted = plan(tray, 0, tiers="all", weights={0: 3, 1: 1})
    assert (weighted.policy, weighted.mems, weighted.weights) == (WEIGHTED, {0, 1}, {0: 3, 1: 1})


def test_a_topology_read_without_tiers_says_so() -> None:
    """A bind's detail for mode node reads no tier: planned from it, the warning says why."""
    cheap = topology_from_sysfs(str(HMAT_TREE), detail=Detail.NODES)
    p = plan(cheap, 0, nprocs=2, tiers="all")
    assert p.policy is MemoryPolicy.PREFERRED and p.mems == {0}
    assert p.warnings[-1].endswith(
        "or a topology read below Detail.FULL): memory planned as without tiers"
    )


def _tiered(topology: Topology, tiers: Dict[int, int]) -> Topology:
    nodes = {
        n: NumaNode(
            id=n,
            cpus=info.cpus,
            memory_total=info.memory_total,
            memory_free=info.memory_free,
            has_memory=info.has_memory,
            distances=info.distances,
            tier=tiers.get(n) if info.has_memory else None,
        )
        for n, info in topology.nodes.items()
    }
    return topology.replace(nodes=nodes)


def test_gpu_memory_nodes_are_never_tier_nodes() -> None:
    """GB200: the GPUs' HBM nodes are memory only, but they are gpu_memory's, not a tier's."""
    tray = gb200_tray()
    hbm = sorted(n for n, info in tray.nodes.items() if info.memory_only)
    assert hbm and set(hbm) <= {g.memory_node for g in tray.gpus}
    slow = _tiered(tray, {0: 4, 1: 4, **{n: 54 for n in hbm}})
    p = plan(slow, 0, tiers="all")
    assert p.policy is MemoryPolicy.PREFERRED and p.mems == {0}
    assert p.warnings[-1] == (
        "tiers all: no allowed memory-only node is in a memory tier slower than node 0's "
        "(tier 4): memory planned as without tiers"
    )


def _far(a: int, b: int) -> int:
    table = {(0, 1): 21, (0, 2): 30, (0, 3): 30, (0, 4): 20, (1, 2): 25, (1, 3): 25, (1, 4): 25}
    return 10 if a == b else table.get((min(a, b), max(a, b)), 40)


def test_nearest_by_distance_then_the_faster_tier_and_every_equal_node() -> None:
    """Node 0: node 4 is nearest (20), slower tier or not.  Node 1: nodes 2, 3 and 4 at 25;
    the faster tier (54) wins, and both of its nodes are taken."""
    topo = make_topology({0: "0-1", 1: "2-3", 2: "", 3: "", 4: ""}, distance=_far)
    topo = _tiered(topo, {0: 4, 1: 4, 2: 54, 3: 54, 4: 72})
    first, second = plan_all(topo, tiers="all")
    assert (first.mems, second.mems) == ({0, 4}, {1, 2, 3})
    assert "memory-only node 4 (tier 72, at distance 20; node 0: tier 4)" in " ".join(first.reasons)
    cut = topo.replace(allowed_mems=frozenset({0, 1, 3, 4}))  # a cpuset without node 2
    assert plan(cut, 1, tiers="all").mems == {1, 3}
    unknown = _tiered(topo, {0: 4, 2: 54, 3: 54, 4: 72})  # node 1's tier not known
    assert (
        plan(unknown, 1, tiers="all")
        .warnings[-1]
        .startswith("tiers all: the memory tier of node 1 is not known")
    )


TIER_NUMBERS = [4, 5, 54, 72]

Outcome = Union[Plan, Tuple[str, str]]


def _outcomes(topo: Topology, n: int, **kw: object) -> List[Outcome]:
    out: List[Outcome] = []
    for r in range(n):
        try:
            out.append(plan(topo, r, **kw))  # type: ignore[arg-type]
        except (PlanError, ConfigError) as exc:
            out.append((type(exc).__name__, str(exc)))
    return out


def _expected_tier_nodes(topo: Topology, own: frozenset[int]) -> frozenset[int]:
    """The rule, written again: memory-only, allowed, no GPU's, slower than every own node;
    the nearest by SLIT from the nearest own node (unknown last), then the faster tier."""
    own_tiers = [topo.nodes[n].tier for n in own]
    if not own or None in own_tiers:
        return frozenset()
    slowest = max(t for t in own_tiers if t is not None)
    gpu_nodes = {g.memory_node for g in topo.gpus}
    found = {}
    for n, info in topo.nodes.items():
        if info.cpus or not info.has_memory or n not in topo.allowed_mems or n in gpu_nodes:
            continue
        if info.tier is None or info.tier <= slowest:
            continue
        known = [d for d in (topo.distance(o, n) for o in own) if d is not None]
        found[n] = (not known, min(known) if known else 0, info.tier)
    if not found:
        return frozenset()
    best = min(found.values())
    return frozenset(n for n, key in found.items() if key == best)


@given(
    topo=topologies(),
    data=st.data(),
    mode=st.sampled_from(["node", "socket", "exclusive", "none"]),
    nprocs=st.one_of(st.none(), st.integers(1, 6)),
    gpu_memory=st.booleans(),
)
def test_tier_plans_are_the_plain_plans_plus_the_nearest_slower_tier(
    topo: Topology,
    data: st.DataObject,
    mode: str,
    nprocs: Optional[int],
    gpu_memory: bool,
) -> None:
    tiers = {  # memory-only nodes mostly slower, as CXL is; any order can still be drawn
        n: data.draw(st.sampled_from(TIER_NUMBERS[::-1] if info.memory_only else TIER_NUMBERS))
        for n, info in topo.nodes.items()
    }
    if data.draw(st.booleans()):
        tiers = {n: t for n, t in tiers.items() if data.draw(st.booleans())}  # some unknown
    topo = _tiered(topo, tiers)
    weights = {n: data.draw(st.integers(1, 255)) for n in sorted(topo.allowed_mems)}
    with_weights = data.draw(st.booleans())
    kw = dict(nprocs=nprocs, mode=mode, gpu_memory=gpu_memory)
    with_weights = with_weights and bool(weights)
    spread_kw = dict(kw, tiers="all", weights=weights if with_weights else None)
    try:
        n = local_ranks(topo, Options(nprocs=nprocs, mode=mode))
    except (PlanError, ConfigError):
        return  # no rank to place: not this test's business
    plain = _outcomes(topo, n, **kw)
    if with_weights:  # without tiers, weights name the nodes of weighted interleave
        plain_weighted = _outcomes(topo, n, **kw, policy="weighted-interleave", weights=weights)
    spread = _outcomes(topo, n, **spread_kw)
    assert _outcomes(topo, n, **spread_kw) == spread  # deterministic
    shuffled = topo.replace(nodes=dict(reversed(list(topo.nodes.items()))))
    assert _outcomes(shuffled, n, **spread_kw) == spread  # no dict order
    for before, after in zip(plain, spread):
        if not isinstance(before, Plan):
            assert not isinstance(after, Plan) and after == before
            continue
        assert isinstance(after, Plan), after
        assert (after.cpus, after.node, after.rank) == (before.cpus, before.node, before.rank)
        assert after.mems <= topo.allowed_mems
        added = _expected_tier_nodes(topo, before.mems)
        if before.policy is MemoryPolicy.NONE:  # no known node: nothing to spread either
            assert after.policy is MemoryPolicy.NONE and not after.mems
        elif added:
            event("tier nodes added")
            assert after.policy is WEIGHTED
            assert after.mems == before.mems | added and not before.mems & added
            assert all(topo.nodes[m].memory_only for m in added)
            expected = {m: weights[m] for m in sorted(after.mems)} if with_weights else None
            assert after.weights == expected
            assert after.warnings == before.warnings
        else:  # as without tiers: preferred, or the weights' nodes when weights are given
            event("nothing to add")
            reference = plain_weighted[after.rank] if with_weights else before
            assert isinstance(reference, Plan)
            assert (after.policy, after.mems, after.weights) == (
                reference.policy,
                reference.mems,
                reference.weights,
            )
            assert after.policy is (WEIGHTED if with_weights else MemoryPolicy.PREFERRED)
            extra = [w for w in after.warnings if w.startswith(NOTHING)]
            assert len(extra) == 1
            assert sorted(after.warnings) == sorted((*reference.warnings, *extra))
