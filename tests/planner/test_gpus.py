"""One process, several GPUs, or none named: ``gpus=`` and the visible-GPU rule.

``gpus=`` is a list of GPU indices, ``gpu=`` one index; a union plan has no rank.

Planner properties on a recorded DGX H100 (GPUs 0-3 on node 0, 4-7 on node
1); binding for real in child processes, on a two-node snapshot whose CPUs
are this machine's CPUs 0 and 1 (``PYNUMABIND_TOPOLOGY``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict

import pytest

import pynumabind
from pynumabind import ConfigError, Options, model, planner

from ..support import child_environ
from ..support.childproc import run_in_child
from ..support.cli_helpers import two_node_snapshot
from ..support.topology_builders import dgx_h100


@pytest.fixture(scope="module")
def dgx():
    return dgx_h100()


def test_union_of_gpus_on_two_nodes(dgx) -> None:
    plan = planner.plan(dgx, gpus=[0, 7])
    assert plan.cpus == (dgx.nodes[0].cpus | dgx.nodes[1].cpus) & dgx.allowed_cpus
    assert plan.mems == frozenset({0, 1})
    assert plan.gpu is None and plan.node is None
    assert plan.rank is None and plan.to_dict()["rank"] is None  # a union is no rank
    assert plan.reasons[0].startswith("GPUs 0,7: the union of their plans")
    assert any(r.startswith("GPU 7: ") for r in plan.reasons)
    assert plan.gpus == (0, 7) and plan.to_dict()["gpus"] == [0, 7]
    assert planner.plan(dgx, 0, 8).gpus == ()  # a one-rank plan names no union


def test_union_on_one_node_is_that_node(dgx) -> None:
    plan = planner.plan(dgx, gpus=[1, 0, 1])  # order and repeats do not matter
    assert plan.node == 0
    assert plan.cpus == planner.plan(dgx, 0, 8).cpus
    assert plan.mems == frozenset({0})


def test_one_device_is_that_gpus_plan(dgx) -> None:
    alone = planner.plan(dgx, gpus=[5])
    as_rank = planner.plan(dgx, 5, 8)
    assert (alone.cpus, alone.mems, alone.node) == (as_rank.cpus, as_rank.mems, as_rank.node)
    assert alone.gpu == as_rank.gpu and alone.rank is None and as_rank.rank == 5


@pytest.mark.parametrize("mode", ["socket", "none"])
def test_union_modes(dgx, mode: str) -> None:
    plan = planner.plan(dgx, gpus=[0, 7], mode=mode)
    expected = {
        "socket": (planner.plan(dgx, 0, 8, mode="socket").cpus or frozenset())
        | (planner.plan(dgx, 7, 8, mode="socket").cpus or frozenset()),
        "none": None,
    }[mode]
    assert plan.cpus == expected


@pytest.mark.parametrize("mode", ["exclusive", "core-complex"])
def test_slicing_modes_need_the_job_s_gpus(dgx, mode: str) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"mode '{mode}' slices a node .*PYNUMABIND_LOCAL_GPUS.* use mode node, socket, none",
    ):
        planner.plan(dgx, gpus=[0, 7], mode=mode)
    every = planner.plan_all(dgx, mode=mode)  # with them: the slices of GPUs 0 and 7
    union = planner.plan(dgx, gpus=[0, 7], mode=mode, local_gpus=range(8))
    assert union.cpus == (every[0].cpus or frozenset()) | (every[7].cpus or frozenset())


def test_per_gpu_overrides_apply(dgx) -> None:
    plan = planner.plan(dgx, gpus=[0, 1], nodes="1,1,1,1,0,0,0,0")
    assert plan.node == 1 and plan.mems == frozenset({1})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"gpus": []}, "gpus must name at least one GPU"),
        ({"gpus": "01"}, "gpus must be a sequence"),
        ({"gpus": [8]}, "GPU 8 out of range"),
        ({"gpus": [0], "rank": 0}, "give gpus= alone, without rank="),
        ({"gpus": [0], "gpu": 1}, "give gpus= alone, without gpu="),
        ({}, r"needs rank= \(a local rank\) or gpus="),
    ],
)
def test_bad_devices(dgx, arguments: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        planner.plan(dgx, **arguments)


# ------------------------------------------------------------ names


@pytest.mark.parametrize("old", ["device", "devices", "memory"])
def test_old_keyword_names_are_gone(dgx, old: str) -> None:
    # One word per concept, and no aliases in a package never released with them.
    with pytest.raises(TypeError, match=f"unexpected keyword argument.*{old}"):
        planner.plan(dgx, 0, **{old: 1})


def test_plan_gpu_is_an_index_and_gpu_info_the_gpu(dgx) -> None:
    plan = planner.plan(dgx, 0, gpu=6)
    assert plan.gpu == 6 and plan.gpu_info is not None and plan.gpu_info.index == 6
    assert plan.to_dict()["gpu"] == 6 and plan.to_dict()["gpu_info"]["index"] == 6
    assert not hasattr(plan, "device") and not hasattr(plan, "devices")
    assert [p.gpu for p in planner.plan_all(dgx, nprocs=2, rank_gpus=[7, 0])] == [7, 0]


def test_an_options_object_instead_of_the_keywords(dgx) -> None:
    options = Options(gpus=[0, 7], mode="socket")  # type: ignore[arg-type]
    assert options.gpus == (0, 7) and options.mode is model.CpuMode.SOCKET  # checked once
    assert planner.plan(dgx, options=options) == planner.plan(dgx, gpus=[0, 7], mode="socket")
    each = Options(nprocs=2, rank_gpus=(7, 0))
    assert planner.plan_all(dgx, options=each) == planner.plan_all(dgx, 2, rank_gpus=[7, 0])
    with pytest.raises(ConfigError, match=r"options= or keyword options, not both.*mode"):
        planner.plan(dgx, options=options, mode="node")
    with pytest.raises(ConfigError, match="invalid mode 'numa'"):
        Options(mode="numa")  # type: ignore[arg-type]
    assert pynumabind.Options is Options


# ------------------------------------------------------------ binding


def bind(env: Dict[str, str], rank: str = "", gpus: str = "") -> Dict[str, object]:
    """``bind_current_process([rank], [gpus=])`` in a child with ``env``: CPUs or error."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        full.pop(name, None)
    full.update(env)
    result, _ = run_in_child(child_environ.bind_and_report, rank, gpus, env=full, timeout=120)
    return result


@pytest.fixture
def machine(tmp_path: Path) -> Dict[str, str]:
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1 allowed")
    return {"PYNUMABIND_TOPOLOGY": str(two_node_snapshot(tmp_path / "two-node.json"))}


def test_no_rank_one_visible_gpu_binds_to_its_node(machine) -> None:
    result = bind({**machine, "CUDA_VISIBLE_DEVICES": "1"})
    assert result["cpus"] == "1"
    assert result["reasons"][0].startswith(
        "no launcher rank: bound to the 1 GPU(s) this process sees"
    )


def test_no_rank_several_visible_gpus_bind_to_the_union(machine) -> None:
    result = bind({**machine, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert result["cpus"] == "0-1"
    assert "union" in result["reasons"][1]


def test_no_rank_no_gpu_is_todays_error(machine) -> None:
    result = bind({**machine, "CUDA_VISIBLE_DEVICES": ""})
    assert result["error"].startswith("ConfigError: no local rank: pass rank= or set one of")
    assert result["error"].endswith("and this process sees no GPU to bind to")


def test_a_launcher_rank_still_wins(machine) -> None:
    env = {**machine, "CUDA_VISIBLE_DEVICES": "0,1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    result = bind(env)
    assert result["cpus"] == "1"
    assert not result["reasons"][0].startswith("no launcher rank")


def test_explicit_devices_win_over_a_launcher_rank(machine) -> None:
    env = {**machine, "CUDA_VISIBLE_DEVICES": "0,1", "LOCAL_RANK": "0"}
    assert bind(env, gpus="1")["cpus"] == "1"
    refused = bind(env, rank="0", gpus="1")
    assert refused["error"] == "ConfigError: give gpus= alone, without rank="


# ------------------------------------------------------------ the log line (item 7)


def logged(env: Dict[str, str]) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PYNUMABIND_")}
    full.pop("LOCAL_RANK", None)
    full.update(env)
    _, stderr = run_in_child(child_environ.bind_with_info_logging, env=full, timeout=120)
    return stderr


def test_info_line_names_gpu_node_cpus_and_policy(machine) -> None:
    lines = logged({**machine, "CUDA_VISIBLE_DEVICES": "1"}).splitlines()
    info = [line for line in lines if line.startswith("INFO pynumabind:")]
    assert info == [  # bound to the GPU it sees: no rank, so none is printed
        "INFO pynumabind: GPU 0 (0000:65:00.0) CPUs 1 (node 1) memory nodes 0 "
        "policy MPOL_PREFERRED threads 1 bound"
    ]
    ranked = logged({**machine, "CUDA_VISIBLE_DEVICES": "0,1", "LOCAL_RANK": "1"}).splitlines()
    assert [line for line in ranked if line.startswith("INFO pynumabind:")] == [
        "INFO pynumabind: rank 1 GPU 1 (0000:65:00.0) CPUs 1 (node 1) memory nodes 0 "
        "policy MPOL_PREFERRED threads 1 bound"
    ]


def test_info_line_of_a_union_names_the_gpus_not_a_rank(machine) -> None:
    lines = logged({**machine, "CUDA_VISIBLE_DEVICES": "0,1"}).splitlines()
    info = [line for line in lines if line.startswith("INFO pynumabind:")]
    assert info == [
        "INFO pynumabind: GPUs 0-1 CPUs 0-1 memory nodes 0 policy MPOL_PREFERRED threads 1 bound"
    ]


def test_warning_when_left_unbound_by_an_unknown_gpu_node(tmp_path: Path, machine) -> None:
    data = json.loads(Path(machine["PYNUMABIND_TOPOLOGY"]).read_text())
    for gpu in data["gpus"]:
        gpu["numa_node"], gpu["local_cpus"] = None, ""
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps(data))
    text = logged({"PYNUMABIND_TOPOLOGY": str(unknown), "CUDA_VISIBLE_DEVICES": "1"})
    assert (
        "WARNING pynumabind: GPU 0 (0000:65:00.0) left unbound: the NUMA node of GPU 0 "
        "(0000:65:00.0) is "
        "unknown; name it with PYNUMABIND_NODES, or set PYNUMABIND_REQUIRE_NODE=1 to fail instead"
    ) in text
    assert "INFO pynumabind: GPU 0 (0000:65:00.0) CPUs unchanged" in text
