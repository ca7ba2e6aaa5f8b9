"""The installed ``pynumabind`` console script, driven in subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pynumabind.discovery import load_topology
from pynumabind.model import SCHEMA_VERSION, Cpu, Gpu, NumaNode, Topology

from ..support.childproc import child_command
from ..support.cli_helpers import SCRIPT, assert_one_line_error, run
from . import child_cli


def two_socket_machine() -> Topology:
    """2 sockets x 4 cores x 2 threads (sibling N+8), 4 GPUs, GPUs 0,1 on node 0."""
    nodes = {
        0: NumaNode(
            0, frozenset({0, 1, 2, 3, 8, 9, 10, 11}), 64 << 30, 60 << 30, True, {0: 10, 1: 21}
        ),
        1: NumaNode(
            1, frozenset({4, 5, 6, 7, 12, 13, 14, 15}), 64 << 30, 61 << 30, True, {0: 21, 1: 10}
        ),
    }
    cpus = {}
    for cpu in range(16):
        core = cpu % 8
        node = 0 if core < 4 else 1
        cpus[cpu] = Cpu(cpu, node, node, core, 0, frozenset({core, core + 8}), nodes[node].cpus)
    gpus = tuple(
        Gpu(
            i,
            f"0000:{bus:02x}:00.0",
            "nvidia",
            0 if i < 2 else 1,
            nodes[0 if i < 2 else 1].cpus,
            f"GPU-{i:08x}-aaaa-bbbb-cccc-dddddddddddd",
            "NVIDIA H100 80GB HBM3",
            None,
            i,
            "nvml",
        )
        for i, bus in enumerate((0x1B, 0x43, 0x9A, 0xC2))
    )
    return Topology(nodes, cpus, gpus, frozenset(range(16)), frozenset({0, 1}))


@pytest.fixture()
def snapshot(tmp_path: Path) -> Path:
    path = tmp_path / "machine.json"
    path.write_text(two_socket_machine().to_json())
    return path


def test_version_and_help() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("pynumabind ")
    result = run("--help")
    assert result.returncode == 0
    for command in ("show", "plan", "exec", "check", "snapshot"):
        assert command in result.stdout


def test_module_entry_point_matches_script() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pynumabind", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout == run("--version").stdout


def test_show_this_machine() -> None:
    result = run("show", "--no-nvml")
    assert result.returncode == 0, result.stderr
    allowed = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    assert "NUMA nodes" in result.stdout and "This process" in result.stdout
    with open("/sys/devices/system/node/node0/cpulist") as handle:
        assert handle.read().strip() in result.stdout
    assert result.stderr == "", result.stderr
    assert allowed.split(",")[0] in result.stdout


def test_show_json_is_the_topology_schema(snapshot: Path) -> None:
    result = run("show", "--json", "--topology", str(snapshot))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == SCHEMA_VERSION == 2
    assert Topology.from_dict(document["topology"]) == two_socket_machine()
    assert isinstance(document["warnings"], list)


def test_every_json_document_carries_the_one_schema_version(tmp_path: Path) -> None:
    """One rule (pynumabind.model.SCHEMA_VERSION) for every command; advise: test_advise."""
    written = tmp_path / "snap.json"
    assert run("snapshot", "--no-nvml", "-o", str(written)).returncode == 0
    documents = [json.loads(written.read_text())]
    for args in (["show"], ["plan"], ["check"]):
        done = run(*args, "--no-nvml", "--json")
        assert done.returncode == 0, done.stderr
        documents.append(json.loads(done.stdout))
    execd = run("exec", "--no-nvml", "--json", "--rank", "0", "--", "true")
    assert execd.returncode == 0, execd.stderr
    documents.append(json.loads(execd.stderr))  # exec's report goes to stderr
    assert [d["schema"] for d in documents] == [SCHEMA_VERSION] * 5


def test_show_warns_about_unknown_gpu_node_and_memory_only_nodes(tmp_path: Path) -> None:
    machine = two_socket_machine()
    gpus = (machine.gpus[0].__class__(0, "0000:07:00.0", "nvidia", None),)
    nodes = dict(machine.nodes)
    nodes[2] = NumaNode(2, frozenset(), 96 << 30, 96 << 30, True, {0: 80, 1: 80, 2: 10})
    path = tmp_path / "odd.json"
    path.write_text(machine.replace(gpus=gpus, nodes=nodes).to_json())
    result = run("show", "--topology", str(path))
    assert result.returncode == 0, result.stderr
    assert (
        "0000:07:00.0 has no known NUMA node"
        in result.stdout.replace("\n", " ").replace("(", "").replace(")", "")
        or "no known NUMA node" in result.stdout
    )
    assert "node 2 has no CPUs" in result.stdout


def test_snapshot_round_trips_through_topology_option(tmp_path: Path) -> None:
    out = tmp_path / "snap.json"
    result = run("snapshot", "--no-nvml", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("wrote the topology (")  # says where it wrote
    assert f"to {out.resolve()};" in result.stdout
    topology = load_topology(str(out))
    assert topology.allowed_cpus == frozenset(os.sched_getaffinity(0))
    shown = run("show", "--json", "--topology", str(out))
    assert Topology.from_dict(json.loads(shown.stdout)["topology"]) == topology


def test_plan_table_and_json_for_a_foreign_machine(snapshot: Path) -> None:
    table = run("plan", "--topology", str(snapshot))
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[0].split()
    assert header == ["rank", "gpu", "node", "cpus", "mems", "policy"]
    result = run("plan", "--json", "--topology", str(snapshot))
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["gpu_info"]["pci_bus_id"] for r in ranks] == [
        "0000:1b:00.0",
        "0000:43:00.0",
        "0000:9a:00.0",
        "0000:c2:00.0",
    ]
    assert [r["cpus"] for r in ranks] == ["0-3,8-11"] * 2 + ["4-7,12-15"] * 2
    assert [r["mems"] for r in ranks] == ["0", "0", "1", "1"]
    assert all(r["policy"] == "preferred" and r["reasons"] for r in ranks)


def test_plan_exclusive_splits_whole_cores(snapshot: Path) -> None:
    result = run("plan", "--json", "--mode", "exclusive", "--topology", str(snapshot))
    assert result.returncode == 0, result.stderr
    cpus = [r["cpus"] for r in json.loads(result.stdout)["ranks"]]
    assert cpus == ["0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"]


def test_plan_respects_allowed_cpus_override(snapshot: Path) -> None:
    result = run("plan", "--json", "--topology", str(snapshot), "--allowed-cpus", "0-1,4-5")
    assert result.returncode == 0, result.stderr
    cpus = [r["cpus"] for r in json.loads(result.stdout)["ranks"]]
    assert cpus == ["0-1", "0-1", "4-5", "4-5"]


def test_plan_node_override(snapshot: Path) -> None:
    result = run("plan", "--json", "--topology", str(snapshot), "--nodes", "1,1,0,0")
    assert result.returncode == 0, result.stderr
    assert [r["mems"] for r in json.loads(result.stdout)["ranks"]] == ["1", "1", "0", "0"]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["plan", "--allowed-cpus", "0,,1"], 2, ["--allowed-cpus", "empty item"]),
        (["plan", "--allowed-cpus", "3-1"], 2, ["descending"]),
        (["plan", "--allowed-cpus", "99"], 2, ["not online"]),
        (["plan", "--allowed-mems", "7"], 2, ["do not exist"]),
        (["plan", "--nprocs", "0"], 2, ["--nprocs"]),
        (["plan", "--mode", "bogus"], 2, ["invalid choice"]),
        (["plan", "--nodes", "0,9,0,0"], 2, ["9"]),
        (["plan", "--nodes", "0,x"], 2, ["'x'"]),
        (["plan", "--allowed-cpus", "0-1", "--nodes", "1,1,1,1"], 1, ["4-7,12-15", "0-1"]),
        (["check", "--timeout", "inf"], 2, ["--timeout", "'inf'"]),
        (["check", "--timeout", "1e300"], 2, ["--timeout"]),
        (["check", "--timeout", "nan"], 2, ["--timeout"]),
        (["check", "--timeout", "-1"], 2, ["--timeout"]),
        (["check", "--timeout", "0"], 2, ["--timeout"]),
    ],
)
def test_bad_input_is_one_line_error(
    snapshot: Path, args: List[str], code: int, words: List[str]
) -> None:
    result = run(*args, "--topology", str(snapshot))
    assert_one_line_error(result, code, *words)


def test_unreadable_topology_file(tmp_path: Path) -> None:
    """Whatever is wrong with the file, it is a bad option value: exit 2, as a missing one."""
    missing = tmp_path / "nope.json"
    assert_one_line_error(run("show", "--topology", str(missing)), 2, str(missing))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert_one_line_error(run("plan", "--topology", str(garbage)), 2, "not valid JSON")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"schema": 1, "nodes": "\xd0\x00\xff"}')
    assert_one_line_error(run("show", "--topology", str(binary)), 2, "not UTF-8")
    assert_one_line_error(run("show", "--topology", "/etc/passwd"), 2, "'/etc/passwd'", "JSON")
    assert_one_line_error(run("show", "--topology", str(tmp_path)), 2, "Is a directory")
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"schema": 2, "nodes": 7}')
    assert_one_line_error(run("show", "--topology", str(wrong)), 2, "malformed topology snapshot")
    by_variable = run("plan", env={"PYNUMABIND_TOPOLOGY": "/etc/passwd"})
    assert_one_line_error(by_variable, 2, "PYNUMABIND_TOPOLOGY", "'/etc/passwd'")


def test_missing_sysfs_root_is_usage_error(tmp_path: Path) -> None:
    assert_one_line_error(run("show", "--sysfs-root", str(tmp_path / "x")), 2, "not a directory")


def test_empty_machine_options_are_errors_not_this_machine() -> None:
    # `--topology "$SNAPSHOT"` with the variable unset must not quietly plan,
    # check or bind for the local machine instead.
    assert_one_line_error(run("plan", "--topology", ""), 2, "cannot read topology file ''")
    assert_one_line_error(run("show", "--sysfs-root", ""), 2, "--sysfs-root", "not a directory")
    result = run("exec", "--rank", "0", "--topology", "", "--", "true")
    assert_one_line_error(result, 2, "cannot read topology file ''")


def test_no_command_is_usage_error_listing_the_commands() -> None:
    result = run()
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for command in ("show", "plan", "exec", "check", "snapshot"):
        assert f"\n    {command} " in result.stderr, result.stderr


def test_exec_binds_the_child() -> None:
    cpu = max(os.sched_getaffinity(0))
    result = run(
        "exec",
        "--no-nvml",
        "--rank",
        "0",
        "--cpus",
        str(cpu),
        "--policy",
        "bind",
        "--",
        *child_command(child_cli.affinity_and_policy),
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["cpus"] == [cpu]
    assert seen["mode"] == 2  # MPOL_BIND survives execve
    assert seen["nodes"] == [0]


@pytest.mark.parametrize(
    ("placement", "cpus", "mode"),
    [(["--nodes", "0", "--policy", "bind"], None, 2), (["--cpus", "0"], [0], 1)],
    ids=["nodes", "cpus"],
)
def test_exec_needs_no_rank_when_the_placement_is_given(
    placement: List[str], cpus: Optional[List[int]], mode: int
) -> None:
    """numactl --cpunodebind=0 --membind=0 needs no rank; neither does its replacement."""
    command = child_command(child_cli.affinity_and_policy)
    result = run("exec", "--no-nvml", *placement, "--", *command)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["cpus"] == (sorted(os.sched_getaffinity(0)) if cpus is None else cpus)
    assert seen["mode"] == mode and seen["nodes"] == [0]  # MPOL_BIND 2, MPOL_PREFERRED 1


@pytest.mark.parametrize("placement", [["--nodes", "0,0"], ["--cpus", "0;0"]])
def test_exec_needs_a_rank_to_choose_among_several_placements(placement: List[str]) -> None:
    result = run("exec", "--no-nvml", *placement, "--", "true")
    assert_one_line_error(result, 2, "--rank", "LOCAL_RANK", placement[0], "2 ranks")


def _run_with_closed(fd: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the script with standard output (1) or error (2) closed, as daemons do."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    return subprocess.run(
        [SCRIPT, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        preexec_fn=lambda: os.close(fd),
    )


@pytest.mark.parametrize("closed", [1, 2])
def test_exec_runs_the_command_with_a_closed_standard_stream(closed: int) -> None:
    # numactl runs a command whose stdout or stderr is closed; so must exec.
    still_open = 3 - closed
    command = child_command(child_cli.write_ran, still_open, "x")
    args = ["exec", "--rank", "0", "--policy", "none", "--mode", "none"]
    result = _run_with_closed(closed, *args, "--json", "--", *command)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert ("ran x" in result.stdout) == (still_open == 1)
    assert ("ran x" in result.stderr) == (still_open == 2)


def test_show_with_standard_output_closed_is_one_line_error() -> None:
    assert_one_line_error(_run_with_closed(1, "show"), 1, "standard output is closed")
    assert_one_line_error(_run_with_closed(1, "plan", "--json"), 1, "standard output is closed")


def test_exec_takes_rank_from_environment_and_passes_arguments_literally(tmp_path: Path) -> None:
    marker = tmp_path / "injected"
    hostile = f"; touch {marker}; $(touch {marker}) `touch {marker}`"
    result = run(
        "exec",
        "--no-nvml",
        "--",
        *child_command(child_cli.print_repr, hostile),
        env={"LOCAL_RANK": "0"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(hostile)
    assert not marker.exists()


def test_exec_errors() -> None:
    assert_one_line_error(run("exec", "--no-nvml", "--rank", "0"), 2, "needs a command")
    assert_one_line_error(
        run("exec", "--no-nvml", "--rank", "0", "--", "/nonexistent/cmd"), 127, "not found"
    )
    assert_one_line_error(run("exec", "--no-nvml", "--", "true"), 2, "LOCAL_RANK")
    assert_one_line_error(
        run("exec", "--no-nvml", "--", "true", env={"LOCAL_RANK": "zero"}), 2, "LOCAL_RANK"
    )
    assert_one_line_error(
        run("exec", "--no-nvml", "--", "true", env={"LOCAL_RANK": "0", "PYNUMABIND_MODE": "x"}),
        2,
        "PYNUMABIND_MODE",
    )


def test_check_binds_and_verifies_real_workers() -> None:
    result = run("check", "--no-nvml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "workers bound as planned" in result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["rank", "gpu", "planned"]
    summary = lines[-1].split()
    assert summary[0] == summary[2] and int(summary[0]) >= 1


def test_check_json_reports_each_worker() -> None:
    result = run("check", "--json", "--no-nvml", "--nprocs", "2", "--mode", "exclusive")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    workers = report["workers"]
    assert [w["rank"] for w in workers] == [0, 1]
    assert all(w["planned_cpus"] == w["bound_cpus"] for w in workers)
    if len(os.sched_getaffinity(0)) >= 2:
        assert workers[0]["bound_cpus"] != workers[1]["bound_cpus"]


def test_plan_names_are_case_insensitive(snapshot: Path) -> None:
    result = run(
        "plan", "--json", "--mode", "Exclusive", "--policy", "BIND", "--topology", str(snapshot)
    )
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    assert {(r["mode"], r["policy"]) for r in ranks} == {("exclusive", "bind")}


def test_check_counts_ranks_as_the_planner_does() -> None:
    # One owner of the default rank count: a two-entry cpus override means two
    # ranks for `check` too (its own default said one rank per CPU node).
    result = run("check", "--json", "--no-nvml", "--cpus", "0;0")
    assert result.returncode == 0, result.stdout + result.stderr
    workers = json.loads(result.stdout)["workers"]
    assert [(w["rank"], w["planned_cpus"]) for w in workers] == [(0, "0"), (1, "0")]


def _under_seccomp(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the console script with set_mempolicy/mbind denied (EPERM), as in Docker."""
    from ..support import seccomp_filter

    if not seccomp_filter.supported():
        pytest.skip("the hand-built seccomp filter is x86-64 only")
    denied = ",".join(str(nr) for nr in seccomp_filter.MEMPOLICY_SETTERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    return subprocess.run(
        child_command(child_cli.exec_with_syscalls_denied, denied, SCRIPT, *args, alarm=0),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_check_fails_when_workers_cannot_get_their_memory_policy() -> None:
    result = _under_seccomp("check", "--json", "--no-nvml")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is False
    for worker in report["workers"]:
        assert worker["ok"] is False
        assert worker["planned_cpus"] == worker["bound_cpus"]  # CPU binding was kept
        assert any("EPERM" in p and "memory policy" in p for p in worker["problems"])
    assert "Traceback" not in result.stderr


def test_exec_refuses_to_run_half_bound_by_default() -> None:
    result = _under_seccomp("exec", "--no-nvml", "--rank", "0", "--", "true")
    assert_one_line_error(result, 1, "EPERM")
    warned = _under_seccomp(
        "exec",
        "--no-nvml",
        "--rank",
        "0",
        "--on-error",
        "warn",
        "--",
        *child_command(child_cli.print_ran),
    )
    assert warned.returncode == 0, warned.stderr
    assert warned.stdout.strip() == "ran"
    assert "WARNING" in warned.stderr and "EPERM" in warned.stderr
    # One prefix: the library's own "pynumabind: " is not repeated after it.
    (warning,) = [line for line in warned.stderr.splitlines() if "WARNING" in line]
    assert warning.startswith("pynumabind: WARNING: ") and warning.count("pynumabind:") == 1


def test_show_hides_placeholder_nodes_and_names_them_once(tmp_path: Path) -> None:
    """GB200 exposes 34 nodes; 28 have neither CPUs nor memory."""
    from ..support.sysfs_tree import build_sysfs

    root = build_sysfs("gb200_nvl_tray", tmp_path / "sys")
    result = run("show", "--sysfs-root", str(root))
    assert result.returncode == 0, result.stderr
    nodes_table = result.stdout.split("\n\n")[0].splitlines()[2:]
    assert [line.split()[0] for line in nodes_table] == ["0", "1", "2", "10", "18", "26"]
    # kind, then tier: "-", as the recorded machine has no memory_tiering
    assert [line.split()[-2:] for line in nodes_table[2:]] == [["memory-only", "-"]] * 4
    distance_header = result.stdout.split("Distances\n")[1].splitlines()[0].split()
    assert distance_header == ["node", "0", "1", "2", "10", "18", "26"]
    assert "nodes 3-9,11-17,19-25,27-33 have neither CPUs nor memory" in result.stdout
    assert "node 3 has no CPUs" not in result.stdout
    shown = json.loads(run("show", "--json", "--sysfs-root", str(root)).stdout)
    assert len(shown["topology"]["nodes"]) == 34  # JSON keeps every node


def test_plan_shows_the_ranks_that_can_be_planned_and_why_the_others_cannot(
    snapshot: Path,
) -> None:
    # Allowed CPUs on node 0 only: GPUs 2 and 3 sit on node 1.
    result = run("plan", "--topology", str(snapshot), "--allowed-cpus", "0-3,8-11")
    assert result.returncode == 1
    assert result.stderr == "pynumabind: error: 2 of 4 ranks cannot be planned (see the table)\n"
    rows = [line.split() for line in result.stdout.splitlines()[1:5]]
    assert [("0-3,8-11" in row, "error" in row) for row in rows] == [(True, False)] * 2 + [
        (False, True)
    ] * 2
    assert "\n  rank 2: its node(s) 1 have CPUs 4-7,12-15, but" in result.stdout
    result = run("plan", "--json", "--topology", str(snapshot), "--allowed-cpus", "0-3,8-11")
    ranks = json.loads(result.stdout)["ranks"]
    assert [r.get("cpus") for r in ranks[:2]] == ["0-3,8-11"] * 2
    assert ranks[3]["rank"] == 3 and "the intersection is empty" in ranks[3]["error"]


@pytest.mark.parametrize("command", [[""], ["", "arg"]])
def test_exec_refuses_an_empty_command_before_binding(command: List[str]) -> None:
    # Was: bound the process, then a ValueError traceback from execvp.
    result = run("exec", "--no-nvml", "--rank", "0", "-v", "--", *command)
    assert_one_line_error(result, 2, "empty")
    assert "rank 0" not in result.stderr  # the bind's INFO line: nothing was bound


NR_SCHED_SETAFFINITY = 203  # x86-64
NR_SCHED_GETAFFINITY = 204


def _with_syscall_denied(number: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the console script under a real seccomp filter making ``number`` fail with EPERM."""
    from ..support import seccomp_filter

    if not seccomp_filter.supported():
        pytest.skip("the hand-built seccomp filter is x86-64 only")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    return subprocess.run(
        child_command(child_cli.exec_with_syscalls_denied, number, SCRIPT, *args, alarm=0),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    "args", [["show", "--no-nvml"], ["exec", "--no-nvml", "--rank", "0", "--", "true"]]
)
def test_a_denied_sched_getaffinity_is_an_error_naming_the_call(args: List[str]) -> None:
    # Was: a bare PermissionError, printed as "Operation not permitted".
    result = _with_syscall_denied(NR_SCHED_GETAFFINITY, *args)
    assert_one_line_error(result, 1, "sched_getaffinity", "EPERM", "CPUs this process may use")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move to one")
def test_a_sched_setaffinity_eperm_names_the_real_causes_not_the_cpuset() -> None:
    result = _with_syscall_denied(
        NR_SCHED_SETAFFINITY, "exec", "--no-nvml", "--rank", "0", "--cpus", "0", "--", "true"
    )
    assert_one_line_error(result, 1, "sched_setaffinity", "EPERM", "CAP_SYS_NICE", "another user")
    assert "widen the cpuset" not in result.stderr


# ------------------------------------------------------------ a CLI that explains itself


def test_check_shows_the_plans_warnings_in_text_and_json() -> None:
    """Four exclusive workers on this machine's two CPUs share cores: plan warns, so does check."""
    if len(os.sched_getaffinity(0)) != 2:
        pytest.skip("needs exactly two allowed CPUs")
    args = ("check", "--no-nvml", "--nprocs", "4", "--mode", "exclusive")
    planned = run("plan", "--json", *args[1:])
    warning = json.loads(planned.stdout)["ranks"][0]["warnings"][0]
    assert "share physical cores" in warning
    text = run(*args)
    assert text.returncode == 0, text.stderr
    assert f"Warnings\n  all ranks: {warning}\n" in text.stdout
    document = json.loads(run(*args, "--json").stdout)
    assert document["warnings"] == [warning]
    assert all(w["warnings"] == [warning] for w in document["workers"])


def test_check_verbose_shows_each_workers_reasons() -> None:
    quiet = run("check", "--no-nvml", "--nprocs", "2", "--mode", "exclusive")
    loud = run("check", "--no-nvml", "--nprocs", "2", "--mode", "exclusive", "-v")
    assert quiet.returncode == loud.returncode == 0, loud.stderr
    assert "Reasons" not in quiet.stdout
    reasons = loud.stdout.split("Reasons\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "  all ranks: 2 local ranks (--nprocs)" in reasons
    assert any(r.startswith("  rank 0: ") and "gets CPU" in r for r in reasons), reasons
    assert any(r.startswith("  rank 1: ") and "gets CPU" in r for r in reasons), reasons


@pytest.mark.parametrize(
    ("args", "env", "label"),
    [
        ((), {}, "(chosen by pynumabind check)"),
        (("--nprocs", "2"), {}, "2 local ranks (--nprocs)"),
        ((), {"LOCAL_WORLD_SIZE": "2"}, "2 local ranks (from LOCAL_WORLD_SIZE)"),
    ],
    ids=["chosen", "flag", "launcher"],
)
def test_check_labels_the_count_by_its_source(args: tuple, env: dict, label: str) -> None:
    result = run("check", "--no-nvml", "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    first = [w["reasons"][0] for w in json.loads(result.stdout)["workers"]]
    assert all(label in reason for reason in first), first
    assert not any("(given)" in reason for reason in first)


def test_check_explains_itself_on_a_one_node_machine_without_gpus() -> None:
    if len(load_topology_here().cpu_nodes) != 1:
        pytest.skip("this machine has more than one NUMA node with CPUs")
    result = run("check", "--no-nvml")
    assert result.returncode == 0, result.stderr
    assert (
        "no GPU visible: one worker per NUMA node with CPUs; this machine has one NUMA node, "
        "so binding changes nothing here"
    ) in result.stdout
    assert "gpu: the GPU the rank drives (none: no GPU visible); pages on: " in result.stdout
    row = result.stdout.splitlines()[1].split()
    assert row[1] == "none"


def load_topology_here() -> Topology:
    shown = run("show", "--no-nvml", "--json")
    return Topology.from_dict(json.loads(shown.stdout)["topology"])


def test_plan_groups_reasons_shared_by_all_ranks(snapshot: Path) -> None:
    result = run("plan", "--topology", str(snapshot), "--nprocs", "4")
    assert result.returncode == 0, result.stderr
    reasons = result.stdout.split("Reasons\n", 1)[1].split("\n\n", 1)[0].splitlines()
    shared = [r for r in reasons if r.startswith("  all ranks: ")]
    assert "  all ranks: 4 local ranks (--nprocs)" in shared
    own = [r[len("  all ranks: ") :] for r in shared]
    for rank in range(4):
        mine = [r for r in reasons if r.startswith(f"  rank {rank}: ")]
        assert mine and not any(r.split(": ", 1)[1] in own for r in mine)
    assert len(reasons) == len(set(reasons))


def test_plan_grammar_for_one() -> None:
    result = run("plan", "--no-nvml", "--nprocs", "1", "--cpus", "0")
    assert result.returncode == 0, result.stderr
    assert "1 local rank (--nprocs)" in result.stdout
    assert "1 rank spread" in result.stdout
    assert "gets CPU 0" in result.stdout
    for wrong in ("1 local ranks", "1 ranks", "gets CPUs 0\n"):
        assert wrong not in result.stdout


@pytest.mark.parametrize("mode", ["node", "socket", "exclusive", "core-complex"])
def test_plan_reasons_for_one_rank_on_one_node_read_right(mode: str) -> None:
    result = run("plan", "--no-nvml", "--nprocs", "1", "--mode", mode, "-v")
    assert result.returncode == 0, result.stderr
    for wrong in ("node(s)", "package(s)", "nodes 0\n", "ranks 0 ", "among 1 rank", "1 rank,"):
        assert wrong not in result.stdout, (wrong, result.stdout)
    if mode in ("exclusive", "core-complex"):
        assert f"mode {mode}: rank 0 alone on node 0 gets CPU" in result.stdout
    assert "memory policy preferred (local first, spills over instead of OOM): node 0\n" in (
        result.stdout
    )


def test_snapshot_counts_in_the_right_number(tmp_path: Path) -> None:
    done = run("snapshot", "--no-nvml", "-o", str(tmp_path / "one.json"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("wrote the topology (1 NUMA node, 0 GPUs) to ")


def test_errors_name_the_options_of_the_command_line() -> None:
    no_rank = run("exec", "--no-nvml", "--", "true")
    assert_one_line_error(no_rank, 2, "pass --rank or set one of LOCAL_RANK")
    assert "rank=" not in no_rank.stderr
    beyond = run("exec", "--no-nvml", "--rank", "7", "--", "true")
    assert_one_line_error(beyond, 2, "rank 7 out of range", "pass --nprocs to plan more")
    assert "nprocs=" not in beyond.stderr


_MISSING = "/nonexistent/pynumabind-topology.json"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["plan", "--nodes", "9"], {}),
        (["plan", "--cpus", "999"], {}),
        (["plan", "--allowed-cpus", "999"], {}),
        (["plan", "--allowed-mems", "9"], {}),
        (["plan", "--topology", _MISSING], {}),
        (["plan", "--sysfs-root", _MISSING], {}),
        (["plan", "--nprocs", "0"], {}),
        (["exec", "--rank", "999", "--", "true"], {}),
        (["check", "--nprocs", "5000"], {}),
        (["plan"], {"PYNUMABIND_NODES": "9"}),
        (["plan"], {"PYNUMABIND_CPUS": "999"}),
        (["plan"], {"PYNUMABIND_TOPOLOGY": _MISSING}),
        (["exec", "--", "true"], {"LOCAL_RANK": "999"}),
        (["check"], {"LOCAL_WORLD_SIZE": "5000"}),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else ",".join(f"{k}" for k in v),
)
def test_a_value_naming_what_the_machine_lacks_is_a_usage_error(
    args: List[str], env: Dict[str, str]
) -> None:
    """One rule for every option and variable: exit status 2, one line naming the value."""
    result = run(*args, env=env)
    value = next(iter(env.values())) if env else args[2]
    assert_one_line_error(result, 2, value)


def test_exec_on_error_default_is_explained() -> None:
    helped = run("exec", "--help")
    assert "(default: raise" not in helped.stdout
    text = " ".join(helped.stdout.split())
    assert "Default: raise, unlike the library" in text
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "`exec --on-error` defaults to `raise`" in " ".join(readme.split())


def test_show_fills_the_kind_and_tier_columns() -> None:
    result = run("show", "--no-nvml")
    rows = result.stdout.split("NUMA nodes\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert rows[0].split()[-2:] == ["kind", "tier"]
    kinds = [row.rsplit(None, 1)[0] for row in rows[1:]]
    assert all(
        kind.split()[-1] in ("cpus+memory", "memory-only", "empty") or kind.endswith("cpus only")
        for kind in kinds
    ), rows
    # The tier is the kernel's memory_tierN number, or "-" where the kernel shows none.
    assert all(re.fullmatch(r"\d+|-", row.split()[-1]) for row in rows[1:]), rows


def test_metavars_are_nouns_not_destinations() -> None:
    """Every option's value is named from one vocabulary (N, LIST, FILE...), never RANK/TIMEOUT."""
    nouns = {"N", "LIST", "LISTS", "FILE", "DIR", "MODE", "POLICY", "SECONDS", "ACTION", "SCOPE"}
    seen = set()
    for command in ("show", "plan", "exec", "check", "snapshot"):
        usage = run(command, "--help").stdout.split("\n\n", 1)[0]
        for option, metavar in re.findall(r"\[(--?[a-z-]+) ([^\]|]+?)\]", usage):
            assert metavar in nouns, (command, option, metavar)
            seen.add(option)
    assert {"--rank", "--timeout", "--mode", "--policy", "--on-error"} <= seen


def test_show_verbose_says_what_discovery_tried() -> None:
    """``show -v`` printed nothing more, and "GPUs: none visible" never said why."""
    quiet = run("show")
    assert quiet.returncode == 0 and quiet.stderr == ""
    if "GPUs: none visible" in quiet.stdout:  # this machine: no GPU
        assert "`pynumabind show -v` says what discovery tried" in quiet.stdout
    verbose = run("show", "-v")
    assert verbose.returncode == 0, verbose.stderr
    lines = verbose.stderr.splitlines()
    for source in ("machine: this machine", "sysfs /sys", "PCI:", "KFD", "Intel GPUs", "NVML:"):
        assert any(f"pynumabind: INFO: discovery: {source}" in line for line in lines), source
    nvml = next(line for line in lines if "discovery: NVML:" in line)
    assert "not asked:" in nvml or "asked (" in nvml  # and why, either way
    assert not any("DEBUG" in line for line in lines)
    details = run("show", "-vv")
    assert "pynumabind: DEBUG: discovery: sysfs node 0:" in details.stderr


def test_show_verbose_on_a_recorded_tree_says_nvml_was_not_asked(tmp_path: Path) -> None:
    from ..support import sysfs_tree

    root = sysfs_tree.build_sysfs("dgx_h100", tmp_path / "dgx_h100")
    result = run("show", "-v", "--sysfs-root", str(root))
    assert result.returncode == 0, result.stderr
    assert f"discovery: machine: the sysfs tree {str(root)!r} (--sysfs-root)" in result.stderr
    assert "(8 NVIDIA, 0 AMD, 0 Intel)" in result.stderr
    assert "discovery: NVML: not asked: a sysfs tree is read without NVML" in result.stderr
