"""CUDA/ROCm device visibility and order (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st_

from pynumabind.discovery import topology_from_sysfs
from pynumabind.discovery._visible import (
    apply_visibility,
    cuda_device_order,
    mig_uuids,
    select_visible,
)
from pynumabind.errors import ConfigError
from pynumabind.model import Gpu, NumaNode, Topology

from ..support import sysfs_tree as st


def machine(tmp_path: Path, name: str) -> Topology:
    return topology_from_sysfs(str(st.build_sysfs(name, tmp_path / name)))


def small(models: Optional[List[str]] = None, buses: Optional[List[str]] = None) -> Topology:
    """Four NVIDIA GPUs, physical i on node i % 2, with UUIDs GPU-aa.., GPU-ab.., ..."""
    models = models or ["A100"] * 4
    buses = buses or [f"0000:{0x10 * (i + 1):02x}:00.0" for i in range(4)]
    gpus = tuple(
        Gpu(
            index=i,
            pci_bus_id=buses[i],
            vendor="nvidia",
            numa_node=i % 2,
            uuid=f"GPU-a{'abcd'[i]}{i}00000-1111-2222-3333-44444444444{i}",
            model=models[i],
            physical_index=i,
        )
        for i in range(4)
    )
    nodes = {n: NumaNode(id=n, cpus=frozenset({n})) for n in (0, 1)}
    return Topology(
        nodes=nodes,
        cpus={},
        gpus=gpus,
        allowed_cpus=frozenset({0, 1}),
        allowed_mems=frozenset({0, 1}),
    )


def physical(topo: Topology) -> List[Optional[int]]:
    assert [g.index for g in topo.gpus] == list(range(len(topo.gpus)))
    return [g.physical_index for g in topo.gpus]


def visible(env: Dict[str, str], topo: Optional[Topology] = None, **kw: object) -> Topology:
    return apply_visibility(topo or small(), env, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------- indices


def test_unset_means_every_gpu_in_driver_order() -> None:
    assert physical(visible({})) == [0, 1, 2, 3]


def test_empty_string_means_no_gpu_with_one_note() -> None:
    topo = visible({"CUDA_VISIBLE_DEVICES": ""})
    assert topo.gpus == ()
    about = [n for n in topo.notes if "CUDA_VISIBLE_DEVICES" in n]
    assert about == [
        "CUDA_VISIBLE_DEVICES='' selects none of this machine's GPUs: ranks "
        "are planned as on a machine without GPUs"
    ]


def test_indices_select_and_reorder() -> None:
    topo = visible({"CUDA_VISIBLE_DEVICES": "2, 0"})
    assert physical(topo) == [2, 0]
    assert [g.numa_node for g in topo.gpus] == [0, 0]


@pytest.mark.parametrize("value", ["1,7,0", "4", "0,1,2,3,4"])
def test_an_index_naming_no_gpu_is_an_error_naming_it_and_the_gpus(value: str) -> None:
    bad = next(t for t in value.split(",") if int(t) >= 4)
    with pytest.raises(ConfigError) as caught:
        visible({"CUDA_VISIBLE_DEVICES": value})
    assert str(caught.value) == (
        f"CUDA_VISIBLE_DEVICES={value!r}: entry {bad!r} names no GPU (the GPUs here are 0-3)"
    )


def test_an_index_on_a_machine_without_gpus_is_not_an_error() -> None:
    bare = visible({"CUDA_VISIBLE_DEVICES": "0"}, small().replace(gpus=()))
    assert bare.gpus == () and bare.hidden_gpus_warning() is None


@pytest.mark.parametrize(
    ("value", "want", "why"),
    [
        ("-1", [], "matches no device"),
        ("0,x,1", [0], "matches no device"),
        ("0,,1", [0], "matches no device"),
        ("GPU-nothing,0", [], "matches no device"),
        # Unicode digits are not indices to CUDA (and int("\u00b2") raises).
        ("0,\u00b2,1", [0], "matches no device"),
        ("0,\u0661,1", [0], "matches no device"),
    ],
)
def test_first_invalid_entry_truncates(value: str, want: List[int], why: str) -> None:
    topo = visible({"CUDA_VISIBLE_DEVICES": value})
    assert physical(topo) == want
    assert any(why in n and "every later entry" in n for n in topo.notes)


@given(st_.lists(st_.integers(min_value=-2, max_value=6), max_size=8))
def test_index_lists_keep_the_longest_valid_prefix(tokens: List[int]) -> None:
    value = ",".join(map(str, tokens))
    until = next((i for i, t in enumerate(tokens) if t < 0 or t >= 4), len(tokens))
    repeated = next((i for i in range(until) if tokens[i] in tokens[:i]), None)
    if repeated is not None:  # a GPU named twice before CUDA's stop: refused
        with pytest.raises(ConfigError, match="does not show one GPU twice"):
            visible({"CUDA_VISIBLE_DEVICES": value})
        return
    if until < len(tokens) and tokens[until] >= 4:  # an index naming no GPU
        with pytest.raises(ConfigError, match="names no GPU"):
            visible({"CUDA_VISIBLE_DEVICES": value})
        return
    topo = visible({"CUDA_VISIBLE_DEVICES": value})
    got = physical(topo)
    assert got == tokens[:until]  # the prefix before the first invalid entry, in order
    assert len(set(got)) == len(got) and all(0 <= t < 4 for t in got)


# ------------------------------------------------------- a device named twice


def test_cuda_refuses_a_gpu_named_twice_naming_both_entries() -> None:
    """The defect's shape on CUDA: `3,3,1` once ended the list after GPU 3 (one rank where the
    launcher meant three); CUDA shows no GPU for such a value, so it is refused."""
    with pytest.raises(ConfigError) as caught:
        visible({"CUDA_VISIBLE_DEVICES": "3,3,1"})
    assert str(caught.value).startswith(
        "CUDA_VISIBLE_DEVICES='3,3,1': entry '3' names the GPU entry '3' named already; "
        "CUDA does not show one GPU twice"
    )
    assert str(caught.value).endswith("list each GPU once")


def test_an_index_and_the_uuid_of_its_gpu_are_one_gpu_named_twice() -> None:
    uuid = small().gpus[2].uuid
    assert uuid is not None
    with pytest.raises(ConfigError, match=f"entry '{uuid[:8]}' names the GPU entry '2'"):
        visible({"CUDA_VISIBLE_DEVICES": f"2,{uuid[:8]}"})


def test_one_mig_instance_named_twice_is_refused_two_of_one_gpu_are_not() -> None:
    parent = small().gpus[0].uuid
    assert parent is not None
    a, b = "MIG-1111", "MIG-2222"
    parents = {a: parent, b: parent}
    assert physical(visible({"CUDA_VISIBLE_DEVICES": f"{a},{b}"}, mig_parents=parents)) == [0, 0]
    with pytest.raises(ConfigError, match="'MIG-1111' names the GPU entry 'MIG-1111'"):
        visible({"CUDA_VISIBLE_DEVICES": f"{a},{b},{a}"}, mig_parents=parents)


def test_rocr_ends_the_list_at_a_repeat_and_hip_skips_it(tmp_path: Path) -> None:
    """ROCr reads a repeated index as a terminator; HIP (ROCclr) keeps a set and goes on."""
    topo = machine(tmp_path, "mi210_nps4")  # KFD order: GPU i on node 3,2,1,0,7,6,5,4
    rocr = apply_visibility(topo, {"ROCR_VISIBLE_DEVICES": "4,4,5"})
    assert physical(rocr) == [4]
    assert any("like ROCr, it and every later entry are ignored (4,5)" in n for n in rocr.notes)
    hip = apply_visibility(topo, {"HIP_VISIBLE_DEVICES": "3,3,1"})
    assert physical(hip) == [3, 1] and [g.numa_node for g in hip.gpus] == [0, 2]
    assert any("HIP lists it once and goes on" in n for n in hip.notes)
    by_cuda = apply_visibility(topo, {"CUDA_VISIBLE_DEVICES": "6,6,1"})  # read by HIP here
    assert physical(by_cuda) == [6, 1]


# ---------------------------------------------------------------- UUIDs


def test_full_and_short_uuids() -> None:
    topo = small()
    full = topo.gpus[3].uuid
    assert full is not None
    assert physical(visible({"CUDA_VISIBLE_DEVICES": f"{full},GPU-ab"}, topo)) == [3, 1]
    assert physical(visible({"CUDA_VISIBLE_DEVICES": "gpu-AC2"}, topo)) == [2]


def test_ambiguous_prefix_truncates() -> None:
    topo = visible({"CUDA_VISIBLE_DEVICES": "1,GPU-a"})
    assert physical(topo) == [1]
    assert any("ambiguous UUID prefix" in n for n in topo.notes)


def test_legacy_mig_names_resolve_to_the_parent_gpu() -> None:
    uuid = small().gpus[2].uuid
    assert uuid is not None
    value = f"MIG-{uuid}/1/0"
    topo = visible({"CUDA_VISIBLE_DEVICES": value})
    assert physical(topo) == [2]


def test_new_mig_uuids_need_nvml() -> None:
    value = "MIG-5c6a4c66-1d27-5a13-b4b5-8f0a6e2f3e51"
    assert mig_uuids(f"0,{value},MIG-GPU-x/1/0") == [value]
    with pytest.raises(ConfigError, match="only NVML can tell"):
        visible({"CUDA_VISIBLE_DEVICES": value})
    parent = small().gpus[1].uuid
    assert parent is not None
    resolved = visible({"CUDA_VISIBLE_DEVICES": value}, mig_parents={value: parent})
    assert physical(resolved) == [1]
    unknown = visible({"CUDA_VISIBLE_DEVICES": f"3,{value}"}, mig_parents={})
    assert physical(unknown) == [3]
    assert any("not a MIG device NVML knows" in n for n in unknown.notes)


@pytest.mark.parametrize(
    "value",
    [
        "GPU-8d1c2e44-0000-1111-2222-333344445555",
        "MIG-GPU-8d1c2e44-0000-1111-2222-333344445555/1/0",
    ],
)
def test_uuids_without_known_uuids_are_a_config_error(tmp_path: Path, value: str) -> None:
    """sysfs alone knows no NVIDIA UUIDs: a UUID entry cannot be resolved.

    Treating it as "matches no device" left no visible GPU, and the planner
    then spread ranks over the NUMA nodes as on a GPU-less machine, binding
    to a node that need not be the GPU's.
    """
    topo = machine(tmp_path, "dgx_h100")
    assert topo.gpus and not any(g.uuid for g in topo.gpus)
    with pytest.raises(ConfigError, match="UUID"):
        apply_visibility(topo, {"CUDA_VISIBLE_DEVICES": value})
    assert physical(apply_visibility(topo, {"CUDA_VISIBLE_DEVICES": "5"})) == [5]


def test_nvidia_uuids_do_not_trip_an_amd_gpu_without_uuid() -> None:
    """HIP falls back to CUDA_VISIBLE_DEVICES; NVIDIA UUIDs there are not HIP's."""
    base = small()
    igpu = Gpu(index=4, pci_bus_id="0000:c1:00.0", vendor="amd", numa_node=0, physical_index=0)
    topo = base.replace(gpus=(*base.gpus, igpu))
    uuid = base.gpus[2].uuid
    assert uuid is not None
    assert physical(visible({"CUDA_VISIBLE_DEVICES": uuid}, topo)) == [2]


def test_two_mig_slices_of_one_gpu_are_two_ordinals() -> None:
    parent = small().gpus[0].uuid
    assert parent is not None
    a, b = "MIG-1111", "MIG-2222"
    topo = visible({"CUDA_VISIBLE_DEVICES": f"{a},{b}"}, mig_parents={a: parent, b: parent})
    assert physical(topo) == [0, 0]


# ----------------------------------------------------------- device order


def test_pci_bus_id_order_sorts_by_address() -> None:
    topo = small(buses=["0000:90:00.0", "0000:10:00.0", "0000:50:00.0", "0000:20:00.0"])
    assert physical(visible({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, topo)) == [1, 3, 2, 0]
    assert physical(visible({"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, topo)) == [0, 1, 2, 3]
    both = visible({"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}, topo)
    assert physical(both) == [1]


@pytest.mark.parametrize("bad", ["pci_bus_id", "FASTEST", "1"])
def test_invalid_device_order_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="CUDA_DEVICE_ORDER"):
        visible({"CUDA_DEVICE_ORDER": bad})


def test_mixed_models_without_pci_order_leave_a_warning() -> None:
    mixed = small(models=["RTX 4090", "RTX 4090", "RTX 3090", "RTX 3090"])
    assert any("models differ" in n for n in visible({}, mixed).notes)
    assert not any("models differ" in n for n in visible({}, small()).notes)
    quiet = visible({"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, mixed)
    assert not any("models differ" in n for n in quiet.notes)
    ordered, notes = cuda_device_order(list(mixed.gpus), {})
    assert [g.physical_index for g in ordered] == [0, 1, 2, 3] and notes


# --------------------------------------------------------- real machines


def test_dgx_a100_ranks_map_to_the_right_nodes(tmp_path: Path) -> None:
    topo = machine(tmp_path, "dgx_a100_nps4")
    # GPU order is not node order: physical 0 sits on node 3.
    assert [g.numa_node for g in apply_visibility(topo, {}).gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    sub = apply_visibility(topo, {"CUDA_VISIBLE_DEVICES": "4,5,0"})
    assert [(g.index, g.physical_index, g.numa_node) for g in sub.gpus] == [
        (0, 4, 7),
        (1, 5, 7),
        (2, 0, 3),
    ]


def test_workstation_mixed_models_warn(tmp_path: Path) -> None:
    topo = apply_visibility(machine(tmp_path, "workstation_5gpu"), {})
    assert any("models differ" in n for n in topo.notes)
    assert topo.gpus[0].numa_node == 1


def test_rocr_then_hip_visible_devices(tmp_path: Path) -> None:
    topo = machine(tmp_path, "mi210_nps4")  # KFD order: GPU i on node 3,2,1,0,7,6,5,4
    rocr = apply_visibility(topo, {"ROCR_VISIBLE_DEVICES": "4,5,6,7"})
    assert physical(rocr) == [4, 5, 6, 7]
    both = apply_visibility(topo, {"ROCR_VISIBLE_DEVICES": "4,5,6,7", "HIP_VISIBLE_DEVICES": "3,1"})
    assert physical(both) == [7, 5]
    assert [g.numa_node for g in both.gpus] == [4, 6]
    hip_only = apply_visibility(topo, {"HIP_VISIBLE_DEVICES": "0"})
    assert [g.numa_node for g in hip_only.gpus] == [3]


def test_hip_honours_cuda_visible_devices_when_its_own_is_unset(tmp_path: Path) -> None:
    topo = machine(tmp_path, "mi300x_spr")
    assert physical(apply_visibility(topo, {"CUDA_VISIBLE_DEVICES": "6"})) == [6]
    own = {"CUDA_VISIBLE_DEVICES": "6", "HIP_VISIBLE_DEVICES": "1"}
    assert physical(apply_visibility(topo, own)) == [1]


def test_rocr_accepts_uuids(tmp_path: Path) -> None:
    topo = machine(tmp_path, "mi300x_spr")
    uuid = topo.gpus[5].uuid
    assert uuid is not None and uuid.startswith("GPU-")
    sub = apply_visibility(topo, {"ROCR_VISIBLE_DEVICES": f"{uuid.upper()},0"})
    assert physical(sub) == [5, 0]


def test_select_visible_leaves_input_alone() -> None:
    gpus = list(small().gpus)
    chosen, notes = select_visible(gpus, None, variable="X")
    assert chosen == gpus and notes == []
