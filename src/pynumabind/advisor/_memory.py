"""Measure this machine for ``advise``: memory bandwidth and latency, CPU node x memory node.

The shell half of ``advise`` (the rule is :mod:`pynumabind.advisor.rule`, the
host<->GPU copies :mod:`pynumabind.advisor._copies`).  It stands on
:mod:`pynumabind.advisor._harness` (threads bound to a node, buffers placed
on one and checked with ``move_pages``, and the stop that lets Ctrl-C
through within milliseconds), and asks :mod:`pynumabind._os` for the
facts it sizes buffers by: the last-level caches (:mod:`pynumabind._os.caches`)
and the memory each node can give (:mod:`pynumabind._os.meminfo`).

* **Bandwidth.**  Threads bound to the CPU node each copy their slice of a
  source buffer to a destination buffer, both on the memory node.  The
  copy is ``ctypes.memmove``, a C call that releases the GIL, so the threads
  copy in parallel (one per allowed CPU of the node, at most
  :data:`MAX_THREADS`: one thread cannot saturate a server's memory).  Each
  buffer is several times the CPU node's last-level cache (the sum of its
  distinct LLC instances, from sysfs), so the copy streams from memory.
  The copying threads check a stop flag between :data:`COPY_CHUNK` pieces.
* **Sizes.**  Two buffers live on a memory node at once, so each gets at
  most a quarter of what the kernel can give there (:func:`memory_available`:
  the node's free memory plus half its reclaimable page cache and slab,
  from ``nodeN/meminfo``, never more than the system's ``MemAvailable``;
  ``MemFree`` alone would count a full page cache as used).  A buffer is
  never made smaller than :data:`MIN_LLC_MULTIPLE` times the LLC: a copy
  that fits in the cache measures the cache.  A memory node that cannot
  hold two such buffers is not measured, and its cells say why
  (:attr:`MemoryCell.skipped <pynumabind.records.values.MemoryCell.skipped>`).
  An explicit ``buffer_bytes`` is used as given, with a note when it is
  below that size.  A sample is ``2 x bytes / seconds`` (read + write,
  STREAM's convention) over enough passes to last
  :attr:`Settings.sample_seconds` (a first, untimed round per cell sets the
  number of passes).  The samples are taken round-robin over the cells, so
  load from elsewhere during the run falls on every cell alike, not on the
  one measured at that moment.
* **Latency.**  A pointer chase: one bound thread follows a chain of
  dependent loads through the buffer, every step to another 4 KiB page
  chosen at random (so it includes a TLB miss unless transparent huge pages
  back the buffer), in a Python loop.  The loop's own cost is measured the
  same way on a chain small enough to stay in the L1 cache and subtracted:
  that *overhead* is reported too, and a latency smaller than the loop's
  jitter is not reported at all.  The chain continues across samples, so
  no sample re-reads lines the previous one left in the cache; the first
  round is a warm-up.
* **Weighted interleave** (:func:`measure_interleave`).  For each set the
  rule chose to measure (:func:`pynumabind.advisor.rule.interleave_cells`:
  a CPU node's own memory and the memory-only nodes, with weights from the
  matrix's bandwidths), a source and a destination of the matrix's buffer
  size are laid out by those weights with :func:`pynumabind.bind_memory`
  (its runs, each bound to one node) before their first touch, and copied
  by the same crew of threads bound to the CPU node, calibrated and sampled
  as a matrix cell is.  Where the source's sampled pages landed is reported
  (pages per node), and each sample is taken in turn with one of the
  local node (buffers on the CPU node's own memory, as its matrix cell), so
  that the two are compared under the same load: the cell keeps both
  (``bandwidth``, ``local_bandwidth``), and the matrix's own cells are
  left as they were measured.

Nothing here runs a shell, a subprocess or a compiler.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import functools
import math
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .._os import SYSFS_ROOT
from .._os import caches as _caches
from .._os import meminfo as _meminfo
from ..errors import PynumabindError
from ..model import Topology
from ..records.values import InterleaveCell, MemoryCell, MemoryMatrix, Placement, Spread
from ._harness import (
    PAGE,
    STOP_WAIT,
    Buffer,
    Stopped,
    bind_this_thread,
    buffers_on,
    placement,
    run_bound,
    weighted_buffers,
)

__all__ = [
    "MAX_THREADS",
    "MIN_LLC_MULTIPLE",
    "Settings",
    "buffer_size",
    "chase_chain",
    "chase_overhead",
    "measure_interleave",
    "measure_memory",
    "memory_available",
]

MAX_THREADS = 32
MIN_LLC_MULTIPLE = 2  # no buffer below this many times the LLC: it would measure the cache
LINE = 64  # bytes per cache line
WORD = 8  # bytes per chain entry
ROUND_TIMEOUT = 120.0  # seconds; a wedged measuring thread must not hang advise
COPY_CHUNK = 16 << 20  # bytes per memmove: a stop request is seen within one chunk (~2 ms)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    """Sizes and repeats.  ``quick`` aims at ~15 s on a two-node server, the default ~60 s."""

    quick: bool = False
    buffer_bytes: Optional[int] = None  # None: several times the LLC (see buffer_size)
    repeats: Optional[int] = None
    latency: bool = True

    @property
    def llc_multiple(self) -> int:
        return 2 if self.quick else 4

    @property
    def min_buffer(self) -> int:
        return (32 if self.quick else 64) << 20

    max_buffer: int = 1 << 30

    @property
    def samples(self) -> int:
        return self.repeats if self.repeats is not None else (5 if self.quick else 9)

    @property
    def sample_seconds(self) -> float:
        return 0.05 if self.quick else 0.15

    @property
    def chase_steps(self) -> int:
        return 100_000 if self.quick else 400_000

    @property
    def copy_bytes(self) -> int:
        """Size of one host<->GPU copy."""
        return self.buffer_bytes or ((64 if self.quick else 256) << 20)


def buffer_size(settings: Settings, llc: Optional[int], available: Optional[int]) -> Optional[int]:
    """Bytes of one buffer: several LLCs, at least ``min_buffer``, within the node's memory.

    Two buffers (source and destination) live on the node at once, so each
    gets at most a quarter of ``available`` (bytes the kernel can give
    there).  None when that is below :data:`MIN_LLC_MULTIPLE` times ``llc``:
    such a buffer would measure the cache, so the node is not measured.
    An explicit ``settings.buffer_bytes`` is returned as given.
    """
    if settings.buffer_bytes is not None:
        return max(PAGE, settings.buffer_bytes - settings.buffer_bytes % PAGE)
    floor = MIN_LLC_MULTIPLE * (llc or 0)
    size = max(settings.min_buffer, settings.llc_multiple * (llc or 0))
    size = min(size, max(settings.max_buffer, floor))  # the cap never undercuts the floor
    if available is not None:
        size = min(size, available // 4)
    size -= size % PAGE
    return size if size >= max(floor, PAGE) else None


_NODE_MEMINFO = ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")


def memory_available(
    nodes: Sequence[int], sysfs_root: str = SYSFS_ROOT, meminfo: str = _meminfo.PROC_MEMINFO
) -> Dict[int, Optional[int]]:
    """Bytes the kernel can give on each node; None where unknown.

    Per node (``nodeN/meminfo``): ``MemFree`` plus half of the file pages
    and the reclaimable slab (the kernel keeps part of them; half is on the
    safe side), at most the system's ``MemAvailable`` (``meminfo``, the
    machine's ``/proc/meminfo`` unless a test names another).  A node
    without a readable meminfo gets ``MemAvailable`` when it is the only
    node given.  Both files are read by :mod:`pynumabind._os.meminfo`.
    """
    system = (_meminfo.system_meminfo(meminfo) or {}).get("MemAvailable")
    found: Dict[int, Optional[int]] = {}
    for node, given in _meminfo.nodes_meminfo(sysfs_root, nodes).items():
        fields = given or {}
        value: Optional[int] = system if len(nodes) == 1 else None
        if "MemFree" in fields:
            reclaimable = sum(fields.get(name, 0) for name in _NODE_MEMINFO[1:])
            estimate = fields["MemFree"] + reclaimable // 2
            value = estimate if system is None else min(estimate, system)
        found[node] = value
    return found


# --------------------------------------------------------------- bandwidth


class _CopyCrew:
    """``threads`` threads bound to ``cpus``; each round, each copies its slice of a buffer.

    The threads are started (and bound) once and reused for every memory
    node: a round names the source, destination, size and passes.  The main
    thread posts a round and waits for it under one condition; the wait is
    interruptible, and every copy is cut into :data:`COPY_CHUNK` pieces with
    a stop check between them, so an interrupt stops the crew within
    milliseconds.  No wait is on a barrier: a thread that is gone cannot
    hold the others (or the caller) for a timeout.
    """

    def __init__(self, cpus: frozenset[int], threads: int) -> None:
        self.threads = threads
        self.errors: List[BaseException] = []
        self._cond = threading.Condition()
        self._job: Tuple[Buffer, Buffer, int, int] = (None, None, 0, 0)  # type: ignore[assignment]
        self._round = 0  # number of the round posted last
        self._pending = 0  # threads still copying in it
        self._stopping = False
        self.crew = [
            threading.Thread(
                target=self._work, args=(cpus, k), name=f"pynumabind-copy-{k}", daemon=True
            )
            for k in range(threads)
        ]
        for thread in self.crew:
            thread.start()

    def _next_job(self, seen: int) -> Tuple[int, Optional[Tuple[Buffer, Buffer, int, int]]]:
        """(its number, the round after ``seen``); no job when the crew stops or idles too long."""
        with self._cond:
            deadline = time.monotonic() + ROUND_TIMEOUT
            while self._round == seen and not self._stopping:
                left = deadline - time.monotonic()
                if left <= 0:
                    return seen, None  # an orphaned crew does not live on
                self._cond.wait(left)
            return self._round, None if self._stopping else self._job

    def _work(self, cpus: frozenset[int], k: int) -> None:
        try:
            bind_this_thread(cpus)
        except BaseException as exc:
            with self._cond:
                self.errors.append(exc)
                self._cond.notify_all()
            return
        seen = 0
        while True:
            seen, job = self._next_job(seen)
            if job is None:
                return
            try:
                self._copy(job, k)
            except Stopped:
                pass
            except BaseException as exc:
                with self._cond:
                    self.errors.append(exc)
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def _copy(self, job: Tuple[Buffer, Buffer, int, int], k: int) -> None:
        src, dst, part, passes = job
        with src.use(), dst.use():
            first = k * part
            for _ in range(passes):
                for offset in range(first, first + part, COPY_CHUNK):
                    if self._stopping or src.closing or dst.closing:
                        raise Stopped()
                    length = min(COPY_CHUNK, first + part - offset)
                    ctypes.memmove(dst.address + offset, src.address + offset, length)

    def round(self, src: Buffer, dst: Buffer, passes: int) -> float:
        """GB/s of every thread copying its slice of ``src`` into ``dst`` ``passes`` times."""
        part = src.size // self.threads - (src.size // self.threads) % LINE
        with self._cond:
            if self.errors or self._stopping:
                raise self._failure()
            self._job = (src, dst, part, passes)
            self._pending = self.threads
            self._round += 1
            self._cond.notify_all()
        began = time.perf_counter()
        with self._cond:
            deadline = time.monotonic() + ROUND_TIMEOUT
            while self._pending and not self.errors:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.25))
            seconds = max(time.perf_counter() - began, 1e-9)
            if self._pending or self.errors:
                failure = self._failure()
            else:
                return 2 * part * self.threads * passes / seconds / 1e9  # read + write
        self.close()
        raise failure

    def _failure(self) -> BaseException:
        if self.errors:
            return self.errors[0]
        return PynumabindError("a measuring thread stopped answering")

    def close(self) -> None:
        """Stop the threads (each within one chunk) and wait briefly for them to end.

        The buffers do not depend on this wait (they wait for their own
        users), so it stays interruptible.
        """
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + STOP_WAIT
        for thread in self.crew:
            thread.join(max(0.0, deadline - time.monotonic()))


# ----------------------------------------------------------------- latency


def chase_chain(pages: int, seed: int = 1) -> array.array:  # type: ignore[type-arg]
    """A single cycle through every cache line of ``pages`` pages, one word per line used.

    Entry ``i`` (an index in 8-byte words) holds the index of the next load.
    The walk visits every page, in random order, at one line offset, then
    every page again at the next offset (offsets also in random order): each
    step lands on another page, and no step is predictable from the last.
    Built with strided slice assignments: a few list operations per page,
    not per line, which keeps a several-hundred-MiB chain to a second.
    """
    rng = random.Random(seed)  # noqa: S311 - a shuffle, not a secret
    page_words = PAGE // WORD
    order = list(range(pages))
    rng.shuffle(order)
    slots = [s * (LINE // WORD) for s in range(PAGE // LINE)]
    rng.shuffle(slots)
    successor = [0] * pages  # page -> page visited after it within one pass
    for position, page in enumerate(order):
        successor[page] = order[(position + 1) % pages]
    bases = [successor[page] * page_words for page in range(pages)]
    chain = array.array("Q", bytes(pages * PAGE))
    last = order[-1]
    for k, slot in enumerate(slots):
        values = array.array("Q", [base + slot for base in bases])
        following = slots[(k + 1) % len(slots)]
        values[last] = order[0] * page_words + following  # end of a pass: next offset
        chain[slot::page_words] = values
    return chain


def _chase(view: memoryview, start: int, steps: int) -> Tuple[float, int]:
    """(ns per dependent load, where the chase stopped)."""
    index = start
    began = time.perf_counter_ns()
    for _ in range(steps):
        index = view[index]
    return (time.perf_counter_ns() - began) / steps, index


def chase_overhead(steps: int, samples: int) -> Spread:
    """ns per step of the same loop over a 4-page (L1-resident) chain: the method's cost."""
    chain = chase_chain(4)
    view = memoryview(chain)
    _chase(view, 0, steps)
    return Spread.of([_chase(view, 0, steps)[0] for _ in range(samples)])


def _net_latency(raw: Spread, overhead: Spread) -> Optional[Spread]:
    """``raw`` less the loop's median cost; None when that is within the loop's own jitter."""
    cost = overhead.median
    net = Spread(
        raw.n, raw.median - cost, raw.q1 - cost, raw.q3 - cost, raw.min - cost, raw.max - cost
    )
    jitter = max(overhead.max - overhead.min, 0.5)
    return net if net.min > jitter else None


# ------------------------------------------------------------ the matrix


@dataclass
class _NodePlan:
    cpu_nodes: List[int]
    memory_nodes: List[int]
    cpus: Dict[int, frozenset[int]]
    free: Dict[int, Optional[int]]


def _node_plan(topology: Topology) -> _NodePlan:
    """The CPU nodes with allowed CPUs and the allowed memory nodes that have memory."""
    cpus = {
        n.id: n.cpus & topology.allowed_cpus
        for n in topology.nodes.values()
        if n.cpus & topology.allowed_cpus
    }
    memory = [
        n.id for n in topology.nodes.values() if n.has_memory and n.id in topology.allowed_mems
    ]
    free = {n.id: n.memory_free for n in topology.nodes.values()}
    return _NodePlan(sorted(cpus), sorted(memory), cpus, free)


class _Cells:
    """Samples, placements and errors per (CPU node, memory node), gathered round by round."""

    def __init__(self, plan: _NodePlan) -> None:
        self.plan = plan
        self.bandwidth: Dict[Tuple[int, int], List[float]] = {}
        self.latency: Dict[Tuple[int, int], List[float]] = {}
        self.errors: Dict[Tuple[int, int], str] = {}
        self.skipped: Dict[int, str] = {}  # memory node -> why it is not measured
        self.placements: Dict[int, Placement] = {}
        self.threads = {c: min(len(plan.cpus[c]), MAX_THREADS) for c in plan.cpu_nodes}

    def pairs(self) -> List[Tuple[int, int]]:
        return [
            (c, m)
            for c in self.plan.cpu_nodes
            for m in self.plan.memory_nodes
            if (c, m) not in self.errors and m not in self.skipped
        ]

    def fail(self, pairs: Sequence[Tuple[int, int]], exc: BaseException) -> None:
        for pair in pairs:
            self.errors.setdefault(pair, f"{type(exc).__name__}: {exc}")

    def cell(self, c: int, m: int, overhead: Optional[Spread]) -> MemoryCell:
        if m in self.skipped:
            return MemoryCell(threads=self.threads[c], skipped=self.skipped[m])
        if (c, m) in self.errors:
            return MemoryCell(threads=self.threads[c], error=self.errors[(c, m)])
        raw = self.latency.get((c, m))
        latency = _net_latency(Spread.of(raw), overhead) if raw and overhead else None
        return MemoryCell(
            Spread.of(self.bandwidth[(c, m)]), latency, self.placements.get(m), self.threads[c]
        )


_MEASURED_ERRORS = (PynumabindError, OSError, MemoryError)


def _bandwidth_rounds(
    cells: _Cells, buffers: Dict[int, List[Buffer]], settings: Settings, progress: Progress
) -> None:
    """Calibrate every cell, then take the samples round-robin over the cells.

    Interleaving puts every cell's samples across the whole run, so a burst
    of load from elsewhere lands on all cells alike instead of on one.
    """
    crews: Dict[int, _CopyCrew] = {}
    passes: Dict[Tuple[int, int], int] = {}
    try:
        for c in cells.plan.cpu_nodes:
            crews[c] = _CopyCrew(cells.plan.cpus[c], cells.threads[c])
        for c, m in cells.pairs():
            progress(f"memory: CPU node {c} ({cells.threads[c]} threads) x memory node {m}")
            src, dst = buffers[m]
            try:
                warm = crews[c].round(src, dst, 1)
                seconds = 2 * src.size / (warm * 1e9)
                passes[(c, m)] = max(1, math.ceil(settings.sample_seconds / max(seconds, 1e-6)))
            except _MEASURED_ERRORS as exc:
                cells.fail([(c, m)], exc)
        for _ in range(settings.samples):
            for c, m in cells.pairs():
                src, dst = buffers[m]
                try:
                    value = crews[c].round(src, dst, passes[(c, m)])
                    cells.bandwidth.setdefault((c, m), []).append(value)
                except _MEASURED_ERRORS as exc:
                    cells.fail([(c, m)], exc)
    finally:
        for crew in crews.values():
            crew.close()


def _latency_rounds(
    cells: _Cells, buffers: Dict[int, List[Buffer]], settings: Settings, progress: Progress
) -> Spread:
    """Chain every memory node's source buffer, time the loop alone, then chase round-robin."""
    progress("latency: building the pointer-chase chain and timing the loop itself")
    size = min(b[0].size for b in buffers.values())
    chain = chase_chain(size // PAGE)
    address, _ = chain.buffer_info()
    for src, _dst in buffers.values():
        ctypes.memmove(src.address, address, size)  # overwrites data, not placement
    overhead = chase_overhead(settings.chase_steps, settings.samples)
    views = {m: memoryview(b[0].map).cast("Q") for m, b in buffers.items()}
    where = dict.fromkeys(views, 0)  # each chase continues where the last one stopped
    try:
        for round_number in range(settings.samples + 1):  # round 0 is a warm-up
            progress(f"latency: round {round_number + 1} of {settings.samples + 1}")
            for c, m in cells.pairs():
                try:
                    work = functools.partial(_chase, views[m], where[m], settings.chase_steps)
                    took, where[m] = run_bound(cells.plan.cpus[c], work)
                except _MEASURED_ERRORS as exc:
                    cells.fail([(c, m)], exc)
                    continue
                if round_number:
                    cells.latency.setdefault((c, m), []).append(took)
    finally:
        for view in views.values():
            view.release()
    return overhead


def measure_memory(
    topology: Topology,
    settings: Settings,
    progress: Progress,
    sysfs_root: str = SYSFS_ROOT,
) -> MemoryMatrix:
    """Bandwidth (and latency) for every allowed CPU node x allowed memory node."""
    plan = _node_plan(topology)
    if not plan.cpu_nodes or not plan.memory_nodes:
        raise PynumabindError(
            "no CPU node with allowed CPUs or no allowed memory node with memory: "
            "nothing to measure"
        )
    llcs = [_caches.llc_bytes(sorted(plan.cpus[c]), sysfs_root) or 0 for c in plan.cpu_nodes]
    llc = max(llcs) or None
    size, skipped, notes = _sizes(plan, settings, llc, sysfs_root)
    cells = _Cells(plan)
    cells.skipped.update(skipped)
    overhead: Optional[Spread] = None
    with contextlib.ExitStack() as stack:
        buffers: Dict[int, List[Buffer]] = {}
        for m in plan.memory_nodes:
            if m in skipped:
                progress(f"memory: node {m} skipped: {skipped[m]}")
                continue
            progress(f"memory: placing 2 x {size >> 20} MiB on memory node {m}")
            try:
                buffers[m] = stack.enter_context(buffers_on(m, [size, size], topology))
                cells.placements[m] = placement(buffers[m][0].address, size, m)
            except _MEASURED_ERRORS as exc:
                cells.fail([(c, m) for c in plan.cpu_nodes], exc)
        if buffers:
            _bandwidth_rounds(cells, buffers, settings, progress)
            if settings.latency:
                overhead = _latency_rounds(cells, buffers, settings, progress)
    rows = tuple(
        tuple(cells.cell(c, m, overhead) for m in plan.memory_nodes) for c in plan.cpu_nodes
    )
    return MemoryMatrix(
        tuple(plan.cpu_nodes),
        tuple(plan.memory_nodes),
        rows,
        buffer_bytes=size,
        llc_bytes=llc,
        latency_overhead=overhead,
        method=_method(size, settings.latency),
        notes=tuple(notes),
    )


# ------------------------------------------------------- weighted interleave


def _interleave_one(
    cell: InterleaveCell,
    topology: Topology,
    size: int,
    settings: Settings,
    progress: Progress,
) -> InterleaveCell:
    """``cell`` measured, with the local node's figure taken in turn (or with its error)."""
    from dataclasses import replace

    from .._weights import format_weights

    plan = _node_plan(topology)
    cpus = plan.cpus[cell.cpu_node]
    threads = min(len(cpus), MAX_THREADS)
    progress(
        f"memory: CPU node {cell.cpu_node} ({threads} threads) x weighted interleave "
        f"{format_weights(cell.weights)} ({size >> 20} MiB buffers)"
    )
    crew: Optional[_CopyCrew] = None
    try:
        with contextlib.ExitStack() as stack:
            mixed = stack.enter_context(
                weighted_buffers(dict(cell.weights), [size, size], topology)
            )
            local = stack.enter_context(buffers_on(cell.local, [size, size], topology))
            where = placement(mixed[0].address, size, cell.local)
            crew = _CopyCrew(cpus, threads)
            passes = []
            for src, dst in (mixed, local):
                warm = crew.round(src, dst, 1)
                seconds = 2 * src.size / (warm * 1e9)
                passes.append(max(1, math.ceil(settings.sample_seconds / max(seconds, 1e-6))))
            weighted: List[float] = []
            alone: List[float] = []
            for _ in range(settings.samples):  # the two in turn: the same load on both
                weighted.append(crew.round(mixed[0], mixed[1], passes[0]))
                alone.append(crew.round(local[0], local[1], passes[1]))
    except _MEASURED_ERRORS as exc:
        return replace(cell, threads=threads, error=f"{type(exc).__name__}: {exc}")
    finally:
        if crew is not None:
            crew.close()
    return replace(
        cell,
        bandwidth=Spread.of(weighted),
        local_bandwidth=Spread.of(alone),
        placement=where,
        threads=threads,
    )


def measure_interleave(
    topology: Topology,
    memory: MemoryMatrix,
    cells: Sequence[InterleaveCell],
    settings: Settings,
    progress: Progress,
) -> MemoryMatrix:
    """``memory`` with its :attr:`~pynumabind.records.values.MemoryMatrix.interleave` cells.

    Each cell not ``skipped`` is measured (see the module docstring), with
    the matrix's buffer size; a skipped one is kept as the rule gave it.
    """
    from dataclasses import replace

    done: List[InterleaveCell] = []
    for cell in cells:
        if cell.skipped is not None or cell.cpu_node not in _node_plan(topology).cpus:
            done.append(cell)
            continue
        done.append(_interleave_one(cell, topology, memory.buffer_bytes, settings, progress))
    return replace(memory, interleave=tuple(done))


def _sizes(
    plan: _NodePlan, settings: Settings, llc: Optional[int], sysfs_root: str
) -> Tuple[int, Dict[int, str], List[str]]:
    """(bytes per buffer, why each memory node too short of memory is skipped, notes).

    One size for every measured node, so their figures compare like with like.
    """
    notes: List[str] = []
    if llc is None:
        notes.append(
            "LLC size unreadable from sysfs: buffers are the minimum size, and whether they "
            "exceed the cache is unknown"
        )
    available = memory_available(plan.memory_nodes, sysfs_root)
    sizes: Dict[int, int] = {}
    skipped: Dict[int, str] = {}
    for m in plan.memory_nodes:
        known = available.get(m)
        if known is None:
            known = plan.free.get(m)  # MemFree from the topology: better than nothing
        size = buffer_size(settings, llc, known)
        if size is None:
            skipped[m] = (
                f"not measured: memory node {m} can give {_mib(known or 0)} now, so a buffer "
                f"could have {_mib((known or 0) // 4)} (a quarter: two live there at once), "
                f"less than {MIN_LLC_MULTIPLE} x the last-level cache ({_mib(llc or 0)}): it "
                "would measure the cache, not memory"
            )
        else:
            sizes[m] = size
    size = min(sizes.values(), default=0)
    if settings.buffer_bytes is not None and llc and size < MIN_LLC_MULTIPLE * llc:
        notes.append(
            f"buffers of {_mib(size)} (buffer_bytes) are under {MIN_LLC_MULTIPLE} x the "
            f"last-level cache ({_mib(llc)}): the figures are partly cache speed"
        )
    return size, skipped, notes


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB" if size >= 1 << 20 else f"{size} bytes"


def _method(size: int, latency: bool) -> str:
    """How the memory matrix was measured, for the report."""
    text = (
        f"{size >> 20} MiB source and destination on the memory node, copied with "
        "ctypes.memmove (GIL released) by threads bound to the CPU node; GB/s counts "
        "read + write; samples taken round-robin over the cells"
    )
    if latency:
        text += (
            "; latency: Python pointer chase, one random 4 KiB page per load, the loop's "
            "own cost subtracted"
        )
    return text
