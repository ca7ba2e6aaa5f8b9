"""Example and golden tests for the pure planner.

Golden values for the real machines were derived by hand from the raw
published outputs in /work/shared/topologies (see tests/support/topology_builders.py
for the encodings); the arithmetic is written next to each expectation.
"""

from __future__ import annotations

from typing import List, Optional

import pytest

from pynumabind.cpulist import format_cpulist, parse_cpulist
from pynumabind.errors import ConfigError, PlanError
from pynumabind.model import CpuMode, MemoryPolicy, Plan
from pynumabind.planner import plan, plan_all, plan_each
from pynumabind.planner._overrides import parse_cpus_override, parse_nodes_override

from ..support.topology_builders import (
    dgx_a100_nps4,
    dgx_h100,
    gb200_tray,
    gh200_quad,
    gpu,
    make_topology,
    mi300x_unknown_gpu_node,
    threadripper_memoryless,
)

MODES = ["node", "socket", "exclusive", "core-complex", "none"]


def cpus_of(plans: List[Plan]) -> List[Optional[str]]:
    return [None if p.cpus is None else format_cpulist(p.cpus) for p in plans]


def mems_of(plans: List[Plan]) -> List[str]:
    return [format_cpulist(p.mems) for p in plans]


def any_reason(p: Plan, *needles: str) -> bool:
    return any(all(n in r for n in needles) for r in p.reasons)


# ----------------------------------------------------------- DGX H100

H100_NODE0 = "0-55,112-167"
H100_NODE1 = "56-111,168-223"


def test_dgx_h100_node_mode_golden() -> None:
    plans = plan_all(dgx_h100())
    assert len(plans) == 8  # one rank per visible GPU
    assert cpus_of(plans) == [H100_NODE0] * 4 + [H100_NODE1] * 4
    assert mems_of(plans) == ["0"] * 4 + ["1"] * 4
    assert [p.node for p in plans] == [0] * 4 + [1] * 4
    assert [p.gpu_info.pci_bus_id for p in plans if p.gpu_info] == [
        f"0000:{b}:00.0" for b in ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    ]
    assert all(p.policy is MemoryPolicy.PREFERRED and p.mode is CpuMode.NODE for p in plans)
    assert any_reason(plans[5], "GPU 5 (0000:AB:00.0) is on NUMA node 1", "sysfs numa_node")
    assert all(p.warnings == () for p in plans)


def test_dgx_h100_socket_mode_equals_node_mode() -> None:
    # One NUMA node per socket: the package is the node.
    plans = plan_all(dgx_h100(), mode="socket")
    assert cpus_of(plans) == [H100_NODE0] * 4 + [H100_NODE1] * 4
    assert mems_of(plans) == ["0"] * 4 + ["1"] * 4


@pytest.mark.parametrize("mode", ["exclusive", "core-complex"])
def test_dgx_h100_exclusive_golden(mode: str) -> None:
    # 56 cores per node / 4 ranks = 14 whole cores each; sibling of N is N+112.
    # core-complex: one L3 per socket, so fewer groups (1) than ranks (4) ->
    # exclusive within the group: identical slices.
    plans = plan_all(dgx_h100(), mode=mode)
    assert cpus_of(plans) == [
        "0-13,112-125",
        "14-27,126-139",
        "28-41,140-153",
        "42-55,154-167",
        "56-69,168-181",
        "70-83,182-195",
        "84-97,196-209",
        "98-111,210-223",
    ]
    assert mems_of(plans) == ["0"] * 4 + ["1"] * 4
    if mode == "core-complex":
        assert any_reason(plans[0], "fewer L3 groups (1")


def test_dgx_h100_none_mode_binds_memory_only() -> None:
    plans = plan_all(dgx_h100(), mode="none", policy="bind")
    assert cpus_of(plans) == [None] * 8
    assert mems_of(plans) == ["0"] * 4 + ["1"] * 4
    assert all(p.policy is MemoryPolicy.BIND for p in plans)


def test_dgx_h100_restricted_cpuset_partial() -> None:
    # A container holding cores 0-15 and their siblings of socket 0.
    topo = dgx_h100(allowed_cpus="0-15,112-127")
    p0 = plan(topo, 0)
    assert format_cpulist(p0.cpus or ()) == "0-15,112-127"
    ex = [plan(topo, r, mode="exclusive") for r in range(4)]
    # 16 allowed cores / 4 ranks = 4 cores each.
    assert cpus_of(ex) == ["0-3,112-115", "4-7,116-119", "8-11,120-123", "12-15,124-127"]


def test_dgx_h100_node_outside_cpuset_is_a_clear_error() -> None:
    topo = dgx_h100(allowed_cpus=H100_NODE0)
    assert plan(topo, 3).cpus == parse_cpulist(H100_NODE0)  # own rank unaffected
    with pytest.raises(PlanError) as info:
        plan(topo, 4)
    message = str(info.value)
    assert "rank 4" in message and "node(s) 1" in message
    assert H100_NODE1 in message and H100_NODE0 in message
    with pytest.raises(PlanError):
        plan_all(topo)


def test_dgx_h100_more_ranks_than_gpus_wraps_with_warning() -> None:
    plans = plan_all(dgx_h100(), nprocs=16)
    assert [p.gpu_info.index for p in plans if p.gpu_info] == list(range(8)) * 2
    assert all(p.warnings for p in plans)
    assert "shared by ranks 1,9" in plans[9].warnings[0]
    ex = plan_all(dgx_h100(), nprocs=16, mode="exclusive")
    # 8 ranks on node 0 (ranks 0-3 and 8-11): 56 cores / 8 = 7 each, in rank order.
    node0 = [p for p in ex if p.node == 0]
    assert [p.rank for p in node0] == [0, 1, 2, 3, 8, 9, 10, 11]
    assert format_cpulist(node0[4].cpus or ()) == "28-34,140-146"


def test_dgx_h100_gpu_memory_without_gpu_node_warns() -> None:
    p = plan(dgx_h100(), 0, gpu_memory=True)
    assert p.mems == frozenset({0})
    assert any("no NUMA memory node" in w for w in p.warnings)


def test_dgx_h100_restricted_mems_falls_back_to_nearest_allowed() -> None:
    p = plan(dgx_h100(allowed_mems="0"), 6, policy="bind")
    assert p.mems == frozenset({0})
    assert any_reason(p, "node 1 has memory outside the allowed mems 0", "0 (distance 21)")


# ------------------------------------------------------- DGX A100 NPS4

A100_NODE_OF_GPU = [3, 3, 1, 1, 7, 7, 5, 5]


def test_dgx_a100_node_mode_golden() -> None:
    plans = plan_all(dgx_a100_nps4())
    assert [p.node for p in plans] == A100_NODE_OF_GPU
    assert cpus_of(plans) == [
        "48-63,176-191",
        "48-63,176-191",
        "16-31,144-159",
        "16-31,144-159",
        "112-127,240-255",
        "112-127,240-255",
        "80-95,208-223",
        "80-95,208-223",
    ]
    assert mems_of(plans) == [str(n) for n in A100_NODE_OF_GPU]
    assert any_reason(plans[0], "GPU 0 (0000:07:00.0) is on NUMA node 3")


def test_dgx_a100_socket_mode_spans_the_nps4_nodes() -> None:
    plans = plan_all(dgx_a100_nps4(), mode="socket")
    # GPUs 0-3 are on nodes 3 and 1 of package 0 (nodes 0-3); 4-7 on package 1.
    assert cpus_of(plans) == ["0-63,128-191"] * 4 + ["64-127,192-255"] * 4
    assert mems_of(plans) == ["0-3"] * 4 + ["4-7"] * 4
    assert [p.node for p in plans] == A100_NODE_OF_GPU


@pytest.mark.parametrize("mode", ["exclusive", "core-complex"])
def test_dgx_a100_exclusive_golden(mode: str) -> None:
    # Two ranks per node, 16 cores -> 8 each; core-complex: 4 CCX of 4
    # cores -> 2 whole CCX each, the same CPUs.
    plans = plan_all(dgx_a100_nps4(), mode=mode)
    assert cpus_of(plans) == [
        "48-55,176-183",
        "56-63,184-191",
        "16-23,144-151",
        "24-31,152-159",
        "112-119,240-247",
        "120-127,248-255",
        "80-87,208-215",
        "88-95,216-223",
    ]


def test_dgx_a100_core_complex_differs_from_exclusive_with_three_ranks() -> None:
    topo = dgx_a100_nps4()
    # Three ranks forced onto node 3 (CCX: 48-51, 52-55, 56-59, 60-63).
    ex = plan_all(topo, mode="exclusive", nodes="3,3,3")
    # 16 cores / 3 ranks = 6/5/5 contiguous cores, crossing CCX boundaries.
    assert cpus_of(ex) == ["48-53,176-181", "54-58,182-186", "59-63,187-191"]
    cc = plan_all(topo, mode="core-complex", nodes="3,3,3")
    # 4 groups / 3 ranks = 2/1/1 whole groups.
    assert cpus_of(cc) == ["48-55,176-183", "56-59,184-187", "60-63,188-191"]
    assert any_reason(cc[0], "4 L3 groups", "2/1 whole groups each")


def test_dgx_a100_core_complex_more_ranks_than_groups() -> None:
    # 5 ranks, 4 equal CCX: D'Hondt gives the first CCX two ranks.
    cc = plan_all(dgx_a100_nps4(), mode="core-complex", nodes=[3] * 5)
    assert cpus_of(cc) == [
        "48-49,176-177",
        "50-51,178-179",
        "52-55,180-183",
        "56-59,184-187",
        "60-63,188-191",
    ]
    assert any_reason(cc[0], "fewer L3 groups (4", "2/1/1/1")


def test_dgx_a100_interleave_default_is_the_ranks_nodes() -> None:
    plans = plan_all(dgx_a100_nps4(), mode="socket", policy="interleave")
    assert mems_of(plans) == ["0-3"] * 4 + ["4-7"] * 4
    p = plan(dgx_a100_nps4(), 0, policy="interleave", interleave_nodes="0-7")
    assert p.mems == frozenset(range(8))


# ------------------------------------------------------------- GB200


@pytest.mark.parametrize("with_affinity", [True, False])
def test_gb200_node_mode_uses_the_grace_node(with_affinity: bool) -> None:
    plans = plan_all(gb200_tray(with_affinity=with_affinity))
    assert cpus_of(plans) == ["0-71", "0-71", "72-143", "72-143"]
    assert mems_of(plans) == ["0", "0", "1", "1"]
    assert [p.node for p in plans] == [0, 0, 1, 1]
    assert any_reason(plans[0], "NUMA node 2 (nvml numa_node), a CPU-less memory node")
    if with_affinity:
        assert any_reason(plans[2], "CPU affinity 72-143 (nvml)", "node(s) 1")
    else:
        assert any_reason(plans[2], "node 18 has no CPUs; nearest CPU node is 1 (distance 80)")


def test_gb200_gpu_memory_adds_the_hbm_node() -> None:
    plans = plan_all(gb200_tray(), gpu_memory=True)
    assert mems_of(plans) == ["0,2", "0,10", "1,18", "1,26"]


def test_gb200_gpu_memory_outside_allowed_mems_warns() -> None:
    topo = gb200_tray(allowed_mems="0-1")
    p = plan(topo, 1, gpu_memory=True)
    assert p.mems == frozenset({0})
    assert any("GPU memory node 10 is outside the allowed mems 0-1" in w for w in p.warnings)


@pytest.mark.parametrize("mode", ["exclusive", "core-complex"])
def test_gb200_exclusive_golden(mode: str) -> None:
    # 72 cores (no SMT), 2 GPUs per Grace -> 36 each.
    plans = plan_all(gb200_tray(), mode=mode)
    assert cpus_of(plans) == ["0-35", "36-71", "72-107", "108-143"]


def test_gb200_socket_mode() -> None:
    plans = plan_all(gb200_tray(), mode="socket")
    assert cpus_of(plans) == ["0-71", "0-71", "72-143", "72-143"]


def test_gb200_distance_tie_is_explained_and_deterministic() -> None:
    topo = gb200_tray(
        with_affinity=False, distance=lambda a, b: 10 if a == b else (40 if a < 2 and b < 2 else 80)
    )
    plans = plan_all(topo)
    assert [p.node for p in plans] == [0, 0, 0, 0]
    assert any_reason(plans[3], "nodes 0-1 tie at distance 80, the lowest id wins")


def test_gb200_nodes_override_naming_a_memory_only_node_is_rejected() -> None:
    with pytest.raises(PlanError, match=r"node\(s\) 2, which have no CPUs"):
        plan(gb200_tray(), 0, nodes="2,0,1,1")
    # Memory-only nodes are fine when only memory is planned.
    p = plan(gb200_tray(), 0, mode="none", nodes="2,0,1,1", policy="bind")
    assert p.cpus is None and p.mems == frozenset({2})


def test_gb200_without_gpus_spreads_over_cpu_nodes_only() -> None:
    plans = plan_all(gb200_tray(gpus=()))
    assert len(plans) == 2  # nodes 0 and 1; the 32 CPU-less nodes get no rank
    assert cpus_of(plans) == ["0-71", "72-143"]


# ------------------------------------------------------------- GH200


def test_gh200_quad_places_by_distance() -> None:
    plans = plan_all(gh200_quad())
    assert cpus_of(plans) == ["0-71", "72-143", "144-215", "216-287"]
    assert mems_of(plans) == ["0", "1", "2", "3"]
    # HBM node 12 is 80 from Grace 1 and 120 from the others: no tie.
    assert any_reason(plans[1], "node 12 has no CPUs; nearest CPU node is 1 (distance 80)")
    assert not any("tie" in r for p in plans for r in p.reasons)
    assert mems_of(plan_all(gh200_quad(), gpu_memory=True)) == ["0,4", "1,12", "2,20", "3,28"]


def test_gh200_quad_two_ranks_per_gpu_exclusive() -> None:
    plans = plan_all(gh200_quad(), nprocs=8, mode="exclusive")
    # Ranks k and k+4 share GPU k and Grace k: 72 cores -> 36 each, rank order.
    assert cpus_of(plans) == [
        "0-35",
        "72-107",
        "144-179",
        "216-251",
        "36-71",
        "108-143",
        "180-215",
        "252-287",
    ]
    assert all(p.warnings for p in plans)  # wrap-around is surfaced


def test_nodes_override_keeps_the_gpu_memory_node_without_detection_warnings() -> None:
    p = plan(gh200_quad(), 0, nodes="1,0,2,3", gpu_memory=True)
    assert p.cpus == parse_cpulist("72-143") and p.mems == frozenset({1, 4})
    assert p.warnings == ()
    assert any_reason(p, "nodes override puts rank 0 on node(s) 1 instead of the detected 0")


# ------------------------------------------------------------- MI300X


def test_mi300x_gpu_without_node_is_left_unbound_with_warning() -> None:
    plans = plan_all(mi300x_unknown_gpu_node(), mode="exclusive")
    p3 = plans[3]
    assert p3.cpus is None and p3.node is None and p3.mems == frozenset()
    assert p3.policy is MemoryPolicy.NONE
    assert any("no NUMA node (kfd reports none)" in w for w in p3.warnings)
    # Node 0 now has 3 ranks: 56 cores -> 19/19/18.
    assert cpus_of(plans[:3]) == ["0-18,112-130", "19-37,131-149", "38-55,150-167"]
    assert cpus_of(plans[4:]) == [
        "56-69,168-181",
        "70-83,182-195",
        "84-97,196-209",
        "98-111,210-223",
    ]


def test_mi300x_unknown_node_with_affinity_uses_it() -> None:
    topo = mi300x_unknown_gpu_node(affinity_for_unknown="0-55,112-167")
    p3 = plan(topo, 3)
    assert p3.node == 0 and p3.cpus == parse_cpulist("0-55,112-167")
    assert any_reason(p3, "CPU affinity 0-55,112-167 (kfd)")
    ex = plan_all(topo, mode="exclusive")
    assert cpus_of(ex[:4]) == ["0-13,112-125", "14-27,126-139", "28-41,140-153", "42-55,154-167"]


def _vm_two_by_sixteen(*gpu_nodes):
    """A 2x16-CPU VM: every GPU's node as given, each GPU's affinity every CPU."""
    gpus = [gpu(i, node, local_cpus="0-31") for i, node in enumerate(gpu_nodes)]
    return make_topology({0: "0-15", 1: "16-31"}, gpus=gpus)


def test_exclusive_deals_unknown_node_gpus_ranks_over_every_node_their_affinity_spans() -> None:
    # A bug this guards against: these ranks were packed onto node 0 (0-7, 8-15) while node 1 idled.
    plans = plan_all(_vm_two_by_sixteen(None, None), mode="exclusive")
    assert cpus_of(plans) == ["0-15", "16-31"]
    assert [p.node for p in plans] == [0, 1]
    assert [p.mems for p in plans] == [frozenset({0}), frozenset({1})]
    assert any_reason(plans[1], "dealt out over its nodes 0-1", "rank 1 slices node 1")
    assert all(any("NUMA node is unknown" in w for w in p.warnings) for p in plans)
    four = plan_all(_vm_two_by_sixteen(None, None, None, None), mode="core-complex")
    assert cpus_of(four) == ["0-7", "16-23", "8-15", "24-31"]  # each slice inside one node
    assert [p.node for p in four] == [0, 1, 0, 1]


def test_exclusive_unknown_node_ranks_go_where_fewest_ranks_are() -> None:
    # GPU 0 knows node 0, so GPU 1's rank (its node unknown, affinity 0-31) takes node 1.
    plans = plan_all(_vm_two_by_sixteen(0, None), mode="exclusive")
    assert cpus_of(plans) == ["0-15", "16-31"]
    assert any_reason(plans[1], "rank 1 slices node 1")


def test_exclusive_unknown_node_ranks_skip_nodes_without_allowed_cpus() -> None:
    topo = _vm_two_by_sixteen(None, None).replace(allowed_cpus=parse_cpulist("16-31"))
    plans = plan_all(topo, mode="exclusive")
    assert cpus_of(plans) == ["16-23", "24-31"]


def test_mi300x_unknown_node_interleave_nodes_still_apply() -> None:
    p = plan(mi300x_unknown_gpu_node(), 3, policy="interleave", interleave_nodes=[0, 1])
    assert p.cpus is None and p.mems == frozenset({0, 1})
    assert p.policy is MemoryPolicy.INTERLEAVE


# ----------------------------------------------------- memory-less nodes


def test_threadripper_memoryless_nodes_get_nearest_memory() -> None:
    plans = plan_all(threadripper_memoryless())
    assert cpus_of(plans) == ["0-5,24-29", "6-11,30-35", "12-17,36-41", "18-23,42-47"]
    # Nodes 0 and 3 have no memory; 1 and 2 tie at distance 12 -> node 1.
    assert mems_of(plans) == ["1", "1", "2", "1"]
    assert any_reason(plans[0], "node 0 has no memory", "1 (distance 12)", "nodes 1-2 tie")


def test_no_gpus_spread_in_balanced_blocks() -> None:
    topo = threadripper_memoryless()
    assert [p.node for p in plan_all(topo, nprocs=2)] == [0, 2]
    assert [p.node for p in plan_all(topo, nprocs=6)] == [0, 0, 1, 2, 2, 3]
    # Two ranks per node with CCX of 3 cores: one CCX each.
    cc = plan_all(topo, nprocs=8, mode="core-complex")
    assert cpus_of(cc[:2]) == ["0-2,24-26", "3-5,27-29"]


def test_no_gpus_default_nprocs_counts_allowed_cpu_nodes() -> None:
    topo = threadripper_memoryless(allowed_cpus="6-17,30-41")
    plans = plan_all(topo)
    assert [p.node for p in plans] == [1, 2]


# ------------------------------------------------------- small machines


def tiny(**kw: object) -> object:
    spec = dict(nodes={0: "0-3"}, smt_adjacent=True, l3=None)
    spec.update(kw)
    return make_topology(**spec)  # type: ignore[arg-type]


def test_exclusive_more_ranks_than_cores_splits_threads_then_shares() -> None:
    topo = tiny()
    three = plan_all(topo, nprocs=3, mode="exclusive")
    assert cpus_of(three) == ["0-1", "2", "3"]
    assert any_reason(three[0], "more ranks (3) than allowed cores (2)")
    assert three[0].warnings
    five = plan_all(topo, nprocs=5, mode="exclusive")
    assert cpus_of(five) == ["0-1", "0-1", "0-1", "2-3", "2-3"]
    assert any_reason(five[0], "ranks share cores")


def test_core_complex_without_l3_falls_back_to_exclusive() -> None:
    plans = plan_all(tiny(), nprocs=2, mode="core-complex")
    assert cpus_of(plans) == ["0-1", "2-3"]
    assert any_reason(plans[0], "L3 cache groups unknown; falling back to exclusive")


def test_gpu_affinity_spanning_two_nodes() -> None:
    topo = make_topology(
        {0: "0-3", 1: "4-7"},
        gpus=[gpu(0, None, local_cpus="2-7", source="nvml"), gpu(1, 0)],
    )
    p = plan(topo, 0)
    assert p.cpus == frozenset(range(2, 8)) and p.node == 1  # node 1 holds 4 of 6
    assert p.mems == frozenset({0, 1})
    assert plan(topo, 0, mode="socket").cpus == frozenset(range(8))
    # Exclusive slices one node: the primary.
    ex = plan_all(topo, mode="exclusive")
    assert cpus_of(ex) == ["4-7", "0-3"]


def test_bogus_gpu_node_is_treated_as_unknown() -> None:
    topo = make_topology({0: "0-3"}, gpus=[gpu(0, 7)])
    p = plan(topo, 0)
    assert p.cpus is None
    assert any("reports NUMA node 7" in w for w in p.warnings)


def test_memory_policies() -> None:
    topo = dgx_h100()
    assert plan(topo, 0, policy="bind").policy is MemoryPolicy.BIND
    local = plan(topo, 0, policy="local")
    assert local.policy is MemoryPolicy.LOCAL and local.mems == frozenset()
    none = plan(topo, 0, policy="none")
    assert none.policy is MemoryPolicy.NONE and none.mems == frozenset()
    assert plan(topo, 0, policy=MemoryPolicy.INTERLEAVE).mems == frozenset({0})


def test_interleave_nodes_validation() -> None:
    topo = gb200_tray()
    with pytest.raises(
        ConfigError, match="only meaningful with policy 'interleave' or 'weighted-interleave'"
    ):
        plan(topo, 0, interleave_nodes="0-1")
    with pytest.raises(PlanError, match="does not have"):
        plan(topo, 0, policy="interleave", interleave_nodes="40")
    with pytest.raises(PlanError, match="without memory"):
        plan(topo, 0, policy="interleave", interleave_nodes="3")
    with pytest.raises(PlanError, match="outside this process's allowed memory nodes 0-1"):
        plan(gb200_tray(allowed_mems="0-1"), 0, policy="interleave", interleave_nodes="2")


def test_invalid_mode_and_policy() -> None:
    with pytest.raises(ConfigError, match="invalid mode 'numa'"):
        plan(dgx_h100(), 0, mode="numa")
    with pytest.raises(ConfigError, match="invalid memory policy"):
        plan(dgx_h100(), 0, policy="strict")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"policy": "interleave", "interleave_nodes": 1}, "interleave_nodes"),
        ({"rank_gpus": 3}, "rank_gpus"),
        ({"rank_gpus": iter(range(8))}, "rank_gpus"),
        ({"rank_gpus": set(range(8))}, "rank_gpus"),  # no order: which rank gets which?
        ({"gpu_memory": "no"}, "gpu_memory"),  # bool("no") is True
    ],
)
def test_arguments_of_the_wrong_type_are_config_errors(options: dict, needle: str) -> None:
    """Not TypeError from deep inside, nor a silently different meaning."""
    with pytest.raises(ConfigError, match=needle):
        plan_all(dgx_h100(), **options)


# ---------------------------------------------------------- rank range


def test_rank_range() -> None:
    topo = dgx_h100()
    with pytest.raises(PlanError, match="rank 8 out of range: there are 8 local ranks"):
        plan(topo, 8)
    with pytest.raises(ConfigError, match="invalid rank argument -1"):  # checked once, in Options
        plan(topo, -1)
    with pytest.raises(ConfigError):
        plan(topo, True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="at least 1"):
        plan_all(topo, nprocs=0)
    with pytest.raises(ConfigError, match="exceeds the limit"):
        plan_all(topo, nprocs=10**9)
    assert plan(topo, 11, nprocs=12).gpu_info.index == 3  # type: ignore[union-attr]


# ------------------------------------------------------------ devices


def test_explicit_device() -> None:
    topo = dgx_h100()
    p = plan(topo, 0, gpu=6)
    assert p.gpu is not None and p.gpu_info.index == 6 and p.node == 1
    assert any_reason(p, "rank 0 uses GPU 6 (given)")
    with pytest.raises(ConfigError, match="GPU 8 out of range"):
        plan(topo, 0, gpu=8)
    with pytest.raises(ConfigError, match="no GPUs"):
        plan(threadripper_memoryless(), 0, gpu=0)
    plans = plan_all(topo, nprocs=2, rank_gpus=[7, 0])
    assert [p.node for p in plans] == [1, 0]


def test_explicit_device_exclusive_matches_plan_all_with_that_mapping() -> None:
    topo = dgx_h100()
    mine = plan(topo, 0, mode="exclusive", gpu=4)
    everyone = plan_all(topo, mode="exclusive", rank_gpus=[4, 1, 2, 3, 4, 5, 6, 7])
    assert mine == everyone[0]
    # Node 1 now has ranks 0,4,5,6,7: 56 cores / 5 = 12/11/11/11/11.
    assert format_cpulist(mine.cpus or ()) == "56-67,168-179"


# ----------------------------------------------------------- overrides


def test_nodes_override_forms() -> None:
    topo = dgx_h100()
    a = plan_all(topo, nodes="1,1,0,0")
    assert [p.node for p in a] == [1, 1, 0, 0]  # nprocs from the override
    assert any_reason(a[0], "nodes override puts rank 0 on node(s) 1 instead of the detected 0")
    b = plan_all(topo, nodes=[1, 1, 0, 0])
    assert a == b
    c = plan_all(topo, nodes="0-1;0-1", mode="exclusive")
    # Both ranks share nodes 0-1: 112 cores -> 56 each.
    assert cpus_of(c) == [H100_NODE0, H100_NODE1]
    assert mems_of(c) == ["0-1", "0-1"]  # a nodes override names the memory nodes too


def test_nodes_override_errors() -> None:
    topo = dgx_h100()
    with pytest.raises(PlanError, match=r"rank 1 names NUMA node\(s\) 5"):
        plan(topo, 0, nodes="0,5")
    with pytest.raises(ConfigError, match="has 2 entries but there are 4 local ranks"):
        plan(topo, 0, nprocs=4, nodes="0,1")
    with pytest.raises(ConfigError, match="not '\\|'"):
        plan(topo, 0, nodes="0|1")
    with pytest.raises(ConfigError, match="empty entry for rank 1"):
        plan(topo, 0, nodes="0,,1")
    with pytest.raises(ConfigError, match="entry for rank 1 at position 2"):
        plan(topo, 0, nodes="0,x")
    with pytest.raises(ConfigError, match="equal or disjoint"):
        plan_all(topo, nodes="0;0-1", mode="exclusive")
    with pytest.raises(PlanError, match="intersection is empty"):
        plan(dgx_h100(allowed_cpus=H100_NODE0), 0, nodes="1")


def test_cpus_override_forms_and_errors() -> None:
    topo = dgx_h100()
    plans = plan_all(topo, cpus="0-7;8-15", mode="exclusive")
    assert cpus_of(plans) == ["0-7", "8-15"]
    assert [p.node for p in plans] == [0, 0]
    seq = plan_all(topo, cpus=["0-7", frozenset(range(8, 16))])
    assert cpus_of(seq) == ["0-7", "8-15"]
    rel = plan(dgx_h100(allowed_cpus="100-120"), 0, cpus="+0-3")
    assert format_cpulist(rel.cpus or ()) == "100-103"
    with pytest.raises(PlanError, match=r"CPU\(s\) 300, which are not online"):
        plan(topo, 0, cpus="300")
    with pytest.raises(
        ConfigError, match=r"1 entries but there are 2 local ranks.*separated by ';'"
    ):
        plan(topo, 0, nprocs=2, cpus="0-7,8-15")
    with pytest.raises(ConfigError, match="contradicts mode 'none'"):
        plan(topo, 0, cpus="0-7", mode="none")
    restricted = dgx_h100(allowed_cpus="0-3")
    partial = plan(restricted, 0, cpus="2-5")
    assert partial.cpus == frozenset({2, 3})
    assert any("4-5 are outside the allowed CPUs 0-3" in w for w in partial.warnings)
    with pytest.raises(PlanError, match="has no CPU in this process's allowed CPUs 0-3"):
        plan(restricted, 0, cpus="8-9")
    with pytest.raises(ConfigError, match="nodes override has 2 entries but the cpus override"):
        plan(topo, 0, nodes="0,1", cpus="0")


def test_override_parsers_directly() -> None:
    assert parse_nodes_override("0,0,1,1") == tuple(frozenset({n}) for n in (0, 0, 1, 1))
    assert parse_nodes_override("0-1; 2") == (frozenset({0, 1}), frozenset({2}))
    assert parse_cpus_override("0-3,8; 4-7") == (frozenset({0, 1, 2, 3, 8}), frozenset(range(4, 8)))
    with pytest.raises(ConfigError):
        parse_nodes_override([True])  # type: ignore[list-item]
    with pytest.raises(ConfigError):
        parse_cpus_override(3)  # type: ignore[arg-type]


# --------------------------------------------------------- consistency

MACHINES = {
    "dgx_h100": dgx_h100,
    "dgx_a100": dgx_a100_nps4,
    "gb200": gb200_tray,
    "gh200": gh200_quad,
    "mi300x": mi300x_unknown_gpu_node,
    "threadripper": threadripper_memoryless,
}


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("mode", MODES)
def test_plan_matches_plan_all_on_real_machines(machine: str, mode: str) -> None:
    topo = MACHINES[machine]()
    everyone = plan_all(topo, mode=mode)
    assert [plan(topo, r, mode=mode) for r in range(len(everyone))] == everyone
    assert plan_all(topo, mode=mode) == everyone  # deterministic
    for p in everyone:
        data = p.to_dict()
        assert data["rank"] == p.rank and data["mode"] == mode
        assert data["reasons"] and data["reasons"][0].endswith(("visible GPU", "(0-3)"))


def test_nothing_allowed_is_a_plan_error() -> None:
    topo = make_topology({0: "0-3"}, allowed_cpus="")
    with pytest.raises(PlanError, match="no NUMA node has an allowed CPU"):
        plan_all(topo)


def test_gpu_affinity_outside_cpuset_is_a_plan_error() -> None:
    topo = make_topology(
        {0: "0-3", 1: "4-7"},
        gpus=[gpu(0, None, local_cpus="4-7", source="nvml")],
        allowed_cpus="0-3",
    )
    with pytest.raises(PlanError, match=r"affinity 4-7 \(on node\(s\) 1\) has no CPU .* 0-3"):
        plan(topo, 0)
    # Memory-only planning still works for that rank.
    assert plan(topo, 0, mode="none").mems == frozenset({1})


NODE_MODE_MEMS = {
    "dgx_a100": ["3", "3", "1", "1", "7", "7", "5", "5"],
    "gb200": ["0", "0", "1", "1"],
    "gh200": ["0", "1", "2", "3"],
    "mi300x": ["0", "0", "0", "", "1", "1", "1", "1"],
    "threadripper": ["1", "1", "2", "1"],
}


@pytest.mark.parametrize("machine", sorted(NODE_MODE_MEMS))
def test_none_mode_golden(machine: str) -> None:
    plans = plan_all(MACHINES[machine](), mode="none")
    assert cpus_of(plans) == [None] * len(plans)
    assert mems_of(plans) == NODE_MODE_MEMS[machine]


def test_mi300x_socket_mode_golden() -> None:
    plans = plan_all(mi300x_unknown_gpu_node(), mode="socket")
    assert cpus_of(plans) == [H100_NODE0] * 3 + [None] + [H100_NODE1] * 4


def test_reason_names_the_memory_node_when_discovery_resolved_it() -> None:
    """A GPU whose memory node is CPU-less, already placed on its CPU node by discovery."""
    from pynumabind.model import Cpu, Gpu, NumaNode, Topology

    nodes = {
        0: NumaNode(0, frozenset({0, 1}), 1 << 30, 1 << 30, True, {0: 10, 1: 21, 2: 40}),
        1: NumaNode(1, frozenset({2, 3}), 1 << 30, 1 << 30, True, {0: 21, 1: 10, 2: 30}),
        2: NumaNode(2, frozenset(), 1 << 30, 1 << 30, True, {0: 40, 1: 30, 2: 10}),
    }
    cpus = {
        c: Cpu(c, 0 if c < 2 else 1, 0 if c < 2 else 1, c, None, frozenset({c})) for c in range(4)
    }
    gpu = Gpu(0, "0000:41:00.0", "nvidia", 1, frozenset({2, 3}), memory_node=2, source="sysfs")
    topology = Topology(nodes, cpus, (gpu,), frozenset(range(4)), frozenset({0, 1, 2}))
    result = plan(topology, 0)
    assert result.cpus == frozenset({2, 3})
    assert any(
        "memory node 2 has no CPUs; its CPU node is 1 (from sysfs, distance 30)" in r
        for r in result.reasons
    ), result.reasons
    assert not any("is on NUMA node 1 (sysfs numa_node)" in r for r in result.reasons)


@pytest.mark.parametrize(("mode", "policy"), [("Node", "Preferred"), ("EXCLUSIVE", "Bind")])
def test_names_are_case_insensitive_as_in_the_environment(mode: str, policy: str) -> None:
    p = plan(dgx_h100(), 0, mode=mode, policy=policy)
    assert p.mode.value == mode.lower() and p.policy.value == policy.lower()
    with pytest.raises(ConfigError, match="invalid mode 'Nodes'"):
        plan(dgx_h100(), 0, mode="Nodes")


def test_many_ranks_keep_each_plan_small() -> None:
    # 16,384 ranks on 8 GPUs: a plan's text must not list thousands of peers
    # (quadratic strings made one rank's plan take 17 s and GBs).
    p = plan(dgx_h100(), 1, nprocs=16384, mode="exclusive")
    assert p.gpu is not None and p.gpu_info.index == 1
    assert "shared by ranks 1,9,17," in p.warnings[0] and "(2048 ranks)" in p.warnings[0]
    assert max(len(text) for text in p.reasons) < 400
    assert plan_all(dgx_h100(), nprocs=16384, mode="exclusive")[1] == p


def test_plan_each_gives_every_rank_its_plan_or_its_own_error() -> None:
    topo = dgx_h100(allowed_cpus=parse_cpulist(H100_NODE0))
    from pynumabind.planner import plan_each

    results = plan_each(topo)
    assert [isinstance(r, Plan) for r in results] == [True] * 4 + [False] * 4
    assert all(isinstance(r, PlanError) for r in results[4:])
    assert "rank 5:" in str(results[5])
    with pytest.raises(PlanError, match="rank 4:"):
        plan_all(topo)


def test_cpus_override_away_from_the_gpu_warns_and_memory_follows_the_cpus() -> None:
    p = plan(dgx_h100(), 0, cpus="56-59;0-3;0-3;0-3;56-59;56-59;56-59;56-59")
    assert p.cpus == frozenset(range(56, 60)) and p.mems == frozenset({1})
    assert len(p.warnings) == 1
    assert p.warnings[0] == (
        "cpus override puts rank 0 on node(s) 1, away from its GPU 0 (0000:18:00.0) on "
        "node(s) 0; its memory policy follows the CPUs"
    )
    assert plan(dgx_h100(), 1, cpus="56-59;0-3;0-3;0-3;56-59;56-59;56-59;56-59").warnings == ()


def test_require_node_turns_an_unknown_gpu_node_into_a_plan_error() -> None:
    topo = mi300x_unknown_gpu_node()
    assert plan(topo, 3).cpus is None  # default: unbound, with a warning
    with pytest.raises(PlanError, match=r"rank 3: GPU 3 \(.*\) has no known NUMA node"):
        plan(topo, 3, require_node=True)
    assert plan(topo, 2, require_node=True).cpus is not None  # other ranks are unaffected
    results = plan_each(topo, require_node=True)
    assert [isinstance(r, PlanError) for r in results] == [i == 3 for i in range(len(results))]


def test_an_unknown_gpu_node_with_an_affinity_still_warns_naming_the_gpu() -> None:
    # A bug this guards against: the fact was only in reasons, so nothing above INFO was logged.
    p3 = plan(mi300x_unknown_gpu_node(affinity_for_unknown="56-111"), 3)
    assert p3.cpus == parse_cpulist("56-111")
    assert any("GPU 3 (0000:69:00.0)" in w and "NUMA node is unknown" in w for w in p3.warnings), (
        p3.warnings
    )
    p0 = plan(mi300x_unknown_gpu_node(affinity_for_unknown="56-111"), 0)
    assert p0.warnings == ()
