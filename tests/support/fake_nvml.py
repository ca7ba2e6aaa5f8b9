"""A fake ``pynvml`` at the function boundary, fed from a machine description.

``install_fake_nvml(monkeypatch, desc)`` puts a module object named
``pynvml`` into ``sys.modules``.  It implements only the functions
``pynumabind._os.nvml`` calls, with the real package's error classes (taken
from the installed nvidia-ml-py, so ``except pynvml.NVMLError_NotSupported``
means exactly what it means against a driver) and its return conventions:
strings as ``str``, affinity masks as sequences of 64-bit words (least
significant first), ``nvmlDeviceGetPciInfo(h).busId`` in NVML's
``00000000:18:00.0`` upper-case form.

The fake cannot offer more than the installed nvidia-ml-py does: a function
is on the fake module only when the real ``pynvml`` defines it too, and its
parameters must have the real wrapper's names, in order (checked when the
fake is built; a mismatch is a ``TypeError``).  Run against the oldest
nvidia-ml-py that ``pyproject.toml`` allows (tox env ``nvml-oldest``), the
suite therefore exercises exactly what that version offers, and a floor
that lacks a wrapper ``_nvml`` relies on fails the suite instead of passing
it.  Constants (``NVML_AFFINITY_SCOPE_*``) and error classes are copied
from the real module the same way: only those it has.

Knobs (keyword arguments):

* ``init_error``: NVML error code raised by ``nvmlInit`` (e.g.
  ``NVML_ERROR_LIBRARY_NOT_FOUND``, ``NVML_ERROR_DRIVER_NOT_LOADED``);
* ``order``: NVML enumeration order as a list of description GPU positions
  (default: the description's order);
* ``no_scope_api``: ``nvmlDeviceGetCpuAffinityWithinScope`` raises
  FunctionNotFound (an old driver), forcing the legacy call;
* ``driver_lacks``: names of functions whose C symbol the driver lacks:
  they raise FunctionNotFound, as the real wrappers do (the wrapper is
  there, the library is older);
* ``mig``: ``{mig_uuid: parent_gpu_uuid}`` MIG devices known to the driver;
* ``bytes_strings``: return ``bytes`` for names, UUIDs and bus ids, as
  nvidia-ml-py releases before 11.515 did;
* ``versions``: what the ``nvmlSystemGet*Version`` calls answer (keys
  ``driver``, ``nvml``, ``cuda``: the driver's CUDA version as NVML's
  integer, ``12040`` for 12.4); the defaults say ``fake``.

A description GPU whose ``nvml`` has ``"no_permission": true`` is counted
by ``nvmlDeviceGetCount`` but its handle is refused with
``NVML_ERROR_NO_PERMISSION``: what NVML answers for a GPU a device cgroup
denies (Slurm's ``ConstrainDevices``).
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable, Dict, List, Optional, Sequence

import pynvml as _real

from pynumabind.cpulist import parse_cpulist

_CONSTANTS = ("NVML_AFFINITY_SCOPE_NODE", "NVML_AFFINITY_SCOPE_SOCKET")

#: What the fake's version calls answer unless told otherwise.
FAKE_VERSIONS: Dict[str, Any] = {"driver": "999.0.fake", "nvml": "12.999.0.fake", "cuda": 12040}


def _parameters(function: Callable[..., Any]) -> List[str]:
    return list(inspect.signature(function).parameters)


def offered(name: str, fake_function: Callable[..., Any], real: Any = None) -> bool:
    """Whether the real ``pynvml`` (default: the installed one) has ``name``.

    A fake whose parameters differ from the real wrapper's (names, in order)
    is a ``TypeError``: it would let a call the real one rejects pass.
    """
    real = _real if real is None else real
    real_function = getattr(real, name, None)
    if real_function is None:
        return False
    want, have = _parameters(real_function), _parameters(fake_function)
    if want != have:
        raise TypeError(
            f"fake pynvml.{name}({', '.join(have)}) does not match the installed "
            f"nvidia-ml-py's {name}({', '.join(want)})"
        )
    return True


class _Handle:
    def __init__(self, gpu: Dict[str, Any], index: int, mig_of: Optional[str] = None) -> None:
        self.gpu = gpu
        self.index = index
        self.mig_of = mig_of


class _PciInfo:
    def __init__(self, bus_id: str) -> None:
        domain, rest = bus_id.split(":", 1)
        self.busId = f"{int(domain, 16):08X}:{rest.upper()}"
        self.busIdLegacy = f"{int(domain, 16):04X}:{rest.upper()}"
        self.domain = int(domain, 16)
        self.bus = int(rest.split(":")[0], 16)


def _words(ids: frozenset[int], size: int) -> List[int]:
    words = [0] * size
    for i in ids:
        if i < 64 * size:
            words[i // 64] |= 1 << (i % 64)
    return words


class FakeNvml:
    """State of the fake library; ``module`` is what ``import pynvml`` returns."""

    def __init__(
        self,
        desc: Dict[str, Any],
        *,
        init_error: Optional[int] = None,
        order: Optional[Sequence[int]] = None,
        no_scope_api: bool = False,
        driver_lacks: Sequence[str] = (),
        mig: Optional[Dict[str, str]] = None,
        bytes_strings: bool = False,
        versions: Optional[Dict[str, Any]] = None,
    ) -> None:
        gpus = [g for g in desc.get("gpus", []) if g["vendor"] == "0x10de"]
        self.gpus = [gpus[i] for i in order] if order is not None else gpus
        self.init_error = init_error
        self.driver_lacks = set(driver_lacks)
        if no_scope_api:
            self.driver_lacks.add("nvmlDeviceGetCpuAffinityWithinScope")
        self.mig = dict(mig or {})
        self.bytes_strings = bytes_strings
        self.versions = {**FAKE_VERSIONS, **(versions or {})}
        self.init_count = 0
        self.shutdown_count = 0
        self.calls: List[str] = []
        self.provided: List[str] = []  # functions the installed nvidia-ml-py has
        self.refused: List[str] = []  # functions the fake knows but it lacks
        self.module = self._build_module()

    # ------------------------------------------------------------ helpers

    def _error(self, code: int) -> Exception:
        error: Exception = _real.NVMLError(code)
        return error

    def _check(self, name: str) -> None:
        self.calls.append(name)
        if self.init_count <= self.shutdown_count:
            raise self._error(_real.NVML_ERROR_UNINITIALIZED)
        if name in self.driver_lacks:
            raise self._error(_real.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _handle(self, handle: Any) -> _Handle:
        if not isinstance(handle, _Handle):
            raise self._error(_real.NVML_ERROR_INVALID_ARGUMENT)
        return handle

    # ---------------------------------------------------------- functions

    def _build_module(self) -> types.ModuleType:
        fake = self
        module = types.ModuleType("pynvml")
        module.__dict__["__fake__"] = fake
        for name in dir(_real):
            if name.startswith(("NVMLError", "NVML_ERROR_")) or name in _CONSTANTS:
                setattr(module, name, getattr(_real, name))

        for function in (
            *_session_functions(fake),
            *_system_functions(fake),
            *_device_functions(fake),
        ):
            name = function.__name__
            if offered(name, function):
                setattr(module, name, function)
                fake.provided.append(name)
            else:
                fake.refused.append(name)
        return module


def _opened(fake: FakeNvml, gpu: Dict[str, Any], index: int) -> _Handle:
    """A handle to ``gpu``, or NO_PERMISSION when a device cgroup denies it."""
    if gpu.get("nvml", {}).get("no_permission"):
        raise fake._error(_real.NVML_ERROR_NO_PERMISSION)
    return _Handle(gpu, index)


def _session_functions(fake: FakeNvml) -> List[Callable[..., Any]]:
    """The fake's init, shutdown and handle lookups, bound to ``fake``."""

    def nvmlInit() -> None:
        fake.calls.append("nvmlInit")
        if fake.init_error is not None:
            raise fake._error(fake.init_error)
        fake.init_count += 1

    def nvmlShutdown() -> None:
        fake._check("nvmlShutdown")
        fake.shutdown_count += 1

    def nvmlDeviceGetCount() -> int:
        fake._check("nvmlDeviceGetCount")
        return len(fake.gpus)

    def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
        fake._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(fake.gpus):
            raise fake._error(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _opened(fake, fake.gpus[index], index)

    def nvmlDeviceGetHandleByUUID(uuid: str) -> _Handle:
        fake._check("nvmlDeviceGetHandleByUUID")
        for index, gpu in enumerate(fake.gpus):
            if gpu["uuid"] == uuid:
                return _opened(fake, gpu, index)
        parent = fake.mig.get(uuid)
        if parent is not None:
            for index, gpu in enumerate(fake.gpus):
                if gpu["uuid"] == parent:
                    return _Handle(gpu, index, mig_of=uuid)
        raise fake._error(_real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice: Any) -> _Handle:
        fake._check("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        h = fake._handle(migDevice)
        if h.mig_of is None:
            raise fake._error(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(h.gpu, h.index)

    return [
        nvmlInit,
        nvmlShutdown,
        nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetHandleByUUID,
        nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
    ]


def _system_functions(fake: FakeNvml) -> List[Callable[..., Any]]:
    """The fake's version queries (``FakeNvml.versions``), bound to ``fake``."""

    def nvmlSystemGetDriverVersion() -> str:
        fake._check("nvmlSystemGetDriverVersion")
        return str(fake.versions["driver"])

    def nvmlSystemGetNVMLVersion() -> str:
        fake._check("nvmlSystemGetNVMLVersion")
        return str(fake.versions["nvml"])

    def nvmlSystemGetCudaDriverVersion_v2() -> int:
        fake._check("nvmlSystemGetCudaDriverVersion_v2")
        return int(fake.versions["cuda"])

    def nvmlSystemGetCudaDriverVersion() -> int:
        fake._check("nvmlSystemGetCudaDriverVersion")
        return int(fake.versions["cuda"])

    return [
        nvmlSystemGetDriverVersion,
        nvmlSystemGetNVMLVersion,
        nvmlSystemGetCudaDriverVersion_v2,
        nvmlSystemGetCudaDriverVersion,
    ]


def _device_functions(fake: FakeNvml) -> List[Callable[..., Any]]:
    """The fake's per-device queries, bound to ``fake``."""

    def text(value: str) -> Any:
        return value.encode() if fake.bytes_strings else value

    def nvmlDeviceGetPciInfo(handle: Any) -> _PciInfo:
        fake._check("nvmlDeviceGetPciInfo")
        info = _PciInfo(fake._handle(handle).gpu["bus_id"])
        info.busId = text(info.busId)
        return info

    def nvmlDeviceGetUUID(handle: Any) -> Any:
        fake._check("nvmlDeviceGetUUID")
        h = fake._handle(handle)
        return text(h.mig_of or str(h.gpu["uuid"]))

    def nvmlDeviceGetName(handle: Any) -> Any:
        fake._check("nvmlDeviceGetName")
        return text(str(fake._handle(handle).gpu["model"]))

    def nvmlDeviceGetCpuAffinityWithinScope(
        handle: Any,
        cpuSetSize: int,
        scope: int,
    ) -> List[int]:
        fake._check("nvmlDeviceGetCpuAffinityWithinScope")
        if scope not in (_real.NVML_AFFINITY_SCOPE_NODE, _real.NVML_AFFINITY_SCOPE_SOCKET):
            raise fake._error(_real.NVML_ERROR_INVALID_ARGUMENT)
        cpus = parse_cpulist(fake._handle(handle).gpu["nvml"]["cpu_affinity"])
        return _words(cpus, cpuSetSize)

    def nvmlDeviceGetCpuAffinity(handle: Any, cpuSetSize: int) -> List[int]:
        fake._check("nvmlDeviceGetCpuAffinity")
        cpus = parse_cpulist(fake._handle(handle).gpu["nvml"]["cpu_affinity"])
        return _words(cpus, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(
        handle: Any,
        nodeSetSize: int,
        scope: int,
    ) -> List[int]:
        fake._check("nvmlDeviceGetMemoryAffinity")
        nodes = parse_cpulist(fake._handle(handle).gpu["nvml"]["memory_affinity"])
        return _words(nodes, nodeSetSize)

    def nvmlDeviceGetNumaNodeId(handle: Any) -> int:
        fake._check("nvmlDeviceGetNumaNodeId")
        node = fake._handle(handle).gpu["nvml"].get("numa_node_id")
        if node is None:
            raise fake._error(_real.NVML_ERROR_NOT_SUPPORTED)
        return int(node)

    return [
        nvmlDeviceGetPciInfo,
        nvmlDeviceGetUUID,
        nvmlDeviceGetName,
        nvmlDeviceGetCpuAffinityWithinScope,
        nvmlDeviceGetCpuAffinity,
        nvmlDeviceGetMemoryAffinity,
        nvmlDeviceGetNumaNodeId,
    ]


def install_fake_nvml(monkeypatch: Any, desc: Dict[str, Any], **options: Any) -> FakeNvml:
    """Install a fake ``pynvml`` for the test's duration and return its state."""
    fake = FakeNvml(desc, **options)
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake.module)
    return fake


def hide_pynvml(monkeypatch: Any) -> None:
    """Make ``import pynvml`` raise ImportError for the test's duration."""
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
