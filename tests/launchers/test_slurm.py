"""The Slurm recipe of docs/integrations.md, run under a real Slurm.

A one-node cluster (slurmctld + slurmd + munge, Debian's packages, see
``slurm_cluster.py``) is started on localhost for this module.  The recipe's
``srun`` line is taken from the document, with the task count set to 2, the
test's interpreter for ``python`` and the recipe's worker (plus a few lines
that announce the task and wait) for ``train.py``.  While the tasks wait, the
test reads each one's CPUs (every thread) and memory policy from
``/proc/PID/`` and compares them with the planner's plan for its
``SLURM_LOCALID``.  Slurm's task/affinity plugin would bind task 0 to CPU 0;
``PYNUMABIND_CPUS="1;0"`` asks the reverse, so a task on CPU 1 as rank 0 shows
that the binding is pynumabind's, made from ``SLURM_LOCALID``.

When the cluster cannot be installed or started, the tests skip with the
reason -- unless ``PYNUMABIND_SLURM_REQUIRED=1`` (set by ``.ci/run``), which
turns that into a failure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from pynumabind._text import format_ids

from ..support.recipes import Observed, observe, recipe
from . import slurm_cluster

REQUIRED_ENV = "PYNUMABIND_SLURM_REQUIRED"
"""Set to ``1`` (CI does) to make an unavailable Slurm cluster a failure, not a skip."""

pytestmark = [
    pytest.mark.recipes,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1"),
]

ANNOUNCE = """
# --- added by the test: announce this task, wait until the test has looked ---
import json as _json, os as _os, sys as _sys, time as _time
_out = _sys.argv[1]
_report = {"pid": _os.getpid(), "localid": int(_os.environ["SLURM_LOCALID"]),
           "plan": binding.plan.to_dict()}
_path = _os.path.join(_out, "task%d.json" % _report["localid"])
with open(_path + ".tmp", "w") as _file:
    _json.dump(_report, _file)
_os.rename(_path + ".tmp", _path)
_deadline = _time.monotonic() + 60
while not _os.path.exists(_os.path.join(_out, "release")):
    if _time.monotonic() > _deadline:
        raise TimeoutError("the test never released the task")
    _time.sleep(0.01)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm_cluster.Cluster]:
    started = time.monotonic()
    try:
        running = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    except slurm_cluster.SlurmUnavailable as exc:
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(f"{REQUIRED_ENV}=1 but the one-node Slurm cluster is unavailable: {exc}")
        pytest.skip(f"one-node Slurm cluster unavailable: {exc}")
    elapsed = time.monotonic() - started
    print(f"\nSlurm cluster installed (if needed) and started in {elapsed:.1f} s")
    yield running
    running.stop()


def _srun_command(script: Path, out: Path, *, cpu_bind_none: bool = True) -> List[str]:
    """The recipe's srun line, for 2 tasks, this interpreter and the test's worker."""
    words = shlex.split(recipe("slurm", "sh").strip())
    expected = ["srun", "--ntasks-per-node=8", "--cpu-bind=none", "python", "train.py"]
    assert words == expected, f"the recipe's srun line changed: update this test ({words})"
    command = [
        {"--ntasks-per-node=8": "--ntasks-per-node=2", "python": sys.executable}.get(w, w)
        for w in words
        if cpu_bind_none or w != "--cpu-bind=none"
    ]
    command[-1:] = [str(script), str(out)]
    return command


Report = Dict[str, Any]


def _clean_env(extra_env: Dict[str, str]) -> Dict[str, str]:
    """This environment without launcher or pynumabind settings, plus ``extra_env``."""
    launchers = ("PYNUMABIND_", "LOCAL_", "OMPI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launchers)}
    env.update(extra_env)
    return env


def _srun(
    cluster: slurm_cluster.Cluster,
    tmp_path: Path,
    extra_env: Dict[str, str],
    *,
    cpu_bind_none: bool = True,
    command: Optional[Callable[[Path, Path], List[str]]] = None,
) -> Tuple[List[Tuple[Report, Observed]], subprocess.CompletedProcess[str]]:
    """Run the recipe under srun; each task's report and what /proc says about it.

    ``command(script, out)`` is the srun line (default: the Slurm recipe's).
    """
    script = tmp_path / "train.py"
    script.write_text(recipe("slurm-worker") + ANNOUNCE)
    out = tmp_path / "out"
    out.mkdir()
    if command is None:
        words = _srun_command(script, out, cpu_bind_none=cpu_bind_none)
    else:
        words = command(script, out)
    srun = subprocess.Popen(
        words,
        cwd=tmp_path,
        env=cluster.env(_clean_env(extra_env)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: List[Tuple[Report, Observed]] = []
    try:
        deadline = time.monotonic() + 120
        while srun.poll() is None and len(list(out.glob("task*.json"))) < 2:
            assert time.monotonic() < deadline, f"tasks never started\n{cluster.logs()}"
            time.sleep(0.05)
        if srun.poll() is None:
            for localid in (0, 1):
                report = json.loads((out / f"task{localid}.json").read_text())
                seen.append((report, observe(report["pid"])))
        (out / "release").touch()
        stdout, stderr = srun.communicate(timeout=120)
    finally:
        if srun.poll() is None:
            srun.kill()
            srun.communicate()
    return seen, subprocess.CompletedProcess(srun.args, srun.returncode, stdout, stderr)


def _plan(localid: int, **options: str) -> Report:
    """The plan for task ``localid`` of 2, its count read from Slurm (as the reason says)."""
    from pynumabind import Options, planner
    from pynumabind.discovery import detect_topology

    given = Options(rank=localid, nprocs=2, nprocs_source="SLURM_NTASKS_PER_NODE", **options)
    return planner.plan(detect_topology(), options=given).to_dict()


def test_srun_recipe_binds_each_task_by_slurm_localid(
    cluster: slurm_cluster.Cluster, tmp_path: Path
) -> None:
    tasks, srun = _srun(cluster, tmp_path, {"PYNUMABIND_CPUS": "1;0", "PYNUMABIND_POLICY": "bind"})
    assert srun.returncode == 0, f"{srun.stderr}\n{cluster.logs()}"
    assert len(tasks) == 2, srun.stderr
    for report, seen in tasks:
        localid = report["localid"]
        plan = _plan(localid, cpus="1;0", policy="bind")
        assert report["plan"] == plan
        assert seen.cpus == plan["cpus"] == str(1 - localid)  # not Slurm's choice (task i: CPU i)
        assert seen.thread_cpus == (seen.cpus,), seen
        assert seen.policy == "bind:0", seen


def test_srun_recipe_exclusive_mode(cluster: slurm_cluster.Cluster, tmp_path: Path) -> None:
    tasks, srun = _srun(cluster, tmp_path, {"PYNUMABIND_MODE": "exclusive"})
    assert srun.returncode == 0, f"{srun.stderr}\n{cluster.logs()}"
    assert len(tasks) == 2, srun.stderr
    for report, seen in tasks:
        plan = _plan(report["localid"], mode="exclusive")
        assert report["plan"] == plan
        assert seen.cpus == plan["cpus"]
        assert seen.thread_cpus == (seen.cpus,), seen
        assert seen.policy == "prefer:0", seen  # the default memory policy
    assert tasks[0][1].cpus != tasks[1][1].cpus


def test_srun_without_cpu_bind_none_fails_clearly(
    cluster: slurm_cluster.Cluster, tmp_path: Path
) -> None:
    """Why the recipe says --cpu-bind=none: Slurm's own binding confines each task first."""
    tasks, srun = _srun(cluster, tmp_path, {"PYNUMABIND_CPUS": "1;0"}, cpu_bind_none=False)
    assert tasks == []
    assert srun.returncode != 0
    for localid in (0, 1):
        assert (
            f"PlanError: rank {localid}: cpus override {1 - localid} has no CPU in this process's "
            f"allowed CPUs {localid} (affinity/cpuset) (settings from the environment: rank from "
            "SLURM_LOCALID, nprocs from SLURM_NTASKS_PER_NODE, cpus from PYNUMABIND_CPUS)"
        ) in srun.stderr


def test_no_root_setup_starts_and_installs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the no-root-setup switch the cluster is refused before any apt-get or daemon runs."""

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setenv("PYNUMABIND_TESTS_NO_ROOT_SETUP", "1")
    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    with pytest.raises(slurm_cluster.SlurmUnavailable) as caught:
        slurm_cluster.start(tmp_path)
    message = str(caught.value)
    assert message.startswith("PYNUMABIND_TESTS_NO_ROOT_SETUP=1: not installing"), message
    assert "slurmctld" in message and "munged" in message and "unset it" in message
    assert list(tmp_path.iterdir()) == []


# --- the fleet recipe: measure every machine type into a shared directory, then follow it

SHARED = "/shared/pynumabind/"
"""The shared directory the fleet recipes name; the test puts its own in its place."""


def _pynumabind_command() -> List[str]:
    """The ``pynumabind`` console script of this interpreter (``python -m`` when it has none)."""
    script = Path(sys.executable).parent / "pynumabind"
    return [str(script)] if script.exists() else [sys.executable, "-m", "pynumabind"]


def _fleet_words(code: str, records: Path, expected: List[str]) -> List[str]:
    """A fleet recipe's one line, checked word for word, with the test's directory."""
    words = shlex.split(code.strip())
    assert words == expected, f"the fleet recipe changed: update this test ({words})"
    shared = f"{records}{os.sep}"
    return [w.replace(SHARED, shared) for w in words]


def test_srun_fleet_recipe_saves_one_record_per_type_and_a_later_step_follows_it(
    cluster: slurm_cluster.Cluster, tmp_path: Path
) -> None:
    """The two fleet recipes, one after the other, as two job steps.

    The advise step runs the recipe's line (one node, this machine's
    ``pynumabind``);
    then the worker step runs the second recipe with 2 tasks, the Slurm
    recipe's worker as ``train.py``: each task must follow the record the
    first step wrote, with no warning, and be bound (or left alone) as the
    record says, read from /proc.
    """
    records = tmp_path / "records"  # missing: the recipe's trailing / makes it a directory
    advise = _fleet_words(
        recipe("slurm-advise", "sh"),
        records,
        ["salloc", "--nodes=4", "--exclusive", "srun", "--ntasks-per-node=1", "--whole",
         "--cpu-bind=none", "pynumabind", "advise", "--quick", "--save", SHARED],
    )  # fmt: skip
    advise[advise.index("--nodes=4")] = "--nodes=1"  # the one node there is
    at = advise.index("pynumabind")
    advise[at : at + 1] = _pynumabind_command()
    began = time.monotonic()
    step = subprocess.run(
        advise,
        cwd=tmp_path,
        env=cluster.env(_clean_env({})),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    print(f"\nadvise step (srun, --quick) took {time.monotonic() - began:.1f} s")
    assert step.returncode == 0, f"{step.stderr[-3000:]}\n{cluster.logs()}"
    # The report is printed (stdout), and it is the record saved.
    saved = sorted(records.iterdir())
    assert len(saved) == 1, saved  # one machine type, one record
    record = saved[0]
    from pynumabind.records._host import this_machine
    from pynumabind.records._machine import record_name

    assert record.name == record_name(this_machine())
    assert (records.stat().st_mode & 0o777, record.stat().st_mode & 0o777) == (0o755, 0o644)
    assert f"saved the advice record to {record}" in step.stderr
    verdict = json.loads(record.read_text())["recommendation"]["verdict"]
    assert verdict in step.stdout, step.stdout
    # Both CPUs of the node measured (a step of one task gets one CPU unless told otherwise).
    threads = sum(int(n) for n in re.findall(r"CPU node \d+ \((\d+) threads\)", step.stderr))
    assert threads >= 2, step.stderr

    def worker_step(script: Path, out: Path) -> List[str]:
        words = _fleet_words(
            recipe("slurm-advised", "sh"),
            records,
            ["srun", "--cpu-bind=none", "env", "PYNUMABIND_MODE=advised",
             f"PYNUMABIND_ADVICE={SHARED}", "python", "train.py"],
        )  # fmt: skip
        words[1:1] = ["--ntasks-per-node=2"]
        words[-2:] = [sys.executable, str(script), str(out)]
        return words

    tasks, srun = _srun(cluster, tmp_path, {}, command=worker_step)
    assert srun.returncode == 0, f"{srun.stderr}\n{cluster.logs()}"
    assert len(tasks) == 2, srun.stderr
    assert "pynumabind" not in srun.stderr, srun.stderr  # no warning, from any task
    for report, seen in tasks:
        plan = report["plan"]
        assert plan["warnings"] == [], plan
        first = plan["reasons"][0]
        assert first.startswith("mode advised: "), first
        assert f"the advice record {record} " in first, first  # followed, and named
        if "not bound, on purpose" in first:  # one memory node: nothing to gain
            assert (plan["mode"], plan["policy"]) == ("none", "none")
            assert seen.cpus == format_ids(os.sched_getaffinity(0)), seen
            assert seen.policy == "default", seen
        else:  # a record that says bind: its plan, as the kernel shows it
            assert seen.cpus == plan["cpus"], (plan, seen)
            assert seen.thread_cpus == (seen.cpus,), seen
    _wait_until_no_job(cluster)


def _wait_until_no_job(cluster: slurm_cluster.Cluster) -> None:
    """Let both jobs finish completing (at most 30 s), so stopping the cluster need not wait.

    Measured here: without this, stopping the cluster after this test took
    20 s (a daemon's whole stop timeout) in 2 runs of 3; with it, in none of 3.
    """
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        squeue = subprocess.run(
            ["squeue", "-h", "-o", "%i"],
            env=cluster.env(dict(os.environ)),
            capture_output=True,
            text=True,
            check=False,
        )
        if squeue.returncode == 0 and not squeue.stdout.strip():
            return
        time.sleep(0.1)
