"""The command line's weighted interleave: ``--weights``, ``--interleave-nodes`` and more.

The flags: ``--policy weighted-interleave``, ``--weights``, ``--interleave-nodes``,
``--set-system-weights``.

Plans are made for a recorded two-node machine (``two_node_snapshot``: nodes 0
and 1, both with memory); ``exec`` and ``check`` bind this machine for real (one
node, Linux 6.18, which has weighted interleave).  Errors are one line and name
the flag or the variable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

from ..support.childproc import child_command
from ..support.cli_helpers import assert_one_line_error, run, two_node_snapshot
from . import child_cli

WEIGHTED = "weighted-interleave"


@pytest.fixture()
def snapshot(tmp_path: Path) -> Path:
    return two_node_snapshot(tmp_path / "two.json")


def test_plan_shows_the_weights_and_their_nodes(snapshot: Path) -> None:
    args = ["plan", "--topology", str(snapshot), "--policy", WEIGHTED, "--weights", "0:3,1:1"]
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    assert [(r["policy"], r["mems"], r["weights"]) for r in ranks] == [
        (WEIGHTED, "0-1", {"0": 3, "1": 1})
    ] * 2
    text = run(*args)
    assert text.returncode == 0, text.stderr
    assert "all ranks: weights 0:3,1:1 (given): a buffer (bind_memory)" in text.stdout
    assert "memory policy weighted-interleave across the given nodes 0-1" in text.stdout


def test_interleave_nodes_name_the_nodes_of_the_kernels_weights(snapshot: Path) -> None:
    result = run(
        "plan", "--topology", str(snapshot), "--policy", WEIGHTED,
        "--interleave-nodes", "0-1", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    assert [(r["mems"], r["weights"]) for r in ranks] == [("0-1", None)] * 2


def test_weights_come_from_the_environment(snapshot: Path) -> None:
    env = {"PYNUMABIND_POLICY": WEIGHTED, "PYNUMABIND_WEIGHTS": "1:2"}
    result = run("plan", "--topology", str(snapshot), "--json", env=env)
    assert result.returncode == 0, result.stderr
    assert [r["weights"] for r in json.loads(result.stdout)["ranks"]] == [{"1": 2}] * 2
    blank = run(
        "plan", "--topology", str(snapshot), "--json", env=dict(env, PYNUMABIND_WEIGHTS=" ")
    )
    assert [r["weights"] for r in json.loads(blank.stdout)["ranks"]] == [None] * 2


@pytest.mark.parametrize(
    ("args", "env", "code", "words"),
    [
        (["--policy", WEIGHTED, "--weights", "0:0"], {}, 2, ["--weights: weight out of range"]),
        (["--policy", WEIGHTED, "--weights", "0:3,"], {}, 2, ["--weights", "empty weights item"]),
        (["--weights", "0:3"], {}, 2, ["--weights go with policy 'weighted-interleave'"]),
        (["--policy", WEIGHTED, "--weights", "0:1,5:1"], {}, 2, ["--weights names NUMA node(s) 5"]),
        (
            ["--policy", WEIGHTED, "--weights", "0:1", "--interleave-nodes", "0-1"],
            {},
            2,
            ["--weights name nodes 0 but interleave_nodes names 0-1"],
        ),
        (["--policy", "bind", "--interleave-nodes", "0"], {}, 2, ["interleave_nodes is only"]),
        (["--policy", WEIGHTED], {"PYNUMABIND_WEIGHTS": "0:x"}, 2, ["PYNUMABIND_WEIGHTS='0:x'"]),
        (
            ["--policy", WEIGHTED],
            {"PYNUMABIND_WEIGHTS": "7:1"},
            2,
            ["PYNUMABIND_WEIGHTS names NUMA node(s) 7"],
        ),
    ],
)
def test_bad_weights_are_one_line_errors(
    snapshot: Path, args: List[str], env: dict, code: int, words: List[str]
) -> None:
    result = run("plan", "--topology", str(snapshot), *args, env=env)
    assert_one_line_error(result, code, *words)


def test_exec_binds_weighted_interleave_here() -> None:
    result = run(
        "exec", "--no-nvml", "--rank", "0", "--nprocs", "1", "--policy", WEIGHTED,
        "--weights", "0:4", "--json", "--", *child_command(child_cli.affinity_and_policy),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["mode"] == 6 and seen["nodes"] == [0]  # MPOL_WEIGHTED_INTERLEAVE survives execve
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["plan"]["weights"] == {"0": 4} and report["weights_mismatch"] is None
    assert report["kernel_weights"] is not None and set(report["kernel_weights"]) == {"0"}


def test_set_system_weights_needs_weights() -> None:
    for command in (["exec", "--rank", "0"], ["check"]):
        tail = ["--", "true"] if command[0] == "exec" else []
        result = run(*command, "--policy", WEIGHTED, "--set-system-weights", *tail)
        assert_one_line_error(result, 2, "--set-system-weights", "--weights NODE:WEIGHT")


def test_check_verifies_a_weighted_worker() -> None:
    result = run("check", "--no-nvml", "--policy", WEIGHTED, "--weights", "0:2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and [w["policy"] for w in report["workers"]] == [WEIGHTED]
    assert report["workers"][0]["page_nodes"] == "0" and report["warnings"] == []
