"""First touch, paid up front: a fresh mapping's pages faulted in by threads bound to their nodes.

The rules are "Prefault" in :mod:`pynumabind.binding.host`; this is how they
are met.  :func:`prefault` takes the segments a placement laid out (the
whole range and its nodes, or the runs of a weighted layout, one node each)
and groups them by their nodes: each group's pages are touched by its own
threads, each bound (``sched_setaffinity`` of that thread alone, through
:mod:`pynumabind._os.proc`) to the allowed CPUs of the group's nodes, and
each taking one contiguous share of the group's bytes.  A node without
CPUs (a memory-only node: CXL, HBM) is touched from the CPUs of the nearest
node that has some; where none of them is allowed, from the process's
allowed CPUs.  So the pages land right even under a policy that only
prefers the nodes, and the zeroing of each page runs next to its memory.

The touch is ``madvise(MADV_POPULATE_WRITE)`` on the share (Linux 5.14):
the kernel faults every page in as a write would, one fault per page (a
transparent huge page where the mapping allows one), without writing data,
and releases the GIL for the call (a ctypes foreign call), so the threads
run in parallel.  On an older kernel (``EINVAL``) each page is written
once instead, one zero byte per page through a memoryview of the share
(the bytes of a fresh anonymous page are zero already); that holds the GIL,
so the threads then take turns, the pages still landing by their thread's
CPUs and the mapping's policy.

A failure in any thread (``ENOMEM``: the node is full under ``MPOL_BIND``;
``EFAULT``) is raised in the caller once every thread has ended.
"""

from __future__ import annotations

import errno
import mmap
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Sequence, Tuple

from .._os import libnuma as _libnuma
from .._os import proc as _proc
from .._text import format_ids
from ..errors import NumaSyscallError
from ._census import Segment

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Topology

__all__ = ["MADV_POPULATE_WRITE", "MAX_THREADS", "Share", "page_writer", "prefault", "shares"]

#: ``madvise`` advice (linux/mman.h, Linux 5.14): fault the range in as writes would.
MADV_POPULATE_WRITE = 23
#: At most this many touching threads in all (each a contiguous share of one group).
MAX_THREADS = 16
#: No thread gets fewer bytes than this (smaller buffers are touched by fewer threads).
MIN_SHARE = 4 << 20


@dataclass(frozen=True)
class Share:
    """One thread's work: ``pieces`` (start, length) touched from ``cpus``, for ``nodes``."""

    nodes: frozenset[int]
    cpus: frozenset[int]
    pieces: Tuple[Tuple[int, int], ...]


def _cpus_for(nodes: frozenset[int], topology: Topology, usable: frozenset[int]) -> frozenset[int]:
    """The usable CPUs of ``nodes``; else of the nearest CPU node; else all usable CPUs."""
    own = frozenset(c for n in nodes if n in topology.nodes for c in topology.nodes[n].cpus)
    if own & usable:
        return own & usable
    for node in sorted(nodes):
        if node not in topology.nodes:
            continue
        for other, _ in topology.nearest_cpu_nodes(node):
            near = topology.nodes[other].cpus & usable
            if near:
                return near
    return usable


def _split(pieces: Sequence[Tuple[int, int]], count: int) -> List[Tuple[Tuple[int, int], ...]]:
    """``pieces`` cut into ``count`` contiguous shares of (nearly) equal whole pages."""
    page = mmap.PAGESIZE
    total = sum(length for _, length in pieces) // page
    bounds = [total * i // count for i in range(count + 1)]
    out: List[Tuple[Tuple[int, int], ...]] = []
    flat = [(start, length // page) for start, length in pieces]
    for i in range(count):
        want_from, want_to = bounds[i], bounds[i + 1]
        share: List[Tuple[int, int]] = []
        offset = 0
        for start, pages in flat:
            lo, hi = max(want_from, offset), min(want_to, offset + pages)
            if lo < hi:
                share.append((start + (lo - offset) * page, (hi - lo) * page))
            offset += pages
        if share:
            out.append(tuple(share))
    return out


def shares(
    segments: Sequence[Segment],
    topology: Topology,
    usable: frozenset[int],
    max_threads: int = MAX_THREADS,
) -> List[Share]:
    """Who touches what: each node group's pages split among threads on its CPUs."""
    groups: Dict[frozenset[int], List[Tuple[int, int]]] = {}
    for start, length, nodes in segments:
        groups.setdefault(frozenset(nodes), []).append((start, length))
    total = sum(length for _, length, _ in segments)
    out: List[Share] = []
    for nodes, pieces in sorted(groups.items(), key=lambda item: sorted(item[0])):
        cpus = _cpus_for(nodes, topology, usable)
        size = sum(length for _, length in pieces)
        budget = max(1, max_threads * size // max(total, 1))
        count = max(1, min(len(cpus), budget, size // MIN_SHARE))
        out.extend(Share(nodes, cpus, part) for part in _split(pieces, count))
    return out


def _touch(start: int, length: int, writer: Callable[[int, int], None]) -> None:
    try:
        _libnuma.madvise(start, length, MADV_POPULATE_WRITE)
    except NumaSyscallError as exc:
        if exc.errno != errno.EINVAL:
            raise
        writer(start, length)  # a kernel before 5.14: one write per page


def prefault(
    segments: Sequence[Segment],
    topology: Topology,
    writer: Callable[[int, int], None],
    max_threads: int = MAX_THREADS,
) -> Tuple[str, ...]:
    """Touch every page of ``segments`` from threads bound to their nodes; notes on how.

    ``writer(start, length)`` writes one byte per page of the range (the
    fallback without ``MADV_POPULATE_WRITE``).  Raises the first failure of
    any thread, after all have ended.
    """
    usable = _proc.process_affinity()
    plan = shares(segments, topology, usable, max_threads)
    errors: List[BaseException] = []
    lock = threading.Lock()

    def body(share: Share) -> None:
        try:
            _proc.set_thread_affinity(0, share.cpus)
            for start, length in share.pieces:
                _touch(start, length, writer)
        except BaseException as exc:  # re-raised in the caller
            with lock:
                errors.append(exc)

    threads = [
        threading.Thread(target=body, args=(share,), name="pynumabind-prefault", daemon=True)
        for share in plan
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    by_group: Dict[frozenset[int], List[Share]] = {}
    for share in plan:
        by_group.setdefault(share.nodes, []).append(share)
    told = "; ".join(
        f"node {format_ids(nodes)}: {len(group)} thread(s) on CPUs {format_ids(group[0].cpus)}"
        for nodes, group in sorted(by_group.items(), key=lambda item: sorted(item[0]))
    )
    return (f"prefaulted in parallel: {told}",)


def page_writer(view: memoryview, base: int, size: int) -> Callable[[int, int], None]:
    """The fallback touch: one zero byte per page of ``view`` (``size`` bytes from ``base``).

    The last page of a mapping whose length is not whole pages is written at
    its first byte, which the view reaches.
    """

    def write(start: int, length: int) -> None:
        page = mmap.PAGESIZE
        for offset in range(start - base, min(start - base + length, size), page):
            view[offset] = 0

    return write
