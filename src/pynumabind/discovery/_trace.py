"""What discovery tried, and what each source said: logged, for ``pynumabind show -v``.

"GPUs: none visible" used to be all a user learned: not whether NVML was
asked, nor why there were none.  Discovery now logs, on the
``pynumabind.discovery`` logger:

* at INFO (``-v``), one line per source: where the machine came from (this
  machine's sysfs, a tree, a snapshot), the PCI scan (how many GPU functions
  of each vendor, or no PCI bus listed at all), NVML (asked or not, and why;
  its answer), KFD (AMD's order and UUIDs: read or not needed), Intel GPUs
  (numbered in PCI order), and the visible-device variables (applied or not
  set) with the GPUs left;
* at DEBUG (``-vv``), each source's details: every GPU as sysfs lists it,
  every device as NVML reports it, and every note discovery recorded.

Nothing here is computed unless its level is enabled, so a bind pays for none
of it.  Values in, log lines out: the sources are read by their own modules
(the one look here, whether a tree lists a PCI bus at all, is
:func:`pynumabind._os.pci.lists_functions`'s, and only at INFO).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from .._text import counted, format_ids
from ..model import VISIBILITY_VARIABLES, Gpu, Topology

if TYPE_CHECKING:  # pragma: no cover
    from .._os.nvml import NvmlReport

__all__ = ["machine", "nvml", "pci", "visibility"]

log = logging.getLogger("pynumabind.discovery")

_VENDORS = (("nvidia", "NVIDIA"), ("amd", "AMD"), ("intel", "Intel"))


def machine(where: str) -> None:
    """Where the machine came from: ``where`` says it (this machine, a tree, a snapshot)."""
    log.info("discovery: machine: %s", where)


def _gpu_line(gpu: Gpu) -> str:
    node = "none" if gpu.numa_node is None else str(gpu.numa_node)
    return (
        f"{gpu.pci_bus_id} {gpu.vendor} ({gpu.model or 'model unknown'}): numa_node {node}, "
        f"local CPUs {format_ids(gpu.local_cpus) or 'none'}"
    )


def pci(layout: Topology, root: str, *, kept: bool = False) -> None:
    """The layout sysfs gave: nodes and CPUs, and the GPUs its PCI scan found, by vendor."""
    if not log.isEnabledFor(logging.INFO):
        return
    from .._os.pci import lists_functions

    how = "kept from this process's previous bind" if kept else "read"
    log.info(
        "discovery: sysfs %s (%s): %s, %s online",
        root,
        how,
        counted(len(layout.nodes), "NUMA node"),
        counted(len(layout.online_cpus), "CPU"),
    )
    if lists_functions(root):
        counts = [f"{sum(g.vendor == v for g in layout.gpus)} {name}" for v, name in _VENDORS]
        log.info(
            "discovery: PCI: %s among the display and accelerator functions (%s)",
            counted(len(layout.gpus), "GPU"),
            ", ".join(counts),
        )
    else:
        log.info(
            "discovery: PCI: the tree lists no PCI bus (a container may mask it): no GPU can be "
            "found by PCI, so NVML is asked"
        )
    _vendor_sources(layout.gpus)
    if log.isEnabledFor(logging.DEBUG):
        _layout_details(layout)


def _vendor_sources(gpus: Sequence[Gpu]) -> None:
    """KFD (read for AMD GPUs only) and the Intel GPUs (numbered by PCI address)."""
    amd = sum(g.vendor == "amd" for g in gpus)
    log.info(
        "discovery: KFD (AMD's order and UUIDs): %s",
        f"read for {counted(amd, 'AMD GPU')}" if amd else "not needed: no AMD GPU",
    )
    intel = sum(g.vendor == "intel" for g in gpus)
    log.info(
        "discovery: Intel GPUs: %s",
        f"{intel}, numbered in PCI order (Level Zero's)" if intel else "none in PCI",
    )


def _layout_details(layout: Topology) -> None:
    """Each node, each GPU function and each note sysfs gave (``-vv``)."""
    for node in sorted(layout.nodes.values(), key=lambda n: n.id):
        log.debug(
            "discovery: sysfs node %d: CPUs %s, %s, distances %s",
            node.id,
            format_ids(node.cpus) or "none",
            "memory" if node.has_memory else "no memory",
            " ".join(f"{k}:{v}" for k, v in sorted(node.distances.items())) or "unknown",
        )
    for gpu in layout.gpus:
        log.debug("discovery: sysfs GPU %s", _gpu_line(gpu))
    for note in layout.notes:
        log.debug("discovery: sysfs note: %s", note)


def nvml(
    *,
    asked: bool,
    why: str,
    report: Optional[NvmlReport] = None,
    unavailable: Optional[str] = None,
) -> None:
    """Whether NVML was asked (``why`` not, or why), and what it said."""
    if not log.isEnabledFor(logging.INFO):
        return
    if not asked:
        log.info("discovery: NVML: not asked: %s", why)
        return
    if unavailable is not None:
        log.info("discovery: NVML: asked (%s): unavailable: %s", why, unavailable)
        return
    assert report is not None
    denied = f"; denied (device cgroup): {format_ids(report.denied)}" if report.denied else ""
    log.info("discovery: NVML: asked (%s): %s%s", why, counted(len(report.devices), "GPU"), denied)
    if log.isEnabledFor(logging.DEBUG):
        for device in report.devices:
            memory = (
                "unknown"
                if device.memory_affinity is None
                else format_ids(device.memory_affinity) or "none"
            )
            log.debug(
                "discovery: NVML GPU %d %s (%s): NUMA id %s, CPU affinity %s, memory affinity %s",
                device.index,
                device.pci_bus_id,
                device.name or "name unknown",
                "none" if device.numa_node_id is None else device.numa_node_id,
                format_ids(device.cpu_affinity) or "none",
                memory,
            )
        for note in report.notes:
            log.debug("discovery: NVML note: %s", note)


def visibility(
    environ: Mapping[str, str],
    before: Sequence[Gpu],
    after: Topology,
    *,
    applied: bool = True,
) -> None:
    """The visible-device variables set, and the GPUs they left (``before``: all of them).

    ``applied=False``: every GPU kept on purpose (a snapshot records them all).
    """
    if not log.isEnabledFor(logging.INFO):
        return
    settings = [f"{n}={environ[n]!r}" for n in VISIBILITY_VARIABLES if environ.get(n) is not None]
    given = ", ".join(settings) if settings else "no visible-device variable set"
    if not applied:
        given = "not applied: every GPU of the machine is kept (a snapshot records them all)"
    if not before:
        log.info("discovery: visibility: %s: no GPU to select from", given)
    else:
        log.info(
            "discovery: visibility: %s: %d of %s seen: %s",
            given,
            len(after.gpus),
            counted(len(before), "GPU"),
            ", ".join(f"{g.index}: {g.pci_bus_id} ({g.source})" for g in after.gpus) or "none",
        )
    if log.isEnabledFor(logging.DEBUG):
        for note in after.notes:
            log.debug("discovery: note: %s", note)
