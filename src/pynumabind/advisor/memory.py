"""Measure this machine for ``advise``: memory bandwidth and latency, CPU node x memory node.

The shell half of ``advise`` (the rule is :mod:`pynumabind.advisor.rule`, the
host<->GPU copies :mod:`pynumabind.advisor.copies`).  Everything runs in this
process, in fresh threads, so nothing here changes the caller's own
binding:

* **Placement.**  Buffers are anonymous mappings first touched by the
  calling thread inside :func:`pynumabind.memory_on` (``MPOL_BIND`` to the
  memory node), which restores the thread's policy afterwards.  Each mapping
  is also bound itself (``mbind``, ``MPOL_BIND``) before it is touched: the
  copying threads run under the default policy, and automatic NUMA balancing
  moves pages of a mapping without a policy of its own towards the node of
  the threads touching them, so a remote cell's buffer would drift to the
  CPU node mid-measurement (seen in the QEMU guest).  Where ``mbind`` is
  refused (a seccomp profile) the thread's policy alone places them.  Where each
  buffer really landed is then asked of the kernel (``move_pages`` on up to
  :data:`PLACEMENT_SAMPLES` evenly spaced pages) and reported beside the
  number: a measurement whose buffer is not where it should be says so.
* **Bandwidth.**  Threads bound to the CPU node (``sched_setaffinity`` of
  each thread itself: the caller's mask never changes) each copy their slice
  of a source buffer to a destination buffer, both on the memory node.  The
  copy is ``ctypes.memmove``, a C call that releases the GIL, so the threads
  copy in parallel (one per allowed CPU of the node, at most
  :data:`MAX_THREADS`: one thread cannot saturate a server's memory).  Each
  buffer is several times the CPU node's last-level cache (the sum of its
  distinct LLC instances, from sysfs), so the copy streams from memory.
* **Sizes.**  Two buffers live on a memory node at once, so each gets at
  most a quarter of what the kernel can give there (:func:`memory_available`:
  the node's free memory plus half its reclaimable page cache and slab,
  from ``nodeN/meminfo``, never more than the system's ``MemAvailable``;
  ``MemFree`` alone would count a full page cache as used).  A buffer is
  never made smaller than :data:`MIN_LLC_MULTIPLE` times the LLC: a copy
  that fits in the cache measures the cache.  A memory node that cannot
  hold two such buffers is not measured, and its cells say why
  (:attr:`MemoryCell.skipped`).  An explicit ``buffer_bytes`` is used as
  given, with a note when it is below that size.  A
  sample is ``2 x bytes / seconds`` (read + write, STREAM's convention) over
  enough passes to last :attr:`Settings.sample_seconds` (a first, untimed
  round per cell sets the number of passes).  The samples are taken
  round-robin over the cells, so load from elsewhere during the run falls
  on every cell alike, not on the one measured at that moment.
* **Interrupts.**  Ctrl-C (KeyboardInterrupt) reaches the caller within
  milliseconds, wherever it lands: the main thread never waits on a
  barrier or a long timeout, only on conditions a signal interrupts; the
  copying threads check a stop flag between :data:`COPY_CHUNK` pieces; the
  first touch is cut into :data:`TOUCH_CHUNK` pieces.  A buffer is never
  unmapped under a running copy (that is a segfault, not an exception):
  each buffer counts the threads using it and is unmapped only when none
  is, and an interrupted or outlasted close (:data:`STOP_WAIT`) leaves the
  mapping in place instead.
* **Latency.**  A pointer chase: one bound thread follows a chain of
  dependent loads through the buffer, every step to another 4 KiB page
  chosen at random (so it includes a TLB miss unless transparent huge pages
  back the buffer), in a Python loop.  The loop's own cost is measured the
  same way on a chain small enough to stay in the L1 cache and subtracted:
  that *overhead* is reported too, and a latency smaller than the loop's
  jitter is not reported at all.  The chain continues across samples, so
  no sample re-reads lines the previous one left in the cache; the first
  round is a warm-up.

Nothing here runs a shell, a subprocess or a compiler.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import functools
import math
import mmap
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from ..errors import NumaSyscallError, PynumabindError
from ..model import Topology
from ..records.values import Firmware, HmatEntry, MemoryCell, MemoryMatrix, Placement, Spread

__all__ = [
    "MAX_THREADS",
    "PLACEMENT_SAMPLES",
    "Settings",
    "chase_chain",
    "firmware",
    "llc_bytes",
    "measure_memory",
    "placement",
    "run_bound",
]

MAX_THREADS = 32
MIN_LLC_MULTIPLE = 2  # no buffer below this many times the LLC: it would measure the cache
PLACEMENT_SAMPLES = 1024
PAGE = mmap.PAGESIZE
LINE = 64  # bytes per cache line
WORD = 8  # bytes per chain entry
ROUND_TIMEOUT = 120.0  # seconds; a wedged measuring thread must not hang advise
STOP_WAIT = 5.0  # seconds an interrupted measurement waits for its threads to end
COPY_CHUNK = 16 << 20  # bytes per memmove: a stop request is seen within one chunk (~2 ms)
TOUCH_CHUNK = 64 << 20  # bytes per first-touch memset

Progress = Callable[[str], None]
_T = TypeVar("_T")


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


# ------------------------------------------------------------ bound threads


class Stop(threading.Event):
    """Asks measuring threads to stop; ``stuck`` when one did not within :data:`STOP_WAIT`.

    The thread that owns buffers a measuring thread uses frees them only
    when ``stuck`` is false: a buffer is never freed under a running copy
    (a copy into unmapped memory is a segfault, not an exception).
    """

    stuck: bool = False


def run_bound(
    cpus: frozenset[int],
    work: Callable[[], _T],
    name: str = "pynumabind-advise",
    stop: Optional[Stop] = None,
) -> _T:
    """``work()`` in a fresh thread bound to ``cpus``; its result, or its exception re-raised.

    Only the new thread's mask is set (``sched_setaffinity(0)`` from inside
    it), so the caller's binding is never touched.  The wait is
    interruptible: a KeyboardInterrupt reaches the caller at once.  With
    ``stop``, the interrupt first sets it (``work`` checks it between its
    steps) and waits up to :data:`STOP_WAIT` for the thread to end, so the
    caller may free what the thread used; ``stop.stuck`` says it did not end.
    """
    box: Dict[str, Any] = {}
    finished = threading.Event()

    def body() -> None:
        try:
            _bind_this_thread(cpus)
            box["result"] = work()
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc
        finally:
            finished.set()

    thread = threading.Thread(target=body, name=name, daemon=True)
    try:
        thread.start()
        finished.wait()
    except BaseException:
        if stop is not None:
            stop.set()
            stop.stuck = stop.stuck or not _outwait(thread, finished, STOP_WAIT)
        raise
    if "error" in box:
        raise box["error"]
    result: _T = box["result"]
    return result


def _outwait(thread: threading.Thread, finished: threading.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``thread`` to set ``finished``, through further interrupts.

    Used only while an interrupt is already on its way to the caller: a
    second Ctrl-C must not cut short the wait that keeps buffers allocated
    until their copies are over.  ``finished`` rather than ``join``: a
    ``join`` cut short by KeyboardInterrupt can mark a running thread as
    stopped (CPython 3.11), and ``is_alive`` would then lie.
    """
    if thread.ident is None:  # never started
        return True
    deadline = time.monotonic() + seconds
    while not finished.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            finished.wait(min(left, 0.05))
        except KeyboardInterrupt:
            continue
    return True


def _bind_this_thread(cpus: frozenset[int]) -> None:
    """Bind the calling thread (tid 0) to ``cpus``; a refusal is a NumaSyscallError."""
    from .._os import proc as _proc

    _proc.set_thread_affinity(0, cpus)


# ------------------------------------------------------------------ buffers


class _Stopped(Exception):
    """A copy was cut short: its crew or its buffer is closing (never reaches the caller)."""


class _Buffer:
    """An anonymous mapping and its address (for ctypes and move_pages).

    Copying threads hold it in use (:meth:`use`) and check :attr:`closing`
    between chunks; :meth:`close` marks it closing, waits until no thread
    uses it, and only then unmaps it.  A close that is interrupted, or that
    a copy outlasts (:data:`STOP_WAIT`), leaves the mapping in place: a
    leak, never a copy into unmapped memory.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.address = ctypes.addressof(self._anchor)
        self.closing = False
        self._users = 0
        self._gate = threading.Condition()

    @contextlib.contextmanager
    def use(self) -> Iterator[None]:
        with self._gate:
            if self.closing:
                raise _Stopped()
            self._users += 1
        try:
            yield
        finally:
            with self._gate:
                self._users -= 1
                self._gate.notify_all()

    def close(self) -> None:
        with self._gate:
            self.closing = True
            deadline = time.monotonic() + STOP_WAIT
            while self._users and time.monotonic() < deadline:
                self._gate.wait(deadline - time.monotonic())
            if self._users:
                return  # a copy still runs in it: keep the mapping
        del self._anchor
        self.map.close()


def _on_node(node: int, topology: Topology) -> Any:
    """The calling thread allocates on ``node`` inside the block (``memory_on``, MPOL_BIND)."""
    from ..binding.placement import memory_on

    return memory_on(node=node, policy="bind", topology=topology)


def _bind_mapping(buffer: _Buffer, node: int) -> None:
    """``mbind`` the mapping to ``node``: NUMA balancing then leaves its pages there."""
    from .._os import libnuma as _libnuma

    try:
        _libnuma.mbind_range(buffer.address, buffer.size, _libnuma.MPOL_BIND, {node})
    except NumaSyscallError:
        pass  # EPERM under seccomp: memory_on's policy still places it, the placement check tells


@contextlib.contextmanager
def _buffers(node: int, sizes: Sequence[int], topology: Topology) -> Iterator[List[_Buffer]]:
    """Buffers first touched on ``node`` (``ctypes.memset`` inside ``memory_on``)."""
    made: List[_Buffer] = []
    try:
        with _on_node(node, topology):
            for size in sizes:
                buffer = _Buffer(size)
                made.append(buffer)
                _bind_mapping(buffer, node)
                for offset in range(0, size, TOUCH_CHUNK):  # an interrupt lands between chunks
                    ctypes.memset(buffer.address + offset, 1, min(TOUCH_CHUNK, size - offset))
        yield made
    finally:
        for buffer in made:
            buffer.close()


def placement(
    address: int, length: int, wanted: int, samples: int = PLACEMENT_SAMPLES
) -> Placement:
    """Where ``samples`` evenly spaced pages of ``[address, address + length)`` are.

    ``move_pages`` with no target nodes only reports; it moves nothing.
    """
    from .._os import libnuma as _libnuma

    first = address - address % PAGE
    count = max(1, (address + length - first + PAGE - 1) // PAGE)
    step = max(1, count // max(1, samples), -(-count // _libnuma.MOVE_PAGES_CHUNK))
    _, status = _libnuma.move_pages_status([first + i * PAGE for i in range(0, count, step)])
    return Placement(wanted, dict(Counter(int(s) for s in status)))


# ---------------------------------------------------------------- the LLC


def llc_bytes(cpus: Sequence[int], sysfs_root: str = "/sys") -> Optional[int]:
    """Sum of the distinct last-level caches the CPUs share, from sysfs; None if unknown.

    Each CPU's highest-level data or unified cache is read
    (``cpuN/cache/indexM/{level,type,size,shared_cpu_list}``); caches shared
    by several of ``cpus`` count once.
    """
    from .._os.sysfs import SysfsReader

    reader = SysfsReader(sysfs_root)
    covered: set[int] = set()
    total = 0
    for cpu in sorted(cpus):
        if cpu in covered:
            continue
        found = _cpu_llc(reader, cpu)
        if found is None:
            continue
        size, shared = found
        covered |= shared | {cpu}
        total += size
    return total or None


def _cpu_llc(reader: Any, cpu: int) -> Optional[Tuple[int, frozenset[int]]]:
    """(size, shared CPUs) of one CPU's highest data/unified cache level."""
    base = ("devices", "system", "cpu", f"cpu{cpu}", "cache")
    best: Optional[Tuple[int, int, frozenset[int]]] = None
    for name in reader.listdir(*base) or ():
        if not name.startswith("index"):
            continue
        level = reader.integer(*base, name, "level", required=False)
        kind = (reader.text(*base, name, "type", required=False) or "").strip()
        size = _size(reader.text(*base, name, "size", required=False))
        if level is None or size is None or kind == "Instruction":
            continue
        shared = reader.cpulist(*base, name, "shared_cpu_list", required=False) or frozenset()
        if best is None or (level, size) > best[:2]:
            best = (level, size, shared)
    return None if best is None else (best[1], best[2])


def _size(text: Optional[str]) -> Optional[int]:
    """sysfs cache sizes: ``32768K``, ``1M``, ``512`` -> bytes."""
    if text is None:
        return None
    value = text.strip().upper().rstrip("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1:], 1)
    digits = value[:-1] if value[-1:] in "KMG" else value
    return int(digits) * scale if digits.isdigit() else None


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
    nodes: Sequence[int], sysfs_root: str = "/sys", meminfo: str = "/proc/meminfo"
) -> Dict[int, Optional[int]]:
    """Bytes the kernel can give on each node; None where unknown.

    Per node (``nodeN/meminfo``): ``MemFree`` plus half of the file pages
    and the reclaimable slab (the kernel keeps part of them; half is on the
    safe side), at most the system's ``MemAvailable``.  A node without a
    readable meminfo gets ``MemAvailable`` when it is the only node given.
    """
    from .._os.sysfs import SysfsReader

    reader = SysfsReader(sysfs_root)
    system = _meminfo_field(meminfo, "MemAvailable")
    found: Dict[int, Optional[int]] = {}
    for node in nodes:
        text = reader.text("devices", "system", "node", f"node{node}", "meminfo", required=False)
        fields = _node_meminfo(text or "")
        value: Optional[int] = system if len(nodes) == 1 else None
        if "MemFree" in fields:
            reclaimable = sum(fields.get(name, 0) for name in _NODE_MEMINFO[1:])
            estimate = fields["MemFree"] + reclaimable // 2
            value = estimate if system is None else min(estimate, system)
        found[node] = value
    return found


def _node_meminfo(text: str) -> Dict[str, int]:
    """``Node 0 MemFree:  3194736 kB`` lines -> {"MemFree": bytes}."""
    fields: Dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "Node" and parts[-1] == "kB" and parts[-2].isdigit():
            fields[parts[2].rstrip(":")] = int(parts[-2]) << 10
    return fields


def _meminfo_field(path: str, name: str) -> Optional[int]:
    """One ``Name:  N kB`` field of /proc/meminfo, in bytes; None if absent or unreadable."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) == 3 and parts[0] == f"{name}:" and parts[1].isdigit():
                    return int(parts[1]) << 10
    except OSError:
        return None
    return None


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
        self._job: Tuple[_Buffer, _Buffer, int, int] = (None, None, 0, 0)  # type: ignore[assignment]
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

    def _next_job(self, seen: int) -> Tuple[int, Optional[Tuple[_Buffer, _Buffer, int, int]]]:
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
            _bind_this_thread(cpus)
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
            except _Stopped:
                pass
            except BaseException as exc:
                with self._cond:
                    self.errors.append(exc)
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def _copy(self, job: Tuple[_Buffer, _Buffer, int, int], k: int) -> None:
        src, dst, part, passes = job
        with src.use(), dst.use():
            first = k * part
            for _ in range(passes):
                for offset in range(first, first + part, COPY_CHUNK):
                    if self._stopping or src.closing or dst.closing:
                        raise _Stopped()
                    length = min(COPY_CHUNK, first + part - offset)
                    ctypes.memmove(dst.address + offset, src.address + offset, length)

    def round(self, src: _Buffer, dst: _Buffer, passes: int) -> float:
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
    cells: _Cells, buffers: Dict[int, List[_Buffer]], settings: Settings, progress: Progress
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
    cells: _Cells, buffers: Dict[int, List[_Buffer]], settings: Settings, progress: Progress
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
    sysfs_root: str = "/sys",
) -> MemoryMatrix:
    """Bandwidth (and latency) for every allowed CPU node x allowed memory node."""
    plan = _node_plan(topology)
    if not plan.cpu_nodes or not plan.memory_nodes:
        raise PynumabindError(
            "no CPU node with allowed CPUs or no allowed memory node with memory: "
            "nothing to measure"
        )
    llc = max((llc_bytes(sorted(plan.cpus[c]), sysfs_root) or 0) for c in plan.cpu_nodes) or None
    size, skipped, notes = _sizes(plan, settings, llc, sysfs_root)
    cells = _Cells(plan)
    cells.skipped.update(skipped)
    overhead: Optional[Spread] = None
    with contextlib.ExitStack() as stack:
        buffers: Dict[int, List[_Buffer]] = {}
        for m in plan.memory_nodes:
            if m in skipped:
                progress(f"memory: node {m} skipped: {skipped[m]}")
                continue
            progress(f"memory: placing 2 x {size >> 20} MiB on memory node {m}")
            try:
                buffers[m] = stack.enter_context(_buffers(m, [size, size], topology))
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


# ---------------------------------------------------------------- firmware


def firmware(topology: Topology, sysfs_root: str = "/sys") -> Firmware:
    """SLIT from the topology, HMAT from ``nodeN/accessK/initiators`` where the kernel shows it."""
    from .._os.sysfs import SysfsReader

    nodes = tuple(sorted(topology.nodes))
    distances = tuple(tuple(topology.distance(a, b) for b in nodes) for a in nodes)
    reader = SysfsReader(sysfs_root)
    entries: List[HmatEntry] = []
    for node in nodes:
        for access in (0, 1):
            entry = _hmat(reader, node, access)
            if entry is not None:
                entries.append(entry)
    note = (
        None
        if entries
        else "the kernel exposes no HMAT attributes here (nodeN/access0/initiators absent)"
    )
    return Firmware(nodes, distances, tuple(entries), note)


def _hmat(reader: Any, node: int, access: int) -> Optional[HmatEntry]:
    base = ("devices", "system", "node", f"node{node}", f"access{access}", "initiators")
    names = reader.listdir(*base)
    if names is None:
        return None
    initiators = tuple(
        sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit())
    )

    def value(name: str) -> Optional[int]:
        return reader.integer(*base, name, required=False)  # type: ignore[no-any-return]

    return HmatEntry(
        node,
        access,
        initiators,
        value("read_bandwidth"),
        value("write_bandwidth"),
        value("read_latency"),
        value("write_latency"),
    )
