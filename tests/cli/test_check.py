"""``pynumabind check`` stays bounded: its timeout, its worker count, a fork that fails.

The fork failure is real: the console script runs inside a cgroup v1 ``pids``
controller whose ``pids.max`` leaves room for only a few workers, so the
kernel refuses the next fork with EAGAIN, as a process limit does on a
crowded node.  Whatever is left in the cgroup afterwards is an orphan.
"""

from __future__ import annotations

import json
import os
import time
from typing import Iterator

import pytest

from ..support import cgroups
from ..support.childproc import child_command
from ..support.cli_helpers import SCRIPT, assert_one_line_error, run
from . import child_cli


def test_timeout_bounds_the_whole_run_starting_workers_included() -> None:
    # 40 interpreters take this machine seconds to start; a timeout of 1 s
    # must still end the run in about 1 s (before the fix: 5 to 6 s).
    started = time.monotonic()
    result = run("check", "--json", "--no-nvml", "--nprocs", "40", "--timeout", "1")
    elapsed = time.monotonic() - started
    assert elapsed < 3.0, f"check --timeout 1 took {elapsed:.1f} s"
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    workers = json.loads(result.stdout)["workers"]
    assert [w["rank"] for w in workers] == list(range(40))
    late = [w for w in workers if not w["ok"]]
    assert late, "40 workers cannot all report within 1 s on this machine"
    for worker in late:
        (problem,) = worker["problems"]
        assert problem in (
            "no report within 1 s",
            "not started: the 1 s timeout ran out while starting workers",
        ), problem


@pytest.mark.parametrize("count", ["1025", "100000"])
def test_nprocs_has_an_upper_limit(count: str) -> None:
    started = time.monotonic()
    result = run("check", "--no-nvml", "--nprocs", count)
    assert time.monotonic() - started < 10
    assert_one_line_error(result, 2, "--nprocs", count)


def test_a_nprocs_within_the_limit_is_accepted() -> None:
    result = run("check", "--json", "--no-nvml", "--nprocs", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [w["ok"] for w in json.loads(result.stdout)["workers"]] == [True] * 3


@pytest.fixture
def pids_cgroup() -> Iterator[str]:
    """A real cgroup v1 pids controller group; removed afterwards."""
    yield from cgroups.group("pids")


def test_a_failed_fork_is_one_line_and_leaves_no_worker_behind(pids_cgroup: str) -> None:
    # Room for the CLI, multiprocessing's resource tracker and two workers:
    # the kernel refuses the next fork (EAGAIN) while those two still run.
    cgroups.write(f"{pids_cgroup}/pids.max", "4")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    # The child joins the cgroup before it execs the script, so every process
    # the script starts is in it too.
    wait_then_exec = child_command(
        child_cli.exec_when_told, SCRIPT, "check", "--no-nvml", "--nprocs", "12", alarm=0
    )
    # run_moved reads until every holder of the pipes exits: an orphaned
    # worker would add its traceback here, or hang the test.
    result = cgroups.run_moved(pids_cgroup, wait_then_exec, env=env)
    stderr = result.stderr
    assert_one_line_error(result, 1, "could not start the worker for rank", "of 12", "EAGAIN")
    assert "were stopped" in stderr and "process limit" in stderr
    # multiprocessing's resource tracker exits once the script's pipe closes;
    # give it a moment.  Orphaned workers would also have printed above.
    for _ in range(100):
        if not cgroups.tasks(pids_cgroup):
            break
        time.sleep(0.05)
    assert cgroups.tasks(pids_cgroup) == [], "processes outlived the check"
