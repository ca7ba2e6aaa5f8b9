"""Pinned host<->GPU copy bandwidth for ``advise``, per GPU x CPU node (shell).

CUDA is never a dependency.  A backend is found in this order:

1. **torch**, when it is importable and ``torch.cuda.is_available()``;
2. **the CUDA runtime** (``libcudart.so*``, found by :mod:`pynumabind._os.cudart`), when it
   loads and reports at least one device.

Otherwise :func:`find_backend` returns ``None`` and the reason, which the
report prints as is ("no GPU section" is never silent).  Only a process
that can already use CUDA is measured: nothing here installs or initialises
a driver by other means.

For every GPU and every CPU node with memory, one fresh thread bound to
that node's allowed CPUs allocates a pinned host buffer inside
:func:`pynumabind.memory_on` for the node (the CUDA pinned allocator
faults the pages in the calling thread, so they land there), checks with
``move_pages`` where they landed, and times synchronous H2D and D2H copies
of the whole buffer (the first of each is a discarded warm-up).  Pinned
buffers stay allocated until the GPU is done, so torch's caching host
allocator cannot hand one node's block to the next node's measurement.

An interrupt (Ctrl-C) reaches the caller at once; the copying thread is
asked to stop between copies and waited for (up to
:data:`~pynumabind.advisor._harness.STOP_WAIT`) before the buffers are freed,
and if it has not ended by then they are left allocated: a buffer is never
freed under a running copy.  The bound thread, the allocation on a node, the
placement check and the stop are :mod:`pynumabind.advisor._harness`'s.
"""

from __future__ import annotations

import ctypes
import functools
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .._os.cudart import CUDART_NAMES, load_cudart
from ..errors import PynumabindError
from ..model import Topology
from ..records.values import CopyCell, GpuCopies, Spread
from ._harness import Stop, Stopped, on_node, placement, run_bound

__all__ = [
    "Backend",
    "CudaRuntime",
    "CudartBackend",
    "TorchBackend",
    "cuda_runtime",
    "find_backend",
    "measure_gpus",
]

H2D, D2H = 1, 2  # cudaMemcpyKind


class Backend:
    """The few CUDA operations a copy measurement needs."""

    name = "?"

    def devices(self) -> List[Tuple[int, Optional[str], Optional[str]]]:
        """(ordinal, name, PCI bus id) of each visible device."""
        raise NotImplementedError

    def select(self, ordinal: int) -> None:
        raise NotImplementedError

    def pinned(self, size: int) -> Tuple[Any, int]:
        """A pinned host buffer: (handle that keeps it alive, address)."""
        raise NotImplementedError

    def device_buffer(self, ordinal: int, size: int) -> Any:
        raise NotImplementedError

    def copy(self, direction: int, host: Any, device: Any, size: int) -> None:
        """One synchronous copy of ``size`` bytes; returns when it is complete."""
        raise NotImplementedError

    def free(self, handles: Sequence[Any]) -> None:
        """Release buffers this backend made (host and device)."""


class TorchBackend(Backend):
    name = "torch"

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def devices(self) -> List[Tuple[int, Optional[str], Optional[str]]]:
        found: List[Tuple[int, Optional[str], Optional[str]]] = []
        for ordinal in range(self.torch.cuda.device_count()):
            props = self.torch.cuda.get_device_properties(ordinal)
            bus = None
            if hasattr(props, "pci_bus_id"):
                domain = getattr(props, "pci_domain_id", 0)
                bus = f"{domain:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
            found.append((ordinal, str(props.name), bus))
        return found

    def select(self, ordinal: int) -> None:
        self.torch.cuda.set_device(ordinal)

    def pinned(self, size: int) -> Tuple[Any, int]:
        tensor = self.torch.empty(size, dtype=self.torch.uint8, pin_memory=True)
        return tensor, int(tensor.data_ptr())

    def device_buffer(self, ordinal: int, size: int) -> Any:
        return self.torch.empty(size, dtype=self.torch.uint8, device=f"cuda:{ordinal}")

    def copy(self, direction: int, host: Any, device: Any, size: int) -> None:
        if direction == H2D:
            device.copy_(host)
        else:
            host.copy_(device)
        self.torch.cuda.synchronize()

    def free(self, handles: Sequence[Any]) -> None:
        del handles
        empty = getattr(getattr(self.torch, "_C", None), "_host_emptyCache", None)
        if empty is not None:
            empty()
        self.torch.cuda.empty_cache()


class CudartBackend(Backend):
    """The CUDA runtime through ctypes (no torch)."""

    name = "cudart"

    def __init__(self, lib: Any, path: str) -> None:
        self.lib = lib
        self.path = path
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        declarations: Sequence[Tuple[str, List[Any]]] = (
            ("cudaGetDeviceCount", [ctypes.POINTER(ctypes.c_int)]),
            ("cudaSetDevice", [ctypes.c_int]),
            ("cudaDeviceGetPCIBusId", [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]),
            ("cudaHostAlloc", [ctypes.POINTER(vp), sz, ctypes.c_uint]),
            ("cudaFreeHost", [vp]),
            ("cudaMalloc", [ctypes.POINTER(vp), sz]),
            ("cudaFree", [vp]),
            ("cudaMemcpy", [vp, vp, sz, ctypes.c_int]),
            ("cudaDeviceSynchronize", []),
            ("cudaGetErrorString", [ctypes.c_int]),
        )
        for symbol, argtypes in declarations:
            function = getattr(lib, symbol)
            function.argtypes = argtypes
            function.restype = ctypes.c_char_p if symbol == "cudaGetErrorString" else ctypes.c_int

    def check(self, status: int, call: str) -> None:
        if status != 0:
            text = self.lib.cudaGetErrorString(status) or b"?"
            raise PynumabindError(f"{call} failed: CUDA error {status} ({text.decode()})")

    def count(self) -> int:
        count = ctypes.c_int(0)
        self.check(self.lib.cudaGetDeviceCount(ctypes.byref(count)), "cudaGetDeviceCount")
        return count.value

    def devices(self) -> List[Tuple[int, Optional[str], Optional[str]]]:
        found: List[Tuple[int, Optional[str], Optional[str]]] = []
        for ordinal in range(self.count()):
            text = ctypes.create_string_buffer(32)
            status = self.lib.cudaDeviceGetPCIBusId(text, 32, ordinal)
            found.append((ordinal, None, text.value.decode() if status == 0 else None))
        return found

    def select(self, ordinal: int) -> None:
        self.check(self.lib.cudaSetDevice(ordinal), f"cudaSetDevice({ordinal})")

    def pinned(self, size: int) -> Tuple[Any, int]:
        pointer = ctypes.c_void_p()
        self.check(self.lib.cudaHostAlloc(ctypes.byref(pointer), size, 0), "cudaHostAlloc")
        return ("host", pointer.value), int(pointer.value or 0)

    def device_buffer(self, ordinal: int, size: int) -> Any:
        pointer = ctypes.c_void_p()
        self.check(self.lib.cudaMalloc(ctypes.byref(pointer), size), "cudaMalloc")
        return ("device", pointer.value)

    def copy(self, direction: int, host: Any, device: Any, size: int) -> None:
        dst, src = (device[1], host[1]) if direction == H2D else (host[1], device[1])
        self.check(self.lib.cudaMemcpy(dst, src, size, direction), "cudaMemcpy")
        self.check(self.lib.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def free(self, handles: Sequence[Any]) -> None:
        for kind, pointer in handles:
            (self.lib.cudaFreeHost if kind == "host" else self.lib.cudaFree)(pointer)


def _torch_backend() -> Tuple[Optional[Backend], str]:
    try:
        import torch  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None, "torch is not installed"
    except Exception as exc:  # a broken install must not end advise
        return None, f"torch failed to import ({type(exc).__name__}: {exc})"
    try:
        usable = bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception as exc:
        return None, f"torch cannot use CUDA ({type(exc).__name__}: {exc})"
    if not usable:
        return None, f"torch {torch.__version__} reports no usable CUDA device"
    return TorchBackend(torch), ""


def _cudart_backend(names: Sequence[str]) -> Tuple[Optional[Backend], str]:
    lib, name = load_cudart(names)
    if lib is None:
        return None, name  # why none loads
    try:
        backend = CudartBackend(lib, name)
        count = backend.count()
    except (AttributeError, PynumabindError) as exc:
        return None, f"{name} loads but cannot be used ({exc})"
    if count < 1:
        return None, f"{name} reports no CUDA device"
    return backend, ""


def find_backend(
    cudart_names: Sequence[str] = CUDART_NAMES, use_torch: bool = True
) -> Tuple[Optional[Backend], str]:
    """The first usable CUDA backend, or (None, why none is usable)."""
    reasons: List[str] = []
    if use_torch:
        backend, why = _torch_backend()
        if backend is not None:
            return backend, ""
        reasons.append(why)
    backend, why = _cudart_backend(cudart_names)
    if backend is not None:
        return backend, ""
    reasons.append(why)
    return None, "CUDA is not usable from this process: " + "; ".join(reasons)


@dataclass(frozen=True)
class CudaRuntime:
    """The CUDA runtime as ctypes finds it (never through torch): what ``pynumabind report`` shows.

    ``library`` is the name that loaded (``None``: none did); ``runtime`` and
    ``driver`` are ``cudaRuntimeGetVersion``'s and ``cudaDriverGetVersion``'s
    answers (``12.4``); ``devices`` each CUDA ordinal's PCI bus id, in CUDA's
    order (after ``CUDA_VISIBLE_DEVICES``); ``reason`` why something is missing.
    """

    library: Optional[str] = None
    runtime: Optional[str] = None
    driver: Optional[str] = None
    devices: Tuple[Tuple[int, Optional[str]], ...] = ()
    reason: Optional[str] = None


def _version_of(lib: Any, symbol: str) -> Optional[str]:
    function = getattr(lib, symbol, None)
    if function is None:
        return None
    function.argtypes = [ctypes.POINTER(ctypes.c_int)]
    function.restype = ctypes.c_int
    value = ctypes.c_int(0)
    if function(ctypes.byref(value)) != 0 or value.value <= 0:
        return None
    return f"{value.value // 1000}.{value.value % 1000 // 10}"


def cuda_runtime(names: Sequence[str] = CUDART_NAMES) -> CudaRuntime:
    """Load the CUDA runtime (the first of ``names``), read its versions and devices.

    Asking for the devices initialises CUDA in this process.  Never raises
    for CUDA's sake: a library that does not load or cannot count devices is
    the ``reason``.
    """
    lib, name = load_cudart(names)
    if lib is None:
        return CudaRuntime(reason=name)  # why none loads
    runtime = _version_of(lib, "cudaRuntimeGetVersion")
    driver = _version_of(lib, "cudaDriverGetVersion")
    try:
        backend = CudartBackend(lib, name)
        devices = tuple((o, bus) for o, _name, bus in backend.devices())
    except (AttributeError, PynumabindError) as exc:
        return CudaRuntime(name, runtime, driver, reason=f"{name} cannot list devices ({exc})")
    return CudaRuntime(name, runtime, driver, devices)


# ------------------------------------------------------------- measuring


def _numa_node(topology: Topology, bus_id: Optional[str]) -> Optional[int]:
    """The node pynumabind's discovery gives the GPU at ``bus_id``."""
    if bus_id is None:
        return None
    from .._os.pci import normalize_bus_id

    try:
        wanted = normalize_bus_id(bus_id)
    except PynumabindError:
        return None
    for gpu in topology.gpus:
        if gpu.pci_bus_id == wanted:
            return gpu.numa_node
    return None


def _copy_cell(
    backend: Backend,
    ordinal: int,
    cpu_node: int,
    topology: Topology,
    *,
    size: int,
    repeats: int,
    keep: List[Any],
    stop: Stop,
) -> CopyCell:
    """Runs in a thread already bound to ``cpu_node``'s CPUs; ends early once ``stop`` is set."""
    backend.select(ordinal)
    with on_node(cpu_node, topology):
        host, address = backend.pinned(size)
    keep.append(host)
    where = placement(address, size, cpu_node)
    device = backend.device_buffer(ordinal, size)
    keep.append(device)
    found = {}
    for direction in (H2D, D2H):
        backend.copy(direction, host, device, size)  # warm-up
        samples = []
        for _ in range(repeats):
            if stop.is_set():
                raise Stopped()
            began = time.perf_counter()
            backend.copy(direction, host, device, size)
            samples.append(size / (time.perf_counter() - began) / 1e9)
        found[direction] = Spread.of(samples)
    return CopyCell(cpu_node, found[H2D], found[D2H], where)


def measure_gpus(
    backend: Backend,
    topology: Topology,
    cpu_nodes: Sequence[int],
    *,
    size: int,
    repeats: int,
    progress: Callable[[str], None],
) -> List[GpuCopies]:
    """Every visible GPU x every CPU node in ``cpu_nodes`` (each must have memory)."""
    results: List[GpuCopies] = []
    for ordinal, name, bus in backend.devices():
        cells: List[CopyCell] = []
        keep: List[Any] = []
        stop = Stop()
        try:
            for cpu_node in cpu_nodes:
                progress(f"gpu {ordinal}: pinned copies from CPU node {cpu_node}")
                cpus = topology.nodes[cpu_node].cpus & topology.allowed_cpus
                work = functools.partial(
                    _copy_cell,
                    backend,
                    ordinal,
                    cpu_node,
                    topology,
                    size=size,
                    repeats=repeats,
                    keep=keep,
                    stop=stop,
                )
                try:
                    cells.append(run_bound(cpus, work, stop=stop))
                except (PynumabindError, OSError, RuntimeError, MemoryError) as exc:
                    cells.append(CopyCell(cpu_node, error=f"{type(exc).__name__}: {exc}"))
        finally:
            if not stop.stuck:  # never free a buffer under a running copy
                backend.free(keep)
        node = _numa_node(topology, bus)
        results.append(GpuCopies(ordinal, name, bus, node, tuple(cells), size))
    return results
