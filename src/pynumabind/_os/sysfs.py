"""Read a machine's topology from a sysfs tree.

``root`` stands for ``/sys``: the live machine, a copied tree, or a test
fixture.  Only files are read (no libnuma, no NVML), which is what makes
this the common ground for every other source: NVML and KFD refine the GPU
list built here, they never replace the CPU/node facts.  What belongs to the
*process* rather than the machine -- its allowed CPUs and memory nodes --
comes from :mod:`._proc`, the one owner of those reads (which may ask
libnuma for ``get_mempolicy``); this module imports neither the apply layer
nor libnuma.

Policy on bad input: a file that exists but cannot be read or parsed is an
error (:class:`TopologyError` naming the file), because guessing would give
wrong bindings.  A file that is *optional* and absent (no cache info, no
``die_id``, no ``devices/system/node`` on a kernel without NUMA) degrades
gracefully and leaves a note in :attr:`Topology.notes`.
"""

from __future__ import annotations

import errno
import operator
import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..cpulist import parse_cpulist
from ..errors import ConfigError, ListParseError, PynumabindError, TopologyError, format_ids
from ..model import Cpu, Detail, Gpu, NumaNode, Topology
from . import proc as _proc
from .textfile import read_ascii

__all__ = [
    "DEFAULT_GPU_VENDORS",
    "DEFAULT_PCI_CLASSES",
    "DEFAULT_VENDOR_CLASSES",
    "DEFAULT_VENDOR_DRIVERS",
    "PciFunction",
    "cpu_model",
    "kernel_release",
    "node_memory_sizes",
    "normalize_bus_id",
    "read_layout",
    "with_allowed",
]

#: PCI vendor id -> the vendor name pynumabind reports.
DEFAULT_GPU_VENDORS: Mapping[int, str] = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}

#: PCI class prefixes taken for accelerators: every display controller
#: (0x03: VGA 0x0300, 3D 0x0302, other 0x0380) and processing accelerators
#: (0x1200, e.g. MI300X).  NVSwitch (0x0680) and GPU audio (0x0403) are not.
DEFAULT_PCI_CLASSES: Tuple[str, ...] = ("0x03", "0x1200")

#: Vendors whose accelerators are only some of those classes, by default.
#: Intel's data-center GPUs (Data Center GPU Max, Flex) are display
#: controllers of class 0x0380 or processing accelerators (0x1200); the
#: integrated graphics on the CPU package are VGA controllers (0x0300), and
#: are no GPU to bind a rank next to.  ``pci_classes`` given replaces this
#: for every vendor.
DEFAULT_VENDOR_CLASSES: Mapping[int, Tuple[str, ...]] = {0x8086: ("0x0380", "0x1200")}

#: On the live machine, the drivers such a vendor's GPU is bound to
#: (``/proc/bus/pci/devices`` names each function's driver, so Intel's dozens
#: of chipset functions are not opened one by one): i915 and xe.  A GPU bound
#: to no driver, or to another (vfio-pci: passed through to a guest), is no
#: device Level Zero can open here.  Applies with the default classes only.
DEFAULT_VENDOR_DRIVERS: Mapping[int, Tuple[str, ...]] = {0x8086: ("i915", "xe")}

_BDF = re.compile(r"\A(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\Z")
_MEMINFO = re.compile(r"\ANode\s+(\d+)\s+([^:\s]+):\s+(\d+)(?:\s+kB)?\s*\Z")


def normalize_bus_id(bus_id: str) -> str:
    """Canonical PCI address ``0000:07:00.0`` (lower case, 4-digit domain).

    NVML prints ``00000000:07:00.0`` in upper case, sysfs ``0000:07:00.0``;
    both name the same function, and GPUs are matched across sources by it.
    """
    match = _BDF.match(bus_id.strip())
    if match is None:
        raise TopologyError(f"malformed PCI bus id {bus_id!r}")
    domain = int(match.group(1) or "0", 16)
    if domain > 0xFFFF:
        raise TopologyError(f"PCI domain of {bus_id!r} exceeds 16 bits")
    bus, device, function = (int(match.group(i), 16) for i in (2, 3, 4))
    if device > 0x1F:
        raise TopologyError(f"PCI device number of {bus_id!r} exceeds 0x1f")
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


# ------------------------------------------------------------- file access


class SysfsReader:
    """File access relative to a sysfs root, with errors that name the file.

    The one sysfs file reader of the package: discovery here, and the cache
    and HMAT reads of ``advise`` (:mod:`._measure`).
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def text(self, *parts: str, required: bool = True) -> Optional[str]:
        path = self.path(*parts)
        try:
            return read_ascii(path)
        except (FileNotFoundError, NotADirectoryError):
            if required:
                raise TopologyError(f"missing sysfs file {path}") from None
            return None
        except OSError as exc:
            # EINVAL/ENODEV: an attribute the kernel refuses to show; treat
            # an optional one as absent, a required one as an error.
            if not required and exc.errno in (errno.EINVAL, errno.ENODEV, errno.ENXIO):
                return None
            reason = exc.strerror or str(exc)
            raise TopologyError(f"cannot read sysfs file {path}: {reason}") from exc

    def cpulist(self, *parts: str, required: bool = True) -> Optional[frozenset[int]]:
        text = self.text(*parts, required=required)
        if text is None:
            return None
        try:
            return parse_cpulist(text.strip())
        except ListParseError as exc:
            raise TopologyError(f"malformed list in {self.path(*parts)}: {exc}") from exc

    def integer(self, *parts: str, required: bool = True, base: int = 10) -> Optional[int]:
        text = self.text(*parts, required=required)
        if text is None:
            return None
        try:
            return int(text.strip(), base)
        except ValueError:
            raise TopologyError(
                f"malformed number {text.strip()!r} in {self.path(*parts)}"
            ) from None

    def listdir(self, *parts: str) -> Optional[List[str]]:
        try:
            return sorted(os.listdir(self.path(*parts)))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TopologyError(
                f"cannot list sysfs directory {self.path(*parts)}: {exc.strerror}"
            ) from exc


def _numbered(names: Iterable[str], prefix: str) -> List[int]:
    """Ids of entries named ``<prefix><digits>`` (``node3``, ``cpu17``).

    ASCII digits only: ``str.isdigit`` also accepts ``index²``, which
    ``int`` then rejects.
    """
    out = []
    for name in names:
        digits = name[len(prefix) :]
        if name.startswith(prefix) and digits.isascii() and digits.isdigit():
            out.append(int(digits))
    return sorted(out)


# -------------------------------------------------------------------- CPUs


def _online_cpus(sysfs: SysfsReader, notes: List[str]) -> frozenset[int]:
    online = sysfs.cpulist("devices", "system", "cpu", "online", required=False)
    if online is not None:
        return online
    names = sysfs.listdir("devices", "system", "cpu")
    if names is None:
        raise TopologyError(f"no CPU information under {sysfs.path('devices', 'system', 'cpu')}")
    cpus = set()
    for cpu in _numbered(names, "cpu"):
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
        l3 = _caches(sysfs, online, bare, no_l3)
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


def _caches(
    sysfs: SysfsReader, online: frozenset[int], no_topology: frozenset[int], no_l3: List[int]
) -> Dict[int, frozenset[int]]:
    """Each online CPU's L3 group, one read per group (no caches without ``topology/``)."""
    l3: Dict[int, frozenset[int]] = {}
    for cpu in sorted(online):
        if cpu in l3 or cpu in no_topology:
            continue
        group = _l3_of(sysfs, ("devices", "system", "cpu", f"cpu{cpu}"), online, no_l3)
        for other in group | {cpu}:
            l3.setdefault(other, group)
    return l3


def _l3_of(
    sysfs: SysfsReader, base: Tuple[str, ...], online: frozenset[int], missing: List[int]
) -> frozenset[int]:
    """CPUs sharing this CPU's unified level-3 cache.

    ``index3`` is the L3 on every x86 and Arm server seen so far, so it is
    tried first (three reads per CPU); the other indices only when it is not.
    """
    names = sysfs.listdir(*base, "cache")
    indices = _numbered(names or (), "index")
    if 3 in indices:
        indices.remove(3)
        indices.insert(0, 3)
    for index in indices:
        here = (*base, "cache", f"index{index}")
        level = sysfs.integer(*here, "level", required=False)
        if level != 3:
            continue
        kind = (sysfs.text(*here, "type", required=False) or "").strip()
        if kind == "Unified":
            shared = sysfs.cpulist(*here, "shared_cpu_list", required=False)
            if shared is not None:
                return shared & online
    missing.append(int(base[-1][3:]))
    return frozenset()


# ------------------------------------------------------------------- nodes


def _meminfo(sysfs: SysfsReader, node: int) -> Tuple[Optional[int], Optional[int]]:
    """(MemTotal, MemFree) in bytes from ``nodeN/meminfo``; None when absent."""
    parts = ("devices", "system", "node", f"node{node}", "meminfo")
    text = sysfs.text(*parts, required=False)
    if text is None:
        return None, None
    values: Dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _MEMINFO.match(line.strip())
        if match is None or int(match.group(1)) != node:
            raise TopologyError(f"malformed line {line.strip()!r} in {sysfs.path(*parts)}")
        values[match.group(2)] = int(match.group(3)) * 1024
    if "MemTotal" not in values:
        raise TopologyError(f"no MemTotal in {sysfs.path(*parts)}")
    return values["MemTotal"], values.get("MemFree")


def _proc_meminfo() -> Tuple[Optional[int], Optional[int]]:
    """(MemTotal, MemFree) of the whole machine, for a kernel without NUMA."""
    values: Dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                fields = rest.split()
                if fields and fields[0].isdigit():
                    values[key] = int(fields[0]) * 1024
    except OSError:
        return None, None
    return values.get("MemTotal"), values.get("MemFree")


def node_memory_sizes(root: str, nodes: Iterable[int]) -> Dict[int, Optional[int]]:
    """Each node's ``MemTotal`` in bytes (None when unknown): what an advice record compares.

    A kernel without NUMA (no ``devices/system/node``) has one node 0 of the
    whole machine's memory (``/proc/meminfo``, on the live root only).
    """
    sysfs = SysfsReader(root)
    if sysfs.listdir("devices", "system", "node") is None:
        total = _proc_meminfo()[0] if _is_live_root(root) else None
        return {node: total if node == 0 else None for node in nodes}
    return {node: _meminfo(sysfs, node)[0] for node in nodes}


#: Lines of ``/proc/cpuinfo`` read at most for the CPU model (it is on the first CPU's).
_CPUINFO_LINES = 64


def cpu_model(path: str = "/proc/cpuinfo") -> Optional[str]:
    """The CPU model: ``model name`` (x86), else ``CPU implementer``/``CPU part`` (Arm).

    Only the first CPU's entry is read.  ``None`` when the file cannot be
    read or names no model.
    """
    found: Dict[str, str] = {}
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for number, line in enumerate(handle):
                key, sep, value = line.partition(":")
                if number >= _CPUINFO_LINES or (not line.strip() and found):
                    break
                if sep:
                    found.setdefault(key.strip().lower(), value.strip()[:200])
    except OSError:
        return None
    if found.get("model name"):
        return found["model name"]
    if "cpu implementer" in found and "cpu part" in found:
        return f"CPU implementer {found['cpu implementer']} part {found['cpu part']}"
    return None


def kernel_release() -> str:
    """``uname -r``: the running kernel's release."""
    return os.uname().release


def _read_nodes(
    sysfs: SysfsReader, online_cpus: frozenset[int], notes: List[str], sizes: bool = True
) -> Dict[int, NumaNode]:
    """The online nodes; ``sizes=False`` skips ``meminfo`` unless ``has_memory`` is missing."""
    base = ("devices", "system", "node")
    names = sysfs.listdir(*base)
    if names is None:
        return {0: _single_node(sysfs, online_cpus, notes)}
    online = sysfs.cpulist(*base, "online", required=False)
    if online is None:
        online = frozenset(_numbered(names, "node"))
        notes.append("devices/system/node/online missing: nodes taken from node* directories")
    has_memory = sysfs.cpulist(*base, "has_memory", required=False)
    order = sorted(online)
    nodes: Dict[int, NumaNode] = {}
    for node in order:
        here = (*base, f"node{node}")
        cpulist = sysfs.cpulist(*here, "cpulist")
        assert cpulist is not None
        total = free = None
        if sizes or has_memory is None:
            total, free = _meminfo(sysfs, node)
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
        )
    return nodes


def _single_node(sysfs: SysfsReader, online_cpus: frozenset[int], notes: List[str]) -> NumaNode:
    """The one node 0 of a kernel without NUMA: every online CPU, the machine's memory."""
    notes.append(
        f"{sysfs.path('devices', 'system', 'node')} missing (kernel without NUMA): "
        "one node 0 with all online CPUs"
    )
    total = free = None
    if _is_live_root(sysfs.root):
        total, free = _proc_meminfo()
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


# -------------------------------------------------------------------- PCI


@dataclass(frozen=True)
class PciFunction:
    """One PCI function taken for an accelerator."""

    bus_id: str
    vendor: int
    device: int
    class_code: int
    numa_node: Optional[int]
    local_cpus: frozenset[int]


def _index(value: object) -> Optional[int]:
    """``value`` as a non-negative int (numpy ints too), None if it is not one."""
    if isinstance(value, bool):
        return None
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None
    return number if number >= 0 else None


def _class_matchers(classes: Iterable[Union[str, int]]) -> List[Tuple[int, int]]:
    """(value, shift) pairs: ``0x03`` matches the base class, ``0x0302`` base+sub."""
    out = []
    if isinstance(classes, (str, bytes)) or not isinstance(classes, Iterable):
        raise TopologyError(f"PCI classes must be a list of classes, not {classes!r}")
    for item in classes:
        if not isinstance(item, str):
            number = _index(item)
            if number is None or number > 0xFFFFFF:
                raise TopologyError(
                    f"PCI class {item!r} must be a 2, 4 or 6 hex digit string or an int "
                    "up to 0xffffff"
                )
            digits = 2 if number <= 0xFF else 4 if number <= 0xFFFF else 6
            value = number
        else:
            text = item.strip().lower()
            text = text[2:] if text.startswith("0x") else text
            if len(text) not in (2, 4, 6) or not all(c in "0123456789abcdef" for c in text):
                raise TopologyError(
                    f"PCI class {item!r} must be 2, 4 or 6 hex digits (0x03, 0x0302, 0x030200)"
                )
            digits, value = len(text), int(text, 16)
        out.append((value, 4 * (6 - digits)))
    return out


def _vendor_names(vendors: Union[Mapping[int, str], Iterable[int]]) -> Dict[int, str]:
    if isinstance(vendors, (str, bytes)) or not isinstance(vendors, Iterable):
        raise TopologyError(f"PCI vendors must be ids or a mapping of ids, not {vendors!r}")
    pairs = vendors.items() if isinstance(vendors, Mapping) else ((v, None) for v in vendors)
    names = dict(DEFAULT_GPU_VENDORS)
    out: Dict[int, str] = {}
    for key, name in pairs:
        number = _index(key)
        if number is None or number > 0xFFFF:
            raise TopologyError(f"PCI vendor id {key!r} is not an int from 0 to 0xffff")
        out[number] = str(name) if name is not None else names.get(number, f"0x{number:04x}")
    return out


def _id_argument(value: object, what: str) -> frozenset[int]:
    """An ``allowed_*`` argument: a list string (``"0-7"``) or non-negative ints."""
    if isinstance(value, str):
        try:
            return parse_cpulist(value)
        except ListParseError as exc:
            raise ConfigError(f"{what}: {exc}") from exc
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        raise ConfigError(f"{what} must be a list string or an iterable of ids, not {value!r}")
    out = set()
    for item in value:
        number = _index(item)
        if number is None:
            raise ConfigError(f"{what}: {item!r} is not a non-negative id")
        out.add(number)
    return frozenset(out)


#: Every PCI function's bus, devfn and vendor in one file (the live machine only).
PROC_PCI_DEVICES = "/proc/bus/pci/devices"


def _slot(name: str) -> Optional[Tuple[int, int]]:
    """(bus, devfn) of a ``bus/pci/devices`` entry name; None when it is not a PCI address."""
    match = _BDF.match(name)
    if match is None:
        return None
    bus, device, function = (int(match.group(i), 16) for i in (2, 3, 4))
    return bus, (device << 3) | function


#: Fields of a ``/proc/bus/pci/devices`` line before the driver's name (when bound):
#: slot, ids, irq, seven base addresses, seven sizes.
_PROC_PCI_DRIVER_FIELD = 17


def vendor_slots(
    text: str,
    vendors: Mapping[int, str],
    drivers: Optional[Mapping[int, Iterable[str]]] = None,
) -> Optional[frozenset[Tuple[int, int]]]:
    """(bus, devfn) of each function whose vendor is in ``vendors``, from ``/proc/bus/pci/devices``.

    Each line starts with the function's ``bus << 8 | devfn`` and
    ``vendor << 16 | device`` in hex, and ends with the name of the driver
    bound to it, if any.  A vendor in ``drivers`` counts only for functions
    bound to one of its drivers (:data:`DEFAULT_VENDOR_DRIVERS`).  The file
    has no PCI domain, so a slot stands for that bus and function in every
    domain: a filter that can only let too much through.  None when a line
    does not parse (the caller then reads every function's ``vendor``).
    """
    wanted = {v: frozenset(d) for v, d in (drivers or {}).items()}
    out = set()
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        try:
            slot, ids = int(fields[0], 16), int(fields[1], 16)
        except (IndexError, ValueError):
            return None
        vendor = ids >> 16
        if vendor not in vendors:
            continue
        driver = fields[_PROC_PCI_DRIVER_FIELD] if len(fields) > _PROC_PCI_DRIVER_FIELD else None
        if vendor in wanted and driver not in wanted[vendor]:
            continue
        out.add((slot >> 8 & 0xFF, slot & 0xFF))
    return frozenset(out)


def _proc_vendor_slots(
    vendors: Mapping[int, str], drivers: Optional[Mapping[int, Iterable[str]]] = None
) -> Optional[frozenset[Tuple[int, int]]]:
    """:func:`vendor_slots` of the live machine; None when the file cannot be read."""
    try:
        text = read_ascii(PROC_PCI_DEVICES, "PCI device list")
    except (OSError, TopologyError):
        return None
    return vendor_slots(text, vendors, drivers)


def scan_pci(
    sysfs: SysfsReader,
    online_cpus: frozenset[int],
    nodes: Mapping[int, NumaNode],
    vendors: Mapping[int, str],
    classes: Iterable[Union[str, int]],
    *,
    vendor_classes: Optional[Mapping[int, Iterable[Union[str, int]]]] = None,
) -> List[PciFunction]:
    """Accelerator functions under ``bus/pci/devices``, in PCI address order.

    ``vendor_classes``: the classes that count for some vendors instead of
    ``classes`` (:data:`DEFAULT_VENDOR_CLASSES`, with the default classes).
    On the live machine ``/proc/bus/pci/devices`` names, in one read, the
    functions of the GPU vendors (of those vendors, the functions bound to
    their GPU drivers: :data:`DEFAULT_VENDOR_DRIVERS`); only those have their
    files opened.  Without it (another root, a masked ``/proc``) every
    function's ``vendor`` is read.
    """
    special = dict(vendor_classes or {})
    matchers = _class_matchers(classes)
    by_vendor = {v: _class_matchers(c) for v, c in special.items()}
    drivers = {v: d for v, d in DEFAULT_VENDOR_DRIVERS.items() if v in special}
    names = sysfs.listdir("bus", "pci", "devices")
    live = names and _is_live_root(sysfs.root)
    slots = _proc_vendor_slots(vendors, drivers) if live else None
    found: List[PciFunction] = []
    for name in names or ():
        if slots is not None and _slot(name) not in slots:
            continue  # /proc/bus/pci/devices says its vendor is not a GPU vendor
        function = _pci_function(
            sysfs,
            name,
            online_cpus=online_cpus,
            nodes=nodes,
            vendors=vendors,
            matchers=matchers,
            by_vendor=by_vendor,
        )
        if function is not None:
            found.append(function)
    found.sort(key=lambda f: f.bus_id)
    return found


def _pci_function(
    sysfs: SysfsReader,
    name: str,
    *,
    online_cpus: frozenset[int],
    nodes: Mapping[int, NumaNode],
    vendors: Mapping[int, str],
    matchers: List[Tuple[int, int]],
    by_vendor: Optional[Mapping[int, List[Tuple[int, int]]]] = None,
) -> Optional[PciFunction]:
    """The function ``bus/pci/devices/<name>`` when it is an accelerator; None if not."""
    here = ("bus", "pci", "devices", name)
    vendor = sysfs.integer(*here, "vendor", base=16)
    if vendor not in vendors:
        return None
    class_code = sysfs.integer(*here, "class", base=16)
    assert vendor is not None and class_code is not None
    matchers = (by_vendor or {}).get(vendor, matchers)
    if not any((class_code >> shift) == value for value, shift in matchers):
        return None
    device = sysfs.integer(*here, "device", base=16)
    numa = sysfs.integer(*here, "numa_node", required=False)
    local = sysfs.cpulist(*here, "local_cpulist", required=False)
    if numa is not None and (numa < 0 or numa not in nodes):
        # -1: firmware gave no proximity; an id that is not an online
        # node is no better.
        numa = None
    return PciFunction(
        bus_id=normalize_bus_id(name),
        vendor=vendor,
        device=device or 0,
        class_code=class_code,
        numa_node=numa,
        local_cpus=(local if local is not None else frozenset()) & online_cpus,
    )


def _gpus_from_pci(
    functions: List[PciFunction],
    vendors: Mapping[int, str],
    nodes: Mapping[int, NumaNode],
    notes: List[str],
) -> List[Gpu]:
    """One :class:`Gpu` per function, recording what sysfs says and nothing more.

    ``numa_node`` is the function's ``numa_node`` as the kernel gives it,
    even a CPU-less node (Grace HBM, CXL): which CPUs such a GPU's rank gets
    is the planner's decision, not discovery's.  Such a node with memory is
    also the GPU's ``memory_node``.  ``local_cpus`` is ``local_cpulist``, or
    the CPUs of its node when the kernel lists none.
    """
    gpus: List[Gpu] = []
    counted = {"intel": 0, "": 0}  # Intel GPUs are numbered among themselves (Level Zero)
    for function in functions:
        family = "intel" if vendors[function.vendor] == "intel" else ""
        index = counted[family]
        counted[family] += 1
        numa = function.numa_node
        memory_node: Optional[int] = None
        local = function.local_cpus
        if numa is None:
            notes.append(f"GPU {function.bus_id}: the kernel reports no NUMA node (numa_node -1)")
        elif not nodes[numa].cpus:
            memory_node = numa if nodes[numa].has_memory else None
            kept = f"; node {numa} is its memory node" if memory_node is not None else ""
            notes.append(
                f"GPU {function.bus_id}: sysfs numa_node {numa} has no CPUs{kept}; "
                "the planner picks its CPU node"
            )
        elif not local:
            local = nodes[numa].cpus
        gpus.append(
            Gpu(
                index=len(gpus),
                pci_bus_id=function.bus_id,
                vendor=vendors[function.vendor],
                numa_node=numa,
                local_cpus=local,
                memory_node=memory_node,
                model=f"PCI {function.vendor:04x}:{function.device:04x}",
                physical_index=index,
                source="sysfs",
            )
        )
    return gpus


# ---------------------------------------------------------- allowed sets


def _is_live_root(root: str) -> bool:
    if root == "/sys":  # the default: no realpath (two lstat walks) on every bind
        return True
    return os.path.realpath(root) == os.path.realpath("/sys")  # realpath does not raise


def _live_mems_allowed(notes: List[str]) -> Optional[frozenset[int]]:
    """The cpuset's memory nodes, read fresh: get_mempolicy, else ``Mems_allowed_list``.

    Both reads are :mod:`._proc`'s; each failure is a typed error, kept as a note.
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
    live = _is_live_root(root)
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
    root: str = "/sys",
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

    vendors = _vendor_names(DEFAULT_GPU_VENDORS if gpu_vendors is None else gpu_vendors)
    classes = DEFAULT_PCI_CLASSES if pci_classes is None else pci_classes
    vendor_classes = (
        {v: c for v, c in DEFAULT_VENDOR_CLASSES.items() if v in vendors}
        if pci_classes is None
        else {}
    )
    functions = scan_pci(sysfs, online, nodes, vendors, classes, vendor_classes=vendor_classes)
    gpus = _gpus_from_pci(functions, vendors, nodes, notes)
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
    root: str = "/sys",
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
