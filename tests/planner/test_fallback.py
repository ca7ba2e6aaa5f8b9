"""``fallback="nearest"``: a cpuset without the GPU's node's CPUs (pure planner, options, CLI).

The recorded A100 PCIe box under a Slurm cpuset of node 0's CPUs
(``tests/machines/a100_pcie_slurm_cgroup.json``): GPUs 4-7 sit on node 1,
whose CPUs the job may not use.  By default their ranks are a PlanError;
with the fallback they are bound to node 0's allowed CPUs, their memory on
node 1 (allowed), with one warning naming the cpuset.  The real kernel
case (a cgroup v1 cpuset) is in ``binding/test_cpuset.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynumabind import ConfigError, Options, PlanError, plan, plan_all, plan_each
from pynumabind.cpulist import parse_cpulist
from pynumabind.discovery import topology_from_sysfs
from pynumabind.discovery._environ import resolve
from pynumabind.model import Plan, Topology
from pynumabind.planner._fallback import nearest_allowed_nodes

from ..support import sysfs_tree
from ..support.cli_helpers import run_cli as _cli
from ..support.topology_builders import make_topology, topologies

MACHINE = "a100_pcie_slurm_cgroup"
MODES = ["node", "socket", "exclusive", "core-complex"]


@pytest.fixture(scope="module")
def slurm_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sysfs_tree.build_sysfs(MACHINE, tmp_path_factory.mktemp("a100") / MACHINE)


@pytest.fixture(scope="module")
def slurm_job(slurm_tree: Path) -> Topology:
    desc = sysfs_tree.load_machine(MACHINE)
    return topology_from_sysfs(
        str(slurm_tree),
        allowed_cpus=parse_cpulist(desc["allowed_cpus"]),
        allowed_mems=parse_cpulist(desc["allowed_mems"]),
    )


def fallback_warnings(p: Plan) -> List[str]:
    return [w for w in p.warnings if w.startswith("fallback nearest")]


# ------------------------------------------------------------ the recorded box


def test_the_default_is_still_the_clear_error(slurm_job: Topology) -> None:
    results = plan_each(slurm_job)
    assert [isinstance(r, Plan) for r in results] == [True] * 4 + [False] * 4
    assert "rank 4: its node(s) 1 have CPUs 28-55,84-111" in str(results[4])
    assert "may only use CPUs 0-15,56-71" in str(results[4])


@pytest.mark.parametrize("mode", MODES)
def test_nearest_binds_the_gpus_outside_the_cpuset_to_the_nearest_allowed_cpus(
    slurm_job: Topology, mode: str
) -> None:
    plans = plan_all(slurm_job, options=Options(fallback="nearest", mode=mode))
    cpuset = parse_cpulist("0-15,56-71")
    for p in plans:
        assert p.cpus and p.cpus <= cpuset
        assert p.node == 0
    if mode in ("exclusive", "core-complex"):  # eight ranks now share node 0's cpuset
        assert sum(len(p.cpus or ()) for p in plans) == len(
            frozenset().union(*(p.cpus or () for p in plans))
        )
    else:  # ranks on node 0's GPUs are as without the fallback
        strict = plan_all(slurm_job.replace(gpus=slurm_job.gpus[:4]), mode=mode)
        assert [(p.cpus, p.mems) for p in plans[:4]] == [(q.cpus, q.mems) for q in strict]
    assert not any(fallback_warnings(p) for p in plans[:4])
    for p in plans[4:]:
        assert p.mems == {1}  # the GPU's node: allowed, so memory stays there
        (warning,) = fallback_warnings(p)
        assert f"GPU {p.rank} (" in warning and "on node(s) 1" in warning
        assert "allowed CPUs 0-15,56-71 (its cpuset)" in warning
        assert "node 0 (distance 21)" in warning


def test_memory_goes_to_the_nearest_allowed_node_when_the_gpus_is_not(
    slurm_job: Topology,
) -> None:
    job = slurm_job.replace(allowed_mems=frozenset({0}))
    p = plan(job, 5, fallback="nearest")
    assert p.mems == {0} and p.node == 0
    assert any("node 1 has memory outside the allowed mems 0" in r for r in p.reasons)


def test_overrides_and_mode_none_are_left_alone(slurm_job: Topology) -> None:
    with pytest.raises(PlanError, match="intersection is empty"):
        plan(slurm_job, 4, nodes="1,1,1,1,1,1,1,1", fallback="nearest")
    loose = plan(slurm_job, 4, mode="none", fallback="nearest")
    assert loose.cpus is None and not fallback_warnings(loose)


def test_nearest_is_by_slit_distance_ties_to_the_lowest_id() -> None:
    # Four nodes: the GPU on node 3, the cpuset on nodes 0-2; node 2 is nearest
    # (distance 12), then 0 and 1 tie at 20.
    table = {(0, 3): 20, (1, 3): 20, (2, 3): 12}

    def distance(a: int, b: int) -> int:
        return 10 if a == b else table.get((min(a, b), max(a, b)), 30)

    from ..support.topology_builders import gpu

    topo = make_topology(
        {0: [0], 1: [1], 2: [2], 3: [3]},
        distance=distance,
        gpus=[gpu(0, 3)],
        allowed_cpus=frozenset({0, 1, 2}),
    )
    assert nearest_allowed_nodes(topo, frozenset({3})) == [(2, 12), (0, 20), (1, 20)]
    assert plan(topo, 0, fallback="nearest").cpus == {2}
    tied = topo.replace(allowed_cpus=frozenset({0, 1}))
    assert plan(tied, 0, fallback="nearest").cpus == {0}


# ------------------------------------------------------------------ properties


def _outcome(topo: Topology, rank: int, **kw: object) -> Optional[Plan]:
    try:
        return plan(topo, rank, **kw)  # type: ignore[arg-type]
    except (PlanError, ConfigError):
        return None


@settings(max_examples=150, deadline=None)
@given(topologies(), st.sampled_from(MODES))
def test_nearest_moves_only_the_ranks_the_error_would_stop(topo: Topology, mode: str) -> None:
    if not topo.gpus:
        return
    for rank in range(len(topo.gpus)):
        strict = _outcome(topo, rank, mode=mode)
        loose = _outcome(topo, rank, mode=mode, fallback="nearest")
        if strict is not None:
            assert loose is not None
            assert not fallback_warnings(loose)
            if mode in ("node", "socket"):  # each rank planned on its own: unchanged
                assert (loose.cpus, loose.mems, loose.node) == (
                    strict.cpus,
                    strict.mems,
                    strict.node,
                )
            else:
                # The exclusive modes share a node among its ranks: ranks that fell
                # back onto it narrow the others' slices, and change where ranks with
                # a spanning affinity are dealt.  Still bound, and still allowed.
                assert (loose.cpus is None) == (strict.cpus is None)
                assert loose.cpus is None or loose.cpus <= topo.allowed_cpus
        elif loose is not None and fallback_warnings(loose):
            assert loose.cpus and loose.cpus <= topo.allowed_cpus
            assert loose.mems <= topo.allowed_mems


@settings(max_examples=150, deadline=None)
@given(topologies())
def test_a_fallback_rank_lands_on_the_nearest_node_with_allowed_cpus(topo: Topology) -> None:
    for rank in range(len(topo.gpus)):
        p = _outcome(topo, rank, fallback="nearest")
        if p is None or not fallback_warnings(p):
            continue
        assert p.cpus and p.cpus <= topo.allowed_cpus
        assert p.mems <= topo.allowed_mems
        gpu = topo.gpus[rank]
        if gpu.numa_node in topo.cpu_nodes and not gpu.local_cpus:  # placed by its node alone
            (node,) = {topo.node_of_cpu(c) for c in p.cpus}
            ranked = nearest_allowed_nodes(topo, frozenset({gpu.numa_node}))
            assert node == ranked[0][0]
            assert all(d is None or (ranked[0][1] or 0) <= d for _, d in ranked)


# --------------------------------------------------------- options and CLI


@pytest.mark.parametrize("value", ["nearest", "NEAREST", " nearest ", "error"])
def test_the_variable_and_the_argument(value: str) -> None:
    resolved = resolve({"PYNUMABIND_FALLBACK": value}, Options(rank=0))
    assert resolved.fallback == value.strip().lower()
    assert resolved.from_environment("fallback") == "PYNUMABIND_FALLBACK"
    given = resolve({"PYNUMABIND_FALLBACK": value}, Options(rank=0, fallback="error"))
    assert given.fallback == "error"  # the argument wins


@pytest.mark.parametrize("value", ["closest", "", "1"])
def test_a_bad_value_is_a_config_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match=r"choose one of: error, nearest"):
        Options(fallback=value)
    if value.strip():
        with pytest.raises(ConfigError, match=rf"PYNUMABIND_FALLBACK={value!r}"):
            resolve({"PYNUMABIND_FALLBACK": value}, Options(rank=0))


def test_the_cli_flag(slurm_tree: Path) -> None:
    args = ["plan", "--json", "--sysfs-root", str(slurm_tree), "--allowed-cpus", "0-15,56-71"]
    strict = _cli({}, *args)
    assert strict.returncode == 1
    done = _cli({}, *args, "--fallback", "nearest")
    assert done.returncode == 0, done.stderr
    plans = json.loads(done.stdout)["ranks"]
    assert [p["node"] for p in plans] == [0] * 8
    assert all(any("fallback nearest" in w for w in p["warnings"]) for p in plans[4:])
    bad = _cli({}, *args, "--fallback", "closest")
    assert bad.returncode == 2 and "--fallback" in bad.stderr and "Traceback" not in bad.stderr
