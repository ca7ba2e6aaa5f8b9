"""A real seccomp filter, built by hand, that denies NUMA syscalls with EPERM.

This reproduces what a container's default seccomp profile does to a
worker without CAP_SYS_NICE.  Built with ctypes only (no libseccomp needed):
``prctl(PR_SET_NO_NEW_PRIVS)`` then ``prctl(PR_SET_SECCOMP,
SECCOMP_MODE_FILTER, &sock_fprog)``.  The filter applies to the calling thread
and everything it starts afterwards, so install it first thing in a child
process.  x86-64 only: the syscall numbers are that ABI's.

Constants (checked against linux/seccomp.h, linux/filter.h, linux/audit.h,
asm/unistd_64.h):
"""

from __future__ import annotations

import ctypes
import errno
import platform
from typing import Iterable, List

PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E  # EM_X86_64 (62) | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE

# struct seccomp_data: int nr at offset 0, __u32 arch at offset 4.
OFFSET_NR = 0
OFFSET_ARCH = 4

BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

# x86-64 syscall numbers.
NR_MBIND = 237
NR_SET_MEMPOLICY = 238
NR_GET_MEMPOLICY = 239
NR_MIGRATE_PAGES = 256
NR_MOVE_PAGES = 279

MEMPOLICY_SETTERS = (NR_SET_MEMPOLICY, NR_MBIND)
ALL_NUMA = (NR_MBIND, NR_SET_MEMPOLICY, NR_GET_MEMPOLICY, NR_MIGRATE_PAGES, NR_MOVE_PAGES)


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [
        ("len", ctypes.c_ushort),
        ("filter", ctypes.POINTER(SockFilter)),
    ]


def supported() -> bool:
    return platform.machine() == "x86_64"


def program(denied: Iterable[int], err: int = errno.EPERM) -> List[SockFilter]:
    """BPF: on x86-64, return ``-err`` for ``denied`` syscalls; allow the rest."""
    numbers = list(denied)
    n = len(numbers)
    prog = [
        SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        # Not x86-64 (e.g. an i386 syscall): skip to ALLOW at index 3 + n.
        SockFilter(BPF_JEQ_K, 0, n + 1, AUDIT_ARCH_X86_64),
        SockFilter(BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ]
    for index, number in enumerate(numbers):
        # Instruction 3 + index; the DENY return sits at 3 + n + 1.
        prog.append(SockFilter(BPF_JEQ_K, n - index, 0, number))
    prog.append(SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW))
    prog.append(SockFilter(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | (err & 0xFFFF)))
    return prog


def install(denied: Iterable[int] = ALL_NUMA, err: int = errno.EPERM) -> None:
    """Install the filter on the calling thread (and its future children)."""
    if not supported():
        raise OSError(errno.ENOSYS, "seccomp test filter is written for x86-64 only")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    libc.prctl.restype = ctypes.c_int
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(e, e)}")
    instructions = program(denied, err)
    array = (SockFilter * len(instructions))(*instructions)
    fprog = SockFprog(len(instructions), ctypes.cast(array, ctypes.POINTER(SockFilter)))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(e, e)}")


def raw_syscall_errno(number: int, *args: int) -> int:
    """Call syscall ``number`` with integer args; 0 on success, else errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *(ctypes.c_long(a) for a in args))
    return 0 if result >= 0 else ctypes.get_errno()
