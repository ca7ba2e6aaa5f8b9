"""The steps that apply a plan, and the journal that undoes them.

:func:`~pynumabind.binding.apply_plan` runs three steps in order -- CPUs
(every thread), memory policy (the calling thread), page migration -- in
threadpoolctl's snapshot -> apply -> restore style:

* Each step reads what it is about to change and writes an undo record into
  the :class:`Journal` *before* it makes the change (a record for a change
  that then fails or never happens undoes nothing harmful: it puts back
  what is already there).  So an exception at any point -- including an
  asynchronous one such as ``KeyboardInterrupt`` -- finds in the journal
  everything that may have changed, and :meth:`Journal.rollback` puts it
  back.  Each record is undone at most once.
* A step returns its outcome; a failure that ``on_error`` may tolerate (the
  memory policy, migration) comes back as a value, and the caller decides in
  one place whether it becomes a :class:`Skipped` or a rollback and a
  :class:`~pynumabind.errors.BindError`.  A failure on the CPU side is
  always an error: the CPU step raises, and the journal is rolled back.
* Migration has no undo: pages moved onto the plan's nodes stay there.

:meth:`Binding.restore() <pynumabind.binding.Binding.restore>` replays the
journal.  The journal knows the process (pid) and thread that made it: the
memory policy is that thread's own, and thread ids mean nothing in another
process.  Thread ids mean nothing after the thread is gone either: the
kernel hands them out again, to any process.  So each thread's start time is
journalled with its mask, and a thread is changed back only while it is
still under ``/proc/self/task`` with that start time; the ones that exited
are left alone and listed, since their ids may already name another thread.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import weakref

from .._mempolicy import POLICIES
from .._os import libnuma as _libnuma
from .._os import proc as _proc
from .._os import threads as _threads
from .._record import record as _record
from .._record import replace
from .._text import format_ids, named
from ..errors import (
    BindError,
    LibnumaUnavailableError,
    NumaSyscallError,
    PlanError,
    PynumabindError,
)
from ..model import Plan

# typing is for type checkers only: a bind loads none of it (see pynumabind._record).
TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

__all__ = [
    "CpuUndo",
    "Journal",
    "MigrationOutcome",
    "PolicyRequest",
    "PolicyUndo",
    "Skipped",
    "ThreadChurn",
    "ThreadMasks",
    "allowed_mems_for",
    "bind_cpus",
    "cpu_error",
    "fix_for",
    "migrate_pages",
    "policy_request",
    "read_back_policy",
    "set_policy",
    "threads_keeping_policy",
    "write_system_weights",
]

_SECCOMP_FIX = (
    "EPERM from a memory-policy syscall usually means a container seccomp profile: Docker's "
    "default profile allows set_mempolicy, get_mempolicy and mbind only to containers with "
    "CAP_SYS_NICE; fix: run the container with '--cap-add SYS_NICE' (Kubernetes: "
    "securityContext.capabilities.add: [SYS_NICE]) or with a seccomp profile that allows "
    "set_mempolicy, get_mempolicy, mbind, migrate_pages and move_pages"
)
#: The step that writes the kernel's weights (``set_system_weights=True``), as skips name it.
SYSTEM_WEIGHTS = "system interleave weights"
_WEIGHTS_ROOT_FIX = (
    "writing the kernel's interleave weights needs root: they are system-wide, every "
    "process's weighted interleave follows them; run as root, have an administrator set "
    "them, or place buffers with bind_memory(weights=...), which needs no system weights"
)
_WEIGHTS_FIXES = {
    errno.EACCES: _WEIGHTS_ROOT_FIX,
    errno.EPERM: _WEIGHTS_ROOT_FIX,
    errno.EROFS: "sysfs is mounted read-only here (a container); set the weights on the host",
    errno.ENOENT: "this kernel shows no weight for one of these nodes (Linux < 6.9, or a node "
    "without memory)",
    errno.EINVAL: "the kernel refused the value (weights are 1 to 255)",
}
_SECCOMP_MIGRATE_FIX = (
    "EPERM from migrate_pages usually means a container seccomp profile (Docker's default "
    "profile denies migrate_pages and move_pages even with CAP_SYS_NICE); fix: use a seccomp "
    "profile that allows them, or bind before allocating so nothing needs moving"
)


@_record(frozen=True)
class Skipped:
    """One part of the plan that was not applied, and why.

    ``what`` names the part (``"memory policy"``, ``"page migration"``),
    ``reason`` the error, ``fix`` what a user can do about it, ``errno`` the
    kernel's error number when there was one.
    """

    what: str
    reason: str
    fix: str
    errno: Optional[int] = None

    def __init__(self, what: str, reason: str, fix: str, errno: Optional[int] = None) -> None:
        self.__dict__.update(what=what, reason=reason, fix=fix, errno=errno)

    def __str__(self) -> str:
        return f"{self.what} not applied: {self.reason}; {self.fix}"

    def to_dict(self) -> Dict[str, Any]:
        return {"what": self.what, "reason": self.reason, "fix": self.fix, "errno": self.errno}


class ThreadChurn(Exception):
    """The thread scan gave up while new threads kept appearing."""


_CHURN_FIX = (
    "bind first thing in the worker, before thread pools start (threads that bound threads "
    "start inherit the CPUs); Binding.verify() names any live thread left off the plan"
)


# ------------------------------------------------------------------ journal


class ThreadMasks(dict[int, frozenset[int]]):
    """tid -> mask before the bind, and each thread's start time.

    :func:`~pynumabind._os.threads.bind_threads` sets an entry just before it
    changes that thread's mask; setting it first reads the thread's start
    time (:func:`~pynumabind._os.proc.thread_start_time`) into
    :attr:`starts`.  A tid and its start time name one thread: an id the
    kernel hands out again, to a thread of ours or of another process, comes
    with another start time, or is no longer under ``/proc/self/task``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.starts: Dict[int, Optional[int]] = {}

    def __setitem__(self, tid: int, mask: frozenset[int]) -> None:
        if tid not in self.starts:
            self.starts[tid] = _proc.thread_start_time(tid)
        super().__setitem__(tid, mask)


class CpuUndo:
    """Thread masks to put back.

    ``masks`` (tid -> mask before, with each thread's start time) is filled
    by :func:`~pynumabind._os.threads.bind_threads` before each change.  Threads not in
    it that were alive before the bind (``existing``) were on the bound CPUs
    already and stay so; any other thread found on ``bound`` was started
    after the bind, inherited the bound CPUs, and goes back to ``reference``
    (the caller's mask before).

    Only threads still ours and still the same are changed back: a thread
    whose id is no longer under ``/proc/self/task``, or whose start time
    differs from the one read when it was bound, has exited (its id may now
    name another process's thread) and is left alone; :attr:`exited` lists
    them.
    """

    def __init__(
        self,
        reference: frozenset[int],
        bound: frozenset[int],
        existing: frozenset[int] = frozenset(),
    ) -> None:
        self.reference = reference
        self.bound = bound
        self.existing = existing
        self.masks = ThreadMasks()
        self.exited: List[int] = []

    def undo(self) -> List[str]:
        targets = {tid: (mask, self.masks.starts.get(tid)) for tid, mask in self.masks.items()}
        failures: List[str] = []
        try:
            for tid in _proc.list_thread_ids():
                if tid in targets or tid in self.existing:
                    continue  # changed by the bind, or on these CPUs before it
                if _proc.thread_affinity(tid) == self.bound:
                    targets[tid] = (self.reference, _proc.thread_start_time(tid))
        except PynumabindError as exc:
            failures.append(f"thread scan: {exc}")
        exited, failed = _restore_same_threads(targets)
        self.exited = exited
        failures.extend(f"thread {tid} affinity" for tid in failed)
        return failures


def _restore_same_threads(
    targets: Dict[int, Tuple[frozenset[int], Optional[int]]],
) -> Tuple[List[int], List[int]]:
    """Put each thread that is still the one recorded back on its mask; (exited, failed) tids.

    The start time is read from ``/proc/self/task/T/stat`` right before the
    change, so a tid that left this process (ENOENT) or names a newer thread
    of it (another start time) is skipped.  What is left is the instant
    between that read and ``sched_setaffinity``: for the id to reach another
    process then, the kernel would have to hand out every other id first.
    """
    exited: List[int] = []
    failed: List[int] = []
    for tid, (mask, started) in targets.items():
        try:
            now = _proc.thread_start_time(tid)
            if started is None or now != started or not _proc.set_thread_affinity(tid, mask):
                exited.append(tid)
        except PynumabindError:
            failed.append(tid)
    return exited, failed


class PolicyUndo:
    """The calling thread's memory policy before (``None``: unreadable, so default)."""

    def __init__(self, before: Optional[_libnuma.KernelPolicy]) -> None:
        self.before = before

    def undo(self) -> List[str]:
        try:
            if self.before is None:  # could not be read: default is the usual state
                _libnuma.set_mempolicy(_libnuma.MPOL_DEFAULT)
            else:
                _libnuma.set_mempolicy(self.before.mode, self.before.nodes, self.before.flags)
        except _libnuma.ERRORS as exc:
            return [f"memory policy: {exc}"]
        return []


if TYPE_CHECKING:  # pragma: no cover
    UndoRecord = Union[CpuUndo, PolicyUndo]


class Journal:
    """Undo records of one bind, newest last; the one mutable part of a Binding.

    Journals still in force are kept (weakly, in bind order) in a
    per-process stack (:class:`_Stack`), which defines what restoring one
    means:

    * Restores go in the reverse order of the binds.  A binding is refused
      (:class:`BindError`, nothing changed) while a newer one that changed
      the same things is still in force -- CPU masks, which are
      process-wide, or the memory policy of the same thread.  Unrelated
      bindings (say, two threads each setting only its own policy) restore
      in any order.
    * A journal belongs to the process and thread that made it: in a forked
      child its thread ids name the parent's threads, so restoring there is
      refused; the memory policy can only be put back by its own thread.
    * Each bind and each restore costs the same however many bindings are in
      force (linear in them, keeping or restoring n bindings would be
      quadratic); see :class:`_Stack`.

    The stack is changed only under the fork lock (:mod:`pynumabind._os.forksafe`): by
    :meth:`add`/:meth:`discard` and rollbacks inside a bind, and by
    :meth:`restore`, whose callers hold it.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.thread_id = threading.get_native_id()
        self.records: List[UndoRecord] = []
        self.restored = False
        self.exited: List[int] = []  # threads the rollback left alone: they had exited
        self.lock = threading.Lock()
        self.seq = next(_SEQUENCE)
        self.ref = _STACK.ref(self)

    def add(self, record: UndoRecord) -> None:
        """Record an undo *before* making the change it undoes."""
        self.records.append(record)
        _STACK.push(self, record)

    def discard(self, record: UndoRecord) -> None:
        """Forget a record whose change is known not to have happened."""
        if record in self.records:
            self.records.remove(record)
            _STACK.drop(self, record)

    @property
    def owns_policy(self) -> bool:
        # A loop, not any(genexpr): an interrupt landing in a generator being
        # closed early is printed and dropped ("Exception ignored").
        for record in self.records:
            if isinstance(record, PolicyUndo):
                return True
        return False

    @property
    def owns_cpus(self) -> bool:
        for record in self.records:
            if isinstance(record, CpuUndo):
                return True
        return False

    def rollback(self) -> List[str]:
        """Undo every record, newest first, each once; return what failed."""
        failures: List[str] = []
        while self.records:
            record = self.records[-1]
            failures.extend(record.undo())
            if isinstance(record, CpuUndo):
                self.exited.extend(t for t in record.exited if t not in self.exited)
            self.records.pop()
            _STACK.drop(self, record)
        return failures

    def restore(self) -> List[str]:
        """Roll back once, if this process, thread and stack position allow it."""
        with self.lock:
            if self.restored:
                return []
            self._check_may_restore()
            failures = self.rollback()
            self.restored = True
            return failures

    def _check_may_restore(self) -> None:
        if os.getpid() != self.pid:
            raise BindError(
                f"restore() must run in process {self.pid}, which made the binding (called "
                f"from process {os.getpid()}, a forked child?); nothing was changed"
            )
        if self.owns_policy and threading.get_native_id() != self.thread_id:
            raise BindError(
                f"restore() must run on thread {self.thread_id}, which bound the memory "
                f"policy (called from thread {threading.get_native_id()})"
            )
        newer = _STACK.newer_overlapping(self)
        if newer is not None:
            raise BindError(
                f"a newer binding (made on thread {newer.thread_id}) changed the same "
                f"{'CPU affinity' if self.owns_cpus and newer.owns_cpus else 'memory policy'} "
                "and is still in force; restore it first (restores go in the reverse order "
                "of the binds); nothing was changed"
            )


_SEQUENCE = itertools.count()  # bind order: each journal's ``seq``


class _Stack:
    """The journals in force in this process, indexed by what they changed.

    ``cpus`` maps ``seq`` -> journal for the journals that changed CPU
    masks, ``policy`` a thread id -> (``seq`` -> journal) for those that
    changed that thread's memory policy; dicts keep insertion order, which
    is bind order, so the newest entry of either is its last, found without
    a scan, and a journal leaves from anywhere in O(1).  Entries are weak:
    a binding nobody holds any more cannot be restored and stops counting.
    Its journal's weakref callback only appends to ``collected`` (it may
    run in any thread, at any allocation); the next change of the stack,
    under the fork lock, drops those entries, each once.  So a bind and a
    restore each cost O(1) amortized, whatever the number of bindings in
    force.  A forked child starts with an empty stack: its parent's journals
    are not its own.
    """

    def __init__(self) -> None:
        self.cpus: Dict[int, weakref.ref[Journal]] = {}
        self.policy: Dict[int, Dict[int, weakref.ref[Journal]]] = {}
        self.collected: List[Tuple[int, int]] = []  # (seq, thread id), from weakref callbacks

    def ref(self, journal: Journal) -> weakref.ref[Journal]:
        seq, thread = journal.seq, journal.thread_id
        collected = self.collected
        return weakref.ref(journal, lambda _ref: collected.append((seq, thread)))

    def push(self, journal: Journal, record: UndoRecord) -> None:
        self._sweep()
        if isinstance(record, CpuUndo):
            self.cpus[journal.seq] = journal.ref
        else:
            self.policy.setdefault(journal.thread_id, {})[journal.seq] = journal.ref

    def drop(self, journal: Journal, record: UndoRecord) -> None:
        """``journal`` no longer holds ``record``'s kind of change (when it holds none)."""
        self._sweep()
        if isinstance(record, CpuUndo):
            if not journal.owns_cpus:
                self.cpus.pop(journal.seq, None)
        elif not journal.owns_policy:
            self._forget_policy(journal.seq, journal.thread_id)

    def newer_overlapping(self, journal: Journal) -> Optional[Journal]:
        """The newest journal in force, made after ``journal``, that changed the same things."""
        self._sweep()
        if journal.owns_cpus:
            newest = _newest(self.cpus, cpus=True)
            if newest is not None and newest.seq > journal.seq:
                return newest
        if journal.owns_policy:
            newest = _newest(self.policy.get(journal.thread_id, {}), cpus=False)
            if newest is not None and newest.seq > journal.seq:
                return newest
        return None

    def _forget_policy(self, seq: int, thread: int) -> None:
        journals = self.policy.get(thread)
        if journals is not None:
            journals.pop(seq, None)
            if not journals:
                del self.policy[thread]

    def _sweep(self) -> None:
        """Drop the entries of journals collected since the last change."""
        while self.collected:
            seq, thread = self.collected.pop()
            self.cpus.pop(seq, None)
            self._forget_policy(seq, thread)

    def clear(self) -> None:
        """In a forked child: nothing of the parent's is in force here."""
        self.cpus = {}
        self.policy = {}
        self.collected = []


def _newest(journals: Dict[int, weakref.ref[Journal]], *, cpus: bool) -> Optional[Journal]:
    """The newest journal of ``journals`` still holding that change (CPUs, or a policy).

    Its last entry, but for one just collected or one whose rollback was
    interrupted between undoing the record and leaving the stack.
    """
    for seq in reversed(journals):
        journal = journals[seq]()
        if journal is not None and (journal.owns_cpus if cpus else journal.owns_policy):
            return journal
    return None


_STACK = _Stack()
os.register_at_fork(after_in_child=_STACK.clear)


# -------------------------------------------------------------------- steps


@_record(frozen=True)
class PolicyRequest:
    """The ``MPOL_*`` mode and nodes for a plan (``mode`` None: leave it).

    For weighted interleave, also how its weights take effect: ``kernel_weights``
    (the kernel's system-wide weights for ``nodes``, as read; None where not
    read), ``weights_note`` (which weights the policy follows),
    ``mismatch`` (the requested weights split pages otherwise than the
    kernel's), and ``write_weights`` (the weights to write, with
    ``set_system_weights=True``).
    """

    mode: Optional[int]
    nodes: frozenset[int]
    note: Optional[str] = None
    kernel_weights: Optional[Dict[int, int]] = None
    weights_note: Optional[str] = None
    mismatch: Optional[str] = None
    write_weights: Optional[Dict[int, int]] = None

    def __init__(  # noqa: PLR0917 - positional, as the dataclass's fields
        self,
        mode: Optional[int],
        nodes: frozenset[int],
        note: Optional[str] = None,
        kernel_weights: Optional[Dict[int, int]] = None,
        weights_note: Optional[str] = None,
        mismatch: Optional[str] = None,
        write_weights: Optional[Dict[int, int]] = None,
    ) -> None:
        self.__dict__.update(
            mode=mode,
            nodes=nodes,
            note=note,
            kernel_weights=kernel_weights,
            weights_note=weights_note,
            mismatch=mismatch,
            write_weights=write_weights,
        )


def _kernel_release() -> str:
    from .._os.sysfs import kernel_release

    return kernel_release()


def policy_request(plan: Plan, *, set_system_weights: bool = False) -> PolicyRequest:
    """The MPOL mode and nodes for ``plan``, and a note when they differ from it.

    The policy's row in the policy table says which (see
    :meth:`pynumabind._mempolicy.PolicyRow.kernel_request`): a mode newer
    than the rest is probed first, and its fallback set where the kernel
    lacks it.  Weighted interleave in force reads the kernel's weights
    (:func:`_weighted`).
    """
    row = POLICIES[plan.policy]
    if row.takes_nodes and not plan.mems:
        raise PlanError(
            f"plan for rank {plan.rank} asks for memory policy {plan.policy.value} "
            "but names no memory nodes"
        )
    mode, nodes, note = row.kernel_request(plan.mems, _libnuma.supports_mode, _kernel_release)
    request = PolicyRequest(mode, nodes, note)
    if mode == _libnuma.MPOL_WEIGHTED_INTERLEAVE:
        return _weighted(request, plan.weights, set_system_weights)
    if set_system_weights and row.weighted:
        return replace(
            request,
            weights_note="set_system_weights: nothing written (no weighted interleave here)",
        )
    return request


def _weighted(
    request: PolicyRequest, weights: Optional[Mapping[int, int]], set_system_weights: bool
) -> PolicyRequest:
    """How weighted interleave's weights take effect here: the kernel's, read now.

    A process's (and a thread's) weighted interleave follows the kernel's
    system-wide weights (:mod:`pynumabind._os.weights`): without requested
    weights that is a note saying which; with them, a ``mismatch`` when they
    split pages otherwise, unless ``set_system_weights`` is to write them.
    """
    from .._os import weights as _system
    from .._weights import format_weights, kernel_difference

    nodes = request.nodes
    try:
        found = _system.read_weights()
    except PynumabindError as exc:
        return replace(request, weights_note=f"the kernel's interleave weights unreadable: {exc}")
    if set_system_weights and weights is not None:
        kernel = None if found is None else found.for_nodes(nodes)
        return replace(request, kernel_weights=kernel, write_weights=dict(weights))
    if found is None:
        return replace(
            request,
            weights_note="the kernel shows no interleave weights (no weighted_interleave in "
            "sysfs): it uses 1 for every node",
        )
    kernel = found.for_nodes(nodes)
    note = (
        f"weighted interleave over {named('node', nodes)} follows {found.described()}: "
        f"{format_weights(kernel)}"
    )
    difference = None if weights is None else kernel_difference(weights, kernel)
    mismatch = None
    if difference is not None:
        mismatch = (
            f"{difference}: a process's (or a thread's) weighted interleave follows the kernel's "
            "(Linux has no per-task weights); set them with set_system_weights=True "
            "(--set-system-weights; root, and it changes every process on the machine), or "
            "place buffers with bind_memory(weights=...), which honours weights exactly"
        )
    return replace(request, kernel_weights=kernel, weights_note=note, mismatch=mismatch)


def write_system_weights(
    request: PolicyRequest,
) -> Tuple[Optional[Exception], Optional[str], Optional[Dict[int, int]]]:
    """Step 4, ``set_system_weights=True``: the kernel's weights; (failure, note, weights before).

    The last step: nothing after it can fail and roll the bind back, and
    :meth:`Binding.restore() <pynumabind.binding.Binding.restore>` leaves the
    weights as written (they are the machine's, and the job's other processes
    follow them too).  A failed write puts back what it wrote
    (:func:`pynumabind._os.weights.write_weights`).
    """
    from .._os import weights as _system
    from .._weights import format_weights

    wanted = request.write_weights
    assert wanted is not None
    try:
        before = _system.write_weights(wanted)
    except NumaSyscallError as exc:
        return exc, None, None
    was = before.for_nodes(frozenset(wanted))
    auto = "; the kernel's auto mode is now off" if before.auto else ""
    note = (
        f"set the kernel's system-wide interleave weights of {named('node', frozenset(wanted))} "
        f"to {format_weights(wanted)} (were {format_weights(was)}){auto}: every process's "
        "weighted interleave on this machine follows them; restore() leaves them as set "
        "(Binding.system_weights_before holds what they were)"
    )
    return None, note, was


def bind_cpus(
    wanted: frozenset[int], before: frozenset[int], journal: Journal
) -> _threads.ThreadScan:
    """Step 1: every thread not pinned elsewhere onto ``wanted``; all or nothing.

    Raises :class:`BindError` (with nothing changed) when the CPUs are not
    allowed, the kernel refuses, or it narrows a thread's mask.
    """
    if not wanted <= before:
        raise _cpu_failure(
            wanted, before, f"CPUs {format_ids(wanted - before)} are not allowed here"
        )
    try:
        # Threads on exactly ``wanted`` already are left so by restore();
        # ones started from here on that inherit it are not.  The scan's
        # first pass takes this listing: /proc/self/task is read once less.
        listed = _proc.list_thread_ids()
        record = CpuUndo(before, wanted, frozenset(listed))
        journal.add(record)
        scan = _threads.bind_threads(wanted, reference=before, record=record.masks, listed=listed)
    except _threads.ThreadAffinityError as exc:
        raise _refused(exc, wanted, before) from exc
    except PynumabindError as exc:  # /proc/self/task unreadable; bind_threads rolled back
        detail = f"cannot read this process's threads ({exc})"
        raise _cpu_failure(wanted, before, detail) from exc
    problem = _scan_problem(scan, wanted, journal.thread_id)
    if problem is not None:
        journal.rollback()
        raise _cpu_failure(wanted, before, problem)
    return scan


def _scan_problem(
    scan: _threads.ThreadScan, wanted: frozenset[int], caller_tid: int
) -> Optional[str]:
    """Why a finished scan is no binding: the caller unbound, or a thread narrowed."""
    caller = [r for r in scan.results if r.tid == caller_tid]
    if not caller or caller[0].action is not _threads.ThreadAction.BOUND:
        mask = caller[0].before if caller else None
        return (
            f"the calling thread's own mask changed to {format_ids(mask)} while binding "
            "(another thread binding at the same time?); a worker whose own thread is "
            "unbound is not bound"
        )
    for result in scan.results:
        if result.action is _threads.ThreadAction.BOUND and result.after != wanted:
            got = result.after or frozenset()
            return f"the kernel narrowed thread {result.tid} to {format_ids(got)}"
    return None


def _refused(
    exc: _threads.ThreadAffinityError, wanted: frozenset[int], before: frozenset[int]
) -> BindError:
    reason = "the kernel refused" + (
        " (EINVAL: none of them is in this process's cpuset)"
        if exc.errno == errno.EINVAL
        else f" ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
    )
    if exc.errno == errno.EPERM:
        # EPERM is about permission, not about which CPUs: widening the
        # cpuset would not help (that is EINVAL).
        error = BindError(
            f"cannot bind to CPUs {format_ids(wanted)}: {os.strerror(errno.EPERM)}: the kernel "
            "refused with EPERM, which means the thread belongs to another user, or changing "
            "it needs CAP_SYS_NICE, or a seccomp/LSM policy denies sched_setaffinity (not that "
            "the CPUs are outside the cpuset); nothing was changed. Run the worker as the user "
            "that owns all its threads, or allow sched_setaffinity in the container"
        )
    else:
        error = _cpu_failure(wanted, before, reason)
    if exc.restore_failures:
        error = BindError(
            f"{error}; WARNING: threads {list(exc.restore_failures)} could not be restored"
        )
    return error


def set_policy(request: PolicyRequest, journal: Journal) -> Optional[Exception]:
    """Step 2: the calling thread's memory policy.  Returns the failure, if any."""
    assert request.mode is not None
    try:
        before: Optional[_libnuma.KernelPolicy] = _libnuma.get_mempolicy()
    except _libnuma.ERRORS:
        before = None
    record = PolicyUndo(before)
    journal.add(record)
    try:
        _libnuma.set_mempolicy(request.mode, request.nodes)
    except _libnuma.ERRORS as exc:
        journal.discard(record)
        return exc
    return None


@_record(frozen=True)
class MigrationOutcome:
    """Step 3's outcome: pages the kernel could not move, or why it did not run."""

    migrated: bool = False
    pages_not_moved: Optional[int] = None
    failure: Optional[Exception] = None
    note: Optional[str] = None

    def __init__(
        self,
        migrated: bool = False,
        pages_not_moved: Optional[int] = None,
        failure: Optional[Exception] = None,
        note: Optional[str] = None,
    ) -> None:
        self.__dict__.update(
            migrated=migrated, pages_not_moved=pages_not_moved, failure=failure, note=note
        )


def migrate_pages(plan: Plan) -> MigrationOutcome:
    """Step 3: move pages already allocated onto the plan's nodes (no undo)."""
    if not plan.mems:
        return MigrationOutcome(note=f"migrate ignored: policy {plan.policy.value} names no nodes")
    try:
        allowed = _proc.mems_allowed()
        source = (allowed - plan.mems) or allowed
        return MigrationOutcome(True, _libnuma.migrate_pages(0, source, plan.mems))
    except _libnuma.ERRORS as exc:
        return MigrationOutcome(failure=exc)


# ---------------------------------------------------------------- read back


def threads_keeping_policy(scan: Optional[_threads.ThreadScan], caller: int) -> Tuple[int, ...]:
    """Threads other than the caller that existed at bind time (they keep their policy)."""
    if scan is not None:  # the scan just listed every thread
        return tuple(
            r.tid
            for r in scan.results
            if r.tid != caller and r.action is not _threads.ThreadAction.EXITED
        )
    try:
        return tuple(t for t in _proc.list_thread_ids() if t != caller)
    except PynumabindError:
        return ()


def read_back_policy(
    request: PolicyRequest, applied: bool
) -> Tuple[Optional[_libnuma.KernelPolicy], Optional[str]]:
    """The calling thread's policy now, and a note when it is not what was set."""
    try:
        now = _libnuma.get_mempolicy()
    except _libnuma.ERRORS as exc:
        return None, f"memory policy could not be read back: {exc}"
    if applied and (now.mode != request.mode or (request.nodes and now.nodes != request.nodes)):
        return now, (
            f"memory policy reads back as {now.kernel_policy} on {format_ids(now.nodes)}, "
            f"requested {_libnuma.MODE_NAMES.get(request.mode or 0)} on "
            f"{format_ids(request.nodes)}"
        )
    return now, None


# ------------------------------------------------------------------- errors
#
# Facts first, then words: the readers below run syscalls and return values;
# fix_for and cpu_error only format the values they are given.


def allowed_mems_for(exc: BaseException) -> Optional[frozenset[int]]:
    """The allowed memory nodes, read now, when ``exc`` is about them (EINVAL); else None."""
    if getattr(exc, "errno", None) != errno.EINVAL or isinstance(exc, ThreadChurn):
        return None
    try:
        return _proc.mems_allowed()
    except _libnuma.ERRORS:
        return None


def fix_for(exc: BaseException, what: str, allowed_mems: Optional[frozenset[int]] = None) -> str:
    """What a user can do about a failed step (memory policy, migration, thread churn).

    ``allowed_mems`` (from :func:`allowed_mems_for`; ``None``: unknown) is
    named when the step asked for nodes outside them.
    """
    err = getattr(exc, "errno", None)
    if isinstance(exc, ThreadChurn):
        return _CHURN_FIX
    if what == SYSTEM_WEIGHTS:
        return _WEIGHTS_FIXES.get(err or 0, "see the error")
    if isinstance(exc, LibnumaUnavailableError):
        return "install the libnuma runtime package (see the error)"
    if err == errno.EPERM:
        return _SECCOMP_MIGRATE_FIX if what == "page migration" else _SECCOMP_FIX
    if err == errno.ENOSYS:
        return "the kernel lacks NUMA support (CONFIG_NUMA) or a filter returns ENOSYS"
    if err == errno.EINVAL:
        allowed = "unknown" if allowed_mems is None else format_ids(allowed_mems)
        return (
            f"the {what} names nodes outside this process's allowed memory nodes "
            f"({allowed}, its cpuset.mems); plan within them"
        )
    return "see the error"


def _cpu_failure(wanted: frozenset[int], before: frozenset[int], detail: str) -> BindError:
    """:func:`cpu_error` with this process's cpuset, read now (best effort)."""
    try:
        found = _proc.cpuset()
    except PynumabindError:
        found = None
    return cpu_error(wanted, before, detail, found)


def cpu_error(
    wanted: frozenset[int],
    before: frozenset[int],
    detail: str,
    cpuset: Optional[Tuple[str, frozenset[int]]] = None,
) -> BindError:
    """The error for CPUs that cannot be bound; nothing was changed.

    ``before`` is the affinity mask, ``cpuset`` the cpuset path and its
    effective CPUs when known (see :func:`pynumabind._os.proc.cpuset`).
    """
    restriction = f"affinity mask {format_ids(before)}"
    if cpuset is not None:
        path, cpus = cpuset
        restriction = f"cpuset {path} allows {format_ids(cpus)}; {restriction}"
    return BindError(
        f"cannot bind to CPUs {format_ids(wanted)}: {detail}; this process may use "
        f"CPUs {format_ids(before)} ({restriction}); nothing was changed. "
        "Plan within the allowed CPUs (pynumabind plans within them when it detects the "
        "topology itself) or widen the cpuset/affinity the launcher gives this worker"
    )
