"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

NVML is what knows the driver's GPU order, the UUIDs CUDA_VISIBLE_DEVICES
may name, and on Grace machines the GPU's own memory node.  It is imported
and initialised only when :func:`query` runs, and shut down before it
returns, so ``import pynumabind`` never loads it and a worker does not keep
a handle open.

When NVML is missing (ImportError) or cannot start (library not found,
driver not loaded, ...) :func:`query` raises :class:`NvmlUnavailable` with
the reason; discovery then falls back to sysfs PCI scanning and records the
reason in ``Topology.notes``.

The nvidia-ml-py floor (``pyproject.toml``: ``nvidia-ml-py>=12.550.52``,
:data:`NVML_PY_FLOOR`) is the first release with an
``nvmlDeviceGetNumaNodeId`` wrapper, the only call that names a Grace/GB200
GPU's own (CPU-less) memory node; 12.535.x lacks it.  The floor was raised
rather than the C symbol called through pynvml's loaded library because
nvidia-ml-py is pure Python whose every wrapper looks its C symbol up only
when called (a newer binding runs on an older driver: a symbol the driver
lacks is FunctionNotFound for that call alone), so the higher floor costs no
driver compatibility, while calling the symbol ourselves would mean reaching
into pynvml's private loader and re-declaring NVIDIA's ctypes prototypes.
A ``pynvml`` module that still lacks a wrapper (another distribution's
``pynvml.py``, a vendored copy) works: the call is skipped and one note
names the module, the missing wrapper and what it costs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

from .cpulist import parse_cpumask
from .errors import ListParseError, PynumabindError, TopologyError

__all__ = ["NVML_PY_FLOOR", "NvmlDevice", "NvmlReport", "NvmlUnavailable", "query"]

log = logging.getLogger(__name__)

#: The oldest nvidia-ml-py allowed (keep equal to pyproject.toml's floor).
NVML_PY_FLOOR = "12.550.52"

#: What is lost when the ``pynvml`` module in use lacks a wrapper.
_WITHOUT = {
    "nvmlDeviceGetNumaNodeId": "GPU memory nodes (Grace/GB200 HBM) are not asked of NVML",
    "nvmlDeviceGetCpuAffinityWithinScope": "CPU affinity is the socket-wide legacy mask",
    "nvmlDeviceGetMemoryAffinity": "NVML's memory affinity is not asked",
}


class NvmlUnavailable(PynumabindError):
    """NVML cannot be used here; ``reason`` says why (for notes)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class NvmlDevice:
    """What NVML says about one GPU (``index`` is NVML's)."""

    index: int
    pci_bus_id: str
    uuid: Optional[str]
    name: Optional[str]
    cpu_affinity: frozenset[int]
    memory_affinity: Optional[frozenset[int]]
    numa_node_id: Optional[int]
    notes: Tuple[str, ...] = ()


@dataclass(frozen=True)
class NvmlReport:
    devices: Tuple[NvmlDevice, ...]
    mig_parents: Dict[str, str] = field(default_factory=dict)
    notes: Tuple[str, ...] = ()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _words(array: Any) -> List[int]:
    return [int(word) for word in array]


def query(
    *,
    cpu_words: int = 16,
    node_words: int = 1,
    mig_uuids: Sequence[str] = (),
) -> NvmlReport:
    """Every GPU NVML enumerates, in NVML order.

    ``cpu_words``/``node_words`` size the 64-bit affinity arrays (at least
    ``ceil(max id + 1 / 64)``).  ``mig_uuids`` are ``MIG-<uuid>`` names to
    resolve to their parent GPU's UUID while NVML is open.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"pynvml (nvidia-ml-py) is not importable: {exc}") from None
    if pynvml is None:  # pragma: no cover - sys.modules entry blocked
        raise NvmlUnavailable("pynvml (nvidia-ml-py) is not importable")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"nvmlInit failed: {exc} ({type(exc).__name__})") from None
    except OSError as exc:  # pragma: no cover - ctypes loader oddities
        raise NvmlUnavailable(f"nvmlInit failed: {exc}") from None
    try:
        return _collect(pynvml, max(1, cpu_words), max(1, node_words), mig_uuids)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:  # pragma: no cover - nothing to do about it
            log.debug("nvmlShutdown failed: %s", exc)


def _collect(pynvml: Any, cpu_words: int, node_words: int, mig_uuids: Sequence[str]) -> NvmlReport:
    NVMLError = pynvml.NVMLError
    unsupported: Tuple[Type[BaseException], ...] = (
        pynvml.NVMLError_NotSupported,
        pynvml.NVMLError_FunctionNotFound,
    )
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except NVMLError as exc:
        raise NvmlUnavailable(f"nvmlDeviceGetCount failed: {exc}") from None
    devices: List[NvmlDevice] = []
    notes: List[str] = []
    missing: List[str] = []  # wrappers this pynvml module does not have
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            bus_id = _bus_id(pynvml.nvmlDeviceGetPciInfo(handle))
        except NVMLError as exc:
            notes.append(f"NVML GPU {index}: cannot get its handle or PCI id ({exc}); skipped")
            continue
        here: List[str] = []

        def optional(call: str, *args: Any) -> Any:
            function = getattr(pynvml, call, None)
            if function is None:  # a pynvml older than the floor: noted once below
                if call not in missing:
                    missing.append(call)
                return None
            try:
                return function(handle, *args)  # noqa: B023
            except unsupported:
                return None
            except NVMLError as exc:
                here.append(f"NVML GPU {index} ({bus_id}): {call} failed: {exc}")  # noqa: B023
                return None

        uuid = optional("nvmlDeviceGetUUID")
        name = optional("nvmlDeviceGetName")
        cpu_mask = optional(
            "nvmlDeviceGetCpuAffinityWithinScope", cpu_words, pynvml.NVML_AFFINITY_SCOPE_NODE
        )
        if cpu_mask is None:
            cpu_mask = optional("nvmlDeviceGetCpuAffinity", cpu_words)
        memory_mask = optional(
            "nvmlDeviceGetMemoryAffinity", node_words, pynvml.NVML_AFFINITY_SCOPE_NODE
        )
        numa = optional("nvmlDeviceGetNumaNodeId")
        try:
            cpus = parse_cpumask(_words(cpu_mask)) if cpu_mask is not None else frozenset()
            mems = parse_cpumask(_words(memory_mask)) if memory_mask is not None else None
        except ListParseError as exc:
            raise TopologyError(f"NVML GPU {index}: malformed affinity mask: {exc}") from exc
        devices.append(
            NvmlDevice(
                index=index,
                pci_bus_id=bus_id,
                uuid=_text(uuid) if uuid is not None else None,
                name=_text(name) if name is not None else None,
                cpu_affinity=cpus,
                memory_affinity=mems,
                numa_node_id=int(numa) if numa is not None and int(numa) >= 0 else None,
                notes=tuple(here),
            )
        )
    parents: Dict[str, str] = {}
    for mig in mig_uuids:
        try:
            mig_handle = pynvml.nvmlDeviceGetHandleByUUID(mig)
            parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_handle)
            parents[mig] = _text(pynvml.nvmlDeviceGetUUID(parent))
        except NVMLError as exc:
            notes.append(f"NVML does not know MIG device {mig!r}: {exc}")
    notes.extend(_missing_note(pynvml, call) for call in missing)
    return NvmlReport(devices=tuple(devices), mig_parents=parents, notes=tuple(notes))


def _missing_note(pynvml: Any, call: str) -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = f"nvidia-ml-py {version('nvidia-ml-py')}"
        except PackageNotFoundError:
            release = "not from nvidia-ml-py"
    except ImportError:  # pragma: no cover - importlib.metadata is stdlib from 3.8
        release = "release unknown"
    where = getattr(pynvml, "__file__", None) or "?"
    cost = _WITHOUT.get(call, "that answer is not asked")
    return (
        f"pynvml ({where}, {release}) has no {call} wrapper: {cost}; "
        f"install nvidia-ml-py>={NVML_PY_FLOOR}"
    )


def _bus_id(info: Any) -> str:
    from ._sysfs import normalize_bus_id

    raw = getattr(info, "busId", None) or getattr(info, "busIdLegacy", None)
    if raw is None:
        raise TopologyError("NVML PCI info has no busId")
    return normalize_bus_id(_text(raw))
