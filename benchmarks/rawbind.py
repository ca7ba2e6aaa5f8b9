"""The floor: binding a process with nothing but the syscalls, through ctypes.

What any in-process binder must do at the least: list the process's threads,
``sched_setaffinity`` each, and one ``set_mempolicy`` for the calling thread.
The benchmarks time pynumabind against this, so it must not go through
pynumabind: the calls are made with ctypes straight into libc
(``sched_setaffinity``, and ``syscall(SYS_set_mempolicy, ...)``), with the
masks built before the clock starts.  Mode numbers and syscall numbers are
the kernel's ABI (``include/uapi/linux/mempolicy.h``, the architecture's
syscall table); on an architecture not listed here, libnuma's one-line
``set_mempolicy`` wrapper stands in for the syscall.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
from typing import Any, Callable, Optional

__all__ = ["MODES", "RawBinder"]

#: plan memory policy -> set_mempolicy mode (MPOL_PREFERRED_MANY for several preferred nodes)
MODES = {"preferred": 1, "bind": 2, "interleave": 3, "local": 4}
MPOL_DEFAULT = 0
MPOL_PREFERRED_MANY = 5

# __NR_set_mempolicy per architecture.
SET_MEMPOLICY_NR = {"x86_64": 238, "aarch64": 237, "ppc64le": 261, "ppc64": 261, "s390x": 270}

_WORD_BITS = ctypes.sizeof(ctypes.c_ulong) * 8


def _mask(ids: frozenset[int]) -> Any:
    """An ``unsigned long`` array with the bits of ``ids`` set."""
    words = max(ids, default=0) // _WORD_BITS + 1
    array = (ctypes.c_ulong * words)()
    for bit in ids:
        array[bit // _WORD_BITS] |= 1 << (bit % _WORD_BITS)
    return array


def _mempolicy_call() -> Callable[[int, Any, int], int]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    number = SET_MEMPOLICY_NR.get(platform.machine())
    if number is not None:
        syscall = libc.syscall
        syscall.restype = ctypes.c_long

        def call(mode: int, mask: Any, maxnode: int) -> int:
            return int(syscall(ctypes.c_long(number), mode, mask, ctypes.c_ulong(maxnode)))

        return call
    libnuma = ctypes.CDLL("libnuma.so.1", use_errno=True)
    wrapper = libnuma.set_mempolicy

    def via_libnuma(mode: int, mask: Any, maxnode: int) -> int:
        return int(wrapper(mode, mask, ctypes.c_ulong(maxnode)))

    return via_libnuma


class RawBinder:
    """Bind every thread of this process to ``cpus`` and set one memory policy, raw.

    ``policy`` is a plan's policy value (``bind``, ``preferred``,
    ``interleave``, ``local``, ``none``); ``none`` leaves the policy alone.
    :meth:`apply` is the timed part; :meth:`undo` puts ``original_cpus`` and
    the default policy back.
    """

    def __init__(
        self, cpus: frozenset[int], mems: frozenset[int], policy: str, original_cpus: frozenset[int]
    ) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._setaffinity = libc.sched_setaffinity
        self._setaffinity.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
        self._cpu_mask = _mask(cpus)
        self._original_mask = _mask(original_cpus)
        self._set_mempolicy = _mempolicy_call()
        self.mode: Optional[int]
        if policy == "none":
            self.mode = None
        elif policy == "preferred" and len(mems) > 1:
            self.mode = MPOL_PREFERRED_MANY
        else:
            self.mode = MODES[policy]
        self._node_mask = _mask(mems)
        self._maxnode = ctypes.sizeof(self._node_mask) * 8 + 1
        if self.mode == MODES["local"]:
            self._node_mask, self._maxnode = None, 0

    def _all_threads(self, mask: Any) -> None:
        size = ctypes.sizeof(mask)
        for tid in os.listdir("/proc/self/task"):
            if self._setaffinity(int(tid), size, mask) != 0:
                code = ctypes.get_errno()
                if code != errno.ESRCH:  # ESRCH: the thread ended meanwhile
                    raise OSError(code, f"sched_setaffinity({tid}): {os.strerror(code)}")

    def apply(self) -> None:
        self._all_threads(self._cpu_mask)
        if self.mode is not None:
            if self._set_mempolicy(self.mode, self._node_mask, self._maxnode) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"set_mempolicy({self.mode}): {os.strerror(code)}")

    def undo(self, _: Any = None) -> None:
        self._all_threads(self._original_mask)
        if self._set_mempolicy(MPOL_DEFAULT, None, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"set_mempolicy(MPOL_DEFAULT): {os.strerror(code)}")
