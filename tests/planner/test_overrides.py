"""One reader of the per-rank overrides, one rule for spaces.

Before: the framework hooks read ``PYNUMABIND_NODES`` themselves (``""`` a
ConfigError, ``str.split()`` splitting at U+00A0 and ``\\x1f``) while the core
treated blank as unset and trimmed items with ``str.strip()`` (``'0\\xa0,1'``
accepted for nodes, refused for CPUs); the space-separated form ``"1 1 0 0"``
only worked in the hooks.  And ``gpus=`` took bytearray and memoryview,
blamed the launcher's rank in its errors, and ignored its size silently.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pynumabind import ConfigError, Options, PlanError, plan, plan_all
from pynumabind.discovery._environ import resolve
from pynumabind.integrations import bind_gpus, per_gpu_override
from pynumabind.model import Cpu, Gpu, NumaNode, Topology
from pynumabind.planner._overrides import parse_cpus_override, parse_nodes_override

from ..support import child_environ
from ..support.childproc import run_in_child
from ..support.cli_helpers import run_cli as _cli
from ..support.cli_helpers import two_node_snapshot


def two_nodes() -> Topology:
    """Two nodes (CPU n on node n), GPU n on node n."""
    gpus = tuple(
        Gpu(
            index=i,
            pci_bus_id=f"0000:{0x10 * (i + 1):02x}:00.0",
            vendor="nvidia",
            numa_node=i,
            local_cpus=frozenset({i}),
            physical_index=i,
        )
        for i in range(2)
    )
    nodes = {n: NumaNode(id=n, cpus=frozenset({n}), distances={0: 10, 1: 21}) for n in (0, 1)}
    return Topology(
        nodes=nodes,
        cpus={c: Cpu(id=c, node=c, package=c, core=0) for c in (0, 1)},
        gpus=gpus,
        allowed_cpus=frozenset({0, 1}),
        allowed_mems=frozenset({0, 1}),
    )


def nodes_of(plans: List[object]) -> List[Optional[int]]:
    return [p.node for p in plans]  # type: ignore[attr-defined]


# ------------------------------------------------------- item 8: one rule


@pytest.mark.parametrize("blank", ["", " ", "\t\n"])
def test_blank_is_unset_in_the_core_and_the_hooks(blank: str) -> None:
    env = {"PYNUMABIND_NODES": blank, "PYNUMABIND_CPUS": blank}
    assert resolve(env, Options(rank=0)).nodes is None
    assert per_gpu_override("PYNUMABIND_NODES", env) is None
    assert per_gpu_override("PYNUMABIND_CPUS", env) is None


@pytest.mark.parametrize(
    "value", ["0\xa0,1", "0,1\xa0", "0\x1f1", "0\xa01", "\xa0", "0 1\x1f1", "0\u20031"]
)
def test_only_ascii_whitespace_separates_or_is_trimmed(value: str) -> None:
    # Before: the core took '0\xa0,1' as nodes (str.strip), the hooks split at \xa0/\x1f.
    with pytest.raises(ConfigError, match="nodes override"):
        parse_nodes_override(value)
    with pytest.raises(ConfigError, match="cpus override"):
        parse_cpus_override(value.replace(",", ";"))
    env = {"PYNUMABIND_NODES": value}
    text = per_gpu_override("PYNUMABIND_NODES", env)
    assert text == resolve(env, Options(rank=0)).nodes  # the same text reaches the planner
    with pytest.raises(ConfigError, match="nodes override"):
        plan(two_nodes(), gpus=[0], nodes=text)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("1 1 0 0", [1, 1, 0, 0]),
        (" 1\t0  1 0\n", [1, 0, 1, 0]),
        ("1,1,0,0", [1, 1, 0, 0]),
        ("1;1;0;0", [1, 1, 0, 0]),
    ],
)
def test_space_separated_nodes_everywhere(value: str, want: List[int]) -> None:
    topology = two_nodes()
    from_env = resolve({"PYNUMABIND_NODES": value}, Options(rank=0))
    assert nodes_of(plan_all(topology, options=from_env.__class__(nodes=from_env.nodes))) == want
    assert nodes_of(plan_all(topology, nodes=value)) == want


def test_space_separated_cpus() -> None:
    assert parse_cpus_override("0-7 8-15") == (frozenset(range(8)), frozenset(range(8, 16)))
    # A comma makes it one cpulist (spaces allowed inside, as the kernel's).
    assert parse_cpus_override("0-3, 5") == (frozenset({0, 1, 2, 3, 5}),)
    plans = plan_all(two_nodes(), cpus="1 0")
    assert [p.cpus for p in plans] == [frozenset({1}), frozenset({0})]


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1 allowed")
    return two_node_snapshot(tmp_path / "two-node.json")


def test_cli_options_take_the_space_separated_form(snapshot: Path) -> None:
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot)}
    done = _cli(env, "plan", "--json", "--nodes", "1 1 0 0")
    assert done.returncode == 0, done.stderr
    assert [p["node"] for p in json.loads(done.stdout)["ranks"]] == [1, 1, 0, 0]
    done = _cli(env, "plan", "--json", "--cpus", "1 0")
    assert done.returncode == 0, done.stderr
    assert [p["cpus"] for p in json.loads(done.stdout)["ranks"]] == ["1", "0"]
    env["PYNUMABIND_NODES"] = "0 1 1"
    done = _cli(env, "plan", "--json")
    assert [p["node"] for p in json.loads(done.stdout)["ranks"]] == [0, 1, 1]


def _hook(env: Dict[str, str]) -> Dict[str, object]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    full.pop("CUDA_VISIBLE_DEVICES", None)
    full.update(env)
    result: Dict[str, object]
    result, _ = run_in_child(child_environ.hook_binds_gpu0, env=full, timeout=120)
    return result


@pytest.mark.parametrize("blank", ["", " "])
def test_hook_binds_with_a_blank_override(snapshot: Path, blank: str) -> None:
    # Before: a ConfigError that stopped the vLLM/SGLang worker.
    env = {"PYNUMABIND_TOPOLOGY": str(snapshot), "PYNUMABIND_NODES": blank}
    assert _hook(env) == {"cpus": [0]}
    assert _hook({**env, "PYNUMABIND_NODES": "1 0"}) == {"cpus": [1]}


def test_hook_does_not_ignore_a_no_break_space_topology() -> None:
    result = _hook({"PYNUMABIND_TOPOLOGY": "\xa0"})
    assert result["error"] == "SnapshotFileError"
    assert "PYNUMABIND_TOPOLOGY" in str(result["message"])


# ------------------------------------------------------- item 10: gpus=


@pytest.mark.parametrize("value", [bytearray(b"\x00"), memoryview(b"\x00\x01"), b"\x00", "0"])
def test_byte_and_text_sequences_are_not_gpu_lists(value: object) -> None:
    with pytest.raises(ConfigError, match="gpus must be a sequence"):
        plan(two_nodes(), gpus=value)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="gpus must be a sequence"):
        Options(gpus=value)  # type: ignore[arg-type]


def test_bind_gpus_checks_its_indices_as_gpus_does() -> None:
    # Before: a bare TypeError ("'>=' not supported") for ['0'].
    for bad, message in ((["0"], "GPU index must be an integer"), ([], "no GPU to bind to")):
        with pytest.raises(ConfigError, match=message):
            bind_gpus(bad, what="worker", topology=two_nodes(), environ={})


def test_union_errors_name_the_gpu_not_a_launcher_rank() -> None:
    topology = two_nodes().replace(allowed_cpus=frozenset({0}))
    env_options = resolve({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, Options(gpus=(0, 1)))
    with pytest.raises(PlanError) as caught:
        plan(topology, options=env_options)
    message = str(caught.value)
    assert message.startswith("GPU 1 (one of the GPUs this process drives): ")
    assert "rank 1" not in message and "LOCAL_RANK" not in message


def test_union_says_the_launchers_rank_and_size_are_not_used() -> None:
    env_options = resolve({"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, Options(gpus=(0, 1)))
    union = plan(two_nodes(), options=env_options)
    assert union.cpus == frozenset({0, 1})
    assert any(
        "rank from LOCAL_RANK and nprocs from LOCAL_WORLD_SIZE not used" in r for r in union.reasons
    )
    quiet = plan(two_nodes(), gpus=[0, 1])
    assert not any("not used" in r for r in quiet.reasons)


def test_check_prints_the_rank_once(tmp_path: Path, snapshot: Path) -> None:
    data = json.loads(snapshot.read_text())
    data["gpus"][1].update(numa_node=None, local_cpus="")
    unknown = tmp_path / "unknown-node.json"
    unknown.write_text(json.dumps(data))
    done = _cli({"PYNUMABIND_REQUIRE_NODE": "1"}, "check", "--topology", str(unknown))
    assert done.returncode == 1
    assert "  rank 1: " in done.stdout
    assert "rank 1: rank 1:" not in done.stdout


def test_a_no_rank_bind_failure_names_the_gpu(snapshot: Path) -> None:
    # Before: "rank 0: its node(s) 0 have CPUs 0, ..." for a process given no rank.
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        full.pop(name, None)
    full.update({"PYNUMABIND_TOPOLOGY": str(snapshot), "CUDA_VISIBLE_DEVICES": "0"})
    said, _ = run_in_child(child_environ.bind_on_cpu1_and_say_why_not, env=full, timeout=120)
    assert said.startswith("PlanError GPU 0 (one of the GPUs this process drives): ")
    assert "rank 0" not in said
