"""The command line's ``--tiers`` (and ``PYNUMABIND_TIERS``): memory over the slower tier too.

Plans are made for the recorded 6.12 guest with firmware HMAT (``--sysfs-root``: node 2 memory
only, in a tier of its own) and for a shipped snapshot without tiers; ``exec`` binds this
machine for real (one node, one tier: nothing slower to spread over).  Errors are one line and
name the flag or the variable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List

import pytest

from ..support.childproc import child_command
from ..support.cli_helpers import assert_one_line_error, run
from . import child_cli

HMAT_TREE = Path(__file__).resolve().parents[1] / "machines" / "sysfs" / "qemu-6.12-hmat"
NOTHING = "tiers all: "


def _ranks(*args: str, env: Dict[str, str] | None = None) -> List[dict]:
    result = run("plan", "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    ranks: List[dict] = json.loads(result.stdout)["ranks"]
    return ranks


def test_plan_tiers_all_spreads_each_rank_over_node_2() -> None:
    root = ["--sysfs-root", str(HMAT_TREE), "--no-nvml", "--nprocs", "2"]
    ranks = _ranks(*root, "--tiers", "all")
    assert [(r["node"], r["mems"], r["policy"], r["weights"]) for r in ranks] == [
        (0, "0,2", "weighted-interleave", None),
        (1, "1-2", "weighted-interleave", None),
    ]
    weighted = _ranks(*root, "--tiers", "ALL", "--weights", "0:3,1:3,2:1")
    assert [r["weights"] for r in weighted] == [{"0": 3, "2": 1}, {"1": 3, "2": 1}]
    from_env = _ranks(*root, env={"PYNUMABIND_TIERS": "all"})
    assert [r["mems"] for r in from_env] == ["0,2", "1-2"]
    local = _ranks(*root, "--tiers", "local", env={"PYNUMABIND_TIERS": "all"})  # flag wins
    assert [(r["mems"], r["policy"]) for r in local] == [("0", "preferred"), ("1", "preferred")]
    text = run("plan", *root, "--tiers", "all")
    assert text.returncode == 0, text.stderr
    assert "memory-only node 2 (tier 54, at distance 40; node 0: tier 4)" in text.stdout


def test_show_gives_the_firmwares_hmat_figures_where_it_has_them() -> None:
    shown = run("show", "--sysfs-root", str(HMAT_TREE), "--no-nvml")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1].split() == ["node", "cpus", "memory", "free", "kind", "tier", "hmat", "read"]
    node_rows = {line.split()[0]: line for line in lines[2:5]}
    assert node_rows["0"].endswith("4     20480 MB/s, 100 ns")
    assert node_rows["2"].endswith("54    5120 MB/s, 300 ns")  # the slower tier, memory only
    assert lines[5].startswith("hmat read: the bandwidth and latency the firmware (HMAT) claims")
    plain = run("show", "--topology", "example:dgx-h100")  # no HMAT recorded: no column
    assert plain.returncode == 0, plain.stderr
    assert "hmat" not in plain.stdout
    assert plain.stdout.splitlines()[1].split()[-1] == "tier"


def test_plan_of_a_snapshot_without_tiers_is_plain_with_one_warning() -> None:
    result = run("plan", "--topology", "example:dgx-h100", "--nprocs", "2", "--tiers", "all")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(NOTHING) == 1  # "all ranks: ..." under Warnings, once
    assert "no memory tiers are known here" in result.stdout
    ranks = _ranks("--topology", "example:dgx-h100", "--nprocs", "2", "--tiers", "all")
    assert [(r["mems"], r["policy"]) for r in ranks] == [("0", "preferred")] * 2
    assert all(len([w for w in r["warnings"] if w.startswith(NOTHING)]) == 1 for r in ranks)


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["--tiers", "all", "--policy", "bind"], {}, ["--tiers all", "contradicts --policy bind"]),
        (
            ["--policy", "preferred"],
            {"PYNUMABIND_TIERS": "all"},
            ["PYNUMABIND_TIERS=all", "contradicts --policy preferred"],
        ),
        (
            ["--tiers", "all", "--interleave-nodes", "0,2"],
            {},
            ["--tiers all picks each rank's memory nodes itself"],
        ),
        ([], {"PYNUMABIND_TIERS": "every"}, ["invalid PYNUMABIND_TIERS='every'", "local, all"]),
        (["--tiers", "every"], {}, ["argument --tiers: invalid choice: 'every'"]),
    ],
)
def test_bad_tiers_are_one_line_errors(args: List[str], env: dict, words: List[str]) -> None:
    result = run("plan", "--sysfs-root", str(HMAT_TREE), "--no-nvml", *args, env=env)
    assert_one_line_error(result, 2, *words)


def test_exec_with_tiers_all_here_binds_the_plain_plan_and_says_why_once() -> None:
    result = run(
        "exec", "--no-nvml", "--rank", "0", "--nprocs", "1", "--tiers", "all", "--json",
        "--", *child_command(child_cli.affinity_and_policy),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["mode"] == 1 and seen["nodes"] == [0]  # MPOL_PREFERRED on node 0
    report = json.loads(result.stderr.strip().splitlines()[-1])
    assert report["plan"]["policy"] == "preferred"
    said = [w for w in report["plan"]["warnings"] if w.startswith(NOTHING)]
    assert len(said) == 1 and "no allowed memory-only node" in said[0], report["plan"]
