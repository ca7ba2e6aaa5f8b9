"""libnuma's own answers, for tests to hold pynumabind against: a small FFI of its own.

pynumabind's shim (``pynumabind._libnuma_build``) declares only what the
library calls.  The calls below are oracles: libnuma's numactl-style string
parsers (differential tests of ``pynumabind.cpulist``), its node queries
(``numa_node_to_cpus``, ``numa_node_of_cpu``, ``numa_distance``; the sysfs
reader is checked against them), its bitmasks, and ``move_pages`` with target
nodes.  They load the same ``libnuma.so.1``, in-line ABI mode, on first use.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from typing import Any, Dict, Iterator, List, Optional

from cffi import FFI

from pynumabind._os.libnuma import words_to_set
from pynumabind.errors import LibnumaUnavailableError, NumaSyscallError

CDEF = """
struct bitmask { unsigned long size; unsigned long *maskp; };
int numa_max_node(void);
int numa_num_possible_cpus(void);
int numa_num_configured_cpus(void);
int numa_num_configured_nodes(void);
struct bitmask *numa_bitmask_alloc(unsigned int nbits);
void numa_bitmask_free(struct bitmask *bmp);
struct bitmask *numa_bitmask_setbit(struct bitmask *bmp, unsigned int n);
int numa_bitmask_isbitset(const struct bitmask *bmp, unsigned int n);
unsigned int numa_bitmask_weight(const struct bitmask *bmp);
int numa_node_to_cpus(int node, struct bitmask *mask);
int numa_node_of_cpu(int cpu);
int numa_distance(int node1, int node2);
struct bitmask *numa_parse_cpustring_all(const char *s);
struct bitmask *numa_parse_nodestring_all(const char *s);
long move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                int *status, int flags);
"""

MPOL_MF_MOVE = 1 << 1

ffi = FFI()
ffi.cdef(CDEF)
_state: Dict[str, Any] = {}


def lib() -> Any:
    """libnuma.so.1 through this module's FFI (LibnumaUnavailableError when missing)."""
    if "lib" not in _state:
        try:
            _state["lib"] = ffi.dlopen("libnuma.so.1")
        except OSError as exc:
            raise LibnumaUnavailableError(f"cannot load libnuma.so.1 ({exc})") from exc
    return _state["lib"]


def possible_cpu_bits() -> int:
    """Width of a CPU mask covering every possible CPU id."""
    return max(int(lib().numa_num_possible_cpus()), 64)


def configured_cpus() -> int:
    return int(lib().numa_num_configured_cpus())


def configured_nodes() -> int:
    return int(lib().numa_num_configured_nodes())


def max_node() -> int:
    return int(lib().numa_max_node())


def bitmask_to_set(bmp: Any) -> frozenset[int]:
    """Read a ``struct bitmask *`` word by word."""
    if bmp == ffi.NULL:
        raise ValueError("NULL bitmask")
    return words_to_set(bmp.maskp[i] for i in range((int(bmp.size) + 63) // 64))


@contextlib.contextmanager
def allocated_bitmask(nbits: int, ids: frozenset[int] = frozenset()) -> Iterator[Any]:
    """A libnuma bitmask of ``nbits`` holding ``ids``, freed on exit."""
    bmp = lib().numa_bitmask_alloc(nbits)
    if bmp == ffi.NULL:
        raise MemoryError("numa_bitmask_alloc failed")
    try:
        for i in ids:
            if i < 0 or i >= nbits:
                raise ValueError(f"id {i} does not fit in a {nbits}-bit mask")
            lib().numa_bitmask_setbit(bmp, i)
        yield bmp
    finally:
        lib().numa_bitmask_free(bmp)


def _take_bitmask(bmp: Any) -> Optional[frozenset[int]]:
    """Convert and free a bitmask libnuma returned; ``None`` for NULL."""
    if bmp == ffi.NULL:
        return None
    try:
        return bitmask_to_set(bmp)
    finally:
        lib().numa_bitmask_free(bmp)


def node_to_cpus(node: int) -> frozenset[int]:
    """CPUs of ``node`` according to libnuma (it reads sysfs cpumap)."""
    if node < 0 or not os.path.isdir(f"/sys/devices/system/node/node{node}"):
        # libnuma would print a warning and claim every CPU for a missing node.
        raise NumaSyscallError(errno.EINVAL, "numa_node_to_cpus", {node} if node >= 0 else None)
    with allocated_bitmask(possible_cpu_bits()) as bmp:
        if lib().numa_node_to_cpus(node, bmp) < 0:
            raise NumaSyscallError(ffi.errno, "numa_node_to_cpus", {node})
        return bitmask_to_set(bmp)


def node_of_cpu(cpu: int) -> int:
    node = int(lib().numa_node_of_cpu(cpu))
    if node < 0:
        raise NumaSyscallError(ffi.errno or errno.EINVAL, f"numa_node_of_cpu({cpu})")
    return node


def distance(a: int, b: int) -> Optional[int]:
    """SLIT distance, or ``None`` when libnuma cannot tell."""
    return int(lib().numa_distance(a, b)) or None


def parse_cpustring_all(text: str) -> Optional[frozenset[int]]:
    """libnuma's numactl-style CPU parser; ``None`` when it rejects.

    libnuma prints a warning on stderr for ids it rejects.
    """
    return _take_bitmask(lib().numa_parse_cpustring_all(text.encode()))


def parse_nodestring_all(text: str) -> Optional[frozenset[int]]:
    """libnuma's node-string parser; ``None`` when it rejects."""
    return _take_bitmask(lib().numa_parse_nodestring_all(text.encode()))


def move_buffer_pages(buffer: Any, node: int) -> List[int]:
    """Move every page of ``buffer`` to ``node``; per-page node or ``-errno``."""
    pointer = ffi.from_buffer(buffer)
    try:
        size = mmap.PAGESIZE
        start = int(ffi.cast("uintptr_t", pointer))
        first = start - start % size
        pages = [ffi.cast("void *", a) for a in range(first, start + len(buffer), size)]
        if not pages:
            return []
        status = ffi.new("int[]", len(pages))
        targets = ffi.new("int[]", [node] * len(pages))
        array = ffi.new("void *[]", pages)
        if lib().move_pages(0, len(pages), array, targets, status, MPOL_MF_MOVE) < 0:
            raise NumaSyscallError(ffi.errno, "move_pages", {node})
        return [int(s) for s in status]
    finally:
        ffi.release(pointer)
