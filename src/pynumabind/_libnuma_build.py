"""cffi build script for the libnuma shim (ABI mode, out-of-line).

``set_source(..., None)`` makes cffi emit a pure-Python module,
``pynumabind._libnuma_ffi``, that holds the parsed declarations; nothing is
compiled, so installing needs neither a C compiler nor ``numa.h``, and the
wheel stays ``py3-none-any``.  The library itself is ``dlopen``-ed lazily at
run time by :mod:`pynumabind._libnuma`.

The declarations below restate libnuma 2.0's stable ABI (``numa.h`` and
``numaif.h``).  Only what pynumabind calls is declared.  Symbols missing from
an older libnuma fail at attribute access, which the binding layer probes.
"""

from __future__ import annotations

import os

from cffi import FFI

CDEF = """
struct bitmask {
    unsigned long size;   /* number of bits */
    unsigned long *maskp;
};

/* Library state and sizes. */
int numa_available(void);
int numa_max_node(void);
int numa_max_possible_node(void);
int numa_num_possible_nodes(void);
int numa_num_possible_cpus(void);
int numa_num_configured_nodes(void);
int numa_num_configured_cpus(void);
int numa_pagesize(void);

/* libnuma's error hooks: both default to 0 (do not exit). */
extern int numa_exit_on_error;
extern int numa_exit_on_warn;

/* Bitmasks. */
struct bitmask *numa_bitmask_alloc(unsigned int nbits);
struct bitmask *numa_allocate_cpumask(void);
struct bitmask *numa_allocate_nodemask(void);
void numa_bitmask_free(struct bitmask *bmp);
struct bitmask *numa_bitmask_setbit(struct bitmask *bmp, unsigned int n);
int numa_bitmask_isbitset(const struct bitmask *bmp, unsigned int n);
unsigned int numa_bitmask_weight(const struct bitmask *bmp);

/* Topology queries (pure reads; they report errors by return value). */
int numa_node_to_cpus(int node, struct bitmask *mask);
int numa_node_of_cpu(int cpu);
long long numa_node_size64(int node, long long *freep);
int numa_distance(int node1, int node2);

/* numactl-style string parsers (used for differential tests). */
struct bitmask *numa_parse_cpustring_all(const char *s);
struct bitmask *numa_parse_nodestring_all(const char *s);

/* Snapshots taken at load time; stale after affinity changes (see docs). */
extern struct bitmask *numa_all_cpus_ptr;
extern struct bitmask *numa_all_nodes_ptr;
extern struct bitmask *numa_no_nodes_ptr;

/* Raw syscall wrappers exported by libnuma: -1 with errno on failure. */
long get_mempolicy(int *mode, unsigned long *nmask, unsigned long maxnode,
                   void *addr, unsigned flags);
long set_mempolicy(int mode, const unsigned long *nmask, unsigned long maxnode);
long mbind(void *start, unsigned long len, int mode, const unsigned long *nmask,
           unsigned long maxnode, unsigned flags);
long migrate_pages(int pid, unsigned long maxnode, const unsigned long *frommask,
                   const unsigned long *tomask);
long move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                int *status, int flags);

/* Newer libnuma only; probed, never assumed. */
int numa_has_preferred_many(void);
int numa_has_home_node(void);
"""

ffibuilder = FFI()
ffibuilder.set_source("pynumabind._libnuma_ffi", None)
ffibuilder.cdef(CDEF)


if __name__ == "__main__":
    # Development convenience: emit _libnuma_ffi.py next to this file.
    here = os.path.dirname(os.path.abspath(__file__))
    ffibuilder.compile(tmpdir=os.path.dirname(here))
