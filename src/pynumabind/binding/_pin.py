"""Page-locking a host buffer for the GPU: ``cudaHostRegister``, through torch or the CUDA runtime.

The rules are "Pinning" in :mod:`pynumabind.binding.host`; this is how they
are met.  :func:`find_registrar` returns the first usable way in, in this
order, never importing torch or initialising anything else:

1. **torch**, when the process has imported it already (the framework case:
   its own bundled runtime) and ``torch.cuda.is_available()``:
   ``torch.cuda.cudart().cudaHostRegister``, its result checked by
   ``torch.cuda.check_error``;
2. **the CUDA runtime** (``libcudart.so*``), loaded with ctypes by
   :func:`pynumabind._os.cudart.load_cudart` (the one loader), when it
   reports at least one device (``cudaGetDeviceCount``).

Otherwise a :class:`~pynumabind.errors.PinError` says why each way is not
usable.  The flag is ``cudaHostRegisterPortable`` (1): the pages count as
pinned for every CUDA context of the process, not only the current
device's, so one pool may feed copies to any GPU (no ``cudaSetDevice`` is
needed or made).  :class:`Registration` undoes itself once
(``cudaHostUnregister``), before the memory is unmapped.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, List, Optional, Sequence, Tuple

from .._os.cudart import CUDART_NAMES, load_cudart
from ..errors import PinError

__all__ = [
    "CUDA_HOST_REGISTER_PORTABLE",
    "CudartRegistrar",
    "Registrar",
    "Registration",
    "TorchRegistrar",
    "find_registrar",
]

#: ``cudaHostRegisterPortable``: pinned for every CUDA context, not only the current one.
CUDA_HOST_REGISTER_PORTABLE = 1


class Registrar:
    """One way to call ``cudaHostRegister``/``cudaHostUnregister``."""

    name = "?"

    def register(self, address: int, length: int, flags: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def unregister(self, address: int) -> None:  # pragma: no cover
        raise NotImplementedError


class CudartRegistrar(Registrar):
    """The CUDA runtime through ctypes."""

    def __init__(self, lib: Any, path: str) -> None:
        self.lib = lib
        self.name = f"the CUDA runtime ({path})"
        vp = ctypes.c_void_p
        declarations: Sequence[Tuple[str, List[Any], Any]] = (
            ("cudaGetDeviceCount", [ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
            ("cudaHostRegister", [vp, ctypes.c_size_t, ctypes.c_uint], ctypes.c_int),
            ("cudaHostUnregister", [vp], ctypes.c_int),
            ("cudaGetErrorString", [ctypes.c_int], ctypes.c_char_p),
        )
        for symbol, argtypes, restype in declarations:
            function = getattr(lib, symbol)
            function.argtypes = argtypes
            function.restype = restype

    def _check(self, status: int, call: str) -> None:
        if status != 0:
            text = self.lib.cudaGetErrorString(status) or b"?"
            raise PinError(f"{call} failed: CUDA error {status} ({text.decode()})")

    def devices(self) -> int:
        count = ctypes.c_int(0)
        self._check(self.lib.cudaGetDeviceCount(ctypes.byref(count)), "cudaGetDeviceCount")
        return count.value

    def register(self, address: int, length: int, flags: int) -> None:
        status = self.lib.cudaHostRegister(address, length, flags)
        self._check(status, f"cudaHostRegister({address:#x}, {length}, {flags})")

    def unregister(self, address: int) -> None:
        self._check(self.lib.cudaHostUnregister(address), f"cudaHostUnregister({address:#x})")


class TorchRegistrar(Registrar):
    """torch's own CUDA runtime (``torch.cuda.cudart()``)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.cudart = torch.cuda.cudart()
        self.name = f"torch {getattr(torch, '__version__', '?')}"

    def _check(self, result: Any, call: str) -> None:
        try:
            self.torch.cuda.check_error(result)
        except Exception as exc:  # torch's CudaError: named, typed ours
            raise PinError(f"{call} failed through {self.name}: {exc}") from None

    def register(self, address: int, length: int, flags: int) -> None:
        result = self.cudart.cudaHostRegister(address, length, flags)
        self._check(result, f"cudaHostRegister({address:#x}, {length}, {flags})")

    def unregister(self, address: int) -> None:
        self._check(self.cudart.cudaHostUnregister(address), f"cudaHostUnregister({address:#x})")


def _torch() -> Tuple[Optional[Registrar], str]:
    torch = sys.modules.get("torch")
    if torch is None:
        return None, "torch is not imported in this process (host_buffer never imports it)"
    try:
        if not torch.cuda.is_available():
            return None, f"torch {torch.__version__} reports no usable CUDA device"
        return TorchRegistrar(torch), ""
    except Exception as exc:  # a broken or CPU-only torch: named, not raised
        return None, f"torch cannot use CUDA ({type(exc).__name__}: {exc})"


def _cudart(names: Sequence[str]) -> Tuple[Optional[Registrar], str]:
    lib, loaded = load_cudart(names)
    if lib is None:
        return None, loaded
    try:
        registrar = CudartRegistrar(lib, loaded)
        count = registrar.devices()
    except (AttributeError, PinError) as exc:
        return None, f"{loaded} loads but cannot be used ({exc})"
    if count < 1:
        return None, f"{loaded} reports no CUDA device"
    return registrar, ""


def find_registrar(names: Sequence[str] = CUDART_NAMES) -> Registrar:
    """The first usable way to register host memory with CUDA; a PinError says why none is."""
    reasons: List[str] = []
    for found, why in (_torch(), _cudart(names)):
        if found is not None:
            return found
        reasons.append(why)
    why = "; ".join(reasons)
    raise PinError(f"cannot pin the buffer: CUDA is not usable from this process: {why}")


class Registration:
    """``length`` bytes at ``address`` registered; :meth:`release` undoes it once."""

    def __init__(self, registrar: Registrar, address: int, length: int, flags: int) -> None:
        registrar.register(address, length, flags)
        self.registrar = registrar
        self.address = address
        self.length = length
        self.flags = flags
        self._lock = threading.Lock()
        self.active = True

    def release(self) -> None:
        """``cudaHostUnregister`` (once; later calls do nothing)."""
        with self._lock:
            if not self.active:
                return
            self.active = False
        self.registrar.unregister(self.address)

    def renew(self) -> None:
        """Register again after a release (``close`` refused: views still use the memory)."""
        with self._lock:
            if self.active:
                return
            self.registrar.register(self.address, self.length, self.flags)
            self.active = True
