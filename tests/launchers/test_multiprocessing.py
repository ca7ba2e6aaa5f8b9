"""The ``multiprocessing`` recipe of docs/site/multiprocessing.md, run for real.

The recipe's code (its ``bind_worker`` initializer and the two pool makers)
is written unchanged into a module; a driver (``recipe_drivers``) starts a
pool of 2 with it under each start method and gives each worker one task that announces its pid
and waits.  While the workers wait, the test reads each one's CPUs (every
thread) and memory policy from ``/proc/PID/`` -- from outside, not from what
the worker says -- and compares them with the planner's plans for ranks 0
and 1.  This machine has one NUMA node, so ``PYNUMABIND_CPUS="1;0"`` (or the
exclusive mode) is what gives the two workers different CPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import pytest

from ..support.childproc import child_command
from ..support.recipes import Observed, observe, recipe
from . import recipe_drivers

pytestmark = [
    pytest.mark.recipes,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1"),
]

LAUNCHER_VARIABLES = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_", "SLURM_", "PYNUMABIND_")


def _clean_env(extra: Dict[str, str]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARIABLES)}
    env.update(extra)
    return env


def _run_pool(tmp_path: Path, kind: str, method: str, extra_env: Dict[str, str]) -> List[Observed]:
    """Start the recipe's pool in a driver process; observe its 2 workers."""
    (tmp_path / "bindrecipe.py").write_text(recipe("multiprocessing"))
    ready = tmp_path / "ready"
    ready.mkdir()
    release = tmp_path / "release"
    driver = subprocess.Popen(
        child_command(recipe_drivers.run_pool, tmp_path, kind, method, ready, release, alarm=150),
        cwd=tmp_path,
        env=_clean_env(extra_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(os.listdir(ready)) < 2 and driver.poll() is None:
            assert time.monotonic() < deadline, "the pool's workers never took their tasks"
            time.sleep(0.02)
        assert driver.poll() is None, f"driver exited early:\n{driver.communicate()[1]}"
        pids = sorted(int(name) for name in os.listdir(ready))
        observed = [observe(pid) for pid in pids]
        release.touch()
        out, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == pids  # the same two workers answered
    return observed


def _planned(**options: str) -> List[str]:
    from pynumabind import planner
    from pynumabind.cpulist import format_cpulist
    from pynumabind.discovery import detect_topology

    topology = detect_topology()
    plans = [planner.plan(topology, rank, 2, **options) for rank in (0, 1)]
    assert all(p.cpus is not None for p in plans)
    return sorted(format_cpulist(p.cpus) for p in plans if p.cpus is not None)


@pytest.mark.parametrize("kind", ["pool", "executor"])
@pytest.mark.parametrize("method", ["spawn", "fork", "forkserver"])
def test_recipe_pool_binds_each_worker_to_its_rank(tmp_path: Path, method: str, kind: str) -> None:
    observed = _run_pool(
        tmp_path, kind, method, {"PYNUMABIND_CPUS": "1;0", "PYNUMABIND_POLICY": "bind"}
    )
    # Ranks go to workers in start order, unknown from outside: compare as sets.
    assert sorted(o.cpus for o in observed) == _planned(cpus="1;0", policy="bind") == ["0", "1"]
    for worker in observed:
        assert worker.thread_cpus == (worker.cpus,), worker  # every thread, not just the main one
        assert worker.policy == "bind:0", worker


def test_recipe_pool_exclusive_mode_gives_disjoint_cpus(tmp_path: Path) -> None:
    observed = _run_pool(tmp_path, "executor", "spawn", {"PYNUMABIND_MODE": "exclusive"})
    assert sorted(o.cpus for o in observed) == _planned(mode="exclusive")
    assert observed[0].cpus != observed[1].cpus
    for worker in observed:
        assert worker.thread_cpus == (worker.cpus,), worker
        assert worker.policy == "prefer:0", worker  # the default memory policy


def test_recipe_extra_worker_rank_is_rejected() -> None:
    """The recipe's warning: a replacement worker's rank ``nprocs`` is a PlanError."""
    from pynumabind import planner
    from pynumabind.discovery import detect_topology
    from pynumabind.errors import PlanError

    with pytest.raises(PlanError, match="rank 2 out of range"):
        planner.plan(detect_topology(), 2, 2)


def test_recipe_executor_reports_a_failed_bind(tmp_path: Path) -> None:
    """The recipe's note: a bind that fails breaks the executor, with the reason on stderr."""
    (tmp_path / "bindrecipe.py").write_text(recipe("multiprocessing"))
    proc = subprocess.run(
        child_command(recipe_drivers.run_failing_executor, tmp_path),
        cwd=tmp_path,
        env=_clean_env({"PYNUMABIND_CPUS": "4095;4095"}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.stdout.startswith("BrokenProcessPool:"), (proc.stdout, proc.stderr)
    assert "Exception in initializer" in proc.stderr
    assert "PYNUMABIND_CPUS" in proc.stderr, proc.stderr  # the error names the variable
