"""Intel data-center GPUs: found by default from sysfs, visible through Level Zero's variables.

The recorded machine is an Aurora-like node (``tests/machines/aurora_like.json``):
2 sockets, 6 GPUs of PCI class 0x0380, HBM as CPU-less memory nodes, and an
Intel VGA function (integrated-graphics class 0x0300) that must not count.
The XPU recipe of docs/integrations.md runs for real on a two-node snapshot
over this machine's CPUs 0 and 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest

from pynumabind import ConfigError, Options, plan_all
from pynumabind._os import pci as _pci
from pynumabind.discovery import detect_topology, topology_from_sysfs
from pynumabind.discovery._visible import apply_visibility
from pynumabind.model import Topology

from ..support import sysfs_tree as st
from ..support.cli_helpers import two_node_snapshot
from ..support.recipes import recipe

BUSES = ["0000:18:00.0", "0000:42:00.0", "0000:6c:00.0"]
BUSES += ["0001:18:00.0", "0001:42:00.0", "0001:6c:00.0"]


@pytest.fixture(scope="module")
def aurora(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return st.build_sysfs("aurora_like", tmp_path_factory.mktemp("aurora") / "aurora_like")


@pytest.fixture(scope="module")
def machine(aurora: Path) -> Topology:
    return topology_from_sysfs(str(aurora))


def seen(aurora: Path, env: Dict[str, str]) -> Topology:
    """This process's view, as discovery makes it (no NVIDIA GPU: NVML is not asked)."""
    return detect_topology(sysfs_root=str(aurora), environ=env)


def physical(topology: Topology) -> List[Optional[int]]:
    return [g.physical_index for g in topology.gpus]


# ------------------------------------------------------------------ discovery


def test_the_six_gpus_are_found_by_default_and_the_vga_function_is_not(machine: Topology) -> None:
    assert [g.pci_bus_id for g in machine.gpus] == BUSES
    assert {g.vendor for g in machine.gpus} == {"intel"}
    assert physical(machine) == [0, 1, 2, 3, 4, 5]
    assert [g.numa_node for g in machine.gpus] == [0, 0, 0, 1, 1, 1]
    assert all(g.memory_node is None for g in machine.gpus)
    assert "0000:00:02.0" not in {g.pci_bus_id for g in machine.gpus}  # class 0x0300


def test_six_ranks_land_on_nodes_0_0_0_1_1_1(aurora: Path) -> None:
    plans = plan_all(seen(aurora, {}))
    assert [p.node for p in plans] == [0, 0, 0, 1, 1, 1]
    assert [p.mems for p in plans] == [{0}] * 3 + [{1}] * 3  # DDR with the CPUs, not HBM


def test_classes_given_by_hand_apply_to_every_vendor(aurora: Path) -> None:
    # pci_classes replaces the per-vendor default: the VGA function is asked for.
    every_display = topology_from_sysfs(str(aurora), pci_classes=["0x03"])
    assert "0000:00:02.0" in {g.pci_bus_id for g in every_display.gpus}
    # Vendors given by hand without Intel: none found (the old default).
    assert topology_from_sysfs(str(aurora), gpu_vendors=[0x10DE, 0x1002]).gpus == ()


def test_the_live_scan_opens_only_functions_bound_to_a_gpu_driver() -> None:
    lines = [
        # slot, vendor/device, irq, 7 bases, 7 sizes, [driver]
        "0010\t80860bd6\t0" + "\t0" * 14 + "\ti915",
        "0018\t80860bd6\t0" + "\t0" * 14 + "\txe",
        "0020\t80860b0b\t0" + "\t0" * 14,  # no driver bound
        "0028\t80860b60\t0" + "\t0" * 14 + "\tpcieport",
        "0030\t10de2330\t0" + "\t0" * 14 + "\tnvidia",
        "0038\t10de2331\t0" + "\t0" * 14,
    ]
    vendors = _pci.DEFAULT_GPU_VENDORS
    slots = _pci.vendor_slots("\n".join(lines), vendors, _pci.DEFAULT_VENDOR_DRIVERS)
    assert slots == {(0, 0x10), (0, 0x18), (0, 0x30), (0, 0x38)}  # NVIDIA: every function
    assert len(_pci.vendor_slots("\n".join(lines), vendors) or ()) == 6  # no driver filter


# ----------------------------------------------------------------- visibility


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"ZE_AFFINITY_MASK": "3,4"}, [3, 4]),
        # A mask, not a list: the driver's order, whatever the entries' order.
        ({"ZE_AFFINITY_MASK": "5,0"}, [0, 5]),
        ({"ZE_AFFINITY_MASK": "4.1"}, [4]),
        ({"ZE_AFFINITY_MASK": "0.0,0.1"}, [0, 0]),  # two tiles of card 0: two devices
        # A device named twice is listed once, and the entries after it still count.
        ({"ZE_AFFINITY_MASK": "0,0,2"}, [0, 2]),
        ({"ZE_AFFINITY_MASK": "0.0,0.0,2.0"}, [0, 2]),
        ({"ZE_AFFINITY_MASK": "0,0.1"}, [0]),  # card 0 whole covers its tile 1
        ({"ZE_AFFINITY_MASK": "0.1,0"}, [0]),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:3,3,5"}, [3, 5]),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:5,3"}, [5, 3]),  # the selector keeps order
        ({"ZE_AFFINITY_MASK": ""}, [0, 1, 2, 3, 4, 5]),  # empty: every device, as unset
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:3,5"}, [3, 5]),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:*"}, [0, 1, 2, 3, 4, 5]),
        ({"ONEAPI_DEVICE_SELECTOR": "*:gpu"}, [0, 1, 2, 3, 4, 5]),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:2.*"}, [2]),
        ({"ONEAPI_DEVICE_SELECTOR": "opencl:*;level_zero:1"}, [1]),
        # The selector indexes into what the mask left.
        ({"ZE_AFFINITY_MASK": "3,4,5", "ONEAPI_DEVICE_SELECTOR": "level_zero:1"}, [4]),
        # CUDA's variable does not choose Intel GPUs.
        ({"CUDA_VISIBLE_DEVICES": "0"}, [0, 1, 2, 3, 4, 5]),
    ],
)
def test_level_zero_variables_choose_the_gpus(
    aurora: Path, env: Dict[str, str], want: List[int]
) -> None:
    topology = seen(aurora, env)
    assert physical(topology) == want
    assert [g.index for g in topology.gpus] == list(range(len(want)))


def test_ze_affinity_mask_3_4_gives_two_ranks_on_node_1(aurora: Path) -> None:
    topology = seen(aurora, {"ZE_AFFINITY_MASK": "3,4"})
    plans = plan_all(topology)
    assert [(p.gpu_info.pci_bus_id if p.gpu_info else None, p.node) for p in plans] == [
        ("0001:18:00.0", 1),
        ("0001:42:00.0", 1),
    ]
    assert topology.visibility == (("ZE_AFFINITY_MASK", "3,4"),)


def test_a_tile_named_twice_leaves_the_next_device_on_its_own_card(aurora: Path) -> None:
    """``0.0,0.0,3.0`` once listed tile 0.0 twice, so device 1 was planned on card 0 (node 0)
    instead of card 3 (node 1).  The driver keeps one bit per tile: two devices."""
    topology = seen(aurora, {"ZE_AFFINITY_MASK": "0.0,0.0,3.0"})
    assert physical(topology) == [0, 3]
    assert [p.node for p in plan_all(topology)] == [0, 1]
    assert any(
        "entry '0.0' names a device entry '0.0' listed already; Level Zero lists it once" in n
        for n in topology.notes
    )


def test_a_mask_out_of_the_drivers_order_is_noted(aurora: Path) -> None:
    topology = seen(aurora, {"ZE_AFFINITY_MASK": "5,0"})
    assert [p.node for p in plan_all(topology)] == [0, 1]  # card 0 first: rank 0 on node 0
    assert any("in its own order" in n for n in topology.notes)
    assert not any("in its own order" in n for n in seen(aurora, {"ZE_AFFINITY_MASK": "0,5"}).notes)


def test_tiles_and_foreign_backends_are_noted(aurora: Path) -> None:
    tiles = seen(aurora, {"ZE_AFFINITY_MASK": "4.1"})
    assert any("card.tile entry is counted as one device" in n for n in tiles.notes)
    foreign = seen(aurora, {"ONEAPI_DEVICE_SELECTOR": "opencl:*;level_zero:1"})
    assert any("'opencl:*' is not for Level Zero" in n for n in foreign.notes)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"ZE_AFFINITY_MASK": "6"},
            "ZE_AFFINITY_MASK='6': entry '6' names no GPU (this process can open 6: indices "
            "0-5, driver indices 0-5)",
        ),
        ({"ZE_AFFINITY_MASK": "1,x"}, "ZE_AFFINITY_MASK='1,x': entry 'x' is not a device"),
        ({"ZE_AFFINITY_MASK": "1.x"}, "entry '1.x' is not a device (N or N.M (card.tile)"),
        ({"ZE_AFFINITY_MASK": "*"}, "entry '*' is not a device"),
        ({"ONEAPI_DEVICE_SELECTOR": "!level_zero:0"}, "discard term '!level_zero:0'"),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero"}, "term 'level_zero' is not backend:devices"),
        (
            {"ZE_AFFINITY_MASK": "3,4", "ONEAPI_DEVICE_SELECTOR": "level_zero:2"},
            "entry '2' names no GPU (this process can open 2: indices 0-1, driver indices 3-4)",
        ),
    ],
)
def test_bad_level_zero_values_are_config_errors_naming_them(
    machine: Topology, env: Dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        apply_visibility(machine, env)
    assert message in str(caught.value)


def test_a_snapshot_keeps_the_intel_gpus_and_takes_the_mask_after(machine: Topology) -> None:
    again = Topology.from_json(machine.to_json())
    assert [(g.vendor, g.physical_index) for g in again.gpus] == [("intel", i) for i in range(6)]
    assert physical(apply_visibility(again, {"ZE_AFFINITY_MASK": "3,4"})) == [3, 4]
    filtered = Topology.from_json(apply_visibility(machine, {"ZE_AFFINITY_MASK": "3,4"}).to_json())
    assert filtered.visibility == (("ZE_AFFINITY_MASK", "3,4"),)
    assert physical(apply_visibility(filtered, {"ZE_AFFINITY_MASK": "3,4"})) == [3, 4]


def test_options_for_intel_plan_like_the_others(aurora: Path) -> None:
    plans = plan_all(seen(aurora, {}), options=Options(mode="exclusive"))
    assert [p.node for p in plans] == [0, 0, 0, 1, 1, 1]
    assert len({frozenset(p.cpus or ()) for p in plans}) == 6  # disjoint slices


# ------------------------------------------------------------------ the recipe


def _intel_snapshot(path: Path) -> Path:
    """The two-node snapshot over CPUs 0 and 1, its two GPUs Intel's (card i on node i)."""
    two_node_snapshot(path)
    data = json.loads(path.read_text())
    for gpu in data["gpus"]:
        gpu.update(vendor="intel", uuid=None, model="Intel Data Center GPU Max 1550")
    path.write_text(json.dumps(data))
    return path


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
@pytest.mark.parametrize(("mask", "cpu"), [("1.0", 1), ("0.1", 0)])
def test_the_xpu_recipe_binds_each_tile_to_its_cards_node(
    tmp_path: Path, mask: str, cpu: int
) -> None:
    code = recipe("xpu") + (
        "\nimport json, os\n"
        "print(json.dumps({'cpus': sorted(os.sched_getaffinity(0)),"
        " 'summary': binding.summary()}))\n"
    )
    launcher = (
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "OMPI_",
        "SLURM_",
        "PYNUMABIND_",
        "ZE_",
        "ONEAPI_",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)}
    env.update(
        PYNUMABIND_TOPOLOGY=str(_intel_snapshot(tmp_path / "xpu.json")), ZE_AFFINITY_MASK=mask
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["cpus"] == [cpu]
    assert result["summary"].startswith(f"pynumabind: GPU 0 (0000:{'65' if cpu else '17'}:00.0)")
