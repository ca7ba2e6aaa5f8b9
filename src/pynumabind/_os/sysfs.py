"""Read a machine's layout from a sysfs tree: its CPUs and NUMA nodes, then its GPUs.

``root`` stands for ``/sys`` (:data:`~pynumabind._os.SYSFS_ROOT`): the live
machine, a copied tree, or a test fixture.  Only files are read (no
libnuma, no NVML), which is what makes this the common ground for every
other source: NVML and KFD refine the GPU list built here, they never
replace the CPU/node facts.  This module reads the CPUs
(``devices/system/cpu``) and nodes (``devices/system/node``) itself and asks
one reader per other file: :mod:`.pci` for the PCI functions and the GPUs
among them, :mod:`.caches` for the L3 groups, :mod:`.meminfo` for the nodes'
memory, :mod:`.tiers` for their memory tiers.  What belongs to the *process*
rather than the machine -- its allowed CPUs and memory nodes -- comes from
:mod:`.proc`, the one owner of those reads (which may ask libnuma for
``get_mempolicy``); this module imports neither the apply layer nor libnuma.

Policy on bad input: a file that exists but cannot be read or parsed is an
error (:class:`~pynumabind.errors.TopologyError` naming the file, raised by
:class:`~pynumabind._os.textfile.SysfsReader`), because guessing would give
wrong bindings.  A file that is *optional* and absent (no cache info, no
``die_id``, no ``devices/system/node`` on a kernel without NUMA) degrades
gracefully and leaves a note in :attr:`~pynumabind.model.Topology.notes`.
"""

from __future__ import annotations

import collections.abc as _abc
import os

from .._text import format_ids
from ..cpulist import parse_cpulist
from ..errors import ConfigError, ListParseError, PynumabindError, TopologyError
from ..model import Cpu, Detail, MemoryAccess, NumaNode, Topology
from . import SYSFS_ROOT
from . import pci as _pci
from . import proc as _proc
from .textfile import SysfsReader, is_live_root, numbered

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union

__all__ = ["kernel_release", "read_layout", "with_allowed"]


# -------------------------------------------------------------------- CPUs


def _online_cpus(sysfs: SysfsReader, notes: List[str]) -> frozenset[int]:
    online = sysfs.cpulist("devices", "system", "cpu", "online", required=False)
    if online is not None:
        return online
    names = sysfs.listdir("devices", "system", "cpu")
    if names is None:
        raise TopologyError(f"no CPU information under {sysfs.path('devices', 'system', 'cpu')}")
    cpus = set()
    for cpu in numbered(names, "cpu"):
        flag = sysfs.integer("devices", "system", "cpu", f"cpu{cpu}", "online", required=False)
        if flag != 0:
            cpus.add(cpu)
    notes.append("devices/system/cpu/online missing: online CPUs taken from cpu*/online")
    return frozenset(cpus)


def _read_cpus(
    sysfs: SysfsReader,
    online: frozenset[int],
    node_of: Mapping[int, int],
    detail: Detail,
    notes: List[str],
) -> Dict[int, Cpu]:
    """The CPUs with what ``detail`` needs, each fact read once per group that shares it.

    A package's CPUs come from one CPU's ``package_cpus_list`` (older kernels:
    ``core_siblings_list``, the same list), a die's from ``die_cpus_list``, a
    core's from one CPU's ``thread_siblings_list``, an L3 group's from one
    CPU's cache entry; every other online CPU in the list it names is covered
    by that one read (the kernel gives every CPU of a group the same list and
    the same id).  So a 224-CPU DGX costs about 240 reads, not 13 per CPU.
    What a level does not read keeps the value
    :class:`~pynumabind.model.Detail` names.  A CPU without ``topology/`` is
    its own core in package 0, with no die and no L3 (a note says which).
    """
    no_topology: List[int] = []
    package: Dict[int, int] = {}
    if detail >= Detail.PACKAGES:
        package, _ = _group_ids(sysfs, online, "physical_package_id", no_topology)
    core: Dict[int, int] = {}
    siblings: Dict[int, frozenset[int]] = {}
    perf: Dict[int, int] = {}
    if detail >= Detail.CORES:
        core, siblings = _cores(sysfs, online, no_topology)
        perf = _highest_perf(sysfs, online, siblings)
    bare = frozenset(no_topology)
    die: Dict[int, int] = {}
    no_die = False
    if detail >= Detail.FULL:
        die, no_die = _group_ids(sysfs, online, "die_id", list(no_topology))
    l3: Dict[int, frozenset[int]] = {}
    no_l3: List[int] = []
    if detail >= Detail.CACHES:
        l3 = _l3_groups(sysfs, online, bare, no_l3)
    if no_topology:
        notes.append(
            f"no topology/ for CPUs {format_ids(bare)}: each is taken as its own core in package 0"
        )
    if no_die:
        notes.append("topology/die_id missing: dies unknown")
    if no_l3:
        notes.append(f"no L3 cache information for CPUs {format_ids(frozenset(no_l3))}")
    return {
        cpu: Cpu(
            id=cpu,
            node=node_of.get(cpu),
            package=0 if cpu in bare else package.get(cpu, 0),
            core=cpu if cpu in bare else core.get(cpu, cpu),
            die=None if cpu in bare else die.get(cpu),
            siblings=frozenset() if cpu in bare else siblings.get(cpu, frozenset()),
            l3=frozenset() if cpu in bare else l3.get(cpu, frozenset()),
            highest_perf=perf.get(cpu),
        )
        for cpu in sorted(online)
    }


#: topology/ id file -> the file listing the CPUs that share it (then its older name).
_GROUP_LISTS = {
    "physical_package_id": ("package_cpus_list", "core_siblings_list"),
    "die_id": ("die_cpus_list",),
}


def _group_ids(
    sysfs: SysfsReader,
    online: frozenset[int],
    name: str,
    no_topology: List[int],
) -> Tuple[Dict[int, int], bool]:
    """Each online CPU's ``topology/<name>`` (package or die), one read per group.

    Returns the ids and whether some CPU lacked the file.  A missing package
    id means no ``topology/`` at all: the CPU joins ``no_topology``.  A die
    id missing (kernels before 5.2) is only reported, and a negative one
    (firmware gave none) is no die; a negative package is 0.
    """
    die = name == "die_id"
    ids: Dict[int, int] = {}
    missing = False
    skip = frozenset(no_topology)
    for cpu in sorted(online):
        if cpu in ids or cpu in skip:
            continue
        base = ("devices", "system", "cpu", f"cpu{cpu}", "topology")
        number = sysfs.integer(*base, name, required=False)
        if number is None:
            if not die:
                no_topology.append(cpu)
            missing = True
            continue
        members: Optional[frozenset[int]] = None
        for listing in _GROUP_LISTS[name]:
            members = sysfs.cpulist(*base, listing, required=False)
            if members is not None:
                break
        for other in (members or frozenset()) & online | {cpu}:
            if not die:
                ids.setdefault(other, max(number, 0))
            elif number >= 0:
                ids.setdefault(other, number)
    return ids, missing


def _cores(
    sysfs: SysfsReader, online: frozenset[int], no_topology: List[int]
) -> Tuple[Dict[int, int], Dict[int, frozenset[int]]]:
    """Each online CPU's core id and SMT siblings, one read per core."""
    core: Dict[int, int] = {}
    siblings: Dict[int, frozenset[int]] = {}
    for cpu in sorted(online):
        if cpu in siblings or cpu in no_topology:
            continue
        base = ("devices", "system", "cpu", f"cpu{cpu}", "topology")
        number = sysfs.integer(*base, "core_id", required=False)
        if number is None:
            no_topology.append(cpu)
            continue
        found = sysfs.cpulist(*base, "thread_siblings_list", required=False)
        group = (found or frozenset({cpu})) & online
        for other in group | {cpu}:
            siblings.setdefault(other, group)
            core.setdefault(other, number)
    return core, siblings


def _highest_perf(
    sysfs: SysfsReader, online: frozenset[int], siblings: Mapping[int, frozenset[int]]
) -> Dict[int, int]:
    """Each online CPU's ACPI CPPC ``highest_perf``, one read per core; empty when absent.

    SMT siblings share their core's value, so one CPU of each core is read.
    A machine without CPPC (most VMs) costs one failed read: the first CPU's
    file missing means none is used (all or nothing, so cores are never
    compared with a partial picture).
    """
    out: Dict[int, int] = {}
    for cpu in sorted(online):
        if cpu in out:
            continue
        value = sysfs.integer(
            "devices", "system", "cpu", f"cpu{cpu}", "acpi_cppc", "highest_perf", required=False
        )
        if value is None:
            return {}
        for other in (siblings.get(cpu, frozenset()) & online) | {cpu}:
            out.setdefault(other, value)
    return out


def _l3_groups(
    sysfs: SysfsReader, online: frozenset[int], no_topology: frozenset[int], no_l3: List[int]
) -> Dict[int, frozenset[int]]:
    """Each online CPU's L3 group, one read per group (no caches without ``topology/``).

    :mod:`.caches` reads the files; it is loaded only at this detail.
    """
    from . import caches as _caches

    l3: Dict[int, frozenset[int]] = {}
    for cpu in sorted(online):
        if cpu in l3 or cpu in no_topology:
            continue
        group = _caches.l3_group(sysfs, cpu, online)
        if group is None:
            no_l3.append(cpu)
            group = frozenset()
        for other in group | {cpu}:
            l3.setdefault(other, group)
    return l3


# ------------------------------------------------------------------- nodes


def kernel_release() -> str:
    """``uname -r``: the running kernel's release."""
    return os.uname().release


def _read_nodes(
    sysfs: SysfsReader, online_cpus: frozenset[int], notes: List[str], sizes: bool = True
) -> Dict[int, NumaNode]:
    """The online nodes; ``sizes=False`` skips ``meminfo`` (unless ``has_memory`` is
    missing), the memory tiers (:mod:`.tiers`) and the HMAT figures (:mod:`.hmat`)."""
    base = ("devices", "system", "node")
    names = sysfs.listdir(*base)
    if names is None:
        return {0: _single_node(sysfs, online_cpus, notes)}
    online = sysfs.cpulist(*base, "online", required=False)
    if online is None:
        online = frozenset(numbered(names, "node"))
        notes.append("devices/system/node/online missing: nodes taken from node* directories")
    has_memory = sysfs.cpulist(*base, "has_memory", required=False)
    tiers: Dict[int, int] = {}
    if sizes:  # the memory tiers only at full detail: a bind never reads them
        from . import tiers as _tiers

        tiers = _tiers.node_tiers(sysfs)
    order = sorted(online)
    nodes: Dict[int, NumaNode] = {}
    for node in order:
        here = (*base, f"node{node}")
        cpulist = sysfs.cpulist(*here, "cpulist")
        assert cpulist is not None
        total = free = None
        if sizes or has_memory is None:
            from . import meminfo as _meminfo  # loaded only when sizes are read

            total, free = _meminfo.node_total_free(sysfs, node)
            if total is None:
                notes.append(f"node{node}/meminfo missing: its memory size is unknown")
        distances = _distances(sysfs, here, order, notes)
        if has_memory is not None:
            memory = node in has_memory
        else:
            memory = total is None or total > 0  # unknown: assume the common case
        nodes[node] = NumaNode(
            id=node,
            cpus=cpulist & online_cpus,
            memory_total=total,
            memory_free=free,
            has_memory=memory,
            distances=distances,
            tier=tiers.get(node) if memory else None,
            access=_access(sysfs, node) if sizes and memory else None,
        )
    return nodes


def _access(sysfs: SysfsReader, node: int) -> Optional[MemoryAccess]:
    """The firmware HMAT's figures for ``node`` from its nearest CPUs (access class 1)."""
    from . import hmat as _hmat  # only at full detail

    found = _hmat.node_access(sysfs, node, _hmat.CPU_ACCESS)
    if found is None:
        return None
    return MemoryAccess(
        initiators=frozenset(found.initiators),
        read_bandwidth_mbs=found.read_bandwidth_mbs,
        write_bandwidth_mbs=found.write_bandwidth_mbs,
        read_latency_ns=found.read_latency_ns,
        write_latency_ns=found.write_latency_ns,
    )


def _single_node(sysfs: SysfsReader, online_cpus: frozenset[int], notes: List[str]) -> NumaNode:
    """The one node 0 of a kernel without NUMA: every online CPU, the machine's memory."""
    notes.append(
        f"{sysfs.path('devices', 'system', 'node')} missing (kernel without NUMA): "
        "one node 0 with all online CPUs"
    )
    total = free = None
    if is_live_root(sysfs.root):
        from . import meminfo as _meminfo

        system = _meminfo.system_meminfo() or {}
        total, free = system.get("MemTotal"), system.get("MemFree")
    return NumaNode(
        id=0,
        cpus=online_cpus,
        memory_total=total,
        memory_free=free,
        has_memory=True,
        distances={0: 10},
    )


def _distances(
    sysfs: SysfsReader, here: Tuple[str, ...], order: List[int], notes: List[str]
) -> Dict[int, int]:
    """A node's ``distance`` row: one value per *online* node, in ascending id order.

    With sparse ids (0, 8) the second column is node 8, not node 1.
    """
    row_text = sysfs.text(*here, "distance", required=False)
    if row_text is None:
        notes.append(f"{here[-1]}/distance missing: distances unknown")
        return {}
    fields = row_text.split()
    if len(fields) != len(order) or not all(f.isdigit() for f in fields):
        raise TopologyError(
            f"malformed distance row {row_text.strip()!r} in "
            f"{sysfs.path(*here, 'distance')} (expected {len(order)} numbers, "
            f"one per online node {format_ids(frozenset(order))})"
        )
    return {other: int(value) for other, value in zip(order, fields)}


# ---------------------------------------------------------- allowed sets


def _id_argument(value: object, what: str) -> frozenset[int]:
    """An ``allowed_*`` argument: a list string (``"0-7"``) or non-negative ints."""
    if isinstance(value, str):
        try:
            return parse_cpulist(value)
        except ListParseError as exc:
            raise ConfigError(f"{what}: {exc}") from exc
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, _abc.Iterable):
        raise ConfigError(f"{what} must be a list string or an iterable of ids, not {value!r}")
    out = set()
    for item in value:
        number = _pci.as_id(item)
        if number is None:
            raise ConfigError(f"{what}: {item!r} is not a non-negative id")
        out.add(number)
    return frozenset(out)


def _live_mems_allowed(notes: List[str]) -> Optional[frozenset[int]]:
    """The cpuset's memory nodes, read fresh: get_mempolicy, else ``Mems_allowed_list``.

    Both reads are :mod:`.proc`'s; each failure is a typed error, kept as a note.
    """
    try:
        return _proc.mems_allowed()
    except PynumabindError as exc:
        notes.append(f"get_mempolicy(MPOL_F_MEMS_ALLOWED) failed ({exc}); using Mems_allowed_list")
    try:
        return _proc.status_mems_allowed()
    except PynumabindError as exc:
        notes.append(f"cannot read Mems_allowed_list: {exc}")
    return None


def _allowed(
    root: str,
    *,
    online: frozenset[int],
    nodes: Mapping[int, NumaNode],
    allowed_cpus: Optional[Iterable[int]],
    allowed_mems: Optional[Iterable[int]],
    notes: List[str],
) -> Tuple[frozenset[int], frozenset[int]]:
    live = is_live_root(root)
    memory_nodes = frozenset(n.id for n in nodes.values() if n.has_memory)
    if allowed_cpus is not None:
        cpus = _id_argument(allowed_cpus, "allowed_cpus")
    elif live:
        cpus = _proc.process_affinity()
    else:
        cpus = online
    if allowed_mems is not None:
        mems = _id_argument(allowed_mems, "allowed_mems")
    elif live:
        fresh = _live_mems_allowed(notes)
        mems = fresh if fresh is not None else memory_nodes
    else:
        mems = memory_nodes
    if cpus - online:
        notes.append(f"allowed CPUs {format_ids(cpus - online)} are not online; ignored")
        cpus &= online
    if mems - frozenset(nodes):
        notes.append(f"allowed memory nodes {format_ids(mems - frozenset(nodes))} do not exist")
        mems &= frozenset(nodes)
    return cpus, mems


# ----------------------------------------------------------------- entry


def read_layout(
    root: str = SYSFS_ROOT,
    *,
    detail: Detail = Detail.FULL,
    gpu_vendors: Optional[Union[Mapping[int, str], Iterable[int]]] = None,
    pci_classes: Optional[Iterable[Union[str, int]]] = None,
) -> Topology:
    """The machine under ``root``: nodes, CPUs (as much as ``detail`` says), every GPU.

    What cannot change while a process runs, so discovery may keep it; the
    allowed sets are left empty for :func:`with_allowed` to fill, and no
    visibility variable is applied.  Each CPU fact is read once per group
    that shares it (:func:`_read_cpus`); ``detail`` below ``FULL`` reads
    less of them and no node memory sizes.
    """
    notes: List[str] = []
    sysfs = SysfsReader(root)
    online = _online_cpus(sysfs, notes)
    if not online:
        raise TopologyError(f"no online CPUs found under {root}")
    nodes = _read_nodes(sysfs, online, notes, sizes=detail is Detail.FULL)
    node_of: Dict[int, int] = {}
    for node in nodes.values():
        for cpu in node.cpus:
            if cpu in node_of:
                raise TopologyError(
                    f"CPU {cpu} is listed in both node {node_of[cpu]} and node {node.id}"
                )
            node_of[cpu] = node.id
    homeless = online - frozenset(node_of)
    if homeless:
        notes.append(f"online CPUs {format_ids(homeless)} belong to no NUMA node")
    cpus = _read_cpus(sysfs, online, node_of, detail, notes)

    vendors = _pci.vendor_names(_pci.DEFAULT_GPU_VENDORS if gpu_vendors is None else gpu_vendors)
    classes = _pci.DEFAULT_PCI_CLASSES if pci_classes is None else pci_classes
    vendor_classes = (
        {v: c for v, c in _pci.DEFAULT_VENDOR_CLASSES.items() if v in vendors}
        if pci_classes is None
        else {}
    )
    functions = _pci.scan_pci(sysfs, online, nodes, vendors, classes, vendor_classes=vendor_classes)
    gpus = _pci.gpus_from_pci(functions, vendors, nodes, notes)
    if any(g.vendor == "amd" for g in gpus):  # only AMD GPUs need the KFD topology
        from . import kfd as _kfd

        gpus = _kfd.apply_kfd(root, gpus, notes)
    return Topology(
        nodes=nodes,
        cpus=cpus,
        gpus=tuple(gpus),
        allowed_cpus=frozenset(),
        allowed_mems=frozenset(),
        notes=tuple(notes),
        detail=detail,
    )


def with_allowed(
    layout: Topology,
    root: str = SYSFS_ROOT,
    *,
    allowed_cpus: Optional[Iterable[int]] = None,
    allowed_mems: Optional[Iterable[int]] = None,
) -> Topology:
    """``layout`` with this process's allowed CPUs and memory nodes, read fresh.

    For the live ``/sys`` they come from ``sched_getaffinity`` and
    ``get_mempolicy(MPOL_F_MEMS_ALLOWED)``; for any other root they default
    to every online CPU and every node with memory.  ``allowed_cpus`` and
    ``allowed_mems`` override both.
    """
    notes = list(layout.notes)
    cpus_allowed, mems_allowed = _allowed(
        root,
        online=layout.online_cpus,
        nodes=layout.nodes,
        allowed_cpus=allowed_cpus,
        allowed_mems=allowed_mems,
        notes=notes,
    )
    return layout.replace(allowed_cpus=cpus_allowed, allowed_mems=mems_allowed, notes=tuple(notes))
