"""PYNUMABIND_TOPOLOGY: plan from a snapshot, with this process's own view.

The snapshot is a two-node machine whose CPUs are this machine's CPUs 0 and
1 (GPU i on node i), so a plan made from it is applied here for real, in a
child process, and read back from the kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import pytest

from pynumabind import Options, TopologyError, bind_current_process, discovery
from pynumabind.discovery import process_topology, resolve_topology
from pynumabind.discovery._environ import resolve
from pynumabind.model import Topology

from ..support import child_environ
from ..support.childproc import run_in_child
from ..support.cli_helpers import two_node_snapshot


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1 allowed")
    return two_node_snapshot(tmp_path / "two-node.json")


def test_resolve_reads_the_variable_and_empty_is_unset() -> None:
    options = resolve({"PYNUMABIND_TOPOLOGY": "/x.json"}, Options(rank=0))
    assert options.topology_file == "/x.json"
    assert options.sources["topology_file"] == "PYNUMABIND_TOPOLOGY"
    assert resolve({"PYNUMABIND_TOPOLOGY": " "}, Options(rank=0)).topology_file is None


def test_process_view_over_the_snapshot(snapshot: Path) -> None:
    topology = process_topology(str(snapshot), {"CUDA_VISIBLE_DEVICES": "1"})
    assert sorted(topology.nodes) == [0, 1]
    assert [g.pci_bus_id for g in topology.gpus] == ["0000:65:00.0"]  # visibility applied
    assert topology.allowed_cpus == frozenset(os.sched_getaffinity(0))
    assert topology.allowed_mems == frozenset({0})  # this machine's, not the file's "0-1"
    assert topology.notes[-1] == f"machine from PYNUMABIND_TOPOLOGY={snapshot}"


def test_missing_file_names_variable_and_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(TopologyError, match=rf"^PYNUMABIND_TOPOLOGY: .*'{missing}'"):
        process_topology(str(missing))


def test_bad_file_names_variable_and_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(TopologyError, match=rf"^PYNUMABIND_TOPOLOGY: topology file '{bad}': "):
        process_topology(str(bad))


def test_another_machines_snapshot_is_an_error(tmp_path: Path, snapshot: Path) -> None:
    data = json.loads(snapshot.read_text())
    data["nodes"], data["cpus"], data["gpus"] = [data["nodes"][0]], [data["cpus"][0]], []
    data["allowed_cpus"] = data["allowed_mems"] = "0"
    small = tmp_path / "small.json"
    small.write_text(json.dumps(data))
    with pytest.raises(TopologyError, match=r"lacks CPUs this process may run on \(1\)"):
        process_topology(str(small))


# ------------------------------------------------------------ resolve_topology
# (the one place that decides where the machine comes from)


def test_resolve_topology_takes_the_variable_and_visibility_from_the_mapping(
    snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYNUMABIND_TOPOLOGY", "/nonexistent/os-environ.json")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "1"}
    topology = resolve_topology(environ=env)
    assert [g.pci_bus_id for g in topology.gpus] == ["0000:65:00.0"]
    assert topology.notes[-1] == f"machine from PYNUMABIND_TOPOLOGY={snapshot}"


def test_resolve_topology_explicit_sources_win_over_the_variable(
    snapshot: Path, tmp_path: Path
) -> None:
    env = {"PYNUMABIND_TOPOLOGY": "/nonexistent.json"}
    as_recorded = resolve_topology(environ=env, snapshot=str(snapshot))
    assert as_recorded.allowed_mems == frozenset({0, 1})  # the file's, not this process's
    assert len(as_recorded.gpus) == 2  # no visibility applied to another machine
    with pytest.raises(TopologyError, match="cannot read topology file ''"):
        resolve_topology(environ={}, snapshot="")  # "" never means "this machine"


def test_resolve_topology_trims_ascii_whitespace_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYNUMABIND_TOPOLOGY", raising=False)
    here = resolve_topology(environ={"PYNUMABIND_TOPOLOGY": " \t\n"}, use_nvml=False)
    assert not any("PYNUMABIND_TOPOLOGY" in note for note in here.notes)  # unset: this machine
    with pytest.raises(TopologyError, match=r"^PYNUMABIND_TOPOLOGY: .*'\\xa0'"):
        resolve_topology(environ={"PYNUMABIND_TOPOLOGY": "\u00a0"})  # a file name, not blank


def test_bind_current_process_detects_with_the_given_environ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A bug this guards against: environ= reached the snapshot path but not
    # detection, so CUDA_VISIBLE_DEVICES came from os.environ.  This machine
    # has no GPU, so the mapping detection receives is what can be observed.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "from-os-environ")
    monkeypatch.setenv("PYNUMABIND_TOPOLOGY", "/nonexistent/os-environ.json")
    seen: List[Optional[Mapping[str, str]]] = []
    real = discovery.detect_topology

    def spy(**kwargs: Any) -> Topology:
        seen.append(kwargs.get("environ"))
        return real(**kwargs)

    monkeypatch.setattr(discovery, "detect_topology", spy)
    env: Dict[str, str] = {"LOCAL_RANK": "0", "CUDA_VISIBLE_DEVICES": "from-the-mapping"}
    binding = bind_current_process(environ=env, nprocs=1, mode="none", policy="none")
    assert binding.applied is False  # mode and memory "none": nothing changed here
    assert len(seen) == 1 and seen[0] is not None
    assert seen[0]["CUDA_VISIBLE_DEVICES"] == "from-the-mapping"


def _bind_in_child(env: dict) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    full.update(env)
    line, _ = run_in_child(child_environ.bind_and_say_where, env=full, timeout=120)
    return line


def test_bind_current_process_plans_from_the_snapshot(snapshot: Path) -> None:
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "0,1"}
    assert _bind_in_child({**env, "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}) == "CPUS 1"
    assert _bind_in_child({**env, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}) == "CPUS 0"


def test_bind_current_process_never_falls_back_to_sysfs(tmp_path: Path) -> None:
    missing = tmp_path / "gone.json"
    line = _bind_in_child({"PYNUMABIND_TOPOLOGY": str(missing), "LOCAL_RANK": "0"})
    # SnapshotFileError: a TopologyError (and a ConfigError: the CLI's usage error).
    assert line.startswith("ERROR SnapshotFileError PYNUMABIND_TOPOLOGY: ")
    assert str(missing) in line


# ------------------------------------------------ the CLI: the same machine as its workers


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        full.pop(name, None)
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pynumabind", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )


def test_cli_plan_and_check_use_the_snapshot_like_their_workers(snapshot: Path) -> None:
    # Before: plan showed this one-node machine, and check spawned one worker for it
    # while that worker bound from the snapshot's GPU 0.
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "0,1"}
    plans = json.loads(_cli(env, "plan", "--json").stdout)["ranks"]
    assert [(p["gpu_info"]["pci_bus_id"], p["cpus"]) for p in plans] == [
        ("0000:17:00.0", "0"),
        ("0000:65:00.0", "1"),
    ]
    check = _cli(env, "check", "--json")
    assert check.returncode == 0, check.stderr
    workers = json.loads(check.stdout)["workers"]
    assert [(w["planned_cpus"], w["bound_cpus"], w["ok"]) for w in workers] == [
        ("0", "0", True),
        ("1", "1", True),
    ]
    # Each worker's GPU is "gpu", as in plan's JSON (one name per concept).
    assert [w["gpu"] for w in workers] == ["0 0000:17:00.0", "1 0000:65:00.0"]
    assert "device" not in workers[0]


def test_cli_topology_flag_wins_over_the_variable(tmp_path: Path, snapshot: Path) -> None:
    env = {"PYNUMABIND_TOPOLOGY": str(tmp_path / "nope.json")}
    done = _cli(env, "plan", "--json", "--topology", str(snapshot))
    assert done.returncode == 0, done.stderr


def test_cli_missing_snapshot_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    done = _cli({"PYNUMABIND_TOPOLOGY": str(tmp_path / "nope.json")}, "show")
    assert done.returncode == 2  # a file that does not exist: a usage error
    assert done.stderr.startswith("pynumabind: error: PYNUMABIND_TOPOLOGY: cannot read ")
    assert len(done.stderr.splitlines()) == 1


def test_cli_plan_reads_the_pynumabind_variables_and_flags_win() -> None:
    # Before, plan ignored them while exec and check's workers obeyed them.
    env = {"PYNUMABIND_MODE": "none", "PYNUMABIND_POLICY": "local"}
    ranks = json.loads(_cli(env, "plan", "--json", "--no-nvml").stdout)["ranks"]
    assert {(r["mode"], r["cpus"], r["policy"]) for r in ranks} == {("none", None, "local")}
    flagged = json.loads(_cli(env, "plan", "--json", "--no-nvml", "--mode", "node").stdout)
    assert {r["mode"] for r in flagged["ranks"]} == {"node"}
    bad = _cli({"PYNUMABIND_MODE": "bogus"}, "plan")
    assert bad.returncode == 2 and "PYNUMABIND_MODE" in bad.stderr
