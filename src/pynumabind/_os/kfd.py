"""AMD GPUs through the KFD topology in sysfs.

``class/kfd/kfd/topology/nodes/<n>/`` lists HSA agents: CPU nodes first
(``gpu_id`` 0), then one node per GPU in the order ROCr enumerates them,
which is the device order ``ROCR_VISIBLE_DEVICES`` indexes.  Each
``properties`` file holds ``name value`` lines; for a GPU,
``location_id`` is the PCI ``(bus << 8) | devfn`` and ``domain`` the PCI
domain (absent on old kernels: 0), ``unique_id`` the value ROCm prints as
the ``GPU-<16 hex digits>`` UUID.

KFD node numbers are not NUMA node ids, so the NUMA node still comes from
the PCI function's sysfs ``numa_node``; KFD contributes the order, the UUID
and the ASIC name.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from .._record import record, replace
from ..errors import TopologyError
from ..model import Gpu
from . import SYSFS_ROOT
from .textfile import read_ascii

__all__ = ["KfdGpu", "apply_kfd", "read_kfd"]

KFD_TOPOLOGY = os.path.join("class", "kfd", "kfd", "topology", "nodes")


@record(frozen=True)
class KfdGpu:
    """One GPU agent of the KFD topology."""

    kfd_node: int
    gpu_id: int
    pci_bus_id: str
    uuid: Optional[str]
    name: Optional[str]

    def __init__(
        self, kfd_node: int, gpu_id: int, pci_bus_id: str, uuid: Optional[str], name: Optional[str]
    ) -> None:
        self.__dict__.update(
            kfd_node=kfd_node, gpu_id=gpu_id, pci_bus_id=pci_bus_id, uuid=uuid, name=name
        )


def _properties(path: str) -> Dict[str, int]:
    try:
        text = read_ascii(path, "KFD file")
    except OSError as exc:
        raise TopologyError(f"cannot read KFD file {path}: {exc.strerror}") from exc
    values: Dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise TopologyError(f"malformed line {line!r} in {path}")
        try:
            values[fields[0]] = int(fields[1])
        except ValueError:
            raise TopologyError(f"malformed value in line {line!r} of {path}") from None
    return values


def _small_file(path: str) -> Optional[str]:
    try:
        return read_ascii(path, "KFD file").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TopologyError(f"cannot read KFD file {path}: {exc.strerror}") from exc


def read_kfd(root: str = SYSFS_ROOT) -> Optional[List[KfdGpu]]:
    """GPU agents in ROCm order, or ``None`` when there is no KFD topology."""
    base = os.path.join(root, KFD_TOPOLOGY)
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TopologyError(f"cannot list {base}: {exc.strerror}") from exc
    gpus: List[KfdGpu] = []
    for node in sorted(int(n) for n in names if n.isascii() and n.isdigit()):
        here = os.path.join(base, str(node))
        gpu_id_text = _small_file(os.path.join(here, "gpu_id"))
        try:
            gpu_id = int(gpu_id_text or "0")
        except ValueError:
            raise TopologyError(
                f"malformed gpu_id {gpu_id_text!r} in {os.path.join(here, 'gpu_id')}"
            ) from None
        if gpu_id == 0:
            continue  # a CPU agent
        props = _properties(os.path.join(here, "properties"))
        if "location_id" not in props:
            raise TopologyError(f"no location_id in {os.path.join(here, 'properties')}")
        location = props["location_id"]
        domain = props.get("domain", 0)
        bus, devfn = (location >> 8) & 0xFF, location & 0xFF
        bus_id = f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"
        unique = props.get("unique_id", 0)
        gpus.append(
            KfdGpu(
                kfd_node=node,
                gpu_id=gpu_id,
                pci_bus_id=bus_id,
                uuid=f"GPU-{unique:016x}" if unique else None,
                name=_small_file(os.path.join(here, "name")) or None,
            )
        )
    return gpus


def _in_kfd_order(amd: List[Gpu], kfd: List[KfdGpu], notes: List[str]) -> List[Gpu]:
    """The AMD GPUs in KFD order with their UUIDs and names; ones KFD lacks come last."""
    by_bus = {g.pci_bus_id: g for g in amd}
    ordered: List[Gpu] = []
    for agent in kfd:
        gpu = by_bus.pop(agent.pci_bus_id, None)
        if gpu is None:
            notes.append(f"KFD GPU at {agent.pci_bus_id} is not an accepted PCI function")
            continue
        ordered.append(replace(gpu, uuid=agent.uuid, model=agent.name or gpu.model))
    for leftover in sorted(by_bus):
        notes.append(f"AMD GPU {leftover} is missing from the KFD topology; listed last")
        ordered.append(by_bus[leftover])
    return ordered


def apply_kfd(root: str, gpus: List[Gpu], notes: List[str]) -> List[Gpu]:
    """Put AMD GPUs in ROCm (KFD) order and add their UUIDs.

    Returns every GPU: non-AMD ones first in their given (PCI) order, then
    AMD ones; ``physical_index`` counts within each driver's own list, which
    is what the visibility variables index.
    """
    others = [g for g in gpus if g.vendor != "amd"]
    amd = [g for g in gpus if g.vendor == "amd"]
    kfd = read_kfd(root) if amd else None
    if amd and kfd is None:
        notes.append("AMD GPUs found but no KFD topology (amdgpu not loaded?): PCI order used")
    ordered_amd = _in_kfd_order(amd, kfd, notes) if kfd is not None and amd else amd
    out: List[Gpu] = []
    for physical, gpu in enumerate(others):
        out.append(replace(gpu, index=len(out), physical_index=physical))
    for physical, gpu in enumerate(ordered_amd):
        out.append(replace(gpu, index=len(out), physical_index=physical))
    return out
