"""GPUs a device cgroup denies: CUDA does not count them, and neither does pynumabind.

Slurm's ``ConstrainDevices=yes`` gives a job a device cgroup that lets it
open only its GPUs.  NVML still counts every GPU of the machine and answers
NO_PERMISSION for the others; CUDA numbers only the GPUs the process can
open, and Slurm sets ``CUDA_VISIBLE_DEVICES`` to those zero-based numbers.
The recorded DGX H100 seen from a job given GPUs 4-7
(``tests/machines/dgx_h100_constrain_devices.json``) goes through the real
``pynvml`` wrappers' error classes over the fake NVML, then the API and the
CLI (through a snapshot, since the CLI reads this machine's own ``/sys``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from pynumabind import ConfigError, Options, plan_all
from pynumabind.discovery import detect_topology
from pynumabind.discovery._visible import apply_visibility
from pynumabind.model import Topology

from ..support import fake_nvml
from ..support import sysfs_tree as st
from ..support.cli_helpers import run_cli as _cli

MACHINE = "dgx_h100_constrain_devices"


@pytest.fixture
def denied_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The DGX H100 tree, with a fake NVML that denies GPUs 0-3."""
    fake_nvml.install_fake_nvml(monkeypatch, st.load_machine(MACHINE))
    from pynumabind._os import nvml as _nvml

    _nvml.forget()
    yield st.build_sysfs(MACHINE, tmp_path / MACHINE)
    _nvml.forget()


def detect(root: Path, env: dict, **kw: object) -> Topology:
    return detect_topology(sysfs_root=str(root), environ=env, **kw)  # type: ignore[arg-type]


def physical(topology: Topology) -> List[Optional[int]]:
    return [g.physical_index for g in topology.gpus]


def test_nvml_denied_gpus_are_left_out_and_recorded(denied_job: Path) -> None:
    whole = detect(denied_job, {}, visible_only=False)
    assert physical(whole) == [4, 5, 6, 7]
    assert whole.denied_gpus == frozenset({0, 1, 2, 3})
    assert any("may not open GPU(s) 0, 1, 2, 3 (NO_PERMISSION" in n for n in whole.notes)


@pytest.mark.parametrize(
    ("value", "want", "nodes"),
    [("0", [4], [1]), ("0,1,2,3", [4, 5, 6, 7], [1, 1, 1, 1]), ("3,1", [7, 5], [1, 1])],
)
def test_slurm_zero_based_indices_count_the_gpus_the_job_can_open(
    denied_job: Path, value: str, want: List[int], nodes: List[int]
) -> None:
    topology = detect(denied_job, {"CUDA_VISIBLE_DEVICES": value})
    assert physical(topology) == want
    plans = plan_all(topology, options=Options(nprocs=len(want)))
    assert [p.node for p in plans] == nodes
    assert topology.hidden_gpus_warning() is None


def test_an_index_beyond_the_jobs_gpus_names_them(denied_job: Path) -> None:
    # Before: "entry '0' is out of range (the physical indices are 4-7)", then node 0.
    with pytest.raises(ConfigError) as caught:
        detect(denied_job, {"CUDA_VISIBLE_DEVICES": "4"})
    assert str(caught.value) == (
        "CUDA_VISIBLE_DEVICES='4': entry '4' names no GPU "
        "(this process can open 4: indices 0-3, driver indices 4-7)"
    )


def test_pci_bus_order_counts_the_same_gpus(denied_job: Path) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert physical(detect(denied_job, env)) == [4]


def test_a_snapshot_of_the_job_keeps_the_rule_and_the_cli_uses_it(
    denied_job: Path, tmp_path: Path
) -> None:
    snapshot = detect(denied_job, {}, visible_only=False)
    data = snapshot.to_dict()
    assert data["denied_gpus"] == "0-3"
    again = Topology.from_dict(data)
    assert again.denied_gpus == snapshot.denied_gpus
    assert physical(apply_visibility(again, {"CUDA_VISIBLE_DEVICES": "0"})) == [4]
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("the CLI half needs CPUs 0 and 1 allowed")
    path = tmp_path / "job.json"
    path.write_text(json.dumps(data))
    env = {"PYNUMABIND_TOPOLOGY": str(path), "CUDA_VISIBLE_DEVICES": "0"}
    shown = _cli(env, "show", "--json")
    assert shown.returncode == 0, shown.stderr
    gpus = json.loads(shown.stdout)["topology"]["gpus"]
    assert [(g["physical_index"], g["numa_node"], g["pci_bus_id"]) for g in gpus] == [
        (4, 1, "0000:9a:00.0")
    ]
    wrong = _cli({**env, "CUDA_VISIBLE_DEVICES": "5"}, "show")
    assert wrong.returncode == 2
    assert wrong.stdout == "" and "Traceback" not in wrong.stderr
    assert "entry '5' names no GPU (this process can open 4: indices 0-3" in wrong.stderr


def test_a_snapshot_of_every_gpu_still_matches_by_physical_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole machine, every GPU open: index N is GPU N, so a snapshot of it
    # used under CUDA_VISIBLE_DEVICES=2,3 places on GPUs 2 and 3 (node 0).
    fake_nvml.install_fake_nvml(monkeypatch, st.load_machine("dgx_h100"))
    from pynumabind._os import nvml as _nvml

    _nvml.forget()
    root = st.build_sysfs("dgx_h100", tmp_path / "dgx_h100")
    whole = Topology.from_json(detect(root, {}, visible_only=False).to_json())
    assert whole.denied_gpus == frozenset() and "denied_gpus" not in whole.to_dict()
    used = apply_visibility(whole, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert physical(used) == [2, 3]
    assert [p.node for p in plan_all(used, options=Options(nprocs=2))] == [0, 0]
    _nvml.forget()


@pytest.mark.parametrize(
    ("field", "why"),
    [("4", "names GPU 4, which its gpus list"), ("x", "denied_gpus"), (7, "is not a str")],
)
def test_a_bad_denied_gpus_field_is_refused(denied_job: Path, field: object, why: str) -> None:
    from pynumabind.errors import TopologyError

    data = detect(denied_job, {}, visible_only=False).to_dict()
    data["denied_gpus"] = field
    with pytest.raises(TopologyError, match=why):
        Topology.from_dict(data)
