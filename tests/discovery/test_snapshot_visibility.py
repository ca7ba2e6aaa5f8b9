"""Snapshots and visibility: no silent misplacement.

A snapshot taken under ``CUDA_VISIBLE_DEVICES`` used to keep only the
visible GPUs, renumbered, and ``CUDA_VISIBLE_DEVICES`` was then applied a
second time, by position in that short list.  A visibility value that hides
every GPU gave a GPU-less plan without a word.  ``--topology FILE`` used the
file's allowed sets where ``PYNUMABIND_TOPOLOGY=FILE`` used the process's.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from pynumabind import ConfigError, Options, PlanError, TopologyError, plan_all
from pynumabind.discovery import process_topology, resolve_topology
from pynumabind.discovery._visible import apply_visibility
from pynumabind.model import SCHEMA_VERSION, Gpu, NumaNode, Topology

from ..support.cli_helpers import run_cli as _cli
from ..support.cli_helpers import two_node_snapshot


def four_gpus() -> Topology:
    """Four GPUs, physical i on node i // 2 (so physical 2 and 3 are on node 1)."""
    gpus = tuple(
        Gpu(
            index=i,
            pci_bus_id=f"0000:{0x10 * (i + 1):02x}:00.0",
            vendor="nvidia",
            numa_node=i // 2,
            local_cpus=frozenset({i // 2}),
            uuid=f"GPU-{'ab' if i < 2 else 'cd'}{i}00000-1111-2222-3333-444444444444",
            model="H100",
            physical_index=i,
        )
        for i in range(4)
    )
    nodes = {n: NumaNode(id=n, cpus=frozenset({n}), distances={0: 10, 1: 21}) for n in (0, 1)}
    return Topology(
        nodes=nodes,
        cpus={},
        gpus=gpus,
        allowed_cpus=frozenset({0, 1}),
        allowed_mems=frozenset({0, 1}),
    )


def round_trip(topology: Topology) -> Topology:
    from pynumabind.model import Cpu

    # to_dict needs CPUs; give each node's CPU an entry.
    cpus = {c: Cpu(id=c, node=c, package=c, core=0) for c in (0, 1)}
    return Topology.from_json(topology.replace(cpus=cpus).to_json())


def physical(topology: Topology) -> List[Optional[int]]:
    return [g.physical_index for g in topology.gpus]


# ------------------------------------------------- item 2: filtered snapshots


def test_a_filtered_snapshot_records_the_visibility_it_was_taken_with() -> None:
    taken = round_trip(apply_visibility(four_gpus(), {"CUDA_VISIBLE_DEVICES": "2,3"}))
    assert physical(taken) == [2, 3]
    assert taken.visibility == (("CUDA_VISIBLE_DEVICES", "2,3"),)
    assert json.loads(taken.replace(cpus={}).to_json())["schema"] == SCHEMA_VERSION == 2


def test_the_same_setting_is_not_applied_twice() -> None:
    # Before: "2,3" applied to the two-entry list hid both GPUs: "device none" on node 0.
    taken = round_trip(apply_visibility(four_gpus(), {"CUDA_VISIBLE_DEVICES": "2,3"}))
    used = apply_visibility(taken, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert physical(used) == [2, 3]
    plans = plan_all(used, options=Options(nprocs=2))
    found = [(p.gpu_info.physical_index if p.gpu_info else None, p.node) for p in plans]
    assert found == [(2, 1), (3, 1)]


def test_another_setting_on_a_filtered_snapshot_is_an_error() -> None:
    # Before: "0" took position 0 of the short list, physical GPU 2, silently.
    taken = round_trip(apply_visibility(four_gpus(), {"CUDA_VISIBLE_DEVICES": "2,3"}))
    for env in ({"CUDA_VISIBLE_DEVICES": "0"}, {}):
        with pytest.raises(TopologyError, match=r"only the GPUs visible under CUDA_VISIBLE"):
            apply_visibility(taken, env)


def _schema1_filtered() -> Dict[str, Any]:
    """What the old pynumabind wrote under CUDA_VISIBLE_DEVICES=2,3: schema 1, no record."""
    from pynumabind.model import Cpu

    topology = apply_visibility(four_gpus(), {"CUDA_VISIBLE_DEVICES": "2,3"})
    cpus = {c: Cpu(id=c, node=c, package=c, core=0) for c in (0, 1)}
    data = topology.replace(cpus=cpus, visibility=None).to_dict()
    data["schema"] = 1
    del data["visibility"]
    return data


def test_an_old_filtered_snapshot_is_matched_by_physical_index() -> None:
    old = Topology.from_dict(_schema1_filtered())
    assert old.visibility is None
    assert physical(apply_visibility(old, {"CUDA_VISIBLE_DEVICES": "2,3"})) == [2, 3]
    assert physical(apply_visibility(old, {"CUDA_VISIBLE_DEVICES": "3"})) == [3]
    # An index naming none of its GPUs is an error naming the GPUs it has.
    with pytest.raises(ConfigError, match=r"entry '0' names no GPU \(the GPUs here are 2-3\)"):
        apply_visibility(old, {"CUDA_VISIBLE_DEVICES": "0"})


def test_pci_bus_order_on_an_old_filtered_snapshot_is_an_error() -> None:
    old = Topology.from_dict(_schema1_filtered())
    env = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    with pytest.raises(TopologyError, match="PCI_BUS_ID counts positions"):
        apply_visibility(old, env)


def test_visibility_field_is_checked() -> None:
    data = round_trip(four_gpus()).replace(cpus={})
    from pynumabind.model import Cpu

    cpus = {c: Cpu(id=c, node=c, package=c, core=0) for c in (0, 1)}
    good = data.replace(cpus=cpus).to_dict()
    for bad in ({"LD_PRELOAD": "x"}, {"CUDA_VISIBLE_DEVICES": 3}, ["CUDA_VISIBLE_DEVICES"]):
        with pytest.raises(TopologyError, match="malformed topology snapshot: visibility"):
            Topology.from_dict({**good, "visibility": bad})
    for schema in (3, True, "2"):
        with pytest.raises(TopologyError, match="unsupported topology schema"):
            Topology.from_dict({**good, "schema": schema})


@pytest.fixture
def two_node(tmp_path: Path) -> Path:
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1 allowed")
    return two_node_snapshot(tmp_path / "two-node.json")


def test_snapshot_command_records_every_gpu_whatever_is_visible(
    tmp_path: Path, two_node: Path
) -> None:
    out = tmp_path / "again.json"
    env = {"PYNUMABIND_TOPOLOGY": str(two_node), "CUDA_VISIBLE_DEVICES": "1"}
    done = _cli(env, "snapshot", "-o", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert [g["physical_index"] for g in data["gpus"]] == [0, 1]
    assert data["visibility"] is None
    # ... so the visibility of whoever uses it applies once, by physical index.
    used = process_topology(str(out), {"CUDA_VISIBLE_DEVICES": "1"})
    assert [g.pci_bus_id for g in used.gpus] == ["0000:65:00.0"]


# ------------------------------------------------- item 3: every GPU hidden


@pytest.mark.parametrize("value", ["-1", "3x", "GPU-", ""])
def test_visibility_hiding_every_gpu_warns(value: str, caplog: pytest.LogCaptureFixture) -> None:
    topology = apply_visibility(four_gpus(), {"CUDA_VISIBLE_DEVICES": value})
    assert topology.gpus == ()
    warning = topology.hidden_gpus_warning()
    assert warning is not None and f"CUDA_VISIBLE_DEVICES={value!r}" in warning
    assert warning in topology.notes
    plans = plan_all(topology, options=Options(nprocs=2))
    assert all(any(f"CUDA_VISIBLE_DEVICES={value!r}" in w for w in p.warnings) for p in plans)
    with pytest.raises(PlanError, match=r"selects none of this machine's GPUs.*require_node"):
        plan_all(topology, options=Options(nprocs=2, require_node=True))


def test_visibility_keeping_some_gpu_does_not_warn() -> None:
    topology = apply_visibility(four_gpus(), {"CUDA_VISIBLE_DEVICES": "1,x"})
    assert physical(topology) == [1]
    assert topology.hidden_gpus_warning() is None
    # A machine without GPUs is not warned about either.
    bare = apply_visibility(four_gpus().replace(gpus=()), {"CUDA_VISIBLE_DEVICES": "4"})
    assert bare.hidden_gpus_warning() is None


def test_resolve_topology_logs_the_hidden_gpus(
    two_node: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"PYNUMABIND_TOPOLOGY": str(two_node), "CUDA_VISIBLE_DEVICES": "-1"}
    with caplog.at_level(logging.WARNING, logger="pynumabind"):
        topology = resolve_topology(environ=env)
    assert topology.gpus == ()
    assert any("CUDA_VISIBLE_DEVICES='-1' selects none" in r.message for r in caplog.records)


def test_require_node_refuses_hidden_gpus_in_a_bind(two_node: Path) -> None:
    env = {
        "PYNUMABIND_TOPOLOGY": str(two_node),
        "CUDA_VISIBLE_DEVICES": "-1",
        "PYNUMABIND_REQUIRE_NODE": "1",
    }
    done = _cli(env, "exec", "--rank", "0", "--nprocs", "2", "--", "true")
    assert done.returncode == 1
    assert "CUDA_VISIBLE_DEVICES='-1' selects none" in done.stderr
    assert "require_node" in done.stderr


# ------------------------------------------ item 7: one rule for snapshot files


def test_exec_and_check_with_the_flag_bind_here_like_the_variable(two_node: Path) -> None:
    # Before: the flag's file sets (mems 0-1) reached set_mempolicy: EINVAL for rank 1,
    # and check passed 1 of 2 workers.
    done = _cli({}, "exec", "--rank", "1", "--topology", str(two_node), "--", "true")
    assert done.returncode == 0, done.stderr
    check = _cli({}, "check", "--json", "--topology", str(two_node))
    assert check.returncode == 0, check.stdout + check.stderr
    workers = json.loads(check.stdout)["workers"]
    assert [(w["bound_cpus"], w["ok"]) for w in workers] == [("0", True), ("1", True)]


def test_plan_with_the_flag_is_the_machine_as_recorded(two_node: Path) -> None:
    done = _cli({}, "show", "--json", "--topology", str(two_node))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["topology"]["allowed_mems"] == "0-1"
    assert "exec and check bind here" in " ".join(_cli({}, "plan", "--help").stdout.split())


# ------------------------------------------------- item 10: snapshot details


def test_snapshot_to_an_empty_file_name_is_a_usage_error(two_node: Path) -> None:
    done = _cli({"PYNUMABIND_TOPOLOGY": str(two_node)}, "snapshot", "-o", "")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "file name is empty" in done.stderr


@pytest.mark.parametrize("field", ["numa_node", "memory_node"])
def test_a_snapshot_gpu_on_a_node_that_does_not_exist_is_refused(
    two_node: Path, field: str
) -> None:
    data = json.loads(two_node.read_text())
    data["gpus"][1][field] = 7
    with pytest.raises(TopologyError, match=rf"GPU 1 .*{field} 7, which is not one of its nodes"):
        Topology.from_dict(data)


# ------------------------------------- what was done with the variables: said


def _section(stdout: str, title: str) -> List[str]:
    """The indented lines under ``title`` in a command's text output."""
    lines = stdout.splitlines()
    if title not in lines:
        return []
    body = lines[lines.index(title) + 1 :]
    out: List[str] = []
    for line in body:
        if not line.startswith("  "):
            break
        out.append(line.strip())
    return out


@pytest.mark.parametrize("command", ["plan", "show"])
def test_a_recorded_machine_is_planned_as_recorded_and_says_so(
    command: str, two_node: Path
) -> None:
    """``CUDA_VISIBLE_DEVICES=5,1 plan --topology dgx-h100.json`` planned all 8 GPUs silently.

    A recorded machine keeps all its GPUs (the variable names this machine's
    devices); the output says the variable was not applied, and how to apply it.
    """
    done = _cli({"CUDA_VISIBLE_DEVICES": "1"}, command, "--topology", str(two_node))
    assert done.returncode == 0, done.stderr
    (note,) = _section(done.stdout, "Visible devices")
    assert note.startswith("CUDA_VISIBLE_DEVICES='1': not applied;"), note
    assert "2 GPUs" in note and "PYNUMABIND_TOPOLOGY=FILE" in note
    if command == "plan":
        assert "0000:17:00.0" in done.stdout and "0000:65:00.0" in done.stdout


def test_the_same_machine_through_the_variable_applies_it_and_says_so(two_node: Path) -> None:
    env = {"PYNUMABIND_TOPOLOGY": str(two_node), "CUDA_VISIBLE_DEVICES": "1"}
    done = _cli(env, "plan")
    assert done.returncode == 0, done.stderr
    (note,) = _section(done.stdout, "Visible devices")
    assert note == (
        "CUDA_VISIBLE_DEVICES='1': applied; this process sees 1 GPU: the machine's 1 "
        "(driver numbering), numbered 0 here"
    )
    assert "0000:65:00.0" in done.stdout and "0000:17:00.0" not in done.stdout
    document = json.loads(_cli(env, "plan", "--json").stdout)
    assert document["visibility"] == note


def test_no_visibility_variable_no_note(two_node: Path) -> None:
    done = _cli({}, "plan", "--topology", str(two_node))
    assert done.returncode == 0 and "Visible devices" not in done.stdout
    assert (
        json.loads(_cli({}, "plan", "--json", "--topology", str(two_node)).stdout)["visibility"]
        is None
    )


def test_visibility_note_names_the_gpus_in_the_process_order() -> None:
    from pynumabind.discovery._visible import visibility_note

    env = {"CUDA_VISIBLE_DEVICES": "3,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    seen = apply_visibility(four_gpus(), env)
    note = visibility_note(seen, env, applied=True)
    assert note == (
        "CUDA_VISIBLE_DEVICES='3,1', CUDA_DEVICE_ORDER='PCI_BUS_ID': applied; this process "
        "sees 2 GPUs: the machine's 3, 1 (driver numbering), numbered 0-1 here"
    )
    recorded = visibility_note(four_gpus(), env, applied=False, recorded_by="--sysfs-root")
    assert recorded is not None and "the machine of --sysfs-root" in recorded
    assert "4 GPUs" in recorded and "PYNUMABIND_TOPOLOGY" not in recorded
    assert visibility_note(four_gpus(), {}, applied=True) is None
