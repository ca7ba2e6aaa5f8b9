"""PCI functions and the GPUs among them, from a sysfs tree (shell).

``bus/pci/devices/<address>/`` holds each function's ``vendor``, ``class``,
``device``, ``numa_node`` and ``local_cpulist``; a function counts as an
accelerator when its vendor is a GPU vendor and its class one of the
accelerator classes (:data:`DEFAULT_GPU_VENDORS`, :data:`DEFAULT_PCI_CLASSES`,
:data:`DEFAULT_VENDOR_CLASSES`).  On the live machine
``/proc/bus/pci/devices`` names every function's vendor and driver in one
read, so only the GPU vendors' functions have their files opened.  The
result is one :class:`~pynumabind.model.Gpu` per function, recording what
sysfs says and nothing more; NVML and KFD refine that list in
:mod:`pynumabind.discovery`.  Files are read through
:class:`~pynumabind._os.textfile.SysfsReader`, which names the file in
every error.
"""

from __future__ import annotations

import collections.abc as _abc
import operator
import os

from .._record import record
from ..errors import TopologyError
from ..model import Gpu, NumaNode
from . import PROC_ROOT
from .textfile import is_live_root, read_ascii

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union

    from .textfile import SysfsReader

__all__ = [
    "DEFAULT_GPU_VENDORS",
    "DEFAULT_PCI_CLASSES",
    "DEFAULT_VENDOR_CLASSES",
    "DEFAULT_VENDOR_DRIVERS",
    "PROC_PCI_DEVICES",
    "PciFunction",
    "as_id",
    "gpus_from_pci",
    "lists_functions",
    "normalize_bus_id",
    "scan_pci",
    "vendor_names",
    "vendor_slots",
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

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _hex(text: str, most: int) -> bool:
    return 0 < len(text) <= most and _HEX_DIGITS.issuperset(text)


def _bdf(text: str) -> Optional[Tuple[str, str, str, str]]:
    """A PCI address ``[domain:]bus:device.function`` split into its hex fields, else None.

    The domain has 1-8 hex digits (``""`` when absent), the bus and the
    device 1-2, the function one digit 0-7.  Read by hand, not by a regular
    expression: a bind scans every PCI function's name (:func:`_slot`), and
    compiling one would be most of what that scan costs.
    """
    head, dot, function = text.rpartition(".")
    parts = head.split(":")
    if not dot or len(function) != 1 or function not in "01234567" or not 2 <= len(parts) <= 3:
        return None
    domain = parts[0] if len(parts) == 3 else ""
    bus, device = parts[-2], parts[-1]
    if (len(parts) == 3 and not _hex(domain, 8)) or not _hex(bus, 2) or not _hex(device, 2):
        return None
    return domain, bus, device, function


def normalize_bus_id(bus_id: str) -> str:
    """Canonical PCI address ``0000:07:00.0`` (lower case, 4-digit domain).

    NVML prints ``00000000:07:00.0`` in upper case, sysfs ``0000:07:00.0``;
    both name the same function, and GPUs are matched across sources by it.
    """
    fields = _bdf(bus_id.strip())
    if fields is None:
        raise TopologyError(f"malformed PCI bus id {bus_id!r}")
    domain = int(fields[0] or "0", 16)
    if domain > 0xFFFF:
        raise TopologyError(f"PCI domain of {bus_id!r} exceeds 16 bits")
    bus, device, function = (int(field, 16) for field in fields[1:])
    if device > 0x1F:
        raise TopologyError(f"PCI device number of {bus_id!r} exceeds 0x1f")
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"


@record(frozen=True)
class PciFunction:
    """One PCI function taken for an accelerator."""

    bus_id: str
    vendor: int
    device: int
    class_code: int
    numa_node: Optional[int]
    local_cpus: frozenset[int]

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        bus_id: str,
        vendor: int,
        device: int,
        class_code: int,
        numa_node: Optional[int],
        local_cpus: frozenset[int],
    ) -> None:
        self.__dict__.update(
            bus_id=bus_id,
            vendor=vendor,
            device=device,
            class_code=class_code,
            numa_node=numa_node,
            local_cpus=local_cpus,
        )


def as_id(value: object) -> Optional[int]:
    """``value`` as a non-negative int (numpy ints too), None if it is not one.

    PCI ids and classes given by a caller, and the ``allowed_*`` ids of
    :func:`pynumabind._os.sysfs.with_allowed`.
    """
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
    if isinstance(classes, (str, bytes)) or not isinstance(classes, _abc.Iterable):
        raise TopologyError(f"PCI classes must be a list of classes, not {classes!r}")
    for item in classes:
        if not isinstance(item, str):
            number = as_id(item)
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


def vendor_names(vendors: Union[Mapping[int, str], Iterable[int]]) -> Dict[int, str]:
    """A ``gpu_vendors`` argument as PCI vendor id -> name.

    Bare ids take the name :data:`DEFAULT_GPU_VENDORS` gives them, or their
    hex id; anything but ids up to 0xffff is a :class:`TopologyError`.
    """
    if isinstance(vendors, (str, bytes)) or not isinstance(vendors, _abc.Iterable):
        raise TopologyError(f"PCI vendors must be ids or a mapping of ids, not {vendors!r}")
    pairs = vendors.items() if isinstance(vendors, _abc.Mapping) else ((v, None) for v in vendors)
    names = dict(DEFAULT_GPU_VENDORS)
    out: Dict[int, str] = {}
    for key, name in pairs:
        number = as_id(key)
        if number is None or number > 0xFFFF:
            raise TopologyError(f"PCI vendor id {key!r} is not an int from 0 to 0xffff")
        out[number] = str(name) if name is not None else names.get(number, f"0x{number:04x}")
    return out


#: Every PCI function's bus, devfn and vendor in one file (the live machine only).
PROC_PCI_DEVICES = f"{PROC_ROOT}/bus/pci/devices"


def _slot(name: str) -> Optional[Tuple[int, int]]:
    """(bus, devfn) of a ``bus/pci/devices`` entry name; None when it is not a PCI address."""
    fields = _bdf(name)
    if fields is None:
        return None
    bus, device, function = (int(field, 16) for field in fields[1:])
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
    live = names and is_live_root(sysfs.root)
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


def lists_functions(root: str) -> bool:
    """Whether the sysfs tree under ``root`` lists PCI functions at all (``bus/pci/devices``).

    Without the directory (a container that masks it, a copied tree without
    it), a GPU list built from PCI is empty for want of files, not of GPUs.
    """
    return os.path.isdir(os.path.join(root, "bus", "pci", "devices"))


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


def gpus_from_pci(
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
