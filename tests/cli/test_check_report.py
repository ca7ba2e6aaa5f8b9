"""What ``pynumabind check`` shows: deliberate no-ops, the GPU of a failed rank, each warning
once, and nothing but one line when interrupted.

Every run is the real console script with real spawned workers, and Ctrl-C
is a real SIGINT to the command's process group (``tests/conftest.py`` puts
SIGINT back when the suite itself was started in the background, where it
would be ignored, and so inherited ignored, which would test nothing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import List

import pytest

from ..support.cli_helpers import SCRIPT, clean_env, run, two_node_snapshot


def test_disabled_binding_is_not_bound_on_purpose_not_a_failure() -> None:
    """The troubleshooting page recommends PYNUMABIND_DISABLE=1; check used to call it FAIL."""
    result = run("check", "--no-nvml", "--nprocs", "1", env={"PYNUMABIND_DISABLE": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[-1] == "ok", lines[1]
    assert "Problems" not in result.stdout
    section = lines.index("Not bound, on purpose")
    assert lines[section + 1] == "  rank 0: disabled by PYNUMABIND_DISABLE=1"
    assert lines[-1] == "0 of 1 workers bound as planned, 1 not bound, on purpose"
    assert result.stderr == ""


def test_disabled_binding_in_json_says_why() -> None:
    result = run("check", "--json", "--no-nvml", "--nprocs", "2", env={"PYNUMABIND_DISABLE": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    for worker in report["workers"]:
        assert worker["ok"] is True and worker["problems"] == []
        assert worker["not_bound"] == "disabled by PYNUMABIND_DISABLE=1"
        assert worker["planned_cpus"] == "unbound" and worker["policy"] == "none"


def test_a_failed_rank_still_names_its_gpu(tmp_path: Path) -> None:
    """Rank 1's node has no allowed CPU: it fails, and the table names GPU 1, not 'none'."""
    snapshot = two_node_snapshot(tmp_path / "machine.json")
    result = run("check", "--topology", str(snapshot), "--allowed-cpus", "0")
    assert result.returncode == 1, result.stdout + result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:3]}
    assert rows["0"][1:3] == ["0", "0000:17:00.0"] and rows["0"][-1] == "ok"
    assert rows["1"][1:3] == ["1", "0000:65:00.0"] and rows["1"][-1] == "FAIL"
    workers = json.loads(
        run("check", "--json", "--topology", str(snapshot), "--allowed-cpus", "0").stdout
    )["workers"]
    assert [w["gpu"] for w in workers] == ["0 0000:17:00.0", "1 0000:65:00.0"]


def _children(pid: int) -> List[int]:
    """The processes whose parent is ``pid`` (read from /proc: no psutil here)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _group_members(pgid: int) -> List[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    members.append(int(entry))
            except ProcessLookupError:
                pass
    return members


@pytest.mark.slow
@pytest.mark.parametrize("started", [1, 4, 16])
def test_ctrl_c_during_check_prints_no_traceback(started: int) -> None:
    """Ctrl-C as a terminal sends it: SIGINT to the whole process group, workers included.

    It used to print screenfuls of KeyboardInterrupt tracebacks from workers
    still starting up (site imports, spawn's bootstrap).  The signal is sent
    once ``started`` workers exist, so that some are half-way through
    starting; the command must say "interrupted" in one line, exit 130, and
    leave no process of its group behind.
    """
    child = subprocess.Popen(
        [SCRIPT, "check", "--no-nvml", "--nprocs", "64"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        deadline = time.monotonic() + 60
        # The first child is multiprocessing's resource tracker; the workers follow.
        while len(_children(child.pid)) < started + 1 and child.poll() is None:
            assert time.monotonic() < deadline, "the workers never started"
            time.sleep(0.01)
        assert child.poll() is None, "check finished before the signal: it tests nothing"
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.communicate()
    assert child.returncode == 130, (child.returncode, err)
    assert err == "pynumabind: error: interrupted\n", err
    assert out == ""
    deadline = time.monotonic() + 10  # the resource tracker leaves as its pipe closes
    while _group_members(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _group_members(child.pid) == [], "processes outlived the interrupted check"


_NO_RECORD = "mode advised: no advice record"


@pytest.mark.parametrize(
    "args", [["plan"], ["plan", "-v"], ["check", "--nprocs", "2"], ["check", "-v", "--nprocs", "2"]]
)
def test_each_warning_is_printed_once_per_command(args: List[str], tmp_path: Path) -> None:
    """``plan --mode advised`` without a record printed its warning three times (the log,
    Reasons, Warnings); check once per worker and once more in its report."""
    env = {"PYNUMABIND_ADVICE": str(tmp_path / "no-record.json")}
    result = run(*args, "--no-nvml", "--mode", "advised", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (result.stdout + result.stderr).count(_NO_RECORD) == 1, result.stdout + result.stderr
    assert _NO_RECORD in result.stdout.split("\nWarnings\n")[1]


@pytest.mark.parametrize("command", ["show", "plan", "check"])
def test_a_hidden_gpus_warning_is_printed_once(command: str, tmp_path: Path) -> None:
    snapshot = two_node_snapshot(tmp_path / "machine.json")
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "-1"}
    result = run(command, "--nprocs", "1", env=env) if command != "show" else run(command, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    both = result.stdout + result.stderr
    assert both.count("selects none of this machine's GPUs") == 1, both


def test_a_warning_the_output_does_not_list_still_reaches_stderr(tmp_path: Path) -> None:
    """Held warnings are released: a plan that fails prints no table, so the log says it."""
    env = {"PYNUMABIND_ADVICE": str(tmp_path / "no-record.json")}
    result = run("plan", "--no-nvml", "--mode", "advised", "--nodes", "9", env=env)
    assert result.returncode == 2 and result.stdout == ""
    warning, error = result.stderr.splitlines()
    assert warning.startswith(f"pynumabind: WARNING: {_NO_RECORD}"), result.stderr
    assert error.startswith("pynumabind: error: ") and "node(s) 9" in error
