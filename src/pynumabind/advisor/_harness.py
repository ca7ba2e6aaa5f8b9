"""The measurement harness of ``advise``: threads bound to a node, buffers placed on one, stopping.

What :mod:`._memory` (the bandwidth and latency matrix) and :mod:`._copies`
(host<->GPU copies) both stand on.  Everything runs in this process, in
fresh threads, so nothing here changes the caller's own binding:

* **Threads on a node.**  :func:`run_bound` runs one call in a fresh thread
  bound to a CPU set (``sched_setaffinity`` of that thread itself, through
  :mod:`pynumabind._os.proc`: the caller's mask never changes);
  :func:`bind_this_thread` binds a thread a measurement starts itself.
* **Placement.**  Buffers (:class:`Buffer`, :func:`buffers_on`) are
  anonymous mappings first touched by the calling thread inside
  :func:`pynumabind.memory_on` (``MPOL_BIND`` to the memory node,
  :func:`on_node`), which restores the thread's policy afterwards.  Each
  mapping is also bound itself (``mbind``, ``MPOL_BIND``) before it is
  touched: the copying threads run under the default policy, and automatic
  NUMA balancing moves pages of a mapping without a policy of its own
  towards the node of the threads touching them, so a remote cell's buffer
  would drift to the CPU node mid-measurement (seen in the QEMU guest).
  Where ``mbind`` is refused (a seccomp profile) the thread's policy alone
  places them.  A buffer for weighted interleave (:func:`weighted_buffers`)
  is placed before its first touch by :func:`pynumabind.bind_memory` itself
  with the weights (its runs, each bound to one node: the placement a
  caller's buffer gets), then touched.  Where each buffer really landed is then asked of the kernel
  (:func:`placement`: ``move_pages`` on up to :data:`PLACEMENT_SAMPLES`
  evenly spaced pages) and reported beside the number: a measurement whose
  buffer is not where it should be says so.  The buffers live for seconds,
  long enough for automatic NUMA balancing to mark their pages for a
  hinting fault, and Linux 6.1 to 6.4's ``move_pages`` then reports them as
  not present: a sampled page it misses is looked up in the page table
  (:func:`pynumabind._os.pages.locate`, which faults nothing in: its node
  from its frame, to ``CAP_SYS_ADMIN``), and when some still have no node,
  the buffer's pages per node are read from ``/proc/self/numa_maps`` (a
  whole mapping of its own; then the placement counts every page of it, not
  a sample).  A sampled page left without a node keeps ``move_pages``'
  status: it counts against the buffer, never for it.
* **Interrupts.**  Ctrl-C (KeyboardInterrupt) reaches the caller within
  milliseconds, wherever it lands: the main thread never waits on a
  barrier or a long timeout, only on conditions a signal interrupts; a
  measuring thread checks a :class:`Stop` between its steps and ends with
  :class:`Stopped`; the first touch is cut into :data:`TOUCH_CHUNK` pieces.
  A buffer is never unmapped under a running copy (that is a segfault, not
  an exception): each buffer counts the threads using it and is unmapped
  only when none is, and an interrupted or outlasted close
  (:data:`STOP_WAIT`) leaves the mapping in place instead.

Nothing here runs a shell, a subprocess or a compiler.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import threading
import time
from collections import Counter
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

from ..errors import NumaSyscallError, PynumabindError
from ..model import Topology
from ..records.values import Placement

__all__ = [
    "PAGE",
    "PLACEMENT_SAMPLES",
    "STOP_WAIT",
    "TOUCH_CHUNK",
    "Buffer",
    "Stop",
    "Stopped",
    "bind_this_thread",
    "buffers_on",
    "on_node",
    "placement",
    "run_bound",
]

PLACEMENT_SAMPLES = 1024
PAGE = mmap.PAGESIZE
STOP_WAIT = 5.0  # seconds an interrupted measurement waits for its threads to end
TOUCH_CHUNK = 64 << 20  # bytes per first-touch memset

_T = TypeVar("_T")


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
            bind_this_thread(cpus)
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


def bind_this_thread(cpus: frozenset[int]) -> None:
    """Bind the calling thread (tid 0) to ``cpus``; a refusal is a NumaSyscallError."""
    from .._os import proc as _proc

    _proc.set_thread_affinity(0, cpus)


# ------------------------------------------------------------------ buffers


class Stopped(Exception):
    """A copy was cut short: its crew or its buffer is closing (never reaches the caller)."""


class Buffer:
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
                raise Stopped()
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


def on_node(node: int, topology: Topology) -> Any:
    """The calling thread allocates on ``node`` inside the block (``memory_on``, MPOL_BIND)."""
    from ..binding.placement import memory_on

    return memory_on(node=node, policy="bind", topology=topology)


def _bind_mapping(buffer: Buffer, node: int) -> None:
    """``mbind`` the mapping to ``node``: NUMA balancing then leaves its pages there."""
    from .._os import libnuma as _libnuma

    try:
        _libnuma.mbind_range(buffer.address, buffer.size, _libnuma.MPOL_BIND, {node})
    except NumaSyscallError:
        pass  # EPERM under seccomp: memory_on's policy still places it, the placement check tells


def _touch(buffer: Buffer, size: int) -> None:
    """Write every page of ``buffer``, a chunk at a time (an interrupt lands between chunks)."""
    for offset in range(0, size, TOUCH_CHUNK):
        ctypes.memset(buffer.address + offset, 1, min(TOUCH_CHUNK, size - offset))


@contextlib.contextmanager
def buffers_on(node: int, sizes: Sequence[int], topology: Topology) -> Iterator[List[Buffer]]:
    """Buffers first touched on ``node`` (``ctypes.memset`` inside ``memory_on``)."""
    made: List[Buffer] = []
    try:
        with on_node(node, topology):
            for size in sizes:
                buffer = Buffer(size)
                made.append(buffer)
                _bind_mapping(buffer, node)
                _touch(buffer, size)
        yield made
    finally:
        for buffer in made:
            buffer.close()


@contextlib.contextmanager
def weighted_buffers(
    weights: Dict[int, int], sizes: Sequence[int], topology: Topology
) -> Iterator[List[Buffer]]:
    """Buffers laid out by ``weights`` as :func:`pynumabind.bind_memory` lays one, then touched."""
    from ..binding.placement import bind_memory

    made: List[Buffer] = []
    try:
        for size in sizes:
            buffer = Buffer(size)
            made.append(buffer)
            bind_memory(
                (buffer.address, size),
                policy="weighted-interleave",
                weights=weights,
                move=False,
                topology=topology,
            )
            _touch(buffer, size)
        yield made
    finally:
        for buffer in made:
            buffer.close()


def placement(
    address: int, length: int, wanted: int, samples: int = PLACEMENT_SAMPLES
) -> Placement:
    """Where ``samples`` evenly spaced pages of ``[address, address + length)`` are.

    ``move_pages`` with no target nodes only reports; it moves nothing.  The
    pages it misses are looked up without faulting them in (see the module
    docstring).
    """
    from .._os import libnuma as _libnuma
    from .._os import pages as _pages
    from .._os import proc as _proc

    first = address - address % PAGE
    count = max(1, (address + length - first + PAGE - 1) // PAGE)
    step = max(1, count // max(1, samples), -(-count // _libnuma.MOVE_PAGES_CHUNK))
    sampled = [first + i * PAGE for i in range(0, count, step)]
    _, status = _libnuma.move_pages_status(sampled)
    located = _pages.locate(sampled, status).status
    if any(_pages.unknown(where) for where in located):
        try:
            whole = _proc.mapping_node_pages(first, first + count * PAGE)
        except PynumabindError:
            whole = None
        if whole:
            return Placement(wanted, whole)
        located = tuple(was if _pages.unknown(now) else now for was, now in zip(status, located))
    return Placement(wanted, dict(Counter(int(s) for s in located)))
