"""Tiny C kernels, compiled at benchmark time with the system C compiler and loaded with ctypes.

Why C: the jitter loop's iteration time should be the CPU's, not the
allocator's or the GIL's; and CPUID tells a QEMU TCG guest from a KVM one.
Benchmark-only: the library itself never compiles anything (its memory
latency is a Python pointer chase with the loop's own cost measured and
subtracted: ``pynumabind.advisor._memory``).

If no compiler is found, :func:`load_kernels` returns ``None`` and a reason;
the callers report the affected measurements as unavailable.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

__all__ = ["Kernels", "load_kernels"]

C_SOURCE = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static volatile uint64_t sink;

/* A fixed amount of dependent integer work per iteration; records each
   iteration's duration (ns) and the CPU it ended on. */
void spin(int iterations, uint64_t work, double *ns_out, int *cpu_out) {
    uint64_t x = 1;
    for (int it = 0; it < iterations; it++) {
        double start = now_ns();
        for (uint64_t i = 0; i < work; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        ns_out[it] = now_ns() - start;
        cpu_out[it] = sched_getcpu();
    }
    sink = x;
}

/* CPUID leaf 0x40000000 vendor signature when the hypervisor bit is set;
   returns 1 and fills out[0..12], else 0. */
int hypervisor_signature(char *out) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 31))) return 0;
    __cpuid(0x40000000, a, b, c, d);
    memcpy(out, &b, 4); memcpy(out + 4, &c, 4); memcpy(out + 8, &d, 4);
    out[12] = 0;
    return 1;
#else
    (void)out;
    return 0;
#endif
}
"""


@dataclass(frozen=True)
class Kernels:
    """The loaded shared object and typed wrappers around its functions."""

    lib: Any
    path: str
    compiler: str

    def spin(self, iterations: int, work: int) -> Tuple[List[float], List[int]]:
        """Per-iteration nanoseconds and the CPU each iteration ended on."""
        ns = (ctypes.c_double * iterations)()
        cpus = (ctypes.c_int * iterations)()
        self.lib.spin(iterations, work, ns, cpus)
        return list(ns), list(cpus)

    def hypervisor_signature(self) -> Optional[str]:
        out = ctypes.create_string_buffer(13)
        if not self.lib.hypervisor_signature(out):
            return None
        return out.raw[:12].decode("ascii", errors="replace").rstrip("\0")


def _declare(lib: Any) -> None:
    lib.spin.argtypes = [
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.POINTER(ctypes.c_double),
        ctypes.POINTER(ctypes.c_int),
    ]
    lib.spin.restype = None
    lib.hypervisor_signature.argtypes = [ctypes.c_char_p]
    lib.hypervisor_signature.restype = ctypes.c_int


def find_compiler() -> Optional[str]:
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


def load_kernels(build_dir: Optional[str] = None) -> Tuple[Optional[Kernels], str]:
    """Compile (once per source version) and load the kernels.

    Returns ``(kernels, "")`` or ``(None, reason)``.  The shared object goes
    to ``build_dir`` (default: a per-user directory under the system temp
    dir), named by the source's hash so a stale build is never reused.
    """
    compiler = find_compiler()
    if compiler is None:
        return None, "no C compiler found (set CC, or install gcc): C kernels unavailable"
    digest = hashlib.sha256(C_SOURCE.encode()).hexdigest()[:16]
    directory = build_dir or os.path.join(tempfile.gettempdir(), f"pynumabind-bench-{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    target = os.path.join(directory, f"kernels-{digest}.so")
    if not os.path.exists(target):
        with tempfile.TemporaryDirectory(dir=directory) as scratch:
            source = os.path.join(scratch, "kernels.c")
            built = os.path.join(scratch, "kernels.so")
            with open(source, "w", encoding="utf-8") as handle:
                handle.write(C_SOURCE)
            argv = [compiler, "-O2", "-shared", "-fPIC", "-o", built, source]
            try:
                done = subprocess.run(
                    argv, check=False, capture_output=True, text=True, timeout=120
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                return None, f"compiling the C kernels with {compiler} failed: {exc}"
            if done.returncode != 0:
                return None, (
                    f"compiling the C kernels with {compiler} failed "
                    f"(exit {done.returncode}): {done.stderr.strip()[-500:]}"
                )
            os.replace(built, target)  # atomic: concurrent runs never load half a file
    try:
        lib = ctypes.CDLL(target)
    except OSError as exc:
        return None, f"cannot load the compiled kernels {target}: {exc}"
    _declare(lib)
    return Kernels(lib=lib, path=target, compiler=compiler), ""
