"""Intel priority cores and exclusive modes in framework workers.

Planned on constructed sysfs trees (tests/support/sysfs_tree.py): a Xeon 6 host with
priority cores (``xeon6_pct_b300``: CPPC highest_perf 46 on 8 cores per
socket, 39 on the rest), the same host with every core equal, and a DGX H100
whose sysfs has no acpi_cppc at all.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynumabind import ConfigError, Options, discovery, planner
from pynumabind.cpulist import parse_cpulist
from pynumabind.discovery import _environ
from pynumabind.model import Topology

from ..support import sysfs_tree as tree

XEON6 = tree.load_machine("xeon6_pct_b300")
PRIORITY = parse_cpulist(next(iter(XEON6["highest_perf"]["cpus"])))


def _read(desc: dict, path: Path) -> Topology:
    return discovery.topology_from_sysfs(str(tree.build_sysfs(desc, path)))


@pytest.fixture(scope="module")
def xeon6(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    return _read(XEON6, tmp_path_factory.mktemp("xeon6"))


@pytest.fixture(scope="module")
def equal(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    desc = copy.deepcopy(XEON6)
    desc["highest_perf"] = {"default": 39}
    return _read(desc, tmp_path_factory.mktemp("equal"))


@pytest.fixture(scope="module")
def no_cppc(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    desc = copy.deepcopy(XEON6)
    del desc["highest_perf"]
    return _read(desc, tmp_path_factory.mktemp("no_cppc"))


def test_discovery_reads_each_cpu_s_highest_perf(xeon6: Topology, no_cppc: Topology) -> None:
    assert {c for c, info in xeon6.cpus.items() if info.highest_perf == 46} == PRIORITY
    assert {info.highest_perf for info in no_cppc.cpus.values()} == {None}
    assert Topology.from_json(xeon6.to_json()) == xeon6  # snapshots keep it
    assert "highest_perf" not in no_cppc.to_json()  # and old snapshots stay as they were


@pytest.mark.parametrize("mode", ["exclusive", "core-complex"])
def test_each_rank_of_a_node_gets_its_share_of_priority_cores(xeon6: Topology, mode: str) -> None:
    plans = planner.plan_all(xeon6, nprocs=8, mode=mode)  # 4 GPUs, 4 ranks per node
    for p in plans:
        assert p.cpus is not None and len(p.cpus) == 32  # 16 whole cores, as before
        assert len(p.cpus & PRIORITY) == 4  # 2 priority cores (with their siblings) each
        assert any("take the highest-performance cores first" in r for r in p.reasons)
    assert frozenset().union(*(p.cpus or frozenset() for p in plans)) == xeon6.online_cpus


@pytest.mark.parametrize("mode", ["node", "socket", "exclusive", "core-complex"])
def test_equal_cores_change_nothing(equal: Topology, no_cppc: Topology, mode: str) -> None:
    for nprocs in (None, 3, 8, 17):
        assert planner.plan_all(equal, nprocs, mode=mode) == planner.plan_all(
            no_cppc, nprocs, mode=mode
        )


def test_node_mode_takes_only_priority_cores_when_asked(xeon6: Topology) -> None:
    plain = planner.plan(xeon6, 5)
    assert plain.cpus == xeon6.nodes[1].cpus
    fast = planner.plan(xeon6, 5, priority_cores=True)
    assert fast.cpus == xeon6.nodes[1].cpus & PRIORITY
    assert fast.reasons[-2] == (
        "priority_cores: only the highest-performance cores (CPPC highest_perf 46 (8 cores), "
        "39 (56 cores)): CPUs 67,75,83,91,99,107,115,123,195,203,211,219,227,235,243,251"
    )
    assert fast.mems == plain.mems


def test_priority_cores_on_equal_cores_says_so_and_keeps_the_node(equal: Topology) -> None:
    plan = planner.plan(equal, 0, priority_cores=True)
    assert plan.cpus == equal.nodes[0].cpus
    assert plan.reasons[-2].startswith("priority_cores: these cores do not differ")


def test_priority_cores_is_a_node_mode_option(xeon6: Topology) -> None:
    with pytest.raises(ConfigError, match="priority_cores applies to mode node"):
        planner.plan(xeon6, 0, mode="socket", priority_cores=True)
    with pytest.raises(ConfigError, match="priority_cores must be True or False"):
        Options(priority_cores="yes")  # type: ignore[arg-type]
    resolved = _environ.resolve({"PYNUMABIND_PRIORITY_CORES": "1"}, Options(rank=0))
    assert resolved.priority_cores and resolved.sources["priority_cores"].endswith("CORES")
    assert not _environ.resolve({"PYNUMABIND_PRIORITY_CORES": "0"}, Options(rank=0)).priority_cores
    with pytest.raises(ConfigError, match="PYNUMABIND_PRIORITY_CORES"):
        _environ.resolve({"PYNUMABIND_PRIORITY_CORES": "2"}, Options(rank=0))


# ------------------------------------------------- the job's GPUs are the ranks


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_a_framework_worker_gets_what_its_launcher_rank_would(xeon6: Topology, data) -> None:
    mode = data.draw(st.sampled_from(["exclusive", "core-complex"]))
    peers: List[int] = sorted(data.draw(st.sets(st.integers(0, 7), min_size=1)))
    mine = data.draw(st.sampled_from(peers))
    worker = planner.plan(xeon6, gpus=[mine], local_gpus=peers, mode=mode)
    ranks = planner.plan_all(xeon6, len(peers), mode=mode, rank_gpus=peers)
    assert worker.cpus == ranks[peers.index(mine)].cpus
    assert worker.mems == ranks[peers.index(mine)].mems


def test_a_process_driving_several_of_the_job_s_gpus_takes_their_slices(xeon6: Topology) -> None:
    ranks = planner.plan_all(xeon6, 4, mode="exclusive")
    both = planner.plan(xeon6, gpus=[1, 2], local_gpus=[0, 1, 2, 3], mode="exclusive")
    assert both.cpus == (ranks[1].cpus or frozenset()) | (ranks[2].cpus or frozenset())


def test_local_gpus_is_checked(xeon6: Topology) -> None:
    with pytest.raises(ConfigError, match=r"local_gpus \[0, 1\] must include every GPU"):
        Options(gpus=[2], local_gpus=[0, 1])
    with pytest.raises(ConfigError, match="goes with gpus="):
        Options(rank=0, local_gpus=[0, 1])
    with pytest.raises(ConfigError, match="GPU 9 out of range"):
        planner.plan(xeon6, gpus=[1], local_gpus=[1, 9], mode="exclusive")
    with pytest.raises(ConfigError, match="invalid PYNUMABIND_LOCAL_GPUS='x'"):
        _environ.resolve({"PYNUMABIND_LOCAL_GPUS": "x"}, Options(gpus=[0]), need_rank=False)
    # node mode does not slice: local_gpus changes nothing there
    assert planner.plan(xeon6, gpus=[1], local_gpus=[1, 2]) == planner.plan(xeon6, gpus=[1])
