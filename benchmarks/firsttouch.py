"""First touch of a large host buffer: prefaulted in parallel and bound, against a plain touch.

Each round, in this process, on the first allowed memory node (node ``N``):

* **plain touch**: a fresh anonymous private mapping written by one thread, one byte per
  page (``mapping[::PAGE] = ...``: one C loop, no policy), as an application first touching
  a freshly allocated pool does;
* **bound, parallel prefault**: a fresh mapping given ``MPOL_BIND`` on node ``N`` (``mbind``)
  and prefaulted by :mod:`pynumabind.binding._prefault` (threads bound to the node's CPUs,
  ``MADV_POPULATE_WRITE`` on a contiguous share each): what :func:`pynumabind.host_buffer`
  does before it returns;
* **host_buffer end to end**: ``pynumabind.host_buffer(size, node=N)``, which adds the
  mapping, the target's resolution and the census of every page (``move_pages``) to the
  prefault: what a caller waits for.

The two touches alternate, rotating which goes first, and each mapping is unmapped before
the next.  The ratio is plain / prefault (above 1: the prefault is faster), of medians with
the quartile range (``benchmarks.stats.ratio``).  On a machine with few CPUs per node the
parallel gain is small: the threads share the node's CPUs, and the kernel's page-fault path,
zeroing each page included, is most of the cost either way.
"""

from __future__ import annotations

import mmap
import time
from typing import Any, Dict, List

from .common import Settings, say
from .stats import ratio, summarize

__all__ = ["run_firsttouch"]

PAGE = mmap.PAGESIZE


def _fresh(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _plain(size: int) -> float:
    region = _fresh(size)
    try:
        ones = b"\1" * (size // PAGE)
        start = time.perf_counter()
        region[::PAGE] = ones
        return time.perf_counter() - start
    finally:
        region.close()


def _bound_prefault(size: int, node: int, topology: Any) -> float:
    from pynumabind._os import libnuma as _libnuma
    from pynumabind.binding import _buffers, _prefault

    region = _fresh(size)
    try:
        span, exported = _buffers.open_buffer(region)
        assert exported is not None and exported.view is not None
        try:
            segments = [(span.address, size, frozenset({node}))]
            writer = _prefault.page_writer(exported.view, span.address, size)
            start = time.perf_counter()
            _libnuma.mbind_range(span.address, size, _libnuma.MPOL_BIND, {node}, 0)
            _prefault.prefault(segments, topology, writer)
            return time.perf_counter() - start
        finally:
            exported.close()
    finally:
        region.close()


def _host_buffer(size: int, node: int) -> float:
    import pynumabind

    start = time.perf_counter()
    buf = pynumabind.host_buffer(size, node=node)
    elapsed = time.perf_counter() - start
    complete = buf.placement.complete and buf.placement.pages_per_node == {node: size // PAGE}
    buf.close()
    if not complete:
        raise RuntimeError(f"host_buffer left pages off node {node}: {buf.placement.summary()}")
    return elapsed


def run_firsttouch(settings: Settings, size: int = 0, rounds: int = 0) -> Dict[str, Any]:
    """The three timings per round and the ratio (see the module docstring)."""
    import pynumabind
    from pynumabind.binding import _prefault

    size = size or settings.firsttouch_bytes
    rounds = rounds or settings.firsttouch_rounds
    topology = pynumabind.detect_topology()
    node = min(n for n in topology.allowed_mems if topology.nodes[n].has_memory)
    free = topology.nodes[node].memory_free
    if free is not None and free < 2 * size:
        return {"error": f"node {node} has {free >> 20} MiB free, under twice {size >> 20} MiB"}
    usable = topology.allowed_cpus
    shares = _prefault.shares([(0, size, frozenset({node}))], topology, usable)
    say(f"  {size >> 20} MiB on node {node}, {rounds} rounds, {len(shares)} prefault threads")
    samples: Dict[str, List[float]] = {"plain": [], "prefault": [], "host_buffer": []}
    for index in range(rounds):
        order = ["plain", "prefault"] if index % 2 == 0 else ["prefault", "plain"]
        for name in order:
            if name == "plain":
                samples["plain"].append(_plain(size))
            else:
                samples["prefault"].append(_bound_prefault(size, node, topology))
        samples["host_buffer"].append(_host_buffer(size, node))
    summaries = {
        name: summarize([s * 1e3 for s in values], "ms") for name, values in samples.items()
    }
    speedup = ratio(
        "plain touch", summaries["plain"], "bound parallel prefault", summaries["prefault"]
    )
    return {
        "bytes": size,
        "node": node,
        "threads": len(shares),
        "cpus": sorted({c for share in shares for c in share.cpus}),
        "rounds": rounds,
        "samples_ms": {name: [s * 1e3 for s in values] for name, values in samples.items()},
        "summaries": {name: summary.to_dict() for name, summary in summaries.items()},
        "ratio": speedup.to_dict(),
        "clear": speedup.clear,
        "note": (
            "ratio = plain / prefault (above 1: the bound parallel prefault is faster); "
            "host_buffer end to end adds the mapping and the census of every page"
        ),
    }
