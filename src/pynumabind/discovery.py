"""Discovery's front door: this machine (sysfs + NVML + KFD + visibility), another
machine's sysfs tree, or a snapshot file, each as a :class:`~pynumabind.model.Topology`.

Three public functions, each with its real keywords: :func:`detect_topology`
(this machine and this process), :func:`topology_from_sysfs` (any sysfs tree:
``/sys`` or a copy of another machine's), :func:`load_topology` (a JSON
snapshot written by ``pynumabind snapshot``).  The model module is a leaf:
it imports none of this, so there is no import cycle, lazy or not.

Order of trust for a GPU's NUMA node, and why:

1. NVML's ``nvmlDeviceGetNumaNodeId`` when it names a node *with CPUs*;
   when it names a CPU-less node (Grace: the GPU's HBM) that node becomes
   ``Gpu.memory_node`` and the CPU node is looked for below;
2. NVML's memory affinity, restricted to CPU nodes, when it is one node
   (GB200 prints ``0,3-9,11-17``: node 0 plus empty placeholders);
3. the CPU node holding all of NVML's CPU affinity (one spanning nodes
   names none: see :func:`_sole_node_of`);
4. the CPU node nearest (SLIT) to the GPU's memory node;
5. the PCI function's sysfs ``numa_node``.

NVML's list is the driver's truth about which GPUs exist: a GPU that sysfs
shows but NVML does not (a container given some of the host's GPUs) is
dropped with a note.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ._nvml import NvmlReport
from .errors import TopologyError, format_ids
from .model import Gpu, Topology

__all__ = ["detect_topology", "load_topology", "merge_nvml", "topology_from_sysfs"]


def _sole_node_of(topology: Topology, cpus: frozenset[int]) -> Optional[int]:
    """The one CPU node holding every CPU of ``cpus``; None when they span nodes.

    An affinity spanning nodes names none of them: it is the socket-wide mask
    of the legacy affinity call (several SNC/NPS nodes), or every CPU for a
    GPU without proximity; taking the largest or lowest node would invent one.
    """
    spanned = [n for n in topology.cpu_nodes if topology.nodes[n].cpus & cpus]
    return spanned[0] if len(spanned) == 1 else None


def merge_nvml(topology: Topology, report: NvmlReport) -> Tuple[List[Gpu], List[str]]:
    """GPUs from NVML's ``report``, in NVML order, merged with what sysfs knows."""
    notes: List[str] = list(report.notes)
    cpu_nodes = frozenset(topology.cpu_nodes)
    from_sysfs: Dict[str, Gpu] = {g.pci_bus_id: g for g in topology.gpus if g.vendor == "nvidia"}
    merged: List[Gpu] = []
    for device in report.devices:
        notes.extend(device.notes)
        pci = from_sysfs.pop(device.pci_bus_id, None)
        label = f"GPU {device.index} ({device.pci_bus_id})"
        numa: Optional[int] = None
        memory_node: Optional[int] = None
        source = "nvml"
        nid = device.numa_node_id
        if nid is not None and nid in topology.nodes:
            if nid in cpu_nodes:
                numa = nid
            else:
                memory_node = nid
        elif nid is not None:
            notes.append(f"{label}: NVML names NUMA node {nid}, which is not online; ignored")
        if numa is None and device.memory_affinity:
            candidates = device.memory_affinity & cpu_nodes
            if len(candidates) == 1:
                numa = next(iter(candidates))
        if numa is None and device.cpu_affinity:
            numa = _sole_node_of(topology, device.cpu_affinity)
        if numa is None and memory_node is not None:
            ranked = topology.nearest_cpu_nodes(memory_node)
            numa = ranked[0][0] if ranked else None
        if numa is None and pci is not None and pci.numa_node is not None:
            numa, source = pci.numa_node, "sysfs"
        if numa is None:
            notes.append(f"{label}: neither NVML nor sysfs tells its NUMA node")
        elif pci is not None and pci.numa_node is not None and pci.numa_node != numa:
            notes.append(
                f"{label}: NVML places it on node {numa}, sysfs numa_node says "
                f"{pci.numa_node}; using NVML"
            )
        local = device.cpu_affinity & topology.online_cpus
        if not local:
            if numa is not None:
                local = topology.nodes[numa].cpus
            elif pci is not None:
                local = pci.local_cpus
            notes.append(
                f"{label}: NVML reports no CPU affinity (a cpuset hiding its node?); "
                f"using CPUs {format_ids(local)}"
            )
        merged.append(
            Gpu(
                index=len(merged),
                pci_bus_id=device.pci_bus_id,
                vendor="nvidia",
                numa_node=numa,
                local_cpus=local,
                uuid=device.uuid,
                model=device.name or (pci.model if pci is not None else None),
                memory_node=memory_node,
                physical_index=device.index,
                source=source,
            )
        )
    for bus_id in sorted(from_sysfs):
        notes.append(f"NVIDIA GPU {bus_id} is in sysfs but not enumerated by NVML; left out")
    rest = [g for g in topology.gpus if g.vendor != "nvidia"]
    out: List[Gpu] = list(merged)
    cuda_physical = len(merged)
    for gpu in rest:
        if gpu.vendor == "amd":
            out.append(_with(gpu, index=len(out)))
        else:
            out.append(_with(gpu, index=len(out), physical_index=cuda_physical))
            cuda_physical += 1
    return out, notes


def _with(gpu: Gpu, **changes: Any) -> Gpu:
    from dataclasses import replace

    return replace(gpu, **changes)


def detect_topology(
    *,
    environ: Optional[Mapping[str, str]] = None,
    use_nvml: bool = True,
    sysfs_root: str = "/sys",
    allowed_cpus: Optional[Iterable[int]] = None,
    allowed_mems: Optional[Iterable[int]] = None,
    gpu_vendors: Optional[Union[Mapping[int, str], Iterable[int]]] = None,
    pci_classes: Optional[Iterable[Union[str, int]]] = None,
) -> Topology:
    """Discover the machine and this process's view of it.

    ``environ`` (default ``os.environ``) supplies ``CUDA_VISIBLE_DEVICES`` and
    friends; ``use_nvml=False`` skips NVML.  NVML is only loaded when sysfs
    shows an NVIDIA GPU, or shows no PCI bus at all (some containers).
    """
    from . import _nvml, _sysfs, _visible

    env = os.environ if environ is None else environ
    options: Dict[str, Any] = {}
    if gpu_vendors is not None:
        options["gpu_vendors"] = gpu_vendors
    if pci_classes is not None:
        options["pci_classes"] = pci_classes
    base = _sysfs.read_topology(
        sysfs_root, allowed_cpus=allowed_cpus, allowed_mems=allowed_mems, **options
    )
    notes = list(base.notes)
    gpus = list(base.gpus)
    mig_parents: Optional[Dict[str, str]] = None
    has_nvidia = any(g.vendor == "nvidia" for g in gpus)
    no_pci = not os.path.isdir(os.path.join(sysfs_root, "bus", "pci", "devices"))
    if use_nvml and (has_nvidia or no_pci):
        max_cpu = max(base.cpus) if base.cpus else 0
        max_node = max(base.nodes) if base.nodes else 0
        try:
            report = _nvml.query(
                cpu_words=max_cpu // 64 + 1,
                node_words=max_node // 64 + 1,
                mig_uuids=_visible.mig_uuids(env.get("CUDA_VISIBLE_DEVICES")),
            )
        except _nvml.NvmlUnavailable as exc:
            if has_nvidia:
                notes.append(f"NVML unavailable ({exc.reason}); GPU NUMA nodes from sysfs PCI")
        else:
            gpus, merge_notes = merge_nvml(base, report)
            notes += merge_notes
            mig_parents = dict(report.mig_parents)
    elif has_nvidia:
        notes.append("NVML not used (use_nvml=False); GPU NUMA nodes from sysfs PCI")
    topology = base.replace(gpus=tuple(gpus), notes=tuple(notes))
    return _visible.apply_visibility(topology, env, mig_parents=mig_parents)


def topology_from_sysfs(
    root: str = "/sys",
    *,
    allowed_cpus: Optional[Iterable[int]] = None,
    allowed_mems: Optional[Iterable[int]] = None,
    gpu_vendors: Optional[Union[Mapping[int, str], Iterable[int]]] = None,
    pci_classes: Optional[Iterable[Union[str, int]]] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Topology:
    """The machine under sysfs ``root`` (``/sys``, or another machine's copy), without NVML.

    See :func:`pynumabind._sysfs.read_topology` for what each keyword means;
    ``None`` keeps its default.
    """
    from . import _sysfs

    options: Dict[str, Any] = {}
    if gpu_vendors is not None:
        options["gpu_vendors"] = gpu_vendors
    if pci_classes is not None:
        options["pci_classes"] = pci_classes
    return _sysfs.read_topology(
        root, allowed_cpus=allowed_cpus, allowed_mems=allowed_mems, environ=environ, **options
    )


def load_topology(path: str) -> Topology:
    """Read a snapshot file written by ``pynumabind snapshot``."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise TopologyError(f"cannot read topology file {path!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise TopologyError(
            f"topology file {path!r} is not UTF-8 text (byte {exc.start}): "
            "expected JSON written by 'pynumabind snapshot'"
        ) from exc
    return Topology.from_json(text)
