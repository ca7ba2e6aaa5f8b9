"""Tiny C kernels, compiled at benchmark time with the system C compiler and loaded with ctypes.

Why C: a pointer chase measures latency only if every load depends on the
previous one, and a Python loop would measure the interpreter instead.  The
jitter loop is in C for the same reason (its iteration time should be the
CPU's, not the allocator's or the GIL's).  Benchmark-only: the library
itself never compiles anything.

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
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define LINE_WORDS 8 /* 64-byte lines of uint64_t */

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* xorshift64*: a fast, seedable generator; quality is ample for shuffling. */
static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *state = x;
    return x * 2685821657736338717ULL;
}

/* Link the buffer's cache lines into one random cycle (Sattolo's algorithm),
   writing every line, so the calling thread's memory policy places every page.
   Returns 0, or -1 when the scratch array cannot be allocated. */
int chase_init(uint64_t *buf, size_t lines, uint64_t seed) {
    size_t *order = malloc(lines * sizeof(size_t));
    uint64_t state = seed ? seed : 88172645463325252ULL;
    if (order == NULL) return -1;
    for (size_t i = 0; i < lines; i++) order[i] = i;
    for (size_t i = lines - 1; i > 0; i--) {
        size_t j = (size_t)(next_random(&state) % i); /* j < i: one single cycle */
        size_t t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (size_t i = 0; i < lines; i++) {
        memset(&buf[i * LINE_WORDS], 0, LINE_WORDS * sizeof(uint64_t));
        buf[i * LINE_WORDS] = (uint64_t)(uintptr_t)&buf[order[i] * LINE_WORDS];
    }
    free(order);
    return 0;
}

static volatile uint64_t sink;

/* Follow the chain for `steps` dependent loads; returns nanoseconds per load. */
double chase_run(uint64_t *buf, size_t steps) {
    uint64_t *p = buf;
    double start = now_ns();
    for (size_t i = 0; i < steps; i++) p = (uint64_t *)(uintptr_t)*p;
    double stop = now_ns();
    sink = (uint64_t)(uintptr_t)p;
    return steps ? (stop - start) / (double)steps : 0.0;
}

/* Steps until the chain returns to the first line (== lines for a single cycle). */
size_t chase_cycle_length(uint64_t *buf, size_t limit) {
    uint64_t *p = (uint64_t *)(uintptr_t)*buf;
    size_t n = 1;
    while (p != buf && n <= limit) { p = (uint64_t *)(uintptr_t)*p; n++; }
    return n;
}

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

    def chase_init(self, address: int, lines: int, seed: int = 1) -> None:
        if self.lib.chase_init(ctypes.c_void_p(address), lines, seed) != 0:
            raise MemoryError("chase_init: cannot allocate its scratch array")

    def chase_run(self, address: int, steps: int) -> float:
        """Nanoseconds per dependent load."""
        return float(self.lib.chase_run(ctypes.c_void_p(address), steps))

    def chase_cycle_length(self, address: int, limit: int) -> int:
        return int(self.lib.chase_cycle_length(ctypes.c_void_p(address), limit))

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
    lib.chase_init.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64]
    lib.chase_init.restype = ctypes.c_int
    lib.chase_run.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.chase_run.restype = ctypes.c_double
    lib.chase_cycle_length.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.chase_cycle_length.restype = ctypes.c_size_t
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
