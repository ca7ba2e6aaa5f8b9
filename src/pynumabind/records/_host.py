"""This machine as an advice record describes it: the fingerprint a record is compared with.

Read through discovery and :mod:`pynumabind._os` (sysfs, the CPU model, the
kernel release; no NVML), never measured: a worker reads it in mode
``advised`` to tell whether the record still applies
(:func:`pynumabind.records._machine.staleness`), and the writer stores it in
the record.
"""

from __future__ import annotations

from .._os import SYSFS_ROOT
from ._machine import Machine, machine_of

__all__ = ["this_machine"]


def this_machine(sysfs_root: str = SYSFS_ROOT) -> Machine:
    """This machine's fingerprint, read through discovery (sysfs only, every GPU; no NVML).

    GPUs are sysfs's, named by PCI ids, so a record saved with NVML compares
    the same read without it; NUMA node CPUs and SLIT distances come from the
    same layout a bind reads (kept between calls), memory sizes from each
    node's ``meminfo``.
    """
    from .._os import cpuinfo as _cpuinfo
    from .._os import meminfo as _meminfo
    from .._os import sysfs as _sysfs
    from ..discovery import detect_topology
    from ..model import Detail

    topology = detect_topology(
        environ={},
        use_nvml=False,
        sysfs_root=sysfs_root,
        detail=Detail.NODES,
        reuse=True,
        visible_only=False,
    )
    return machine_of(
        topology,
        cpu_model=_cpuinfo.cpu_model(),
        kernel=_sysfs.kernel_release(),
        memory_bytes=_meminfo.node_memory_sizes(sysfs_root, sorted(topology.nodes)),
    )
