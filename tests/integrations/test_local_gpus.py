"""Exclusive modes in framework workers: the job's GPUs here are the ranks.

Real binds in child processes, planned from a snapshot over this machine's
CPUs 0 and 1: one node holding both CPUs and two GPUs, so two workers in
mode exclusive each get one CPU -- what launcher ranks 0 and 1 get.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Dict

import pytest

from .helpers import require_two_cpus
from .test_shared import bind_in_child


def one_node_two_gpus(path: Path) -> Path:
    data = {
        "schema": 1,
        "nodes": [{"id": 0, "cpus": "0-1", "has_memory": True, "distances": {"0": 10}}],
        "cpus": [
            {"id": c, "node": 0, "package": 0, "core": c, "siblings": str(c), "l3": "0-1"}
            for c in (0, 1)
        ],
        "gpus": [
            {
                "index": i,
                "pci_bus_id": bus,
                "vendor": "nvidia",
                "numa_node": 0,
                "local_cpus": "0-1",
                "physical_index": i,
                "source": "snapshot",
            }
            for i, bus in ((0, "0000:17:00.0"), (1, "0000:65:00.0"))
        ],
        "allowed_cpus": "0-1",
        "allowed_mems": "0",
    }
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def machine(tmp_path: Path) -> Dict[str, str]:
    require_two_cpus()
    return {
        "PYNUMABIND_TOPOLOGY": str(one_node_two_gpus(tmp_path / "one-node.json")),
        "CUDA_VISIBLE_DEVICES": "0,1",
    }


@pytest.mark.parametrize("mode", ["exclusive", "core-complex"])
def test_one_gpu_workers_slice_their_node_among_the_job_s_gpus(machine, mode: str) -> None:
    env = {**machine, "PYNUMABIND_MODE": mode}
    zero = bind_in_child("bind_gpu(0, what='w', local_gpus=[0, 1])", env)
    one = bind_in_child("bind_gpu(1, what='w', local_gpus=[0, 1])", env)
    assert (zero["cpus"], one["cpus"]) == ("0", "1")  # as launcher ranks 0 and 1 get
    assert zero["reasons"][0].startswith(f"mode {mode}: the ranks are the 2 GPU(s) 0-1")
    alone = bind_in_child("bind_gpu(1, what='w', local_gpus=[1])", env)
    assert alone["cpus"] == "0-1"  # the only GPU on its node: the whole node


def test_the_job_s_gpus_can_come_from_the_environment(machine) -> None:
    env = {**machine, "PYNUMABIND_MODE": "exclusive", "PYNUMABIND_LOCAL_GPUS": "0 1"}
    assert bind_in_child("bind_gpu(1, what='w')", env)["cpus"] == "1"
    bad = bind_in_child("bind_gpu(1, what='w')", {**env, "PYNUMABIND_LOCAL_GPUS": "0"})
    assert bad["error"].startswith("ConfigError: PYNUMABIND_LOCAL_GPUS [0] must include")


def test_unknown_count_names_the_variable_and_what_to_pass(machine) -> None:
    env = {**machine, "PYNUMABIND_MODE": "exclusive"}
    result = bind_in_child("bind_gpu(1, what='w')", env)
    assert result["error"].startswith("ConfigError: mode 'exclusive' slices a node")
    assert "pass local_gpus=" in result["error"]
    assert "set PYNUMABIND_LOCAL_GPUS (such as PYNUMABIND_LOCAL_GPUS=0-1)" in result["error"]
    assert "mode from PYNUMABIND_MODE" in result["error"]


def test_a_process_seeing_its_gpus_slices_among_them(machine) -> None:
    """A Ray actor: the GPUs it sees are the ranks; one GPU alone on its node gets the node."""
    env = {**machine, "PYNUMABIND_MODE": "exclusive"}
    assert bind_in_child("bind_visible_gpus(what='actor')", env)["cpus"] == "0-1"
    one = {**env, "CUDA_VISIBLE_DEVICES": "1"}
    assert bind_in_child("bind_visible_gpus(what='actor')", one)["cpus"] == "0-1"
    plain = bind_in_child("__import__('pynumabind').bind_current_process()", one)
    assert plain["cpus"] == "0-1"
