"""cffi build script for the libnuma shim (ABI mode, out-of-line).

``set_source(..., None)`` makes cffi emit a pure-Python module,
``pynumabind._libnuma_ffi``, that holds the parsed declarations; nothing is
compiled, so installing needs neither a C compiler nor ``numa.h``, and the
wheel stays ``py3-none-any``.  The library itself is ``dlopen``-ed lazily at
run time by :mod:`pynumabind._os.libnuma`.

The declarations restate libnuma 2.0's stable ABI (``numa.h`` and
``numaif.h``), and only what pynumabind itself calls: they are data
(:data:`DECLARATIONS`), so the loader can check that the library it opened
exports every one of them and name the one it lacks.  :data:`OPTIONAL` lists
the symbols an older libnuma may lack and the loader must not insist on
(none today: every declaration here is in libnuma 2.0.0).  What only the
tests call (libnuma's own string parsers, ``numa_node_to_cpus``,
``numa_distance`` ...) lives in ``tests/support/libnuma_oracle.py``, with its own FFI.

Importing this module costs nothing beyond the data: cffi (and its C
parser, about 10 ms) is loaded only by :func:`build_ffi`, which the build
(``cffi_modules=[...:build_ffi]``, cffi calls it) and an editable install's
run-time fallback call.  The loader's symbol check reads only the data.
"""

from __future__ import annotations

import os

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import FrozenSet, Tuple

    from cffi import FFI

#: (symbol, C declaration) for each libnuma symbol pynumabind uses.
DECLARATIONS: Tuple[Tuple[str, str], ...] = (
    # Library state: numa_available() < 0 means the kernel has no NUMA API.
    ("numa_available", "int numa_available(void);"),
    # Width of a node mask the kernel accepts (its nr_node_ids, rounded up).
    ("numa_num_possible_nodes", "int numa_num_possible_nodes(void);"),
    # libnuma's error hooks: both default to 0 (do not exit); set anyway.
    ("numa_exit_on_error", "extern int numa_exit_on_error;"),
    ("numa_exit_on_warn", "extern int numa_exit_on_warn;"),
    # A node's size and free memory (verify() weighs preferred spill by it).
    ("numa_node_size64", "long long numa_node_size64(int node, long long *freep);"),
    # Raw syscall wrappers exported by libnuma: -1 with errno on failure.
    (
        "get_mempolicy",
        "long get_mempolicy(int *mode, unsigned long *nmask, unsigned long maxnode,"
        " void *addr, unsigned flags);",
    ),
    (
        "set_mempolicy",
        "long set_mempolicy(int mode, const unsigned long *nmask, unsigned long maxnode);",
    ),
    (
        "mbind",
        "long mbind(void *start, unsigned long len, int mode, const unsigned long *nmask,"
        " unsigned long maxnode, unsigned flags);",
    ),
    (
        "migrate_pages",
        "long migrate_pages(int pid, unsigned long maxnode, const unsigned long *frommask,"
        " const unsigned long *tomask);",
    ),
    (
        "move_pages",
        "long move_pages(int pid, unsigned long count, void **pages, const int *nodes,"
        " int *status, int flags);",
    ),
)

#: Symbols of :data:`DECLARATIONS` the loader does not require.
OPTIONAL: FrozenSet[str] = frozenset()

CDEF = "\n".join(declaration for _symbol, declaration in DECLARATIONS)


def build_ffi() -> FFI:
    """A new FFI holding :data:`CDEF`, set up to emit ``pynumabind._libnuma_ffi``."""
    from cffi import FFI

    ffi = FFI()
    ffi.set_source("pynumabind._libnuma_ffi", None)
    ffi.cdef(CDEF)
    return ffi


if __name__ == "__main__":
    # Development convenience: emit _libnuma_ffi.py next to this file.
    here = os.path.dirname(os.path.abspath(__file__))
    build_ffi().compile(tmpdir=os.path.dirname(here))
