"""CPU affinity for every thread of this process, not just the caller.

``sched_setaffinity(0, ...)`` (what ``numactl``-less Python code usually
does) changes only the calling thread.  Thread pools that started before the
bind -- OpenMP, torch intra-op workers, gRPC pollers -- keep running anywhere.
Linux accepts a thread id in place of a pid, so this module walks
``/proc/self/task`` and sets each thread's mask.  Every read and the
``sched_setaffinity`` call itself go through :mod:`.proc`, which says
"exited" with a value and any other failure with a typed error; this module
catches no ``OSError``.

A thread counts as *not deliberately pinned* when its mask equals the
caller's mask before binding; any other thread was pinned by someone on
purpose and is left alone (and reported).  The walk is repeated until a pass
finds no thread it has not seen (bounded), so threads spawned while we bind
are caught too; when threads keep appearing the walk stops after a bounded
number of passes and time, and says it did not converge.  Threads may exit
at any moment: ESRCH/ENOENT means "exited", not failure.

Any other failure (EINVAL: the cpuset forbids every wanted CPU; EPERM: a
seccomp filter) rolls back the threads already changed and raises
:class:`ThreadAffinityError`, so the process is never left half-bound.
"""

from __future__ import annotations

import enum
import errno
import threading
import time

from .._record import record
from .._text import format_ids
from ..cpulist import format_cpulist
from ..errors import NumaSyscallError
from . import proc as _proc

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Dict, List, Optional, Tuple

__all__ = [
    "ThreadAction",
    "ThreadAffinityError",
    "ThreadResult",
    "ThreadScan",
    "bind_threads",
    "restore_threads",
]

DEFAULT_MAX_PASSES = 8
DEFAULT_TIME_LIMIT = 1.0  # seconds; no new pass starts after this


class ThreadAction(str, enum.Enum):
    """What the binder did to one thread."""

    BOUND = "bound"  # its mask is now the plan's CPUs
    LEFT_PINNED = "left-pinned"  # pinned elsewhere before the call; untouched
    EXITED = "exited"  # exited while we were looking at it


@record(frozen=True)
class ThreadResult:
    """One thread's affinity before and after binding.

    ``before``/``after`` are ``None`` when the thread was gone before they
    could be read.
    """

    tid: int
    name: str
    before: Optional[frozenset[int]]
    after: Optional[frozenset[int]]
    action: ThreadAction

    def __init__(
        self,
        tid: int,
        name: str,
        before: Optional[frozenset[int]],
        after: Optional[frozenset[int]],
        action: ThreadAction,
    ) -> None:
        self.__dict__.update(tid=tid, name=name, before=before, after=after, action=action)

    def to_dict(self) -> Dict[str, object]:
        return {
            "tid": self.tid,
            "name": self.name,
            "before": None if self.before is None else format_cpulist(self.before),
            "after": None if self.after is None else format_cpulist(self.after),
            "action": self.action.value,
        }


class ThreadAffinityError(NumaSyscallError):
    """Setting a thread's affinity failed for a reason other than its exit.

    Raised after every thread this call changed was put back.  ``tid`` is the
    thread that failed, ``wanted`` the CPUs asked for, ``rolled_back`` the
    threads restored, ``restore_failures`` those that could not be.  A
    :class:`~pynumabind.errors.NumaSyscallError` (so a
    :class:`~pynumabind.errors.PynumabindError` and an ``OSError`` carrying
    ``errno``).
    """

    def __init__(
        self,
        err: int,
        tid: int,
        wanted: frozenset[int],
        rolled_back: Tuple[int, ...],
        restore_failures: Tuple[int, ...],
    ) -> None:
        super().__init__(err, f"sched_setaffinity(thread {tid}, CPUs {format_ids(wanted)})")
        self.tid = tid
        self.wanted = wanted
        self.rolled_back = rolled_back
        self.restore_failures = restore_failures


def restore_threads(masks: Dict[int, frozenset[int]]) -> Tuple[List[int], List[int]]:
    """Put each thread back on its mask.  Returns (restored, failed) tids.

    Threads that exited meanwhile count as restored: nothing is left to undo.
    """
    restored: List[int] = []
    failed: List[int] = []
    for tid, mask in masks.items():
        try:
            _proc.set_thread_affinity(tid, mask)
        except NumaSyscallError:
            failed.append(tid)
            continue
        restored.append(tid)
    return restored, failed


def _roll_back(changed: Dict[int, frozenset[int]]) -> Tuple[List[int], List[int]]:
    """Restore ``changed`` and forget the threads put back; (restored, failed) tids."""
    restored, failed = restore_threads(changed)
    for tid in restored:
        changed.pop(tid, None)
    return restored, failed


@record(frozen=True)
class ThreadScan:
    """Result of :func:`bind_threads`.

    ``converged`` is False when new threads were still appearing after the
    last allowed pass (something spawning threads as fast as we bind them);
    threads started by already-bound threads inherit ``cpus`` anyway.
    """

    results: Tuple[ThreadResult, ...]
    passes: int
    converged: bool

    def __init__(self, results: Tuple[ThreadResult, ...], passes: int, converged: bool) -> None:
        self.__dict__.update(results=results, passes=passes, converged=converged)

    def changed(self) -> Dict[int, frozenset[int]]:
        """tid -> previous mask, for every thread whose mask this scan changed."""
        return {
            r.tid: r.before
            for r in self.results
            if r.action is ThreadAction.BOUND and r.before is not None and r.before != r.after
        }


class _Scan:
    """One :func:`bind_threads` call's state: what each thread got, and the undo journal."""

    def __init__(
        self,
        cpus: frozenset[int],
        reference: Optional[frozenset[int]],
        changed: Dict[int, frozenset[int]],
    ) -> None:
        self.cpus = cpus
        self.reference = reference
        self.caller = threading.get_native_id()
        self.results: Dict[int, ThreadResult] = {}
        self.changed = changed  # tid -> mask before we changed it

    def handle(self, tid: int) -> None:
        before: Optional[frozenset[int]]
        if tid == self.caller:
            before = _proc.process_affinity()
        else:
            before = _proc.thread_affinity(tid)
        name = _proc.thread_name(tid)
        if before is None:
            self.results[tid] = ThreadResult(tid, name, None, None, ThreadAction.EXITED)
            return
        if before not in (self.reference, self.cpus):
            self.results[tid] = ThreadResult(tid, name, before, before, ThreadAction.LEFT_PINNED)
            return
        if before != self.cpus and not self._set(tid, before):
            self.results[tid] = ThreadResult(tid, name, before, None, ThreadAction.EXITED)
            return
        # Read back: the kernel silently drops CPUs outside the cpuset.
        after = _proc.thread_affinity(tid)
        action = ThreadAction.BOUND if after is not None else ThreadAction.EXITED
        self.results[tid] = ThreadResult(tid, name, before, after, action)

    def run(self, max_passes: int, give_up: float, listed: Optional[List[int]]) -> Tuple[int, bool]:
        """The caller, then passes over the threads listed; (passes, converged).

        ``listed`` (the caller's listing) serves the first pass; the scan
        ends only on a listing of its own that finds no thread not seen.
        """
        results = self.results
        passes = 0
        self.handle(self.caller)
        while passes < max_passes and (passes == 0 or time.monotonic() < give_up):
            given, listed = listed, None  # the caller's listing serves the first pass only
            tids = _proc.list_thread_ids() if given is None else given
            fresh = [tid for tid in tids if tid not in results]
            if not fresh:
                if given is not None:
                    continue  # not a pass: the scan ends on a listing of its own
                return passes, True
            passes += 1
            for tid in fresh:
                self.handle(tid)
        return passes, False

    def _set(self, tid: int, before: frozenset[int]) -> bool:
        """Change one mask, journalled first; False when the thread exited."""
        self.changed[tid] = before  # recorded first: an interrupt cannot lose the change
        try:
            alive = _proc.set_thread_affinity(tid, self.cpus)
        except NumaSyscallError as exc:
            del self.changed[tid]
            restored, failed = _roll_back(self.changed)
            raise ThreadAffinityError(
                exc.errno or errno.EINVAL, tid, self.cpus, tuple(restored), tuple(failed)
            ) from exc
        if not alive:
            del self.changed[tid]
        return alive


def bind_threads(
    cpus: frozenset[int],
    *,
    reference: Optional[frozenset[int]] = None,
    max_passes: int = DEFAULT_MAX_PASSES,
    record: Optional[Dict[int, frozenset[int]]] = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    listed: Optional[List[int]] = None,
) -> ThreadScan:
    """Set ``cpus`` as the affinity of every thread that is not pinned elsewhere.

    ``reference`` is the mask that means "not deliberately pinned"; it
    defaults to the calling thread's mask before the call.  The calling thread
    is bound first, so threads it starts while we scan inherit ``cpus``.  A
    thread already on exactly ``cpus`` counts as bound (nothing to change).

    The rescan stops after ``max_passes`` passes or once ``time_limit``
    seconds have gone by (a pass in progress finishes), whichever comes
    first; the scan then says it did not converge.

    ``record`` (tid -> mask before) receives each thread's previous mask
    *before* its mask is changed, so a caller's undo journal holds every
    change even if an exception interrupts this call at any point; entries
    this call rolls back itself are removed again.

    ``listed`` is the caller's own listing of ``/proc/self/task``, made
    just before this call (a bind lists the threads alive before it changes
    anything, for its undo journal): the first pass takes its threads
    instead of listing again.  Every later pass lists afresh, so a thread
    started after that listing is found by the next one; and the scan ends
    only on a listing made here, after the calling thread was bound, that
    finds no thread it has not seen (never on ``listed``).

    Raises :class:`ThreadAffinityError` after rolling back on any failure
    other than a thread's exit.
    """
    if not cpus:
        raise ValueError("cannot bind threads to an empty CPU set")
    if max_passes < 1:
        raise ValueError("max_passes must be at least 1")
    if reference is None:
        reference = _proc.process_affinity()
    scan = _Scan(cpus, reference, {} if record is None else record)
    try:
        passes, converged = scan.run(max_passes, time.monotonic() + time_limit, listed)
    except ThreadAffinityError:
        raise  # already rolled back
    except BaseException:
        _roll_back(scan.changed)  # KeyboardInterrupt, a /proc read error...: never half-bound
        raise
    ordered = tuple(sorted(scan.results.values(), key=lambda r: r.tid))
    return ThreadScan(ordered, passes, converged)
