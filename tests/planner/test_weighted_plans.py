"""Weighted interleave in the planner: which nodes, which weights, and every error named.

Weights name the policy's nodes (for every rank); without them the policy
takes the plan's own nodes, as interleave does.  The machines are the recorded
ones of ``tests/support/topology_builders`` (GH200: a Grace node with an HBM
node of its own, the pairing weighted interleave is for).
"""

from __future__ import annotations

import pytest

from pynumabind import Options
from pynumabind.discovery._environ import resolve
from pynumabind.errors import ConfigError, PlanError, UnknownIdError
from pynumabind.model import MemoryPolicy
from pynumabind.planner import plan, plan_all

from ..support.topology_builders import gb200_tray, gh200_quad

WEIGHTED = "weighted-interleave"


def test_weights_name_the_nodes_of_every_rank() -> None:
    topo = gh200_quad()  # GPU i's HBM is node 4 + 8 i, next to Grace node i
    plans = plan_all(topo, policy=WEIGHTED, weights={0: 3, 4: 1})
    assert [p.mems for p in plans] == [frozenset({0, 4})] * 4
    assert all(p.weights == {0: 3, 4: 1} for p in plans)
    assert all(p.policy is MemoryPolicy.WEIGHTED_INTERLEAVE for p in plans)
    reasons = plans[1].reasons
    assert "memory policy weighted-interleave across the given nodes 0,4" in reasons
    assert any(r.startswith("weights 0:3,4:1 (given): a buffer (bind_memory)") for r in reasons)
    assert plans[1].cpus == topo.nodes[1].cpus  # the CPUs stay the rank's own
    assert plans[0].to_dict()["weights"] == {"0": 3, "4": 1}


def test_without_weights_the_plans_nodes_and_the_kernels_weights() -> None:
    topo = gh200_quad()
    weighted = plan(topo, 1, policy=WEIGHTED, gpu_memory=True)
    assert weighted.mems == frozenset({1, 12}) and weighted.weights is None
    assert weighted.to_dict()["weights"] is None
    assert any(
        "without weights: a process follows the kernel's system-wide weights for nodes 1,12"
        in reason
        for reason in weighted.reasons
    )
    given = plan(topo, 1, policy=WEIGHTED, interleave_nodes="1,12")
    assert given.mems == frozenset({1, 12}) and given.weights is None
    # The same weights and interleave_nodes agree; other policies carry no weights.
    same = plan(topo, 1, policy=WEIGHTED, weights="1:2,12:1", interleave_nodes={1, 12})
    assert same.mems == frozenset({1, 12}) and same.weights == {1: 2, 12: 1}
    assert plan(topo, 1, policy="interleave").weights is None


def test_weights_with_another_policy_say_which_policy_they_need() -> None:
    topo = gh200_quad()
    with pytest.raises(ConfigError) as caught:
        plan(topo, 0, weights={0: 3, 4: 1})  # the default policy, preferred
    assert str(caught.value) == (
        "weights= go with policy 'weighted-interleave', not 'preferred': give that policy too "
        "(policy='weighted-interleave') or leave the weights out"
    )
    with pytest.raises(ConfigError, match="not 'interleave'"):
        plan(topo, 0, policy="interleave", weights={0: 3})


def test_weights_nodes_are_checked_as_every_memory_node_is() -> None:
    topo = gb200_tray()  # node 3 has no memory
    with pytest.raises(UnknownIdError, match=r"weights= names NUMA node\(s\) 40, which this"):
        plan(topo, 0, policy=WEIGHTED, weights={0: 1, 40: 1})
    with pytest.raises(UnknownIdError, match=r"weights= names node\(s\) 3 without memory"):
        plan(topo, 0, policy=WEIGHTED, weights={0: 1, 3: 1})
    with pytest.raises(PlanError, match="outside this process's allowed memory nodes 0-1"):
        plan(gb200_tray(allowed_mems="0-1"), 0, policy=WEIGHTED, weights={0: 1, 2: 1})
    with pytest.raises(ConfigError, match="name nodes 0,2 but interleave_nodes names 0-1"):
        plan(topo, 0, policy=WEIGHTED, weights={0: 1, 2: 1}, interleave_nodes="0-1")


@pytest.mark.parametrize(
    ("weights", "words"),
    [
        ("0:0", "weights: weight out of range (from 1 to 255): '0' at position 2 in '0:0'"),
        ({0: 256}, "weights: node 0's weight 256 is not an integer from 1 to 255"),
        ({0: "3"}, "weights: node 0's weight '3' is not an integer from 1 to 255"),
        ([0, 3], "weights must map node ids to weights"),
        ({}, "weights names no node"),
    ],
)
def test_bad_weights_are_config_errors_naming_them(weights: object, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        plan(gh200_quad(), 0, policy=WEIGHTED, weights=weights)  # type: ignore[arg-type]
    assert str(caught.value).startswith(words)
    with pytest.raises(ConfigError, match=r"^--weights"):
        Options(policy=WEIGHTED, weights="0:x", flags=True)


def test_weights_from_the_environment_are_named_in_errors() -> None:
    topo = gh200_quad()
    env = {"LOCAL_RANK": "0", "PYNUMABIND_WEIGHTS": " 0:3,4:1\n", "PYNUMABIND_POLICY": WEIGHTED}
    options = resolve(env)
    assert options.weights == {0: 3, 4: 1}
    assert options.from_environment("weights") == "PYNUMABIND_WEIGHTS"
    assert plan(topo, options=options).weights == {0: 3, 4: 1}
    with pytest.raises(ConfigError) as caught:
        plan(topo, options=resolve(dict(env, PYNUMABIND_WEIGHTS="0:3,99:1")))
    assert str(caught.value).startswith("PYNUMABIND_WEIGHTS names NUMA node(s) 99")
    assert str(caught.value).endswith(
        "(settings from the environment: rank from LOCAL_RANK, policy from PYNUMABIND_POLICY, "
        "weights from PYNUMABIND_WEIGHTS)"
    )


def test_a_union_plan_carries_the_weights() -> None:
    union = plan(gh200_quad(), gpus=[0, 1], policy=WEIGHTED, weights={0: 1, 1: 1})
    assert union.rank is None and union.mems == frozenset({0, 1})
    assert union.weights == {0: 1, 1: 1}
