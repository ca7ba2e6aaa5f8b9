"""CPU restrictions for real: a cgroup v1 cpuset, and an affinity mask from the parent.

A worker asking for CPUs it may not use must get a clear error naming the
CPUs wanted and allowed, with nothing left changed -- never a silently
unbound or half-bound worker.
"""

from __future__ import annotations

import errno
import os
from typing import Iterator

import pytest

from ..support import cgroups
from ..support.childproc import child_command, run_in_child
from ..support.cli_helpers import two_node_snapshot
from . import child_cpuset

CPUSET_ROOT = f"{cgroups.CGROUP_V1}/cpuset"

pytestmark = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1 to confine a child to CPU 0"
)


@pytest.fixture
def cpuset0() -> Iterator[str]:
    """A real cgroup v1 cpuset with cpus=0, mems=0; removed afterwards."""
    yield from cgroups.group("cpuset", {"cpuset.cpus": "0", "cpuset.mems": "0"})


def _run_in_cpuset(cpuset: str, wanted: str) -> dict:
    """Start a child, move it into ``cpuset``, then let it bind to ``wanted``."""
    return cgroups.report_of(
        cgroups.run_moved(cpuset, child_command(child_cpuset.apply_cpus_once_moved, wanted))
    )


def test_cpuset_forbids_the_cpu(cpuset0: str) -> None:
    result = _run_in_cpuset(cpuset0, "1")
    name = cpuset0[len(CPUSET_ROOT) :]
    assert result["cpuset"] == name
    assert result["before"] == "0"
    error = result["error"]
    assert error is not None
    assert "cannot bind to CPUs 1" in error
    assert "may use CPUs 0" in error
    assert f"cpuset {name} allows 0" in error
    assert result["after"] == "0"  # unchanged
    assert result["policy"] == "MPOL_DEFAULT"  # memory untouched too


def test_cpuset_that_would_narrow_the_request_is_refused(cpuset0: str) -> None:
    result = _run_in_cpuset(cpuset0, "0,1")
    assert "cannot bind to CPUs 0-1" in result["error"]
    assert result["after"] == "0" and result["policy"] == "MPOL_DEFAULT"


def test_kernel_einval_on_one_thread_rolls_back_the_others(cpuset0: str) -> None:
    """The kernel itself refuses (EINVAL) for one thread, after another was bound.

    cgroup v1 places threads individually: a worker thread moves itself into
    the CPU-0 cpuset while the caller stays in the root cpuset (CPUs 0-1) but
    restricts its own mask to CPU 0, so both threads look "not pinned".  Binding
    to CPU 1 succeeds for the caller, then the kernel refuses it for the
    confined thread: the caller must be put back.
    """
    result, _ = run_in_child(child_cpuset.one_thread_in_a_cpuset, cpuset0 + "/tasks")
    main, confined = str(result["main"]), str(result["confined"])
    assert result["before"] == {main: "0", confined: "0"}
    assert result["errno"] == errno.EINVAL and result["tid"] == result["confined"]
    assert result["rolled_back"] == [result["main"]]  # had been bound to CPU 1
    assert result["failures"] == []
    assert "CPUs 1" in result["message"] and "EINVAL" in result["message"]
    assert result["after"] == result["before"]


def test_affinity_mask_from_the_parent_is_respected() -> None:
    def confine() -> None:
        os.sched_setaffinity(0, {0})

    result, _ = run_in_child(child_cpuset.apply_cpus, "1", preexec_fn=confine)
    assert result["before"] == "0"
    error = result["error"]
    assert error is not None
    assert "cannot bind to CPUs 1" in error and "CPUs 1 are not allowed here" in error
    assert "may use CPUs 0" in error and "affinity mask 0" in error
    assert result["after"] == "0"
    assert result["policy"] == "MPOL_DEFAULT"


# ------------------------------------------------ fallback="nearest", for real


def _bind_in_cpuset(cpuset: str, snapshot: str, how: str) -> dict:
    """A child moved into ``cpuset`` binds rank 0 of ``snapshot`` as ``how`` says."""
    return cgroups.report_of(
        cgroups.run_moved(cpuset, child_command(child_cpuset.bind_with_fallback, snapshot, how))
    )


@pytest.fixture
def gpus_on_node1(tmp_path):
    """A two-node machine over CPUs 0 and 1 whose GPUs both sit on node 1 (CPU 1)."""

    return str(two_node_snapshot(tmp_path / "node1.json", gpu_nodes=(1, 1)))


def test_a_cpuset_without_the_gpus_node_is_the_clear_error_by_default(
    cpuset0: str, gpus_on_node1: str
) -> None:
    result = _bind_in_cpuset(cpuset0, gpus_on_node1, "core")
    assert "rank 0: its node(s) 1 have CPUs 1" in result["error"]
    assert "may only use CPUs 0" in result["error"]
    assert result["after"] == "0" and result["policy"] == "MPOL_DEFAULT"  # nothing changed


@pytest.mark.parametrize("how", ["nearest", "hook"])
def test_fallback_nearest_starts_the_worker_on_the_cpuset(
    cpuset0: str, gpus_on_node1: str, how: str
) -> None:
    # The cpuset (cpus 0, mems 0) holds nothing of node 1: the worker is bound to
    # node 0's CPU and, node 1's memory not being allowed, node 0's memory.
    result = _bind_in_cpuset(cpuset0, gpus_on_node1, how)
    assert result["error"] is None
    assert result["after"] == "0"
    assert result["policy"] == "MPOL_PREFERRED" and result["policy_nodes"] == [0]
    (warning,) = result["warnings"]  # one warning, naming the cpuset
    assert "GPU 0 (0000:17:00.0) is on node(s) 1" in warning
    assert "allowed CPUs 0 (its cpuset)" in warning and "node 0 (distance 21)" in warning


def test_fallback_error_restores_the_error_in_a_hook(cpuset0: str, gpus_on_node1: str) -> None:
    result = _bind_in_cpuset(cpuset0, gpus_on_node1, "hook-error")
    assert "its node(s) 1 have CPUs 1" in result["error"]
    assert result["after"] == "0" and result["warnings"] == []


@pytest.mark.parametrize("fallback", ["", "error"])
def test_a_ray_actor_outside_its_gpus_node_starts_unless_told_to_fail(
    gpus_on_node1: str, fallback: str
) -> None:
    # An actor confined to CPU 0 (its affinity mask), given GPU 0 on node 1 (CPU 1).
    def confine() -> None:
        os.sched_setaffinity(0, {0})

    result, _ = run_in_child(
        child_cpuset.bind_as_a_ray_actor, gpus_on_node1, fallback, preexec_fn=confine
    )
    assert result["before"] == "0"
    if fallback == "error":
        assert "its node(s) 1 have CPUs 1" in result["error"]
        assert result["warnings"] == []
    else:
        assert result["error"] is None and result["after"] == "0"
        assert result["reasons"][0].startswith("no launcher rank: bound to the 1 GPU(s) Ray gave")
        (warning,) = result["warnings"]
        assert "allowed CPUs 0 (its cpuset)" in warning


@pytest.mark.parametrize("hook", ["bind_gpu", "ray"])
@pytest.mark.parametrize("blank", ["", "  ", "\t"], ids=repr)
def test_a_blank_fallback_variable_leaves_the_hooks_at_nearest(
    gpus_on_node1: str, hook: str, blank: str
) -> None:
    # PYNUMABIND_FALLBACK="" as a Kubernetes or Slurm template exports it is
    # unset: the worker starts on its cpuset (CPU 0; its GPU's node 1 is
    # outside), with the one warning, instead of dying of a PlanError.
    def confine() -> None:
        os.sched_setaffinity(0, {0})

    result, _ = run_in_child(
        child_cpuset.bind_through_a_hook, gpus_on_node1, hook, blank, preexec_fn=confine
    )
    assert result["before"] == "0"
    assert result["error"] is None and result["after"] == "0"
    (warning,) = result["warnings"]
    assert "GPU 0 (0000:17:00.0) is on node(s) 1" in warning
    assert "allowed CPUs 0 (its cpuset)" in warning
